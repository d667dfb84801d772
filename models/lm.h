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
 * the padded columns are never scored and get no gradient; amp_xent_options.classes). */
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

#ifdef __cplusplus
}
#endif
#endif
