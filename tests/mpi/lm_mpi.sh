#!/usr/bin/env bash
# amp-train --model gpt or llama under mpirun -np 2 (DDP, each rank half of every global batch)
# against one process at O0. Asserted: the weights and the printed losses after steps 1 and 2
# within the bounds derived below, a planted control beyond them, a bit-exact resume of the
# 2-process run, --recompute full and --zero 1 giving its bits. After 20 steps the difference is
# printed, not bounded: where a gradient element is near zero, Adam's m / sqrt(v) turns its rounding
# difference into one of the step's own size, and where that happens and what later steps make
# of it is the trajectory's, not the arithmetic's.
#   lm_mpi.sh MPIEXEC AMP_TRAIN AMP_TEXT_TOKENS ST_CLOSE WORKDIR README gpt|llama
#
# The bounds. Both runs start from the same weights (one seed; DDP broadcasts rank 0's) and take
# the same tokens: they differ by summation order only (a rank's GEMMs have half the rows, the
# all-reduce adds two half-batch gradients, the clip norm sums in another order). rho, a
# gradient's relative difference, is a few sqrt(K) u a sum (u = 2^-24, K <= 4 n_embd = 256):
# about 1e-6.
#  - Weights, in units of the distance the one process trained from the initial weights. Adam's
#    first step moves each element by about lr (lr 1/6 of 1e-3 in the warmup): lr sqrt(N) =
#    0.057, N = 116480; the second, at twice the lr and with half of its momentum the first
#    gradient, goes on in that direction: the distance is at least as long after step 2.
#    AdamW's first step is lr g / (|g| + eps) per element (clip-scale free): rho moves it by at
#    most rho lr eps / |g|; the second by O(rho) of the step: under 1e-5 of the distance.
#    Each step rounds w to f32, and where the runs' unrounded values straddle a rounding
#    boundary they come out one ulp, at most 2u |w|, apart: at most 2u ||w|| a step over the
#    model, ||w|| = 19 at the start (five LayerNorm weights of 64 ones, the rest N(0, 0.02)):
#    2.3e-6 a step, 4e-5 of the distance after step 1, 8e-5 after step 2. Bound: 1e-4. Left
#    out: the key third of each c_attn.bias. A row of scores shifted by one constant has the
#    same softmax, so the loss does not depend on the key bias: its gradient is zero in exact
#    arithmetic and Adam's steps there are rounding noise over eps, which two summation orders
#    need not agree on (st_close prints the difference there).
#    The Llama (2 layers, hidden 64, 4 heads of 16, 2 key/value heads, intermediate 176, untied
#    head) has N = 125248 and ||w|| = 19 (five RMSNorm weights of 64 ones): the same bounds,
#    and no bias to leave out (the RoPE'd scores have no shift-invariant slice).
#  - Losses, absolute. Step 1 (the same weights): a token's loss moves by at most twice the
#    largest logit difference, and the logits (|z| <= 1 at the start: the loss starts near
#    ln 256) pass 13 sums (6 a block, the head): 2 * 13 * sqrt(256) u = 2.5e-5; the printed mean
#    is rounded once (one process) or per rank and again (two): 2 ulps of 5.5, 1e-6. Step 2 adds
#    the weights' difference, at most 1e-4 of 0.057, times the gradient's norm (about 3, the
#    "norm" printed): 2e-5. Bound: 1e-4.
# Control: the 2-process run at --lr 1.1e-3. AdamW's update is linear in lr, so it sits at 0.1 of
# the distance trained: the weights' bound must fail at steps 1 and 2, the loss's at step 2 (at
# step 1 the weights are still the initial ones).
set -euo pipefail
mpiexec=$1 train=$2 tokens=$3 close=$4 work=$5 readme=$6 model=$7
rm -rf "$work"
mkdir -p "$work"
"$tokens" "$work/data" "$readme" >/dev/null
n_embd=64
case $model in
gpt)
    shape=(--n-layer 2 --n-head 2 --n-embd $n_embd)
    skip=(c_attn.bias:$n_embd:$((2 * n_embd)))
    ;;
llama)
    shape=(--num-hidden-layers 2 --num-attention-heads 4 --num-key-value-heads 2
        --hidden-size $n_embd --intermediate-size 176 --max-position-embeddings 64)
    skip=()
    ;;
*) echo "lm_mpi.sh: model '$model': want gpt or llama" >&2; exit 2 ;;
esac
tiny=(--model "$model" --data "$work/data" "${shape[@]}" --block-size 32
    --batch-size 4 --warmup-steps 5 --lr 1e-3 --lr-decay-steps 20 --eval-batches 2 --log-every 1
    --json)
run2=("$mpiexec" --oversubscribe --allow-run-as-root --bind-to none -np 2 "$train")
w_tol=1e-4 loss_tol=1e-4
pass=0 fail=0
check() { # description, command...
    if "${@:2}"; then pass=$((pass + 1)); else echo "FAIL: $1" >&2; fail=$((fail + 1)); fi
}
ckpt() { printf '%s/step-%07d/model.safetensors' "$1" "$2"; }
loss_at() { grep "\"step\": $2, \"loss\"" "$1" | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/'; }
within() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; exit !(d <= t && -d <= t) }'; }
beyond() { ! within "$@"; }
# The initial weights: one step at lr 0 leaves them as they are.
"$train" "${tiny[@]}" --lr 0 --threads 2 --max-steps 1 --checkpoint-dir "$work/init" \
    >/dev/null 2>"$work/init.err"
init=$(ckpt "$work/init" 1)
# A checkpoint after every step: the bounds hold at steps 1 and 2, the figure is step 20's.
"$train" "${tiny[@]}" --threads 2 --max-steps 20 --save-every 1 --checkpoint-dir "$work/one" \
    >"$work/one.json" 2>"$work/one.err"
"${run2[@]}" "${tiny[@]}" --max-steps 20 --save-every 1 --checkpoint-dir "$work/two" \
    >"$work/two.json" 2>"$work/two.err"
"${run2[@]}" "${tiny[@]}" --lr 1.1e-3 --max-steps 2 --save-every 1 \
    --checkpoint-dir "$work/control" >"$work/control.json" 2>"$work/control.err"
check "the 2-process run used DDP" grep -q "DDP over the processes" "$work/two.err"
for s in 1 2; do
    echo "lm_mpi $model: 2 processes against 1 after step $s (bound $w_tol of the distance trained):"
    check "weights of 2 processes against 1 after step $s" \
        "$close" "$(ckpt "$work/two" $s)" "$(ckpt "$work/one" $s)" $w_tol "$init" "${skip[@]}"
    l1=$(loss_at "$work/one.json" $s) l2=$(loss_at "$work/two.json" $s)
    echo "lm_mpi $model: step $s's loss $l1 (1 process) and $l2 (2), bound $loss_tol"
    check "step $s's loss $l1 and $l2" within "$l1" "$l2" $loss_tol
    echo "lm_mpi $model: control, lr 1.1e-3, after step $s:"
    set +e
    "$close" "$(ckpt "$work/control" $s)" "$(ckpt "$work/one" $s)" $w_tol "$init" "${skip[@]}"
    rc=$?
    set -e
    check "control: the weights at lr 1.1e-3 after step $s within the bound (st_close $rc)" \
        test $rc -eq 1
done
lc=$(loss_at "$work/control.json" 2) l1=$(loss_at "$work/one.json" 2)
check "control: step 2's loss at lr 1.1e-3, $lc, within the bound of $l1" \
    beyond "$lc" "$l1" $loss_tol
# The figures after 20 steps (st_close fails only on a NaN there).
echo "lm_mpi $model: figure: after 20 steps (not bounded):"
check "weights after 20 steps: not finite" \
    "$close" "$(ckpt "$work/two" 20)" "$(ckpt "$work/one" 20)" inf "$init" "${skip[@]}"
v1=$(tail -n 1 "$work/one.json" | sed 's/.*"val_loss": \([0-9.]*\).*/\1/')
v2=$(tail -n 1 "$work/two.json" | sed 's/.*"val_loss": \([0-9.]*\).*/\1/')
echo "lm_mpi $model: figure: step 20's loss $(loss_at "$work/one.json" 20) (1 process) and" \
    "$(loss_at "$work/two.json" 20) (2), validation loss $v1 and $v2"
# --batch-per-process: 2 rows a process is the global batch of 4, the same run bit for bit
# (the option was ignored by the language models); --allreduce-fp32 is taken.
"${run2[@]}" "${tiny[@]}" --batch-size 2 --batch-per-process --allreduce-fp32 --max-steps 2 \
    --checkpoint-dir "$work/per_process" >/dev/null 2>"$work/per_process.err"
check "--batch-per-process 2 on 2 processes: not the run of --batch-size 4" \
    cmp "$work/two/step-0000002/model.safetensors" "$work/per_process/step-0000002/model.safetensors"
check "--allreduce-fp32 not taken: $(grep -m1 'amp-train: ' "$work/per_process.err")" \
    grep -q "f32 all-reduce" "$work/per_process.err"
# --recompute full under DDP: a bucket still waits for its last gradient, which the recomputed
# block's node writes (a parameter counted unread would be reduced before it is written): the
# same run bit for bit.
"${run2[@]}" "${tiny[@]}" --recompute full --max-steps 2 --checkpoint-dir "$work/recompute" \
    >/dev/null 2>"$work/recompute.err"
check "--recompute full on 2 processes: not the run without it" \
    cmp "$work/two/step-0000002/model.safetensors" "$work/recompute/step-0000002/model.safetensors"
# Resume: 10 steps, then a new pair of processes to 20, byte-identical to the straight run.
"${run2[@]}" "${tiny[@]}" --max-steps 10 --checkpoint-dir "$work/resumed" >/dev/null 2>&1
"${run2[@]}" "${tiny[@]}" --max-steps 20 --checkpoint-dir "$work/resumed" --resume latest \
    >/dev/null 2>"$work/resumed.err"
check "the resumed run did not resume" grep -q "resumed from" "$work/resumed.err"
for f in model.safetensors state.safetensors; do
    check "$f differs after resuming the 2-process run at step 10" \
        cmp "$work/two/step-0000020/$f" "$work/resumed/step-0000020/$f"
done
# --zero 1: the optimizer's state sharded over the 2 processes gives DDP's run bit for bit (the
# gradients are all-reduced alike, every element is updated alike, and the clip's norm is summed
# to the same f32), its checkpoints are DDP's files (rank 0 gathers the state), and it resumes
# from one at step 10. ZeRO is built on the CPU backend only so far: on another (the cudacpu
# build's CUDA) amp-train must refuse it with the reason.
if grep -q "; backend cpu," "$work/two.err"; then
    "${run2[@]}" "${tiny[@]}" --zero 1 --max-steps 10 --checkpoint-dir "$work/zero" >/dev/null \
        2>"$work/zero.err"
    "${run2[@]}" "${tiny[@]}" --zero 1 --max-steps 20 --checkpoint-dir "$work/zero" \
        --resume latest >"$work/zero.json" 2>>"$work/zero.err"
    check "--zero 1 not taken: $(grep -m1 'amp-train: ' "$work/zero.err")" \
        grep -q "ZeRO-1" "$work/zero.err"
    check "--zero 1's summary has no zero_stage 1" grep -q '"zero_stage": 1' "$work/zero.json"
    for f in model.safetensors state.safetensors; do
        check "$f of --zero 1 differs from DDP's after 20 steps (resumed at 10)" \
            cmp "$work/two/step-0000020/$f" "$work/zero/step-0000020/$f"
    done
else
    set +e
    "${run2[@]}" "${tiny[@]}" --zero 1 --max-steps 1 --checkpoint-dir "$work/zero" >/dev/null \
        2>"$work/zero.err"
    rc=$?
    set -e
    check "--zero 1 off the CPU backend: exit $rc, want a refusal naming the backend" \
        test $rc -ne 0
    check "--zero 1 off the CPU backend: no reason given ($(grep -m1 zero_stage "$work/zero.err"))" \
        grep -q "zero_stage 1 on the .* backend is not built yet" "$work/zero.err"
fi
echo "lm_mpi $model: $pass passed, $fail failed"
((fail == 0))
