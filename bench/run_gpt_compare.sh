#!/usr/bin/env bash
# The default GPT trained on the fortunes corpus by amp-train at O0, O1-bf16, O2-bf16 and
# O1-fp16 and by PyTorch eager (bench/gpt_reference.py) in fp32 and under autocast bf16: the same
# configuration, the same batches (--data-order sequential), the same number of steps. Prints a
# Markdown table (final validation loss, each against PyTorch's of its precision, tokens/s) and
# plots the training and validation losses side by side (gnuplot PNG).
#
#   bench/run_gpt_compare.sh                    1000 steps, 2 threads, bench/gpt_loss.png
#   STEPS=300 PLOT=/tmp/l.png bench/run_gpt_compare.sh
#
# Environment: BUILD (build) holds examples/amp-train and amp-text-tokens; STEPS (1000); EVAL
# (100: steps between validation losses); THREADS (2); PYTHON (python3); DATA
# (BUILD/data/fortunes, made as scripts/train.sh makes it); OUT (a temporary folder: each
# run's JSON lines); PLOT (bench/gpt_loss.png). Extra arguments go to both programs.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${BUILD:-build}
steps=${STEPS:-1000}
eval_every=${EVAL:-100}
threads=${THREADS:-2}
python=${PYTHON:-python3}
data=${DATA:-$build/data/fortunes}
out=${OUT:-$(mktemp -d /tmp/amp-gpt-compare.XXXXXX)}
plot=${PLOT:-bench/gpt_loss.png}
mkdir -p "$out"

for tool in amp-train amp-text-tokens; do
    [[ -x $build/examples/$tool ]] || {
        echo "run_gpt_compare.sh: $build/examples/$tool not found: build first" >&2
        exit 1
    }
done
"$python" -c "import torch" 2>/dev/null || {
    echo "run_gpt_compare.sh: $python cannot import torch: run scripts/setup.sh --bench" >&2
    exit 1
}
if [[ ! -f $data/train.bin ]]; then
    mkdir -p "$(dirname "$data")"
    mapfile -t files < <(find /usr/share/games/fortunes -maxdepth 1 -type f \
        ! -name '*.dat' ! -name '*.u8' ! -name 'ascii-art' | sort)
    "$build/examples/amp-text-tokens" "$data" "${files[@]}" >/dev/null
fi

common=(--data "$data" --data-order sequential --max-steps "$steps" --eval-every "$eval_every"
    --threads "$threads" --log-every 10 --json --sample 400 --top-k 40 --temperature 0.8)
run_amp() { # name, amp-train options...
    local name=$1
    shift
    echo "run_gpt_compare.sh: $name" >&2
    "$build/examples/amp-train" --model gpt "${common[@]}" "$@" "${EXTRA[@]}" \
        >"$out/$name.json" 2>"$out/$name.err"
}
run_torch() { # name, precision
    echo "run_gpt_compare.sh: $1" >&2
    "$python" bench/gpt_reference.py --data "$data" --max-steps "$steps" --eval-every "$eval_every" \
        --threads "$threads" --log-every 10 --json --precision "$2" "${EXTRA[@]}" \
        >"$out/$1.json" 2>"$out/$1.err"
}
EXTRA=("$@")
run_amp libamp-O0 --opt-level O0
run_torch pytorch-fp32 fp32
run_amp libamp-O1-bf16 --opt-level O1 --half bf16
run_torch pytorch-autocast-bf16 bf16
run_amp libamp-O2-bf16 --opt-level O2 --half bf16
run_amp libamp-O1-fp16 --opt-level O1 --half fp16

# Columns: step, loss (train) or step, val_loss, one file per run and kind.
for f in "$out"/*.json; do
    base=${f%.json}
    grep '"loss"' "$f" | sed 's/.*"step": \([0-9]*\), "loss": \([-0-9.e]*\).*/\1 \2/' >"$base.train"
    grep '"val_loss"' "$f" | grep -v '"model"' |
        sed 's/.*"step": \([0-9]*\), "val_loss": \([-0-9.e]*\).*/\1 \2/' >"$base.val"
done

final() { tail -n 1 "$out/$1.json" | sed 's/.*"val_loss": \([-0-9.e]*\).*/\1/'; }
speed() { tail -n 1 "$out/$1.json" | sed 's/.*"tokens_per_sec": \([0-9.]*\).*/\1/'; }
echo "| run | final val loss | PyTorch of its precision | difference | tokens/s |"
echo "|---|---:|---:|---:|---:|"
for run in libamp-O0 libamp-O1-bf16 libamp-O2-bf16 libamp-O1-fp16 pytorch-fp32 pytorch-autocast-bf16; do
    ref=pytorch-autocast-bf16
    [[ $run == libamp-O0 || $run == pytorch-fp32 ]] && ref=pytorch-fp32
    [[ $run == libamp-O1-fp16 ]] && ref=pytorch-fp32 # no fp16 autocast on the CPU: against fp32
    v=$(final "$run") r=$(final "$ref")
    awk -v run="$run" -v v="$v" -v r="$r" -v ref="$ref" -v s="$(speed "$run")" \
        'BEGIN { printf "| %s | %.4f | %.4f (%s) | %+.2f %% | %.0f |\n", run, v, r, ref, 100 * (v - r) / r, s }'
done

if command -v gnuplot >/dev/null; then
    gnuplot <<EOF
set terminal pngcairo size 1200,500 font ",10"
set output "$plot"
set multiplot layout 1,2 title "GPT (4 layers, 4 heads, 256 wide, T 128, batch 16) on fortunes: libamp and PyTorch, same batches"
set xlabel "step"; set ylabel "training loss"; set key top right; set grid
plot for [r in "libamp-O0 libamp-O1-bf16 libamp-O2-bf16 libamp-O1-fp16 pytorch-fp32 pytorch-autocast-bf16"] \
    "$out/".r.".train" using 1:2 with lines title r
set ylabel "validation loss"
plot for [r in "libamp-O0 libamp-O1-bf16 libamp-O2-bf16 libamp-O1-fp16 pytorch-fp32 pytorch-autocast-bf16"] \
    "$out/".r.".val" using 1:2 with linespoints title r
unset multiplot
EOF
    echo "run_gpt_compare.sh: plotted $plot (runs in $out)" >&2
fi
