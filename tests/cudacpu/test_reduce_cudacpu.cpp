/* Runs kernels/cuda/reduce.cu on the CPU under ../shared/cudacpu against plain references written
 * here: sum = alpha * sum(x) and sum_rows (column sums) within the final f32 rounding of a long
 * double sum (plus a cancellation term), for f32/f16/bf16, sizes around the block and past the
 * grid and chunk limits; the same bits on a second run; inf/NaN propagate to the one sum or the
 * one column they are in; rows = 0 gives zeros; guard zones after every output; the CPU backend's
 * argument errors. Run with CUDACPU_SCHEDULE=random:7 and CUDACPU_STREAMS=random as well. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "ops_ref.h"

/* |got - want| within half an f32 ulp of want plus what double rounding may lose to cancellation
 * (2^-45 of the sum of magnitudes: far above a double sum's error, far below an f32 ulp). */
static bool close_to(float got, long double want, long double abs_sum) {
    if (std::isnan((double)want)) return std::isnan(got);
    if (std::isinf((double)want)) return got == (float)want;
    long double err = std::fabs((long double)got - want);
    return err <= std::fabs(want) * 0x1p-24L * 1.0001L + abs_sum * 0x1p-45L + 1e-40L;
}

static void test_sum(void) {
    const int64_t ns[] = {0, 1, 255, 256, 257, 70001, 1024 * 256 + 3001};
    for (amp_dtype dt : float_dts)
        for (int64_t n : ns) {
            dev_buf x = random_buf(dt, n, 100.0, false);
            dev_buf out(4);
            const float alpha = 1.0f / 3.0f;
            float got[2];
            for (int run = 0; run < 2; run++) {
                set_scalar(out, -1.0f);
                CHECK_OK(amp_cuda_sum(amp_cuda_device(), dt, n, x.ptr, alpha, out.dev<float>()));
                CHECK(dev_sync());
                got[run] = get_scalar(out);
            }
            long double ref = 0, abs_sum = 0;
            for (int64_t i = 0; i < n; i++) {
                long double v = nv_load(x.host.data(), dt, i);
                ref += v;
                abs_sum += std::fabs(v);
            }
            ref *= (long double)alpha;
            CHECK_MSG(close_to(got[0], ref, abs_sum * alpha), "sum %s n=%lld: %.9g vs %.12Lg",
                      amp_dtype_name(dt), (long long)n, (double)got[0], ref);
            CHECK(amp_f32_bits(got[0]) == amp_f32_bits(got[1]));
            CHECK(out.guard_intact());
        }
    /* inf and NaN anywhere propagate (+inf + -inf is NaN too). */
    const int64_t n = BIG_N;
    dev_buf x = random_buf(AMP_F32, n, 1.0, false);
    dev_buf out(4);
    const float pois[][2] = {
        {INFINITY, 0.0f}, {-INFINITY, 0.0f}, {NAN, 0.0f}, {INFINITY, -INFINITY}};
    for (const auto &p : pois) {
        float *h = x.h<float>();
        float keep0 = h[0], keep1 = h[n - 1];
        h[0] = p[0];
        if (p[1] != 0.0f) h[n - 1] = p[1];
        x.upload();
        CHECK_OK(amp_cuda_sum(amp_cuda_device(), AMP_F32, n, x.ptr, 2.0f, out.dev<float>()));
        CHECK(dev_sync());
        float got = get_scalar(out);
        bool want_nan = std::isnan(p[0]) || p[1] != 0.0f;
        CHECK_MSG(want_nan ? std::isnan(got) : got == p[0], "sum with %g, %g: %g", (double)p[0],
                  (double)p[1], (double)got);
        h[0] = keep0, h[n - 1] = keep1;
    }
}

static void test_sum_rows(void) {
    const int64_t shapes[][2] = {{0, 5},  {1, 1},    {3, 300},  {17, 10},
                                 {1000, 3}, {513, 257}, {70001, 10}, {40, 5000}};
    for (amp_dtype dt : float_dts)
        for (const auto &s : shapes) {
            int64_t rows = s[0], cols = s[1];
            dev_buf x = random_buf(dt, rows * cols, 10.0, false);
            dev_buf out((size_t)cols * 4), again((size_t)cols * 4);
            for (int64_t j = 0; j < cols; j++) out.h<float>()[j] = -7.0f;
            out.upload();
            CHECK_OK(amp_cuda_sum_rows(amp_cuda_device(), dt, rows, cols, x.ptr, out.dev<float>()));
            CHECK_OK(amp_cuda_sum_rows(amp_cuda_device(), dt, rows, cols, x.ptr,
                                       again.dev<float>()));
            CHECK(dev_sync());
            out.download();
            again.download();
            int64_t bad = 0;
            for (int64_t j = 0; j < cols; j++) {
                long double ref = 0, abs_sum = 0;
                for (int64_t r = 0; r < rows; r++) {
                    long double v = nv_load(x.host.data(), dt, r * cols + j);
                    ref += v;
                    abs_sum += std::fabs(v);
                }
                bad += !close_to(out.h<float>()[j], ref, abs_sum);
            }
            CHECK_MSG(bad == 0, "sum_rows %s [%lld, %lld]: %lld columns wrong", amp_dtype_name(dt),
                      (long long)rows, (long long)cols, (long long)bad);
            CHECK(memcmp(out.host.data(), again.host.data(), (size_t)cols * 4) == 0);
            CHECK(out.guard_intact() && again.guard_intact());
        }
    /* A NaN and an inf stay in their own columns. */
    const int64_t rows = 3000, cols = 33;
    dev_buf x = random_buf(AMP_BF16, rows * cols, 1.0, false);
    nv_store(x.host.data(), AMP_BF16, 2999 * cols + 4, NAN);
    nv_store(x.host.data(), AMP_BF16, 1500 * cols + 32, -INFINITY);
    x.upload();
    dev_buf out(cols * 4);
    CHECK_OK(amp_cuda_sum_rows(amp_cuda_device(), AMP_BF16, rows, cols, x.ptr, out.dev<float>()));
    CHECK(dev_sync());
    out.download();
    int64_t odd = 0;
    for (int64_t j = 0; j < cols; j++) odd += !std::isfinite(out.h<float>()[j]);
    CHECK(odd == 2 && std::isnan(out.h<float>()[4]) && out.h<float>()[32] == -INFINITY);
    CHECK(out.guard_intact());
}

static void test_errors(void) {
    float x[4] = {0}, o[4];
    CHECK_FAILS(amp_cuda_sum(amp_cuda_device(), AMP_I32, 4, x, 1.0f, o), AMP_ERR_DTYPE,
                "amp_cuda_sum: dtype i32 is not a float type");
    CHECK_FAILS(amp_cuda_sum(amp_cuda_device(), AMP_F32, -2, x, 1.0f, o), AMP_ERR_INVALID_ARG,
                "n = -2 < 0");
    CHECK_FAILS(amp_cuda_sum(amp_cuda_device(), AMP_F32, 4, x, 1.0f, nullptr), AMP_ERR_INVALID_ARG,
                "'out' is NULL");
    CHECK_FAILS(amp_cuda_sum(amp_cuda_device(), AMP_F32, 4, nullptr, 1.0f, o), AMP_ERR_INVALID_ARG,
                "'x' is NULL");
    CHECK_FAILS(amp_cuda_sum_rows(amp_cuda_device(), AMP_I32, 2, 2, x, o), AMP_ERR_DTYPE,
                "dtype i32");
    CHECK_FAILS(amp_cuda_sum_rows(amp_cuda_device(), AMP_F32, -1, 2, x, o), AMP_ERR_SHAPE,
                "amp_cuda_sum_rows: shape [-1, 2] has a negative size");
    CHECK_FAILS(amp_cuda_sum_rows(amp_cuda_device(), AMP_F32, 2, 2, nullptr, o),
                AMP_ERR_INVALID_ARG, "'x' is NULL");
    CHECK_OK(amp_cuda_sum_rows(amp_cuda_device(), AMP_F32, 5, 0, nullptr, nullptr));
}

int main(void) {
    test_sum();
    test_sum_rows();
    test_errors();
    return test_summary("test_reduce_cudacpu");
}
