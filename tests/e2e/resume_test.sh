#!/usr/bin/env bash
# Bit-exact resume across processes: N steps in one run of amp-train against K steps, then a new
# process that resumes from the checkpoint and goes on to N. The two final checkpoints must be
# byte-identical: weights, masters, optimizer state, scaler state, RNG and loader position.
#   resume_test.sh AMP_TRAIN WORKDIR N K [amp-train arguments...]
# EXPECT_SKIP=1: the first K steps must include a skipped step and a scale change (fp16 runs).
# CHECK_THREADS=1: a resume with another thread count must say that its bits may differ.
# Exits 77 (SKIPPED) without the Fashion-MNIST data set.
set -euo pipefail
train=$1 work=$2 n=$3 k=$4
shift 4
data=${AMP_DATA:-/usr/share/datasets/fashion-mnist}
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "resume_test: SKIPPED: no data set in $data"; exit 77; }
rm -rf "$work"
mkdir -p "$work"
base=(--model convnet --epochs 1 --batch-size 32 --no-eval --json --data "$data" "$@")
common=("${base[@]}" --threads 2)
"$train" "${common[@]}" --max-steps "$n" --checkpoint-dir "$work/straight" >"$work/straight.log" 2>&1
"$train" "${common[@]}" --max-steps "$k" --checkpoint-dir "$work/resumed" >"$work/first.log" 2>&1
"$train" "${common[@]}" --max-steps "$n" --checkpoint-dir "$work/resumed" --resume latest \
    >"$work/second.log" 2>&1
pass=0 fail=0
check() { # description, command...
    if "${@:2}"; then pass=$((pass + 1)); else echo "FAIL: $1" >&2; fail=$((fail + 1)); fi
}
final=$(printf 'step-%07d' "$n")
for f in model.safetensors state.safetensors; do
    check "$f differs after resuming at step $k ($*)" \
        cmp "$work/straight/$final/$f" "$work/resumed/$final/$f"
done
check "the second run did not resume" grep -q "resumed from" "$work/second.log"
if [[ ${EXPECT_SKIP:-0} == 1 ]]; then
    json=$(tail -n 1 "$work/first.log")
    skipped=$(sed -n 's/.*"skipped_steps": \([0-9]*\).*/\1/p' <<<"$json")
    check "no skipped step before the save (skipped_steps '$skipped')" test "${skipped:-0}" -ge 1
fi
if [[ ${CHECK_THREADS:-0} == 1 ]]; then # another thread count: the run goes on, and says so
    "$train" "${base[@]}" --threads 1 --max-steps "$((n + 1))" \
        --checkpoint-dir "$work/resumed" --resume latest >"$work/threads.log" 2>&1 || true
    check "a resume with 1 thread did not say the bits may differ" \
        grep -q "saved with 2 threads" "$work/threads.log"
fi
echo "resume_test ($*): $pass passed, $fail failed"
((fail == 0))
