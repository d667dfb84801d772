#!/usr/bin/env bash
# amp-train --model gpt under mpirun -np 2 (DDP, each rank half of every global batch) against
# one process at O0: the same losses printed, the weights within 1e-5 relative (st_close, over the
# whole model) after 20 steps, the same validation loss; and a bit-exact resume of the 2-process
# run. Per tensor every one is within 1e-6 but c_attn.bias: the key bias has a zero gradient in
# exact arithmetic (softmax does not change when a row's scores shift together), and Adam turns
# its rounding noise, which another summation order changes, into steps of about lr noise / eps.
#   gpt_mpi.sh MPIEXEC AMP_TRAIN AMP_TEXT_TOKENS ST_CLOSE WORKDIR README
set -euo pipefail
mpiexec=$1 train=$2 tokens=$3 close=$4 work=$5 readme=$6
rm -rf "$work"
mkdir -p "$work"
"$tokens" "$work/data" "$readme" >/dev/null
tiny=(--model gpt --data "$work/data" --n-layer 2 --n-head 2 --n-embd 64 --block-size 32
    --batch-size 4 --warmup-steps 5 --lr 1e-3 --lr-decay-steps 20 --eval-batches 2 --log-every 1
    --json)
run2=("$mpiexec" --oversubscribe --allow-run-as-root --bind-to none -np 2 "$train")
pass=0 fail=0
check() { # description, command...
    if "${@:2}"; then pass=$((pass + 1)); else echo "FAIL: $1" >&2; fail=$((fail + 1)); fi
}
"$train" "${tiny[@]}" --threads 2 --max-steps 20 --checkpoint-dir "$work/one" >"$work/one.json" 2>"$work/one.err"
"${run2[@]}" "${tiny[@]}" --max-steps 20 --checkpoint-dir "$work/two" >"$work/two.json" 2>"$work/two.err"
check "the 2-process run used DDP" grep -q "DDP over the processes" "$work/two.err"
check "weights of 2 processes against 1 after 20 steps" \
    "$close" "$work/two/step-0000020/model.safetensors" "$work/one/step-0000020/model.safetensors" 1e-5
v1=$(tail -n 1 "$work/one.json" | sed 's/.*"val_loss": \([0-9.]*\).*/\1/')
v2=$(tail -n 1 "$work/two.json" | sed 's/.*"val_loss": \([0-9.]*\).*/\1/')
check "validation losses $v1 and $v2" awk -v a="$v1" -v b="$v2" 'BEGIN { d = a - b; exit !(d < 1e-4 && d > -1e-4) }'
l1=$(grep '"step": 20, "loss"' "$work/one.json" | sed 's/.*"loss": \([0-9.]*\).*/\1/')
l2=$(grep '"step": 20, "loss"' "$work/two.json" | sed 's/.*"loss": \([0-9.]*\).*/\1/')
check "step 20's loss $l1 and $l2" awk -v a="$l1" -v b="$l2" 'BEGIN { d = a - b; exit !(d < 1e-4 && d > -1e-4) }'
# Resume: 10 steps, then a new pair of processes to 20, byte-identical to the straight run.
"${run2[@]}" "${tiny[@]}" --max-steps 10 --checkpoint-dir "$work/resumed" >/dev/null 2>&1
"${run2[@]}" "${tiny[@]}" --max-steps 20 --checkpoint-dir "$work/resumed" --resume latest \
    >/dev/null 2>"$work/resumed.err"
check "the resumed run did not resume" grep -q "resumed from" "$work/resumed.err"
for f in model.safetensors state.safetensors; do
    check "$f differs after resuming the 2-process run at step 10" \
        cmp "$work/two/step-0000020/$f" "$work/resumed/step-0000020/$f"
done
echo "gpt_mpi: $pass passed, $fail failed"
((fail == 0))
