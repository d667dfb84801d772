/* CPU backend's loss-scaler passes (unscale.c, unscale_multi.c): unscale, nonfinite and
 * sum_squares against plain references written here, for f32, f16 and bf16 gradients; nonfinite
 * and sum_squares on one buffer as one-tensor lists (tests/one_tensor.h: the library checks and
 * sums lists only).
 *
 * unscale: every output equals the reference product (float)g * inv_scale bit for bit (g itself
 * when inv_scale is 1), and the flag follows torch's rule: set exactly when an INPUT is inf or
 * NaN (a finite input whose product overflows does not set it), never cleared, never written on
 * a clean tensor. One inf/NaN at the start, the middle (a chunk boundary) and the end of a large
 * tensor, so every thread's part is covered; f32 in place; 1 and 2 threads give the same bits;
 * a guard after each output stays untouched; argument errors.
 * nonfinite: the same flag without writing anything: every special pattern of each dtype (inf,
 * NaN, the largest finite, subnormals) placed at the start, a chunk boundary and the end.
 * sum_squares: against a long double reference (only the final f32 rounding is allowed), inf and
 * NaN propagate, and the bits do not depend on the thread count. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "one_tensor.h"
#include "test_data.h"
#include "test_util.h"

#define GUARD 16 /* floats after each output */
#define GUARD_BITS 0x5a5a5a5au

/* Scaled gradients: magnitudes over many binades, as a scaled backward gives. */
static void *random_grads(amp_dtype dt, int64_t n, double max_abs) {
    void *p = malloc((size_t)n * test_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        double m = max_abs * exp2(-20.0 * test_uniform());
        test_store(p, dt, i, (float)(test_uniform() < 0.5 ? -m : m));
    }
    return p;
}

static float *out_with_guard(int64_t n) {
    float *o = malloc(((size_t)n + GUARD) * sizeof *o);
    for (int64_t i = 0; i < n + GUARD; i++) memcpy(o + i, &(uint32_t){GUARD_BITS}, 4);
    return o;
}

static int guard_intact(const float *o, int64_t n) {
    for (int i = 0; i < GUARD; i++)
        if (amp_f32_bits(o[n + i]) != GUARD_BITS) return 0;
    return 1;
}

/* Counts outputs that differ from the plain reference; returns whether an input was non-finite. */
static int64_t count_wrong(const void *g, amp_dtype dt, int64_t n, float inv, const float *out,
                           int *any_nonfinite) {
    int64_t bad = 0;
    *any_nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        float x = test_load(g, dt, i);
        float want = inv == 1.0f ? x : x * inv;
        *any_nonfinite |= isinf(x) || isnan(x);
        bool same = amp_f32_bits(out[i]) == amp_f32_bits(want) || (isnan(out[i]) && isnan(want));
        bad += !same;
    }
    return bad;
}

static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};

static void test_unscale_values(void) {
    const int64_t ns[] = {1, 7, 4096, 4097, 70001, 1000003};
    const float invs[] = {1.0f / 65536.0f, 1.0f, (float)(1.0 / 3000.0), 0x1p-24f};
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 6; k++) {
            amp_dtype dt = dts[d];
            int64_t n = ns[k];
            void *g = random_grads(dt, n, dt == AMP_F16 ? 60000.0 : 1e6);
            for (int j = 0; j < 4; j++) {
                float *out = out_with_guard(n), found = 0.0f;
                CHECK_OK(amp_cpu_unscale(amp_cpu_device(), dt, n, g, invs[j], out, &found));
                int nonfinite;
                int64_t bad = count_wrong(g, dt, n, invs[j], out, &nonfinite);
                CHECK_MSG(bad == 0 && !nonfinite, "unscale %s n=%lld inv=%g: %lld wrong",
                          amp_dtype_name(dt), (long long)n, (double)invs[j], (long long)bad);
                CHECK_MSG(amp_f32_bits(found) == 0, "clean %s n=%lld: found_inf = %g",
                          amp_dtype_name(dt), (long long)n, (double)found);
                CHECK(guard_intact(out, n));
                free(out);
            }
            free(g);
        }
}

/* One inf or NaN at the start, in the middle and at the end of a large tensor. */
static void test_unscale_flags(void) {
    const int64_t n = 300001; /* > AMP_CPU_PARALLEL_MIN: several threads, many chunks */
    const int64_t where[] = {0, n / 2, 4096 * 37, n - 1};
    const float poison[] = {INFINITY, -INFINITY, NAN};
    for (int d = 0; d < 3; d++) {
        amp_dtype dt = dts[d];
        void *g = random_grads(dt, n, 1000.0);
        for (int w = 0; w < 4; w++)
            for (int p = 0; p < 3; p++) {
                float keep = test_load(g, dt, where[w]);
                test_store(g, dt, where[w], poison[p]);
                float *out = out_with_guard(n), found = 0.0f;
                CHECK_OK(amp_cpu_unscale(amp_cpu_device(), dt, n, g, 0.25f, out, &found));
                int nonfinite;
                int64_t bad = count_wrong(g, dt, n, 0.25f, out, &nonfinite);
                CHECK_MSG(found == 1.0f && nonfinite && bad == 0,
                          "%s poison %g at %lld: found_inf %g, %lld outputs wrong",
                          amp_dtype_name(dt), (double)poison[p], (long long)where[w],
                          (double)found, (long long)bad);
                /* Never cleared: a later clean tensor leaves the flag at 1. */
                test_store(g, dt, where[w], keep);
                CHECK_OK(amp_cpu_unscale(amp_cpu_device(), dt, n, g, 0.25f, out, &found));
                CHECK(found == 1.0f);
                CHECK(guard_intact(out, n));
                free(out);
            }
        free(g);
    }
    /* A clean tensor does not write the flag at all (any value stays). */
    float g[3] = {1.0f, 2.0f, 3.0f}, out[3], found = 7.5f;
    CHECK_OK(amp_cpu_unscale(amp_cpu_device(), AMP_F32, 3, g, 0.5f, out, &found));
    CHECK(found == 7.5f);
    /* torch's rule: the input is tested, not the product. A finite input that overflows when
     * multiplied (scale < 1) is not flagged; an inf input is flagged even with inv_scale 1. */
    float big[2] = {3e38f, -3e38f};
    found = 0.0f;
    CHECK_OK(amp_cpu_unscale(amp_cpu_device(), AMP_F32, 2, big, 4.0f, out, &found));
    CHECK(found == 0.0f && isinf(out[0]) && out[0] > 0 && isinf(out[1]) && out[1] < 0);
    float inf1[2] = {INFINITY, 1.0f};
    CHECK_OK(amp_cpu_unscale(amp_cpu_device(), AMP_F32, 2, inf1, 1.0f, out, &found));
    CHECK(found == 1.0f && isinf(out[0]) && out[1] == 1.0f);
    /* f16: the largest finite half is finite; its inf is not. */
    uint16_t h[2] = {0x7bff, 0xfbff};
    found = 0.0f;
    CHECK_OK(amp_cpu_unscale(amp_cpu_device(), AMP_F16, 2, h, 1.0f, out, &found));
    CHECK(found == 0.0f && out[0] == 65504.0f && out[1] == -65504.0f);
    h[1] = 0xfc00;
    CHECK_OK(amp_cpu_unscale(amp_cpu_device(), AMP_F16, 2, h, 1.0f, out, &found));
    CHECK(found == 1.0f);
}

static void test_unscale_in_place(void) {
    const int64_t n = 100003;
    float *g = random_grads(AMP_F32, n, 5e4);
    float *copy = malloc((size_t)n * sizeof *copy);
    memcpy(copy, g, (size_t)n * sizeof *copy);
    g[777] = NAN;
    copy[777] = NAN;
    float found = 0.0f;
    CHECK_OK(amp_cpu_unscale(amp_cpu_device(), AMP_F32, n, g, 1.0f / 1024.0f, g, &found));
    int nonfinite;
    CHECK(count_wrong(copy, AMP_F32, n, 1.0f / 1024.0f, g, &nonfinite) == 0 && found == 1.0f);
    /* Partial overlap, or any overlap with a half gradient, is refused. */
    CHECK_FAILS(amp_cpu_unscale(amp_cpu_device(), AMP_F32, 100, g, 0.5f, g + 1, &found),
                AMP_ERR_INVALID_ARG, "out overlaps grad (f32)");
    CHECK_FAILS(amp_cpu_unscale(amp_cpu_device(), AMP_F16, 100, g, 0.5f, g, &found),
                AMP_ERR_INVALID_ARG, "out overlaps grad (f16)");
    free(g);
    free(copy);
}

static void test_unscale_threads(void) {
    const int64_t n = 500000;
    for (int d = 0; d < 3; d++) {
        amp_dtype dt = dts[d];
        void *g = random_grads(dt, n, 3e4);
        float *o1 = malloc((size_t)n * 4), *o2 = malloc((size_t)n * 4), f1 = 0, f2 = 0;
        omp_set_num_threads(1);
        CHECK_OK(amp_cpu_unscale(amp_cpu_device(), dt, n, g, 1.0f / 8192.0f, o1, &f1));
        omp_set_num_threads(2);
        CHECK_OK(amp_cpu_unscale(amp_cpu_device(), dt, n, g, 1.0f / 8192.0f, o2, &f2));
        CHECK(memcmp(o1, o2, (size_t)n * 4) == 0 && f1 == 0.0f && f2 == 0.0f);
        free(g);
        free(o1);
        free(o2);
    }
}

static void test_unscale_errors(void) {
    float g[4] = {0}, out[4], found = 0.0f;
    CHECK_FAILS(amp_cpu_unscale(amp_cpu_device(), AMP_I32, 4, g, 1.0f, out, &found), AMP_ERR_DTYPE,
                "amp_cpu_unscale: gradient dtype i32");
    CHECK_FAILS(amp_cpu_unscale(amp_cpu_device(), AMP_F32, -1, g, 1.0f, out, &found),
                AMP_ERR_INVALID_ARG, "n = -1");
    CHECK_FAILS(amp_cpu_unscale(amp_cpu_device(), AMP_F32, 4, g, 0.0f, out, &found),
                AMP_ERR_INVALID_ARG, "inv_scale = 0, want a finite value > 0");
    CHECK_FAILS(amp_cpu_unscale(amp_cpu_device(), AMP_F32, 4, g, INFINITY, out, &found),
                AMP_ERR_INVALID_ARG, "inv_scale = inf");
    CHECK_FAILS(amp_cpu_unscale(amp_cpu_device(), AMP_F32, 4, g, NAN, out, &found),
                AMP_ERR_INVALID_ARG, "inv_scale = nan");
    CHECK_FAILS(amp_cpu_unscale(amp_cpu_device(), AMP_F32, 4, NULL, 1.0f, out, &found),
                AMP_ERR_INVALID_ARG, "'grad'");
    CHECK_FAILS(amp_cpu_unscale(amp_cpu_device(), AMP_F32, 4, g, 1.0f, NULL, &found),
                AMP_ERR_INVALID_ARG, "'out'");
    CHECK_FAILS(amp_cpu_unscale(amp_cpu_device(), AMP_F32, 4, g, 1.0f, out, NULL),
                AMP_ERR_INVALID_ARG, "'found_inf'");
    CHECK_OK(amp_cpu_unscale(amp_cpu_device(), AMP_F16, 0, NULL, 1.0f, NULL, &found));
    /* Through the table. */
    const amp_backend *cpu = amp_backend_cpu();
    CHECK(cpu->k.unscale == amp_cpu_unscale);
}

static void test_sum_squares(void) {
    const int64_t ns[] = {0, 1, 9, 4095, 4097, 300001, 2000003};
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 7; k++) {
            amp_dtype dt = dts[d];
            int64_t n = ns[k];
            void *x = random_grads(dt, n, 100.0);
            long double ref = 0;
            for (int64_t i = 0; i < n; i++) {
                long double v = test_load(x, dt, i);
                ref += v * v;
            }
            float got = -1.0f;
            CHECK_OK(one_tensor_sum_squares(dt, n, x, &got));
            /* Exact squares summed in double: only the final rounding to f32 is left. */
            double want = (double)ref;
            CHECK_MSG(fabs(got - want) <= 0x1p-24 * want * 1.0001 + 1e-37,
                      "sum_squares %s n=%lld: %.9g vs %.12g", amp_dtype_name(dt), (long long)n,
                      (double)got, want);
            float t1, t2;
            omp_set_num_threads(1);
            CHECK_OK(one_tensor_sum_squares(dt, n, x, &t1));
            omp_set_num_threads(2);
            CHECK_OK(one_tensor_sum_squares(dt, n, x, &t2));
            CHECK(amp_f32_bits(t1) == amp_f32_bits(t2) && amp_f32_bits(t1) == amp_f32_bits(got));
            free(x);
        }
    float v[4] = {1.0f, -INFINITY, 2.0f, 0.0f}, out;
    CHECK_OK(one_tensor_sum_squares(AMP_F32, 4, v, &out));
    CHECK(isinf(out) && out > 0);
    v[2] = NAN;
    CHECK_OK(one_tensor_sum_squares(AMP_F32, 4, v, &out));
    CHECK(isnan(out));
    /* Squares in the f32 subnormal range are kept (formed in double, rounded once). */
    float tiny[3] = {0x1p-70f, 0x1p-70f, 0x1p-75f};
    CHECK_OK(one_tensor_sum_squares(AMP_F32, 3, tiny, &out));
    CHECK(out == 0x1p-139f);
    CHECK_FAILS(one_tensor_sum_squares(AMP_I32, 2, v, &out), AMP_ERR_DTYPE, "dtype i32");
    CHECK_FAILS(one_tensor_sum_squares(AMP_F32, -2, v, &out), AMP_ERR_INVALID_ARG,
                "tensor 0 has numel -2");
    CHECK_FAILS(one_tensor_sum_squares(AMP_F32, 2, v, NULL), AMP_ERR_INVALID_ARG, "'out'");
}

/* A 3-chunk tensor with one special value at position `at`: flag exactly for inf/NaN. */
static void test_nonfinite(void) {
    const int64_t n = 3 * 4096 + 17;
    const int64_t where[] = {0, 4096, n - 1};
    const float specials[] = {INFINITY, -INFINITY, NAN, 65504.0f, 3.0e38f, 1e-40f, -0.0f};
    for (int d = 0; d < 3; d++) {
        amp_dtype dt = dts[d];
        void *g = random_grads(dt, n, dt == AMP_F16 ? 60000.0 : 1e30);
        for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++)
            for (int w = 0; w < 3; w++) {
                float keep = test_load(g, dt, where[w]);
                test_store(g, dt, where[w], specials[k]);
                float stored = test_load(g, dt, where[w]); /* e.g. 3e38 is inf in f16 */
                float found = 0.0f;
                CHECK_OK(one_tensor_nonfinite(dt, n, g, &found));
                bool want = !isfinite(stored);
                CHECK_MSG((found == 1.0f) == want && (found == 0.0f || found == 1.0f),
                          "nonfinite %s: %g at %lld: flag %g", amp_dtype_name(dt),
                          (double)stored, (long long)where[w], (double)found);
                found = 1.0f; /* never cleared */
                test_store(g, dt, where[w], keep);
                CHECK_OK(one_tensor_nonfinite(dt, n, g, &found));
                CHECK(found == 1.0f);
            }
        free(g);
    }
    float x = 0.0f, found = 0.0f;
    CHECK_FAILS(one_tensor_nonfinite(AMP_I32, 1, &x, &found), AMP_ERR_DTYPE, "dtype i32");
    CHECK_FAILS(one_tensor_nonfinite(AMP_F32, -1, &x, &found), AMP_ERR_INVALID_ARG,
                "tensor 0 has numel -1");
    CHECK_FAILS(one_tensor_nonfinite(AMP_F32, 1, NULL, &found), AMP_ERR_INVALID_ARG,
                "x[0] is NULL");
    CHECK_FAILS(one_tensor_nonfinite(AMP_F32, 1, &x, NULL), AMP_ERR_INVALID_ARG, "'found_inf'");
    CHECK_OK(one_tensor_nonfinite(AMP_F16, 0, NULL, &found));
}

int main(void) {
    test_nonfinite();
    test_rng_seed(0x2545f4914f6cdd1dull);
    test_unscale_values();
    test_unscale_flags();
    test_unscale_in_place();
    test_unscale_threads();
    test_unscale_errors();
    test_sum_squares();
    return test_summary("test_unscale");
}
