/* GPT-2 written with the model API against the public headers only (nanoGPT's `GPT` class in C):
 * token and position embeddings, pre-LayerNorm blocks of causal self-attention and a GELU(tanh)
 * MLP with residual adds, a final LayerNorm, and a head tied to the token embedding. amp-train
 * trains it (`--model gpt`), amp-bench measures it, tests/unit/test_gpt.c holds it against
 * PyTorch.
 *
 * Names are nanoGPT's, so a checkpoint's model.safetensors loads into that class:
 *   transformer.wte.weight [vocab_padded, C]   transformer.wpe.weight [block_size, C]
 *   transformer.h.<l>.ln_1.{weight,bias}        transformer.h.<l>.attn.c_attn.{weight [3C, C],bias}
 *   transformer.h.<l>.attn.c_proj.{weight,bias} transformer.h.<l>.ln_2.{weight,bias}
 *   transformer.h.<l>.mlp.c_fc.{weight [4C, C],bias} transformer.h.<l>.mlp.c_proj.{weight,bias}
 *   transformer.ln_f.{weight,bias}
 * lm_head.weight is wte.weight itself (tied), stored once. Initialisation is GPT-2's (nanoGPT's
 * _init_weights): every linear and embedding weight N(0, 0.02), the residual projections
 * (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorms 1 and 0.
 *
 * The forward fuses what nanoGPT runs as separate ops, with the same values: each residual add
 * with the LayerNorm after it (amp_add_layer_norm_for_linear, the next block's ln_1 included;
 * under O1 the LayerNorm's output comes out in the half type its linear reads and the half branch
 * joins the f32 stream without an f32 copy), c_fc with its GELU (amp_linear_gelu), and q, k, v
 * read where c_attn wrote them (the qkvpacked attention). Each residual branch's output and the
 * two embeddings go back to the step's memory once their add has read them (amp_tensor_drop), as
 * PyTorch frees them with their last reference. The vocabulary is
 * padded to a multiple of 64 for the GEMMs (50257 -> 50304, as nanoGPT and llm.c pad it); the
 * padding is never scored (the loss is over the real vocabulary's columns, as llm.c's classifier
 * computes it) nor drawn by the sampler. */
#ifndef EXAMPLES_GPT_MODEL_H
#define EXAMPLES_GPT_MODEL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "amp/amp.h"

#define GPT_MAX_LAYERS 64

typedef struct gpt_config {
    int n_layer, n_head, n_embd, block_size;
    int vocab_size; /* the tokens' (256 for bytes, 50257 for GPT-2's BPE) */
    float dropout;  /* embeddings, attention probabilities, residual branches */
} gpt_config;

static inline int gpt_padded_vocab(int vocab) { return (vocab + 63) / 64 * 64; }

/* A linear layer of its own (GPT-2's init, which the library's Linear does not draw). */
typedef struct gpt_linear {
    amp_model *m;
    int w, b;
} gpt_linear;

typedef struct gpt_block {
    amp_model *ln_1, *ln_2;
    gpt_linear c_attn, attn_proj, c_fc, mlp_proj;
} gpt_block;

typedef struct gpt {
    gpt_config cfg;
    amp_model *wte, *wpe, *ln_f;
    gpt_block h[GPT_MAX_LAYERS];
    amp_tensor *positions; /* i32 [block_size]: 0, 1, ..., made at the first forward */
    bool last_only;        /* the forward's logits for the last position only (gpt_forward_last) */
} gpt;

static void gpt_free_user(void *user) {
    gpt *g = user;
    if (!g) return;
    amp_tensor_free(g->positions);
    free(g);
}

/* A model with parameters only (its parent runs them): name, one weight [rows, cols] drawn from
 * init, and a zero bias [rows] unless bias_index is NULL. */
static amp_status gpt_leaf(amp_model *parent, const char *name, int64_t rows, int64_t cols,
                           amp_init init, amp_model **m, int *w, int *bias_index) {
    amp_status s = amp_model_create(amp_model_ctx(parent), NULL, NULL, NULL, m);
    if (s == AMP_OK) s = amp_model_register_param(*m, "weight", 2, (int64_t[]){rows, cols}, init, w);
    if (s == AMP_OK && bias_index)
        s = amp_model_register_param(*m, "bias", 1, (int64_t[]){rows}, AMP_INIT_ZERO_VALUES,
                                     bias_index);
    if (s == AMP_OK) s = amp_model_add_child(parent, name, *m);
    if (s != AMP_OK) amp_model_free(*m); /* not the parent's: it goes here */
    return s;
}

static amp_status gpt_linear_make(amp_model *parent, const char *name, int64_t out, int64_t in,
                                  float std, gpt_linear *l) {
    return gpt_leaf(parent, name, out, in, AMP_INIT_NORMAL_OF(0.0f, std), &l->m, &l->w, &l->b);
}

/* A container (no forward of its own) under parent. */
static amp_status gpt_node(amp_model *parent, const char *name, amp_model **m) {
    amp_status s = amp_model_create(amp_model_ctx(parent), NULL, NULL, NULL, m);
    if (s != AMP_OK) return s;
    s = amp_model_add_child(parent, name, *m);
    if (s != AMP_OK) amp_model_free(*m);
    return s;
}

static amp_status gpt_norm(amp_model *parent, const char *name, int64_t c, amp_model **m) {
    amp_status s = amp_module_layer_norm(amp_model_ctx(parent), c, 1e-5f, true, m);
    if (s != AMP_OK) return s;
    s = amp_model_add_child(parent, name, *m);
    if (s != AMP_OK) amp_model_free(*m);
    return s;
}

/* y = dropout(x); x, which the dropout's backward does not read, is dropped when y is new. */
static amp_status gpt_dropout(const gpt *g, bool training, amp_tensor *x, amp_tensor **y) {
    amp_status s = amp_dropout(x, g->cfg.dropout, training, y);
    return s == AMP_OK && *y != x ? amp_tensor_drop(x) : s;
}

static amp_status gpt_apply(const gpt_linear *l, amp_tensor *x, bool gelu, amp_tensor **y) {
    amp_tensor *w = amp_model_param(l->m, l->w), *b = amp_model_param(l->m, l->b);
    return gelu ? amp_linear_gelu(x, w, b, true, y) : amp_linear(x, w, b, y);
}

/* Causal self-attention of h [B, T, C]: c_attn's output [B, T, 3C] read in place as q, k and v
 * ([B, T, 3, nh, hs], the qkvpacked attention), y [B, T, nh, hs] read as [B, T, C] by c_proj:
 * nanoGPT's split, view and transposes without their copies. */
static amp_status gpt_attention(const gpt *g, const gpt_block *blk, bool training, amp_tensor *h,
                                amp_tensor **out) {
    int64_t B = amp_tensor_dim(h, 0), T = amp_tensor_dim(h, 1), C = g->cfg.n_embd;
    int64_t nh = g->cfg.n_head, hs = C / nh;
    amp_tensor *qkv, *y;
    amp_status s = gpt_apply(&blk->c_attn, h, false, &qkv);
    if (s == AMP_OK) s = amp_reshape(qkv, 5, (int64_t[]){B, T, 3, nh, hs}, &qkv);
    amp_attention_options ao = {.causal = true, .dropout_p = g->cfg.dropout, .training = training};
    if (s == AMP_OK) s = amp_scaled_dot_product_attention_qkvpacked(qkv, &ao, &y);
    if (s == AMP_OK) s = amp_reshape(y, 3, (int64_t[]){B, T, C}, &y);
    if (s == AMP_OK) s = gpt_apply(&blk->attn_proj, y, false, &y);
    if (s == AMP_OK) s = gpt_dropout(g, training, y, out);
    return s;
}

/* logits [B, T, vocab_padded] of idx [B, T] (i32 token ids, T <= block_size). */
static amp_status gpt_forward(amp_model *self, amp_tensor *const *in, int n_in, amp_tensor **out) {
    gpt *g = amp_model_user(self);
    if (n_in != 1 || !in[0] || amp_tensor_ndim(in[0]) != 2 || amp_tensor_dtype(in[0]) != AMP_I32)
        return amp_error(AMP_ERR_SHAPE, "GPT: the input must be one i32 tensor of token ids "
                         "[batch, seq]");
    amp_tensor *idx = in[0];
    int64_t T = amp_tensor_dim(idx, 1);
    if (T < 1 || T > g->cfg.block_size)
        return amp_error(AMP_ERR_SHAPE, "GPT: sequence length %lld is outside [1, block_size = "
                         "%d]", (long long)T, g->cfg.block_size);
    bool training = amp_model_is_training(self);
    amp_ctx *ctx = amp_model_ctx(self);
    amp_status s = AMP_OK;
    if (!g->positions) {
        int32_t *pos = malloc((size_t)g->cfg.block_size * sizeof *pos);
        if (!pos) return amp_error(AMP_ERR_OOM, "GPT: out of host memory");
        for (int i = 0; i < g->cfg.block_size; i++) pos[i] = i;
        s = amp_tensor_from_host(ctx, AMP_I32, 1, (int64_t[]){g->cfg.block_size}, pos,
                                 &g->positions);
        free(pos);
        if (s != AMP_OK) return s;
    }
    amp_tensor *tok, *pos_ids, *pos, *x, *h, *r = NULL, *a;
    s = amp_embedding(idx, amp_model_param(g->wte, 0), &tok);
    if (s == AMP_OK) s = amp_narrow(g->positions, 0, 0, T, &pos_ids);
    if (s == AMP_OK) s = amp_embedding(pos_ids, amp_model_param(g->wpe, 0), &pos);
    if (s == AMP_OK) s = amp_add(tok, pos, &x);
    if (s == AMP_OK) s = amp_tensor_drop(tok); /* the add's backward reads neither */
    if (s == AMP_OK) s = amp_tensor_drop(pos);
    if (s == AMP_OK) s = gpt_dropout(g, training, x, &x);
    for (int l = 0; l < g->cfg.n_layer && s == AMP_OK; l++) {
        const gpt_block *blk = &g->h[l];
        amp_tensor *w1 = amp_model_param(blk->ln_1, 0), *b1 = amp_model_param(blk->ln_1, 1);
        amp_tensor *w2 = amp_model_param(blk->ln_2, 0), *b2 = amp_model_param(blk->ln_2, 1);
        /* x = x + mlp(...) of the block before, fused with this block's ln_1 */
        s = r ? amp_add_layer_norm_for_linear(x, r, w1, b1, 1e-5f, &x, &h)
              : amp_layer_norm_for_linear(x, w1, b1, 1e-5f, &h);
        if (s == AMP_OK && r) s = amp_tensor_drop(r);
        if (s == AMP_OK) s = gpt_attention(g, blk, training, h, &a);
        if (s == AMP_OK) s = amp_add_layer_norm_for_linear(x, a, w2, b2, 1e-5f, &x, &h);
        if (s == AMP_OK) s = amp_tensor_drop(a);
        if (s == AMP_OK) s = gpt_apply(&blk->c_fc, h, true, &h);
        if (s == AMP_OK) s = gpt_apply(&blk->mlp_proj, h, false, &h);
        if (s == AMP_OK) s = gpt_dropout(g, training, h, &r);
    }
    amp_tensor *wf = amp_model_param(g->ln_f, 0), *bf = amp_model_param(g->ln_f, 1);
    if (s == AMP_OK)
        s = r ? amp_add_layer_norm_for_linear(x, r, wf, bf, 1e-5f, &x, &h)
              : amp_layer_norm_for_linear(x, wf, bf, 1e-5f, &h);
    if (s == AMP_OK && r) s = amp_tensor_drop(r);
    if (s == AMP_OK && g->last_only && T > 1) s = amp_narrow(h, 1, T - 1, 1, &h);
    if (s == AMP_OK) s = amp_linear(h, amp_model_param(g->wte, 0), NULL, out); /* the tied head */
    return s;
}

/* The logits of the last position of idx [B, T] only, [B, 1, vocab_padded]: what sampling reads,
 * with the head's GEMM on one row of each sequence instead of T (nanoGPT's inference path,
 * lm_head(x[:, [-1], :])); the same values as that row of the whole forward's logits. */
static inline amp_status gpt_forward_last(amp_model *m, amp_tensor *idx, amp_tensor **logits) {
    gpt *g = amp_model_user(m);
    g->last_only = true;
    amp_status s = amp_model_forward(m, idx, logits);
    g->last_only = false;
    return s;
}

/* The GPT of cfg, unbuilt (amp_model_build draws GPT-2's init from the context's RNG). */
static amp_status gpt_create(amp_ctx *ctx, const gpt_config *cfg, amp_model **out) {
    if (cfg->n_layer < 1 || cfg->n_layer > GPT_MAX_LAYERS)
        return amp_error(AMP_ERR_INVALID_ARG, "GPT: n_layer %d is outside [1, %d]", cfg->n_layer,
                         GPT_MAX_LAYERS);
    if (cfg->n_head < 1 || cfg->n_embd < 1 || cfg->n_embd % cfg->n_head != 0)
        return amp_error(AMP_ERR_INVALID_ARG, "GPT: n_embd %d is not a positive multiple of "
                         "n_head %d", cfg->n_embd, cfg->n_head);
    if (cfg->block_size < 1 || cfg->vocab_size < 1)
        return amp_error(AMP_ERR_INVALID_ARG, "GPT: block_size %d and vocab_size %d must be "
                         "positive", cfg->block_size, cfg->vocab_size);
    if (!(cfg->dropout >= 0.0f && cfg->dropout < 1.0f))
        return amp_error(AMP_ERR_INVALID_ARG, "GPT: dropout %g is outside [0, 1)",
                         (double)cfg->dropout);
    gpt *g = calloc(1, sizeof *g);
    if (!g) return amp_error(AMP_ERR_OOM, "GPT: out of host memory");
    g->cfg = *cfg;
    amp_status s = amp_model_create(ctx, gpt_forward, g, gpt_free_user, out);
    if (s != AMP_OK) {
        free(g);
        return s;
    }
    int64_t C = cfg->n_embd, V = gpt_padded_vocab(cfg->vocab_size);
    float proj_std = 0.02f / sqrtf(2.0f * (float)cfg->n_layer);
    amp_model *tr, *hs, *blk, *attn, *mlp;
    int unused;
    s = gpt_node(*out, "transformer", &tr);
    if (s == AMP_OK) s = gpt_leaf(tr, "wte", V, C, AMP_INIT_NORMAL_OF(0.0f, 0.02f), &g->wte, &unused, NULL);
    if (s == AMP_OK) s = gpt_leaf(tr, "wpe", cfg->block_size, C, AMP_INIT_NORMAL_OF(0.0f, 0.02f), &g->wpe, &unused, NULL);
    if (s == AMP_OK) s = gpt_node(tr, "h", &hs);
    for (int l = 0; l < cfg->n_layer && s == AMP_OK; l++) {
        gpt_block *b = &g->h[l];
        char name[16];
        snprintf(name, sizeof name, "%d", l);
        s = gpt_node(hs, name, &blk);
        if (s == AMP_OK) s = gpt_norm(blk, "ln_1", C, &b->ln_1);
        if (s == AMP_OK) s = gpt_node(blk, "attn", &attn);
        if (s == AMP_OK) s = gpt_linear_make(attn, "c_attn", 3 * C, C, 0.02f, &b->c_attn);
        if (s == AMP_OK) s = gpt_linear_make(attn, "c_proj", C, C, proj_std, &b->attn_proj);
        if (s == AMP_OK) s = gpt_norm(blk, "ln_2", C, &b->ln_2);
        if (s == AMP_OK) s = gpt_node(blk, "mlp", &mlp);
        if (s == AMP_OK) s = gpt_linear_make(mlp, "c_fc", 4 * C, C, 0.02f, &b->c_fc);
        if (s == AMP_OK) s = gpt_linear_make(mlp, "c_proj", C, 4 * C, proj_std, &b->mlp_proj);
    }
    if (s == AMP_OK) s = gpt_norm(tr, "ln_f", C, &g->ln_f);
    if (s != AMP_OK) {
        amp_model_free(*out);
        *out = NULL;
    }
    return s;
}

/* The mean cross-entropy of the next tokens: logits of idx [B, T] against targets [B, T] (i32;
 * -100 ignored, as PyTorch's), over the real vocabulary: the padded columns are never scored
 * (llm.c's classifier; amp_xent_options.classes). */
static inline amp_status gpt_loss(amp_model *m, amp_tensor *idx, amp_tensor *targets, amp_tensor **loss) {
    const gpt *g = amp_model_user(m);
    amp_tensor *logits, *flat_t;
    int64_t rows = amp_tensor_numel(idx);
    amp_status s = amp_model_forward(m, idx, &logits);
    if (s == AMP_OK) s = amp_reshape(logits, 2, (int64_t[]){rows, amp_tensor_dim(logits, 2)}, &logits);
    if (s == AMP_OK) s = amp_reshape(targets, 1, (int64_t[]){rows}, &flat_t);
    amp_xent_options o = amp_xent_defaults();
    o.classes = g->cfg.vocab_size;
    return s == AMP_OK ? amp_cross_entropy_ex(logits, flat_t, &o, loss) : s;
}

static inline bool gpt_below_2d(const char *name, const amp_tensor *p, void *user) {
    (void)name, (void)user;
    return amp_tensor_ndim(p) < 2;
}

/* nanoGPT's configure_optimizers: AdamW (betas 0.9 and 0.95, eps 1e-8) at lr with weight_decay
 * on the 2-D tensors, the biases, LayerNorms and nothing else in a group without decay. */
static inline amp_status gpt_adamw_create(amp_model *m, float lr, float weight_decay,
                                          amp_optimizer **opt) {
    amp_adam_opts ao = {.lr = lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = weight_decay, .decoupled = true, .exact = true};
    amp_status s = amp_adam_create(m, &ao, opt);
    if (s == AMP_OK)
        s = amp_optimizer_add_group(*opt, gpt_below_2d, NULL, &(amp_param_group_opts){lr, 0.0f},
                                    NULL);
    if (s != AMP_OK) {
        amp_optimizer_free(*opt);
        *opt = NULL;
    }
    return s;
}

/* The sampler's generator, splitmix64: every seed, 0 included, gives well-mixed draws from the
 * first on. */
static inline uint64_t gpt_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One token drawn from logits [vocab] (the real vocabulary's: the padding is never drawn) over
 * temperature, only the top_k most likely kept (0: all; ties at the cut stay), as nanoGPT's
 * generate draws; *state is gpt_rng_next's, p scratch of vocab floats. */
static inline int32_t gpt_draw(const float *logits, int64_t vocab, float temperature, int top_k,
                               uint64_t *state, float *p) {
    float kth = -INFINITY;
    if (top_k > 0 && top_k < vocab) { /* the k-th largest logit: the cut */
        for (int64_t i = 0; i < vocab; i++) p[i] = logits[i];
        for (int k = 0; k < top_k; k++) {
            int64_t best = 0;
            for (int64_t i = 1; i < vocab; i++) best = p[i] > p[best] ? i : best;
            kth = p[best];
            p[best] = -INFINITY;
        }
    }
    double mx = -INFINITY, total = 0;
    for (int64_t i = 0; i < vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int64_t i = 0; i < vocab; i++) {
        p[i] = logits[i] >= kth ? (float)exp((logits[i] - mx) / temperature) : 0.0f;
        total += p[i];
    }
    double u = (double)(gpt_rng_next(state) >> 11) * 0x1p-53 * total, acc = 0;
    for (int64_t i = 0; i < vocab; i++)
        if ((acc += p[i]) > u) return (int32_t)i;
    return (int32_t)(vocab - 1);
}

/* Parameters without the position embedding (nanoGPT's get_num_params), and the model FLOPs of
 * one token's forward and backward: 6 N for the GEMMs plus the attention's 6 L T C (12 L T C
 * non-causal halved by the mask), PaLM's accounting as nanoGPT's estimate_mfu writes it. */
static inline int64_t gpt_n_params(const amp_model *m, const gpt_config *cfg) {
    return amp_model_numel(m) - (int64_t)cfg->block_size * cfg->n_embd;
}
static inline double gpt_flops_per_token(const amp_model *m, const gpt_config *cfg, int64_t T) {
    return 6.0 * (double)gpt_n_params(m, cfg) +
           6.0 * (double)cfg->n_layer * (double)T * (double)cfg->n_embd;
}

#endif
