#!/usr/bin/env bash
# Mixed-precision throughput and memory on the CPU: amp-train at O0, O1, O2 (fp16 and bf16) and O3
# bf16 next to PyTorch fp32 and PyTorch with torch.autocast('cpu', bfloat16 / float16 + GradScaler),
# back to back, for the ConvNet and the MLP. Prints a markdown table (samples/s, peak RSS, ratios).
# PyTorch's CPU fp16 autocast is slow (tens of samples/s on the MLP), so it runs TORCH_FP16_STEPS
# (default 20) steps only.
#
#   bench/run_mixed.sh                 200 steps per run, 2 threads
#   STEPS=400 THREADS=2 bench/run_mixed.sh
#
# Environment: BUILD (default build), STEPS (200), THREADS (2), SEED (0), PYTHON (python3),
# OUT (folder for the logs; default a temporary one).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${BUILD:-build}
steps=${STEPS:-200}
threads=${THREADS:-2}
seed=${SEED:-0}
python=${PYTHON:-python3}
out=${OUT:-$(mktemp -d /tmp/amp-mixed.XXXXXX)}
mkdir -p "$out"
amp_train=$build/examples/amp-train
[[ -x $amp_train ]] || { echo "run_mixed.sh: build $amp_train first" >&2; exit 1; }

run() { # name, command...: keeps the log and the last JSON line
    local name=$1
    shift
    echo "run_mixed.sh: $name" >&2
    "$@" >"$out/$name.log" 2>&1 || { cat "$out/$name.log" >&2; exit 1; }
    grep '^{' "$out/$name.log" | tail -n 1 >"$out/$name.json"
}

for model in convnet mlp; do
    common=(--model "$model" --epochs 1 --max-steps "$steps" --seed "$seed" --threads "$threads" --json)
    run "torch-fp32-$model" "$python" bench/pytorch_reference.py "${common[@]}"
    run "torch-bf16-$model" "$python" bench/pytorch_reference.py "${common[@]}" --autocast-bf16
    run "torch-fp16-$model" "$python" bench/pytorch_reference.py --model "$model" --epochs 1 \
        --max-steps "${TORCH_FP16_STEPS:-20}" --seed "$seed" --threads "$threads" --json --autocast-fp16
    for cfg in O0:fp16 O1:fp16 O1:bf16 O2:fp16 O2:bf16 O3:bf16; do
        run "amp-${cfg/:/-}-$model" "$amp_train" --cpu "${common[@]}" --opt-level "${cfg%:*}" --half "${cfg#*:}"
    done
done

"$python" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)
for model in ("convnet", "mlp"):
    t32, tbf = load(f"torch-fp32-{model}"), load(f"torch-bf16-{model}")
    o0 = load(f"amp-O0-fp16-{model}")
    print(f"\n**{model}** ({o0['steps']} steps, batch {o0['batch_size']}, {t32['threads']} threads)\n")
    print("| configuration | samples/s | peak RSS MB | vs libamp O0 | vs PyTorch fp32 | vs PyTorch bf16 autocast |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = [("PyTorch fp32", t32), ("PyTorch fp16 autocast + GradScaler", load(f"torch-fp16-{model}")),
            ("PyTorch bf16 autocast", tbf)]
    for cfg in ("O0-fp16", "O1-fp16", "O1-bf16", "O2-fp16", "O2-bf16", "O3-bf16"):
        label = "libamp O0 (fp32)" if cfg == "O0-fp16" else "libamp " + cfg.replace("-", " ")
        rows.append((label, load(f"amp-{cfg}-{model}")))
    for label, r in rows:
        s = r["samples_per_sec"]
        print(f"| {label} | {s:.0f} | {r.get('peak_rss_mb', 0):.0f} | {s / o0['samples_per_sec']:.2f} "
              f"| {s / t32['samples_per_sec']:.2f} | {s / tbf['samples_per_sec']:.2f} |")
print(f"\nPyTorch {t32.get('torch', '')}; logs in {out}")
PY
