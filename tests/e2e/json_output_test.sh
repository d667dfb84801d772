#!/usr/bin/env bash
# --json is for programs: amp-train's and amp-bench's stdout then holds JSON only, which jq parses
# whole, and their text goes to stderr. amp-train --no-eval reports the accuracy as null (and
# "skipped" in its text), never 0; a run stopped by SIGTERM reports the train loss and throughput
# of the steps it made, with "stopped": true. Its numbers read back to the same bits (f32 values
# as %.9g, doubles as %.17g: json_floats.py), so that runs compare exactly from their logs.
#   json_output_test.sh AMP_TRAIN AMP_BENCH WORKDIR
# Exits 77 (SKIPPED) without the Fashion-MNIST data set.
set -euo pipefail
train=$1 bench=$2 work=$3
data=${AMP_DATA:-/usr/share/datasets/fashion-mnist}
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "json_output_test: SKIPPED: no data set in $data"; exit 77; }
command -v jq >/dev/null || { echo "FAIL: no jq (scripts/setup.sh installs it)"; exit 1; }
rm -rf "$work"
mkdir -p "$work"
pass=0 fail=0
check() { if "${@:2}"; then pass=$((pass + 1)); else echo "FAIL: $1" >&2; fail=$((fail + 1)); fi; }

# Three logged steps and the summary: four JSON objects on stdout, the text on stderr.
"$train" --model mlp --epochs 1 --max-steps 3 --no-eval --log-every 1 --json --threads 2 \
    --data "$data" >"$work/out.json" 2>"$work/err.txt"
check "amp-train's stdout is not JSON alone" jq -e -s 'length == 4' "$work/out.json"
check "the step lines" jq -e -s '.[0:3] | map(.step) == [1, 2, 3]' "$work/out.json"
check "--no-eval's accuracy is not null" jq -e -s '.[3] | .test_accuracy == null and .stopped == false' "$work/out.json"
check "the text is not on stderr" grep -q '^amp-train: mlp' "$work/err.txt"
if command -v python3 >/dev/null; then
    check "amp-train's JSON numbers do not read back to their bits" \
        python3 "$(dirname "$0")/json_floats.py" "$work/out.json" \
        f32=loss,loss_scale,lr,final_loss_scale f64=train_loss
fi
check "the epoch line does not say the accuracy was skipped" \
    grep -q 'test accuracy skipped (--no-eval)' "$work/err.txt"

# SIGTERM after the first periodic save: the summary carries the steps made.
"$train" --model convnet --epochs 1 --batch-size 32 --max-steps 5000 --no-eval --json --threads 2 \
    --checkpoint-dir "$work/ckpt" --save-every 5 --data "$data" >"$work/stop.json" 2>"$work/stop.txt" &
pid=$!
for _ in $(seq 1200); do [[ -f $work/ckpt/latest ]] && break; sleep 0.05; done
kill -TERM "$pid" 2>/dev/null || true
rc=0
wait "$pid" || rc=$?
check "amp-train exited $rc after SIGTERM" test "$rc" -eq 0
check "a stopped run's stdout is not JSON alone" jq -e -s 'length == 1' "$work/stop.json"
check "a stopped run's summary lacks its loss, throughput or steps ($(cat "$work/stop.json"))" \
    jq -e '.stopped == true and .steps >= 5 and .train_loss > 0.1 and .train_loss < 10 and
           .samples_per_sec > 0 and .test_accuracy == null' "$work/stop.json"

# amp-bench: one JSON document on stdout.
"$bench" --quick-peak --model mlp --opt-level O0,O1 --batch 8 --steps 2 --warmup 1 --threads 2 --json \
    >"$work/bench.json" 2>"$work/bench.txt"
check "amp-bench's stdout is not JSON alone" jq -e '.rows | length == 2' "$work/bench.json"
echo "json_output_test: $pass passed, $fail failed"
((fail == 0))
