/* The CPU backend's cross-entropy (kernels/cpu/xent.c) against a long double reference written
 * here from the contract in core/backend_kernels.def: loss, saved logsumexp, row losses, count
 * and gradient, for f32/f16/bf16 logits, from one class to a GPT-2 vocabulary (50257), with
 * ignored rows, label smoothing and the sum; logits near 1e3 (no overflow); a NaN logit poisons
 * its row only; all rows ignored gives NaN and zero gradients; bad labels and arguments are
 * refused naming them with nothing written; 1 and 2 threads give the same bits. The CUDA
 * backend's bits are held to these by the op table (tests/gpu/test_backend_ops.c). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/xent.h"
#include "test_data.h"
#include "test_util.h"

static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};

typedef struct ref_out {
    long double total;
    int64_t count;
    double *lse; /* per row */
} ref_out;

/* The reference loss total, count and each row's logsumexp. */
static void ref_forward(const amp_xent_desc *d, const void *x, const int32_t *labels,
                        ref_out *out) {
    out->total = 0;
    out->count = 0;
    for (int64_t r = 0; r < d->rows; r++) {
        out->lse[r] = 0;
        if (labels[r] == d->ignore_index) continue;
        const int64_t base = r * d->classes;
        long double m = -INFINITY, s = 0, sx = 0;
        for (int64_t j = 0; j < d->classes; j++) m = fmaxl(m, test_load(x, d->dt, base + j));
        for (int64_t j = 0; j < d->classes; j++) {
            long double v = test_load(x, d->dt, base + j);
            s += expl(v - m);
            sx += v;
        }
        long double lse = m + logl(s), eps = d->label_smoothing;
        long double nll = lse - test_load(x, d->dt, base + labels[r]);
        out->total += (1 - eps) * nll + eps * (lse - sx / d->classes);
        out->lse[r] = (double)lse;
        out->count++;
    }
}

/* Random labels, every `ignore_every`th row (0: none) set to the ignore index. */
static int32_t *random_labels(const amp_xent_desc *d, int ignore_every) {
    int32_t *labels = malloc((size_t)d->rows * sizeof *labels + 1);
    for (int64_t r = 0; r < d->rows; r++)
        labels[r] = ignore_every && r % ignore_every == 1
                        ? d->ignore_index
                        : (int32_t)(test_uniform() * (double)d->classes);
    return labels;
}

static void check_case(amp_dtype dt, int64_t rows, int64_t classes, float eps, bool sum,
                       int ignore_every, double lo, double hi) {
    amp_xent_desc d = {.rows = rows, .classes = classes, .dt = dt, .ignore_index = -1,
                       .label_smoothing = eps, .sum = sum};
    int64_t n = rows * classes;
    void *x = test_random_tensor(dt, n, lo, hi);
    int32_t *labels = random_labels(&d, ignore_every);
    float *stats = malloc((size_t)(2 * rows + 1) * sizeof *stats), loss;
    void *dx = malloc((size_t)n * test_dtype_size(dt) + 1);
    ref_out ref = {.lse = malloc((size_t)rows * sizeof(double) + 1)};
    CHECK_OK(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats, &loss));
    ref_forward(&d, x, labels, &ref);
    long double want = sum ? ref.total : ref.total / ref.count;
    /* f32 row losses of a few ulps of their terms; near 1e3 the logsumexp keeps 2^-14. */
    double tol = 1e-5 * fabsl(want) + (lo > 100 ? 1e-3 : 1e-6);
    CHECK_MSG(fabsl(loss - want) <= tol, "xent %s [%lld, %lld] eps %g%s: loss %.9g vs %.12Lg",
              amp_dtype_name(dt), (long long)rows, (long long)classes, (double)eps,
              sum ? " sum" : "", (double)loss, want);
    CHECK(stats[2 * rows] == (float)ref.count);
    int bad_lse = 0;
    for (int64_t r = 0; r < rows; r++)
        bad_lse += !(fabs(stats[r] - ref.lse[r]) <= 0x1p-21 * (fabs(ref.lse[r]) + 8));
    CHECK_MSG(bad_lse == 0, "xent %s [%lld, %lld]: %d logsumexps wrong", amp_dtype_name(dt),
              (long long)rows, (long long)classes, bad_lse);

    float dloss = 0.75f;
    CHECK_OK(amp_cpu_xent_bwd(amp_cpu_device(), &d, x, labels, stats, &dloss, dx));
    double scale = sum ? dloss : (double)dloss / (double)ref.count;
    double ulp = dt == AMP_F32 ? 0x1p-23 : dt == AMP_F16 ? 0x1p-10 : 0x1p-7;
    double floor = dt == AMP_F16 ? 0x1p-24 : 0x1p-126;
    int bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < classes; j++) {
            double got = test_load(dx, dt, r * classes + j);
            if (labels[r] == d.ignore_index) {
                bad += got != 0.0;
                continue;
            }
            double xv = test_load(x, dt, r * classes + j), lse = ref.lse[r];
            double p = exp(xv - lse), target = (j == labels[r]) * (1.0 - eps) + eps / classes;
            double g = (p - target) * scale;
            /* p from f32 x - lse (an error of 2^-24 (|x| + |lse|) in the exponent), then the
             * difference, the product and the storage rounding. */
            double gtol = (p * 0x1p-22 * (fabs(xv) + fabs(lse) + 2) + 0x1p-22 * target) * scale +
                          ulp * fabs(g) + floor;
            bad += !(fabs(got - g) <= gtol);
        }
    CHECK_MSG(bad == 0, "xent_bwd %s [%lld, %lld] eps %g%s: %d wrong", amp_dtype_name(dt),
              (long long)rows, (long long)classes, (double)eps, sum ? " sum" : "", bad);
    free(x);
    free(labels);
    free(stats);
    free(dx);
    free(ref.lse);
}

static void test_values(void) {
    const int64_t shapes[][2] = {{1, 1}, {4, 10}, {64, 10}, {33, 5000}, {2000, 17}, {6, 50257}};
    for (int k = 0; k < 3; k++)
        for (int s = 0; s < 6; s++) {
            int64_t rows = shapes[s][0], classes = shapes[s][1];
            check_case(dts[k], rows, classes, 0.0f, false, 0, -8, 8);
            check_case(dts[k], rows, classes, 0.1f, false, 3, -8, 8);
            check_case(dts[k], rows, classes, 0.0f, true, 5, -8, 8);
        }
    check_case(AMP_F32, 64, 10, 0.0f, false, 0, 990, 1010); /* exp would overflow unshifted */
    check_case(AMP_F32, 16, 100, 1.0f, false, 4, -4, 4);     /* the uniform target alone */
}

/* A NaN logit poisons its row's loss (and the mean); all rows ignored: NaN, zero gradients. */
static void test_specials(void) {
    float x[6] = {1, 2, 3, 4, NAN, 6}, stats[5], loss = 0, dloss = 1, g[6];
    int32_t labels[2] = {2, 0};
    amp_xent_desc d = {.rows = 2, .classes = 3, .dt = AMP_F32, .ignore_index = -100};
    CHECK_OK(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats, &loss));
    CHECK(isnan(loss) && isnan(stats[1]) && isnan(stats[3]) && isfinite(stats[0]) &&
          isfinite(stats[2]) && stats[4] == 2.0f);
    labels[1] = -100; /* the NaN row ignored: finite again */
    CHECK_OK(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats, &loss));
    CHECK(isfinite(loss) && stats[4] == 1.0f);
    labels[0] = -100;
    CHECK_OK(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats, &loss));
    CHECK(isnan(loss) && stats[4] == 0.0f); /* PyTorch: 0 / 0 */
    CHECK_OK(amp_cpu_xent_bwd(amp_cpu_device(), &d, x, labels, stats, &dloss, g));
    for (int i = 0; i < 6; i++) CHECK(g[i] == 0.0f);
    d.sum = true;
    CHECK_OK(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats, &loss));
    CHECK(loss == 0.0f);
    d.rows = 0;
    CHECK_OK(amp_cpu_xent_fwd(amp_cpu_device(), &d, NULL, NULL, stats, &loss));
    CHECK(loss == 0.0f && stats[0] == 0.0f);
}

static void test_errors(void) {
    float x[6] = {1, 2, 3, 4, 5, 6}, stats[5] = {42, 42, 42, 42, 42}, loss = 42, dloss = 1;
    int32_t labels[2] = {2, 3};
    amp_xent_desc d = {.rows = 2, .classes = 3, .dt = AMP_F32, .ignore_index = -100};
    CHECK_FAILS(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats, &loss),
                AMP_ERR_INVALID_ARG, "label 3 of row 1 is outside [0, 3)");
    CHECK(loss == 42.0f && stats[0] == 42.0f && stats[4] == 42.0f); /* nothing written */
    labels[1] = -1;
    CHECK_FAILS(amp_cpu_xent_bwd(amp_cpu_device(), &d, x, labels, stats, &dloss, x),
                AMP_ERR_INVALID_ARG, "label -1 of row 1");
    CHECK(x[0] == 1.0f);
    d.ignore_index = -1; /* the same label, ignored now */
    CHECK_OK(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats, &loss));
    CHECK(stats[4] == 1.0f);
    d.label_smoothing = 1.5f;
    CHECK_FAILS(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats, &loss),
                AMP_ERR_INVALID_ARG, "label_smoothing = 1.5 is outside [0, 1]");
    d.label_smoothing = NAN;
    CHECK_FAILS(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats, &loss),
                AMP_ERR_INVALID_ARG, "label_smoothing");
    d.label_smoothing = 0.0f;
    d.classes = 0;
    CHECK_FAILS(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats, &loss), AMP_ERR_SHAPE,
                "classes >= 1");
    d.classes = 3;
    d.dt = AMP_I32;
    CHECK_FAILS(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats, &loss), AMP_ERR_DTYPE,
                "i32");
    d.dt = AMP_F32;
    CHECK_FAILS(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, NULL, stats, &loss),
                AMP_ERR_INVALID_ARG, "labels");
    CHECK_FAILS(amp_cpu_xent_fwd(amp_cpu_device(), NULL, x, labels, stats, &loss),
                AMP_ERR_INVALID_ARG, "'d'");
}

/* The same inputs give the same bits with 1 and 2 threads. */
static void test_thread_determinism(void) {
    amp_xent_desc d = {.rows = 300, .classes = 5003, .dt = AMP_BF16, .ignore_index = -1,
                       .label_smoothing = 0.1f};
    int64_t n = d.rows * d.classes;
    void *x = test_random_tensor(d.dt, n, -6, 6);
    int32_t *labels = random_labels(&d, 7);
    size_t sbytes = (size_t)(2 * d.rows + 1) * sizeof(float), gbytes = (size_t)n * 2;
    float *stats[2] = {malloc(sbytes), malloc(sbytes)}, loss[2], dloss = 3.0f;
    void *g[2] = {malloc(gbytes), malloc(gbytes)};
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        CHECK_OK(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats[t], &loss[t]));
        CHECK_OK(amp_cpu_xent_bwd(amp_cpu_device(), &d, x, labels, stats[t], &dloss, g[t]));
    }
    CHECK(loss[0] == loss[1] && memcmp(stats[0], stats[1], sbytes) == 0 &&
          memcmp(g[0], g[1], gbytes) == 0);
    free(x);
    free(labels);
    for (int t = 0; t < 2; t++) free(stats[t]), free(g[t]);
}

/* The backward's vector loops give amp_xent_grad's bits (the CUDA backend's) element by element:
 * random rows over a vocabulary with a tail, label smoothing, a row whose lse saw an infinite
 * logit and a row with a NaN (both the scalar way), and an ignored row. */
static void test_grad_bits(void) {
    enum { ROWS = 8, CLASSES = 1027 };
    static float x[ROWS * CLASSES], g[ROWS * CLASSES];
    float stats[2 * ROWS + 1], loss = 0, dloss = 0.75f;
    int32_t labels[ROWS];
    for (int i = 0; i < ROWS * CLASSES; i++) x[i] = (float)(24.0 * test_uniform() - 12.0);
    for (int r = 0; r < ROWS; r++) labels[r] = (int32_t)((r * 389) % CLASSES);
    x[2 * CLASSES + 5] = INFINITY;
    x[3 * CLASSES + 700] = NAN;
    labels[5] = -100;
    for (int smooth = 0; smooth < 2; smooth++) {
        amp_xent_desc d = {.rows = ROWS, .classes = CLASSES, .dt = AMP_F32, .ignore_index = -100,
                           .label_smoothing = smooth ? 0.1f : 0.0f};
        CHECK_OK(amp_cpu_xent_fwd(amp_cpu_device(), &d, x, labels, stats, &loss));
        CHECK_OK(amp_cpu_xent_bwd(amp_cpu_device(), &d, x, labels, stats, &dloss, g));
        float scale = amp_xent_scale(dloss, stats[2 * ROWS], false), eps = d.label_smoothing;
        int bad = 0;
        for (int r = 0; r < ROWS; r++)
            for (int j = 0; j < CLASSES; j++) {
                float want = labels[r] == -100 ? 0.0f
                             : amp_xent_grad(x[r * CLASSES + j], stats[r], j == labels[r], eps,
                                             eps / (float)CLASSES, scale);
                float got = g[r * CLASSES + j];
                if (!(got == want || (isnan(got) && isnan(want))) ||
                    signbit(got) != signbit(want))
                    bad++;
            }
        CHECK_MSG(bad == 0, "smoothing %g: %d gradients differ from amp_xent_grad's bits",
                  (double)eps, bad);
    }
}

int main(void) {
    test_rng_seed(0x243f6a8885a308d3ull);
    test_grad_bits();
    test_values();
    test_specials();
    test_errors();
    test_thread_determinism();
    return test_summary("test_xent");
}
