#!/usr/bin/env bash
# Regenerates amp-bench's part of bench/RESULTS.md (between its two marker lines) and the plots
# beside it: the MLP and the ConvNet at every opt level with bf16 and fp16, against PyTorch in
# the same run, with the op profile. Run on a quiet machine (OpenMP's spinning threads make two
# runs at once meaningless), after `scripts/setup.sh --bench` (torch) and a build.
#
#   bench/regenerate_results.sh   BUILD=build STEPS=20 WARMUP=5 BATCH=128 HALF=bf16,fp16 REPEAT=3
# Each configuration runs REPEAT times alternating with PyTorch's run, the median run kept: on 2
# shared vCPUs one run's step times move by 30 % and more from minute to minute.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
bench=$build/bench/amp-bench
[[ -x $bench ]] || { echo "regenerate_results.sh: $bench not found: build first" >&2; exit 1; }
steps=${STEPS:-20} warmup=${WARMUP:-5} batch=${BATCH:-128} half=${HALF:-bf16,fp16}
repeat=${REPEAT:-3}
out=$(mktemp -d /tmp/amp-bench-results.XXXXXX)
for model in mlp convnet; do
    "$bench" --model "$model" --opt-level O0,O1,O2,O3 --half "$half" --batch "$batch" \
        --steps "$steps" --warmup "$warmup" --repeat "$repeat" --compare-torch --profile \
        --markdown="$out/$model.md" --plot "bench/$model.png"
done
{
    echo "<!-- amp-bench:begin (bench/regenerate_results.sh writes what is between these lines) -->"
    echo
    for model in mlp convnet; do
        echo "### $model (\`amp-bench --model $model --opt-level O0,O1,O2,O3 --half $half --batch $batch --repeat $repeat --compare-torch --profile\`)"
        echo
        cat "$out/$model.md"
        echo
        echo "![$model: samples/s and peak memory per configuration]($model.png)"
        echo
    done
    echo "<!-- amp-bench:end -->"
} >"$out/block.md"
python3 - "$out/block.md" <<'PY'
import re, sys
block = open(sys.argv[1]).read()
text = open("bench/RESULTS.md").read()
pattern = re.compile(r"<!-- amp-bench:begin.*?<!-- amp-bench:end -->\n?", re.S)
if not pattern.search(text):
    sys.exit("regenerate_results.sh: bench/RESULTS.md has no amp-bench markers")
open("bench/RESULTS.md", "w").write(pattern.sub(lambda m: block, text, count=1))
PY
echo "regenerate_results.sh: bench/RESULTS.md, bench/mlp.png and bench/convnet.png updated"
