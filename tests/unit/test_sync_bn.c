/* SyncBatchNorm on one process (no collective: a world of one), CPU backend:
 *  - gradient check of amp_sync_batchnorm2d against the float64 batch-norm reference and its
 *    central differences (tests/gradcheck_run.h);
 *  - equal to amp_batchnorm2d (forward, running statistics, gradients of x, gamma, beta) within
 *    a few f32 roundings, for f32 and f16 x, and exactly equal in eval mode;
 *  - a ConvNet converted with amp_model_convert_sync_batchnorm(m, NULL) trains as the plain one:
 *    within 2 % of the distance trained after 2 steps, where a planted 10 % gradient error must
 *    show above that bound;
 *  - the backend entries against an independent double reference of their sums;
 *  - bad arguments are errors that name the op and the culprit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/half.h"
#include "core/backend.h"
#include "gradcheck_run.h"

/* ---- gradient check (in: x, gamma, beta, running_mean, running_var) ---- */
static amp_status lib_sbn(gc_case *c, amp_tensor **y) {
    return amp_sync_batchnorm2d(T(0), T(1), T(2), T(3), T(4), true, 0.1f, 1e-5f, y);
}
static void ref_sbn_c(const gc_case *c, double *y) {
    ref_bn_train(S(0, 0), S(0, 1), S(0, 2) * S(0, 3), V(0), V(1), V(2), (double)1e-5f, 0.1, NULL,
                 NULL, y);
}

#define BN_IN(c) X_("gamma", 1, c), X_("beta", 1, c), \
    IN("running_mean", 1, GC_UNIFORM, -0.1, 0.1, false, c), IN("running_var", 1, GC_UNIFORM, 0.5, 1.5, false, c)

static gc_case gc_cases[] = {
    {OP("sync_batchnorm2d train", lib_sbn, ref_sbn_c),
     .in = {IN("x", 4, GC_UNIFORM, -1, 3, true, 3, 4, 3, 5), BN_IN(4)}, OUT(4, 3, 4, 3, 5)},
    {OP("sync_batchnorm2d offset mean", lib_sbn, ref_sbn_c),
     .in = {IN("x", 4, GC_UNIFORM, 20, 23, true, 2, 3, 4, 4), BN_IN(3)}, OUT(4, 2, 3, 4, 4)},
    {OP("sync_batchnorm2d x without grad", lib_sbn, ref_sbn_c),
     .in = {IN("x", 4, GC_UNIFORM, -2, 1, false, 2, 3, 4, 4), BN_IN(3)}, OUT(4, 2, 3, 4, 4)},
    {OP("sync_batchnorm2d n 1", lib_sbn, ref_sbn_c),
     .in = {IN("x", 4, GC_UNIFORM, -1, 1, true, 1, 2, 3, 3), BN_IN(2)}, OUT(4, 1, 2, 3, 3)},
};

/* ---- against amp_batchnorm2d ---- */
static void to_f32(const amp_tensor *t, float *out) {
    if (t->dtype == AMP_F32) {
        CHECK_OK(amp_tensor_to_host(t, out, (size_t)t->numel * sizeof(float)));
        return;
    }
    uint16_t *h = malloc((size_t)t->numel * sizeof *h);
    CHECK_OK(amp_tensor_to_host(t, h, (size_t)t->numel * sizeof *h));
    for (int64_t i = 0; i < t->numel; i++) out[i] = amp_f16_bits_to_f32(h[i]);
    free(h);
}

/* max |a - b| / max(max |b|, floor). */
static double max_rel(const float *a, const float *b, int64_t n, double floor) {
    double d = 0, m = floor;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

enum { PN = 4, PC = 3, PH = 7, PW = 5, PX = PN * PC * PH * PW };

typedef struct bn_out {
    float y[PX], dx[PX], dg[PC], db[PC], rm[PC], rv[PC];
} bn_out;

/* Two training forwards (running stats compound) and a backward of mean(y * r) through one
 * flavour of batch norm on x of dtype dt; then an eval forward. */
static void run_bn(amp_ctx *ctx, bool sync, amp_dtype dt, bn_out *o, float *y_eval) {
    ref_rng rng = {77};
    float xf[PX], rf[PX], gf[PC], bf[PC], rmf[PC], rvf[PC];
    for (int i = 0; i < PX; i++) xf[i] = (float)ref_rng_uniform(&rng, -1, 3);
    for (int i = 0; i < PX; i++) rf[i] = (float)ref_rng_uniform(&rng, -1, 1);
    for (int i = 0; i < PC; i++) {
        gf[i] = (float)ref_rng_uniform(&rng, 0.5, 1.5);
        bf[i] = (float)ref_rng_uniform(&rng, -0.5, 0.5);
        rmf[i] = (float)ref_rng_uniform(&rng, -0.2, 0.2);
        rvf[i] = (float)ref_rng_uniform(&rng, 0.5, 1.5);
    }
    const int64_t xs[4] = {PN, PC, PH, PW}, cs[1] = {PC};
    amp_tensor *x32, *x, *r, *g, *b, *rm, *rv, *y, *p, *loss, *grad;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, xs, xf, &x32));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, xs, rf, &r));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, cs, gf, &g));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, cs, bf, &b));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, cs, rmf, &rm));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, cs, rvf, &rv));
    CHECK_OK(amp_tensor_set_requires_grad(x32, true));
    CHECK_OK(amp_tensor_set_requires_grad(g, true));
    CHECK_OK(amp_tensor_set_requires_grad(b, true));
    amp_status (*bn)(amp_tensor *, amp_tensor *, amp_tensor *, amp_tensor *, amp_tensor *, bool,
                     float, float, amp_tensor **) = sync ? amp_sync_batchnorm2d : amp_batchnorm2d;
    x = x32;
    if (dt != AMP_F32) CHECK_OK(amp_cast(x32, dt, &x));
    CHECK_OK(bn(x, g, b, rm, rv, true, 0.1f, 1e-5f, &y));
    CHECK_OK(bn(x, g, b, rm, rv, true, 0.3f, 1e-5f, &y));
    to_f32(y, o->y);
    if (dt != AMP_F32) CHECK_OK(amp_cast(y, AMP_F32, &y));
    CHECK_OK(amp_mul(y, r, &p));
    CHECK_OK(amp_mean(p, &loss));
    CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_tensor_get_grad(x32, &grad));
    to_f32(grad, o->dx);
    CHECK_OK(amp_tensor_get_grad(g, &grad));
    to_f32(grad, o->dg);
    CHECK_OK(amp_tensor_get_grad(b, &grad));
    to_f32(grad, o->db);
    to_f32(rm, o->rm);
    to_f32(rv, o->rv);
    amp_ctx_reset_step(ctx);
    CHECK_OK(bn(x32, g, b, rm, rv, false, 0.1f, 1e-5f, &y));
    to_f32(y, y_eval);
    amp_ctx_reset_step(ctx);
    amp_tensor *all[] = {x32, r, g, b, rm, rv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) amp_tensor_free(all[i]);
}

static void test_matches_plain(amp_ctx *ctx, amp_dtype dt, double tol) {
    static bn_out a, s;
    static float ea[PX], es[PX];
    run_bn(ctx, false, dt, &a, ea);
    run_bn(ctx, true, dt, &s, es);
    const char *dn = amp_dtype_name(dt);
    double ey = max_rel(s.y, a.y, PX, 1e-3), edx = max_rel(s.dx, a.dx, PX, 1e-9);
    double edg = max_rel(s.dg, a.dg, PC, 1e-9), edb = max_rel(s.db, a.db, PC, 1e-9);
    double erm = max_rel(s.rm, a.rm, PC, 1e-9), erv = max_rel(s.rv, a.rv, PC, 1e-9);
    printf("sync vs plain batch norm (%s x): y %.2g, dx %.2g, dgamma %.2g, dbeta %.2g, running "
           "mean %.2g, running var %.2g (max rel; tolerance %.0e)\n", dn, ey, edx, edg, edb, erm,
           erv, tol);
    CHECK_MSG(ey <= tol && edx <= tol && edg <= tol && edb <= tol && erm <= tol && erv <= tol,
              "%s: sync batch norm differs from batch norm", dn);
    CHECK_MSG(memcmp(es, ea, sizeof ea) == 0, "%s: eval mode differs from batch norm's", dn);
}

/* ---- a ConvNet converted to SyncBN (world of one) trains as the plain one ---- */
typedef struct convnet_state {
    float *w, *bufs, *w0, *bufs0; /* after the steps, and before them */
    int64_t n, nb;
} convnet_state;

static void convnet_values(amp_model *m, bool buffers, float *out) {
    int64_t k = 0;
    int n_t = buffers ? amp_model_n_buffers(m) : amp_model_n_params(m);
    for (int i = 0; i < n_t; i++) {
        const amp_tensor *t = buffers ? amp_model_buffer(m, i) : amp_model_param(m, i);
        to_f32(t, out + k);
        k += t->numel;
    }
}

/* `steps` SGD steps of the ConvNet, its loss times loss_factor (1: as it is; else a planted
 * gradient error). */
static void convnet_weights(bool convert, int steps, float loss_factor, convnet_state *st) {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 5, .n_threads = 1},
                            &ctx));
    CHECK_OK(amp_model_convnet_mnist(ctx, &m));
    if (convert) CHECK_OK(amp_model_convert_sync_batchnorm(m, NULL));
    CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.05f, .momentum = 0.9f}, &opt));
    int64_t n = 0, nb = 0;
    for (int i = 0; i < amp_model_n_params(m); i++) n += amp_model_param(m, i)->numel;
    for (int i = 0; i < amp_model_n_buffers(m); i++) nb += amp_model_buffer(m, i)->numel;
    *st = (convnet_state){.w = malloc((size_t)n * sizeof(float)),
                          .bufs = malloc((size_t)nb * sizeof(float)),
                          .w0 = malloc((size_t)n * sizeof(float)),
                          .bufs0 = malloc((size_t)nb * sizeof(float)), .n = n, .nb = nb};
    convnet_values(m, false, st->w0);
    convnet_values(m, true, st->bufs0);
    enum { B = 8 };
    float *x = malloc(B * 784 * sizeof *x);
    int32_t y[B];
    ref_rng rng = {3};
    amp_tensor *xt, *yt, *logits, *loss;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (int64_t[]){B, 1, 28, 28}, &xt));
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 1, (int64_t[]){B}, &yt));
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < B * 784; i++) x[i] = (float)ref_rng_uniform(&rng, 0, 1);
        for (int i = 0; i < B; i++) y[i] = ref_rng_below(&rng, 10);
        CHECK_OK(amp_tensor_copy_from_host(xt, x, B * 784 * sizeof *x));
        CHECK_OK(amp_tensor_copy_from_host(yt, y, sizeof y));
        CHECK_OK(amp_model_forward(m, xt, &logits));
        CHECK_OK(amp_cross_entropy(logits, yt, &loss));
        amp_tensor *scaled = loss;
        if (loss_factor != 1.0f) CHECK_OK(amp_mul_scalar(loss, loss_factor, &scaled));
        CHECK_OK(amp_backward(scaled));
        CHECK_OK(amp_optimizer_step(opt));
        CHECK_OK(amp_zero_grad(opt));
    }
    convnet_values(m, false, st->w);
    convnet_values(m, true, st->bufs);
    free(x);
    amp_tensor_free(xt);
    amp_tensor_free(yt);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

static void convnet_free(convnet_state *st) {
    free(st->w);
    free(st->bufs);
    free(st->w0);
    free(st->bufs0);
}

/* ||a - b|| / ||b - b0||: a's distance from b in units of the distance b trained. */
static double of_trained(const float *a, const float *b, const float *b0, int64_t n) {
    double d2 = 0, m2 = 0;
    for (int64_t i = 0; i < n; i++) {
        d2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        m2 += ((double)b[i] - b0[i]) * ((double)b[i] - b0[i]);
    }
    return m2 > 0 ? sqrt(d2 / m2) : INFINITY;
}

/* The bound, in units of the distance trained: a step moves the weights by lr times the
 * gradient, and the two batch norms' statistics and gradients differ by a few f32 roundings
 * (test_matches_plain: 2e-6), so the runs part by what those roundings make of the gradient,
 * about 1e-6 of it. A ReLU input or a max-pool runner-up within rounding of its kink can take
 * the other side in one run (how soon that happens is the CPU's: another summation order in the
 * GEMMs); it moves one of the 8 x 784 (8 x 196) terms of one channel's gradient, a small part of
 * the distance trained by all 29034 weights, and after 2 steps at lr 0.05 training has not yet
 * carried it far. Both lie under 2 % of the distance trained, while a 10 % error in the gradient
 * moves the weights by 10 % of it: the control must show above the bound. The running
 * statistics take each batch's statistics with momentum 0.1: the same bound, in units of the
 * distance they moved. */
static void test_convnet_converted(void) {
    enum { STEPS = 2 };
    const double bound = 2e-2;
    convnet_state a, s, c;
    convnet_weights(false, STEPS, 1.0f, &a);
    convnet_weights(true, STEPS, 1.0f, &s);
    convnet_weights(true, STEPS, 1.1f, &c);
    CHECK(a.n == s.n && a.nb == s.nb && a.n == c.n);
    if (a.n == s.n && a.nb == s.nb && a.n == c.n && a.w && s.w && c.w && a.bufs && s.bufs) {
        CHECK_MSG(memcmp(a.w0, s.w0, (size_t)a.n * sizeof(float)) == 0 &&
                  memcmp(a.bufs0, s.bufs0, (size_t)a.nb * sizeof(float)) == 0,
                  "converted ConvNet: the conversion changed the initial weights or buffers");
        double ew = of_trained(s.w, a.w, a.w0, a.n), eb = of_trained(s.bufs, a.bufs, a.bufs0, a.nb);
        double ec = of_trained(c.w, a.w, a.w0, a.n);
        printf("ConvNet, %d SGD steps, SyncBN (world of one) vs BatchNorm: weights %.2g, running "
               "stats %.2g of the distance trained (bound %.0e); control, a 10 %% gradient "
               "error: weights %.2g\n", STEPS, ew, eb, bound, ec);
        CHECK_MSG(ew <= bound && eb <= bound, "converted ConvNet: weights %g, buffers %g of the "
                  "distance trained", ew, eb);
        CHECK_MSG(ec > bound, "converted ConvNet: a planted 10 %% gradient error went unseen: "
                  "weights %g of the distance trained, within %g", ec, bound);
    }
    convnet_free(&a);
    convnet_free(&s);
    convnet_free(&c);
}

/* ---- the backend entries against a plain double reference ---- */
static void test_entries(void) {
    const amp_backend *be = amp_backend_cpu();
    enum { N = 3, C = 2, HW = 5000, NX = N * C * HW }; /* hw over one tile of 4096 */
    float *x = malloc(NX * sizeof *x), *dy = malloc(NX * sizeof *dy), *dx = malloc(NX * sizeof *dx);
    ref_rng rng = {9};
    for (int i = 0; i < NX; i++) x[i] = (float)ref_rng_uniform(&rng, 4, 6);
    for (int i = 0; i < NX; i++) dy[i] = (float)ref_rng_uniform(&rng, -1, 1);
    amp_bn_desc d = {.n = N, .c = C, .hw = HW, .eps = 1e-5f, .momentum = 0.1f, .dtype = AMP_F32};
    float center[C] = {5.0f, 4.5f}, o1[C], o2[C];
    double worst = 0;
    for (int pass = 0; pass < 2; pass++) {
        CHECK_OK(be->k.bn_channel_sums(be->dev, &d, x, center, pass ? dy : NULL, o1, o2));
        for (int ch = 0; ch < C; ch++) {
            double r1 = 0, r2 = 0;
            for (int i = 0; i < N; i++)
                for (int k = 0; k < HW; k++) {
                    size_t j = ((size_t)i * C + ch) * HW + k;
                    double dev = (double)x[j] - center[ch];
                    r1 += pass ? dy[j] : dev;
                    r2 += pass ? dy[j] * dev : dev * dev;
                }
            worst = fmax(worst, fabs(o1[ch] - r1) / fmax(1.0, fabs(r1)));
            worst = fmax(worst, fabs(o2[ch] - r2) / fmax(1.0, fabs(r2)));
        }
    }
    CHECK_MSG(worst < 1e-6, "bn_channel_sums off by %g", worst);
    /* Statistics and dx from given sums, against the formulas in double. */
    float s1[C] = {3.0f, -2.0f}, s2[C] = {4000.0f, 5000.0f}, mean[C], var[C], inv[C];
    float rm[C] = {0.5f, 1.5f}, rv[C] = {1.0f, 2.0f};
    int64_t cnt = 3 * N * HW;
    CHECK_OK(be->k.bn_sync_stats(be->dev, &d, cnt, center, s1, s2, mean, var, inv, rm, rv));
    double w2 = 0;
    for (int ch = 0; ch < C; ch++) {
        double m = center[ch] + (double)s1[ch] / cnt;
        double v = (double)s2[ch] / cnt - ((double)s1[ch] / cnt) * ((double)s1[ch] / cnt);
        double rmw = (ch ? 1.5 : 0.5) * 0.9 + 0.1 * m;
        double rvw = (ch ? 2.0 : 1.0) * 0.9 + 0.1 * v * cnt / (cnt - 1.0);
        w2 = fmax(w2, fabs(mean[ch] - m) / fabs(m));
        w2 = fmax(w2, fabs(var[ch] - v) / v);
        w2 = fmax(w2, fabs(inv[ch] - 1.0 / sqrt(v + 1e-5)) * sqrt(v));
        w2 = fmax(w2, fabs(rm[ch] - rmw) / fabs(rmw));
        w2 = fmax(w2, fabs(rv[ch] - rvw) / rvw);
    }
    CHECK_MSG(w2 < 1e-6, "bn_sync_stats off by %g", w2);
    float gamma[C] = {1.5f, 0.5f}, sdy[C] = {10.0f, -4.0f}, sdx[C] = {30.0f, 7.0f};
    CHECK_OK(be->k.bn_bwd_elemt(be->dev, &d, cnt, x, dy, gamma, mean, inv, sdy, sdx, dx));
    double w3 = 0;
    for (int i = 0; i < NX; i++) {
        int ch = (int)((i / HW) % C);
        double want = (double)gamma[ch] * inv[ch] *
                      (dy[i] - (double)sdy[ch] / cnt -
                       ((double)x[i] - mean[ch]) * inv[ch] * inv[ch] * sdx[ch] / cnt);
        w3 = fmax(w3, fabs(dx[i] - want));
    }
    CHECK_MSG(w3 < 1e-5, "bn_bwd_elemt off by %g", w3);
    printf("entries vs double reference: sums %.2g, stats %.2g, dx %.2g\n", worst, w2, w3);
    /* Entry checks name the entry. */
    CHECK_FAILS(be->k.bn_channel_sums(be->dev, NULL, x, NULL, NULL, o1, o2), AMP_ERR_INVALID_ARG,
                "amp_cpu_bn_channel_sums");
    CHECK_FAILS(be->k.bn_sync_stats(be->dev, &d, 1, NULL, s1, s2, mean, var, inv, NULL, NULL),
                AMP_ERR_INVALID_ARG, "count 1");
    CHECK_FAILS(be->k.bn_bwd_elemt(be->dev, &d, cnt, x, dy, gamma, mean, inv, NULL, sdx, dx),
                AMP_ERR_INVALID_ARG, "sum_dy");
    free(x);
    free(dy);
    free(dx);
}

/* ---- bad arguments ---- */
static void test_errors(amp_ctx *ctx) {
    amp_tensor *x, *x3, *xi, *x1, *g, *g4, *b, *rm, *rv, *y = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (int64_t[]){2, 3, 2, 2}, &x));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 3, (int64_t[]){2, 3, 4}, &x3));
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 4, (int64_t[]){2, 3, 2, 2}, &xi));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (int64_t[]){1, 3, 1, 1}, &x1));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (int64_t[]){3}, &g));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (int64_t[]){4}, &g4));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (int64_t[]){3}, &b));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (int64_t[]){3}, &rm));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (int64_t[]){3}, &rv));
    CHECK_FAILS(amp_sync_batchnorm2d(x3, g, b, rm, rv, true, 0.1f, 1e-5f, &y), AMP_ERR_SHAPE,
                "amp_sync_batchnorm2d");
    CHECK_FAILS(amp_sync_batchnorm2d(xi, g, b, rm, rv, true, 0.1f, 1e-5f, &y), AMP_ERR_DTYPE,
                "amp_sync_batchnorm2d");
    CHECK_FAILS(amp_sync_batchnorm2d(x, g4, b, rm, rv, true, 0.1f, 1e-5f, &y), AMP_ERR_SHAPE,
                "gamma has 4 elements, want 3");
    CHECK_FAILS(amp_sync_batchnorm2d(x, g, b, rm, g4, true, 0.1f, 1e-5f, &y), AMP_ERR_SHAPE,
                "running_var");
    CHECK_FAILS(amp_sync_batchnorm2d(x, g, b, rm, rv, true, 1.5f, 1e-5f, &y), AMP_ERR_INVALID_ARG,
                "momentum");
    CHECK_FAILS(amp_sync_batchnorm2d(x1, g, b, rm, rv, true, 0.1f, 1e-5f, &y), AMP_ERR_SHAPE,
                "over all ranks");
    CHECK_FAILS(amp_sync_batchnorm2d(x, g, b, rm, rv, true, 0.1f, 1e-5f, NULL),
                AMP_ERR_INVALID_ARG, "out");
    CHECK_FAILS(amp_model_convert_sync_batchnorm(NULL, NULL), AMP_ERR_INVALID_ARG, "'m'");
    /* One value per channel is fine in eval. */
    CHECK_OK(amp_sync_batchnorm2d(x1, g, b, rm, rv, false, 0.1f, 1e-5f, &y));
    amp_tensor *all[] = {x, x3, xi, x1, g, g4, b, rm, rv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) amp_tensor_free(all[i]);
    amp_ctx_reset_step(ctx);
}

int main(void) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1234}, &ctx));
    if (!ctx) return test_summary("test_sync_bn");
    int n_cases = (int)(sizeof gc_cases / sizeof gc_cases[0]);
    for (int i = 0; i < n_cases; i++) {
        int before = test_n_fail;
        gc_run(ctx, &gc_cases[i], 2000 + (uint64_t)i);
        printf("%-48s %s\n", gc_cases[i].name, test_n_fail == before ? "ok" : "FAILED");
    }
    test_matches_plain(ctx, AMP_F32, 2e-6);
    test_matches_plain(ctx, AMP_F16, 2e-3);
    test_errors(ctx);
    amp_ctx_free(ctx);
    test_entries();
    test_convnet_converted();
    return test_summary("test_sync_bn");
}
