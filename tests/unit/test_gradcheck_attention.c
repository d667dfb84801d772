/* amp_scaled_dot_product_attention through autograd: gradients of q, k and v against float64
 * finite differences (causal, padded by kv_len, plain), q = k = v as one tensor, on every device
 * that answers; the memory ledger's peak over a forward and backward growing linearly in seq
 * (512, 1024, 2048 at batch x heads 8), never as the seq^2 probabilities would; bad input
 * refused naming the op and the tensor. */
#include <math.h>
#include <stdio.h>

#include "amp/amp.h"
#include "core/ctx.h"
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
};

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
                "amp_scaled_dot_product_attention: q [2, 4, 8, 16], k [2, 2, 8, 16]");
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
    if (device == AMP_DEVICE_CPU) test_bad_input(ctx); /* CUDA's kv_len check is the device's */
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(run_all);
    test_memory_linear();
    return test_summary("test_gradcheck_attention");
}
