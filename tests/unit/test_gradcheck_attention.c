/* amp_scaled_dot_product_attention through autograd: gradients of q, k and v against float64
 * finite differences (causal, padded by kv_len, plain), q = k = v as one tensor, the qkvpacked
 * form (and its bits against the split and permutes it replaces), on every device that
 * answers; the memory ledger's peak over a forward and backward growing linearly in seq
 * (512, 1024, 2048 at batch x heads 8), never as the seq^2 probabilities would; bad input
 * refused naming the op and the tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/ctx.h"
#include "core/half.h"
#include "gradcheck_run.h"
#include "test_devices.h"

/* kernel: 1 for causal; a fourth input is kv_len. */
static amp_status lib_attn(gc_case *c, amp_tensor **y) {
    amp_attention_options o = {.causal = c->kernel == 1, .kv_len = c->n_in > 3 ? T(3) : NULL};
    return amp_scaled_dot_product_attention(T(0), T(1), T(2), &o, y);
}

static void ref_attn(const gc_case *c, double *y) {
    int64_t b = S(0, 0), h = S(0, 1), t = S(0, 2), d = S(0, 3);
    double scale = 1.0 / sqrt((double)d), p[64];
    for (int64_t bh = 0; bh < b * h; bh++)
        for (int64_t i = 0; i < t; i++) {
            int64_t len = c->n_in > 3 ? (int64_t)V(3)[bh / h] : t;
            int64_t nk = c->kernel == 1 && i + 1 < len ? i + 1 : len;
            const double *q = V(0) + (bh * t + i) * d;
            double m = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < nk; j++) {
                p[j] = 0.0;
                for (int64_t e = 0; e < d; e++) p[j] += q[e] * V(1)[(bh * t + j) * d + e];
                p[j] *= scale;
                m = p[j] > m ? p[j] : m;
            }
            for (int64_t j = 0; j < nk; j++) sum += p[j] = exp(p[j] - m);
            for (int64_t e = 0; e < d; e++) {
                double o = 0.0;
                for (int64_t j = 0; j < nk; j++) o += p[j] / sum * V(2)[(bh * t + j) * d + e];
                y[(bh * t + i) * d + e] = o;
            }
        }
}

/* q = k = v: self-attention of one tensor, its gradient the sum of the three. */
static amp_status lib_self(gc_case *c, amp_tensor **y) {
    amp_attention_options o = {.causal = true};
    return amp_scaled_dot_product_attention(T(0), T(0), T(0), &o, y);
}
static void ref_self(const gc_case *c, double *y) {
    gc_case three = *c;
    three.in[1] = three.in[2] = three.in[0];
    three.n_in = 3;
    three.kernel = 1;
    ref_attn(&three, y);
}

/* qkvpacked: qkv [b, t, 3, h, d] -> y [b, t, h, d], the dense reference on the unpacked q, k, v. */
static amp_status lib_packed(gc_case *c, amp_tensor **y) {
    amp_attention_options o = {.causal = c->kernel == 1, .kv_len = c->n_in > 1 ? T(1) : NULL};
    return amp_scaled_dot_product_attention_qkvpacked(T(0), &o, y);
}
static void ref_packed(const gc_case *c, double *y) {
    int64_t b = S(0, 0), t = S(0, 1), h = S(0, 3), d = S(0, 4), n = b * h * t * d;
    gc_case dense = {.n_in = c->n_in > 1 ? 4 : 3, .kernel = c->kernel};
    double *parts = malloc(4 * (size_t)n * sizeof *parts), *out = parts + 3 * n;
    for (int a = 0; a < 3; a++) {
        dense.in[a].val = parts + a * n;
        dense.in[a].ndim = 4;
        int64_t shape[4] = {b, h, t, d};
        memcpy(dense.in[a].shape, shape, sizeof shape);
    }
    if (c->n_in > 1) dense.in[3] = c->in[1];
    for (int64_t i = 0; i < b * t * 3 * h * d; i++) {
        int64_t e = i % d, hh = i / d % h, a = i / (d * h) % 3, tt = i / (d * h * 3) % t;
        int64_t bb = i / (d * h * 3 * t);
        parts[a * n + ((bb * h + hh) * t + tt) * d + e] = V(0)[i];
    }
    ref_attn(&dense, out);
    for (int64_t i = 0; i < n; i++) {
        int64_t e = i % d, tt = i / d % t, hh = i / (d * t) % h, bb = i / (d * t * h);
        y[((bb * t + tt) * h + hh) * d + e] = out[i];
    }
    free(parts);
}

static gc_case cases[] = {
    {OP("attention causal", lib_attn, ref_attn),
     .in = {X_("q", 4, 2, 2, 5, 4), X_("k", 4, 2, 2, 5, 4), X_("v", 4, 2, 2, 5, 4)},
     OUT(4, 2, 2, 5, 4), .kernel = 1},
    {OP("attention padded (kv_len)", lib_attn, ref_attn),
     .in = {X_("q", 4, 3, 1, 6, 3), X_("k", 4, 3, 1, 6, 3), X_("v", 4, 3, 1, 6, 3),
            IN("kv_len", 1, GC_LABELS, 0, 7, false, 3)},
     OUT(4, 3, 1, 6, 3)},
    {OP("attention causal and padded", lib_attn, ref_attn),
     .in = {X_("q", 4, 2, 1, 7, 5), X_("k", 4, 2, 1, 7, 5), X_("v", 4, 2, 1, 7, 5),
            IN("kv_len", 1, GC_LABELS, 0, 8, false, 2)},
     OUT(4, 2, 1, 7, 5), .kernel = 1},
    {OP("attention q = k = v", lib_self, ref_self), .in = {X_("x", 4, 1, 2, 6, 4)},
     OUT(4, 1, 2, 6, 4)},
    {OP("attention qkvpacked causal", lib_packed, ref_packed), .in = {X_("qkv", 5, 2, 5, 3, 2, 4)},
     OUT(4, 2, 5, 2, 4), .kernel = 1},
    {OP("attention qkvpacked causal and padded", lib_packed, ref_packed),
     .in = {X_("qkv", 5, 2, 6, 3, 3, 3), IN("kv_len", 1, GC_LABELS, 0, 7, false, 2)},
     OUT(4, 2, 6, 3, 3), .kernel = 1},
};

/* The qkvpacked op against the split, permutes and transpose it replaces (nanoGPT's
 * CausalSelfAttention), forward and backward, in f32 and bf16: the same bits in y and in qkv's
 * gradient. */
static void packed_vs_split(amp_ctx *ctx, amp_dtype dt) {
    const int64_t B = 2, T_ = 37, H = 3, D = 32, qkv_shape[5] = {B, T_, 3, H, D};
    const int64_t n = B * T_ * 3 * H * D, ny = n / 3;
    float *host = malloc((size_t)n * sizeof *host), *w_host = malloc((size_t)ny * sizeof *w_host);
    for (int64_t i = 0; i < n; i++) host[i] = (float)sin(0.37 * (double)i) * 2.0f;
    for (int64_t i = 0; i < ny; i++) w_host[i] = (float)cos(0.11 * (double)i);
    uint16_t *bits = malloc((size_t)n * sizeof *bits);
    for (int64_t i = 0; i < n; i++) bits[i] = amp_f32_to_bf16_bits(host[i]);
    amp_tensor *xh, *w;
    CHECK_OK(amp_tensor_from_host(ctx, dt, 5, qkv_shape, dt == AMP_F32 ? (void *)host : bits, &xh));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, (const int64_t[]){B, T_, H, D}, w_host, &w));
    CHECK_OK(amp_tensor_set_requires_grad(xh, true));
    amp_attention_options o = {.causal = true};
    float *y_bits[2], *g_bits[2];
    for (int way = 0; way < 2; way++) {
        amp_tensor *y, *loss, *parts[3], *p;
        if (way == 0) {
            CHECK_OK(amp_scaled_dot_product_attention_qkvpacked(xh, &o, &y));
        } else {
            CHECK_OK(amp_permute(xh, (const int[]){2, 0, 3, 1, 4}, &p));
            CHECK_OK(amp_chunk(p, 3, 0, parts));
            for (int i = 0; i < 3; i++)
                CHECK_OK(amp_reshape(parts[i], 4, (const int64_t[]){B, H, T_, D}, &parts[i]));
            CHECK_OK(amp_scaled_dot_product_attention(parts[0], parts[1], parts[2], &o, &y));
            CHECK_OK(amp_transpose(y, 1, 2, &y));
        }
        CHECK_OK(amp_mul(y, w, &loss));
        CHECK_OK(amp_mean(loss, &loss));
        y_bits[way] = malloc((size_t)ny * sizeof(float));
        g_bits[way] = malloc((size_t)n * sizeof(float));
        CHECK_OK(amp_tensor_to_host_f32(y, y_bits[way], (size_t)ny * sizeof(float)));
        CHECK_OK(amp_backward(loss));
        amp_tensor *g;
        CHECK_OK(amp_tensor_get_grad(xh, &g));
        CHECK_OK(amp_tensor_to_host_f32(g, g_bits[way], (size_t)n * sizeof(float)));
        amp_tensor_zero_grad(xh);
        amp_ctx_reset_step(ctx);
    }
    CHECK_MSG(!memcmp(y_bits[0], y_bits[1], (size_t)ny * sizeof(float)),
              "%s: the qkvpacked attention's y differs from the split one's", amp_dtype_name(dt));
    CHECK_MSG(!memcmp(g_bits[0], g_bits[1], (size_t)n * sizeof(float)),
              "%s: the qkvpacked attention's gradient differs from the split one's",
              amp_dtype_name(dt));
    printf("%-48s %s\n", dt == AMP_F32 ? "qkvpacked = split, f32" : "qkvpacked = split, bf16",
           memcmp(g_bits[0], g_bits[1], (size_t)n * sizeof(float)) ? "FAILED" : "ok");
    for (int way = 0; way < 2; way++) free(y_bits[way]), free(g_bits[way]);
    amp_tensor_free(w), amp_tensor_free(xh);
    free(host), free(w_host), free(bits);
}

/* The peak of a forward and backward above what was held before it: the bytes the step arena
 * handed out (the ledger's activations, counted in bytes, not in the arena's chunks: they double
 * as it grows, which blurs a factor of two) and the inputs' gradients. */
static size_t peak_extra(amp_ctx *ctx, int64_t seq) {
    const int64_t shape[4] = {2, 4, seq, 64};
    amp_tensor *x[3] = {NULL, NULL, NULL}, *y = NULL, *loss = NULL;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, shape, &x[i]));
        CHECK_OK(amp_tensor_set_requires_grad(x[i], true));
    }
    amp_ctx_reset_step(ctx);
    CHECK(ctx->data_arena.in_use == 0);
    amp_attention_options o = {.causal = true};
    CHECK_OK(amp_scaled_dot_product_attention(x[0], x[1], x[2], &o, &y));
    CHECK_OK(amp_mean(y, &loss));
    CHECK_OK(amp_backward(loss));
    size_t extra = ctx->data_arena.step_peak + 3 * (size_t)amp_tensor_numel(x[0]) * sizeof(float);
    amp_ctx_reset_step(ctx);
    for (int i = 0; i < 3; i++) amp_tensor_free(x[i]);
    amp_ctx_memory_trim(ctx);
    return extra;
}

static void test_memory_linear(void) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 3}, &ctx));
    if (!ctx) return;
    size_t extra[3];
    for (int s = 0; s < 3; s++) extra[s] = peak_extra(ctx, 512 << s);
    for (int s = 0; s < 3; s++) {
        double probs = 8.0 * (double)(512 << s) * (double)(512 << s) * 4.0;
        printf("seq %4d: %.2f MB above the inputs (the probabilities would be %.0f MB)\n",
               512 << s, (double)extra[s] / 1e6, probs / 1e6);
    }
    /* Doubling seq at most a bit more than doubles it (a seq^2 term would nearly quadruple). */
    CHECK_MSG(extra[1] <= 2.3 * (double)extra[0] && extra[2] <= 2.3 * (double)extra[1],
              "attention memory is not linear in seq: %zu, %zu, %zu bytes", extra[0], extra[1],
              extra[2]);
    amp_ctx_free(ctx);
}

static void test_bad_input(amp_ctx *ctx) {
    amp_tensor *q = NULL, *k = NULL, *h = NULL, *l = NULL, *y = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (const int64_t[]){2, 4, 8, 16}, &q));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (const int64_t[]){2, 2, 8, 16}, &k));
    CHECK_OK(amp_tensor_create(ctx, AMP_BF16, 4, (const int64_t[]){2, 4, 8, 16}, &h));
    amp_attention_options o = {.causal = true};
    CHECK_FAILS(amp_scaled_dot_product_attention(q, k, q, &o, &y), AMP_ERR_SHAPE,
                "amp_scaled_dot_product_attention: q [2, 4, 8, 16] [batch, heads, seq, head_dim], "
                "k [2, 2, 8, 16] and v [2, 4, 8, 16]");
    /* grouped-query: 3 key/value heads do not divide 4; more causal queries than keys; a packed
     * qkv whose heads do not divide by kv_heads */
    amp_tensor *k3 = NULL, *k5 = NULL, *p3 = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (const int64_t[]){2, 3, 8, 16}, &k3));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (const int64_t[]){2, 2, 5, 16}, &k5));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (const int64_t[]){2, 8, 7, 16}, &p3));
    CHECK_FAILS(amp_scaled_dot_product_attention(q, k3, k3, &o, &y), AMP_ERR_SHAPE,
                "kv_heads dividing heads");
    CHECK_FAILS(amp_scaled_dot_product_attention(q, k5, k5, &o, &y), AMP_ERR_SHAPE,
                "causal with 8 queries and only 5 keys");
    o.kv_heads = 3;
    CHECK_FAILS(amp_scaled_dot_product_attention(q, k, k, &o, &y), AMP_ERR_SHAPE,
                "kv_heads dividing heads");
    o.kv_heads = 2;
    CHECK_FAILS(amp_scaled_dot_product_attention_qkvpacked(p3, &o, &y), AMP_ERR_SHAPE,
                "holds 3 heads besides 2 x kv_heads = 2");
    o.kv_heads = 0;
    amp_tensor_free(k3);
    amp_tensor_free(k5);
    amp_tensor_free(p3);
    CHECK_FAILS(amp_scaled_dot_product_attention(q, h, q, &o, &y), AMP_ERR_DTYPE,
                "amp_scaled_dot_product_attention");
    CHECK_FAILS(amp_scaled_dot_product_attention(k, NULL, k, &o, &y), AMP_ERR_INVALID_ARG, "k");
    o.dropout_p = 1.0f;
    CHECK_FAILS(amp_scaled_dot_product_attention(q, q, q, &o, &y), AMP_ERR_INVALID_ARG,
                "dropout_p = 1");
    o.dropout_p = 0.0f;
    o.scale = NAN;
    CHECK_FAILS(amp_scaled_dot_product_attention(q, q, q, &o, &y), AMP_ERR_INVALID_ARG, "scale");
    o.scale = 0.0f;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (const int64_t[]){2}, (const int32_t[]){8, 9},
                                  &l));
    o.kv_len = l;
    CHECK_FAILS(amp_scaled_dot_product_attention(q, q, q, &o, &y), AMP_ERR_INVALID_ARG,
                "kv_len[1] = 9 is outside [0, 8]");
    o.kv_len = q;
    CHECK_FAILS(amp_scaled_dot_product_attention(q, q, q, &o, &y), AMP_ERR_SHAPE, "kv_len");
    CHECK_FAILS(amp_scaled_dot_product_attention(q, q, q, NULL, &y), AMP_ERR_INVALID_ARG,
                "options");
    amp_tensor *p4 = NULL, *i5 = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 5, (const int64_t[]){2, 8, 2, 4, 16}, &p4));
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 5, (const int64_t[]){2, 8, 3, 4, 16}, &i5));
    o.kv_len = NULL;
    CHECK_FAILS(amp_scaled_dot_product_attention_qkvpacked(q, &o, &y), AMP_ERR_SHAPE,
                "amp_scaled_dot_product_attention_qkvpacked: qkv has shape [2, 4, 8, 16], want 5");
    CHECK_FAILS(amp_scaled_dot_product_attention_qkvpacked(p4, &o, &y), AMP_ERR_SHAPE,
                "qkv [2, 8, 2, 4, 16] must be [batch, seq, 3, heads, head_dim]");
    CHECK_FAILS(amp_scaled_dot_product_attention_qkvpacked(i5, &o, &y), AMP_ERR_DTYPE, "qkv");
    o.kv_len = k; /* f32 */
    amp_tensor *x5 = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 5, (const int64_t[]){2, 8, 3, 4, 16}, &x5));
    CHECK_FAILS(amp_scaled_dot_product_attention_qkvpacked(x5, &o, &y), AMP_ERR_SHAPE, "kv_len");
    amp_tensor_free(p4), amp_tensor_free(i5), amp_tensor_free(x5);
    amp_ctx_reset_step(ctx);
    amp_tensor_free(q), amp_tensor_free(k), amp_tensor_free(h), amp_tensor_free(l);
}

static void run_all(amp_device device) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 17}, &ctx));
    if (!ctx) return;
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        int before = test_n_fail;
        gc_run(ctx, &cases[i], 6000 + (uint64_t)i);
        printf("%-48s %s\n", cases[i].name, test_n_fail == before ? "ok" : "FAILED");
    }
    packed_vs_split(ctx, AMP_F32);
    packed_vs_split(ctx, AMP_BF16);
    if (device == AMP_DEVICE_CPU) test_bad_input(ctx); /* CUDA's kv_len check is the device's */
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(run_all);
    test_memory_linear();
    return test_summary("test_gradcheck_attention");
}
