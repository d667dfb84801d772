#!/usr/bin/env bash
# amp-train's training loop on the CUDA backend waits for the device once per step: cross-
# entropy's label check (core/backend.h: xent_fwd). Reading the loss every step (for the epoch's
# mean and the progress bar) would be a second wait; the loop sums the losses on the device and
# reads them when it prints. Counted with the runtime's waiting calls wrapped (amp_train_syncs,
# a copy of amp-train linked with sync_count.h): a run of LONG steps against one of SHORT, so
# that set-up, the epoch's end and the exit cancel out. Exits 77 (SKIPPED) without the
# Fashion-MNIST data set or without a device.
#   amp_train_syncs.sh AMP_TRAIN_SYNCS
set -euo pipefail
train=$1
data=${AMP_DATA:-/usr/share/datasets/fashion-mnist}
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "amp_train_syncs: SKIPPED: no data set in $data"; exit 77; }
short=4 long=12
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# waits STEPS: sets `waits` and `reads` to the counts of a run of STEPS steps (in this shell, so
# that a SKIP or a failure exits the script).
waits() {
    if ! "$train" --model mlp --epochs 1 --batch-size 32 --seed 0 --max-steps "$1" --no-eval \
        --opt-level O1 --device cuda --threads 2 --data "$data" >"$log" 2>&1; then
        if grep -q "no CUDA device\|no usable CUDA device" "$log"; then
            echo "amp_train_syncs: SKIPPED: $(grep -m1 -o 'no .*CUDA device.*' "$log")"
            exit 77
        fi
        echo "FAIL: amp-train failed:"
        tail -n 5 "$log"
        exit 1
    fi
    read -r waits reads < <(sed -n 's/^sync_count: \([0-9]*\) host waits, \([0-9]*\) device reads.*/\1 \2/p' "$log")
    [[ -n ${reads:-} ]] || { echo "FAIL: no sync_count line in amp-train's output"; exit 1; }
}
waits $short
w_short=$waits r_short=$reads
waits $long
n=$((long - short)) dw=$((waits - w_short)) dr=$((reads - r_short))
echo "amp_train_syncs: $dw host waits and $dr device reads in $n steps (want at most $n: cross-entropy's label check)"
if ((dw > n || dr > n)); then
    echo "FAIL: the training loop waits for the device more than once per step"
    exit 1
fi
