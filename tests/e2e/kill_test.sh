#!/usr/bin/env bash
# amp-train killed with SIGKILL at random moments while it saves every few steps, resumed each
# time from `latest`, until one run finishes: every trial must end byte-identical to an
# uninterrupted run, and every resume must find `latest` naming a whole checkpoint (a torn one
# makes amp-train fail its load, which fails the trial).
#   kill_test.sh AMP_TRAIN WORKDIR TRIALS [amp-train arguments...]
# Exits 77 (SKIPPED) without the Fashion-MNIST data set.
set -euo pipefail
train=$1 work=$2 trials=$3
shift 3
data=${AMP_DATA:-/usr/share/datasets/fashion-mnist}
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "kill_test: SKIPPED: no data set in $data"; exit 77; }
steps=${KILL_STEPS:-24}
rm -rf "$work"
mkdir -p "$work"
common=(--model convnet --epochs 1 --batch-size 32 --threads 2 --no-eval --data "$data"
    --max-steps "$steps" --save-every 3 --keep 2 "$@")
"$train" "${common[@]}" --checkpoint-dir "$work/reference" >"$work/reference.log" 2>&1
final=$(printf 'step-%07d' "$steps")
RANDOM=${KILL_SEED:-1}
pass=0 fail=0 kills=0
for ((t = 1; t <= trials; t++)); do
    dir=$work/trial-$t
    n_kills=$((1 + RANDOM % 4)) # then one run to the end
    for ((run = 0; ; run++)); do
        resume=()
        [[ -f $dir/latest ]] && resume=(--resume latest)
        "$train" "${common[@]}" --checkpoint-dir "$dir" "${resume[@]}" >>"$dir.log" 2>&1 &
        pid=$!
        if ((run < n_kills)); then
            sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", 0.3 + 2.7 * r / 32767 }')"
            kill -9 "$pid" 2>/dev/null && kills=$((kills + 1)) || true
            wait "$pid" 2>/dev/null || true
        elif ! wait "$pid"; then
            echo "FAIL: trial $t: amp-train failed after $run kills (log $dir.log)" >&2
            fail=$((fail + 1))
            continue 2
        else
            break
        fi
    done
    if cmp -s "$work/reference/$final/model.safetensors" "$dir/$final/model.safetensors" &&
        cmp -s "$work/reference/$final/state.safetensors" "$dir/$final/state.safetensors"; then
        pass=$((pass + 1))
    else
        echo "FAIL: trial $t: final checkpoint differs from the uninterrupted run" >&2
        fail=$((fail + 1))
    fi
done
echo "kill_test: $trials trials, $kills kills; $pass passed, $fail failed"
((fail == 0))
