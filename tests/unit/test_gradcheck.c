/* Gradient check of every op of include/amp/nn.h on the CPU backend, with the runner of
 * tests/gradcheck_run.h (random leaves kept away from relu's kink and from maxpool ties; the
 * library's f32 forward and gradients against an independent float64 reference and its central
 * differences; accumulation over two backwards and overwriting after zero_grad; tolerances
 * stated there). Beyond the gradients: batch norm's running statistics and eval mode, dropout's
 * mask, the ConvNet preset against its float64 reference, and the cast's exact gradient. The
 * fused linear_relu has its own file (test_gradcheck_fused.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/half.h"
#include "amp/rng.h"
#include "core/philox.h"
#include "gradcheck_run.h"

/* ---- the ops, through the library and through the reference ---- */

static amp_status lib_linear(gc_case *c, amp_tensor **y) {
    return amp_linear(T(0), T(1), c->n_in > 2 ? T(2) : NULL, y);
}
static void ref_linear_c(const gc_case *c, double *y) {
    ref_linear(S(0, 0), S(0, 1), S(1, 0), V(0), V(1), c->n_in > 2 ? V(2) : NULL, y);
}

static amp_status lib_matmul(gc_case *c, amp_tensor **y) { return amp_matmul(T(0), T(1), y); }
static void ref_matmul_c(const gc_case *c, double *y) {
    ref_matmul(S(0, 0), S(0, 1), S(1, 1), V(0), V(1), y);
}

static amp_status lib_conv(gc_case *c, amp_tensor **y) {
    return amp_conv2d(T(0), T(1), c->n_in > 2 ? T(2) : NULL, c->stride, c->pad, y);
}
static void ref_conv_c(const gc_case *c, double *y) {
    ref_conv2d(S(0, 0), S(0, 1), S(0, 2), S(0, 3), S(1, 0), S(1, 2), S(1, 3), c->stride, c->pad,
               V(0), V(1), c->n_in > 2 ? V(2) : NULL, y);
}

/* in: x, gamma, beta, running_mean, running_var (the last two without grad). */
static amp_status lib_bn(gc_case *c, amp_tensor **y) {
    return amp_batchnorm2d(T(0), T(1), T(2), T(3), T(4), true, 0.1f, 1e-5f, y);
}
static void ref_bn_c(const gc_case *c, double *y) {
    ref_bn_train(S(0, 0), S(0, 1), S(0, 2) * S(0, 3), V(0), V(1), V(2), (double)1e-5f, 0.1, NULL,
                 NULL, y);
}

static amp_status lib_relu(gc_case *c, amp_tensor **y) { return amp_relu(T(0), y); }
static void ref_relu_c(const gc_case *c, double *y) { ref_relu(c->in[0].numel, V(0), y); }

static amp_status lib_maxpool(gc_case *c, amp_tensor **y) {
    return amp_maxpool2d(T(0), c->kernel, c->stride, c->pad, y);
}
static void ref_maxpool_c(const gc_case *c, double *y) {
    ref_maxpool2d(S(0, 0), S(0, 1), S(0, 2), S(0, 3), c->kernel, c->stride, c->pad, V(0), y);
}

/* flatten x[n, ...] then linear: the gradient must come back in x's layout. */
static amp_status lib_flatten_linear(gc_case *c, amp_tensor **y) {
    amp_tensor *f;
    amp_status s = amp_flatten(T(0), &f);
    return s ? s : amp_linear(f, T(1), T(2), y);
}
static void ref_flatten_linear_c(const gc_case *c, double *y) {
    ref_linear(S(0, 0), c->in[0].numel / S(0, 0), S(1, 0), V(0), V(1), V(2), y);
}

/* x[2, 3, 4] viewed as [4, 6], times w[6, 3]. */
static amp_status lib_reshape_matmul(gc_case *c, amp_tensor **y) {
    amp_tensor *r;
    amp_status s = amp_reshape(T(0), 2, (const int64_t[]){4, 6}, &r);
    return s ? s : amp_matmul(r, T(1), y);
}
static void ref_reshape_matmul_c(const gc_case *c, double *y) { ref_matmul(4, 6, 3, V(0), V(1), y); }

/* reshape(reshape(x, [6, 4]), [2, 3, 4]) + x: two paths into x's gradient. */
static amp_status lib_reshape_add(gc_case *c, amp_tensor **y) {
    amp_tensor *a, *b;
    amp_status s = amp_reshape(T(0), 2, (const int64_t[]){6, 4}, &a);
    if (!s) s = amp_reshape(a, 3, (const int64_t[]){2, 3, 4}, &b);
    return s ? s : amp_add(b, T(0), y);
}
static void ref_reshape_add_c(const gc_case *c, double *y) {
    for (int64_t i = 0; i < c->in[0].numel; i++) y[i] = 2.0 * V(0)[i];
}

/* (x * 2.5 + 1.25) / -3: the three scalar ops in one chain. */
static amp_status lib_scalars(gc_case *c, amp_tensor **y) {
    amp_tensor *a = NULL, *b = NULL;
    amp_status s = amp_mul_scalar(T(0), 2.5f, &a);
    if (s == AMP_OK) s = amp_add_scalar(a, 1.25f, &b);
    return s == AMP_OK ? amp_div_scalar(b, -3.0f, y) : s;
}
static void ref_scalars_c(const gc_case *c, double *y) {
    for (int64_t i = 0; i < c->in[0].numel; i++) y[i] = (V(0)[i] * 2.5 + 1.25) / -3.0;
}

static amp_status lib_add(gc_case *c, amp_tensor **y) { return amp_add(T(0), T(1), y); }
static void ref_add_c(const gc_case *c, double *y) {
    for (int64_t i = 0; i < c->in[0].numel; i++) y[i] = V(0)[i] + V(1)[i];
}

static amp_status lib_mul(gc_case *c, amp_tensor **y) { return amp_mul(T(0), T(1), y); }
static void ref_mul_c(const gc_case *c, double *y) {
    for (int64_t i = 0; i < c->in[0].numel; i++) y[i] = V(0)[i] * V(1)[i];
}

/* The same leaf on both sides: its two contributions must add up. */
static amp_status lib_mul_self(gc_case *c, amp_tensor **y) { return amp_mul(T(0), T(0), y); }
static void ref_mul_self_c(const gc_case *c, double *y) {
    for (int64_t i = 0; i < c->in[0].numel; i++) y[i] = V(0)[i] * V(0)[i];
}

static amp_status lib_add_relu_self(gc_case *c, amp_tensor **y) {
    amp_tensor *r;
    amp_status s = amp_relu(T(0), &r);
    return s ? s : amp_add(r, T(0), y);
}
static void ref_add_relu_self_c(const gc_case *c, double *y) {
    for (int64_t i = 0; i < c->in[0].numel; i++) y[i] = (V(0)[i] > 0 ? V(0)[i] : 0.0) + V(0)[i];
}

static amp_status lib_mean(gc_case *c, amp_tensor **y) { return amp_mean(T(0), y); }
static void ref_mean_c(const gc_case *c, double *y) {
    double s = 0.0;
    for (int64_t i = 0; i < c->in[0].numel; i++) s += V(0)[i];
    y[0] = s / (double)c->in[0].numel;
}

static amp_status lib_xent(gc_case *c, amp_tensor **y) { return amp_cross_entropy(T(0), T(1), y); }
static void ref_xent_c(const gc_case *c, double *y) {
    int labels[64];
    for (int64_t i = 0; i < S(1, 0); i++) labels[i] = (int)V(1)[i];
    y[0] = ref_cross_entropy(S(0, 0), S(0, 1), V(0), labels);
}

static amp_status lib_mse(gc_case *c, amp_tensor **y) { return amp_mse_loss(T(0), T(1), y); }
static void ref_mse_c(const gc_case *c, double *y) { y[0] = ref_mse(c->in[0].numel, V(0), V(1)); }

/* Every pass replays the RNG state of the first, so the mask is the same each time. */
static amp_status lib_dropout(gc_case *c, amp_tensor **y) {
    amp_ctx *ctx = T(0)->ctx;
    if (!c->rng_saved) amp_rng_get_state(ctx, &c->rng);
    else amp_rng_set_state(ctx, &c->rng);
    c->rng_saved = true;
    return amp_dropout(T(0), c->p, true, y);
}
/* The mask by the backend contract (core/backend.h), keyed as nn/ops_elementwise.c keys it: the
 * ctx seed, and the counter the op reserved (the state before the call). */
static void ref_dropout_c(const gc_case *c, double *y) {
    double scale = 1.0 / (1.0 - (double)c->p);
    for (int64_t i = 0; i < c->in[0].numel; i++) {
        bool keep = amp_philox_uniform(c->rng.seed, c->rng.counter + (uint64_t)i) >= c->p;
        y[i] = keep ? V(0)[i] * scale : 0.0;
    }
}

/* conv(pad 1) -> batchnorm -> relu -> maxpool 2 -> flatten -> linear, all leaves checked.
 * in: x, w1, b1, gamma, beta, running_mean, running_var, wf, bf. */
static amp_status lib_chain(gc_case *c, amp_tensor **y) {
    amp_tensor *a, *b, *r, *p, *f;
    amp_status s = amp_conv2d(T(0), T(1), T(2), 1, 1, &a);
    if (!s) s = amp_batchnorm2d(a, T(3), T(4), T(5), T(6), true, 0.1f, 1e-5f, &b);
    if (!s) s = amp_relu(b, &r);
    if (!s) s = amp_maxpool2d(r, 2, 2, 0, &p);
    if (!s) s = amp_flatten(p, &f);
    return s ? s : amp_linear(f, T(7), T(8), y);
}
static void ref_chain_c(const gc_case *c, double *y) {
    int64_t n = S(0, 0), ci = S(0, 1), h = S(0, 2), w = S(0, 3), co = S(1, 0);
    double *a = malloc((size_t)(n * co * h * w) * sizeof *a), *b = malloc((size_t)(n * co * h * w) * sizeof *b);
    double *p = malloc((size_t)(n * co * (h / 2) * (w / 2)) * sizeof *p);
    ref_conv2d(n, ci, h, w, co, 3, 3, 1, 1, V(0), V(1), V(2), a);
    ref_bn_train(n, co, h * w, a, V(3), V(4), (double)1e-5f, 0.1, NULL, NULL, b);
    ref_relu(n * co * h * w, b, b);
    ref_maxpool2d(n, co, h, w, 2, 2, 0, b, p);
    ref_linear(n, co * (h / 2) * (w / 2), S(7, 0), p, V(7), V(8), y);
    free(a);
    free(b);
    free(p);
}

/* ---- the cases ---- */

#define BN_IN(c) X_("gamma", 1, c), X_("beta", 1, c), \
    IN("running_mean", 1, GC_UNIFORM, -0.1, 0.1, false, c), IN("running_var", 1, GC_UNIFORM, 0.5, 1.5, false, c)

static gc_case gc_cases[] = {
    {OP("linear", lib_linear, ref_linear_c), .in = {X_("x", 2, 4, 6), W_("w", 2, 5, 6), W_("b", 1, 5)},
     OUT(2, 4, 5)},
    {OP("linear no bias", lib_linear, ref_linear_c), .in = {X_("x", 2, 3, 7), W_("w", 2, 2, 7)}, OUT(2, 3, 2)},
    {OP("linear x without grad", lib_linear, ref_linear_c),
     .in = {IN("x", 2, GC_UNIFORM, -1, 1, false, 4, 6), W_("w", 2, 5, 6), W_("b", 1, 5)}, OUT(2, 4, 5)},
    {OP("matmul", lib_matmul, ref_matmul_c), .in = {X_("a", 2, 3, 4), X_("b", 2, 4, 5)}, OUT(2, 3, 5)},
    {OP("conv k1 s1 p0 no bias", lib_conv, ref_conv_c),
     .in = {X_("x", 4, 2, 3, 5, 4), W_("w", 4, 4, 3, 1, 1)}, OUT(4, 2, 4, 5, 4), .stride = 1, .pad = 0},
    {OP("conv k3 s1 p0", lib_conv, ref_conv_c),
     .in = {X_("x", 4, 2, 3, 6, 5), W_("w", 4, 4, 3, 3, 3), W_("b", 1, 4)}, OUT(4, 2, 4, 4, 3),
     .stride = 1, .pad = 0},
    {OP("conv k3 s2 p0", lib_conv, ref_conv_c),
     .in = {X_("x", 4, 2, 2, 7, 8), W_("w", 4, 3, 2, 3, 3), W_("b", 1, 3)}, OUT(4, 2, 3, 3, 3),
     .stride = 2, .pad = 0},
    {OP("conv k5 s1 p2", lib_conv, ref_conv_c),
     .in = {X_("x", 4, 2, 2, 6, 7), W_("w", 4, 3, 2, 5, 5), W_("b", 1, 3)}, OUT(4, 2, 3, 6, 7),
     .stride = 1, .pad = 2},
    {OP("conv k5 s2 p2 no bias", lib_conv, ref_conv_c),
     .in = {X_("x", 4, 2, 2, 8, 7), W_("w", 4, 3, 2, 5, 5)}, OUT(4, 2, 3, 4, 4), .stride = 2, .pad = 2},
    {OP("conv k3 s2 p2", lib_conv, ref_conv_c),
     .in = {X_("x", 4, 1, 2, 6, 7), W_("w", 4, 2, 2, 3, 3), W_("b", 1, 2)}, OUT(4, 1, 2, 4, 5),
     .stride = 2, .pad = 2},
    {OP("conv x without grad", lib_conv, ref_conv_c),
     .in = {IN("x", 4, GC_UNIFORM, -1, 1, false, 2, 3, 5, 5), W_("w", 4, 2, 3, 3, 3), W_("b", 1, 2)},
     OUT(4, 2, 2, 5, 5), .stride = 1, .pad = 1},
    {OP("conv w without grad", lib_conv, ref_conv_c),
     .in = {X_("x", 4, 1, 2, 5, 5), IN("w", 4, GC_UNIFORM, -0.5, 0.5, false, 2, 2, 3, 3), W_("b", 1, 2)},
     OUT(4, 1, 2, 3, 3), .stride = 1, .pad = 0},
    {OP("batchnorm2d train", lib_bn, ref_bn_c),
     .in = {IN("x", 4, GC_UNIFORM, -1, 3, true, 3, 4, 3, 5), BN_IN(4)}, OUT(4, 3, 4, 3, 5)},
    {OP("batchnorm2d x without grad", lib_bn, ref_bn_c),
     .in = {IN("x", 4, GC_UNIFORM, -2, 1, false, 2, 3, 4, 4), BN_IN(3)}, OUT(4, 2, 3, 4, 4)},
    {OP("relu", lib_relu, ref_relu_c), .in = {IN("x", 3, GC_AWAY0, 0.05, 1, true, 3, 4, 5)}, OUT(3, 3, 4, 5)},
    {OP("maxpool k2 s2", lib_maxpool, ref_maxpool_c),
     .in = {IN("x", 4, GC_DISTINCT, -1, 1, true, 2, 3, 6, 5)}, OUT(4, 2, 3, 3, 2),
     .kernel = 2, .stride = 2, .pad = 0},
    {OP("maxpool k3 s2 p1 (overlapping)", lib_maxpool, ref_maxpool_c),
     .in = {IN("x", 4, GC_DISTINCT, -1, 1, true, 2, 2, 7, 6)}, OUT(4, 2, 2, 4, 3),
     .kernel = 3, .stride = 2, .pad = 1},
    {OP("maxpool k3 s2 p1 negative", lib_maxpool, ref_maxpool_c), /* padding never wins */
     .in = {IN("x", 4, GC_DISTINCT, -2, -0.5, true, 1, 2, 5, 5)}, OUT(4, 1, 2, 3, 3),
     .kernel = 3, .stride = 2, .pad = 1},
    {OP("flatten + linear", lib_flatten_linear, ref_flatten_linear_c),
     .in = {X_("x", 4, 3, 2, 2, 3), W_("w", 2, 4, 12), W_("b", 1, 4)}, OUT(2, 3, 4)},
    {OP("reshape + matmul", lib_reshape_matmul, ref_reshape_matmul_c),
     .in = {X_("x", 3, 2, 3, 4), X_("w", 2, 6, 3)}, OUT(2, 4, 3)},
    {OP("reshape twice + x", lib_reshape_add, ref_reshape_add_c), .in = {X_("x", 3, 2, 3, 4)},
     OUT(3, 2, 3, 4)},
    {OP("add", lib_add, ref_add_c), .in = {X_("a", 2, 3, 5), X_("b", 2, 3, 5)}, OUT(2, 3, 5)},
    {OP("mul", lib_mul, ref_mul_c), .in = {X_("a", 3, 2, 3, 4), X_("b", 3, 2, 3, 4)}, OUT(3, 2, 3, 4)},
    {OP("mul(x, x)", lib_mul_self, ref_mul_self_c), .in = {X_("x", 1, 7)}, OUT(1, 7)},
    {OP("(x * s + s) / s", lib_scalars, ref_scalars_c), .in = {X_("x", 2, 3, 4)}, OUT(2, 3, 4)},
    {OP("add(relu(x), x)", lib_add_relu_self, ref_add_relu_self_c),
     .in = {IN("x", 1, GC_AWAY0, 0.05, 1, true, 10)}, OUT(1, 10)},
    {OP("mean", lib_mean, ref_mean_c), .in = {X_("x", 2, 3, 7)}, OUT(1, 1)},
    {OP("cross_entropy", lib_xent, ref_xent_c),
     .in = {IN("logits", 2, GC_UNIFORM, -2, 2, true, 5, 7), IN("labels", 1, GC_LABELS, 0, 7, false, 5)},
     OUT(1, 1)},
    {OP("mse_loss", lib_mse, ref_mse_c), .in = {X_("a", 2, 4, 6), X_("b", 2, 4, 6)}, OUT(1, 1)},
    {OP("dropout p=0.3", lib_dropout, ref_dropout_c), .in = {X_("x", 2, 4, 25)}, OUT(2, 4, 25), .p = 0.3f},
    {OP("conv+bn+relu+maxpool+flatten+linear", lib_chain, ref_chain_c),
     .in = {X_("x", 4, 2, 2, 6, 6), W_("w1", 4, 3, 2, 3, 3), W_("b1", 1, 3),
            IN("gamma", 1, GC_UNIFORM, 0.5, 1.5, true, 3), X_("beta", 1, 3),
            IN("running_mean", 1, GC_UNIFORM, 0, 0.1, false, 3),
            IN("running_var", 1, GC_UNIFORM, 0.5, 1.5, false, 3), W_("wf", 2, 4, 27), W_("bf", 1, 4)},
     OUT(2, 2, 4)},
};

/* ---- checks beyond the gradient ---- */

static void read_f32(amp_tensor *t, float *host) {
    CHECK_OK(amp_tensor_to_host(t, host, (size_t)t->numel * sizeof *host));
}

/* Running statistics follow torch.nn.BatchNorm2d (momentum, unbiased variance); eval mode
 * normalises with them; momentum 0 keeps them, momentum 1 replaces them. */
static void test_bn_running_and_eval(amp_ctx *ctx) {
    enum { N = 4, C = 3, H = 5, W = 6, NX = N * C * H * W };
    ref_rng rng = {11};
    float xf[NX], gf[C], bf[C], rmf[C], rvf[C], yl[NX];
    double xd[NX], gd[C], bd[C], rmd[C], rvd[C], yd[NX];
    for (int i = 0; i < NX; i++) xd[i] = xf[i] = (float)(ref_rng_uniform(&rng, -1, 1) * 3 + 2);
    for (int i = 0; i < C; i++) {
        gd[i] = gf[i] = (float)ref_rng_uniform(&rng, 0.5, 1.5);
        bd[i] = bf[i] = (float)ref_rng_uniform(&rng, -0.5, 0.5);
        rmd[i] = rmf[i] = (float)ref_rng_uniform(&rng, -0.2, 0.2);
        rvd[i] = rvf[i] = (float)ref_rng_uniform(&rng, 0.5, 1.5);
    }
    amp_tensor *x, *g, *b, *rm, *rv, *y;
    const int64_t xs[4] = {N, C, H, W}, cs[1] = {C};
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, xs, xf, &x));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, cs, gf, &g));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, cs, bf, &b));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, cs, rmf, &rm));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, cs, rvf, &rv));
    float got[C];
    /* Two training steps with momentum 0.1 and 0.3: the update compounds as in PyTorch. */
    const float momenta[2] = {0.1f, 0.3f};
    for (int step = 0; step < 2; step++) {
        CHECK_OK(amp_batchnorm2d(x, g, b, rm, rv, true, momenta[step], 1e-5f, &y));
        ref_bn_train(N, C, H * W, xd, gd, bd, (double)1e-5f, (double)momenta[step], rmd, rvd, yd);
        read_f32(y, yl);
        gc_compare("batchnorm2d train", "forward", yl, yd, NX, GC_FWD_TOL, GC_FWD_TOL, 0.0);
        read_f32(rm, got);
        gc_compare("batchnorm2d train", "running_mean", got, rmd, C, 1e-5, 1e-5, 0.0);
        read_f32(rv, got);
        gc_compare("batchnorm2d train", "running_var (unbiased)", got, rvd, C, 1e-5, 1e-5, 0.0);
        amp_ctx_reset_step(ctx);
    }
    /* Eval: running statistics, which stay untouched. */
    float rm_now[C], rv_now[C];
    read_f32(rm, rm_now);
    read_f32(rv, rv_now);
    for (int i = 0; i < C; i++) rmd[i] = rm_now[i], rvd[i] = rv_now[i];
    CHECK_OK(amp_batchnorm2d(x, g, b, rm, rv, false, 0.1f, 1e-5f, &y));
    ref_bn_apply(N, C, H * W, xd, gd, bd, rmd, rvd, (double)1e-5f, yd);
    read_f32(y, yl);
    gc_compare("batchnorm2d eval", "forward", yl, yd, NX, GC_FWD_TOL, GC_FWD_TOL, 0.0);
    read_f32(rm, got);
    CHECK(memcmp(got, rm_now, sizeof got) == 0);
    read_f32(rv, got);
    CHECK(memcmp(got, rv_now, sizeof got) == 0);
    /* Momentum 0 keeps the running statistics; momentum 1 replaces them by the batch's. */
    CHECK_OK(amp_batchnorm2d(x, g, b, rm, rv, true, 0.0f, 1e-5f, &y));
    read_f32(rm, got);
    CHECK(memcmp(got, rm_now, sizeof got) == 0);
    CHECK_OK(amp_batchnorm2d(x, g, b, rm, rv, true, 1.0f, 1e-5f, &y));
    for (int i = 0; i < C; i++) rmd[i] = 0.0, rvd[i] = 0.0;
    ref_bn_train(N, C, H * W, xd, gd, bd, (double)1e-5f, 1.0, rmd, rvd, yd);
    read_f32(rm, got);
    gc_compare("batchnorm2d momentum 1", "running_mean", got, rmd, C, 1e-5, 1e-5, 0.0);
    read_f32(rv, got);
    gc_compare("batchnorm2d momentum 1", "running_var", got, rvd, C, 1e-5, 1e-5, 0.0);
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x);
    amp_tensor_free(g);
    amp_tensor_free(b);
    amp_tensor_free(rm);
    amp_tensor_free(rv);
}

/* The mask: about 1 - p kept, kept values scaled by 1/(1 - p), drawn from the ctx RNG (counter
 * advances by numel, a second call draws another mask); identity in eval mode and for p = 0. */
static void test_dropout_mask(amp_ctx *ctx) {
    enum { N = 4000 };
    static float ones[N], y1[N], y2[N];
    for (int i = 0; i < N; i++) ones[i] = 1.0f;
    amp_tensor *x, *y;
    const int64_t shape[1] = {N};
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, shape, ones, &x));
    const float p = 0.25f;
    amp_rng_state before, after;
    CHECK_OK(amp_rng_get_state(ctx, &before));
    CHECK_OK(amp_dropout(x, p, true, &y));
    CHECK_OK(amp_rng_get_state(ctx, &after));
    CHECK(after.seed == before.seed && after.counter == before.counter + N);
    read_f32(y, y1);
    int kept = 0, bad = 0, contract = 0;
    for (int i = 0; i < N; i++) {
        bool keep = y1[i] != 0.0f;
        kept += keep;
        bad += keep && y1[i] != 1.0f / (1.0f - p) && fabsf(y1[i] - 1.0f / (1.0f - p)) > 1e-6f;
        contract += keep == (amp_philox_uniform(before.seed, before.counter + (uint64_t)i) >= p);
    }
    /* Binomial(4000, 0.75): sd 27, so +-3% is over 4 sd. */
    CHECK_MSG(fabs((double)kept / N - (1 - p)) < 0.03, "kept %d of %d", kept, N);
    CHECK_MSG(bad == 0, "%d kept values differ from 1/(1-p)", bad);
    CHECK_MSG(contract == N, "mask follows philox(seed, offset + i) >= p at %d of %d", contract, N);
    CHECK_OK(amp_dropout(x, p, true, &y));
    read_f32(y, y2);
    CHECK(memcmp(y1, y2, sizeof y1) != 0);
    CHECK_OK(amp_dropout(x, p, false, &y));
    CHECK(y == x);
    CHECK_OK(amp_dropout(x, 0.0f, true, &y));
    CHECK(y == x);
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x);
}

/* k distinct indices into g[0, n): the 4 largest |g| first, then random ones (n >= k). */
static void pick_coords(const float *g, int64_t n, int64_t *idx, int k, ref_rng *rng) {
    for (int q = 0; q < k; q++) {
        int64_t pick = -1;
        for (;;) {
            if (q < 4) { /* the largest not yet taken */
                pick = -1;
                for (int64_t j = 0; j < n; j++) {
                    bool taken = false;
                    for (int t = 0; t < q; t++) taken |= idx[t] == j;
                    if (!taken && (pick < 0 || fabsf(g[j]) > fabsf(g[pick]))) pick = j;
                }
                break;
            }
            pick = ref_rng_below(rng, (int)n);
            bool taken = false;
            for (int t = 0; t < q; t++) taken |= idx[t] == pick;
            if (!taken) break;
        }
        idx[q] = pick;
    }
}

/* The ConvNet preset on a batch of 2: logits and running statistics against the float64
 * reference, then the gradient of cross_entropy for a sample of coordinates of every parameter
 * (the largest 4 by the library's gradient and 6 random) and of the input. */
static void test_convnet(void) {
    enum { N = 2, NX = N * 28 * 28, COORDS = 10 };
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 5}, &ctx));
    amp_model *m;
    CHECK_OK(amp_model_convnet_mnist(ctx, &m));
    if (!m) return;
    CHECK(amp_model_n_params(m) == REF_CN_N_PARAMS && amp_model_n_buffers(m) == REF_CN_N_BUFFERS);
    ref_rng rng = {99};
    static float xf[NX];
    static double xd[NX];
    int32_t labels[N];
    int labels_i[N];
    for (int i = 0; i < NX; i++) xd[i] = xf[i] = (float)ref_rng_uniform(&rng, -1, 1);
    for (int i = 0; i < N; i++) labels_i[i] = labels[i] = ref_rng_below(&rng, 10);
    amp_tensor *x, *lab, *logits, *loss;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, (const int64_t[]){N, 1, 28, 28}, xf, &x));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (const int64_t[]){N}, labels, &lab));
    CHECK_OK(amp_tensor_set_requires_grad(x, true));
    /* Parameters and buffers as the model holds them, before the step. */
    double *p[REF_CN_N_PARAMS + 1], *buf[REF_CN_N_BUFFERS];
    float *pf[REF_CN_N_PARAMS + 1];
    int64_t pn[REF_CN_N_PARAMS + 1];
    for (int i = 0; i < REF_CN_N_PARAMS; i++) {
        amp_tensor *t = amp_model_param(m, i);
        pn[i] = t->numel;
        pf[i] = malloc((size_t)t->numel * sizeof *pf[i]);
        p[i] = malloc((size_t)t->numel * sizeof *p[i]);
        read_f32(t, pf[i]);
        for (int64_t j = 0; j < t->numel; j++) p[i][j] = pf[i][j];
    }
    p[REF_CN_N_PARAMS] = xd; /* the input, checked like a parameter */
    pn[REF_CN_N_PARAMS] = NX;
    pf[REF_CN_N_PARAMS] = NULL;
    for (int i = 0; i < REF_CN_N_BUFFERS; i++) {
        amp_tensor *t = amp_model_buffer(m, i);
        float tmp[32];
        read_f32(t, tmp);
        buf[i] = malloc((size_t)t->numel * sizeof *buf[i]);
        for (int64_t j = 0; j < t->numel; j++) buf[i][j] = tmp[j];
    }
    CHECK_OK(amp_model_forward(m, x, &logits));
    CHECK_OK(amp_tensor_keep(logits)); /* read after the backward */
    CHECK_OK(amp_cross_entropy(logits, lab, &loss));
    CHECK_OK(amp_backward(loss));
    float lf[N * 10];
    double ld[N * 10];
    read_f32(logits, lf);
    ref_convnet_forward(N, xd, p, buf, true, ld);
    gc_compare("convnet", "logits", lf, ld, N * 10, GC_FWD_TOL, GC_FWD_TOL, 0.0);
    float loss_f;
    CHECK_OK(amp_tensor_item(loss, &loss_f));
    double loss_d = ref_cross_entropy(N, 10, ld, labels_i);
    CHECK_MSG(fabs(loss_f - loss_d) <= 1e-5 * fmax(1.0, fabs(loss_d)), "loss %g vs %g", (double)loss_f, loss_d);
    for (int i = 0; i < REF_CN_N_BUFFERS; i++) {
        float got[32];
        read_f32(amp_model_buffer(m, i), got);
        gc_compare("convnet", amp_model_buffer_name(m, i), got, buf[i], amp_model_buffer(m, i)->numel,
                   1e-4, 1e-4, 0.0);
    }
    double lg[N * 10], num[REF_CN_N_PARAMS + 1][COORDS], scale = 0.0;
    float a[REF_CN_N_PARAMS + 1][COORDS];
    bool have[REF_CN_N_PARAMS + 1] = {0};
    for (int i = 0; i <= REF_CN_N_PARAMS; i++) {
        amp_tensor *t = i < REF_CN_N_PARAMS ? amp_model_param(m, i) : x, *g;
        amp_status s = amp_tensor_get_grad(t, &g);
        CHECK_MSG(s == AMP_OK, "convnet: parameter %d has no gradient", i);
        if (s != AMP_OK) continue;
        have[i] = true;
        float *gl = malloc((size_t)pn[i] * sizeof *gl);
        read_f32(g, gl);
        int64_t idx[COORDS];
        pick_coords(gl, pn[i], idx, COORDS, &rng);
        for (int k = 0; k < COORDS; k++) {
            double *v = &p[i][idx[k]], x0 = *v, h = 1e-6 * fmax(1.0, fabs(x0));
            *v = x0 + h;
            ref_convnet_forward(N, xd, p, NULL, true, lg);
            double lp = ref_cross_entropy(N, 10, lg, labels_i);
            *v = x0 - h;
            ref_convnet_forward(N, xd, p, NULL, true, lg);
            double lm = ref_cross_entropy(N, 10, lg, labels_i);
            *v = x0;
            num[i][k] = (lp - lm) / (2 * h);
            a[i][k] = gl[idx[k]];
            scale = fmax(scale, fabs(num[i][k]));
        }
        free(gl);
    }
    /* The conv biases feed batch norm, which subtracts them again: their exact gradient is 0, and
     * the library's must be round-off next to the others (the scale argument). */
    for (int i = 0; i <= REF_CN_N_PARAMS; i++) {
        if (!have[i]) continue;
        char what[96];
        snprintf(what, sizeof what, "d%s (sampled)", i < REF_CN_N_PARAMS ? amp_model_param_name(m, i) : "x");
        gc_compare("convnet", what, a[i], num[i], COORDS, GC_GRAD_TOL, GC_GRAD_TOL, scale);
    }
    amp_ctx_reset_step(ctx);
    for (int i = 0; i < REF_CN_N_PARAMS; i++) free(p[i]), free(pf[i]);
    for (int i = 0; i < REF_CN_N_BUFFERS; i++) free(buf[i]);
    amp_tensor_free(x);
    amp_tensor_free(lab);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

/* cast is not smooth (it rounds), so no finite differences: its gradient is the upstream gradient
 * converted back, checked exactly. x f32 -> f16 -> f32, L = mean(z * r): dL/dx = round_f16(r/n). */
static void test_cast_grad(amp_ctx *ctx) {
    enum { N = 257 };
    float xv[N], rv[N];
    for (int i = 0; i < N; i++) {
        xv[i] = 0.37f * (float)(i - 128);
        rv[i] = 1.0f + 0.01f * (float)i;
    }
    amp_tensor *x = NULL, *r = NULL, *h, *z, *zr, *loss, *g;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, (const int64_t[]){N}, xv, &x));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, (const int64_t[]){N}, rv, &r));
    CHECK_OK(amp_tensor_set_requires_grad(x, true));
    CHECK_OK(amp_cast(x, AMP_F16, &h));
    CHECK(h->dtype == AMP_F16);
    CHECK_OK(amp_cast(h, AMP_F32, &z));
    CHECK_OK(amp_mul(z, r, &zr));
    CHECK_OK(amp_mean(zr, &loss));
    CHECK_OK(amp_tensor_keep(z)); /* read after the backward */
    CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_tensor_get_grad(x, &g));
    float gv[N], zv[N];
    CHECK_OK(amp_tensor_to_host(g, gv, sizeof gv));
    CHECK_OK(amp_tensor_to_host(z, zv, sizeof zv));
    int bad = 0;
    for (int i = 0; i < N; i++) {
        float want = amp_f16_bits_to_f32(amp_f32_to_f16_bits(rv[i] * (1.0f / N)));
        bad += gv[i] != want;
        bad += zv[i] != amp_f16_bits_to_f32(amp_f32_to_f16_bits(xv[i]));
    }
    CHECK_MSG(bad == 0, "cast: %d gradient or value mismatches", bad);
    amp_tensor_free(x);
    amp_tensor_free(r);
    amp_ctx_reset_step(ctx);
}

int main(void) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1234}, &ctx));
    if (!ctx) return test_summary("test_gradcheck");
    int n_cases = (int)(sizeof gc_cases / sizeof gc_cases[0]);
    for (int i = 0; i < n_cases; i++) {
        int before = test_n_fail;
        gc_run(ctx, &gc_cases[i], 1000 + (uint64_t)i);
        printf("%-48s %s\n", gc_cases[i].name, test_n_fail == before ? "ok" : "FAILED");
    }
    test_bn_running_and_eval(ctx);
    test_dropout_mask(ctx);
    test_cast_grad(ctx);
    amp_ctx_free(ctx);
    test_convnet();
    return test_summary("test_gradcheck");
}
