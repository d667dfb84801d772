/* Runs kernels/cuda/loss.cu's MSE on the CPU under ../shared/cudacpu against plain references
 * written here in double (long double for the sums) from the contract in core/backend.h:
 * mse_fwd within an f32 rounding of a long double mean, NaN for n = 0; mse_bwd bit for bit
 * ((a - b) * (2 / n)) * dloss, in place too; guard zones after every output; the argument
 * errors. Cross-entropy's kernels are test_xent_cudacpu.cpp's. Run with
 * CUDACPU_SCHEDULE=random:7 and CUDACPU_STREAMS=random as well. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "ops_ref.h"

static void test_mse(void) {
    const int64_t ns[] = {0, 1, 257, 70001, BIG_N};
    for (amp_dtype dt : float_dts)
        for (int64_t n : ns) {
            dev_buf a = random_buf(dt, n, 4.0, false), b = random_buf(dt, n, 4.0, false);
            dev_buf loss(4), dloss(4), da((size_t)n * amp_dtype_size(dt));
            set_scalar(loss, -1.0f);
            CHECK_OK(amp_cuda_mse_fwd(amp_cuda_device(), dt, n, a.ptr, b.ptr, loss.dev<float>()));
            const float dl = 1.5f;
            set_scalar(dloss, dl);
            CHECK_OK(amp_cuda_mse_bwd(amp_cuda_device(), dt, n, a.ptr, b.ptr, dloss.dev<float>(),
                                      da.ptr));
            CHECK(dev_sync());
            float got = get_scalar(loss);
            da.download();
            long double ref = 0;
            float norm = (float)(2.0 / (double)n);
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float av = nv_load(a.host.data(), dt, i), bv = nv_load(b.host.data(), dt, i);
                long double d = (long double)av - bv;
                ref += d * d;
                volatile float t = (av - bv) * norm;
                bad += !same_f32(nv_load(da.host.data(), dt, i), nv_round(dt, t * dl));
            }
            if (n == 0) {
                CHECK(std::isnan(got));
            } else {
                ref /= n;
                CHECK_MSG(std::fabs(got - ref) <= 0x1p-23L * ref, "mse %s n=%lld: %.9g vs %.12Lg",
                          amp_dtype_name(dt), (long long)n, (double)got, ref);
            }
            CHECK_MSG(bad == 0, "mse_bwd %s n=%lld: %lld wrong", amp_dtype_name(dt), (long long)n,
                      (long long)bad);
            CHECK(loss.guard_intact() && da.guard_intact());
        }
    /* In place (da = a), with a NaN and an inf. */
    const int64_t n = 3001;
    dev_buf a = random_buf(AMP_F32, n, 1.0, true), b = random_buf(AMP_F32, n, 1.0, false);
    std::vector<float> want(n);
    float norm = (float)(2.0 / (double)n);
    for (int64_t i = 0; i < n; i++) {
        volatile float t = (a.h<float>()[i] - b.h<float>()[i]) * norm;
        want[i] = t * 2.0f;
    }
    dev_buf dloss(4), loss(4);
    set_scalar(dloss, 2.0f);
    CHECK_OK(amp_cuda_mse_fwd(amp_cuda_device(), AMP_F32, n, a.ptr, b.ptr, loss.dev<float>()));
    CHECK_OK(amp_cuda_mse_bwd(amp_cuda_device(), AMP_F32, n, a.ptr, b.ptr, dloss.dev<float>(),
                              a.ptr));
    CHECK(dev_sync());
    a.download();
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !same_f32(a.h<float>()[i], want[i]);
    CHECK(bad == 0 && a.guard_intact() && std::isnan(get_scalar(loss)));
}

static void test_errors(void) {
    float x[4] = {0}, o[4];
    CHECK_FAILS(amp_cuda_mse_fwd(amp_cuda_device(), AMP_F32, 2, x, nullptr, o), AMP_ERR_INVALID_ARG,
                "amp_cuda_mse_fwd: argument 'b' is NULL");
    CHECK_FAILS(amp_cuda_mse_bwd(amp_cuda_device(), AMP_F32, -1, x, x, o, o), AMP_ERR_INVALID_ARG,
                "n = -1 < 0");
    CHECK_FAILS(amp_cuda_mse_bwd(amp_cuda_device(), AMP_F16, 2, x, x, o, nullptr),
                AMP_ERR_INVALID_ARG, "'da' is NULL");
}

int main(void) {
    test_mse();
    test_errors();
    return test_summary("test_loss_cudacpu");
}
