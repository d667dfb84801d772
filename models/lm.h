/* What the language models of models/ share (amp/models/gpt.h, amp/models/llama.h): the
 * vocabulary padded for the GEMMs, the next-token loss over the real vocabulary only, nanoGPT's
 * AdamW recipe, and the sampler's draw. */
#ifndef AMP_MODELS_LM_H
#define AMP_MODELS_LM_H

#include <stdint.h>

#include "amp/nn.h"
#include "amp/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* vocab rounded up to a multiple of 64, the rows of the embedding and the head's GEMM
 * (50257 -> 50304, as nanoGPT and llm.c pad it). The padding is never scored nor drawn. */
int64_t amp_lm_padded_vocab(int64_t vocab);

/* The mean cross-entropy of the next tokens: logits [B, T, V_padded] against targets [B, T]
 * (i32; -100 ignored, as PyTorch's), over the first `vocab` columns only (llm.c's classifier:
 * the padded columns are never scored and get no gradient; amp_xent_options.classes). Drop
 * the logits after it (amp_tensor_drop) when nothing reads them again, as amp_gpt_loss and
 * amp_llama_loss do: the backward then writes their gradient in their place, one [B, T,
 * V_padded] tensor less at its peak (llm.c's classifier). */
amp_status amp_lm_loss(amp_tensor *logits, amp_tensor *targets, int64_t vocab, amp_tensor **loss);

/* nanoGPT's configure_optimizers (Llama trainers use the same): AdamW, betas 0.9 and 0.95, eps
 * 1e-8, lr, weight_decay on the 2-D tensors; the biases, the norms' weights and every other
 * tensor below 2-D in a second group without decay. */
amp_status amp_lm_adamw_create(amp_model *m, float lr, float weight_decay, amp_optimizer **opt);

/* The sampler's generator, splitmix64: every seed, 0 included, gives well-mixed draws from the
 * first on. *state starts as the seed. */
uint64_t amp_lm_rng_next(uint64_t *state);

/* One token drawn from logits [vocab] (host memory; the real vocabulary's, never the padding)
 * over temperature (> 0), only the top_k most likely kept (0: all; ties at the cut stay), as
 * nanoGPT's generate draws; one amp_lm_rng_next of *state per draw. */
amp_status amp_lm_draw(const float *logits, int64_t vocab, float temperature, int top_k,
                       uint64_t *state, int32_t *token);

/* A key/value cache for generation (what Hugging Face's DynamicCache holds): per layer, the keys
 * and values of the positions seen so far, [batch, kv_heads, capacity, head_dim] tensors of the
 * context (made at a layer's first append, in its keys' dtype), so that each new token costs one
 * position's forward instead of the whole window's. A model's cached forward appends each
 * layer's new keys and values, attends over all of them, and advances the cache once. */
typedef struct amp_lm_cache amp_lm_cache;
amp_status amp_lm_cache_create(amp_ctx *ctx, int n_layers, int64_t capacity, amp_lm_cache **out);
void amp_lm_cache_free(amp_lm_cache *c); /* NULL is a no-op */
/* The positions it holds (the next token's position), and emptied for a new sequence. */
int64_t amp_lm_cache_len(const amp_lm_cache *c);
void amp_lm_cache_reset(amp_lm_cache *c);
/* Layer's k and v [batch, kv_heads, t, head_dim] written at positions len .. len + t - 1, and
 * the keys and values of positions 0 .. len + t - 1 into *k_all and *v_all (step tensors). Past
 * the capacity, or another shape than the layer's first append, is refused, the cache
 * unchanged. */
amp_status amp_lm_cache_append(amp_lm_cache *c, int layer, amp_tensor *k, amp_tensor *v,
                               amp_tensor **k_all, amp_tensor **v_all);
/* After every layer appended t positions: len += t. */
amp_status amp_lm_cache_advance(amp_lm_cache *c, int64_t t);

/* The checks every model's cached forward makes before it runs (who: its public name): the
 * cache, idx and logits given, gradients off, idx i32 [batch, t] with t >= 1, and positions
 * len .. len + t - 1 inside the model's `window` positions (its config field `window_name`). */
amp_status amp_lm_cached_check(const char *who, amp_model *m, const amp_lm_cache *c,
                               const amp_tensor *idx, amp_tensor **logits, int64_t window,
                               const char *window_name);

/* Sampling options (nanoGPT's generate): temperature > 0, top_k (0: all), the draws' seed. */
typedef struct amp_lm_sample_opts {
    float temperature;
    int top_k;
    uint64_t seed;
} amp_lm_sample_opts;

/* The generation loop the language models share (amp_gpt_generate, amp_llama_generate call it):
 * n tokens after the prompt into out, each drawn by amp_lm_draw from the last position's logits
 * [1, 1, vocab] that `cached` gives for the newest positions over a cache (the prompt once, then
 * one token at a time), or that `full` gives for the last `window` tokens (nanoGPT's crop), the
 * model in eval mode and gradients off for the call (restored after), the context's step ended
 * after each token (amp_ctx_reset_step). With the cache, prompt and new tokens must fit in the
 * window. */
typedef amp_status (*amp_lm_step_fn)(amp_model *m, amp_lm_cache *c, amp_tensor *idx,
                                     amp_tensor **logits);
typedef struct amp_lm_model {
    const char *name;        /* the public call, for errors */
    amp_model *m;
    int n_layers;
    int64_t vocab, window;   /* window: the positions the model has */
    const char *window_name; /* its config field's name ("block_size", ...), for errors */
    amp_lm_step_fn cached, full;
} amp_lm_model;
amp_status amp_lm_generate(const amp_lm_model *lm, const int32_t *prompt, int64_t n_prompt,
                           int64_t n, const amp_lm_sample_opts *opts, bool use_cache,
                           int32_t *out);

#ifdef __cplusplus
}
#endif
#endif
