/* CPU GEMM and convolution (oneDNN) against plain double-accumulator references written here.
 *
 * Each result element must lie within rel_tol * (sum of |terms|) of the reference, plus the
 * output dtype's rounding for f16/bf16 outputs. Half inputs are random values rounded to the
 * dtype, and the reference uses those rounded values, so only the kernel's own arithmetic is
 * measured. Memory past each output row (ld > n) must come back untouched. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dnnl_util.h"
#include "test_data.h"
#include "test_util.h"

#define F32_TOL 2e-6 /* f32 accumulation over sums of at most a few thousand terms */
#define BF16_TOL 1e-5 /* bf16 products are exact in f32; only the f32 accumulation rounds */
#define SENTINEL 4096.0f /* exact in f16 and bf16 too */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static float frand(void) { /* xorshift64*, uniform in [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) / 8388608.0f - 1.0f;
}

/* A tensor in storage dtype dt and the exact float value of every element. */
typedef struct buf {
    amp_dtype dt;
    int64_t n;
    void *p;
    float *v;
} buf;

/* Stores x (rounded to the buffer's dtype) and keeps the exact value that was stored. */
static void buf_store(buf *b, int64_t i, float x) {
    test_store(b->p, b->dt, i, x);
    b->v[i] = test_load(b->p, b->dt, i);
}

static float buf_load(const buf *b, int64_t i) { return test_load(b->p, b->dt, i); }

static buf buf_new(amp_dtype dt, int64_t n) {
    buf b = {dt, n, NULL, malloc((size_t)n * sizeof(float))};
    b.p = dt == AMP_F32 ? (void *)b.v : malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) buf_store(&b, i, frand());
    return b;
}

static void buf_free(buf *b) {
    if (b->p != b->v) free(b->p);
    free(b->v);
}

/* Rounding of one value stored in dt (half an ulp, relative). */
static double store_tol(amp_dtype dt) {
    return dt == AMP_BF16 ? 1.0 / 256 : dt == AMP_F16 ? 1.0 / 2048 : 0.0;
}

/* ---- GEMM ------------------------------------------------------------------------------------ */

typedef struct gcase {
    bool ta, tb;
    int64_t m, n, k, pad; /* pad: extra elements per row of A, B and C */
    float alpha, beta;
    bool bias;
    amp_dtype at, bt, ct;
    int samples; /* 0: check every element, else this many random ones */
} gcase;

/* Runs one GEMM and compares it with the reference; returns the worst error / tolerance. */
static double check_gemm(gcase g, double rel_tol) {
    int64_t a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
    int64_t b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
    int64_t lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = g.n + g.pad;
    buf a = buf_new(g.at, a_rows * lda), b = buf_new(g.bt, b_rows * ldb);
    buf c = buf_new(g.ct, g.m * ldc);
    for (int64_t i = 0; i < g.m; i++)
        for (int64_t j = g.n; j < ldc; j++) buf_store(&c, i * ldc + j, SENTINEL);
    float *c0 = malloc((size_t)(g.m * ldc) * sizeof *c0);
    memcpy(c0, c.v, (size_t)(g.m * ldc) * sizeof *c0);
    float *bias = malloc((size_t)g.n * sizeof *bias);
    for (int64_t j = 0; j < g.n; j++) bias[j] = frand();

    amp_gemm_desc d = {.trans_a = g.ta, .trans_b = g.tb, .m = g.m, .n = g.n, .k = g.k,
                       .alpha = g.alpha, .beta = g.beta, .a = a.p, .a_dtype = g.at, .lda = lda,
                       .b = b.p, .b_dtype = g.bt, .ldb = ldb, .c = c.p, .c_dtype = g.ct,
                       .ldc = ldc, .bias = g.bias ? bias : NULL};
    CHECK_OK(amp_cpu_gemm(amp_cpu_device(), &d));

    double worst = 0;
    int64_t total = g.samples ? g.samples : g.m * g.n;
    for (int64_t s = 0; s < total; s++) {
        int64_t i = g.samples ? (int64_t)((frand() + 1) / 2 * g.m) % g.m : s / g.n;
        int64_t j = g.samples ? (int64_t)((frand() + 1) / 2 * g.n) % g.n : s % g.n;
        double acc = 0, mag = 0;
        for (int64_t p = 0; p < g.k; p++) {
            double x = a.v[g.ta ? p * lda + i : i * lda + p];
            double y = b.v[g.tb ? j * ldb + p : p * ldb + j];
            acc += x * y;
            mag += fabs(x * y);
        }
        double ref = g.alpha * acc, ref_mag = fabs(g.alpha) * mag;
        if (g.beta != 0.0f) {
            ref += (double)g.beta * c0[i * ldc + j];
            ref_mag += fabs((double)g.beta * c0[i * ldc + j]);
        }
        if (g.bias) { /* a half C's bias is rounded to its dtype first (core/backend.h) */
            double bj = g.ct == AMP_F16   ? amp_f16_bits_to_f32(amp_f32_to_f16_bits(bias[j]))
                        : g.ct == AMP_BF16 ? amp_bf16_bits_to_f32(amp_f32_to_bf16_bits(bias[j]))
                                           : bias[j];
            ref += bj;
            ref_mag += fabs(bj);
        }
        double tol = rel_tol * ref_mag + store_tol(g.ct) * fabs(ref) + 1e-30;
        double err = fabs(buf_load(&c, i * ldc + j) - ref) / tol;
        if (!(err <= worst)) worst = err; /* NaN sticks */
    }
    bool guard_ok = true;
    for (int64_t i = 0; i < g.m; i++)
        for (int64_t j = g.n; j < ldc; j++) guard_ok &= buf_load(&c, i * ldc + j) == SENTINEL;
    CHECK_MSG(guard_ok, "gemm wrote past n into the ldc padding");
    buf_free(&a);
    buf_free(&b);
    buf_free(&c);
    free(c0);
    free(bias);
    return worst;
}

#define CHECK_GEMM(g, tol)                                                                         \
    do {                                                                                           \
        gcase g_ = (g);                                                                            \
        double w_ = check_gemm(g_, tol);                                                           \
        CHECK_MSG(w_ <= 1.0,                                                                       \
                  "gemm ta=%d tb=%d %lldx%lldx%lld pad=%lld alpha=%g beta=%g bias=%d dtypes "      \
                  "%d,%d->%d: worst error %.3g x tolerance",                                       \
                  g_.ta, g_.tb, (long long)g_.m, (long long)g_.n, (long long)g_.k,                 \
                  (long long)g_.pad, (double)g_.alpha, (double)g_.beta, g_.bias, g_.at, g_.bt,     \
                  g_.ct, w_);                                                                      \
    } while (0)

static void test_gemm_f32(void) {
    static const int64_t sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 17, 65}};
    static const float ab[][2] = {{1, 0}, {0.5f, 0}, {1, 1}, {-2, 0.25f}};
    for (int t = 0; t < 4; t++)
        for (int s = 0; s < 3; s++)
            for (int v = 0; v < 4; v++)
                for (int bias = 0; bias < 2; bias++) {
                    gcase g = {.ta = t & 1, .tb = t >> 1, .m = sizes[s][0], .n = sizes[s][1],
                               .k = sizes[s][2], .pad = (s + v) % 3, .alpha = ab[v][0],
                               .beta = ab[v][1], .bias = bias, .at = AMP_F32, .bt = AMP_F32,
                               .ct = AMP_F32};
                    CHECK_GEMM(g, F32_TOL);
                }
    /* The MLP 784-2048-2048-10 at batch 128: forward (x @ W^T), both backward GEMMs; sampled. */
    CHECK_GEMM(((gcase){.tb = true, .m = 128, .n = 2048, .k = 784, .alpha = 1, .bias = true,
                        .at = AMP_F32, .bt = AMP_F32, .ct = AMP_F32, .samples = 2000}),
               F32_TOL);
    CHECK_GEMM(((gcase){.m = 128, .n = 784, .k = 2048, .alpha = 1, .at = AMP_F32, .bt = AMP_F32,
                        .ct = AMP_F32, .samples = 2000}),
               F32_TOL);
    CHECK_GEMM(((gcase){.ta = true, .m = 2048, .n = 784, .k = 128, .alpha = 1, .beta = 1,
                        .at = AMP_F32, .bt = AMP_F32, .ct = AMP_F32, .samples = 2000}),
               F32_TOL);
}

/* A row-major f32 B whose row stride is a multiple of 4 KiB is copied to a padded stride first
 * (gemm.c): that path, with B narrower than its stride, B exactly its stride, and the f16 B
 * widened to a dense 1024-wide f32 copy; a 2048-wide bf16 B (a 4 KiB stride, 2 MiB), which is
 * read in place. */
static void test_gemm_padded_b(void) {
    CHECK_GEMM(((gcase){.m = 64, .n = 1000, .k = 300, .pad = 24, .alpha = 1, .beta = 0.5f,
                        .bias = true, .at = AMP_F32, .bt = AMP_F32, .ct = AMP_F32}),
               F32_TOL);
    CHECK_GEMM(((gcase){.m = 128, .n = 2048, .k = 2048, .alpha = 1, .at = AMP_F32,
                        .bt = AMP_F32, .ct = AMP_F32, .samples = 2000}),
               F32_TOL);
    CHECK_GEMM(((gcase){.m = 40, .n = 2048, .k = 512, .alpha = 2, .bias = true, .at = AMP_BF16,
                        .bt = AMP_BF16, .ct = AMP_F32, .samples = 2000}),
               BF16_TOL);
    CHECK_GEMM(((gcase){.m = 33, .n = 1024, .k = 300, .alpha = 1, .at = AMP_F16, .bt = AMP_F16,
                        .ct = AMP_F16, .samples = 3000}),
               F32_TOL);
}

static void test_gemm_half(void) {
    /* bf16 x bf16 into f32 and bf16 (native oneDNN kernels), every transpose, alpha/beta/bias. */
    for (int t = 0; t < 4; t++)
        for (int ct = 0; ct < 2; ct++) {
            gcase g = {.ta = t & 1, .tb = t >> 1, .m = 37, .n = 29, .k = 300, .pad = t,
                       .alpha = t == 3 ? 0.5f : 1, .beta = t >= 2 ? 0.75f : 0, .bias = t != 1,
                       .at = AMP_BF16, .bt = AMP_BF16, .ct = ct ? AMP_BF16 : AMP_F32};
            CHECK_GEMM(g, BF16_TOL);
        }
    CHECK_GEMM(((gcase){.tb = true, .m = 128, .n = 2048, .k = 784, .alpha = 1, .bias = true,
                        .at = AMP_BF16, .bt = AMP_BF16, .ct = AMP_F32, .samples = 2000}),
               BF16_TOL);
    /* f16 and mixed dtypes: widened to f32 where oneDNN has no kernel on this CPU. */
    CHECK_GEMM(((gcase){.tb = true, .m = 19, .n = 23, .k = 71, .pad = 1, .alpha = 1, .beta = 0.5f,
                        .bias = true, .at = AMP_F16, .bt = AMP_F16, .ct = AMP_F16}),
               F32_TOL);
    CHECK_GEMM(((gcase){.ta = true, .m = 19, .n = 23, .k = 71, .alpha = 2, .at = AMP_BF16,
                        .bt = AMP_F32, .ct = AMP_F32}),
               F32_TOL);
    CHECK_GEMM(((gcase){.m = 5, .n = 9, .k = 3, .alpha = 1, .beta = 1, .at = AMP_F32,
                        .bt = AMP_F32, .ct = AMP_BF16}),
               F32_TOL);
}

static void test_gemm_edges(void) {
    /* beta == 0 never reads C: a NaN left there must not reach the result (BLAS, PyTorch). */
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1}, c[4];
    for (int i = 0; i < 4; i++) c[i] = NAN;
    amp_gemm_desc d = {.m = 2, .n = 2, .k = 3, .alpha = 1, .a = a, .a_dtype = AMP_F32, .lda = 3,
                       .b = b, .b_dtype = AMP_F32, .ldb = 2, .c = c, .c_dtype = AMP_F32, .ldc = 2};
    CHECK_OK(amp_cpu_gemm(amp_cpu_device(), &d));
    CHECK(c[0] == 4 && c[1] == 5 && c[2] == 10 && c[3] == 11);
    /* k == 0: C = beta * C + bias. */
    float bias[2] = {1, -1};
    amp_gemm_desc e = d;
    e.k = 0, e.beta = 2, e.bias = bias;
    CHECK_OK(amp_cpu_gemm(amp_cpu_device(), &e));
    CHECK(c[0] == 9 && c[1] == 9 && c[2] == 21 && c[3] == 21);
    /* m == 0 or n == 0: nothing to do, nothing touched. */
    amp_gemm_desc z = d;
    z.m = 0;
    CHECK_OK(amp_cpu_gemm(amp_cpu_device(), &z));
    CHECK(c[0] == 9);

    amp_gemm_desc bad = d;
    bad.lda = 2;
    CHECK_FAILS(amp_cpu_gemm(amp_cpu_device(), &bad), AMP_ERR_SHAPE, "lda=2");
    bad = d;
    bad.ldc = 1;
    CHECK_FAILS(amp_cpu_gemm(amp_cpu_device(), &bad), AMP_ERR_SHAPE, "ldc=1");
    bad = d;
    bad.b_dtype = AMP_I32;
    CHECK_FAILS(amp_cpu_gemm(amp_cpu_device(), &bad), AMP_ERR_UNSUPPORTED, "f32, f16 or bf16");
    bad = d;
    bad.a = NULL;
    CHECK_FAILS(amp_cpu_gemm(amp_cpu_device(), &bad), AMP_ERR_INVALID_ARG, "d->a");
    CHECK_FAILS(amp_cpu_gemm(amp_cpu_device(), NULL), AMP_ERR_INVALID_ARG, "'d'");
}

/* The same inputs give the same bits on repeated calls (the plan comes from the cache). */
static void test_gemm_repeat(void) {
    for (int dt = 0; dt < 2; dt++) {
        amp_dtype t = dt ? AMP_BF16 : AMP_F32;
        int64_t m = 128, n = 512, k = 784;
        buf a = buf_new(t, m * k), b = buf_new(t, n * k);
        float *c1 = malloc((size_t)(m * n) * sizeof *c1), *c2 = malloc((size_t)(m * n) * 4);
        amp_gemm_desc d = {.trans_b = true, .m = m, .n = n, .k = k, .alpha = 1, .a = a.p,
                           .a_dtype = t, .lda = k, .b = b.p, .b_dtype = t, .ldb = k, .c = c1,
                           .c_dtype = AMP_F32, .ldc = n};
        CHECK_OK(amp_cpu_gemm(amp_cpu_device(), &d));
        for (int r = 0; r < 3; r++) {
            d.c = c2;
            CHECK_OK(amp_cpu_gemm(amp_cpu_device(), &d));
            CHECK_MSG(!memcmp(c1, c2, (size_t)(m * n) * 4), "gemm dtype %d: call %d differs", t,
                      r + 2);
        }
        buf_free(&a);
        buf_free(&b);
        free(c1);
        free(c2);
    }
}

/* Threads calling GEMMs of more distinct shapes than the cache holds: plans are built, shared,
 * evicted while another thread may still run them, and every result must equal the one computed
 * alone beforehand. */
#define CONC_THREADS 4
#define CONC_SHAPES 24 /* per thread; 4 x 24 > AMP_DNNL_CACHE_CAPACITY */

typedef struct conc_job {
    const float *a, *b;
    float *want; /* [CONC_SHAPES][16 * 16] */
    int bad;
} conc_job;

static amp_status conc_gemm(int shape, const float *a, const float *b, float *c) {
    /* m, n vary with the shape index so each index is its own plan. */
    amp_gemm_desc d = {.m = 1 + shape % 16, .n = 16, .k = 8 + shape, .alpha = 1, .a = a,
                       .a_dtype = AMP_F32, .lda = 128, .b = b, .b_dtype = AMP_F32, .ldb = 16,
                       .c = c, .c_dtype = AMP_F32, .ldc = 16};
    return amp_cpu_gemm(amp_cpu_device(), &d);
}

static void *conc_worker(void *p) {
    conc_job *job = p;
    float c[16 * 16];
    for (int rep = 0; rep < 3; rep++)
        for (int s = 0; s < CONC_THREADS * CONC_SHAPES; s++) {
            int shape = (s + rep * 7) % (CONC_THREADS * CONC_SHAPES);
            if (conc_gemm(shape, job->a, job->b, c) != AMP_OK ||
                memcmp(c, job->want + shape * 256, (size_t)(1 + shape % 16) * 16 * sizeof *c))
                job->bad++;
        }
    return NULL;
}

static void test_gemm_threads(void) {
    int n_shapes = CONC_THREADS * CONC_SHAPES;
    float *a = malloc(16 * 128 * sizeof *a), *b = malloc(128 * 16 * sizeof *b);
    float *want = malloc((size_t)n_shapes * 256 * sizeof *want);
    for (int i = 0; i < 16 * 128; i++) a[i] = frand();
    for (int i = 0; i < 128 * 16; i++) b[i] = frand();
    for (int s = 0; s < n_shapes; s++) CHECK_OK(conc_gemm(s, a, b, want + s * 256));
    pthread_t th[CONC_THREADS];
    conc_job jobs[CONC_THREADS];
    for (int t = 0; t < CONC_THREADS; t++) {
        jobs[t] = (conc_job){a, b, want, 0};
        CHECK(pthread_create(&th[t], NULL, conc_worker, &jobs[t]) == 0);
    }
    for (int t = 0; t < CONC_THREADS; t++) {
        pthread_join(th[t], NULL);
        CHECK_MSG(jobs[t].bad == 0, "thread %d: %d GEMMs failed or differ", t, jobs[t].bad);
    }
    free(a);
    free(b);
    free(want);
}

/* ---- convolution ----------------------------------------------------------------------------- */

typedef struct conv_ref {
    double *y, *y_mag, *dx, *dx_mag, *dw, *dw_mag, *db, *db_mag;
} conv_ref;

static int64_t nx_of(const amp_conv2d_desc *d) { return d->n * d->c_in * d->h_in * d->w_in; }
static int64_t nw_of(const amp_conv2d_desc *d) { return d->c_out * d->c_in * d->kh * d->kw; }
static int64_t ny_of(const amp_conv2d_desc *d) { return d->n * d->c_out * d->h_out * d->w_out; }

/* The three convolution results in double by direct loops over every (output, tap) pair. */
static conv_ref conv_reference(const amp_conv2d_desc *d, const float *x, const float *w,
                               const float *bias, const float *dy) {
    conv_ref r;
    double **all[8] = {&r.y, &r.y_mag, &r.dx, &r.dx_mag, &r.dw, &r.dw_mag, &r.db, &r.db_mag};
    int64_t sizes[8] = {ny_of(d), ny_of(d), nx_of(d), nx_of(d), nw_of(d), nw_of(d), d->c_out,
                        d->c_out};
    for (int i = 0; i < 8; i++) *all[i] = calloc((size_t)sizes[i], sizeof(double));
    for (int64_t n = 0; n < d->n; n++)
        for (int64_t o = 0; o < d->c_out; o++)
            for (int64_t oh = 0; oh < d->h_out; oh++)
                for (int64_t ow = 0; ow < d->w_out; ow++) {
                    int64_t yi = ((n * d->c_out + o) * d->h_out + oh) * d->w_out + ow;
                    double g = dy[yi], acc = bias ? bias[o] : 0, mag = fabs(acc);
                    r.db[o] += g;
                    r.db_mag[o] += fabs(g);
                    for (int64_t c = 0; c < d->c_in; c++)
                        for (int64_t i = 0; i < d->kh; i++)
                            for (int64_t j = 0; j < d->kw; j++) {
                                int64_t ih = oh * d->stride_h - d->pad_h + i;
                                int64_t iw = ow * d->stride_w - d->pad_w + j;
                                if (ih < 0 || ih >= d->h_in || iw < 0 || iw >= d->w_in) continue;
                                int64_t xi = ((n * d->c_in + c) * d->h_in + ih) * d->w_in + iw;
                                int64_t wi = ((o * d->c_in + c) * d->kh + i) * d->kw + j;
                                acc += (double)x[xi] * w[wi];
                                mag += fabs((double)x[xi] * w[wi]);
                                r.dx[xi] += g * w[wi];
                                r.dx_mag[xi] += fabs(g * w[wi]);
                                r.dw[wi] += g * x[xi];
                                r.dw_mag[wi] += fabs(g * x[xi]);
                            }
                    r.y[yi] = acc;
                    r.y_mag[yi] = mag;
                }
    return r;
}

static void conv_ref_free(conv_ref *r) {
    double *all[8] = {r->y, r->y_mag, r->dx, r->dx_mag, r->dw, r->dw_mag, r->db, r->db_mag};
    for (int i = 0; i < 8; i++) free(all[i]);
}

/* Worst |got - ref| / tolerance over n values. */
static double worst_err(const buf *got, const double *ref, const double *mag, int64_t n,
                        double rel_tol) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double tol = rel_tol * mag[i] + store_tol(got->dt) * fabs(ref[i]) + 1e-30;
        double err = fabs(buf_load(got, i) - ref[i]) / tol;
        if (!(err <= worst)) worst = err;
    }
    return worst;
}

static double worst_err_f32(const float *got, const double *ref, const double *mag, int64_t n,
                            double rel_tol) {
    buf b = {AMP_F32, n, (void *)got, (float *)got};
    return worst_err(&b, ref, mag, n, rel_tol);
}

static amp_conv2d_desc conv_desc(int64_t n, int64_t c_in, int64_t h, int64_t w, int64_t c_out,
                                 int64_t k, int64_t stride, int64_t pad, amp_dtype dt) {
    return (amp_conv2d_desc){.n = n, .c_in = c_in, .h_in = h, .w_in = w, .c_out = c_out,
                             .kh = k, .kw = k, .stride_h = stride, .stride_w = stride,
                             .pad_h = pad, .pad_w = pad,
                             .h_out = (h + 2 * pad - k) / stride + 1,
                             .w_out = (w + 2 * pad - k) / stride + 1, .dtype = dt};
}

/* Runs forward (with bias when `bias`), backward data and backward weight (+ dbias). */
static void check_conv(amp_conv2d_desc d, bool bias, double rel_tol) {
    buf x = buf_new(d.dtype, nx_of(&d)), w = buf_new(d.dtype, nw_of(&d));
    buf dy = buf_new(d.dtype, ny_of(&d));
    buf y = buf_new(d.dtype, ny_of(&d)), dx = buf_new(d.dtype, nx_of(&d));
    buf dw = buf_new(d.dtype, nw_of(&d));
    float *b = malloc((size_t)d.c_out * sizeof *b), *db = malloc((size_t)d.c_out * sizeof *db);
    for (int64_t o = 0; o < d.c_out; o++) b[o] = frand(), db[o] = NAN;
    CHECK_OK(amp_cpu_conv2d_fwd(amp_cpu_device(), &d, x.p, w.p, bias ? b : NULL, y.p));
    CHECK_OK(amp_cpu_conv2d_bwd_data(amp_cpu_device(), &d, dy.p, w.p, dx.p));
    CHECK_OK(amp_cpu_conv2d_bwd_weight(amp_cpu_device(), &d, x.p, dy.p, dw.p, bias ? db : NULL));
    conv_ref r = conv_reference(&d, x.v, w.v, bias ? b : NULL, dy.v);
    double e[4] = {worst_err(&y, r.y, r.y_mag, ny_of(&d), rel_tol),
                   worst_err(&dx, r.dx, r.dx_mag, nx_of(&d), rel_tol),
                   worst_err(&dw, r.dw, r.dw_mag, nw_of(&d), rel_tol),
                   bias ? worst_err_f32(db, r.db, r.db_mag, d.c_out, rel_tol) : 0};
    static const char *names[4] = {"fwd", "bwd_data", "bwd_weight", "dbias"};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(e[i] <= 1.0,
                  "conv %s n=%lld %lld->%lld %lldx%lld k=%lld s=%lld p=%lld dtype %d bias %d: "
                  "worst error %.3g x tolerance",
                  names[i], (long long)d.n, (long long)d.c_in, (long long)d.c_out,
                  (long long)d.h_in, (long long)d.w_in, (long long)d.kh, (long long)d.stride_h,
                  (long long)d.pad_h, d.dtype, bias, e[i]);
    conv_ref_free(&r);
    buf *all[6] = {&x, &w, &dy, &y, &dx, &dw};
    for (int i = 0; i < 6; i++) buf_free(all[i]);
    free(b);
    free(db);
}

static void test_conv_small(void) {
    /* c_in 3 keeps backward data in the plain layout, 16 takes the blocked one. */
    static const int64_t kernels[] = {1, 3, 5};
    for (int ci = 0; ci < 2; ci++)
        for (int k = 0; k < 3; k++)
            for (int stride = 1; stride <= 2; stride++)
                for (int pad = 0; pad <= 2; pad += 2) {
                    amp_conv2d_desc d = conv_desc(2, ci ? 16 : 3, 9, 8, 5, kernels[k], stride,
                                                  pad, AMP_F32);
                    check_conv(d, (k + stride + pad) % 2 == 0, F32_TOL);
                }
    check_conv(conv_desc(3, 4, 11, 10, 6, 3, 2, 1, AMP_BF16), true, BF16_TOL);
    check_conv(conv_desc(2, 16, 7, 7, 8, 3, 1, 1, AMP_BF16), true, BF16_TOL);
    check_conv(conv_desc(2, 3, 8, 9, 4, 3, 1, 1, AMP_F16), true, F32_TOL); /* widened */
}

/* The MNIST ConvNet's two convolutions at batch 128. */
static void test_conv_convnet(void) {
    check_conv(conv_desc(128, 1, 28, 28, 16, 5, 1, 2, AMP_F32), true, F32_TOL);
    check_conv(conv_desc(128, 16, 14, 14, 32, 5, 1, 2, AMP_F32), true, F32_TOL);
    check_conv(conv_desc(128, 16, 14, 14, 32, 5, 1, 2, AMP_BF16), true, BF16_TOL);
    /* one input channel: the backward weight runs widened to f32, a slice of the batch at a time
     * (2 slices of 64 here; 53 + 53 + 51 below, in f16 too) */
    check_conv(conv_desc(128, 1, 28, 28, 16, 5, 1, 2, AMP_BF16), true, BF16_TOL);
    check_conv(conv_desc(157, 1, 28, 28, 16, 5, 1, 2, AMP_BF16), true, BF16_TOL);
    check_conv(conv_desc(157, 1, 28, 28, 16, 5, 1, 2, AMP_F16), true, F32_TOL);
}

static void test_conv_repeat(void) {
    amp_conv2d_desc d = conv_desc(32, 16, 14, 14, 32, 5, 1, 2, AMP_F32);
    buf x = buf_new(AMP_F32, nx_of(&d)), w = buf_new(AMP_F32, nw_of(&d));
    buf dy = buf_new(AMP_F32, ny_of(&d));
    size_t ny = (size_t)ny_of(&d) * 4, nx = (size_t)nx_of(&d) * 4, nw = (size_t)nw_of(&d) * 4;
    float *y[2] = {malloc(ny), malloc(ny)}, *dx[2] = {malloc(nx), malloc(nx)};
    float *dw[2] = {malloc(nw), malloc(nw)}, db[2][32], bias[32];
    for (int o = 0; o < 32; o++) bias[o] = frand();
    for (int r = 0; r < 2; r++) {
        CHECK_OK(amp_cpu_conv2d_fwd(amp_cpu_device(), &d, x.p, w.p, bias, y[r]));
        CHECK_OK(amp_cpu_conv2d_bwd_data(amp_cpu_device(), &d, dy.p, w.p, dx[r]));
        CHECK_OK(amp_cpu_conv2d_bwd_weight(amp_cpu_device(), &d, x.p, dy.p, dw[r], db[r]));
    }
    CHECK(!memcmp(y[0], y[1], ny));
    CHECK(!memcmp(dx[0], dx[1], nx));
    CHECK(!memcmp(dw[0], dw[1], nw));
    CHECK(!memcmp(db[0], db[1], sizeof db[0]));
    for (int r = 0; r < 2; r++) free(y[r]), free(dx[r]), free(dw[r]);
    buf_free(&x);
    buf_free(&w);
    buf_free(&dy);
}

static void test_conv_errors(void) {
    amp_conv2d_desc d = conv_desc(1, 2, 5, 5, 3, 3, 1, 1, AMP_F32);
    float x[50] = {0}, w[54] = {0}, y[75];
    amp_conv2d_desc bad = d;
    bad.h_out = 4;
    CHECK_FAILS(amp_cpu_conv2d_fwd(amp_cpu_device(), &bad, x, w, NULL, y), AMP_ERR_SHAPE,
                "output 4x5");
    bad = d;
    bad.kh = 9, bad.pad_h = 1;
    CHECK_FAILS(amp_cpu_conv2d_bwd_data(amp_cpu_device(), &bad, y, w, x), AMP_ERR_SHAPE,
                "kernel 9x3");
    bad = d;
    bad.stride_w = 0;
    CHECK_FAILS(amp_cpu_conv2d_bwd_weight(amp_cpu_device(), &bad, x, y, w, NULL), AMP_ERR_SHAPE,
                "stride");
    bad = d;
    bad.dtype = AMP_I32;
    CHECK_FAILS(amp_cpu_conv2d_fwd(amp_cpu_device(), &bad, x, w, NULL, y), AMP_ERR_UNSUPPORTED,
                "f32, f16 or bf16");
    CHECK_FAILS(amp_cpu_conv2d_fwd(amp_cpu_device(), &d, x, NULL, NULL, y), AMP_ERR_INVALID_ARG,
                "'w'");
}

int main(void) {
    test_gemm_f32();
    test_gemm_half();
    test_gemm_padded_b();
    test_gemm_edges();
    test_gemm_repeat();
    test_gemm_threads();
    test_conv_small();
    test_conv_convnet();
    test_conv_repeat();
    test_conv_errors();
    /* The cases above need more plans than the cache holds: it must have evicted, not grown. */
    CHECK(amp_dnnl_cache_size() == AMP_DNNL_CACHE_CAPACITY);
    return test_summary("test_cpu_gemm_conv");
}
