#!/usr/bin/env bash
# amp-train under mpirun: 2 ranks with SyncBatchNorm, f32 all-reduce of bf16 gradients and
# 2-way accumulation save a checkpoint after 8 steps; the same command resumed goes on to 12.
# Only rank 0 prints; the JSON line is global (world size, samples of both ranks).
# Usage: amp_train_mpi.sh MPIEXEC AMP_TRAIN WORKDIR. SKIPPED (77) without Fashion-MNIST.
set -uo pipefail
mpiexec=$1 train=$2 work=$3
data=/usr/share/datasets/fashion-mnist
[[ -e $data/train-images-idx3-ubyte.gz || -e $data/train-images-idx3-ubyte ]] || {
    echo "amp_train_mpi: SKIPPED: no Fashion-MNIST in $data"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
fail() { echo "amp_train_mpi: FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
run() {
    "$mpiexec" --oversubscribe --allow-run-as-root --bind-to none ${ASAN_OPTIONS:+-x ASAN_OPTIONS} \
        -np 2 "$train" --model convnet --batch-size 32 --opt-level O2 --half bf16 --sync-bn \
        --allreduce-fp32 --accumulate 2 --no-eval --json --checkpoint-dir "$work/ckpt" "$@"
}
run --max-steps 8 >"$work/first.log" 2>&1 || { cat "$work/first.log"; fail "the first run failed"; }
cat "$work/first.log"
json=$(grep '^{"model"' "$work/first.log") || fail "no JSON line"
[[ $(grep -c '^{"model"' "$work/first.log") -eq 1 ]] || fail "more than one rank printed"
grep -q '"world_size": 2' <<<"$json" || fail "world_size is not 2"
grep -q '"steps": 8,' <<<"$json" || fail "not 8 steps"
grep -q '"sync_bn": true' <<<"$json" || fail "sync_bn not reported"
grep -q 'processes (DDP' "$work/first.log" || fail "no DDP line"
[[ -d $work/ckpt/step-0000008 ]] || fail "no checkpoint of step 8"
run --max-steps 12 --resume latest >"$work/second.log" 2>&1 || { cat "$work/second.log"; fail "the resumed run failed"; }
cat "$work/second.log"
grep -q 'resumed from .* at step 8' "$work/second.log" || fail "did not resume at step 8"
grep -q '"steps": 12,' "$work/second.log" || fail "the resumed run did not end at step 12"
echo "amp_train_mpi: 2 ranks trained, saved, resumed"
echo "1 passed, 0 failed"
