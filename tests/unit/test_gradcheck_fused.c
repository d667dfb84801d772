/* The fused linear_relu (nn/ops_linear.c: bias and ReLU in the GEMM's epilogue, the bias gradient
 * in the weight gradient's GEMM) and the sequential model's use of it (nn/sequential.c), on the
 * CPU backend and, when one answers (the cudacpu build, a GPU), on the CUDA backend:
 *  - gradient check with tests/gradcheck_run.h against a float64 reference (linear, then relu):
 *    with and without bias, x or b needing no gradient, and flatten + linear_relu + linear;
 *  - against amp_linear followed by amp_relu on the same leaves, f32 and bf16 operands (O1's
 *    casts): the same forward values (the fused output's -0 is +0) and gradients, bit for bit:
 *    the same GEMMs, the ReLU's mask taken from the same output values, and the bias gradient
 *    taken in dW's GEMM by both (whose sums the op table compares across backends);
 *  - a NaN in x: the fused output is NaN there, as relu's (not +0, as cuBLASLt's ReLU epilogue
 *    would make it), and the NaN reaches w's gradient, where the loss scaler looks for it;
 *  - the MLP preset runs linear_relu for both hidden layers (trace) and its logits and
 *    gradients equal those of the unfused chain of ops on its parameters;
 *  - argument errors name amp_linear_relu and the culprit. */
#include <math.h>

#include "fused_check.h"

static amp_status lib_linear_relu(gc_case *c, amp_tensor **y) {
    return amp_linear_relu(T(0), T(1), c->n_in > 2 ? T(2) : NULL, y);
}
static void ref_linear_relu_c(const gc_case *c, double *y) {
    int64_t n = S(0, 0), out = S(1, 0);
    ref_linear(n, S(0, 1), out, V(0), V(1), c->n_in > 2 ? V(2) : NULL, y);
    ref_relu(n * out, y, y);
}

/* flatten x[n, ...], linear_relu with (w1, b1), linear with (w2, b2). */
static amp_status lib_mlp(gc_case *c, amp_tensor **y) {
    amp_tensor *f, *h;
    amp_status s = amp_flatten(T(0), &f);
    if (!s) s = amp_linear_relu(f, T(1), T(2), &h);
    return s ? s : amp_linear(h, T(3), T(4), y);
}
static void ref_mlp_c(const gc_case *c, double *y) {
    int64_t n = S(0, 0), in = c->in[0].numel / n, hid = S(1, 0);
    double *h = malloc((size_t)(n * hid) * sizeof *h);
    ref_linear(n, in, hid, V(0), V(1), V(2), h);
    ref_relu(n * hid, h, h);
    ref_linear(n, hid, S(3, 0), h, V(3), V(4), y);
    free(h);
}

static gc_case gc_cases[] = {
    {OP("linear_relu", lib_linear_relu, ref_linear_relu_c),
     .in = {X_("x", 2, 6, 9), W_("w", 2, 7, 9), W_("b", 1, 7)}, OUT(2, 6, 7)},
    {OP("linear_relu no bias", lib_linear_relu, ref_linear_relu_c),
     .in = {X_("x", 2, 5, 8), W_("w", 2, 4, 8)}, OUT(2, 5, 4)},
    {OP("linear_relu x without grad", lib_linear_relu, ref_linear_relu_c),
     .in = {IN("x", 2, GC_UNIFORM, -1, 1, false, 4, 6), W_("w", 2, 5, 6), W_("b", 1, 5)},
     OUT(2, 4, 5)},
    {OP("linear_relu b without grad", lib_linear_relu, ref_linear_relu_c),
     .in = {X_("x", 2, 4, 6), W_("w", 2, 5, 6), IN("b", 1, GC_UNIFORM, -0.5, 0.5, false, 5)},
     OUT(2, 4, 5)},
    {OP("flatten + linear_relu + linear", lib_mlp, ref_mlp_c),
     .in = {X_("x", 4, 3, 2, 2, 3), W_("w1", 2, 8, 12), W_("b1", 1, 8), W_("w2", 2, 4, 8),
            W_("b2", 1, 4)},
     OUT(2, 3, 4)},
};

/* ---- fused against unfused ---- */

typedef struct lin_run {
    float y[64 * 48];
    float gx[64 * 40], gw[48 * 40], gb[48];
} lin_run;

enum { LN = 64, LIN = 40, LOUT = 48 };

/* y = relu(x w^T + b) fused or not, x and w cast to dt first (differentiable), L = mean(y * r);
 * the values of y (as f32) and the leaves' gradients into *out. */
static void run_linear(amp_ctx *ctx, bool fused, amp_dtype dt, amp_tensor *x, amp_tensor *w,
                       amp_tensor *b, amp_tensor *r, lin_run *out) {
    amp_tensor *xh = x, *wh = w, *z = NULL, *y = NULL, *y32 = NULL, *yr = NULL, *loss = NULL;
    if (dt != AMP_F32) {
        CHECK_OK(amp_cast(x, dt, &xh));
        CHECK_OK(amp_cast(w, dt, &wh));
    }
    if (fused) {
        CHECK_OK(amp_linear_relu(xh, wh, b, &y));
    } else {
        CHECK_OK(amp_linear(xh, wh, b, &z));
        if (z) CHECK_OK(amp_relu(z, &y));
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

static void test_against_unfused(amp_ctx *ctx) {
    ref_rng rng = {77};
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
    static lin_run fu, un;
    for (int t = 0; t < 2; t++) {
        amp_dtype dt = t ? AMP_BF16 : AMP_F32;
        memset(&fu, 0, sizeof fu);
        memset(&un, 0, sizeof un);
        run_linear(ctx, true, dt, x, w, b, r, &fu);
        run_linear(ctx, false, dt, x, w, b, r, &un);
        int by = n_differ(fu.y, un.y, LN * LOUT), bx = n_differ(fu.gx, un.gx, LN * LIN);
        int bw = n_differ(fu.gw, un.gw, LOUT * LIN), bb = n_differ(fu.gb, un.gb, LOUT);
        CHECK_MSG(by == 0 && bx == 0 && bw == 0 && bb == 0,
                  "%s, %s: fused and unfused differ at %d y, %d dx, %d dw, %d db", ctx->backend->name,
                  amp_dtype_name(dt), by, bx, bw, bb);
        int pos = 0;
        for (int i = 0; i < LN * LOUT; i++) pos += fu.y[i] > 0;
        CHECK_MSG(pos > LN * LOUT / 4 && pos < 3 * LN * LOUT / 4, "%d of %d outputs positive", pos,
                  LN * LOUT);
    }

    /* A NaN in x: row 0 of the output is NaN, fused as unfused, and w's gradient has it. */
    xv[0] = NAN;
    CHECK_OK(amp_tensor_copy_from_host(x, xv, sizeof xv));
    run_linear(ctx, true, AMP_F32, x, w, b, r, &fu);
    run_linear(ctx, false, AMP_F32, x, w, b, r, &un);
    int nan_fused = 0, nan_unfused = 0, nan_gw = 0;
    for (int j = 0; j < LOUT; j++) {
        nan_fused += isnan(fu.y[j]);
        nan_unfused += isnan(un.y[j]);
    }
    for (int i = 0; i < LOUT * LIN; i++) nan_gw += isnan(fu.gw[i]);
    CHECK_MSG(nan_fused == LOUT && nan_unfused == LOUT, "%s: NaN row: %d fused NaN, %d unfused NaN "
              "of %d", ctx->backend->name, nan_fused, nan_unfused, LOUT);
    CHECK_MSG(nan_gw > 0, "%s: the NaN did not reach w's gradient", ctx->backend->name);
    int row1 = n_differ(fu.y + LOUT, un.y + LOUT, (LN - 1) * LOUT);
    CHECK_MSG(row1 == 0, "%s: NaN case: %d other outputs differ", ctx->backend->name, row1);
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(b);
    amp_tensor_free(r);
}

/* ---- the MLP preset ---- */

enum { MN = 4, MLP_PARAMS = 6 };

/* Logits and every parameter's gradient of the preset's forward, or of the unfused chain of ops
 * on the same parameters. */
static void mlp_step(amp_ctx *ctx, amp_model *m, bool preset, amp_tensor *x, amp_tensor *lab,
                     float *logits, float **grads, op_log *log) {
    amp_tensor *p[MLP_PARAMS], *y = NULL, *loss = NULL;
    for (int i = 0; i < MLP_PARAMS; i++) p[i] = amp_model_param(m, i);
    ctx->trace = preset ? log_op : NULL;
    ctx->trace_user = log;
    if (preset) {
        CHECK_OK(amp_model_forward(m, x, &y));
    } else {
        amp_tensor *h = NULL;
        CHECK_OK(amp_flatten(x, &h));
        for (int l = 0; l < 3 && h; l++) {
            amp_tensor *z = NULL;
            CHECK_OK(amp_linear(h, p[2 * l], p[2 * l + 1], &z));
            h = z;
            if (l < 2 && h) CHECK_OK(amp_relu(z, &h));
        }
        y = h;
    }
    ctx->trace = NULL;
    if (y) CHECK_OK(amp_tensor_to_host(y, logits, MN * 10 * sizeof *logits));
    if (y) CHECK_OK(amp_cross_entropy(y, lab, &loss));
    if (loss) CHECK_OK(amp_backward(loss));
    for (int i = 0; i < MLP_PARAMS; i++) {
        grad_to_host(p[i], grads[i]);
        amp_tensor_zero_grad(p[i]);
    }
    amp_ctx_reset_step(ctx);
}

static void test_mlp_preset(amp_ctx *ctx) {
    amp_model *m = NULL;
    CHECK_OK(amp_model_mlp_mnist(ctx, &m));
    if (!m) return;
    CHECK_OK(amp_model_build(m));
    CHECK(amp_model_n_params(m) == MLP_PARAMS);
    ref_rng rng = {5};
    static float xv[MN * 784];
    int32_t labels[MN];
    for (int i = 0; i < MN * 784; i++) xv[i] = (float)ref_rng_uniform(&rng, 0, 1);
    for (int i = 0; i < MN; i++) labels[i] = ref_rng_below(&rng, 10);
    amp_tensor *x = NULL, *lab = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, (const int64_t[]){MN, 1, 28, 28}, xv, &x));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (const int64_t[]){MN}, labels, &lab));
    float lf[2][MN * 10], *g[2][MLP_PARAMS];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < MLP_PARAMS; i++)
            g[k][i] = calloc((size_t)amp_model_param(m, i)->numel, sizeof(float));
    op_log log = {.n = 0};
    mlp_step(ctx, m, true, x, lab, lf[0], g[0], &log);
    mlp_step(ctx, m, false, x, lab, lf[1], g[1], NULL);
    int n_fused = 0, n_relu = 0;
    for (int i = 0; i < log.n; i++) {
        n_fused += !strcmp(log.ops[i], "linear_relu");
        n_relu += !strcmp(log.ops[i], "relu");
    }
    CHECK_MSG(n_fused == 2 && n_relu == 0, "%s: the preset ran %d linear_relu and %d relu",
              ctx->backend->name, n_fused, n_relu);
    int bad = n_differ(lf[0], lf[1], MN * 10);
    CHECK_MSG(bad == 0, "%s: %d logits differ", ctx->backend->name, bad);
    for (int i = 0; i < MLP_PARAMS; i++) {
        int n = (int)amp_model_param(m, i)->numel;
        bad = n_differ(g[0][i], g[1][i], n);
        CHECK_MSG(bad == 0, "%s: %s: %d of %d gradients differ", ctx->backend->name,
                  amp_model_param_name(m, i), bad, n);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < MLP_PARAMS; i++) free(g[k][i]);
    amp_tensor_free(x);
    amp_tensor_free(lab);
    amp_model_free(m);
}

/* The fused op's argument errors name it and the culprit, as amp_linear's do. */
static void test_errors(amp_ctx *ctx) {
    amp_tensor *x = NULL, *w = NULL, *b = NULL, *y = NULL, *w2 = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){4, 6}, &x));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){5, 6}, &w));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){4}, &b));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){5, 7}, &w2));
    CHECK_FAILS(amp_linear_relu(NULL, w, NULL, &y), AMP_ERR_INVALID_ARG,
                "amp_linear_relu: argument 'x'");
    CHECK_FAILS(amp_linear_relu(x, w, NULL, NULL), AMP_ERR_INVALID_ARG,
                "amp_linear_relu: argument 'out'");
    CHECK_FAILS(amp_linear_relu(x, w2, NULL, &y), AMP_ERR_SHAPE,
                "amp_linear_relu: x [4, 6] and w [5, 7]: in_features differ");
    CHECK_FAILS(amp_linear_relu(x, w, b, &y), AMP_ERR_SHAPE,
                "amp_linear_relu: b has 4 elements, w has 5 output features");
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(b);
    amp_tensor_free(w2);
}

int main(void) {
    static const fused_test tests[] = {test_against_unfused, test_mlp_preset, test_errors};
    int n_cases = (int)(sizeof gc_cases / sizeof gc_cases[0]);
    return fused_check_main("test_gradcheck_fused", gc_cases, n_cases, 2000, 31, tests,
                            (int)(sizeof tests / sizeof tests[0]));
}
