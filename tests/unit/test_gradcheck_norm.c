/* Gradient check of amp_norm: LayerNorm, RMSNorm and the fused residual add before either
 * (forward against float64, gradients of x, the residual, gamma and beta against float64 central
 * differences), on every device that answers; then, for both kinds, the fused add against amp_add
 * followed by the norm, bit for bit in bf16 (outputs and every gradient), its O1 form (an f32
 * stream, a bf16 residual and a bf16 y for a linear) against the casts O1 ran before it, and bad
 * input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/ctx.h"
#include "core/half.h"
#include "gradcheck_run.h"
#include "test_devices.h"

#define EPS 1e-5f

/* y = norm of each row of x (the last dim), into y; rms: RMSNorm. */
static void ref_norm(const double *x, int64_t rows, int64_t cols, const double *g,
                     const double *b, bool rms, double *y) {
    for (int64_t i = 0; i < rows; i++) {
        const double *v = x + i * cols;
        double m = 0.0, q = 0.0;
        for (int64_t j = 0; j < cols; j++) m += v[j];
        m = rms ? 0.0 : m / (double)cols;
        for (int64_t j = 0; j < cols; j++) q += (v[j] - m) * (v[j] - m);
        double rs = 1.0 / sqrt(q / (double)cols + (double)EPS);
        for (int64_t j = 0; j < cols; j++)
            y[i * cols + j] = (v[j] - m) * rs * (g ? g[j] : 1.0) + (b ? b[j] : 0.0);
    }
}

static int64_t cols_of(const gc_case *c) { return S(0, c->in[0].ndim - 1); }

static amp_status lib_ln(gc_case *c, amp_tensor **y) {
    return amp_norm(T(0), NULL, c->n_in > 1 ? T(1) : NULL, c->n_in > 2 ? T(2) : NULL, &(amp_norm_opts){.eps = EPS}, NULL, y);
}
static void ref_ln(const gc_case *c, double *y) {
    int64_t cols = cols_of(c);
    ref_norm(V(0), c->in[0].numel / cols, cols, c->n_in > 1 ? V(1) : NULL,
             c->n_in > 2 ? V(2) : NULL, false, y);
}

static amp_status lib_rms(gc_case *c, amp_tensor **y) { return amp_norm(T(0), NULL, T(1), NULL, &(amp_norm_opts){.kind = AMP_NORM_RMS, .eps = EPS}, NULL, y); }
static void ref_rms(const gc_case *c, double *y) {
    int64_t cols = cols_of(c);
    ref_norm(V(0), c->in[0].numel / cols, cols, V(1), NULL, true, y);
}

/* (x + r) * layer_norm(x + r): both outputs of the fused op feed the loss. */
static amp_status lib_add_ln(gc_case *c, amp_tensor **y) {
    amp_tensor *s = NULL, *n = NULL;
    amp_status st = amp_norm(T(0), T(1), T(2), T(3), &(amp_norm_opts){.eps = EPS}, &s, &n);
    return st ? st : amp_mul(s, n, y);
}
static void ref_add_ln(const gc_case *c, double *y) {
    int64_t cols = cols_of(c), n = c->in[0].numel;
    double s[256] = {0}, ln[256] = {0};
    for (int64_t i = 0; i < n; i++) s[i] = V(0)[i] + V(1)[i];
    ref_norm(s, n / cols, cols, V(2), V(3), false, ln);
    for (int64_t i = 0; i < n; i++) y[i] = s[i] * ln[i];
}

/* (x + r) * rms_norm(x + r), Llama's residual stream and its next RMSNorm. */
static amp_status lib_add_rms(gc_case *c, amp_tensor **y) {
    amp_tensor *s = NULL, *n = NULL;
    amp_norm_opts o = {.kind = AMP_NORM_RMS, .eps = EPS};
    amp_status st = amp_norm(T(0), T(1), T(2), NULL, &o, &s, &n);
    return st ? st : amp_mul(s, n, y);
}
static void ref_add_rms(const gc_case *c, double *y) {
    int64_t cols = cols_of(c), n = c->in[0].numel;
    double s[256] = {0}, rn[256] = {0};
    for (int64_t i = 0; i < n; i++) s[i] = V(0)[i] + V(1)[i];
    ref_norm(s, n / cols, cols, V(2), NULL, true, rn);
    for (int64_t i = 0; i < n; i++) y[i] = s[i] * rn[i];
}

static gc_case cases[] = {
    {OP("layer_norm [B, T, C]", lib_ln, ref_ln),
     .in = {X_("x", 3, 2, 3, 10), IN("gamma", 1, GC_UNIFORM, 0.5, 1.5, true, 10), W_("beta", 1, 10)},
     OUT(3, 2, 3, 10)},
    {OP("layer_norm without affine", lib_ln, ref_ln), .in = {X_("x", 2, 5, 7)}, OUT(2, 5, 7)},
    {OP("layer_norm gamma only", lib_ln, ref_ln),
     .in = {X_("x", 2, 4, 33), IN("gamma", 1, GC_UNIFORM, 0.5, 1.5, true, 33)}, OUT(2, 4, 33)},
    {OP("rms_norm", lib_rms, ref_rms),
     .in = {X_("x", 3, 2, 2, 12), IN("gamma", 1, GC_UNIFORM, 0.5, 1.5, true, 12)}, OUT(3, 2, 2, 12)},
    {OP("add_layer_norm, both outputs used", lib_add_ln, ref_add_ln),
     .in = {X_("x", 2, 4, 9), X_("r", 2, 4, 9), IN("gamma", 1, GC_UNIFORM, 0.5, 1.5, true, 9),
            W_("beta", 1, 9)},
     OUT(2, 4, 9)},
    {OP("add_rms_norm, both outputs used", lib_add_rms, ref_add_rms),
     .in = {X_("x", 2, 3, 11), X_("r", 2, 3, 11), IN("gamma", 1, GC_UNIFORM, 0.5, 1.5, true, 11)},
     OUT(2, 3, 11)},
};

/* Two copies of the leaves x [R, C], the residual r, gamma and beta (f32 [C]), all requiring
 * grad: one for the fused op, one for what it stands for. */
typedef struct ln_twins {
    amp_tensor *x[2], *r[2], *g[2], *b[2];
} ln_twins;

static void twins_make(amp_ctx *ctx, ln_twins *t, int64_t rows, int64_t cols, amp_dtype xdt,
                       const void *hx, amp_dtype rdt, const void *hr) {
    float *hg = malloc((size_t)cols * sizeof *hg), *hb = malloc((size_t)cols * sizeof *hb);
    if (!hg || !hb) abort();
    for (int64_t j = 0; j < cols; j++)
        hg[j] = 1.0f + 0.01f * (float)j, hb[j] = 0.02f * (float)j - 1.0f;
    const int64_t shape[2] = {rows, cols};
    for (int k = 0; k < 2; k++) {
        CHECK_OK(amp_tensor_from_host(ctx, xdt, 2, shape, hx, &t->x[k]));
        CHECK_OK(amp_tensor_from_host(ctx, rdt, 2, shape, hr, &t->r[k]));
        CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, &cols, hg, &t->g[k]));
        CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, &cols, hb, &t->b[k]));
        amp_tensor *leaves[4] = {t->x[k], t->r[k], t->g[k], t->b[k]};
        for (int i = 0; i < 4; i++) CHECK_OK(amp_tensor_set_requires_grad(leaves[i], true));
    }
    free(hg);
    free(hb);
}

/* The same bits in both copies' gradients (x, r, gamma, and beta unless rms); then the step
 * ends. */
static void twins_check_grads(amp_ctx *ctx, ln_twins *t, bool rms, const char *what) {
    amp_tensor *pairs[4][2] = {{t->x[0], t->x[1]}, {t->r[0], t->r[1]}, {t->g[0], t->g[1]},
                               {t->b[0], t->b[1]}};
    for (int i = 0; i < (rms ? 3 : 4); i++) {
        amp_tensor *ga = NULL, *gb = NULL;
        CHECK_OK(amp_tensor_get_grad(pairs[i][0], &ga));
        CHECK_OK(amp_tensor_get_grad(pairs[i][1], &gb));
        if (!ga || !gb) continue;
        size_t nb = (size_t)amp_tensor_numel(ga) * sizeof(float);
        float *fa = malloc(nb), *fb = malloc(nb);
        if (!fa || !fb) abort();
        CHECK_OK(amp_tensor_to_host_f32(ga, fa, nb));
        CHECK_OK(amp_tensor_to_host_f32(gb, fb, nb));
        CHECK_MSG(memcmp(fa, fb, nb) == 0, "gradient %d of %s differs", i, what);
        free(fa);
        free(fb);
    }
    amp_ctx_reset_step(ctx);
}

static void twins_free(ln_twins *t) {
    for (int k = 0; k < 2; k++) {
        amp_tensor_free(t->x[k]);
        amp_tensor_free(t->r[k]);
        amp_tensor_free(t->g[k]);
        amp_tensor_free(t->b[k]);
    }
}

/* Backward of one loss over both graphs, mean(s y + s / 4) each: both outputs carry gradients
 * (the sum's from the product first, then the LayerNorm's added), the graphs' leaves apart. */
static void twins_backward(amp_tensor *const s[2], amp_tensor *const y[2]) {
    amp_tensor *m[2] = {NULL, NULL}, *loss = NULL;
    for (int k = 0; k < 2; k++) {
        amp_tensor *p = NULL, *q = NULL;
        CHECK_OK(amp_mul(s[k], y[k], &p)); /* promoted to f32 where the dtypes differ */
        CHECK_OK(amp_mul_scalar(s[k], 0.25f, &q));
        CHECK_OK(amp_add(p, q, &p));
        CHECK_OK(amp_mean(p, &m[k]));
    }
    CHECK_OK(amp_add(m[0], m[1], &loss));
    CHECK_OK(amp_backward(loss));
}

/* amp_norm with a residual against amp_add then amp_norm in bf16, for both kinds: the same bits
 * forward and backward (the sum is rounded before the statistics in both). */
static void test_fused_equals_unfused(amp_ctx *ctx, amp_norm_kind kind) {
    enum { R = 6, C = 96 };
    uint16_t hx[R * C], hr[R * C];
    for (int i = 0; i < R * C; i++) {
        hx[i] = amp_f32_to_bf16_bits(sinf((float)i * 0.37f) * 2.0f);
        hr[i] = amp_f32_to_bf16_bits(cosf((float)i * 0.11f));
    }
    bool rms = kind == AMP_NORM_RMS;
    amp_norm_opts o = {.kind = kind, .eps = EPS};
    ln_twins t;
    twins_make(ctx, &t, R, C, AMP_BF16, hx, AMP_BF16, hr);
    amp_tensor *y[2], *s[2];
    CHECK_OK(amp_norm(t.x[0], t.r[0], t.g[0], rms ? NULL : t.b[0], &o, &s[0], &y[0]));
    CHECK_OK(amp_add(t.x[1], t.r[1], &s[1]));
    CHECK_OK(amp_norm(s[1], NULL, t.g[1], rms ? NULL : t.b[1], &o, NULL, &y[1]));
    uint16_t a16[R * C], b16[R * C];
    CHECK_OK(amp_tensor_to_host(y[0], a16, sizeof a16));
    CHECK_OK(amp_tensor_to_host(y[1], b16, sizeof b16));
    CHECK_MSG(memcmp(a16, b16, sizeof a16) == 0, "%s: the fused add's y differs",
              rms ? "RMS" : "LayerNorm");
    twins_backward(s, y);
    twins_check_grads(ctx, &t, rms, rms ? "the fused add + RMSNorm" : "the fused add + LayerNorm");
    twins_free(&t);
}

/* Under a bf16 autocast, amp_norm with a residual and AMP_NORM_OUT_FOR_LINEAR, an f32 x and a
 * bf16 residual, against the unfused casts: the residual cast to f32, amp_add, amp_norm, the
 * output cast to bf16, read by an elementwise op (a linear reading the cast would write dX in
 * f32, nn/gemm.c). The same bits forward (the sum and y) and backward (x, the residual, gamma,
 * beta; the sum's gradient arrives before the norm's, which the backward adds in place), for
 * both kinds. */
static void test_mixed_equals_casts(amp_ctx *ctx, amp_norm_kind kind) {
    enum { R = 5, C = 72 };
    float hx[R * C];
    uint16_t hr[R * C];
    for (int i = 0; i < R * C; i++) {
        hx[i] = sinf((float)i * 0.29f) * 1.7f;
        hr[i] = amp_f32_to_bf16_bits(cosf((float)i * 0.13f));
    }
    bool rms = kind == AMP_NORM_RMS;
    amp_norm_opts fused = {.kind = kind, .eps = EPS, .out = AMP_NORM_OUT_FOR_LINEAR};
    amp_norm_opts plain = {.kind = kind, .eps = EPS};
    ln_twins t;
    twins_make(ctx, &t, R, C, AMP_F32, hx, AMP_BF16, hr);
    ctx->autocast.enabled = true;
    ctx->autocast.half = AMP_BF16;
    amp_tensor *y[2], *s[2], *rf = NULL, *yf = NULL;
    CHECK_OK(amp_norm(t.x[0], t.r[0], t.g[0], rms ? NULL : t.b[0], &fused, &s[0], &y[0]));
    CHECK_OK(amp_cast(t.r[1], AMP_F32, &rf));
    CHECK_OK(amp_add(t.x[1], rf, &s[1]));
    CHECK_OK(amp_norm(s[1], NULL, t.g[1], rms ? NULL : t.b[1], &plain, NULL, &yf));
    CHECK_OK(amp_cast(yf, AMP_BF16, &y[1]));
    CHECK(amp_tensor_dtype(y[0]) == AMP_BF16 && amp_tensor_dtype(s[0]) == AMP_F32);
    uint16_t a16[R * C], b16[R * C];
    CHECK_OK(amp_tensor_to_host(y[0], a16, sizeof a16));
    CHECK_OK(amp_tensor_to_host(y[1], b16, sizeof b16));
    CHECK_MSG(memcmp(a16, b16, sizeof a16) == 0, "%s: y differs from the casts'",
              rms ? "RMS" : "LayerNorm");
    float fa[R * C], fb[R * C];
    CHECK_OK(amp_tensor_to_host(s[0], fa, sizeof fa));
    CHECK_OK(amp_tensor_to_host(s[1], fb, sizeof fb));
    CHECK_MSG(memcmp(fa, fb, sizeof fa) == 0, "the sum differs from the casts'");
    twins_backward(s, y);
    ctx->autocast.enabled = false;
    twins_check_grads(ctx, &t, rms, rms ? "the O1 RMSNorm against the casts"
                                        : "the O1 LayerNorm against the casts");
    twins_free(&t);
}

static void test_bad_input(amp_ctx *ctx) {
    amp_tensor *x = NULL, *g = NULL, *y = NULL, *s = NULL, *i32 = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){3, 8}, &x));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){7}, &g));
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 2, (const int64_t[]){3, 8}, &i32));
    CHECK_FAILS(amp_norm(x, NULL, g, NULL, &(amp_norm_opts){.eps = EPS}, NULL, &y), AMP_ERR_SHAPE, "gamma has 7 elements");
    CHECK_FAILS(amp_norm(x, NULL, NULL, NULL, &(amp_norm_opts){.eps = -1.0f}, NULL, &y), AMP_ERR_INVALID_ARG, "eps");
    CHECK_FAILS(amp_norm(i32, NULL, NULL, NULL, &(amp_norm_opts){.kind = AMP_NORM_RMS, .eps = EPS}, NULL, &y), AMP_ERR_DTYPE, "amp_norm");
    CHECK_FAILS(amp_norm(x, g, NULL, NULL, &(amp_norm_opts){.eps = EPS}, &s, &y), AMP_ERR_SHAPE, "residual");
    amp_tensor *h = NULL, *f = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_BF16, 2, (const int64_t[]){3, 8}, &h));
    CHECK_OK(amp_tensor_create(ctx, AMP_F16, 2, (const int64_t[]){3, 8}, &f));
    /* a residual wider than x, or of another half type, without autocast */
    CHECK_FAILS(amp_norm(h, x, NULL, NULL, &(amp_norm_opts){.eps = EPS}, &s, &y), AMP_ERR_DTYPE, "not wider");
    CHECK_FAILS(amp_norm(h, f, NULL, NULL, &(amp_norm_opts){.eps = EPS, .out = AMP_NORM_OUT_FOR_LINEAR}, &s, &y), AMP_ERR_DTYPE,
                "residual f16");
    /* the options: a beta for an RMSNorm, a residual without its sum, unknown enum values */
    amp_tensor *g8 = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){8}, &g8));
    amp_norm_opts rms = {.kind = AMP_NORM_RMS, .eps = EPS};
    CHECK_FAILS(amp_norm(x, NULL, g8, g8, &rms, NULL, &y), AMP_ERR_INVALID_ARG,
                "amp_norm: beta is given to an RMSNorm");
    CHECK_FAILS(amp_norm(x, x, g8, NULL, &rms, NULL, &y), AMP_ERR_INVALID_ARG,
                "amp_norm: argument 'sum' is NULL");
    CHECK_FAILS(amp_norm(x, NULL, NULL, NULL, &(amp_norm_opts){.kind = 7, .eps = EPS}, NULL, &y),
                AMP_ERR_INVALID_ARG, "opts.kind = 7");
    CHECK_FAILS(amp_norm(x, NULL, NULL, NULL, &(amp_norm_opts){.out = 3, .eps = EPS}, NULL, &y),
                AMP_ERR_INVALID_ARG, "opts.out = 3");
    amp_tensor_free(g8);
    amp_tensor_free(h);
    amp_tensor_free(f);
    amp_tensor_free(x);
    amp_tensor_free(g);
    amp_tensor_free(i32);
}

static void run_all(amp_device device) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 11}, &ctx));
    if (!ctx) return;
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        int before = test_n_fail;
        gc_run(ctx, &cases[i], 4000 + (uint64_t)i);
        printf("%-48s %s\n", cases[i].name, test_n_fail == before ? "ok" : "FAILED");
    }
    test_fused_equals_unfused(ctx, AMP_NORM_LAYER);
    test_fused_equals_unfused(ctx, AMP_NORM_RMS);
    test_mixed_equals_casts(ctx, AMP_NORM_LAYER);
    test_mixed_equals_casts(ctx, AMP_NORM_RMS);
    test_bad_input(ctx);
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(run_all);
    return test_summary("test_gradcheck_norm");
}
