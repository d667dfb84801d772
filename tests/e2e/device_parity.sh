#!/usr/bin/env bash
# The CUDA backend against the CPU backend through amp-train: the same run (model, batch 32,
# 30 steps, seed 0, SGD at lr 0.001 with momentum 0.9) on --device cpu and --device cuda. Run in
# the AMP_CUDACPU=ON build, where --device cuda runs the unchanged CUDA backend on this CPU; on a
# machine with a GPU it compares the GPU with the CPU.
#   device_parity.sh AMP_TRAIN WORKDIR MODEL
# Asserted, at every step: the same skip decisions and loss scales (the scaler's decisions are
# exact functions of found-inf, which both devices must agree on). At steps 1 and 2 only: the
# losses within the bounds below. Later steps are printed, not bounded: the devices sum in
# different orders, and what a step does with the previous one's rounding difference (a ReLU
# input within rounding of 0 takes the other side, a master weight crosses a half rounding
# boundary) is the trajectory's, not the arithmetic's.
#
# The bounds, on the relative loss difference. Step 1's loss is that of the initial weights, the
# same on both devices, on the same batch: only the summation order of the GEMMs, convolutions
# and sums differs (batch norm, pooling, the elementwise ops and the optimizer give the same bits
# on both). Two orders of an f32 sum of K terms differ by about sqrt(K) u of its size (u = 2^-24;
# rounding errors of random sign); three such layers in a row, K <= 2048 (the MLP's; the
# ConvNet's 25, 400 and 1568 leave room for its batch norms), make eps = 3 sqrt(2048) u = 8e-6
# of a logit at O0. At the half levels each layer's output is rounded to the half type
# (U = 2^-11 fp16, 2^-8 bf16): where the devices' f32 values straddle a rounding boundary they
# come out one ulp (<= 2U) apart; at worst that is the difference of two independent roundings,
# 2U / sqrt(6) rms, and n of them add to sqrt(n) 2U / sqrt(6) <= 2U for the n <= 6 roundings
# on the way (the MLP's 3, the ConvNet's 5): eps = 2U. The loss is the mean over B = 32 samples
# of a cross-entropy that moves by (p - y) . dz, |p - y| <= sqrt(2), the samples' roundings
# independent: 3 standard deviations are 3 sqrt(2 / B) eps |z| / L, with |z| <= 1 and L >= 2.2
# at the start (the loss starts near ln 10): 0.34 eps, so 3e-6 at O0, 3.3e-4 with fp16 and
# 2.7e-3 with bf16. Step 2 adds one SGD step's difference: the devices' gradients differ by the
# same eps, their weights by eps lr |g| (at O2 the half copies, rounded from masters that close,
# by one ulp in a fraction lr |g| / |w| of them), which moves the loss by eps times the step's own
# change of it, a small part of it at lr 0.001: far below the step-1 term.
# Control: one --device cuda run at O0 with lr 1.1x, 2 steps, against the O0 run on the CPU: the
# same loss at step 1 (the same weights) and beyond the O0 bound at step 2. It runs first and is
# the device probe too: without a device (a CUDA build on a machine with no GPU) there is nothing
# to compare, and the test exits 77 (SKIPPED), as it does without the Fashion-MNIST data set.
# SGD at lr 0.001 (PARITY_LR overrides): at amp-train's default 0.05 both models train at the edge
# of stability, where a first difference of one f32 rounding grows two- to threefold a step.
set -euo pipefail
train=$1 work=$2 model=$3
data=${AMP_DATA:-/usr/share/datasets/fashion-mnist}
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "device_parity: SKIPPED: no data set in $data"; exit 77; }
steps=${PARITY_STEPS:-30}
lr=${PARITY_LR:-0.001}
((steps >= 2)) || { echo "device_parity: PARITY_STEPS must be at least 2 (steps 1 and 2 are bounded)"; exit 2; }
rm -rf "$work"
mkdir -p "$work"
fail=0
# log, device, steps, lr, amp-train arguments
train_run() {
    local log=$1 dev=$2 n=$3 rate=$4
    shift 4
    "$train" --model "$model" --epochs 1 --batch-size 32 --seed 0 --max-steps "$n" --lr "$rate" \
        --no-eval --json --log-every 1 --device "$dev" --threads 2 --data "$data" "$@" >"$log" 2>&1
}
control_lr=$(awk -v r="$lr" 'BEGIN { printf "%.9g", 1.1 * r }')
if ! train_run "$work/control-cuda.log" cuda 2 "$control_lr" --opt-level O0; then
    if grep -q "no CUDA device\|no usable CUDA device" "$work/control-cuda.log"; then
        echo "device_parity: SKIPPED: $(grep -m1 -o 'no .*CUDA device.*' "$work/control-cuda.log")"
        exit 77
    fi
    echo "FAIL: amp-train --device cuda failed:"; tail -n 5 "$work/control-cuda.log"; exit 1
fi
# name, bound, amp-train arguments
run_level() {
    local name=$1 bound=$2 control=
    shift 2
    for dev in cpu cuda; do
        train_run "$work/$name-$dev.log" "$dev" "$steps" "$lr" "$@" ||
            { echo "FAIL: $model $name on $dev: amp-train failed:"; tail -n 5 "$work/$name-$dev.log"; fail=1; return; }
    done
    [[ $name == O0 ]] && control=$work/control-cuda.log
    python3 - "$work/$name-cpu.log" "$work/$name-cuda.log" "$bound" "$model $name" "$steps" \
        "$control" <<'PY' || fail=1
import json, sys
cpu_log, cuda_log, bound, label, steps, control_log = sys.argv[1:7]
bound, steps = float(bound), int(steps)
BOUNDED = 2  # steps 1 and 2: the header says why
def steps_of(path):
    return [json.loads(l) for l in open(path) if l.startswith('{"step"')]
def backend_of(path):
    return [json.loads(l)["backend"] for l in open(path) if l.startswith('{"model"')]
def rel(x, y):
    return abs(x["loss"] - y["loss"]) / max(abs(x["loss"]), 1e-30)
a, b = steps_of(cpu_log), steps_of(cuda_log)
problems = []
if backend_of(cuda_log) != ["cuda"]:
    problems.append("the --device cuda run did not run on the CUDA backend: %s" % backend_of(cuda_log))
if len(a) != steps or len(b) != steps:
    problems.append("want %d logged steps, got %d (cpu) and %d (cuda)" % (steps, len(a), len(b)))
skips = 0
for x, y in zip(a, b):
    if x["skipped"] != y["skipped"]:
        problems.append("step %d: skipped %s on cpu, %s on cuda" % (x["step"], x["skipped"], y["skipped"]))
    if x["loss_scale"] != y["loss_scale"]:
        problems.append("step %d: loss scale %g on cpu, %g on cuda" % (x["step"], x["loss_scale"], y["loss_scale"]))
    skips += x["skipped"]
first = [rel(x, y) for x, y in zip(a[:BOUNDED], b[:BOUNDED])]
for s, d in enumerate(first, 1):
    if d > bound:
        problems.append("step %d: losses differ by %.3g relative (bound %g)" % (s, d, bound))
later = [(rel(x, y), x["step"]) for x, y in zip(a[BOUNDED:], b[BOUNDED:])]
worst, worst_step = max(later) if later else (0.0, 0)
print("%-22s %d steps, %d skipped on both; steps 1, 2: %s (bound %g); figure: steps %d-%d at most "
      "%.3g (step %d)%s" % (label, len(a), skips, ", ".join("%.3g" % d for d in first), bound,
                            BOUNDED + 1, steps, worst, worst_step, "" if not problems else ": FAIL"))
if control_log:
    c = steps_of(control_log)
    if len(c) != BOUNDED or len(a) < BOUNDED:
        problems.append("control: want %d logged steps, got %d" % (BOUNDED, len(c)))
    else:
        d1, d2 = rel(a[0], c[0]), rel(a[1], c[1])
        print("%-22s step 1: %.3g (bound %g); step 2: %.3g, %.3g times the bound%s"
              % ("  control, lr x 1.1", d1, bound, d2, d2 / bound,
                 "" if d1 <= bound < d2 else ": FAIL"))
        if d1 > bound:
            problems.append("control: step 1 (the same weights) differs by %.3g (bound %g)"
                            % (d1, bound))
        if d2 <= bound:
            problems.append("control: lr x 1.1 does not show at step 2: %.3g, within the bound %g"
                            % (d2, bound))
for p in problems[:10]:
    print("  " + p)
sys.exit(1 if problems else 0)
PY
}
# fp16 starts at 2^17, twice the default, so that an overflow and its skip are likely within the
# steps; where one happens both devices must take it alike.
run_level O0 3e-6 --opt-level O0
run_level O1_fp16 3.3e-4 --opt-level O1 --init-scale 131072
run_level O2_fp16 3.3e-4 --opt-level O2 --init-scale 131072
run_level O2_bf16 2.7e-3 --opt-level O2 --half bf16
exit $fail
