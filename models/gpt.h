/* GPT-2 (nanoGPT's `GPT` class in C), written with the model API over the public headers
 * (models/gpt.c reads top to bottom): token and position embeddings, pre-LayerNorm blocks of
 * causal self-attention and a GELU(tanh) MLP with residual adds, a final LayerNorm, and a head
 * tied to the token embedding. amp-train trains it (`--model gpt`), amp-bench measures it,
 * tests/unit/test_gpt.c holds it against PyTorch.
 *
 * Names are nanoGPT's, so a checkpoint's model.safetensors loads into that class strictly:
 *   transformer.wte.weight [vocab_padded, C]   transformer.wpe.weight [block_size, C]
 *   transformer.h.<l>.ln_1.{weight,bias}        transformer.h.<l>.attn.c_attn.{weight [3C, C],bias}
 *   transformer.h.<l>.attn.c_proj.{weight,bias} transformer.h.<l>.ln_2.{weight,bias}
 *   transformer.h.<l>.mlp.c_fc.{weight [4C, C],bias} transformer.h.<l>.mlp.c_proj.{weight,bias}
 *   transformer.ln_f.{weight,bias}
 * lm_head.weight is wte.weight itself (tied), stored once. Initialisation is GPT-2's (nanoGPT's
 * _init_weights): every linear and embedding weight N(0, 0.02), the residual projections
 * (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorms 1 and 0. The
 * vocabulary is padded to amp_lm_padded_vocab(vocab_size) rows; the padding is never scored nor
 * sampled (amp/models/lm.h). */
#ifndef AMP_MODELS_GPT_H
#define AMP_MODELS_GPT_H

#include "amp/models/lm.h"
#include "amp/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_gpt_config {
    int n_layer, n_head, n_embd, block_size;
    int vocab_size; /* the tokens' (256 for bytes, 50257 for GPT-2's BPE) */
    float dropout;  /* embeddings, attention probabilities, residual branches */
} amp_gpt_config;

/* The GPT of cfg, unbuilt (amp_model_build, or anything that needs the storage, draws GPT-2's
 * init from the context's RNG). Its forward takes idx [B, T] (i32 token ids, 1 <= T <=
 * block_size) and gives logits [B, T, vocab_padded]. */
amp_status amp_gpt_create(amp_ctx *ctx, const amp_gpt_config *cfg, amp_model **out);
/* The config m was made with; AMP_ERR_INVALID_ARG when m is not a GPT of amp_gpt_create. */
amp_status amp_gpt_config_of(const amp_model *m, amp_gpt_config *cfg);
/* The logits of the last position of idx [B, T] only, [B, 1, vocab_padded]: what sampling reads,
 * the head's GEMM on one row of each sequence instead of T (nanoGPT's inference path,
 * lm_head(x[:, [-1], :])); the values of that row of the whole forward's logits. */
amp_status amp_gpt_forward_last(amp_model *m, amp_tensor *idx, amp_tensor **logits);
/* The mean next-token cross-entropy of idx [B, T] against targets [B, T] (amp_lm_loss). */
amp_status amp_gpt_loss(amp_model *m, amp_tensor *idx, amp_tensor *targets, amp_tensor **loss);
/* Activation recomputation of every block (amp_model_set_recompute on "transformer.h.<l>"):
 * AMP_RECOMPUTE_FULL keeps each block's input and output only, and runs the block's forward
 * again in backward; AMP_RECOMPUTE_SELECTIVE keeps neither LayerNorm's output (ln_1's, ln_2's)
 * nor the GELU's (c_fc's): written again from their inputs and statistics, and from c_fc's
 * pre-activation, when c_attn's, c_fc's and c_proj's weight gradients need them (amp_linear_ex's
 * recompute_input; llm.c's -r 2). The same bits either way. Between steps only. */
amp_status amp_gpt_set_recompute(amp_model *m, amp_recompute mode);
/* Parameters without the position embedding (nanoGPT's get_num_params), and the model FLOPs of
 * one token's forward and backward at sequence length T: 6 N for the GEMMs plus the attention's
 * 6 L T C (12 L T C non-causal, halved by the mask), PaLM's accounting as nanoGPT's
 * estimate_mfu writes it. -1 and 0 when m is not a GPT (amp_last_error says so). */
int64_t amp_gpt_n_params(const amp_model *m);
double amp_gpt_flops_per_token(const amp_model *m, int64_t T);
/* Generation, as amp/models/llama.h's: the cached forward of the new positions (positions len ..
 * len + t - 1 of the cache, the head on the last; no gradients; past block_size refused), and n
 * tokens drawn after the prompt with the cache or by full forwards of the last block_size
 * tokens (amp_lm_generate). */
amp_status amp_gpt_forward_cached(amp_model *m, amp_lm_cache *c, amp_tensor *idx,
                                  amp_tensor **logits);
amp_status amp_gpt_generate(amp_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n,
                            const amp_lm_sample_opts *opts, bool use_cache, int32_t *out);

#ifdef __cplusplus
}
#endif
#endif
