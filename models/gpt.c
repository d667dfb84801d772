/* GPT-2 over the public API (amp/models/gpt.h). Each block is a child with its own forward (it
 * can be recomputed: amp_model_set_recompute). The forward fuses what nanoGPT runs as separate
 * ops, with the same values: the attention's residual add with the LayerNorm after it (amp_norm
 * with a residual; AMP_NORM_OUT_FOR_LINEAR, so under O1 the LayerNorm's output comes out in the
 * half type its linear reads and the half branch joins the f32 stream without an f32 copy),
 * c_fc with its GELU (amp_linear_gelu), and q, k, v read where c_attn wrote them (the
 * qkvpacked attention). Each residual branch's output and the two embeddings go back
 * to the step's memory once their add has read them (amp_tensor_drop), as PyTorch frees them
 * with their last reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "amp/models/gpt.h"
#include "amp/status.h"

/* A linear layer of its own (GPT-2's init, which the library's Linear does not draw). */
typedef struct gpt_linear {
    amp_model *m;
    int w, b;
} gpt_linear;

struct gpt;
/* A block "transformer.h.<l>": a child with a forward of its own, so that it can be recomputed
 * (amp_model_set_recompute). */
typedef struct gpt_block {
    const struct gpt *g;
    amp_model *m;
    amp_model *ln_1, *ln_2;
    gpt_linear c_attn, attn_proj, c_fc, mlp_proj;
} gpt_block;

typedef struct gpt {
    amp_gpt_config cfg;
    amp_model *wte, *wpe, *ln_f;
    gpt_block *h;          /* [n_layer] */
    amp_tensor *positions; /* i32 [block_size]: 0, 1, ..., made at the first forward */
    bool selective;        /* AMP_RECOMPUTE_SELECTIVE: LayerNorm and GELU outputs again */
    bool last_only;        /* the forward's logits for the last position only */
} gpt;

static const amp_norm_opts LN_FOR_LINEAR = {.kind = AMP_NORM_LAYER, .eps = 1e-5f,
                                            .out = AMP_NORM_OUT_FOR_LINEAR};

static void gpt_free_user(void *user) {
    gpt *g = user;
    if (!g) return;
    amp_tensor_free(g->positions);
    free(g->h);
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

/* A linear layer reading h, a LayerNorm's output or c_fc's GELU output, which goes back to the
 * step's memory after it: under selective recomputation the linear does not keep h (its
 * backward writes it again from the LayerNorm's input and statistics, or from c_fc's
 * pre-activation: llm.c's -r 2 and -r 1), so h's memory is free at once. */
static amp_status gpt_apply_norm_out(const gpt *g, const gpt_linear *l, amp_tensor *h, bool gelu,
                                     amp_tensor **y) {
    amp_linear_opts o = {.activation = gelu ? AMP_LINEAR_GELU_TANH : AMP_LINEAR_NONE,
                         .recompute_input = g->selective};
    amp_status s = amp_linear_ex(h, amp_model_param(l->m, l->w), amp_model_param(l->m, l->b), &o,
                                 y);
    return s == AMP_OK ? amp_tensor_drop(h) : s;
}

/* Causal self-attention of h [B, T, C]: c_attn's output [B, T, 3C] read in place as q, k and v
 * ([B, T, 3, nh, hs], the qkvpacked attention), y [B, T, nh, hs] read as [B, T, C] by c_proj:
 * nanoGPT's split, view and transposes without their copies. */
static amp_status gpt_attention(const gpt *g, const gpt_block *blk, bool training, amp_tensor *h,
                                amp_tensor **out) {
    int64_t B = amp_tensor_dim(h, 0), T = amp_tensor_dim(h, 1), C = g->cfg.n_embd;
    int64_t nh = g->cfg.n_head, hs = C / nh;
    amp_tensor *qkv, *y;
    amp_status s = gpt_apply_norm_out(g, &blk->c_attn, h, false, &qkv);
    if (s == AMP_OK) s = amp_reshape(qkv, 5, (int64_t[]){B, T, 3, nh, hs}, &qkv);
    amp_attention_options ao = {.causal = true, .dropout_p = g->cfg.dropout, .training = training};
    if (s == AMP_OK) s = amp_scaled_dot_product_attention_qkvpacked(qkv, &ao, &y);
    if (s == AMP_OK) s = amp_reshape(y, 3, (int64_t[]){B, T, C}, &y);
    if (s == AMP_OK) s = gpt_apply(&blk->attn_proj, y, false, &y);
    if (s == AMP_OK) s = gpt_dropout(g, training, y, out);
    return s;
}

/* nanoGPT's Block of x [B, T, C]: x + attn(ln_1(x)), then that + mlp(ln_2(that)), the first
 * residual add fused with ln_2. */
static amp_status gpt_block_forward(amp_model *self, amp_tensor *const *in, int n_in,
                                    amp_tensor **out) {
    const gpt_block *blk = amp_model_user(self);
    const gpt *g = blk->g;
    if (n_in != 1 || !in[0])
        return amp_error(AMP_ERR_INVALID_ARG, "GPT block forward (amp_model_forward): one input, "
                         "the residual stream [batch, seq, n_embd]");
    bool training = amp_model_is_training(self);
    amp_tensor *w1 = amp_model_param(blk->ln_1, 0), *b1 = amp_model_param(blk->ln_1, 1);
    amp_tensor *w2 = amp_model_param(blk->ln_2, 0), *b2 = amp_model_param(blk->ln_2, 1);
    amp_tensor *x = in[0], *h, *a, *r;
    amp_status s = amp_norm(x, NULL, w1, b1, &LN_FOR_LINEAR, NULL, &h);
    if (s == AMP_OK) s = gpt_attention(g, blk, training, h, &a);
    if (s == AMP_OK) s = amp_norm(x, a, w2, b2, &LN_FOR_LINEAR, &x, &h);
    if (s == AMP_OK) s = amp_tensor_drop(a);
    if (s == AMP_OK) s = gpt_apply_norm_out(g, &blk->c_fc, h, true, &h);
    if (s == AMP_OK) s = gpt_apply_norm_out(g, &blk->mlp_proj, h, false, &h);
    if (s == AMP_OK) s = gpt_dropout(g, training, h, &r);
    if (s == AMP_OK) s = amp_add(x, r, out);
    if (s == AMP_OK) s = amp_tensor_drop(r); /* the add's backward reads neither */
    return s;
}

static amp_status gpt_positions(gpt *g, amp_ctx *ctx) {
    if (g->positions) return AMP_OK;
    int32_t *pos = malloc((size_t)g->cfg.block_size * sizeof *pos);
    if (!pos) return amp_error(AMP_ERR_OOM, "GPT forward: out of host memory");
    for (int i = 0; i < g->cfg.block_size; i++) pos[i] = i;
    amp_status s = amp_tensor_from_host(ctx, AMP_I32, 1, (int64_t[]){g->cfg.block_size}, pos,
                                        &g->positions);
    free(pos);
    return s;
}

/* logits [B, T, vocab_padded] of idx [B, T] (i32 token ids, T <= block_size). */
static amp_status gpt_forward(amp_model *self, amp_tensor *const *in, int n_in, amp_tensor **out) {
    gpt *g = amp_model_user(self);
    if (n_in != 1 || !in[0] || amp_tensor_ndim(in[0]) != 2 || amp_tensor_dtype(in[0]) != AMP_I32)
        return amp_error(AMP_ERR_SHAPE, "GPT forward (amp_model_forward): the input must be one "
                         "i32 tensor of token ids [batch, seq]");
    amp_tensor *idx = in[0];
    int64_t T = amp_tensor_dim(idx, 1);
    if (T < 1 || T > g->cfg.block_size)
        return amp_error(AMP_ERR_SHAPE, "GPT forward (amp_model_forward): sequence length %lld "
                         "is outside [1, block_size = %d]", (long long)T, g->cfg.block_size);
    bool training = amp_model_is_training(self);
    amp_status s = gpt_positions(g, amp_model_ctx(self));
    amp_tensor *tok, *pos_ids, *pos, *x, *h;
    if (s == AMP_OK) s = amp_embedding(idx, amp_model_param(g->wte, 0), &tok);
    if (s == AMP_OK) s = amp_narrow(g->positions, 0, 0, T, &pos_ids);
    if (s == AMP_OK) s = amp_embedding(pos_ids, amp_model_param(g->wpe, 0), &pos);
    if (s == AMP_OK) s = amp_add(tok, pos, &x);
    if (s == AMP_OK) s = amp_tensor_drop(tok); /* the add's backward reads neither */
    if (s == AMP_OK) s = amp_tensor_drop(pos);
    if (s == AMP_OK) s = gpt_dropout(g, training, x, &x);
    for (int l = 0; l < g->cfg.n_layer && s == AMP_OK; l++) {
        amp_tensor *x_in = x;
        s = amp_model_forward(g->h[l].m, x_in, &x);
        if (s == AMP_OK) s = amp_tensor_drop(x_in); /* read by the block's nodes only */
    }
    amp_tensor *wf = amp_model_param(g->ln_f, 0), *bf = amp_model_param(g->ln_f, 1);
    if (s == AMP_OK) s = amp_norm(x, NULL, wf, bf, &LN_FOR_LINEAR, NULL, &h);
    if (s == AMP_OK && g->last_only && T > 1) s = amp_narrow(h, 1, T - 1, 1, &h);
    if (s == AMP_OK) s = amp_linear(h, amp_model_param(g->wte, 0), NULL, out); /* the tied head */
    return s;
}

/* The attention branch of the new positions h [B, t, C] over the cache: c_attn's q, k and v
 * split and permuted to [B, nh, t, hs], k and v appended, the fused attention over every key
 * with the causal mask aligned to the end, c_proj. */
static amp_status gpt_attention_cached(const gpt *g, const gpt_block *blk, int layer,
                                       amp_lm_cache *c, amp_tensor *h, amp_tensor **out) {
    int64_t B = amp_tensor_dim(h, 0), T = amp_tensor_dim(h, 1), C = g->cfg.n_embd;
    int64_t nh = g->cfg.n_head, hs = C / nh;
    amp_tensor *qkv, *part, *heads[3], *ka, *va, *y;
    amp_status s = gpt_apply(&blk->c_attn, h, false, &qkv);
    if (s == AMP_OK) s = amp_reshape(qkv, 4, (int64_t[]){B, T, 3 * nh, hs}, &qkv);
    for (int i = 0; i < 3 && s == AMP_OK; i++) {
        s = amp_narrow(qkv, 2, i * nh, nh, &part);
        if (s == AMP_OK) s = amp_permute(part, (const int[]){0, 2, 1, 3}, &heads[i]);
    }
    if (s == AMP_OK) s = amp_lm_cache_append(c, layer, heads[1], heads[2], &ka, &va);
    amp_attention_options ao = {.causal = true};
    if (s == AMP_OK) s = amp_scaled_dot_product_attention(heads[0], ka, va, &ao, &y);
    if (s == AMP_OK) s = amp_permute(y, (const int[]){0, 2, 1, 3}, &y);
    if (s == AMP_OK) s = amp_reshape(y, 3, (int64_t[]){B, T, C}, &y);
    if (s == AMP_OK) s = gpt_apply(&blk->attn_proj, y, false, out);
    return s;
}

/* m's GPT, or NULL with the reason for `who`. */
static gpt *gpt_of(const char *who, const amp_model *m) {
    if (!m || amp_model_forward_fn(m) != gpt_forward) {
        amp_error(AMP_ERR_INVALID_ARG, "%s: the model is %s, not a GPT of amp_gpt_create", who,
                  m ? "another model" : "NULL");
        return NULL;
    }
    return amp_model_user(m);
}

amp_status amp_gpt_config_of(const amp_model *m, amp_gpt_config *cfg) {
    gpt *g = gpt_of(__func__, m);
    if (!g) return AMP_ERR_INVALID_ARG;
    if (!cfg) return amp_error(AMP_ERR_INVALID_ARG, "%s: argument 'cfg' is NULL", __func__);
    *cfg = g->cfg;
    return AMP_OK;
}

amp_status amp_gpt_forward_last(amp_model *m, amp_tensor *idx, amp_tensor **logits) {
    gpt *g = gpt_of(__func__, m);
    if (!g) return AMP_ERR_INVALID_ARG;
    g->last_only = true;
    amp_status s = amp_model_forward(m, idx, logits);
    g->last_only = false;
    return s;
}

amp_status amp_gpt_loss(amp_model *m, amp_tensor *idx, amp_tensor *targets, amp_tensor **loss) {
    gpt *g = gpt_of(__func__, m);
    if (!g) return AMP_ERR_INVALID_ARG;
    amp_tensor *logits;
    amp_status s = amp_model_forward(m, idx, &logits);
    if (s == AMP_OK) s = amp_lm_loss(logits, targets, g->cfg.vocab_size, loss);
    /* nobody reads the logits again: the backward writes their gradient in their place */
    return s == AMP_OK ? amp_tensor_drop(logits) : s;
}

int64_t amp_gpt_n_params(const amp_model *m) {
    gpt *g = gpt_of(__func__, m);
    if (!g) return -1;
    return amp_model_numel(m) - (int64_t)g->cfg.block_size * g->cfg.n_embd;
}

double amp_gpt_flops_per_token(const amp_model *m, int64_t T) {
    gpt *g = gpt_of(__func__, m);
    if (!g) return 0.0;
    return 6.0 * (double)amp_gpt_n_params(m) +
           6.0 * (double)g->cfg.n_layer * (double)T * (double)g->cfg.n_embd;
}

static amp_status gpt_check(const amp_gpt_config *cfg) {
    static const char who[] = "amp_gpt_create";
    if (cfg->n_layer < 1)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: n_layer %d, want >= 1", who, cfg->n_layer);
    if (cfg->n_head < 1 || cfg->n_embd < 1 || cfg->n_embd % cfg->n_head != 0)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: n_embd %d is not a positive multiple of "
                         "n_head %d", who, cfg->n_embd, cfg->n_head);
    if (cfg->block_size < 1 || cfg->vocab_size < 1)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: block_size %d and vocab_size %d must be "
                         "positive", who, cfg->block_size, cfg->vocab_size);
    if (!(cfg->dropout >= 0.0f && cfg->dropout < 1.0f))
        return amp_error(AMP_ERR_INVALID_ARG, "%s: dropout %g is outside [0, 1)", who,
                         (double)cfg->dropout);
    return AMP_OK;
}

/* The tree under *out, nanoGPT's names in its order (the init's draws follow it). */
static amp_status gpt_make_tree(gpt *g, amp_model *root) {
    const amp_gpt_config *cfg = &g->cfg;
    int64_t C = cfg->n_embd, V = amp_lm_padded_vocab(cfg->vocab_size);
    float proj_std = 0.02f / sqrtf(2.0f * (float)cfg->n_layer);
    amp_model *tr, *hs, *blk, *attn, *mlp;
    int unused;
    amp_status s = gpt_node(root, "transformer", &tr);
    if (s == AMP_OK) s = gpt_leaf(tr, "wte", V, C, AMP_INIT_NORMAL_OF(0.0f, 0.02f), &g->wte, &unused, NULL);
    if (s == AMP_OK) s = gpt_leaf(tr, "wpe", cfg->block_size, C, AMP_INIT_NORMAL_OF(0.0f, 0.02f), &g->wpe, &unused, NULL);
    if (s == AMP_OK) s = gpt_node(tr, "h", &hs);
    for (int l = 0; l < cfg->n_layer && s == AMP_OK; l++) {
        gpt_block *b = &g->h[l];
        char name[16];
        snprintf(name, sizeof name, "%d", l);
        b->g = g;
        s = amp_model_create(amp_model_ctx(hs), gpt_block_forward, b, NULL, &blk);
        if (s == AMP_OK) {
            s = amp_model_add_child(hs, name, blk);
            if (s != AMP_OK) amp_model_free(blk);
        }
        b->m = blk;
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
    return s;
}

amp_status amp_gpt_create(amp_ctx *ctx, const amp_gpt_config *cfg, amp_model **out) {
    if (!out) return amp_error(AMP_ERR_INVALID_ARG, "amp_gpt_create: argument 'out' is NULL");
    *out = NULL;
    if (!ctx || !cfg)
        return amp_error(AMP_ERR_INVALID_ARG, "amp_gpt_create: ctx and cfg must not be NULL");
    amp_status s = gpt_check(cfg);
    if (s != AMP_OK) return s;
    gpt *g = calloc(1, sizeof *g);
    if (g) g->h = calloc((size_t)cfg->n_layer, sizeof *g->h);
    if (!g || !g->h) {
        gpt_free_user(g);
        return amp_error(AMP_ERR_OOM, "amp_gpt_create: out of host memory");
    }
    g->cfg = *cfg;
    s = amp_model_create(ctx, gpt_forward, g, gpt_free_user, out);
    if (s != AMP_OK) {
        gpt_free_user(g);
        return s;
    }
    s = gpt_make_tree(g, *out);
    if (s != AMP_OK) {
        amp_model_free(*out);
        *out = NULL;
    }
    return s;
}

amp_status amp_gpt_set_recompute(amp_model *m, amp_recompute mode) {
    gpt *g = gpt_of(__func__, m);
    if (!g) return AMP_ERR_INVALID_ARG;
    if (mode == AMP_RECOMPUTE_SELECTIVE) {
        amp_status s = AMP_OK; /* the blocks' own checks (a pending graph) first */
        for (int l = 0; l < g->cfg.n_layer && s == AMP_OK; l++)
            s = amp_model_set_recompute(g->h[l].m, AMP_RECOMPUTE_NONE);
        if (s == AMP_OK) g->selective = true;
        return s;
    }
    amp_status s = AMP_OK;
    for (int l = 0; l < g->cfg.n_layer && s == AMP_OK; l++)
        s = amp_model_set_recompute(g->h[l].m, mode);
    if (s == AMP_OK) g->selective = false;
    return s;
}

amp_status amp_gpt_forward_cached(amp_model *m, amp_lm_cache *c, amp_tensor *idx,
                                  amp_tensor **logits) {
    static const char who[] = "amp_gpt_forward_cached";
    gpt *g = gpt_of(who, m);
    if (!g) return AMP_ERR_INVALID_ARG;
    amp_status s = amp_lm_cached_check(who, m, c, idx, logits, g->cfg.block_size, "block_size");
    if (s != AMP_OK) return s;
    amp_ctx *ctx = amp_model_ctx(m);
    int64_t T = amp_tensor_dim(idx, 1), len = amp_lm_cache_len(c);
    s = gpt_positions(g, ctx);
    amp_tensor *tok, *pos_ids, *pos, *x, *h, *r = NULL, *a;
    if (s == AMP_OK) s = amp_embedding(idx, amp_model_param(g->wte, 0), &tok);
    if (s == AMP_OK) s = amp_narrow(g->positions, 0, len, T, &pos_ids);
    if (s == AMP_OK) s = amp_embedding(pos_ids, amp_model_param(g->wpe, 0), &pos);
    if (s == AMP_OK) s = amp_add(tok, pos, &x);
    for (int l = 0; l < g->cfg.n_layer && s == AMP_OK; l++) {
        const gpt_block *blk = &g->h[l];
        amp_tensor *w1 = amp_model_param(blk->ln_1, 0), *b1 = amp_model_param(blk->ln_1, 1);
        amp_tensor *w2 = amp_model_param(blk->ln_2, 0), *b2 = amp_model_param(blk->ln_2, 1);
        s = amp_norm(x, r, w1, b1, &LN_FOR_LINEAR, &x, &h);
        if (s == AMP_OK) s = gpt_attention_cached(g, blk, l, c, h, &a);
        if (s == AMP_OK) s = amp_norm(x, a, w2, b2, &LN_FOR_LINEAR, &x, &h);
        if (s == AMP_OK) s = gpt_apply(&blk->c_fc, h, true, &h);
        if (s == AMP_OK) s = gpt_apply(&blk->mlp_proj, h, false, &r);
    }
    amp_tensor *wf = amp_model_param(g->ln_f, 0), *bf = amp_model_param(g->ln_f, 1);
    if (s == AMP_OK) s = amp_norm(x, r, wf, bf, &LN_FOR_LINEAR, &x, &h);
    if (s == AMP_OK && T > 1) s = amp_narrow(h, 1, T - 1, 1, &h);
    if (s == AMP_OK) s = amp_linear(h, amp_model_param(g->wte, 0), NULL, logits);
    if (s == AMP_OK) s = amp_lm_cache_advance(c, T);
    return s;
}

static amp_status gpt_step_full(amp_model *m, amp_lm_cache *c, amp_tensor *idx,
                                amp_tensor **logits) {
    (void)c;
    return amp_gpt_forward_last(m, idx, logits);
}

amp_status amp_gpt_generate(amp_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n,
                            const amp_lm_sample_opts *o, bool use_cache, int32_t *out) {
    gpt *g = gpt_of(__func__, m);
    if (!g) return AMP_ERR_INVALID_ARG;
    amp_lm_model lm = {.name = __func__, .m = m, .n_layers = g->cfg.n_layer,
                       .vocab = g->cfg.vocab_size, .window = g->cfg.block_size,
                       .window_name = "block_size", .cached = amp_gpt_forward_cached,
                       .full = gpt_step_full};
    return amp_lm_generate(&lm, prompt, n_prompt, n, o, use_cache, out);
}
