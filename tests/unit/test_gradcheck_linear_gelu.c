/* The fused linear + GELU (nn/ops_linear.c, amp_linear_gelu: the GELU in the GEMM's epilogue, the
 * pre-activation kept for the backward) and the sequential model's use of it, on the CPU backend
 * and, when one answers (the cudacpu build, a GPU), on the CUDA backend:
 *  - gradient check with tests/gradcheck_run.h against a float64 reference (linear, then GELU,
 *    tanh and erf forms): with and without bias, x or b needing no gradient, x of three dims;
 *  - against amp_linear followed by amp_gelu on the same leaves, f32, bf16 and f16 operands
 *    (O1's casts): on the CPU the same values and gradients bit for bit. On CUDA the erf form
 *    likewise; the tanh form may be cuBLASLt's GELU_AUX_BIAS epilogue (core/backend.h), whose
 *    output is within 2 units of the last place of y's dtype plus 1e-6 |y| of amp_gelu's, while
 *    the gradients, computed from the same pre-activation, stay bit for bit;
 *  - a NaN in x: the fused output is NaN there and the NaN reaches w's gradient;
 *  - Linear then GELU in a sequential model runs linear_gelu (trace) and equals the unfused ops;
 *  - argument errors name amp_linear_gelu and the culprit. */
#include <math.h>

#include "core/half.h"
#include "fused_check.h"

static double gelu_ref(bool tanh_form, double x) {
    return tanh_form ? 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)))
                     : 0.5 * x * erfc(-x / sqrt(2.0));
}

/* x [..., in] (every dim but the last flattened), w [out, in], b [out] when given. */
static void ref_linear_gelu(const gc_case *c, bool tanh_form, double *y) {
    int64_t in = S(1, 1), out = S(1, 0), n = c->in[0].numel / in;
    ref_linear(n, in, out, V(0), V(1), c->n_in > 2 ? V(2) : NULL, y);
    for (int64_t i = 0; i < n * out; i++) y[i] = gelu_ref(tanh_form, y[i]);
}
static void ref_tanh(const gc_case *c, double *y) { ref_linear_gelu(c, true, y); }
static void ref_erf(const gc_case *c, double *y) { ref_linear_gelu(c, false, y); }
static amp_status lib_tanh(gc_case *c, amp_tensor **y) {
    return amp_linear_gelu(T(0), T(1), c->n_in > 2 ? T(2) : NULL, true, y);
}
static amp_status lib_erf(gc_case *c, amp_tensor **y) {
    return amp_linear_gelu(T(0), T(1), c->n_in > 2 ? T(2) : NULL, false, y);
}

static gc_case gc_cases[] = {
    {OP("linear_gelu tanh", lib_tanh, ref_tanh),
     .in = {X_("x", 2, 6, 9), W_("w", 2, 7, 9), W_("b", 1, 7)}, OUT(2, 6, 7)},
    {OP("linear_gelu erf", lib_erf, ref_erf),
     .in = {X_("x", 2, 6, 9), W_("w", 2, 7, 9), W_("b", 1, 7)}, OUT(2, 6, 7)},
    {OP("linear_gelu tanh no bias", lib_tanh, ref_tanh),
     .in = {X_("x", 2, 5, 8), W_("w", 2, 4, 8)}, OUT(2, 5, 4)},
    {OP("linear_gelu erf x without grad", lib_erf, ref_erf),
     .in = {IN("x", 2, GC_UNIFORM, -1, 1, false, 4, 6), W_("w", 2, 5, 6), W_("b", 1, 5)},
     OUT(2, 4, 5)},
    {OP("linear_gelu tanh b without grad", lib_tanh, ref_tanh),
     .in = {X_("x", 2, 4, 6), W_("w", 2, 5, 6), IN("b", 1, GC_UNIFORM, -0.5, 0.5, false, 5)},
     OUT(2, 4, 5)},
    {OP("linear_gelu tanh [B, T, C]", lib_tanh, ref_tanh),
     .in = {X_("x", 3, 2, 3, 8), W_("w", 2, 16, 8), W_("b", 1, 16)}, OUT(3, 2, 3, 16)},
};

/* ---- fused against unfused ---- */

enum { LN = 64, LIN = 40, LOUT = 48 };

typedef struct lin_run {
    float y[LN * LOUT], z[LN * LOUT]; /* z: the unfused run's pre-activation */
    float gx[LN * LIN], gw[LOUT * LIN], gb[LOUT];
} lin_run;

/* y = gelu(x w^T + b) fused or not, x and w cast to dt first (differentiable), L = mean(y * r);
 * y (as f32) and the leaves' gradients into *out. */
static void run_linear(amp_ctx *ctx, bool fused, bool tanh_form, amp_dtype dt, amp_tensor *x,
                       amp_tensor *w, amp_tensor *b, amp_tensor *r, lin_run *out) {
    amp_tensor *xh = x, *wh = w, *z = NULL, *y = NULL, *y32 = NULL, *yr = NULL, *loss = NULL;
    if (dt != AMP_F32) {
        CHECK_OK(amp_cast(x, dt, &xh));
        CHECK_OK(amp_cast(w, dt, &wh));
    }
    if (fused) {
        CHECK_OK(amp_linear_gelu(xh, wh, b, tanh_form, &y));
    } else {
        CHECK_OK(amp_linear(xh, wh, b, &z));
        if (z) CHECK_OK(amp_gelu(z, tanh_form, &y));
        amp_tensor *z32 = NULL;
        if (z) CHECK_OK(amp_cast(z, AMP_F32, &z32));
        if (z32) CHECK_OK(amp_tensor_to_host(z32, out->z, sizeof out->z));
    }
    if (y) CHECK_OK(amp_cast(y, AMP_F32, &y32));
    if (y32) CHECK_OK(amp_tensor_to_host(y32, out->y, sizeof out->y));
    if (y32) CHECK_OK(amp_mul(y32, r, &yr));
    if (yr) CHECK_OK(amp_mean(yr, &loss));
    if (loss) CHECK_OK(amp_backward(loss));
    grad_to_host(x, out->gx);
    grad_to_host(w, out->gw);
    grad_to_host(b, out->gb);
    amp_tensor_zero_grad(x);
    amp_tensor_zero_grad(w);
    amp_tensor_zero_grad(b);
    amp_ctx_reset_step(ctx);
}

/* Fused outputs a further from the unfused b than core/backend.h's bound for cuBLASLt's GELU
 * epilogue: 2^-p (2 |y| + 2 |z|), p the explicit mantissa bits of dt (23, 7, 10), z the
 * pre-activation (the GELU of the unrounded z, off by at most an ulp of z times a slope of at
 * most 1.13, and the formula's own rounding). */
static int n_beyond_bound(const float *a, const float *b, const float *z, int n, amp_dtype dt) {
    double u = dt == AMP_F32 ? 0x1p-23 : dt == AMP_BF16 ? 0x1p-7 : 0x1p-10;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        bool both_nan = isnan(a[i]) && isnan(b[i]);
        double bound = u * (2.0 * fabs(b[i]) + 2.0 * fabs(z[i]));
        if (!both_nan && !(fabs((double)a[i] - b[i]) <= bound)) {
            if (bad < 3) printf("  y[%d]: fused %.9g, unfused %.9g, z %.9g\n", i, a[i], b[i], z[i]);
            bad++;
        }
    }
    return bad;
}

static void test_against_unfused(amp_ctx *ctx) {
    ref_rng rng = {78};
    static float xv[LN * LIN], wv[LOUT * LIN], bv[LOUT], rv[LN * LOUT];
    for (int i = 0; i < LN * LIN; i++) xv[i] = (float)ref_rng_uniform(&rng, -1, 1);
    for (int i = 0; i < LOUT * LIN; i++) wv[i] = (float)ref_rng_uniform(&rng, -0.5, 0.5);
    for (int i = 0; i < LOUT; i++) bv[i] = (float)ref_rng_uniform(&rng, -0.5, 0.5);
    for (int i = 0; i < LN * LOUT; i++) rv[i] = (float)ref_rng_uniform(&rng, -1, 1);
    amp_tensor *x = NULL, *w = NULL, *b = NULL, *r = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){LN, LIN}, xv, &x));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){LOUT, LIN}, wv, &w));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, (const int64_t[]){LOUT}, bv, &b));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){LN, LOUT}, rv, &r));
    if (!x || !w || !b || !r) return;
    CHECK_OK(amp_tensor_set_requires_grad(x, true));
    CHECK_OK(amp_tensor_set_requires_grad(w, true));
    CHECK_OK(amp_tensor_set_requires_grad(b, true));
    bool cuda = ctx->backend != amp_backend_cpu();
    static lin_run fu, un;
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int t = 0; t < 6; t++) {
        amp_dtype dt = dts[t % 3];
        bool tanh_form = t >= 3;
        memset(&fu, 0, sizeof fu);
        memset(&un, 0, sizeof un);
        run_linear(ctx, true, tanh_form, dt, x, w, b, r, &fu);
        run_linear(ctx, false, tanh_form, dt, x, w, b, r, &un);
        int by = cuda && tanh_form ? n_beyond_bound(fu.y, un.y, un.z, LN * LOUT, dt)
                                   : n_differ(fu.y, un.y, LN * LOUT);
        int bx = n_differ(fu.gx, un.gx, LN * LIN);
        int bw = n_differ(fu.gw, un.gw, LOUT * LIN), bb = n_differ(fu.gb, un.gb, LOUT);
        CHECK_MSG(by == 0 && bx == 0 && bw == 0 && bb == 0,
                  "%s, %s, %s: fused and unfused differ at %d y, %d dx, %d dw, %d db",
                  ctx->backend->name, amp_dtype_name(dt), tanh_form ? "tanh" : "erf", by, bx, bw,
                  bb);
        int neg = 0;
        for (int i = 0; i < LN * LOUT; i++) neg += fu.y[i] < 0;
        CHECK_MSG(neg > LN * LOUT / 8, "%d of %d outputs negative (GELU's dip not reached)", neg,
                  LN * LOUT);
    }

    /* A NaN in x: row 0 of the output is NaN, fused as unfused, and w's gradient has it. */
    xv[0] = NAN;
    CHECK_OK(amp_tensor_copy_from_host(x, xv, sizeof xv));
    run_linear(ctx, true, true, AMP_F32, x, w, b, r, &fu);
    run_linear(ctx, false, true, AMP_F32, x, w, b, r, &un);
    int nan_fused = 0, nan_unfused = 0, nan_gw = 0;
    for (int j = 0; j < LOUT; j++) {
        nan_fused += isnan(fu.y[j]);
        nan_unfused += isnan(un.y[j]);
    }
    for (int i = 0; i < LOUT * LIN; i++) nan_gw += isnan(fu.gw[i]);
    CHECK_MSG(nan_fused == LOUT && nan_unfused == LOUT, "%s: NaN row: %d fused NaN, %d unfused NaN "
              "of %d", ctx->backend->name, nan_fused, nan_unfused, LOUT);
    CHECK_MSG(nan_gw > 0, "%s: the NaN did not reach w's gradient", ctx->backend->name);
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(b);
    amp_tensor_free(r);
}

/* ---- a sequential model: Linear, GELU, Linear ---- */

enum { SN = 6, SIN = 12, SHID = 32, SOUT = 5 };

static void seq_step(amp_ctx *ctx, amp_model *m, bool model, amp_tensor *x, float *y_host,
                     float **grads, op_log *log) {
    amp_tensor *p[4], *y = NULL, *loss = NULL;
    for (int i = 0; i < 4; i++) p[i] = amp_model_param(m, i);
    ctx->trace = model ? log_op : NULL;
    ctx->trace_user = log;
    if (model) {
        CHECK_OK(amp_model_forward(m, x, &y));
    } else {
        amp_tensor *z = NULL, *h = NULL;
        CHECK_OK(amp_linear(x, p[0], p[1], &z));
        if (z) CHECK_OK(amp_gelu(z, false, &h));
        if (h) CHECK_OK(amp_linear(h, p[2], p[3], &y));
    }
    ctx->trace = NULL;
    amp_tensor *sq = NULL;
    if (y) CHECK_OK(amp_tensor_to_host(y, y_host, SN * SOUT * sizeof *y_host));
    if (y) CHECK_OK(amp_mul(y, y, &sq));
    if (sq) CHECK_OK(amp_mean(sq, &loss));
    if (loss) CHECK_OK(amp_backward(loss));
    for (int i = 0; i < 4; i++) {
        grad_to_host(p[i], grads[i]);
        amp_tensor_zero_grad(p[i]);
    }
    amp_ctx_reset_step(ctx);
}

static void test_sequential(amp_ctx *ctx) {
    amp_model *m = NULL, *g = NULL;
    CHECK_OK(amp_seq_create(ctx, &m));
    CHECK_OK(amp_seq_add_linear(m, "fc", SIN, SHID, true));
    CHECK_OK(amp_module_gelu(ctx, false, &g));
    CHECK_OK(amp_seq_add(m, "act", g));
    CHECK_OK(amp_seq_add_linear(m, "proj", SHID, SOUT, true));
    CHECK_OK(amp_model_build(m));
    if (!m || amp_model_n_params(m) != 4) {
        CHECK(false);
        return;
    }
    ref_rng rng = {9};
    float xv[SN * SIN];
    for (int i = 0; i < SN * SIN; i++) xv[i] = (float)ref_rng_uniform(&rng, -2, 2);
    amp_tensor *x = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){SN, SIN}, xv, &x));
    float y[2][SN * SOUT], *gr[2][4];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++)
            gr[k][i] = calloc((size_t)amp_model_param(m, i)->numel, sizeof(float));
    op_log log = {.n = 0};
    seq_step(ctx, m, true, x, y[0], gr[0], &log);
    seq_step(ctx, m, false, x, y[1], gr[1], NULL);
    int n_fused = 0, n_gelu = 0;
    for (int i = 0; i < log.n; i++) {
        n_fused += !strcmp(log.ops[i], "linear_gelu");
        n_gelu += !strcmp(log.ops[i], "gelu");
    }
    CHECK_MSG(n_fused == 1 && n_gelu == 0, "%s: the model ran %d linear_gelu and %d gelu",
              ctx->backend->name, n_fused, n_gelu);
    int bad = n_differ(y[0], y[1], SN * SOUT);
    CHECK_MSG(bad == 0, "%s: %d outputs differ", ctx->backend->name, bad);
    for (int i = 0; i < 4; i++) {
        int n = (int)amp_model_param(m, i)->numel;
        bad = n_differ(gr[0][i], gr[1][i], n);
        CHECK_MSG(bad == 0, "%s: %s: %d of %d gradients differ", ctx->backend->name,
                  amp_model_param_name(m, i), bad, n);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++) free(gr[k][i]);
    amp_tensor_free(x);
    amp_model_free(m);
}

/* The fused op's argument errors name it and the culprit, as amp_linear's do. */
static void test_errors(amp_ctx *ctx) {
    amp_tensor *x = NULL, *w = NULL, *b = NULL, *y = NULL, *w2 = NULL, *xi = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){4, 6}, &x));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){5, 6}, &w));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){4}, &b));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){5, 7}, &w2));
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 2, (const int64_t[]){4, 6}, &xi));
    CHECK_FAILS(amp_linear_gelu(NULL, w, NULL, true, &y), AMP_ERR_INVALID_ARG,
                "amp_linear_gelu: argument 'x'");
    CHECK_FAILS(amp_linear_gelu(x, w, NULL, true, NULL), AMP_ERR_INVALID_ARG,
                "amp_linear_gelu: argument 'out'");
    CHECK_FAILS(amp_linear_gelu(x, w2, NULL, false, &y), AMP_ERR_SHAPE,
                "amp_linear_gelu: x [4, 6] and w [5, 7]: in_features differ");
    CHECK_FAILS(amp_linear_gelu(x, w, b, true, &y), AMP_ERR_SHAPE,
                "amp_linear_gelu: b has 4 elements, w has 5 output features");
    CHECK_FAILS(amp_linear_gelu(xi, w, NULL, true, &y), AMP_ERR_DTYPE, "amp_linear_gelu: x");
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(b);
    amp_tensor_free(w2);
    amp_tensor_free(xi);
}

int main(void) {
    static const fused_test tests[] = {test_against_unfused, test_sequential, test_errors};
    int n_cases = (int)(sizeof gc_cases / sizeof gc_cases[0]);
    return fused_check_main("test_gradcheck_linear_gelu", gc_cases, n_cases, 3000, 32, tests,
                            (int)(sizeof tests / sizeof tests[0]));
}
