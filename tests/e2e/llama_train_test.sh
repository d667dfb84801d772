#!/usr/bin/env bash
# amp-train --model llama end to end on a small byte-level corpus (this project's README, made
# into token files by amp-text-tokens), a tiny Llama (2 layers, hidden 64, 4 heads, 2 key/value
# heads, intermediate 176, 64 positions, window 32):
#  - --json step objects, the falling loss, the final object naming the model;
#  - bit-exact resume: 12 steps in one run against 6, then a new process resuming to 12: the
#    final checkpoints byte-identical, at O0, O1-bf16 and O2-fp16 (a first scale of 2^24 so
#    that a step is skipped before the save), and under --accumulate 2 with clipping, where
#    --recompute full over the first or the last 6 steps changes no byte (selective: the
#    GPT's e2e and tests/unit/test_recompute.c);
#  - the other levels and half types train (O1-fp16, O2-bf16, O3-bf16: the loss falls);
#  - --skip-nonfinite off reaches amp_initialize; the summary's peak memory figures;
#  - a step folder is a Hugging Face folder: --eval-only --init-weights FOLDER (config.json and
#    model.safetensors, amp_llama_load_pretrained) gives the run's validation loss, and so does
#    --eval-only --resume without any shape option (the checkpoint's config);
#  - --config FILE (a config.json) makes the same model as the options;
#  - a prompt: --start's text printed first, then the sample (through the key/value cache);
#  - bad input, each a clear error and exit code 1 naming the field: a resume with another
#    num_attention_heads, --init-weights of another model's folder, a window past
#    max_position_embeddings, a config.json field of the wrong type, heads that the key/value
#    heads do not divide; usage errors, exit code 2: a GPT option given to the Llama, a Llama
#    option given to the GPT or to the MNIST models, an MNIST model's option to the Llama.
#   llama_train_test.sh AMP_TRAIN AMP_TEXT_TOKENS WORKDIR README
set -euo pipefail
train=$1 tokens=$2 work=$3 readme=$4
rm -rf "$work"
mkdir -p "$work"
"$tokens" "$work/data" "$readme" >/dev/null
shape=(--hidden-size 64 --intermediate-size 176 --num-hidden-layers 2 --num-attention-heads 4
    --num-key-value-heads 2 --max-position-embeddings 64)
base=(--model llama --data "$work/data" --block-size 32 --batch-size 4 --threads 2
    --warmup-steps 5 --lr 3e-3 --eval-batches 2 --log-every 1 --json)
tiny=("${base[@]}" "${shape[@]}")
sched=(--lr-decay-steps 12) # the same cosine whether a run stops at step 6 or 12
again=("${base[@]}")
source "$(dirname "$0")/lm_train_lib.sh"
losses() { grep '"step": [0-9]*, "loss"' "$1" | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/'; }
# the mean of the first 5 steps' losses against the last 5's, below `ratio` of it
falls() { # file, ratio
    local l first last
    l=$(losses "$1")
    first=$(head -n 5 <<<"$l" | awk '{ s += $1 } END { printf "%.4f", s / NR }')
    last=$(tail -n 5 <<<"$l" | awk '{ s += $1 } END { printf "%.4f", s / NR }')
    echo "llama_train_test: $1: the first 5 steps' mean loss $first, the last 5's $last"
    awk -v a="$first" -v b="$last" -v r="$2" 'BEGIN { exit !(b < r * a) }'
}
val_of() { tail -n 1 "$1" | sed 's/.*"val_loss": \([0-9.]*\).*/\1/'; }

"$train" "${tiny[@]}" --max-steps 40 >"$work/run.json" 2>"$work/run.err"
check "40 step objects (got $(losses "$work/run.json" | wc -l))" \
    test "$(losses "$work/run.json" | wc -l)" -eq 40
check "the final object names the Llama: $(tail -n 1 "$work/run.json")" \
    grep -q '"model": "llama".*"val_loss": [0-9.]*.*"parameters": 125248' <(tail -n 1 "$work/run.json")
check "the start line describes the model: $(grep -m1 'amp-train: llama' "$work/run.err")" \
    grep -q "llama, 2 layers, 4 heads (2 key/value), 64 wide, intermediate 176, window 32 of 64" \
    "$work/run.err"
check "the loss fell by a fifth" falls "$work/run.json" 0.8

resume O0 --opt-level O0
resume O1_bf16 --opt-level O1 --half bf16
resume O2_fp16 --opt-level O2 --init-scale 16777216
check "O2_fp16: no skipped step before the save" grep -q '"skipped": true' "$work/resume-O2_fp16.first"
resume accumulate --opt-level O1 --half bf16 --accumulate 2 --grad-clip 0.5
recompute accumulate full --opt-level O1 --half bf16 --accumulate 2 --grad-clip 0.5

# --skip-nonfinite off reaches the options (the language models ignored it); the summary
# carries the memory figures
"$train" "${tiny[@]}" --opt-level O1 --half bf16 --skip-nonfinite off --max-steps 1 \
    >"$work/noskip.json" 2>&1
check "--skip-nonfinite off: $(grep 'skip_nonfinite  ' "$work/noskip.json")" \
    grep -q "skip_nonfinite *: False" "$work/noskip.json"
check "O1 without --skip-nonfinite: the level's on" grep -q "skip_nonfinite *: True" \
    "$work/resume-O1_bf16.straight"
check "the summary's memory: $(tail -n 1 "$work/run.json")" \
    grep -Eq '"peak_backend_mb": [1-9][0-9.]*, "peak_rss_mb": [1-9][0-9.]*' <(tail -n 1 "$work/run.json")

for level in "O1 fp16" "O2 bf16" "O3 bf16"; do
    set -- $level
    "$train" "${tiny[@]}" --opt-level "$1" --half "$2" --max-steps 30 >"$work/$1_$2.json" 2>&1
    check "$1-$2: the loss fell by a tenth" falls "$work/$1_$2.json" 0.9
done

# a step folder as a Hugging Face folder, and the checkpoint's config on resume
folder=$work/resume-O0/straight/step-0000012
trained=$(val_of "$work/resume-O0.straight")
"$train" "${base[@]}" --eval-only --init-weights "$folder" >"$work/eval_hf.json" 2>"$work/eval_hf.err"
check "--eval-only --init-weights FOLDER: $(tail -n 1 "$work/eval_hf.json"), want val_loss $trained" \
    grep -q "\"val_loss\": $trained," <(tail -n 1 "$work/eval_hf.json")
"$train" "${base[@]}" --eval-only --resume "$folder" >"$work/eval_ckpt.json" 2>"$work/eval_ckpt.err"
check "--eval-only --resume without shape options: $(tail -n 1 "$work/eval_ckpt.json")" \
    grep -q "\"steps\": 12, \"train_loss\": null, \"val_loss\": $trained," <(tail -n 1 "$work/eval_ckpt.json")

# --config FILE: the same model as the options, so the same run
"$train" "${base[@]}" --config "$folder/config.json" "${sched[@]}" --max-steps 12 \
    --checkpoint-dir "$work/config" >/dev/null 2>&1
check "--config FILE: another model than the options'" \
    cmp "$work/resume-O0/straight/step-0000012/model.safetensors" "$work/config/step-0000012/model.safetensors"

# a prompt printed first, then the sample
"$train" "${base[@]}" --eval-only --resume "$folder" --sample 8 --start "Once upon" \
    >/dev/null 2>"$work/prompt.err"
prompted=$(sed -n '/a sample of 8 tokens/{n;p}' "$work/prompt.err")
check "--start: the sample begins with the prompt: $prompted" \
    bash -c '[[ ${#1} -ge 9 && $1 == "Once upon"* ]]' _ "$prompted"

bad "a resume with other heads" "saved by another model: num_attention_heads 2 vs 4, head_dim 32 vs 16" \
    "${tiny[@]}" --num-attention-heads 2 --max-steps 13 --resume "$folder"
sed 's/"num_attention_heads": 4/"num_attention_heads": 2/; s/"head_dim": 16/"head_dim": 32/' \
    "$folder/config.json" >"$work/other.json"
bad "--init-weights of another model's folder" "is another model's than this one: num_attention_heads 4 vs 2" \
    "${base[@]}" --config "$work/other.json" --max-steps 1 --init-weights "$folder"
bad "a window past the positions" "--block-size 65 is past the model's max_position_embeddings 64" \
    "${tiny[@]}" --block-size 65 --max-steps 1
sed 's/"hidden_size": 64/"hidden_size": "64"/' "$folder/config.json" >"$work/typed.json"
bad "a config field of the wrong type" "'hidden_size' is a string, want an integer" \
    "${base[@]}" --config "$work/typed.json" --max-steps 1
bad "key/value heads that do not divide the heads" \
    "num_attention_heads = 4 is not a multiple of num_key_value_heads = 3" \
    "${tiny[@]}" --num-key-value-heads 3 --max-steps 1
usage "a GPT option to the Llama" "--n-layer is an option of --model gpt" "${tiny[@]}" --n-layer 2
usage "a Llama option to the GPT" "--hidden-size is an option of --model llama, not of --model gpt" \
    --model gpt --data "$work/data" --hidden-size 64
usage "an image model's option to the Llama" "--epochs is an option of --model convnet and mlp" \
    "${tiny[@]}" --epochs 2
usage "--sync-bn to the Llama" "--sync-bn is an option of --model convnet and mlp, not of --model llama (it has no batch norm)" \
    "${tiny[@]}" --sync-bn
usage "a Llama option to the MLP" "--hidden-size is an option of --model gpt and llama" \
    --model mlp --hidden-size 64

echo "llama_train_test: $pass passed, $fail failed"
((fail == 0))
