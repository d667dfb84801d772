/* The fused batch norm + ReLU (nn/ops_norm.c, nn/ops_sync_batchnorm.c: the ReLU applied in the
 * normalising pass, amp_bn_desc.relu) and the sequential model's use of it (nn/sequential.c), on
 * the CPU backend and, when one answers (the cudacpu build, a GPU), on the CUDA backend:
 *  - gradient check with tests/gradcheck_run.h against a float64 reference (batch norm, then
 *    relu): x with and without gradient, and conv + batchnorm2d_relu + maxpool + linear;
 *  - against amp_batchnorm2d followed by amp_relu on the same leaves, f32, f16 and bf16 x: the
 *    same outputs (-0 counted equal to +0), running statistics and gradients of x, gamma and
 *    beta, bit for bit, in training and in eval mode; the same for SyncBatchNorm in a world of
 *    one (amp_sync_batchnorm2d_relu against amp_sync_batchnorm2d and amp_relu);
 *  - the ConvNet preset runs batchnorm2d_relu for both blocks (trace: no batchnorm2d, no relu)
 *    and its logits and gradients equal those of the unfused chain of ops on its parameters;
 *  - argument errors name amp_batchnorm2d_relu and the culprit; the backend's backward refuses a
 *    descriptor with relu set. */
#include <math.h>

#include "core/backend.h"
#include "fused_check.h"
#include "nn/norm_internal.h"

/* ---- gradient check (in: x, gamma, beta, running_mean, running_var) ---- */

static amp_status lib_bn_relu(gc_case *c, amp_tensor **y) {
    return amp_batchnorm2d_relu(T(0), T(1), T(2), T(3), T(4), true, 0.1f, 1e-5f, y);
}
static void ref_bn_relu_c(const gc_case *c, double *y) {
    ref_bn_train(S(0, 0), S(0, 1), S(0, 2) * S(0, 3), V(0), V(1), V(2), (double)1e-5f, 0.1, NULL,
                 NULL, y);
    ref_relu(c->in[0].numel, y, y);
}

/* conv(pad 1) -> batchnorm2d_relu -> maxpool 2 -> flatten -> linear.
 * in: x, w1, b1, gamma, beta, running_mean, running_var, wf, bf. */
static amp_status lib_chain(gc_case *c, amp_tensor **y) {
    amp_tensor *a, *r, *p, *f;
    amp_status s = amp_conv2d(T(0), T(1), T(2), 1, 1, &a);
    if (!s) s = amp_batchnorm2d_relu(a, T(3), T(4), T(5), T(6), true, 0.1f, 1e-5f, &r);
    if (!s) s = amp_maxpool2d(r, 2, 2, 0, &p);
    if (!s) s = amp_flatten(p, &f);
    return s ? s : amp_linear(f, T(7), T(8), y);
}
static void ref_chain_c(const gc_case *c, double *y) {
    int64_t n = S(0, 0), ci = S(0, 1), h = S(0, 2), w = S(0, 3), co = S(1, 0);
    double *a = malloc((size_t)(n * co * h * w) * sizeof *a);
    double *p = malloc((size_t)(n * co * (h / 2) * (w / 2)) * sizeof *p);
    ref_conv2d(n, ci, h, w, co, 3, 3, 1, 1, V(0), V(1), V(2), a);
    ref_bn_train(n, co, h * w, a, V(3), V(4), (double)1e-5f, 0.1, NULL, NULL, a);
    ref_relu(n * co * h * w, a, a);
    ref_maxpool2d(n, co, h, w, 2, 2, 0, a, p);
    ref_linear(n, co * (h / 2) * (w / 2), S(7, 0), p, V(7), V(8), y);
    free(a);
    free(p);
}

#define BN_IN(c) X_("gamma", 1, c), X_("beta", 1, c), \
    IN("running_mean", 1, GC_UNIFORM, -0.1, 0.1, false, c), IN("running_var", 1, GC_UNIFORM, 0.5, 1.5, false, c)

static gc_case gc_cases[] = {
    {OP("batchnorm2d_relu train", lib_bn_relu, ref_bn_relu_c),
     .in = {IN("x", 4, GC_UNIFORM, -1, 3, true, 3, 4, 3, 5), BN_IN(4)}, OUT(4, 3, 4, 3, 5)},
    {OP("batchnorm2d_relu x without grad", lib_bn_relu, ref_bn_relu_c),
     .in = {IN("x", 4, GC_UNIFORM, -2, 1, false, 2, 3, 4, 4), BN_IN(3)}, OUT(4, 2, 3, 4, 4)},
    {OP("conv + batchnorm2d_relu + maxpool + linear", lib_chain, ref_chain_c),
     .in = {X_("x", 4, 2, 2, 4, 4), W_("w1", 4, 3, 2, 3, 3), W_("b1", 1, 3), BN_IN(3),
            W_("wf", 2, 4, 12), W_("bf", 1, 4)},
     OUT(2, 2, 4)},
};

/* ---- fused against unfused ---- */

enum { BN = 6, BC = 5, BH = 7, BW = 6, BX = BN * BC * BH * BW };

typedef struct bn_run {
    float y[BX], gx[BX], gg[BC], gb[BC], rm[BC], rv[BC];
} bn_run;

/* The leaves of one comparison: x, gamma, beta (with gradients), the running statistics (reset
 * to rm0/rv0 before each run) and the loss weights r. */
typedef struct bn_leaves {
    amp_tensor *x, *g, *b, *rm, *rv, *r;
    float rm0[BC], rv0[BC];
} bn_leaves;

typedef amp_status (*bn_fn)(amp_tensor *, amp_tensor *, amp_tensor *, amp_tensor *, amp_tensor *,
                            bool, float, float, amp_tensor **);

/* y = relu(bn(x cast to dt)) by `fused` or by `plain` then amp_relu, L = mean(y * r) in
 * training; the values of y (as f32), the leaves' gradients and the running statistics. */
static void run_bn(amp_ctx *ctx, bn_fn fused, bn_fn plain, bool training, amp_dtype dt,
                   bn_leaves *l, bn_run *out) {
    amp_tensor *xh = l->x, *z = NULL, *y = NULL, *y32 = NULL, *yr = NULL, *loss = NULL;
    CHECK_OK(amp_tensor_copy_from_host(l->rm, l->rm0, sizeof l->rm0));
    CHECK_OK(amp_tensor_copy_from_host(l->rv, l->rv0, sizeof l->rv0));
    if (dt != AMP_F32) CHECK_OK(amp_cast(l->x, dt, &xh));
    if (fused) {
        CHECK_OK(fused(xh, l->g, l->b, l->rm, l->rv, training, 0.1f, 1e-5f, &y));
    } else {
        CHECK_OK(plain(xh, l->g, l->b, l->rm, l->rv, training, 0.1f, 1e-5f, &z));
        if (z) CHECK_OK(amp_relu(z, &y));
    }
    if (y) CHECK_OK(amp_cast(y, AMP_F32, &y32));
    if (y32) CHECK_OK(amp_tensor_to_host(y32, out->y, sizeof out->y));
    if (training) {
        if (y32) CHECK_OK(amp_mul(y32, l->r, &yr));
        if (yr) CHECK_OK(amp_mean(yr, &loss));
        if (loss) CHECK_OK(amp_backward(loss));
    }
    if (training) {
        grad_to_host(l->x, out->gx);
        grad_to_host(l->g, out->gg);
        grad_to_host(l->b, out->gb);
    }
    CHECK_OK(amp_tensor_to_host(l->rm, out->rm, sizeof out->rm));
    CHECK_OK(amp_tensor_to_host(l->rv, out->rv, sizeof out->rv));
    amp_tensor_zero_grad(l->x);
    amp_tensor_zero_grad(l->g);
    amp_tensor_zero_grad(l->b);
    amp_ctx_reset_step(ctx);
}

static amp_tensor *leaf(amp_ctx *ctx, int ndim, const int64_t *shape, const float *v, bool grad) {
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, ndim, shape, v, &t));
    if (t && grad) CHECK_OK(amp_tensor_set_requires_grad(t, true));
    return t;
}

static void test_against_unfused(amp_ctx *ctx) {
    ref_rng rng = {91};
    static float xv[BX], rv[BX];
    float gv[BC], bv[BC];
    bn_leaves l;
    for (int i = 0; i < BX; i++) xv[i] = (float)ref_rng_uniform(&rng, -1, 1.2);
    for (int i = 0; i < BX; i++) rv[i] = (float)ref_rng_uniform(&rng, -1, 1);
    for (int i = 0; i < BC; i++) {
        gv[i] = (float)ref_rng_uniform(&rng, 0.5, 1.5);
        bv[i] = (float)ref_rng_uniform(&rng, -0.5, 0.5);
        l.rm0[i] = (float)ref_rng_uniform(&rng, -0.1, 0.1);
        l.rv0[i] = (float)ref_rng_uniform(&rng, 0.5, 1.5);
    }
    const int64_t xs[4] = {BN, BC, BH, BW}, cs[1] = {BC};
    l.x = leaf(ctx, 4, xs, xv, true);
    l.r = leaf(ctx, 4, xs, rv, false);
    l.g = leaf(ctx, 1, cs, gv, true);
    l.b = leaf(ctx, 1, cs, bv, true);
    l.rm = leaf(ctx, 1, cs, l.rm0, false);
    l.rv = leaf(ctx, 1, cs, l.rv0, false);
    if (!l.x || !l.r || !l.g || !l.b || !l.rm || !l.rv) return;
    static bn_run fu, un;
    const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    const struct {
        const char *name;
        bn_fn fused, plain;
    } ops[2] = {{"batchnorm2d", amp_batchnorm2d_relu, amp_batchnorm2d},
                {"sync_batchnorm2d (world of one)", amp_sync_batchnorm2d_relu,
                 amp_sync_batchnorm2d}};
    for (int o = 0; o < 2; o++)
        for (int t = 0; t < 3; t++)
            for (int training = 1; training >= 0; training--) {
                memset(&fu, 0, sizeof fu);
                memset(&un, 0, sizeof un);
                run_bn(ctx, ops[o].fused, NULL, training, dts[t], &l, &fu);
                run_bn(ctx, NULL, ops[o].plain, training, dts[t], &l, &un);
                int by = n_differ(fu.y, un.y, BX), bx = n_differ(fu.gx, un.gx, BX);
                int bg = n_differ(fu.gg, un.gg, BC) + n_differ(fu.gb, un.gb, BC);
                int bs = n_differ(fu.rm, un.rm, BC) + n_differ(fu.rv, un.rv, BC);
                CHECK_MSG(by == 0 && bx == 0 && bg == 0 && bs == 0,
                          "%s, %s %s, %s: fused and unfused differ at %d y, %d dx, %d dgamma/dbeta, "
                          "%d running stats", ctx->backend->name, ops[o].name,
                          training ? "train" : "eval", amp_dtype_name(dts[t]), by, bx, bg, bs);
                int pos = 0, moved = 0;
                for (int i = 0; i < BX; i++) pos += fu.y[i] > 0;
                for (int i = 0; i < BC; i++) moved += fu.rm[i] != l.rm0[i];
                CHECK_MSG(pos > BX / 4 && pos < 3 * BX / 4, "%d of %d outputs positive", pos, BX);
                CHECK_MSG(moved == (training ? BC : 0), "%s: %d running means moved",
                          training ? "train" : "eval", moved);
            }
    amp_tensor *leaves[6] = {l.x, l.r, l.g, l.b, l.rm, l.rv};
    for (int i = 0; i < 6; i++) amp_tensor_free(leaves[i]);
}

/* ---- the ConvNet preset ---- */

enum { CN = 4, CONV_PARAMS = 10 };

/* Logits and every parameter's gradient of the preset's forward, or of the unfused chain of ops
 * on the same parameters and buffers. */
static void convnet_step(amp_ctx *ctx, amp_model *m, bool preset, amp_tensor *x, amp_tensor *lab,
                         float *logits, float **grads, op_log *log) {
    amp_tensor *p[CONV_PARAMS], *y = NULL, *loss = NULL;
    for (int i = 0; i < CONV_PARAMS; i++) p[i] = amp_model_param(m, i);
    ctx->trace = preset ? log_op : NULL;
    ctx->trace_user = log;
    if (preset) {
        CHECK_OK(amp_model_forward(m, x, &y));
    } else {
        amp_tensor *h = x;
        for (int blk = 0; blk < 2 && h; blk++) {
            amp_tensor *a = NULL, *b = NULL, *r = NULL;
            CHECK_OK(amp_conv2d(h, p[4 * blk], p[4 * blk + 1], 1, 2, &a));
            if (a)
                CHECK_OK(amp_batchnorm2d(a, p[4 * blk + 2], p[4 * blk + 3],
                                         amp_model_buffer(m, 2 * blk),
                                         amp_model_buffer(m, 2 * blk + 1), true, 0.1f, 1e-5f, &b));
            if (b) CHECK_OK(amp_relu(b, &r));
            h = NULL;
            if (r) CHECK_OK(amp_maxpool2d(r, 2, 2, 0, &h));
        }
        amp_tensor *f = NULL;
        if (h) CHECK_OK(amp_flatten(h, &f));
        if (f) CHECK_OK(amp_linear(f, p[8], p[9], &y));
    }
    ctx->trace = NULL;
    if (y) CHECK_OK(amp_tensor_to_host(y, logits, CN * 10 * sizeof *logits));
    if (y) CHECK_OK(amp_cross_entropy(y, lab, &loss));
    if (loss) CHECK_OK(amp_backward(loss));
    for (int i = 0; i < CONV_PARAMS; i++) {
        grad_to_host(p[i], grads[i]);
        amp_tensor_zero_grad(p[i]);
    }
    amp_ctx_reset_step(ctx);
}

static void test_convnet_preset(amp_ctx *ctx) {
    amp_model *m = NULL;
    CHECK_OK(amp_model_convnet_mnist(ctx, &m));
    if (!m) return;
    CHECK_OK(amp_model_build(m));
    CHECK(amp_model_n_params(m) == CONV_PARAMS && amp_model_n_buffers(m) == 4);
    ref_rng rng = {6};
    static float xv[CN * 784];
    int32_t labels[CN];
    for (int i = 0; i < CN * 784; i++) xv[i] = (float)ref_rng_uniform(&rng, 0, 1);
    for (int i = 0; i < CN; i++) labels[i] = ref_rng_below(&rng, 10);
    amp_tensor *x = NULL, *lab = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, (const int64_t[]){CN, 1, 28, 28}, xv, &x));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (const int64_t[]){CN}, labels, &lab));
    float lf[2][CN * 10], *g[2][CONV_PARAMS];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < CONV_PARAMS; i++)
            g[k][i] = calloc((size_t)amp_model_param(m, i)->numel, sizeof(float));
    op_log log = {.n = 0};
    convnet_step(ctx, m, true, x, lab, lf[0], g[0], &log);
    convnet_step(ctx, m, false, x, lab, lf[1], g[1], NULL);
    int n_fused = 0, n_other = 0;
    for (int i = 0; i < log.n; i++) {
        n_fused += !strcmp(log.ops[i], "batchnorm2d_relu");
        n_other += !strcmp(log.ops[i], "relu") || !strcmp(log.ops[i], "batchnorm2d");
    }
    CHECK_MSG(n_fused == 2 && n_other == 0,
              "%s: the preset ran %d batchnorm2d_relu and %d batchnorm2d or relu",
              ctx->backend->name, n_fused, n_other);
    int bad = n_differ(lf[0], lf[1], CN * 10);
    CHECK_MSG(bad == 0, "%s: %d logits differ", ctx->backend->name, bad);
    for (int i = 0; i < CONV_PARAMS; i++) {
        int n = (int)amp_model_param(m, i)->numel;
        bad = n_differ(g[0][i], g[1][i], n);
        CHECK_MSG(bad == 0, "%s: %s: %d of %d gradients differ", ctx->backend->name,
                  amp_model_param_name(m, i), bad, n);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < CONV_PARAMS; i++) free(g[k][i]);
    amp_tensor_free(x);
    amp_tensor_free(lab);
    amp_model_free(m);
}

/* The fused op's argument errors name it and the culprit, as amp_batchnorm2d's do; the backend's
 * backward refuses the forward's flag. */
static void test_errors(amp_ctx *ctx) {
    amp_tensor *x = NULL, *g = NULL, *g5 = NULL, *y = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (const int64_t[]){2, 4, 3, 3}, &x));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){4}, &g));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){5}, &g5));
    CHECK_FAILS(amp_batchnorm2d_relu(NULL, g, g, g, g, true, 0.1f, 1e-5f, &y), AMP_ERR_INVALID_ARG,
                "amp_batchnorm2d_relu: argument 'x'");
    CHECK_FAILS(amp_batchnorm2d_relu(x, g, g, g, g, true, 0.1f, 1e-5f, NULL), AMP_ERR_INVALID_ARG,
                "argument 'out'");
    CHECK_FAILS(amp_batchnorm2d_relu(x, g5, g, g, g, true, 0.1f, 1e-5f, &y), AMP_ERR_SHAPE,
                "amp_batchnorm2d_relu: gamma has 5 elements, want 4 (one per channel)");
    CHECK_FAILS(amp_batchnorm2d_relu(x, g, g, g, g, true, 0.1f, 0.0f, &y), AMP_ERR_INVALID_ARG,
                "amp_batchnorm2d_relu: eps 0 must be > 0");
    CHECK_FAILS(amp_sync_batchnorm2d_relu(x, g, g5, g, g, true, 0.1f, 1e-5f, &y), AMP_ERR_SHAPE,
                "amp_sync_batchnorm2d_relu: beta has 5 elements");
    amp_bn_desc d = {.n = 2, .c = 4, .hw = 9, .eps = 1e-5f, .momentum = 0.1f, .dtype = AMP_F32,
                     .relu = true};
    CHECK_FAILS(ctx->backend->k.bn_bwd(ctx->backend->dev, &d, x->data, x->data, NULL, NULL, g->data,
                                       g->data, NULL, NULL, NULL),
                AMP_ERR_INVALID_ARG, "argument 'y' is NULL; d->relu is set");
    d.relu = false;
    CHECK_FAILS(ctx->backend->k.bn_bwd(ctx->backend->dev, &d, x->data, x->data, x->data, NULL,
                                       g->data, g->data, NULL, NULL, NULL),
                AMP_ERR_INVALID_ARG, "argument 'y' is given but d->relu is not set");
    amp_tensor_free(x);
    amp_tensor_free(g);
    amp_tensor_free(g5);
}

int main(void) {
    static const fused_test tests[] = {test_against_unfused, test_convnet_preset, test_errors};
    int n_cases = (int)(sizeof gc_cases / sizeof gc_cases[0]);
    return fused_check_main("test_gradcheck_bn_relu", gc_cases, n_cases, 3000, 37, tests,
                            (int)(sizeof tests / sizeof tests[0]));
}
