/* The language models' shared pieces (amp/models/lm.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/models/lm.h"
#include "amp/status.h"

int64_t amp_lm_padded_vocab(int64_t vocab) { return (vocab + 63) / 64 * 64; }

amp_status amp_lm_loss(amp_tensor *logits, amp_tensor *targets, int64_t vocab, amp_tensor **loss) {
    if (!logits || !targets || !loss)
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_loss: logits, targets and loss must not be "
                         "NULL");
    if (amp_tensor_ndim(logits) != 3)
        return amp_error(AMP_ERR_SHAPE, "amp_lm_loss: logits must be [batch, seq, vocab_padded], "
                         "got %d dims", amp_tensor_ndim(logits));
    int64_t rows = amp_tensor_dim(logits, 0) * amp_tensor_dim(logits, 1);
    if (amp_tensor_numel(targets) != rows)
        return amp_error(AMP_ERR_SHAPE, "amp_lm_loss: %lld targets for %lld positions of logits",
                         (long long)amp_tensor_numel(targets), (long long)rows);
    amp_tensor *flat_l, *flat_t;
    amp_status s = amp_reshape(logits, 2, (int64_t[]){rows, amp_tensor_dim(logits, 2)}, &flat_l);
    if (s == AMP_OK) s = amp_reshape(targets, 1, (int64_t[]){rows}, &flat_t);
    amp_xent_options o = amp_xent_defaults();
    o.classes = vocab;
    if (s == AMP_OK) s = amp_cross_entropy_ex(flat_l, flat_t, &o, loss);
    /* The flat view is this call's: when the caller drops the logits too, the backward writes
     * their gradient over them (nn/autograd.h: amp_grad_over_input). */
    return s == AMP_OK ? amp_tensor_drop(flat_l) : s;
}

static bool below_2d(const char *name, const amp_tensor *p, void *user) {
    (void)name, (void)user;
    return amp_tensor_ndim(p) < 2;
}

amp_status amp_lm_adamw_create(amp_model *m, float lr, float weight_decay, amp_optimizer **opt) {
    amp_adam_opts ao = {.lr = lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = weight_decay, .decoupled = true, .exact = true};
    amp_status s = amp_adam_create(m, &ao, opt);
    if (s == AMP_OK)
        s = amp_optimizer_add_group(*opt, below_2d, NULL, &(amp_param_group_opts){lr, 0.0f},
                                    NULL);
    if (s != AMP_OK && opt && *opt) {
        amp_optimizer_free(*opt);
        *opt = NULL;
    }
    return s;
}

uint64_t amp_lm_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

amp_status amp_lm_draw(const float *logits, int64_t vocab, float temperature, int top_k,
                       uint64_t *state, int32_t *token) {
    if (!logits || !state || !token)
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_draw: logits, state and token must not be "
                         "NULL");
    if (vocab < 1 || vocab > INT32_MAX)
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_draw: vocab %lld is outside [1, 2^31 - 1]",
                         (long long)vocab);
    if (!(temperature > 0.0f) || !isfinite(temperature))
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_draw: temperature %g, want a finite value "
                         "> 0", (double)temperature);
    if (top_k < 0)
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_draw: top_k %d, want >= 0 (0: all)", top_k);
    for (int64_t i = 0; i < vocab; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY)
            return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_draw: logits[%lld] is %g: the logits "
                             "hold a NaN or +inf, nothing can be drawn", (long long)i,
                             (double)logits[i]);
    float *p = malloc((size_t)vocab * sizeof *p);
    if (!p) return amp_error(AMP_ERR_OOM, "amp_lm_draw: out of host memory");
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
    if (!(total > 0.0) || !isfinite(total)) {
        free(p);
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_draw: none of the logits is above -inf: "
                         "nothing can be drawn");
    }
    double u = (double)(amp_lm_rng_next(state) >> 11) * 0x1p-53 * total, acc = 0;
    *token = (int32_t)(vocab - 1);
    for (int64_t i = 0; i < vocab; i++)
        if ((acc += p[i]) > u) {
            *token = (int32_t)i;
            break;
        }
    free(p);
    return AMP_OK;
}

struct amp_lm_cache {
    amp_ctx *ctx;
    int n_layers;
    int64_t capacity, len;
    amp_tensor **k, **v; /* [n_layers], NULL until the layer's first append */
};

amp_status amp_lm_cache_create(amp_ctx *ctx, int n_layers, int64_t capacity, amp_lm_cache **out) {
    if (!out) return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_cache_create: argument 'out' is NULL");
    *out = NULL;
    if (!ctx || n_layers < 1 || capacity < 1)
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_cache_create: ctx %s, %d layers, capacity "
                         "%lld: want a context and both >= 1", ctx ? "given" : "NULL", n_layers,
                         (long long)capacity);
    amp_lm_cache *c = calloc(1, sizeof *c);
    if (c) c->k = calloc((size_t)n_layers, sizeof *c->k), c->v = calloc((size_t)n_layers, sizeof *c->v);
    if (!c || !c->k || !c->v) {
        amp_lm_cache_free(c);
        return amp_error(AMP_ERR_OOM, "amp_lm_cache_create: out of host memory");
    }
    *c = (amp_lm_cache){.ctx = ctx, .n_layers = n_layers, .capacity = capacity, .k = c->k,
                        .v = c->v};
    *out = c;
    return AMP_OK;
}

void amp_lm_cache_free(amp_lm_cache *c) {
    if (!c) return;
    for (int l = 0; c->k && l < c->n_layers; l++) amp_tensor_free(c->k[l]);
    for (int l = 0; c->v && l < c->n_layers; l++) amp_tensor_free(c->v[l]);
    free(c->k);
    free(c->v);
    free(c);
}

int64_t amp_lm_cache_len(const amp_lm_cache *c) { return c ? c->len : 0; }
void amp_lm_cache_reset(amp_lm_cache *c) {
    if (c) c->len = 0;
}

amp_status amp_lm_cache_append(amp_lm_cache *c, int layer, amp_tensor *k, amp_tensor *v,
                               amp_tensor **k_all, amp_tensor **v_all) {
    static const char who[] = "amp_lm_cache_append";
    if (!c || !k || !v || !k_all || !v_all)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: the cache, k, v and both outputs must not be "
                         "NULL", who);
    if (layer < 0 || layer >= c->n_layers)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: layer %d of %d", who, layer, c->n_layers);
    if (amp_tensor_ndim(k) != 4 || amp_tensor_ndim(v) != 4)
        return amp_error(AMP_ERR_SHAPE, "%s: k and v must be [batch, kv_heads, t, head_dim]", who);
    int64_t t = amp_tensor_dim(k, 2);
    if (c->len + t > c->capacity)
        return amp_error(AMP_ERR_SHAPE, "%s: positions %lld .. %lld are past the cache's capacity "
                         "of %lld", who, (long long)c->len, (long long)(c->len + t - 1),
                         (long long)c->capacity);
    amp_status s = AMP_OK;
    for (int i = 0; i < 2 && s == AMP_OK; i++) {
        amp_tensor **slot = i ? &c->v[layer] : &c->k[layer], *x = i ? v : k;
        int64_t shape[4] = {amp_tensor_dim(x, 0), amp_tensor_dim(x, 1), c->capacity,
                            amp_tensor_dim(x, 3)};
        if (!*slot) s = amp_tensor_create(c->ctx, amp_tensor_dtype(x), 4, shape, slot);
        if (s == AMP_OK) s = amp_tensor_write_slice(*slot, 2, c->len, x);
    }
    if (s == AMP_OK) s = amp_narrow(c->k[layer], 2, 0, c->len + t, k_all);
    if (s == AMP_OK) s = amp_narrow(c->v[layer], 2, 0, c->len + t, v_all);
    return s;
}

amp_status amp_lm_cache_advance(amp_lm_cache *c, int64_t t) {
    if (!c || t < 0 || c->len + t > c->capacity)
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_cache_advance: %lld positions past %lld "
                         "(capacity %lld)", (long long)t, (long long)(c ? c->len : 0),
                         (long long)(c ? c->capacity : 0));
    c->len += t;
    return AMP_OK;
}

amp_status amp_lm_generate(const amp_lm_model *lm, const int32_t *prompt, int64_t n_prompt,
                           int64_t n, const amp_lm_sample_opts *o, bool use_cache,
                           int32_t *out) {
    const char *who = lm && lm->name ? lm->name : "amp_lm_generate";
    if (!lm || !lm->m || !lm->cached || !lm->full || !prompt || !o || !out || n_prompt < 1 || n < 0)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: a prompt of >= 1 tokens, options and out are "
                         "needed, n >= 0 (got %lld prompt tokens, n %lld)", who,
                         (long long)n_prompt, (long long)n);
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= lm->vocab)
            return amp_error(AMP_ERR_INVALID_ARG, "%s: prompt[%lld] = %d is outside the "
                             "vocabulary [0, %lld)", who, (long long)i, prompt[i],
                             (long long)lm->vocab);
    int64_t cap = n_prompt + n, W = lm->window;
    if (use_cache && cap > W)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: %lld prompt and %lld new tokens are past "
                         "%s = %lld (without the cache, full forwards slide the window)", who,
                         (long long)n_prompt, (long long)n,
                         lm->window_name ? lm->window_name : "the model's positions", (long long)W);
    amp_ctx *ctx = amp_model_ctx(lm->m);
    bool grad = amp_set_grad_enabled(ctx, false), training = amp_model_is_training(lm->m);
    amp_model_train(lm->m, false);
    int32_t *toks = malloc((size_t)cap * sizeof *toks);
    int64_t host_n = lm->vocab;
    float *host = malloc((size_t)host_n * sizeof *host);
    amp_lm_cache *c = NULL;
    amp_status s = toks && host ? AMP_OK : amp_error(AMP_ERR_OOM, "%s: out of host memory", who);
    if (s == AMP_OK) memcpy(toks, prompt, (size_t)n_prompt * sizeof *toks);
    if (s == AMP_OK && use_cache) s = amp_lm_cache_create(ctx, lm->n_layers, cap, &c);
    uint64_t state = o->seed;
    int64_t len = n_prompt;
    for (int64_t t = 0; t < n && s == AMP_OK; t++) {
        /* with the cache: the prompt once, then the newest token alone; else the window */
        int64_t from = use_cache ? (t == 0 ? 0 : len - 1) : (len > W ? len - W : 0);
        amp_tensor *x = NULL, *logits = NULL;
        s = amp_tensor_from_host(ctx, AMP_I32, 2, (const int64_t[]){1, len - from}, toks + from, &x);
        if (s == AMP_OK)
            s = use_cache ? lm->cached(lm->m, c, x, &logits) : lm->full(lm->m, NULL, x, &logits);
        int64_t cols = s == AMP_OK ? amp_tensor_numel(logits) : 0; /* the padded vocabulary */
        if (s == AMP_OK && cols > host_n) {
            float *grown = realloc(host, (size_t)cols * sizeof *host);
            if (!grown) s = amp_error(AMP_ERR_OOM, "%s: out of host memory", who);
            else host = grown, host_n = cols;
        }
        if (s == AMP_OK && cols < lm->vocab)
            s = amp_error(AMP_ERR_SHAPE, "%s: %lld logits for a vocabulary of %lld", who,
                          (long long)cols, (long long)lm->vocab);
        if (s == AMP_OK) s = amp_tensor_to_host_f32(logits, host, (size_t)cols * sizeof *host);
        if (s == AMP_OK) s = amp_lm_draw(host, lm->vocab, o->temperature, o->top_k, &state, &toks[len]);
        amp_tensor_free(x);
        amp_ctx_reset_step(ctx);
        if (s == AMP_OK) out[t] = toks[len++];
    }
    amp_lm_cache_free(c);
    free(toks);
    free(host);
    amp_model_train(lm->m, training);
    amp_set_grad_enabled(ctx, grad);
    return s;
}

amp_status amp_lm_cached_check(const char *who, amp_model *m, const amp_lm_cache *c,
                               const amp_tensor *idx, amp_tensor **logits, int64_t window,
                               const char *window_name) {
    if (!c || !idx || !logits)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: the cache, idx and logits must not be NULL", who);
    amp_ctx *ctx = amp_model_ctx(m);
    bool grad = amp_set_grad_enabled(ctx, false);
    amp_set_grad_enabled(ctx, grad);
    if (grad)
        return amp_error(AMP_ERR_STATE, "%s: generation runs without gradients "
                         "(amp_set_grad_enabled(ctx, false) first)", who);
    if (amp_tensor_ndim(idx) != 2 || amp_tensor_dtype(idx) != AMP_I32 || amp_tensor_dim(idx, 1) < 1)
        return amp_error(AMP_ERR_SHAPE, "%s: idx must be i32 token ids [batch, t], t >= 1", who);
    int64_t T = amp_tensor_dim(idx, 1), len = amp_lm_cache_len(c);
    if (len + T > window)
        return amp_error(AMP_ERR_SHAPE, "%s: positions %lld .. %lld are past %s = %lld", who,
                         (long long)len, (long long)(len + T - 1), window_name, (long long)window);
    return AMP_OK;
}
