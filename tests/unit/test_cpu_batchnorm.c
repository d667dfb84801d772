/* CPU batch norm (batchnorm.c) against a plain double reference written here from the
 * textbook formulas (Ioffe & Szegedy 2015; PyTorch's running-stat update with the unbiased
 * variance), on random data in f32, f16 and bf16 storage; the backward reference is the
 * closed form dx = gamma * invstd / N * (N dy - sum(dy) - xhat sum(dy xhat)), a different
 * arrangement from the kernel's. Also: eval mode, optional pointers, thread determinism. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "test_data.h"
#include "test_util.h"

/* |got - want| within `ulps` of the dtype at max(|want|, scale). */
static int near(double got, double want, double scale, amp_dtype dt, double ulps) {
    double ulp = dt == AMP_F32 ? 0x1p-23 : dt == AMP_F16 ? 0x1p-10 : 0x1p-7;
    double mag = fabs(want) > scale ? fabs(want) : scale;
    return fabs(got - want) <= ulps * ulp * mag;
}

static void test_train_and_backward(amp_dtype dt, int64_t n, int64_t c, int64_t hw) {
    amp_bn_desc d = {.n = n, .c = c, .hw = hw, .eps = 1e-5f, .momentum = 0.1f, .dtype = dt};
    int64_t total = n * c * hw, count = n * hw;
    /* An offset mean (3) tests that the variance does not cancel. */
    void *x = test_random_tensor(dt, total, 1.0, 5.0),
         *dy = test_random_tensor(dt, total, -1.0, 1.0);
    void *y = malloc((size_t)total * test_dtype_size(dt)),
         *dx = malloc((size_t)total * test_dtype_size(dt));
    float *gamma = (float *)test_random_tensor(AMP_F32, c, 0.5, 1.5),
          *beta = (float *)test_random_tensor(AMP_F32, c, -1.0, 1.0);
    float *rm = (float *)test_random_tensor(AMP_F32, c, -1.0, 1.0),
          *rv = (float *)test_random_tensor(AMP_F32, c, 0.5, 2.0);
    float *rm0 = malloc((size_t)c * 4), *rv0 = malloc((size_t)c * 4);
    memcpy(rm0, rm, (size_t)c * 4);
    memcpy(rv0, rv, (size_t)c * 4);
    float *smean = malloc((size_t)c * 4), *sinv = malloc((size_t)c * 4);
    float *dgamma = malloc((size_t)c * 4), *dbeta = malloc((size_t)c * 4);
    CHECK_OK(amp_cpu_bn_fwd_train(amp_cpu_device(), &d, x, gamma, beta, y, smean, sinv, rm, rv));
    CHECK_OK(amp_cpu_bn_bwd(amp_cpu_device(), &d, x, dy, NULL, gamma, smean, sinv, dx, dgamma,
                            dbeta));
    int bad_stats = 0, bad_y = 0, bad_dx = 0, bad_param = 0;
    for (int64_t ch = 0; ch < c; ch++) {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < hw; k++) sum += test_load(x, dt, (i * c + ch) * hw + k);
        double mean = sum / (double)count;
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < hw; k++) {
                double dev = test_load(x, dt, (i * c + ch) * hw + k) - mean;
                sq += dev * dev;
            }
        double var = sq / (double)count, invstd = 1.0 / sqrt(var + 1e-5);
        double want_rm = 0.9 * rm0[ch] + 0.1 * mean;
        double want_rv = 0.9 * rv0[ch] + 0.1 * sq / (double)(count - 1); /* unbiased */
        bad_stats += !near(smean[ch], mean, 1.0, AMP_F32, 1);
        bad_stats += !near(sinv[ch], invstd, 0, AMP_F32, 1);
        bad_stats += !near(rm[ch], want_rm, 1.0, AMP_F32, 1);
        bad_stats += !near(rv[ch], want_rv, 0, AMP_F32, 1);
        double sum_dy = 0, sum_dy_xhat = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < hw; k++) {
                int64_t e = (i * c + ch) * hw + k;
                double xhat = (test_load(x, dt, e) - mean) * invstd;
                double want = gamma[ch] * xhat + beta[ch];
                /* The normalised value carries ~2^-23 relative error per f32 op. */
                bad_y += !near(test_load(y, dt, e), want, 1.0, dt, dt == AMP_F32 ? 8 : 1);
                sum_dy += test_load(dy, dt, e);
                sum_dy_xhat += test_load(dy, dt, e) * xhat;
            }
        bad_param += !near(dbeta[ch], sum_dy, sqrt((double)count), AMP_F32, 1);
        bad_param += !near(dgamma[ch], sum_dy_xhat, sqrt((double)count), AMP_F32, 4);
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < hw; k++) {
                int64_t e = (i * c + ch) * hw + k;
                double xhat = (test_load(x, dt, e) - mean) * invstd;
                double want = gamma[ch] * invstd / (double)count *
                              ((double)count * test_load(dy, dt, e) - sum_dy - xhat * sum_dy_xhat);
                bad_dx += !near(test_load(dx, dt, e), want, 1.0, dt, dt == AMP_F32 ? 16 : 2);
            }
    }
    CHECK_MSG(bad_stats == 0, "bn %s [%lld,%lld,%lld]: %d stats wrong", amp_dtype_name(dt),
              (long long)n, (long long)c, (long long)hw, bad_stats);
    CHECK_MSG(bad_y == 0, "bn fwd %s: %d wrong", amp_dtype_name(dt), bad_y);
    CHECK_MSG(bad_param == 0, "bn dgamma/dbeta %s: %d wrong", amp_dtype_name(dt), bad_param);
    CHECK_MSG(bad_dx == 0, "bn dx %s: %d wrong", amp_dtype_name(dt), bad_dx);

    /* Eval: normalise with the running stats just updated. */
    CHECK_OK(amp_cpu_bn_fwd_eval(amp_cpu_device(), &d, x, gamma, beta, rm, rv, y));
    int bad_eval = 0;
    for (int64_t e = 0; e < total; e++) {
        int64_t ch = (e / hw) % c;
        double invstd = 1.0 / sqrt((double)rv[ch] + 1e-5);
        double want = gamma[ch] * ((double)test_load(x, dt, e) - rm[ch]) * invstd + beta[ch];
        bad_eval += !near(test_load(y, dt, e), want, 1.0, dt, dt == AMP_F32 ? 8 : 1);
    }
    CHECK_MSG(bad_eval == 0, "bn eval %s: %d wrong", amp_dtype_name(dt), bad_eval);
    free(x), free(dy), free(y), free(dx), free(gamma), free(beta), free(rm), free(rv);
    free(rm0), free(rv0), free(smean), free(sinv), free(dgamma), free(dbeta);
}

/* No affine parameters, no running stats: gamma 1, beta 0; the batch stats are still saved. */
static void test_optional_pointers(void) {
    amp_bn_desc d = {.n = 2, .c = 1, .hw = 2, .eps = 0.0f, .momentum = 0.1f, .dtype = AMP_F32};
    float x[4] = {1, 2, 3, 6}, y[4], m, inv, dx[4], dy[4] = {1, 1, 1, 1};
    CHECK_OK(amp_cpu_bn_fwd_train(amp_cpu_device(), &d, x, NULL, NULL, y, &m, &inv, NULL, NULL));
    CHECK(m == 3.0f && fabsf(inv - 1.0f / sqrtf(3.5f)) < 1e-7f);
    CHECK(fabsf(y[0] + 2.0f / sqrtf(3.5f)) < 1e-6f && fabsf(y[3] - 3.0f / sqrtf(3.5f)) < 1e-6f);
    CHECK_OK(amp_cpu_bn_fwd_train(amp_cpu_device(), &d, x, NULL, NULL, y, NULL, NULL, NULL, NULL));
    /* A constant dy has no gradient through the normalisation. */
    CHECK_OK(amp_cpu_bn_bwd(amp_cpu_device(), &d, x, dy, NULL, NULL, &m, &inv, dx, NULL, NULL));
    CHECK(fabsf(dx[0]) < 1e-6f && fabsf(dx[3]) < 1e-6f);
    CHECK_OK(amp_cpu_bn_bwd(amp_cpu_device(), &d, x, dy, NULL, NULL, &m, &inv, dx, NULL, NULL));
    d.n = 1;
    d.hw = 1;
    CHECK_FAILS(amp_cpu_bn_fwd_train(amp_cpu_device(), &d, x, NULL, NULL, y, &m, &inv, NULL, NULL),
                AMP_ERR_SHAPE, "1 value per channel");
    d.c = 0;
    CHECK_FAILS(amp_cpu_bn_fwd_eval(amp_cpu_device(), &d, x, NULL, NULL, &m, &inv, y),
                AMP_ERR_SHAPE, "c 0");
    d.c = 1;
    d.dtype = AMP_I32;
    CHECK_FAILS(amp_cpu_bn_bwd(amp_cpu_device(), &d, x, dy, NULL, NULL, &m, &inv, dx, NULL, NULL),
                AMP_ERR_DTYPE, "i32");
}

/* Same bits with 1 and 2 threads, past the parallel threshold. */
static void test_thread_determinism(void) {
    amp_bn_desc d = {.n = 8, .c = 6, .hw = 1500, .eps = 1e-5f, .momentum = 0.1f, .dtype = AMP_BF16};
    int64_t total = d.n * d.c * d.hw;
    void *x = test_random_tensor(AMP_BF16, total, -2.0, 2.0);
    void *dy = test_random_tensor(AMP_BF16, total, -1.0, 1.0);
    uint16_t *y[2], *dx[2];
    float stats[2][6 * 6];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        y[t] = malloc((size_t)total * 2);
        dx[t] = malloc((size_t)total * 2);
        float *s = stats[t];
        for (int ch = 0; ch < 6; ch++) s[12 + ch] = 0.0f, s[18 + ch] = 1.0f;
        CHECK_OK(amp_cpu_bn_fwd_train(amp_cpu_device(), &d, x, NULL, NULL, y[t], s, s + 6, s + 12,
                                      s + 18));
        CHECK_OK(amp_cpu_bn_bwd(amp_cpu_device(), &d, x, dy, NULL, NULL, s, s + 6, dx[t], s + 24,
                                s + 30));
    }
    CHECK(memcmp(stats[0], stats[1], sizeof stats[0]) == 0);
    CHECK(memcmp(y[0], y[1], (size_t)total * 2) == 0);
    CHECK(memcmp(dx[0], dx[1], (size_t)total * 2) == 0);
    free(x), free(dy), free(y[0]), free(y[1]), free(dx[0]), free(dx[1]);
}

int main(void) {
    test_rng_seed(0xa4093822299f31d0ull);
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int i = 0; i < 3; i++) {
        test_train_and_backward(dts[i], 4, 3, 25);
        test_train_and_backward(dts[i], 2, 5, 4097); /* a plane past one reduction chunk */
        test_train_and_backward(dts[i], 64, 16, 1);  /* BatchNorm1d on [n, c] */
    }
    test_optional_pointers();
    test_thread_determinism();
    return test_summary("test_cpu_batchnorm");
}
