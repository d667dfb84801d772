/* Llama over the public API (amp/models/llama.h), Hugging Face's modeling_llama step for step:
 *   h = embed_tokens(idx)
 *   per layer: x = input_layernorm(h); q, k, v = q_proj(x), k_proj(x), v_proj(x);
 *              q, k = rope(q), rope(k); a = o_proj(attention(q, k, v, causal, grouped));
 *              h = h + a; x = post_attention_layernorm(h);
 *              h = h + down_proj(silu(gate_proj(x)) * up_proj(x))
 *   logits = lm_head(norm(h)).
 * Each decoder layer is a child with its own forward (it can be recomputed: amp_model_set_
 * recompute). Fused where the values allow: the attention's residual add with the RMSNorm after
 * it (amp_norm with a residual; AMP_NORM_OUT_FOR_LINEAR, so under O1 the norm's output comes
 * out in the half type its projections read), q, k and v as one GEMM over
 * the three weights joined, its output the packed [B, T, heads + 2 kv_heads, head_dim], rotated
 * in one amp_rope call (v copied) and read in place by the grouped qkvpacked attention, and the MLP's gate and up projections with the SwiGLU
 * (amp_linear_swiglu: one GEMM, gate_proj and up_proj being consecutive parameters). Each
 * residual branch goes back to the step's memory once its add has read it (amp_tensor_drop). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/models/llama.h"
#include "amp/status.h"
#include "amp/tensor.h"

typedef struct llama_linear {
    amp_model *m;
    int w, b; /* b -1: no bias */
} llama_linear;

struct llama;
/* A decoder layer "model.layers.<i>": a child with a forward of its own, so that it can be
 * recomputed (amp_model_set_recompute). */
typedef struct llama_layer {
    const struct llama *l;
    amp_model *m;
    amp_model *input_layernorm, *post_attention_layernorm;
    llama_linear q, k, v, o, gate, up, down;
} llama_layer;

typedef struct llama {
    amp_llama_config cfg;
    amp_model *embed, *norm, *lm_head; /* lm_head NULL when tied */
    llama_layer *layers;               /* [num_hidden_layers] */
    amp_tensor *rope;                  /* the cos/sin table of max_position_embeddings */
    bool selective; /* AMP_RECOMPUTE_SELECTIVE: both norms' outputs and the SwiGLU's again */
    bool last_only;
} llama;

static const amp_norm_opts *rms_opts(const llama *l, amp_norm_opts *o) {
    *o = (amp_norm_opts){.kind = AMP_NORM_RMS, .eps = l->cfg.rms_norm_eps,
                         .out = AMP_NORM_OUT_FOR_LINEAR};
    return o;
}

static void llama_free_user(void *user) {
    llama *l = user;
    if (!l) return;
    amp_tensor_free(l->rope);
    free(l->layers);
    free(l);
}

static amp_status llama_node(amp_model *parent, const char *name, amp_model **m) {
    amp_status s = amp_model_create(amp_model_ctx(parent), NULL, NULL, NULL, m);
    if (s != AMP_OK) return s;
    s = amp_model_add_child(parent, name, *m);
    if (s != AMP_OK) amp_model_free(*m);
    return s;
}

/* A linear layer's parameters under parent.name: weight [out, in] N(0, std), bias zeros. */
static amp_status llama_linear_make(amp_model *parent, const char *name, int64_t out, int64_t in,
                                    bool bias, float std, llama_linear *l) {
    amp_status s = amp_model_create(amp_model_ctx(parent), NULL, NULL, NULL, &l->m);
    l->b = -1;
    if (s == AMP_OK)
        s = amp_model_register_param(l->m, "weight", 2, (int64_t[]){out, in},
                                     AMP_INIT_NORMAL_OF(0.0f, std), &l->w);
    if (s == AMP_OK && bias)
        s = amp_model_register_param(l->m, "bias", 1, (int64_t[]){out}, AMP_INIT_ZERO_VALUES, &l->b);
    if (s == AMP_OK) s = amp_model_add_child(parent, name, l->m);
    if (s != AMP_OK) amp_model_free(l->m);
    return s;
}

static amp_status llama_norm(amp_model *parent, const char *name, const llama *l, amp_model **m) {
    amp_status s = amp_module_rms_norm(amp_model_ctx(parent), l->cfg.hidden_size,
                                       l->cfg.rms_norm_eps, m);
    if (s != AMP_OK) return s;
    s = amp_model_add_child(parent, name, *m);
    if (s != AMP_OK) amp_model_free(*m);
    return s;
}

static amp_tensor *weight(const llama_linear *l) { return amp_model_param(l->m, l->w); }
static amp_tensor *bias(const llama_linear *l) { return l->b < 0 ? NULL : amp_model_param(l->m, l->b); }

static amp_status apply(const llama_linear *l, amp_tensor *x, amp_tensor **y) {
    return amp_linear(x, weight(l), bias(l), y);
}

/* The attention branch of x [B, T, hidden]: q_proj, k_proj and v_proj as one GEMM over their
 * weights joined by rows (a copy of the weights, a fraction of the activations' size: one GEMM
 * instead of three, whose output is already the packed [B, T, H + 2 KV, D]), one amp_rope over
 * its q and k heads, the grouped qkvpacked attention, o_proj. */
static amp_status llama_attention(const llama *l, const llama_layer *ly, bool training,
                                  amp_tensor *x, amp_tensor **out) {
    const amp_llama_config *c = &l->cfg;
    int64_t B = amp_tensor_dim(x, 0), T = amp_tensor_dim(x, 1), H = c->num_attention_heads;
    int64_t KV = c->num_key_value_heads, D = c->head_dim;
    amp_tensor *w[3] = {weight(&ly->q), weight(&ly->k), weight(&ly->v)}, *wqkv, *bqkv = NULL;
    amp_tensor *qkv, *rot, *y;
    amp_status s = amp_cat(w, 3, 0, &wqkv);
    if (s == AMP_OK && c->attention_bias) {
        amp_tensor *b[3] = {bias(&ly->q), bias(&ly->k), bias(&ly->v)};
        s = amp_cat(b, 3, 0, &bqkv);
    }
    /* x, input_layernorm's output, goes at once; under selective recomputation the projection
     * does not keep it (written again from the norm's input for its weight gradient). */
    amp_linear_opts lo = {.recompute_input = l->selective};
    if (s == AMP_OK) s = amp_linear_ex(x, wqkv, bqkv, &lo, &qkv);
    if (s == AMP_OK) s = amp_tensor_drop(x);
    if (s == AMP_OK) s = amp_reshape(qkv, 4, (int64_t[]){B, T, H + 2 * KV, D}, &qkv);
    amp_rope_opts ro = {.layout = AMP_ROPE_HALF, .heads = H + KV};
    if (s == AMP_OK) s = amp_rope(qkv, l->rope, &ro, &rot);
    if (s == AMP_OK) s = amp_tensor_drop(qkv); /* the rotation's backward reads neither */
    amp_attention_options ao = {.causal = true, .dropout_p = c->attention_dropout,
                                .training = training, .kv_heads = KV};
    if (s == AMP_OK) s = amp_scaled_dot_product_attention_qkvpacked(rot, &ao, &y);
    if (s == AMP_OK) s = amp_reshape(y, 3, (int64_t[]){B, T, H * D}, &y);
    if (s == AMP_OK) s = apply(&ly->o, y, out);
    return s;
}

static amp_status llama_rope_table(llama *l, amp_ctx *ctx) {
    const amp_llama_config *c = &l->cfg;
    amp_rope_config rc = {.head_dim = c->head_dim, .max_positions = c->max_position_embeddings,
                          .theta = c->rope_theta, .type = c->rope_type,
                          .factor = c->rope_factor, .low_freq_factor = c->rope_low_freq_factor,
                          .high_freq_factor = c->rope_high_freq_factor,
                          .original_max_positions = c->rope_original_max_position_embeddings};
    return amp_rope_table_create(ctx, &rc, &l->rope);
}

/* HF's LlamaDecoderLayer of h [B, T, hidden]: h + attn(input_layernorm(h)), then that +
 * mlp(post_attention_layernorm(that)), the first residual add fused with the second norm. */
static amp_status llama_layer_forward(amp_model *self, amp_tensor *const *in, int n_in,
                                      amp_tensor **out) {
    const llama_layer *ly = amp_model_user(self);
    const llama *l = ly->l;
    if (n_in != 1 || !in[0])
        return amp_error(AMP_ERR_INVALID_ARG, "Llama layer forward (amp_model_forward): one "
                         "input, the residual stream [batch, seq, hidden_size]");
    bool training = amp_model_is_training(self);
    amp_norm_opts no;
    amp_tensor *h = in[0], *x, *a, *m, *r;
    amp_status s = amp_norm(h, NULL, amp_model_param(ly->input_layernorm, 0), NULL,
                            rms_opts(l, &no), NULL, &x);
    if (s == AMP_OK) s = llama_attention(l, ly, training, x, &a);
    if (s == AMP_OK)
        s = amp_norm(h, a, amp_model_param(ly->post_attention_layernorm, 0), NULL,
                     rms_opts(l, &no), &h, &x);
    if (s == AMP_OK) s = amp_tensor_drop(a);
    /* x, post_attention_layernorm's output, and m, the SwiGLU product, go at once; under
     * selective recomputation the projections do not keep them (written again from the norm's
     * input and statistics, and from the gate and up projections, for the weight gradients). */
    amp_linear_opts lo = {.recompute_input = l->selective};
    if (s == AMP_OK) s = amp_linear_swiglu_ex(x, weight(&ly->gate), weight(&ly->up), &lo, &m);
    if (s == AMP_OK) s = amp_tensor_drop(x);
    if (s == AMP_OK) s = amp_linear_ex(m, weight(&ly->down), bias(&ly->down), &lo, &r);
    if (s == AMP_OK) s = amp_tensor_drop(m);
    if (s == AMP_OK) s = amp_add(h, r, out);
    if (s == AMP_OK) s = amp_tensor_drop(r); /* the add's backward reads neither */
    return s;
}

/* logits [B, T, vocab] of idx [B, T]. */
static amp_status llama_forward(amp_model *self, amp_tensor *const *in, int n_in, amp_tensor **out) {
    llama *l = amp_model_user(self);
    if (n_in != 1 || !in[0] || amp_tensor_ndim(in[0]) != 2 || amp_tensor_dtype(in[0]) != AMP_I32)
        return amp_error(AMP_ERR_SHAPE, "Llama forward (amp_model_forward): the input must be one "
                         "i32 tensor of token ids [batch, seq]");
    int64_t T = amp_tensor_dim(in[0], 1);
    if (T < 1 || T > l->cfg.max_position_embeddings)
        return amp_error(AMP_ERR_SHAPE, "Llama forward (amp_model_forward): sequence length %lld "
                         "is outside [1, max_position_embeddings = %lld]", (long long)T,
                         (long long)l->cfg.max_position_embeddings);
    amp_norm_opts no;
    amp_tensor *h, *x;
    amp_status s = amp_embedding(in[0], amp_model_param(l->embed, 0), &h);
    for (int64_t i = 0; i < l->cfg.num_hidden_layers && s == AMP_OK; i++) {
        amp_tensor *h_in = h;
        s = amp_model_forward(l->layers[i].m, h_in, &h);
        if (s == AMP_OK) s = amp_tensor_drop(h_in); /* read by the layer's nodes only */
    }
    if (s == AMP_OK)
        s = amp_norm(h, NULL, amp_model_param(l->norm, 0), NULL, rms_opts(l, &no), NULL, &x);
    if (s == AMP_OK && l->last_only && T > 1) s = amp_narrow(x, 1, T - 1, 1, &x);
    amp_tensor *head = amp_model_param(l->lm_head ? l->lm_head : l->embed, 0);
    if (s == AMP_OK) s = amp_linear(x, head, NULL, out);
    return s;
}

/* The attention branch of the new positions x [B, t, hidden] over the cache's keys and values
 * and their own: the projections and one amp_rope at the cache's length, q, k and v split and
 * permuted to [B, heads, t, head_dim], k and v appended to the cache, the grouped attention with
 * the causal mask aligned to the end, o_proj. */
static amp_status llama_attention_cached(const llama *l, const llama_layer *ly, int layer,
                                         amp_lm_cache *c, amp_tensor *x, amp_tensor **out) {
    const amp_llama_config *cf = &l->cfg;
    int64_t B = amp_tensor_dim(x, 0), T = amp_tensor_dim(x, 1), H = cf->num_attention_heads;
    int64_t KV = cf->num_key_value_heads, D = cf->head_dim;
    amp_tensor *w[3] = {weight(&ly->q), weight(&ly->k), weight(&ly->v)}, *wqkv, *bqkv = NULL;
    amp_tensor *qkv, *rot, *parts[3], *heads[3], *ka, *va, *y;
    amp_status s = amp_cat(w, 3, 0, &wqkv);
    if (s == AMP_OK && cf->attention_bias) {
        amp_tensor *b[3] = {bias(&ly->q), bias(&ly->k), bias(&ly->v)};
        s = amp_cat(b, 3, 0, &bqkv);
    }
    if (s == AMP_OK) s = amp_linear(x, wqkv, bqkv, &qkv);
    if (s == AMP_OK) s = amp_reshape(qkv, 4, (int64_t[]){B, T, H + 2 * KV, D}, &qkv);
    amp_rope_opts ro = {.layout = AMP_ROPE_HALF, .heads = H + KV, .offset = amp_lm_cache_len(c)};
    if (s == AMP_OK) s = amp_rope(qkv, l->rope, &ro, &rot);
    int64_t at[3] = {0, H, H + KV}, n[3] = {H, KV, KV};
    for (int i = 0; i < 3 && s == AMP_OK; i++) {
        s = amp_narrow(rot, 2, at[i], n[i], &parts[i]);
        if (s == AMP_OK) s = amp_permute(parts[i], (const int[]){0, 2, 1, 3}, &heads[i]);
    }
    if (s == AMP_OK) s = amp_lm_cache_append(c, layer, heads[1], heads[2], &ka, &va);
    amp_attention_options ao = {.causal = true};
    if (s == AMP_OK) s = amp_scaled_dot_product_attention(heads[0], ka, va, &ao, &y);
    if (s == AMP_OK) s = amp_permute(y, (const int[]){0, 2, 1, 3}, &y);
    if (s == AMP_OK) s = amp_reshape(y, 3, (int64_t[]){B, T, H * D}, &y);
    if (s == AMP_OK) s = apply(&ly->o, y, out);
    return s;
}

static llama *llama_of(const char *who, const amp_model *m) {
    if (!m || amp_model_forward_fn(m) != llama_forward) {
        amp_error(AMP_ERR_INVALID_ARG, "%s: the model is %s, not a Llama of amp_llama_create", who,
                  m ? "another model" : "NULL");
        return NULL;
    }
    return amp_model_user(m);
}

amp_status amp_llama_config_of(const amp_model *m, amp_llama_config *cfg) {
    llama *l = llama_of(__func__, m);
    if (!l) return AMP_ERR_INVALID_ARG;
    if (!cfg) return amp_error(AMP_ERR_INVALID_ARG, "%s: argument 'cfg' is NULL", __func__);
    *cfg = l->cfg;
    return AMP_OK;
}

amp_status amp_llama_loss(amp_model *m, amp_tensor *idx, amp_tensor *targets, amp_tensor **loss) {
    llama *l = llama_of(__func__, m);
    if (!l) return AMP_ERR_INVALID_ARG;
    amp_tensor *logits;
    amp_status s = amp_model_forward(m, idx, &logits);
    if (s == AMP_OK) s = amp_lm_loss(logits, targets, l->cfg.vocab_size, loss);
    /* nobody reads the logits again: the backward writes their gradient in their place */
    return s == AMP_OK ? amp_tensor_drop(logits) : s;
}

amp_status amp_llama_forward_last(amp_model *m, amp_tensor *idx, amp_tensor **logits) {
    llama *l = llama_of(__func__, m);
    if (!l) return AMP_ERR_INVALID_ARG;
    l->last_only = true;
    amp_status s = amp_model_forward(m, idx, logits);
    l->last_only = false;
    return s;
}

int64_t amp_llama_n_params(const amp_model *m) {
    return llama_of(__func__, m) ? amp_model_numel(m) : -1;
}

double amp_llama_flops_per_token(const amp_model *m, int64_t T) {
    llama *l = llama_of(__func__, m);
    if (!l) return 0.0;
    const amp_llama_config *c = &l->cfg;
    double lookup = c->tie_word_embeddings ? 0.0 : (double)c->vocab_size * (double)c->hidden_size;
    return 6.0 * ((double)amp_model_numel(m) - lookup) +
           6.0 * (double)c->num_hidden_layers * (double)T *
               (double)(c->num_attention_heads * c->head_dim);
}

void amp_llama_config_defaults(amp_llama_config *c) {
    if (c->num_key_value_heads == 0) c->num_key_value_heads = c->num_attention_heads;
    if (c->num_attention_heads > 0 && c->head_dim == 0)
        c->head_dim = c->hidden_size / c->num_attention_heads;
    if (c->initializer_range == 0.0f) c->initializer_range = 0.02f;
    if (c->rope_theta == 0.0f) c->rope_theta = 10000.0f;
}

/* The config with its defaults filled in, or the first field that is out of range. */
static amp_status llama_check(const amp_llama_config *in, amp_llama_config *c) {
    static const char who[] = "amp_llama_create";
    *c = *in;
    amp_llama_config_defaults(c);
    const struct {
        const char *name;
        int64_t v;
    } positive[] = {{"vocab_size", c->vocab_size}, {"hidden_size", c->hidden_size},
                    {"intermediate_size", c->intermediate_size},
                    {"num_hidden_layers", c->num_hidden_layers},
                    {"num_attention_heads", c->num_attention_heads},
                    {"num_key_value_heads", c->num_key_value_heads}, {"head_dim", c->head_dim},
                    {"max_position_embeddings", c->max_position_embeddings}};
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++)
        if (positive[i].v < 1)
            return amp_error(AMP_ERR_INVALID_ARG, "%s: %s = %lld, want >= 1", who, positive[i].name,
                             (long long)positive[i].v);
    if (c->vocab_size > INT32_MAX)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: vocab_size = %lld is past 2^31 - 1", who,
                         (long long)c->vocab_size);
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: num_attention_heads = %lld is not a multiple of "
                         "num_key_value_heads = %lld", who, (long long)c->num_attention_heads,
                         (long long)c->num_key_value_heads);
    if (c->head_dim % 2 != 0)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: head_dim = %lld, want an even number (RoPE "
                         "rotates pairs)", who, (long long)c->head_dim);
    if (!(c->rms_norm_eps >= 0.0f) || !isfinite(c->rms_norm_eps))
        return amp_error(AMP_ERR_INVALID_ARG, "%s: rms_norm_eps = %g, want a finite value >= 0",
                         who, (double)c->rms_norm_eps);
    if (!(c->attention_dropout >= 0.0f && c->attention_dropout < 1.0f))
        return amp_error(AMP_ERR_INVALID_ARG, "%s: attention_dropout = %g is outside [0, 1)", who,
                         (double)c->attention_dropout);
    if (!(c->initializer_range > 0.0f) || !isfinite(c->initializer_range))
        return amp_error(AMP_ERR_INVALID_ARG, "%s: initializer_range = %g, want a finite value > 0",
                         who, (double)c->initializer_range);
    return AMP_OK;
}

/* Hugging Face's tree in its order (the init's draws follow it). */
static amp_status llama_make_tree(llama *l, amp_model *root) {
    const amp_llama_config *c = &l->cfg;
    int64_t C = c->hidden_size, H = c->num_attention_heads, KV = c->num_key_value_heads;
    int64_t D = c->head_dim, I = c->intermediate_size;
    float std = c->initializer_range;
    bool qb = c->attention_bias;
    amp_model *model, *layers, *layer, *attn, *mlp;
    amp_status s = llama_node(root, "model", &model);
    if (s == AMP_OK) s = amp_model_create(amp_model_ctx(root), NULL, NULL, NULL, &l->embed);
    if (s == AMP_OK)
        s = amp_model_register_param(l->embed, "weight", 2, (int64_t[]){c->vocab_size, C},
                                     AMP_INIT_NORMAL_OF(0.0f, std), NULL);
    if (s == AMP_OK && (s = amp_model_add_child(model, "embed_tokens", l->embed)) != AMP_OK)
        amp_model_free(l->embed);
    if (s == AMP_OK) s = llama_node(model, "layers", &layers);
    for (int64_t i = 0; i < c->num_hidden_layers && s == AMP_OK; i++) {
        llama_layer *ly = &l->layers[i];
        char name[24];
        snprintf(name, sizeof name, "%lld", (long long)i);
        ly->l = l;
        s = amp_model_create(amp_model_ctx(layers), llama_layer_forward, ly, NULL, &layer);
        if (s == AMP_OK && (s = amp_model_add_child(layers, name, layer)) != AMP_OK)
            amp_model_free(layer);
        ly->m = layer;
        if (s == AMP_OK) s = llama_node(layer, "self_attn", &attn);
        if (s == AMP_OK) s = llama_linear_make(attn, "q_proj", H * D, C, qb, std, &ly->q);
        if (s == AMP_OK) s = llama_linear_make(attn, "k_proj", KV * D, C, qb, std, &ly->k);
        if (s == AMP_OK) s = llama_linear_make(attn, "v_proj", KV * D, C, qb, std, &ly->v);
        if (s == AMP_OK) s = llama_linear_make(attn, "o_proj", C, H * D, qb, std, &ly->o);
        if (s == AMP_OK) s = llama_node(layer, "mlp", &mlp);
        if (s == AMP_OK) s = llama_linear_make(mlp, "gate_proj", I, C, false, std, &ly->gate);
        if (s == AMP_OK) s = llama_linear_make(mlp, "up_proj", I, C, false, std, &ly->up);
        if (s == AMP_OK) s = llama_linear_make(mlp, "down_proj", C, I, false, std, &ly->down);
        if (s == AMP_OK) s = llama_norm(layer, "input_layernorm", l, &ly->input_layernorm);
        if (s == AMP_OK)
            s = llama_norm(layer, "post_attention_layernorm", l, &ly->post_attention_layernorm);
    }
    if (s == AMP_OK) s = llama_norm(model, "norm", l, &l->norm);
    if (s == AMP_OK && !c->tie_word_embeddings) {
        llama_linear head;
        s = llama_linear_make(root, "lm_head", c->vocab_size, C, false, std, &head);
        l->lm_head = head.m;
    }
    return s;
}

amp_status amp_llama_create(amp_ctx *ctx, const amp_llama_config *cfg, amp_model **out) {
    if (!out) return amp_error(AMP_ERR_INVALID_ARG, "amp_llama_create: argument 'out' is NULL");
    *out = NULL;
    if (!ctx || !cfg)
        return amp_error(AMP_ERR_INVALID_ARG, "amp_llama_create: ctx and cfg must not be NULL");
    amp_llama_config c;
    amp_status s = llama_check(cfg, &c);
    if (s != AMP_OK) return s;
    llama *l = calloc(1, sizeof *l);
    if (l) l->layers = calloc((size_t)c.num_hidden_layers, sizeof *l->layers);
    if (!l || !l->layers) {
        llama_free_user(l);
        return amp_error(AMP_ERR_OOM, "amp_llama_create: out of host memory");
    }
    l->cfg = c;
    s = amp_model_create(ctx, llama_forward, l, llama_free_user, out);
    if (s != AMP_OK) {
        llama_free_user(l);
        return s;
    }
    s = llama_make_tree(l, *out);
    if (s == AMP_OK) s = llama_rope_table(l, ctx); /* a bad rope_scaling is refused here */
    if (s != AMP_OK) {
        amp_model_free(*out);
        *out = NULL;
    }
    return s;
}

amp_status amp_llama_set_recompute(amp_model *m, amp_recompute mode) {
    llama *l = llama_of(__func__, m);
    if (!l) return AMP_ERR_INVALID_ARG;
    bool selective = mode == AMP_RECOMPUTE_SELECTIVE;
    amp_status s = AMP_OK; /* the layers' own checks (a pending graph) first */
    for (int64_t i = 0; i < l->cfg.num_hidden_layers && s == AMP_OK; i++)
        s = amp_model_set_recompute(l->layers[i].m, selective ? AMP_RECOMPUTE_NONE : mode);
    if (s == AMP_OK) l->selective = selective;
    return s;
}

amp_status amp_llama_forward_cached(amp_model *m, amp_lm_cache *c, amp_tensor *idx,
                                    amp_tensor **logits) {
    static const char who[] = "amp_llama_forward_cached";
    llama *l = llama_of(who, m);
    if (!l) return AMP_ERR_INVALID_ARG;
    amp_status s = amp_lm_cached_check(who, m, c, idx, logits, l->cfg.max_position_embeddings,
                                       "max_position_embeddings");
    if (s != AMP_OK) return s;
    int64_t T = amp_tensor_dim(idx, 1);
    amp_norm_opts no;
    amp_tensor *h, *x, *r = NULL, *a, *mm;
    s = amp_embedding(idx, amp_model_param(l->embed, 0), &h);
    for (int64_t i = 0; i < l->cfg.num_hidden_layers && s == AMP_OK; i++) {
        const llama_layer *ly = &l->layers[i];
        s = amp_norm(h, r, amp_model_param(ly->input_layernorm, 0), NULL, rms_opts(l, &no), &h, &x);
        if (s == AMP_OK) s = llama_attention_cached(l, ly, (int)i, c, x, &a);
        if (s == AMP_OK)
            s = amp_norm(h, a, amp_model_param(ly->post_attention_layernorm, 0), NULL,
                         rms_opts(l, &no), &h, &x);
        if (s == AMP_OK) s = amp_linear_swiglu(x, weight(&ly->gate), weight(&ly->up), &mm);
        if (s == AMP_OK) s = apply(&ly->down, mm, &r);
    }
    if (s == AMP_OK) s = amp_norm(h, r, amp_model_param(l->norm, 0), NULL, rms_opts(l, &no), &h, &x);
    if (s == AMP_OK && T > 1) s = amp_narrow(x, 1, T - 1, 1, &x);
    amp_tensor *head = amp_model_param(l->lm_head ? l->lm_head : l->embed, 0);
    if (s == AMP_OK) s = amp_linear(x, head, NULL, logits);
    if (s == AMP_OK) s = amp_lm_cache_advance(c, T);
    return s;
}

/* A full forward's last logits, as amp_lm_generate calls it (the cache unused). */
static amp_status llama_step_full(amp_model *m, amp_lm_cache *c, amp_tensor *idx,
                                  amp_tensor **logits) {
    (void)c;
    return amp_llama_forward_last(m, idx, logits);
}

amp_status amp_llama_generate(amp_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n,
                              const amp_lm_sample_opts *o, bool use_cache, int32_t *out) {
    llama *l = llama_of(__func__, m);
    if (!l) return AMP_ERR_INVALID_ARG;
    amp_lm_model lm = {.name = __func__, .m = m, .n_layers = (int)l->cfg.num_hidden_layers,
                       .vocab = l->cfg.vocab_size, .window = l->cfg.max_position_embeddings,
                       .window_name = "max_position_embeddings", .cached = amp_llama_forward_cached, .full = llama_step_full};
    return amp_lm_generate(&lm, prompt, n_prompt, n, o, use_cache, out);
}
