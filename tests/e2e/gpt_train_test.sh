#!/usr/bin/env bash
# amp-train --model gpt end to end on a small byte-level corpus (this project's README, made into
# token files by amp-text-tokens), a tiny GPT (2 layers, 64 wide, block 32):
#  - --json: one object per logged step with step and loss (and lr, norm, loss scale, ms,
#    tokens/s, MFU), val_loss objects, a final object with val_loss; the loss falls;
#  - bit-exact resume: N steps in one run against K steps, then a new process resuming from the
#    checkpoint to N: the final checkpoints are byte-identical (the batches are a function of the
#    step), at O0, O1-bf16 and O2-fp16 (a first scale of 2^24 so that a step is skipped before
#    the save); --recompute full over the first or the last 6 of O2-fp16's steps changes no
#    byte (nothing of it in the checkpoint), nor does --recompute selective at O1-bf16;
#  - a sample of the asked length is printed, decoded by a tokenizer file of llm.c's format;
#  - --eval-only on a checkpoint: no step and no save, the validation loss the run ended with;
#  - a prompt: --start's text (or the same --start-ids) printed first, then the sample;
#  - SIGTERM mid-run: the step finishes, a checkpoint is saved, exit 0, and the resumed run ends
#    byte-identical to an uninterrupted one;
#  - the numbers of --json read back to the same bits (f32 as %.9g, doubles as %.17g);
#  - the checkpoint's model_args (nanoGPT's): a resume without the shape options takes them from
#    the checkpoint (--eval-only gives the trained run's validation loss); one with another
#    --n-head or --vocab-size whose tensors have the same shapes, another --n-embd or a larger
#    --block-size is refused naming the option and both values;
#  - --resume latest on a folder where no save has completed (what a kill before the first save
#    leaves, a temporary folder): the run starts from step 0, says so, clears the leftover and
#    ends byte-identical to a run without --resume; a step folder that does not exist stays an
#    error, and so does --eval-only with nothing saved;
#  - bad input, each a clear error and exit code 1: a token file with a wrong magic, a truncated
#    one, one whose count is negative, a token id >= --vocab-size, weights of another GPT shape;
#    a truncated tokenizer, a token file given as one, one of another vocabulary; --start with
#    --start-ids, without --sample or with a tokenizer, a prompt id past the vocabulary; and
#    usage errors, exit code 2: a GPT option given to another model, a fraction for an integer
#    option.
#   gpt_train_test.sh AMP_TRAIN AMP_TEXT_TOKENS WORKDIR README
set -euo pipefail
train=$1 tokens=$2 work=$3 readme=$4
rm -rf "$work"
mkdir -p "$work"
"$tokens" "$work/data" "$readme" >/dev/null
tiny=(--model gpt --data "$work/data" --n-layer 2 --n-head 2 --n-embd 64 --block-size 32
    --batch-size 4 --threads 2 --warmup-steps 5 --lr 3e-3 --eval-batches 2 --log-every 1 --json)
# the same cosine whether a run stops at step 6 or 12
sched=(--lr-decay-steps 12)
again=("${tiny[@]}")
source "$(dirname "$0")/lm_train_lib.sh"

# A byte-level tokenizer in llm.c's tokenizer format (version 2, end of text the newline) that
# decodes 'e' as 'E' and every other byte as itself: the sample must come through its table.
byte_tokenizer() { # file
    {
        printf '\xc8\xd7\x34\x01\x02\x00\x00\x00\x00\x01\x00\x00\x0a\x00\x00\x00'
        head -c 1008 /dev/zero
        for i in $(seq 0 255); do
            if ((i == 101)); then printf '\x01E'; else printf "\\x01\\x$(printf %02x "$i")"; fi
        done
    } >"$1"
}
byte_tokenizer "$work/upper_e.bin"

# amp-text-tokens makes its output folder's missing parents (scripts/train.sh writes into
# build/data/fortunes on a fresh checkout)
"$tokens" "$work/nested/a/b" "$readme" >/dev/null 2>"$work/nested.err" || true
check "amp-text-tokens into a folder whose parents are missing: $(cat "$work/nested.err")" \
    test -f "$work/nested/a/b/train.bin" -a -f "$work/nested/a/b/val.bin"

# --json, the falling loss, the sample
"$train" "${tiny[@]}" --max-steps 40 --eval-every 20 --sample 256 --tokenizer "$work/upper_e.bin" \
    >"$work/run.json" 2>"$work/run.err"
steps=$(grep -c '"step": [0-9]*, "loss"' "$work/run.json" || true)
check "40 step objects with step and loss (got $steps)" test "$steps" -eq 40
check "val_loss objects at steps 20 and 40" test "$(grep -c '"val_loss"' "$work/run.json")" -ge 3
final=$(tail -n 1 "$work/run.json")
check "the final object has val_loss ($final)" grep -q '"model": "gpt".*"val_loss": [0-9.]*' <<<"$final"
# the mean of the first 5 steps' losses against the last 5's: one batch of 4 x 32 tokens is too
# noisy a measure (it moves with every edit of the corpus, this README)
losses=$(grep '"step": [0-9]*, "loss"' "$work/run.json" | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/')
first=$(head -n 5 <<<"$losses" | awk '{ s += $1 } END { printf "%.4f", s / NR }')
last=$(tail -n 5 <<<"$losses" | awk '{ s += $1 } END { printf "%.4f", s / NR }')
check "the loss fell by a fifth (mean of the first 5 steps $first -> the last 5 $last)" \
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }'
for key in lr norm loss_scale ms tokens_per_s mfu; do
    check "the step objects carry $key" grep -q "\"$key\": " "$work/run.json"
done
if command -v python3 >/dev/null; then
    check "the JSON numbers do not read back to their bits" \
        python3 "$(dirname "$0")/json_floats.py" "$work/run.json" \
        f32=loss,lr,norm,loss_scale,train_loss f64=val_loss
fi
check "a sample was printed" grep -q "a sample of 256 tokens.*decoded by" "$work/run.err"
sample_text=$(sed -n '/a sample of 256 tokens/,$p' "$work/run.err" | tail -n +2)
check "the sample went through the tokenizer (no 'e', some 'E'): $sample_text" \
    bash -c '[[ $1 != *e* && $1 == *E* ]]' _ "$sample_text"

# bit-exact resume at three levels
resume O0 --opt-level O0
resume O1_bf16 --opt-level O1 --half bf16
resume O2_fp16 --opt-level O2 --init-scale 16777216
recompute O2_fp16 full --opt-level O2 --init-scale 16777216
recompute O1_bf16 selective --opt-level O1 --half bf16
check "O2_fp16: no skipped step before the save" grep -q '"skipped": true' "$work/resume-O2_fp16.first"

# --eval-only on a checkpoint: no step, no save, the validation loss the run ended with
"$train" "${tiny[@]}" "${sched[@]}" --opt-level O0 --max-steps 12 --eval-only \
    --checkpoint-dir "$work/resume-O0/straight" --resume latest >"$work/eval_only.json" 2>&1
trained=$(tail -n 1 "$work/resume-O0.straight" | sed 's/.*"val_loss": \([0-9.]*\).*/\1/')
evaluated=$(tail -n 1 "$work/eval_only.json")
check "--eval-only: $evaluated, want steps 12 and val_loss $trained" \
    grep -q "\"steps\": 12, \"train_loss\": null, \"val_loss\": $trained," <<<"$evaluated"
check "--eval-only saved a checkpoint" test "$(ls "$work/resume-O0/straight" | grep -c step-)" -eq 1
# --eval-batches 0: the steps without an evaluation (val_loss null); --eval-only refuses it
"$train" "${tiny[@]}" "${sched[@]}" --opt-level O0 --max-steps 2 --eval-batches 0 \
    >"$work/no_eval.json" 2>&1
check "--eval-batches 0: $(tail -n 1 "$work/no_eval.json" | head -c 300)" \
    grep -q '"steps": 2, "train_loss": [0-9.]*, "val_loss": null,' <(tail -n 1 "$work/no_eval.json")
check "--eval-batches 0 printed a validation loss" \
    bash -c '! grep -q "\"step\": 2, \"val_loss\"" "$1"' _ "$work/no_eval.json"
"$train" "${tiny[@]}" --eval-only --eval-batches 0 >/dev/null 2>"$work/no_eval_only.err" || true
check "--eval-only --eval-batches 0: $(head -c 200 "$work/no_eval_only.err")" \
    grep -q "eval-only evaluates: give --eval-batches 1 or more" "$work/no_eval_only.err"
# a resume without the shape options: the checkpoint's model_args give them
"$train" --model gpt --data "$work/data" --batch-size 4 --threads 2 --eval-batches 2 --json \
    --opt-level O0 --eval-only --checkpoint-dir "$work/resume-O0/straight" --resume latest \
    >"$work/eval_args.json" 2>"$work/eval_args.err" || true
check "a resume without shape options: $(grep -m1 'amp-train: gpt' "$work/eval_args.err")" \
    grep -q "gpt, 2 layers, 2 heads, 64 wide, block 32, vocab 256" "$work/eval_args.err"
check "a resume without shape options: $(tail -n 1 "$work/eval_args.json"), want val_loss $trained" \
    grep -q "\"val_loss\": $trained," <(tail -n 1 "$work/eval_args.json")
# --resume latest where no save has completed: what a kill in the first save left goes, the run
# starts from step 0 (saying so) and ends as one without --resume
true &
dead=$!
wait "$dead"
leftover="$work/fresh/.tmp-step-0000006-$dead-0"
mkdir -p "$leftover"
head -c 100 /dev/zero >"$leftover/model.safetensors"
"$train" "${tiny[@]}" "${sched[@]}" --opt-level O0 --max-steps 12 --checkpoint-dir "$work/fresh" \
    --resume latest >"$work/fresh.json" 2>"$work/fresh.err" || true
check "--resume latest with nothing saved: $(grep -v '^libamp\|^  ' "$work/fresh.err" | head -c 300)" \
    grep -q "no checkpoint has completed in $work/fresh yet.*starting from step 0" "$work/fresh.err"
check "--resume latest with nothing saved: the leftover $leftover is still there" test ! -e "$leftover"
for f in model.safetensors state.safetensors; do
    check "--resume latest with nothing saved: $f differs from a run without --resume" \
        cmp "$work/resume-O0/straight/step-0000012/$f" "$work/fresh/step-0000012/$f"
done

# a prompt: --start's bytes printed first, then the sample; --start-ids the same ids
ckpt0=(--checkpoint-dir "$work/resume-O0/straight" --resume latest --eval-only --sample 8)
"$train" "${tiny[@]}" "${ckpt0[@]}" --start "Once upon" >/dev/null 2>"$work/prompt.err"
"$train" "${tiny[@]}" "${ckpt0[@]}" --start-ids 79,110,99,101,32,117,112,111,110 \
    >/dev/null 2>"$work/prompt_ids.err"
prompted=$(sed -n '/a sample of 8 tokens/{n;p}' "$work/prompt.err")
check "--start: the sample begins with the prompt: $prompted" \
    bash -c '[[ $1 == "Once upon"* ]]' _ "$prompted"
check "--start-ids: the same sample as --start" \
    test "$prompted" = "$(sed -n '/a sample of 8 tokens/{n;p}' "$work/prompt_ids.err")"

# SIGTERM in the middle of a run: the step finishes, a checkpoint is saved, exit 0; resumed,
# the run ends byte-identical to one that never stopped (the signal lands right after the first
# periodic save, far from the end).
long=(--opt-level O1 --half bf16 --max-steps 120 --lr-decay-steps 120)
"$train" "${tiny[@]}" "${long[@]}" --checkpoint-dir "$work/term/straight" >"$work/term.straight" 2>&1
"$train" "${tiny[@]}" "${long[@]}" --checkpoint-dir "$work/term/run" --save-every 5 \
    >"$work/term.first" 2>"$work/term.first.err" &
pid=$!
for _ in $(seq 6000); do [[ -f $work/term/run/latest ]] && break; sleep 0.01; done
kill -TERM "$pid" 2>/dev/null || true
rc=0
wait "$pid" || rc=$?
check "amp-train exited $rc after SIGTERM, want 0" test "$rc" -eq 0
check "SIGTERM: no 'stopped by a signal' in $(tail -n 2 "$work/term.first.err")" \
    grep -q "stopped by a signal at step" "$work/term.first.err"
check "SIGTERM: the final JSON object says stopped" grep -q '"stopped": true' "$work/term.first"
"$train" "${tiny[@]}" "${long[@]}" --checkpoint-dir "$work/term/run" --resume latest \
    >"$work/term.second" 2>&1
for f in model.safetensors state.safetensors; do
    check "SIGTERM: $f differs after resuming from $(cat "$work/term/run/latest" 2>/dev/null)" \
        cmp "$work/term/straight/step-0000120/$f" "$work/term/run/step-0000120/$f"
done

# bad input
mkdir -p "$work/magic" "$work/trunc" "$work/negative"
cp "$work/data/val.bin" "$work/magic/val.bin"
cp "$work/data/val.bin" "$work/trunc/val.bin"
cp "$work/data/train.bin" "$work/magic/train.bin"
printf '\x00' | dd of="$work/magic/train.bin" bs=1 seek=0 count=1 conv=notrunc status=none
head -c 2000 "$work/data/train.bin" >"$work/trunc/train.bin"
args=("${tiny[@]}")
bad "wrong magic" "not a token file of llm.c's format" "${args[@]/$work\/data/$work/magic}" --max-steps 1
bad "truncated" "truncated or not a token file" "${args[@]/$work\/data/$work/trunc}" --max-steps 1
bad "token id >= vocab" "outside the vocabulary of 100" "${tiny[@]}" --vocab-size 100 --max-steps 1
cp "$work/data/val.bin" "$work/negative/val.bin"
cp "$work/data/train.bin" "$work/negative/train.bin"
printf '\xfb\xff\xff\xff' | dd of="$work/negative/train.bin" bs=1 seek=8 count=4 conv=notrunc status=none
bad "a negative token count" "negative/train.bin' says -5 tokens in its header" \
    "${args[@]/$work\/data/$work/negative}" --max-steps 1
ckpt=(--max-steps 13 --checkpoint-dir "$work/resume-O0/straight" --resume latest)
bad "another GPT shape" "--n-embd 32 (the checkpoint's n_embd is 64)" "${tiny[@]}" --n-embd 32 "${ckpt[@]}"
bad "block size past the checkpoint's" "--block-size 64 (the checkpoint's block_size is 32)" \
    "${tiny[@]}" --block-size 64 "${ckpt[@]}"
bad "other heads, the same shapes" "--n-head 4 (the checkpoint's n_head is 2)" "${tiny[@]}" \
    --n-head 4 "${ckpt[@]}"
bad "another vocabulary, the same padded shapes" "--vocab-size 250 (the checkpoint's vocab_size is 256)" \
    "${tiny[@]}" --vocab-size 250 "${ckpt[@]}"
bad "two options that differ" "--n-layer 1 (the checkpoint's n_layer is 2), --n-head 4" \
    "${tiny[@]}" --n-layer 1 --n-head 4 "${ckpt[@]}"
bad "weights of another GPT shape" "does not fit: 28 mis-shaped: transformer.wte.weight (file \[256, 64\], model \[256, 32\])" \
    "${tiny[@]}" --n-embd 32 --max-steps 1 --init-weights "$work/resume-O0/straight/step-0000012/model.safetensors"
bad "a step folder that does not exist" "step-0000099' is neither a step folder" "${tiny[@]}" \
    --max-steps 13 --resume "$work/resume-O0/straight/step-0000099"
bad "--eval-only with nothing saved" "holds no completed checkpoint to evaluate" "${tiny[@]}" \
    --eval-only --checkpoint-dir "$work/nothing" --resume latest

head -c 1500 "$work/upper_e.bin" >"$work/cut_tokenizer.bin"
bad "a truncated tokenizer" "cut_tokenizer.bin' ends inside token" "${tiny[@]}" --max-steps 1 \
    --tokenizer "$work/cut_tokenizer.bin"
bad "a token file as the tokenizer" "not a tokenizer file of llm.c's format" "${tiny[@]}" \
    --max-steps 1 --tokenizer "$work/data/val.bin"
bad "a tokenizer of another vocabulary" "has a vocabulary of 256 tokens, the model's vocab_size is 300" \
    "${tiny[@]}" --vocab-size 300 --max-steps 1 --tokenizer "$work/upper_e.bin"
bad "--start and --start-ids" "give --start or --start-ids, not both" "${tiny[@]}" "${ckpt0[@]}" \
    --start x --start-ids 1
bad "a prompt without --sample" "give --sample N too" "${tiny[@]}" --max-steps 1 --start x
bad "--start with a tokenizer" "a tokenizer file holds no merges to encode with" "${tiny[@]}" \
    "${ckpt0[@]}" --start x --tokenizer "$work/upper_e.bin"
bad "an id past the vocabulary" "--start-ids '3,256': want ids in \[0, 256)" "${tiny[@]}" \
    "${ckpt0[@]}" --start-ids 3,256
usage "a GPT option without --model gpt" "--tokenizer is an option of --model gpt and llama, not of --model mlp" \
    --model mlp --tokenizer "$work/upper_e.bin"
one=("${tiny[@]}" --max-steps 1) # what a run that took the option anyway would cost
usage "--recompute partial" "--recompute 'partial': want none, selective or full" "${tiny[@]}" \
    --recompute partial
usage "--recompute for the MLP" "--recompute is an option of --model gpt and llama" --model mlp \
    --recompute full
usage "--n-embd 32.5" "--n-embd '32.5': want an integer in \[1, 65536\]" "${one[@]}" --n-embd 32.5
usage "--n-layer 1.9" "--n-layer '1.9': want an integer in \[1, 64\]" "${one[@]}" --n-layer 1.9
usage "--batch-size 2.5" "--batch-size '2.5': want an integer" "${one[@]}" --batch-size 2.5
usage "--max-steps 1.5" "--max-steps '1.5': want an integer" "${tiny[@]}" --max-steps 1.5
usage "--seed -1" "--seed '-1': want an integer in \[0, 18446744073709551615\]" "${one[@]}" --seed -1
usage "--epochs 2.5 (convnet)" "--epochs '2.5': want an integer" --model convnet --max-steps 1 \
    --no-eval --epochs 2.5

echo "gpt_train_test: $pass passed, $fail failed"
((fail == 0))
