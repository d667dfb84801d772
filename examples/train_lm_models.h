/* What amp-train's language-model loop (train_lm.c) asks of the model it trains, the GPT of
 * models/gpt.c or the Llama of models/llama.c (train_lm_models.c): its shape from the command
 * line and a checkpoint, the model made from it, its starting weights, loss, sample and size,
 * and what a checkpoint carries of it. */
#ifndef AMP_EXAMPLES_TRAIN_LM_MODELS_H
#define AMP_EXAMPLES_TRAIN_LM_MODELS_H

#include <stdbool.h>
#include <stdio.h>

#include "amp/amp.h"
#include "train_args.h"

/* The checkpoint's user metadata key holding the shape: for the GPT nanoGPT's model_args, for
 * the Llama its Hugging Face config.json text. */
#define LM_MODEL_ARGS_KEY "model_args"

typedef struct lm_shape {
    bool llama;
    amp_gpt_config gpt;
    amp_llama_config llama_cfg;
    int64_t vocab, window;                     /* the tokens' vocabulary; the training window T */
    char model_args[AMP_LLAMA_CONFIG_JSON_MAX]; /* saved with each checkpoint */
} lm_shape;

/* The shape of the run: the command line's (for the Llama, --config or --init-weights DIR's
 * config.json, then the field options over it), or, resuming from `from` (else NULL), the
 * checkpoint's, where an option given that differs is refused naming it and both values; `say`
 * (rank 0) writes to `text` the one line for a checkpoint without model_args. */
amp_status lm_shape_resolve(const train_args *a, const char *from, bool say, FILE *text,
                            lm_shape *shape);
/* The model of the shape, unbuilt. */
amp_status lm_model_create(const lm_shape *shape, amp_ctx *ctx, amp_model **out);
/* --recompute: amp_gpt_set_recompute's or amp_llama_set_recompute's. */
amp_status lm_model_set_recompute(const lm_shape *shape, amp_model *m, amp_recompute mode);
/* --init-weights into m after amp_initialize (the masters too): the GPT's safetensors file, the
 * Llama's Hugging Face folder. */
amp_status lm_model_init_weights(const lm_shape *shape, const char *init, amp_model *m,
                                 amp_optimizer *opt);
amp_status lm_model_loss(const lm_shape *shape, amp_model *m, amp_tensor *x, amp_tensor *y,
                         amp_tensor **loss);
/* The library's generation, with the key/value cache when prompt and sample fit in the model's
 * positions, else by full forwards of the last window. */
amp_status lm_model_generate(const lm_shape *shape, amp_model *m, const int32_t *prompt,
                             int64_t n_prompt, int64_t n, const amp_lm_sample_opts *opts,
                             int32_t *out);
int64_t lm_model_n_params(const lm_shape *shape, const amp_model *m);
/* The start line's words for the model ("gpt, 4 layers, ..."). */
void lm_model_describe(const lm_shape *shape, const amp_model *m, char *out, size_t size);
/* After a checkpoint is saved into step folder `dir`: the Llama's config.json beside its
 * model.safetensors, so that the folder is a Hugging Face one. */
amp_status lm_model_saved(const lm_shape *shape, const char *dir);

#endif
