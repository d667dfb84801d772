#!/usr/bin/env bash
# The CUDA backend against the CPU backend through amp-train: the same run (model, batch 32,
# 30 steps, seed 0) on --device cpu and --device cuda must take the same skip decisions and give
# the same per-step losses, within 1e-4 relative at O0, 2e-3 at the fp16 levels and 4e-3 with
# bf16 (different summation orders in GEMM, convolution and the reductions; the half levels round
# those differences to 11 or 8 bits: bf16's weights, rounded from masters that differ in their
# last f32 bits, move by one bf16 step, 2^-8 = 3.9e-3 relative, now and then). Run in the AMP_CUDACPU=ON build, where --device cuda runs the
# unchanged CUDA backend on this CPU; on a machine with a GPU it compares the GPU with the CPU.
#   device_parity.sh AMP_TRAIN WORKDIR MODEL
# SGD at lr 0.001 (momentum 0.9; PARITY_LR overrides): at amp-train's default 0.05 both models
# train at the edge of stability, where a first difference of one f32 rounding (1e-7, from
# another summation order) grows two- to threefold per step: measured here, the MLP at O0 reached
# 1.8e-3 by step 28 at lr 0.05, the ConvNet 1.1e-4 at O0 and 3-6 % at the half levels at lr 0.01.
# Two correct backends differ that much there; at lr 0.001 the differences stay near the
# rounding level (ConvNet: at most 7e-5 at O0, 4.3e-4 with fp16; with bf16 1.6e-3 on one machine
# and 2.2e-3 on another, at single steps between steps near 1e-4), so the comparison measures the
# backends and not the dynamics.
# Prints one line per level with the largest relative difference. Exits 77 (SKIPPED) without the
# Fashion-MNIST data set.
set -euo pipefail
train=$1 work=$2 model=$3
data=${AMP_DATA:-/usr/share/datasets/fashion-mnist}
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "device_parity: SKIPPED: no data set in $data"; exit 77; }
steps=${PARITY_STEPS:-30}
rm -rf "$work"
mkdir -p "$work"
# Without a device (a CUDA build on a machine with no GPU) there is nothing to compare.
if ! "$train" --model mlp --epochs 1 --batch-size 32 --max-steps 1 --no-eval --device cuda \
    --data "$data" >"$work/probe.log" 2>&1; then
    if grep -q "no CUDA device\|no usable CUDA device" "$work/probe.log"; then
        echo "device_parity: SKIPPED: $(grep -m1 -o 'no .*CUDA device.*' "$work/probe.log")"
        exit 77
    fi
    echo "FAIL: amp-train --device cuda failed:"; tail -n 5 "$work/probe.log"; exit 1
fi
fail=0
# name, tolerance, amp-train arguments
run_level() {
    local name=$1 tol=$2
    shift 2
    for dev in cpu cuda; do
        "$train" --model "$model" --epochs 1 --batch-size 32 --seed 0 --max-steps "$steps" \
            --lr "${PARITY_LR:-0.001}" --no-eval --json --log-every 1 --device "$dev" --threads 2 --data "$data" "$@" \
            >"$work/$name-$dev.log" 2>&1 ||
            { echo "FAIL: $model $name on $dev: amp-train failed:"; tail -n 5 "$work/$name-$dev.log"; fail=1; return; }
    done
    python3 - "$work/$name-cpu.log" "$work/$name-cuda.log" "$tol" "$model $name" "$steps" <<'PY' || fail=1
import json, sys
cpu_log, cuda_log, tol, label, steps = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
def steps_of(path):
    rows = []
    for line in open(path):
        line = line.strip()
        if line.startswith('{"step"'):
            rows.append(json.loads(line))
    return rows
a, b = steps_of(cpu_log), steps_of(cuda_log)
backend = [json.loads(l)["backend"] for l in open(cuda_log) if l.startswith('{"model"')]
problems = []
if backend != ["cuda"]:
    problems.append("the --device cuda run did not run on the CUDA backend: %s" % backend)
if len(a) != steps or len(b) != steps:
    problems.append("want %d logged steps, got %d (cpu) and %d (cuda)" % (steps, len(a), len(b)))
worst, worst_step, skips = 0.0, 0, 0
for x, y in zip(a, b):
    if x["skipped"] != y["skipped"]:
        problems.append("step %d: skipped %s on cpu, %s on cuda" % (x["step"], x["skipped"], y["skipped"]))
    if x["loss_scale"] != y["loss_scale"]:
        problems.append("step %d: loss scale %g on cpu, %g on cuda" % (x["step"], x["loss_scale"], y["loss_scale"]))
    skips += x["skipped"]
    rel = abs(x["loss"] - y["loss"]) / max(abs(x["loss"]), 1e-30)
    if rel > worst:
        worst, worst_step = rel, x["step"]
if worst > tol:
    problems.append("step %d: losses differ by %.3g relative (tolerance %g)" % (worst_step, worst, tol))
print("%-22s %d steps, %d skipped on both, largest relative loss difference %.3g (step %d, tolerance %g)%s"
      % (label, len(a), skips, worst, worst_step, tol, "" if not problems else ": FAIL"))
for p in problems[:10]:
    print("  " + p)
sys.exit(1 if problems else 0)
PY
}
# fp16 starts at 2^17 so that the first steps overflow and both devices must skip them alike.
run_level O0 1e-4 --opt-level O0
run_level O1_fp16 2e-3 --opt-level O1 --init-scale 131072
run_level O2_fp16 2e-3 --opt-level O2 --init-scale 131072
run_level O2_bf16 4e-3 --opt-level O2 --half bf16
exit $fail
