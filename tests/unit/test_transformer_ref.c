/* The transformer ops against PyTorch's own values (tests/ref/transformer_ref.h, written by
 * tests/ref/gen_transformer_ref.py with torch): layer_norm, rms_norm, both GELUs, softmax,
 * log_softmax, causal and padded attention, embedding and cross-entropy (with ignore_index and
 * label smoothing), forward and the inputs' gradients of the same loss, in f32 on every device
 * that answers; the attention cases also through the qkvpacked op, PyTorch's tensors moved into
 * its layout. Needs no torch: the values are committed. */
#include <math.h>
#include <stdio.h>

#include "amp/amp.h"
#include "ref/transformer_ref.h"
#include "test_devices.h"
#include "test_util.h"

/* f32 with a few roundings of difference in the order of operations. */
#define REL 2e-5
#define ABS 2e-6

static amp_tensor *from_ref(amp_ctx *ctx, const tref_tensor *r, bool grad) {
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, r->ndim, r->shape, r->value, &t));
    if (t && grad) CHECK_OK(amp_tensor_set_requires_grad(t, true));
    return t;
}

static amp_tensor *ints_tensor(amp_ctx *ctx, const tref_case *c) {
    amp_tensor *t = NULL;
    int64_t n = c->n_ints;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, &n, c->ints, &t));
    return t;
}

/* Whether t's n values match want, within REL of the largest |want| plus ABS. */
static bool matches(const char *what, const char *which, amp_tensor *t, const float *want,
                    int64_t n) {
    float got[1024];
    if (n > 1024 || !t) return false;
    CHECK_OK(amp_tensor_to_host_f32(t, got, (size_t)n * sizeof *got));
    double big = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) big = fabs(want[i]) > big ? fabs(want[i]) : big;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        worst = e > worst || e != e ? e : worst;
    }
    bool ok = worst <= REL * big + ABS;
    CHECK_MSG(ok, "%s %s: largest error %.3g against PyTorch (largest value %.3g)", what, which,
              worst, big);
    return ok;
}

static int64_t numel(const tref_tensor *r) {
    int64_t n = 1;
    for (int d = 0; d < r->ndim; d++) n *= r->shape[d];
    return n;
}

/* The library's output of case c from inputs x (dy excluded); *aux is the i32 tensor it made
 * (kv_len, ids, labels), which the backward reads: the caller frees it after. */
static amp_status forward(amp_ctx *ctx, const tref_case *c, amp_tensor **x, amp_tensor **y,
                          amp_tensor **aux) {
    switch (c->op) {
    case REF_LAYER_NORM: return amp_norm(x[0], NULL, x[1], x[2], &(amp_norm_opts){.eps = 1e-5f}, NULL, y);
    case REF_RMS_NORM: return amp_norm(x[0], NULL, x[1], NULL, &(amp_norm_opts){.kind = AMP_NORM_RMS, .eps = 1e-6f}, NULL, y);
    case REF_GELU_TANH: return amp_gelu(x[0], true, y);
    case REF_GELU_ERF: return amp_gelu(x[0], false, y);
    case REF_SOFTMAX: return amp_softmax(x[0], -1, y);
    case REF_LOG_SOFTMAX: return amp_log_softmax(x[0], -1, y);
    case REF_ATTENTION: {
        bool causal = c->ints[0] == c->in[0].shape[2] && c->ints[1] == c->in[0].shape[2];
        if (!causal) *aux = ints_tensor(ctx, c);
        amp_attention_options o = {.causal = causal, .kv_len = *aux};
        return amp_scaled_dot_product_attention(x[0], x[1], x[2], &o, y);
    }
    case REF_EMBEDDING: {
        const int64_t shape[2] = {c->y.shape[0], c->y.shape[1]};
        CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 2, shape, c->ints, aux));
        return amp_embedding(*aux, x[0], y);
    }
    case REF_CROSS_ENTROPY: {
        amp_xent_options o = amp_xent_defaults();
        o.label_smoothing = c->scalar;
        *aux = ints_tensor(ctx, c);
        return amp_cross_entropy_ex(x[0], *aux, &o, y);
    }
    }
    return AMP_ERR_INVALID_ARG;
}

static void run_case(amp_ctx *ctx, const tref_case *c) {
    bool xent = c->op == REF_CROSS_ENTROPY;
    int n_x = xent ? c->n_in : c->n_in - 1; /* the last input is dy, except for cross-entropy */
    amp_tensor *x[TREF_MAX_IN] = {NULL}, *y = NULL, *loss = NULL, *aux = NULL, *dy = NULL;
    for (int i = 0; i < n_x; i++) x[i] = from_ref(ctx, &c->in[i], true);
    CHECK_OK(forward(ctx, c, x, &y, &aux));
    bool ok = matches(c->name, "y", y, c->y.value, xent ? 1 : numel(&c->y));
    if (xent) {
        loss = y;
    } else {
        amp_tensor *prod = NULL;
        dy = from_ref(ctx, &c->in[n_x], false);
        CHECK_OK(amp_mul(y, dy, &prod));
        CHECK_OK(amp_mean(prod, &loss));
    }
    CHECK_OK(amp_backward(loss));
    for (int i = 0; i < n_x; i++) {
        amp_tensor *g = NULL;
        CHECK_OK(amp_tensor_get_grad(x[i], &g));
        ok &= matches(c->name, c->in[i].name, g, c->in[i].grad, numel(&c->in[i]));
    }
    printf("  %-24s %s\n", c->name, ok ? "ok" : "FAILED");
    amp_ctx_reset_step(ctx);
    for (int i = 0; i < n_x; i++) amp_tensor_free(x[i]);
    amp_tensor_free(dy);
    amp_tensor_free(aux);
}

/* Where element i of a dense [B, H, T, D] tensor sits in part `part` of `parts` of a packed
 * [B, T, parts, H, D] one (the qkvpacked layout: q, k, v parts of qkv; y and dy one part). */
static int64_t packed_at(const int64_t *bhtd, int parts, int part, int64_t i) {
    int64_t H = bhtd[1], T = bhtd[2], D = bhtd[3];
    int64_t e = i % D, t = i / D % T, h = i / (D * T) % H, b = i / (D * T * H);
    return (((b * T + t) * parts + part) * H + h) * D + e;
}

/* An attention case again through amp_scaled_dot_product_attention_qkvpacked: PyTorch's q, k,
 * v, dy, y and gradients moved into the packed layout, held to the same tolerance. */
static void run_packed(amp_ctx *ctx, const tref_case *c) {
    const int64_t *bhtd = c->in[0].shape, n = numel(&c->in[0]);
    const int64_t qkv_shape[5] = {bhtd[0], bhtd[2], 3, bhtd[1], bhtd[3]};
    const int64_t y_shape[4] = {bhtd[0], bhtd[2], bhtd[1], bhtd[3]};
    float qkv[3 * 1024], grad[3 * 1024], dy[1024], y_want[1024];
    if (3 * n > 1024) {
        CHECK_MSG(false, "%s: %lld elements, more than this check's buffers hold", c->name,
                  (long long)n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        for (int a = 0; a < 3; a++) {
            qkv[packed_at(bhtd, 3, a, i)] = c->in[a].value[i];
            grad[packed_at(bhtd, 3, a, i)] = c->in[a].grad[i];
        }
        dy[packed_at(bhtd, 1, 0, i)] = c->in[3].value[i];
        y_want[packed_at(bhtd, 1, 0, i)] = c->y.value[i];
    }
    amp_tensor *x = NULL, *d = NULL, *y = NULL, *prod = NULL, *loss = NULL, *g = NULL, *len = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 5, qkv_shape, qkv, &x));
    CHECK_OK(amp_tensor_set_requires_grad(x, true));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, y_shape, dy, &d));
    bool causal = c->ints[0] == bhtd[2] && c->ints[1] == bhtd[2];
    if (!causal) len = ints_tensor(ctx, c);
    amp_attention_options o = {.causal = causal, .kv_len = len};
    CHECK_OK(amp_scaled_dot_product_attention_qkvpacked(x, &o, &y));
    bool ok = matches(c->name, "y (qkvpacked)", y, y_want, n);
    CHECK_OK(amp_mul(y, d, &prod));
    CHECK_OK(amp_mean(prod, &loss));
    CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_tensor_get_grad(x, &g));
    ok &= matches(c->name, "qkv (qkvpacked)", g, grad, 3 * n);
    printf("  %-24s %s\n", "  the same, qkvpacked", ok ? "ok" : "FAILED");
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x), amp_tensor_free(d), amp_tensor_free(len);
}

static void run_all(amp_device device) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 1}, &ctx));
    if (!ctx) return;
    for (int i = 0; i < TREF_N_CASES; i++) {
        run_case(ctx, &tref_cases[i]);
        if (tref_cases[i].op == REF_ATTENTION) run_packed(ctx, &tref_cases[i]);
    }
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(run_all);
    return test_summary("test_transformer_ref");
}
