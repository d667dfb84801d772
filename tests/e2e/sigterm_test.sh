#!/usr/bin/env bash
# SIGTERM (what a cluster scheduler sends before it kills) in the middle of a run: amp-train must
# finish the step, save and exit 0; resumed, the run ends byte-identical to an uninterrupted one.
#   sigterm_test.sh AMP_TRAIN WORKDIR [amp-train arguments...]
# Exits 77 (SKIPPED) without the Fashion-MNIST data set.
set -euo pipefail
train=$1 work=$2
shift 2
data=${AMP_DATA:-/usr/share/datasets/fashion-mnist}
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "sigterm_test: SKIPPED: no data set in $data"; exit 77; }
steps=150
rm -rf "$work"
mkdir -p "$work"
common=(--model convnet --epochs 1 --batch-size 32 --threads 2 --no-eval --data "$data"
    --max-steps "$steps" "$@")
"$train" "${common[@]}" --checkpoint-dir "$work/reference" >"$work/reference.log" 2>&1
pass=0 fail=0
check() { if "${@:2}"; then pass=$((pass + 1)); else echo "FAIL: $1" >&2; fail=$((fail + 1)); fi; }
"$train" "${common[@]}" --checkpoint-dir "$work/run" --save-every 10 >"$work/run.log" 2>&1 &
pid=$!
# Signal right after the first periodic save: training is under way, far from its end.
for _ in $(seq 600); do [[ -f $work/run/latest ]] && break; sleep 0.05; done
kill -TERM "$pid" 2>/dev/null || true
rc=0
wait "$pid" || rc=$?
check "amp-train exited $rc after SIGTERM, want 0" test "$rc" -eq 0
check "no checkpoint after SIGTERM" test -f "$work/run/latest"
stopped=$(cat "$work/run/latest")
grep -q "stopped by a signal" "$work/run.log" && check "stopped at the end" test "$stopped" != "$(printf 'step-%07d' "$steps")"
"$train" "${common[@]}" --checkpoint-dir "$work/run" --resume latest >"$work/resume.log" 2>&1
final=$(printf 'step-%07d' "$steps")
for f in model.safetensors state.safetensors; do
    check "$f differs from the uninterrupted run (stopped at $stopped)" \
        cmp "$work/reference/$final/$f" "$work/run/$final/$f"
done
echo "sigterm_test (stopped at $stopped): $pass passed, $fail failed"
((fail == 0))
