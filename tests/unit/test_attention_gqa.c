/* Grouped-query attention and keys past the queries, on every device that answers:
 *  - gradients of q, k and v against float64 central differences (gradcheck_run.h): grouped
 *    (4 heads over 2 key/value heads), multi-query (1), a key/value cache (kv_seq > seq, the
 *    causal mask aligned to the end) with padding, and the packed [B, T, H + 2 KV, D] form;
 *  - the same bits as attention over k and v repeated to every head (the repeat a broadcast add
 *    whose gradient amp_sum_dim's order sums), forward and every gradient, at kv_heads 1, 2 and 4
 *    of 8, T in {1, 17, 257}, head dims 64 and 128, f32 and bf16, causal, with dropout too;
 *  - the packed grouped form against the split and permutes it replaces, bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "gradcheck_run.h"
#include "test_devices.h"
#include "test_tensors.h"

/* y [b, h, t, d] of q [b, h, t, d] over k, v [b, kvh, s, d] in float64: query head hh reads
 * key/value head hh / (h / kvh); causal aligned to the end; len[b] valid keys (NULL: s). */
static void ref_gqa(const double *q, const double *k, const double *v, const double *len,
                    int64_t b, int64_t h, int64_t t, int64_t d, int64_t kvh, int64_t s,
                    bool causal, double *y) {
    double scale = 1.0 / sqrt((double)d), p[64];
    for (int64_t bh = 0; bh < b * h; bh++) {
        int64_t bb = bh / h, g = bb * kvh + bh % h / (h / kvh);
        for (int64_t i = 0; i < t; i++) {
            int64_t nk = len ? (int64_t)len[bb] : s, last = i + 1 + s - t;
            if (causal && last < nk) nk = last;
            const double *qi = q + (bh * t + i) * d;
            double m = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < nk; j++) {
                p[j] = 0.0;
                for (int64_t e = 0; e < d; e++) p[j] += qi[e] * k[(g * s + j) * d + e];
                p[j] *= scale;
                m = p[j] > m ? p[j] : m;
            }
            for (int64_t j = 0; j < nk; j++) sum += p[j] = exp(p[j] - m);
            for (int64_t e = 0; e < d; e++) {
                double o = 0.0;
                for (int64_t j = 0; j < nk; j++) o += p[j] / sum * v[(g * s + j) * d + e];
                y[(bh * t + i) * d + e] = nk > 0 ? o : 0.0;
            }
        }
    }
}

/* kernel: 1 for causal; a fourth input is kv_len. */
static amp_status lib_dense(gc_case *c, amp_tensor **y) {
    amp_attention_options o = {.causal = c->kernel == 1, .kv_len = c->n_in > 3 ? T(3) : NULL};
    return amp_scaled_dot_product_attention(T(0), T(1), T(2), &o, y);
}
static void ref_dense(const gc_case *c, double *y) {
    ref_gqa(V(0), V(1), V(2), c->n_in > 3 ? V(3) : NULL, S(0, 0), S(0, 1), S(0, 2), S(0, 3),
            S(1, 1), S(1, 2), c->kernel == 1, y);
}

/* Packed qkv [b, t, h + 2 kvh, d] (stride: kv_heads) -> y [b, t, h, d]. */
static amp_status lib_packed(gc_case *c, amp_tensor **y) {
    amp_attention_options o = {.causal = true, .kv_heads = c->stride};
    return amp_scaled_dot_product_attention_qkvpacked(T(0), &o, y);
}
static void ref_packed(const gc_case *c, double *y) {
    int64_t b = S(0, 0), t = S(0, 1), n = S(0, 2), d = S(0, 3), kvh = c->stride, h = n - 2 * kvh;
    double *q = calloc((size_t)(b * n * t * d), sizeof *q), *out = malloc((size_t)(b * h * t * d) * sizeof *out);
    double *k = q + b * h * t * d, *v = k + b * kvh * t * d;
    if (!q || !out) abort();
    for (int64_t bb = 0; bb < b; bb++)
        for (int64_t tt = 0; tt < t; tt++)
            for (int64_t hh = 0; hh < n; hh++)
                for (int64_t e = 0; e < d; e++) {
                    double x = V(0)[((bb * t + tt) * n + hh) * d + e];
                    if (hh < h) q[((bb * h + hh) * t + tt) * d + e] = x;
                    else if (hh < h + kvh) k[((bb * kvh + hh - h) * t + tt) * d + e] = x;
                    else v[((bb * kvh + hh - h - kvh) * t + tt) * d + e] = x;
                }
    ref_gqa(q, k, v, NULL, b, h, t, d, kvh, t, true, out);
    for (int64_t bb = 0; bb < b; bb++)
        for (int64_t hh = 0; hh < h; hh++)
            for (int64_t tt = 0; tt < t; tt++)
                for (int64_t e = 0; e < d; e++)
                    y[((bb * t + tt) * h + hh) * d + e] = out[((bb * h + hh) * t + tt) * d + e];
    free(q);
    free(out);
}

static gc_case cases[] = {
    {OP("grouped 4 heads over 2, causal", lib_dense, ref_dense),
     .in = {X_("q", 4, 2, 4, 5, 4), X_("k", 4, 2, 2, 5, 4), X_("v", 4, 2, 2, 5, 4)},
     OUT(4, 2, 4, 5, 4), .kernel = 1},
    {OP("multi-query 3 heads over 1", lib_dense, ref_dense),
     .in = {X_("q", 4, 1, 3, 6, 3), X_("k", 4, 1, 1, 6, 3), X_("v", 4, 1, 1, 6, 3)},
     OUT(4, 1, 3, 6, 3)},
    {OP("cache: 3 queries after 8 keys, causal, padded", lib_dense, ref_dense),
     .in = {X_("q", 4, 2, 2, 3, 4), X_("k", 4, 2, 1, 8, 4), X_("v", 4, 2, 1, 8, 4),
            IN("kv_len", 1, GC_LABELS, 0, 9, false, 2)},
     OUT(4, 2, 2, 3, 4), .kernel = 1},
    {OP("packed 4 + 2 x 2 heads, causal", lib_packed, ref_packed),
     .in = {X_("qkv", 4, 2, 5, 8, 4)}, OUT(4, 2, 5, 4, 4), .stride = 2},
};

/* A leaf of dt [n] with values sin(a i) * 1.5, requiring grad. */
static amp_tensor *leaf(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape, double a) {
    return test_sin_leaf(ctx, dt, ndim, shape, a, 1.5, 0.0);
}

static bool same(amp_tensor *a, amp_tensor *b, const char *what, const char *cs) {
    size_t n = (size_t)amp_tensor_numel(a) * amp_dtype_size(amp_tensor_dtype(a));
    if ((size_t)amp_tensor_numel(b) * amp_dtype_size(amp_tensor_dtype(b)) != n) {
        CHECK_MSG(false, "%s: %s sizes differ", cs, what);
        return false;
    }
    char *ha = malloc(n), *hb = malloc(n);
    if (!ha || !hb) abort();
    CHECK_OK(amp_tensor_to_host(a, ha, n));
    CHECK_OK(amp_tensor_to_host(b, hb, n));
    bool eq = memcmp(ha, hb, n) == 0;
    CHECK_MSG(eq, "%s: %s differs from the repeated k and v's", cs, what);
    free(ha);
    free(hb);
    return eq;
}

static amp_tensor *grad_of(amp_tensor *t) {
    amp_tensor *g = NULL;
    CHECK_OK(amp_tensor_get_grad(t, &g));
    return g;
}

/* x [B, KV, T, D] repeated to [B, KV * rep, T, D], head g r + i from g (repeat_interleave): a
 * broadcast add of zeros [1, 1, rep, 1, 1]. */
static amp_tensor *repeated(amp_tensor *x, amp_tensor *zeros, int64_t rep) {
    int64_t B = amp_tensor_dim(x, 0), KV = amp_tensor_dim(x, 1), T_ = amp_tensor_dim(x, 2),
            D = amp_tensor_dim(x, 3);
    amp_tensor *x5 = NULL, *y = NULL;
    CHECK_OK(amp_reshape(x, 5, (const int64_t[]){B, KV, 1, T_, D}, &x5));
    CHECK_OK(amp_add(x5, zeros, &y));
    CHECK_OK(amp_reshape(y, 4, (const int64_t[]){B, KV * rep, T_, D}, &y));
    return y;
}

/* The grouped attention against k and v repeated, one graph each, one loss over both. */
static void gqa_vs_repeated(amp_ctx *ctx, amp_dtype dt, int64_t kv, int64_t T_, int64_t D,
                            float dropout) {
    const int64_t B = 1, H = 8, rep = H / kv;
    char cs[96];
    snprintf(cs, sizeof cs, "%s kv_heads %lld, T %lld, D %lld%s", amp_dtype_name(dt),
             (long long)kv, (long long)T_, (long long)D, dropout > 0 ? ", dropout" : "");
    amp_tensor *q[2], *k[2], *v[2], *y[2], *zeros = NULL;
    for (int c = 0; c < 2; c++) {
        q[c] = leaf(ctx, dt, 4, (const int64_t[]){B, H, T_, D}, 0.37);
        k[c] = leaf(ctx, dt, 4, (const int64_t[]){B, kv, T_, D}, 0.23);
        v[c] = leaf(ctx, dt, 4, (const int64_t[]){B, kv, T_, D}, 0.11);
    }
    CHECK_OK(amp_tensor_create(ctx, dt, 5, (const int64_t[]){1, 1, rep, 1, 1}, &zeros));
    amp_rng_state rng;
    CHECK_OK(amp_rng_get_state(ctx, &rng));
    amp_attention_options o = {.causal = true, .dropout_p = dropout, .training = true};
    CHECK_OK(amp_scaled_dot_product_attention(q[0], k[0], v[0], &o, &y[0]));
    CHECK_OK(amp_rng_set_state(ctx, &rng)); /* the same dropout draws */
    CHECK_OK(amp_scaled_dot_product_attention(q[1], repeated(k[1], zeros, rep),
                                              repeated(v[1], zeros, rep), &o, &y[1]));
    if (!same(y[0], y[1], "y", cs)) return;
    /* loss: mean((y0 + y1) * w), w = cos(0.7 i) */
    int64_t n = amp_tensor_numel(y[0]);
    float *w = malloc((size_t)n * sizeof *w);
    for (int64_t i = 0; i < n; i++) w[i] = (float)cos(0.7 * (double)i);
    amp_tensor *wt = NULL, *a = NULL, *b = NULL, *loss = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, (const int64_t[]){B, H, T_, D}, w, &wt));
    CHECK_OK(amp_mul(y[0], wt, &a));
    CHECK_OK(amp_mul(y[1], wt, &b));
    CHECK_OK(amp_add(a, b, &a));
    CHECK_OK(amp_mean(a, &loss));
    CHECK_OK(amp_backward(loss));
    same(grad_of(q[0]), grad_of(q[1]), "dq", cs);
    same(grad_of(k[0]), grad_of(k[1]), "dk", cs);
    same(grad_of(v[0]), grad_of(v[1]), "dv", cs);
    amp_ctx_reset_step(ctx);
    free(w);
    amp_tensor_free(wt);
    amp_tensor_free(zeros);
    for (int c = 0; c < 2; c++) {
        amp_tensor_free(q[c]);
        amp_tensor_free(k[c]);
        amp_tensor_free(v[c]);
    }
}

/* The packed grouped form against split + permute + the dense grouped form, forward and qkv's
 * gradient, bit for bit. */
static void packed_vs_split(amp_ctx *ctx, amp_dtype dt) {
    const int64_t B = 2, T_ = 19, H = 8, KV = 2, D = 64;
    char cs[64];
    snprintf(cs, sizeof cs, "packed %s", amp_dtype_name(dt));
    amp_tensor *qkv[2], *y[2], *parts[3], *dense[3];
    for (int c = 0; c < 2; c++) qkv[c] = leaf(ctx, dt, 4, (const int64_t[]){B, T_, H + 2 * KV, D}, 0.29);
    amp_attention_options o = {.causal = true, .kv_heads = KV};
    CHECK_OK(amp_scaled_dot_product_attention_qkvpacked(qkv[0], &o, &y[0]));
    int64_t sizes[3] = {H, KV, KV}, at = 0;
    for (int p = 0; p < 3; p++) {
        CHECK_OK(amp_narrow(qkv[1], 2, at, sizes[p], &parts[p]));
        CHECK_OK(amp_permute(parts[p], (const int[]){0, 2, 1, 3}, &dense[p]));
        at += sizes[p];
    }
    o.kv_heads = 0;
    CHECK_OK(amp_scaled_dot_product_attention(dense[0], dense[1], dense[2], &o, &y[1]));
    CHECK_OK(amp_permute(y[1], (const int[]){0, 2, 1, 3}, &y[1]));
    if (!same(y[0], y[1], "y", cs)) return;
    amp_tensor *s = NULL, *loss = NULL, *m = NULL;
    CHECK_OK(amp_mul_scalar(y[1], 0.5f, &m));
    CHECK_OK(amp_add(y[0], m, &s));
    CHECK_OK(amp_mean(s, &loss));
    CHECK_OK(amp_backward(loss));
    /* y1 carries half y0's gradient: compare dqkv0 / 2 with dqkv1 through a second pass */
    amp_tensor *g0 = grad_of(qkv[0]), *g1 = grad_of(qkv[1]), *h0 = NULL;
    CHECK_OK(amp_mul_scalar(g0, 0.5f, &h0));
    same(h0, g1, "dqkv", cs);
    amp_ctx_reset_step(ctx);
    amp_tensor_free(qkv[0]);
    amp_tensor_free(qkv[1]);
}

static void run_all(amp_device device) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 9}, &ctx));
    if (!ctx) return;
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        int before = test_n_fail;
        gc_run(ctx, &cases[i], 9100 + (uint64_t)i);
        printf("%-48s %s\n", cases[i].name, test_n_fail == before ? "ok" : "FAILED");
    }
    const int64_t kvs[3] = {1, 2, 4}, ts[3] = {1, 17, 257};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            int64_t D = (a + b) % 2 ? 128 : 64;
            gqa_vs_repeated(ctx, AMP_F32, kvs[a], ts[b], D, 0.0f);
            gqa_vs_repeated(ctx, AMP_BF16, kvs[a], ts[b], D, b == 1 ? 0.2f : 0.0f);
        }
    packed_vs_split(ctx, AMP_F32);
    packed_vs_split(ctx, AMP_BF16);
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(run_all);
    return test_summary("test_attention_gqa");
}
