/* CPU backend elementwise ops and dropout (elementwise.c, dropout.c) against plain
 * references computed here in double on the widened inputs.
 *
 * f32: add, sub, mul and scale are single IEEE operations, so the double result rounded to f32
 * must be within half an ulp; axpy rounds twice, so it gets 1 ulp of its terms' size. f16/bf16:
 * the result may differ from the exact value by 1 half ulp (f32 then half rounding).
 * NaN and inf must land where IEEE puts them. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/half.h"
#include "core/philox.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/transcendental.h"
#include "test_data.h"
#include "test_util.h"

/* got vs the exact value `want`: equal for NaN/inf, else within `ulps` ulps of the dtype at
 * magnitude `mag` (|want|, or the terms' size where a sum cancels), never below the f16 normal
 * range. */
static int close_to(float got, double want, double mag, amp_dtype dt, double ulps) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    double ulp = dt == AMP_F32 ? 0x1p-23 : dt == AMP_F16 ? 0x1p-10 : 0x1p-7;
    double tol = ulps * ulp * (mag > 0x1p-14 ? mag : 0x1p-14);
    return fabs((double)got - want) <= tol;
}

typedef double (*ref_fn)(double a, double b, double alpha);
static double ref_relu(double a, double b, double al) { return a < 0 ? 0 : a; }
static double ref_scale(double a, double b, double al) { return al * a; }
static double ref_add_scalar(double a, double b, double al) { return a + al; }
static double ref_div_scalar(double a, double b, double al) { return a / al; }
static double ref_add(double a, double b, double al) { return a + b; }
static double ref_sub(double a, double b, double al) { return a - b; }
static double ref_mul(double a, double b, double al) { return a * b; }
static double ref_relu_bwd(double a, double b, double al) { return a <= 0 ? 0 : b; }
static double ref_axpy(double y, double x, double al) { return y + al * x; }

enum { KIND_UNARY, KIND_BINARY, KIND_AXPY };

/* Runs one op on random data (n elements, dt) and compares every element with ref. */
static void check_op(const char *name, int kind, int op, ref_fn ref, amp_dtype dt, int64_t n,
                     double ulps) {
    float alpha = -1.75f;
    void *a = test_random_tensor(dt, n, -4.0, 4.0), *b = test_random_tensor(dt, n, -4.0, 4.0),
         *y = malloc((size_t)n * test_dtype_size(dt));
    if (kind == KIND_AXPY) memcpy(y, b, (size_t)n * test_dtype_size(dt));
    amp_status s = kind == KIND_UNARY    ? amp_cpu_unary(amp_cpu_device(), op, dt, n, a, alpha, y)
                   : kind == KIND_BINARY ? amp_cpu_binary(amp_cpu_device(), op, dt, n, a, b, y)
                                         : amp_cpu_axpy(amp_cpu_device(), dt, n, alpha, a, y);
    CHECK_OK(s);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double want, mag;
        if (kind == KIND_AXPY) {
            want = ref(test_load(b, dt, i), test_load(a, dt, i), alpha);
            mag = fabs(test_load(b, dt, i)) + fabs(alpha * test_load(a, dt, i)); /* two roundings */
        } else {
            want = ref(test_load(a, dt, i), test_load(b, dt, i), alpha);
            mag = fabs(want);
        }
        if (!close_to(test_load(y, dt, i), want, mag, dt, ulps) && bad++ < 3)
            fprintf(stderr, "%s %s [%lld]: got %.9g want %.9g\n", name, amp_dtype_name(dt),
                    (long long)i, (double)test_load(y, dt, i), want);
    }
    CHECK_MSG(bad == 0, "%s %s n=%lld: %lld wrong", name, amp_dtype_name(dt), (long long)n,
              (long long)bad);
    free(a);
    free(b);
    free(y);
}

static void test_ops_random(void) {
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    int64_t ns[] = {1, 1023, 1025, 100003}; /* tile tails and the parallel path */
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 4; k++) {
            amp_dtype dt = dts[d];
            double one = dt == AMP_F32 ? 0.5 : 1.0; /* exact ops: half an ulp in f32 */
            check_op("relu", KIND_UNARY, AMP_UNARY_RELU, ref_relu, dt, ns[k], 0.0);
            check_op("scale", KIND_UNARY, AMP_UNARY_SCALE, ref_scale, dt, ns[k], one);
            check_op("add_scalar", KIND_UNARY, AMP_UNARY_ADD_SCALAR, ref_add_scalar, dt, ns[k], one);
            check_op("div_scalar", KIND_UNARY, AMP_UNARY_DIV_SCALAR, ref_div_scalar, dt, ns[k], one);
            check_op("add", KIND_BINARY, AMP_BINARY_ADD, ref_add, dt, ns[k], one);
            check_op("sub", KIND_BINARY, AMP_BINARY_SUB, ref_sub, dt, ns[k], one);
            check_op("mul", KIND_BINARY, AMP_BINARY_MUL, ref_mul, dt, ns[k], one);
            check_op("relu_bwd", KIND_BINARY, AMP_BINARY_RELU_BWD, ref_relu_bwd, dt, ns[k], 0.0);
            check_op("axpy", KIND_AXPY, 0, ref_axpy, dt, ns[k], 1.0);
        }
}

/* NaN and inf land where IEEE puts them, in every dtype; relu keeps -0 and NaN like torch.relu;
 * relu_bwd lets dy through where the output is NaN (threshold_backward). */
static void test_special_values(void) {
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int d = 0; d < 3; d++) {
        amp_dtype dt = dts[d];
        float a[8] = {NAN, INFINITY, -INFINITY, -0.0f, 2.0f, INFINITY, -3.0f, 0.0f};
        float b[8] = {1.0f, 1.0f, 1.0f, 5.0f, NAN, -INFINITY, INFINITY, 7.0f};
        uint16_t ha[8], hb[8], hy[8];
        float fy[8];
        void *pa = a, *pb = b, *py = fy;
        if (dt != AMP_F32) {
            CHECK_OK(amp_cpu_cast(amp_cpu_device(), ha, dt, a, AMP_F32, 8));
            CHECK_OK(amp_cpu_cast(amp_cpu_device(), hb, dt, b, AMP_F32, 8));
            pa = ha;
            pb = hb;
            py = hy;
        }
        CHECK_OK(amp_cpu_binary(amp_cpu_device(), AMP_BINARY_ADD, dt, 8, pa, pb, py));
        CHECK(isnan(test_load(py, dt, 0)) && test_load(py, dt, 1) == INFINITY &&
              isnan(test_load(py, dt, 4)));
        CHECK(isnan(test_load(py, dt, 5)) && test_load(py, dt, 6) == INFINITY);
        CHECK_OK(amp_cpu_binary(amp_cpu_device(), AMP_BINARY_MUL, dt, 8, pa, pb, py));
        CHECK(isnan(test_load(py, dt, 0)) && test_load(py, dt, 2) == -INFINITY);
        CHECK(test_load(py, dt, 6) == -INFINITY);
        CHECK(signbit(test_load(py, dt, 3)) && test_load(py, dt, 3) == 0.0f);
        CHECK_OK(amp_cpu_unary(amp_cpu_device(), AMP_UNARY_RELU, dt, 8, pa, 0.0f, py));
        CHECK(isnan(test_load(py, dt, 0)) && test_load(py, dt, 1) == INFINITY &&
              test_load(py, dt, 2) == 0.0f);
        CHECK(signbit(test_load(py, dt, 3)) && !signbit(test_load(py, dt, 6)) &&
              test_load(py, dt, 6) == 0.0f);
        CHECK_OK(amp_cpu_binary(amp_cpu_device(), AMP_BINARY_RELU_BWD, dt, 8, pa, pb, py));
        CHECK(test_load(py, dt, 0) == 1.0f && test_load(py, dt, 1) == 1.0f &&
              test_load(py, dt, 2) == 0.0f);
        CHECK(test_load(py, dt, 3) == 0.0f && isnan(test_load(py, dt, 4)) &&
              test_load(py, dt, 6) == 0.0f);
        CHECK_OK(amp_cpu_unary(amp_cpu_device(), AMP_UNARY_SCALE, dt, 8, pb, 0.0f, py));
        CHECK(test_load(py, dt, 0) == 0.0f && isnan(test_load(py, dt, 4)) &&
              isnan(test_load(py, dt, 5)));
        CHECK_OK(amp_cpu_axpy(amp_cpu_device(), dt, 8, 2.0f, pb, pa)); /* a += 2 b */
        CHECK(isnan(test_load(pa, dt, 0)) && isnan(test_load(pa, dt, 5)) &&
              test_load(pa, dt, 6) == INFINITY);
        CHECK(test_load(pa, dt, 7) == 14.0f);
    }
    /* Copy keeps every bit, NaN payloads included, in any dtype. */
    uint16_t src[3] = {0x7c01, 0xfe12, 0x3c00}, dst[3];
    CHECK_OK(amp_cpu_unary(amp_cpu_device(), AMP_UNARY_COPY, AMP_F16, 3, src, 0.0f, dst));
    CHECK(memcmp(src, dst, sizeof src) == 0);
    int32_t isrc[2] = {-7, 9}, idst[2];
    CHECK_OK(amp_cpu_unary(amp_cpu_device(), AMP_UNARY_COPY, AMP_I32, 2, isrc, 0.0f, idst));
    CHECK(idst[0] == -7 && idst[1] == 9);
}

static void test_in_place_and_errors(void) {
    enum { N = 5000 };
    static uint16_t h[N], ref[N];
    for (int i = 0; i < N; i++) h[i] = amp_f32_to_bf16_bits((float)(i % 17) - 8.0f);
    for (int i = 0; i < N; i++)
        ref[i] = amp_f32_to_bf16_bits(fmaxf(amp_bf16_bits_to_f32(h[i]), 0.0f));
    CHECK_OK(amp_cpu_unary(amp_cpu_device(), AMP_UNARY_RELU, AMP_BF16, N, h, 0.0f, h));
    CHECK(memcmp(h, ref, sizeof h) == 0);
    float f[4] = {1, 2, 3, 4};
    CHECK_OK(amp_cpu_binary(amp_cpu_device(), AMP_BINARY_MUL, AMP_F32, 4, f, f, f));
    CHECK(f[0] == 1 && f[3] == 16);
    int32_t k[4] = {0};
    CHECK_FAILS(amp_cpu_binary(amp_cpu_device(), AMP_BINARY_ADD, AMP_I32, 4, k, k, k),
                AMP_ERR_DTYPE, "i32");
    CHECK_FAILS(amp_cpu_unary(amp_cpu_device(), AMP_UNARY_RELU, AMP_I32, 4, k, 0.0f, k),
                AMP_ERR_DTYPE, "i32");
    CHECK_FAILS(amp_cpu_binary(amp_cpu_device(), (amp_binary_op)42, AMP_F32, 4, f, f, f),
                AMP_ERR_INVALID_ARG, "op 42");
    CHECK_FAILS(amp_cpu_unary(amp_cpu_device(), AMP_UNARY_RELU, AMP_F32, 4, NULL, 0.0f, f),
                AMP_ERR_INVALID_ARG, "'x'");
    CHECK_FAILS(amp_cpu_axpy(amp_cpu_device(), AMP_F32, -1, 1.0f, f, f), AMP_ERR_INVALID_ARG,
                "n = -1");
    CHECK_OK(amp_cpu_axpy(amp_cpu_device(), AMP_F32, 0, 1.0f, NULL, NULL));
}

/* ---- dropout -------------------------------------------------------------------------------- */

static void test_dropout(void) {
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *y2 = malloc(N * sizeof *y2);
    uint8_t *m = malloc(N), *m2 = malloc(N);
    for (int i = 0; i < N; i++) x[i] = (float)(test_uniform() * 2.0 - 1.0);
    const float p = 0.3f, scale = (float)(1.0 / (1.0 - 0.3f));
    omp_set_num_threads(1);
    CHECK_OK(amp_cpu_dropout_fwd(amp_cpu_device(), AMP_F32, N, x, p, 1234, 77, y, m));
    int64_t kept = 0, bad = 0;
    for (int i = 0; i < N; i++) {
        int keep = amp_philox_uniform(1234, 77 + (uint64_t)i) >= p; /* the contract's rule */
        kept += m[i];
        bad += m[i] != keep || y[i] != (keep ? x[i] * scale : 0.0f);
    }
    CHECK_MSG(bad == 0, "dropout: %lld elements disagree with the philox rule", (long long)bad);
    double frac = (double)kept / N; /* binomial sd = sqrt(.21 / 2^20) = 4.5e-4 */
    CHECK_MSG(fabs(frac - 0.7) < 0.003, "kept fraction %.5f, want 0.7", frac);
    /* Same (seed, offset): same mask, whatever the thread count; shifted offset: shifted mask. */
    omp_set_num_threads(2);
    CHECK_OK(amp_cpu_dropout_fwd(amp_cpu_device(), AMP_F32, N, x, p, 1234, 77, y2, m2));
    CHECK(memcmp(m, m2, N) == 0 && memcmp(y, y2, N * sizeof *y) == 0);
    CHECK_OK(amp_cpu_dropout_fwd(amp_cpu_device(), AMP_F32, N - 5, x + 5, p, 1234, 82, y2, m2));
    CHECK(memcmp(m + 5, m2, N - 5) == 0);
    CHECK_OK(amp_cpu_dropout_fwd(amp_cpu_device(), AMP_F32, N, x, p, 1235, 77, y2, m2));
    int64_t same = 0;
    for (int i = 0; i < N; i++) same += m[i] == m2[i];
    CHECK_MSG(fabs((double)same / N - 0.58) < 0.01, "another seed agrees on %lld", (long long)same);
    /* Backward: dx = dy * mask * scale. */
    CHECK_OK(amp_cpu_dropout_bwd(amp_cpu_device(), AMP_F32, N, x, m, p, y2));
    bad = 0;
    for (int i = 0; i < N; i++) bad += y2[i] != (m[i] ? x[i] * scale : 0.0f);
    CHECK(bad == 0);
    /* bf16 storage: the f32 result rounded once. */
    uint16_t *hx = malloc(N * 2), *hy = malloc(N * 2);
    CHECK_OK(amp_cpu_cast(amp_cpu_device(), hx, AMP_BF16, x, AMP_F32, N));
    CHECK_OK(amp_cpu_dropout_fwd(amp_cpu_device(), AMP_BF16, N, hx, p, 1234, 77, hy, m2));
    CHECK(memcmp(m, m2, N) == 0);
    bad = 0;
    for (int i = 0; i < N; i++) {
        float want = m[i] ? amp_bf16_bits_to_f32(hx[i]) * scale : 0.0f;
        bad += amp_bf16_bits_to_f32(hy[i]) != amp_bf16_bits_to_f32(amp_f32_to_bf16_bits(want));
    }
    CHECK(bad == 0);
    /* p = 0 copies; a dropped NaN stays NaN (x * 0 * scale, as PyTorch). */
    CHECK_OK(amp_cpu_dropout_fwd(amp_cpu_device(), AMP_BF16, N, hx, 0.0f, 1, 0, hy, m2));
    CHECK(memcmp(hx, hy, N * 2) == 0 && m2[0] == 1 && m2[N - 1] == 1);
    float nx[64], ny[64];
    uint8_t nm[64];
    for (int i = 0; i < 64; i++) nx[i] = NAN;
    CHECK_OK(amp_cpu_dropout_fwd(amp_cpu_device(), AMP_F32, 64, nx, 0.5f, 9, 0, ny, nm));
    int nan_out = 0, dropped = 0;
    for (int i = 0; i < 64; i++) nan_out += isnan(ny[i]), dropped += !nm[i];
    CHECK(nan_out == 64 && dropped > 0);
    CHECK_FAILS(amp_cpu_dropout_fwd(amp_cpu_device(), AMP_F32, 4, x, 1.0f, 1, 0, y, m),
                AMP_ERR_INVALID_ARG, "p = 1");
    CHECK_FAILS(amp_cpu_dropout_fwd(amp_cpu_device(), AMP_F32, 4, x, -0.1f, 1, 0, y, m),
                AMP_ERR_INVALID_ARG, "p = -0.1");
    CHECK_FAILS(amp_cpu_dropout_bwd(amp_cpu_device(), AMP_F32, 4, x, m, NAN, y),
                AMP_ERR_INVALID_ARG, "p = nan");
    free(x);
    free(y);
    free(y2);
    free(m);
    free(m2);
    free(hx);
    free(hy);
}

/* GELU tanh's backward runs in vector loops (amp_tanhf's three ranges as selects): the bits of
 * the scalar amp_gelu_tanh_bwd, which the CUDA backend runs, over one f32 in every 1024 of the
 * whole range (every exponent, both signs, NaN and infinities among them), each with its own dy,
 * in tiles with a NaN and without. */
static void test_gelu_tanh_bwd_bits(void) {
    const int64_t n = (int64_t)1 << 22;
    float *x = malloc((size_t)n * sizeof *x), *dy = malloc((size_t)n * sizeof *dy),
          *y = malloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++) {
        x[i] = amp_f32_from_bits((uint32_t)(i * 1024 + (i % 1021)));
        dy[i] = (float)(4.0 * test_uniform() - 2.0);
    }
    /* the NaNs sit in the top of the range: move one in every 64 tiles' worth away from them */
    for (int64_t i = 0; i < n / 2; i += 64 * 1024 + 7) x[i] = NAN;
    CHECK_OK(amp_cpu_binary(amp_cpu_device(), AMP_BINARY_GELU_TANH_BWD, AMP_F32, n, x, dy, y));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = amp_gelu_tanh_bwd(x[i], dy[i]);
        bool same = amp_f32_bits(want) == amp_f32_bits(y[i]) || (isnan(want) && isnan(y[i]));
        if (!same && bad++ < 3)
            fprintf(stderr, "gelu_tanh_bwd(%a, %a): got %a, the scalar function %a\n", (double)x[i],
                    (double)dy[i], (double)y[i], (double)want);
    }
    CHECK_MSG(bad == 0, "gelu_tanh_bwd: %lld of %lld differ from the scalar bits", (long long)bad,
              (long long)n);
    free(x);
    free(dy);
    free(y);
}

int main(void) {
    test_rng_seed(0x243f6a8885a308d3ull);
    test_ops_random();
    test_gelu_tanh_bwd_bits();
    test_special_values();
    test_in_place_and_errors();
    test_dropout();
    return test_summary("test_cpu_elementwise");
}
