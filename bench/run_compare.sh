#!/usr/bin/env bash
# libamp (amp-train) against PyTorch (bench/pytorch_reference.py) on the CPU, same recipe and
# settings, one model after the other; prints a markdown table of accuracy and samples/s.
#
#   bench/run_compare.sh                      convnet 1 epoch and mlp 300 steps, 2 threads
#   EPOCHS=2 MLP_STEPS=0 THREADS=4 bench/run_compare.sh
#
# Environment: BUILD (default build) holds examples/amp-train; EPOCHS (1); CONVNET_STEPS (0: whole
# epochs) and MLP_STEPS (300) cap the optimizer steps; THREADS (2); SEED (0); PYTHON (python3).
# Extra arguments go to both programs (e.g. --batch-size 256). Run scripts/setup.sh --bench once
# for torch. Each run's full output is kept in $OUT (default: a temporary folder, printed).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${BUILD:-build}
epochs=${EPOCHS:-1}
threads=${THREADS:-2}
seed=${SEED:-0}
python=${PYTHON:-python3}
out=${OUT:-$(mktemp -d /tmp/amp-compare.XXXXXX)}
mkdir -p "$out"

amp_train=$build/examples/amp-train
if [[ ! -x $amp_train ]]; then
    echo "run_compare.sh: $amp_train not found: build first (cmake --build $build --target amp-train)" >&2
    exit 1
fi
"$python" -c "import torch, numpy" 2>/dev/null || {
    echo "run_compare.sh: $python cannot import torch and numpy: run scripts/setup.sh --bench" >&2
    exit 1
}

# Runs one program, keeps its output in $out/<name>.log and its last JSON line in $out/<name>.json.
run() {
    local name=$1
    shift
    echo "run_compare.sh: $name: $*" >&2
    if ! "$@" >"$out/$name.log" 2>&1; then
        echo "run_compare.sh: $name failed; its output:" >&2
        cat "$out/$name.log" >&2
        exit 1
    fi
    grep '^{' "$out/$name.log" | tail -n 1 >"$out/$name.json"
    if [[ ! -s $out/$name.json ]]; then
        echo "run_compare.sh: $name printed no JSON summary (see $out/$name.log)" >&2
        exit 1
    fi
}

for model in convnet mlp; do
    if [[ $model == mlp ]]; then steps=${MLP_STEPS:-300}; else steps=${CONVNET_STEPS:-0}; fi
    common=(--model "$model" --epochs "$epochs" --seed "$seed" --threads "$threads"
        --max-steps "$steps" --json "$@")
    run "amp-$model" "$amp_train" --cpu "${common[@]}"
    run "torch-$model" "$python" bench/pytorch_reference.py "${common[@]}"
done

"$python" - "$out" <<'EOF'
import json, os, sys

out = sys.argv[1]
def load(name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)

torch_version = ""
print("| model | steps | libamp acc | PyTorch acc | libamp samples/s | PyTorch samples/s "
      "| libamp / PyTorch |")
print("|---|---:|---:|---:|---:|---:|---:|")
for model in ("convnet", "mlp"):
    a, t = load("amp-" + model), load("torch-" + model)
    torch_version = t.get("torch", "")
    ratio = a["samples_per_sec"] / t["samples_per_sec"] if t["samples_per_sec"] else float("nan")
    print(f"| {model} | {a['steps']} | {100 * a['test_accuracy']:.2f} % "
          f"| {100 * t['test_accuracy']:.2f} % | {a['samples_per_sec']:.0f} "
          f"| {t['samples_per_sec']:.0f} | {ratio:.2f} |")
print(f"\nCPU fp32, batch {t['batch_size']}, SGD lr {t['lr']:g} momentum 0.9, "
      f"{t['threads']} threads, PyTorch {torch_version}; logs in {out}")
EOF
