/* Runs kernels/cuda/elementwise.cu on the CPU under ../shared/cudacpu against plain references
 * written here from the contract (core/backend.h) with NVIDIA's own f16/bf16 conversions: every
 * output bit for bit (NaN as NaN), for f32/f16/bf16, sizes below, at and past the grid cap, with
 * NaN, +-inf, +-0 and a subnormal at the start, middle and end; in place; copy keeps bits in any
 * dtype; guard zones after every output; the CPU backend's argument errors. Run with
 * CUDACPU_SCHEDULE=random:7 and CUDACPU_STREAMS=random as well. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "ops_ref.h"

static float ref_unary(amp_unary_op op, float x, float alpha) {
    if (op == AMP_UNARY_RELU) return std::isnan(x) ? x : (x < 0.0f ? 0.0f : x); /* -0 stays */
    if (op == AMP_UNARY_ADD_SCALAR) return x + alpha;
    if (op == AMP_UNARY_DIV_SCALAR) return x / alpha;
    return alpha * x;
}

static float ref_binary(amp_binary_op op, float a, float b) {
    switch (op) {
    case AMP_BINARY_ADD: return a + b;
    case AMP_BINARY_SUB: return a - b;
    case AMP_BINARY_MUL: return a * b;
    default: return (a <= 0.0f) ? 0.0f : b; /* threshold_backward: a NaN output lets dy through */
    }
}

/* Outputs of y (dtype dt) that differ from want[] rounded to dt. */
static int64_t count_wrong(const dev_buf &y, amp_dtype dt, int64_t n,
                           const std::vector<float> &want) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !same_f32(nv_load(y.host.data(), dt, i), nv_round(dt, want[i]));
    return bad;
}

static const int64_t sizes[] = {1, 255, 1000, BIG_N};

static void test_unary(void) {
    const amp_unary_op ops[] = {AMP_UNARY_RELU, AMP_UNARY_SCALE, AMP_UNARY_ADD_SCALAR,
                                AMP_UNARY_DIV_SCALAR};
    for (amp_dtype dt : float_dts)
        for (int64_t n : sizes)
            for (amp_unary_op op : ops) {
                float alpha = -0.3f;
                dev_buf x = random_buf(dt, n, 100.0, true);
                dev_buf y((size_t)n * amp_dtype_size(dt));
                CHECK_OK(amp_cuda_unary(amp_cuda_device(), op, dt, n, x.ptr, alpha, y.ptr));
                CHECK(dev_sync());
                y.download();
                std::vector<float> want(n);
                for (int64_t i = 0; i < n; i++)
                    want[i] = ref_unary(op, nv_load(x.host.data(), dt, i), alpha);
                int64_t bad = count_wrong(y, dt, n, want);
                CHECK_MSG(bad == 0, "unary %d %s n=%lld: %lld wrong", (int)op, amp_dtype_name(dt),
                          (long long)n, (long long)bad);
                CHECK(y.guard_intact());
            }
}

static void test_binary_axpy(void) {
    const amp_binary_op ops[] = {AMP_BINARY_ADD, AMP_BINARY_SUB, AMP_BINARY_MUL,
                                 AMP_BINARY_RELU_BWD};
    for (amp_dtype dt : float_dts)
        for (int64_t n : sizes) {
            dev_buf a = random_buf(dt, n, 50.0, true);
            dev_buf b = random_buf(dt, n, 50.0, false);
            for (amp_binary_op op : ops) {
                dev_buf y((size_t)n * amp_dtype_size(dt));
                CHECK_OK(amp_cuda_binary(amp_cuda_device(), op, dt, n, a.ptr, b.ptr, y.ptr));
                CHECK(dev_sync());
                y.download();
                std::vector<float> want(n);
                for (int64_t i = 0; i < n; i++)
                    want[i] = ref_binary(op, nv_load(a.host.data(), dt, i),
                                         nv_load(b.host.data(), dt, i));
                int64_t bad = count_wrong(y, dt, n, want);
                CHECK_MSG(bad == 0, "binary %d %s n=%lld: %lld wrong", (int)op,
                          amp_dtype_name(dt), (long long)n, (long long)bad);
                CHECK(y.guard_intact());
            }
            /* axpy into a copy of b: y = b + alpha * a, the product rounded first. */
            const float alpha = 0.7f;
            dev_buf y((size_t)n * amp_dtype_size(dt));
            y.upload(b.host.data());
            CHECK_OK(amp_cuda_axpy(amp_cuda_device(), dt, n, alpha, a.ptr, y.ptr));
            CHECK(dev_sync());
            y.download();
            std::vector<float> want(n);
            for (int64_t i = 0; i < n; i++) {
                volatile float prod = alpha * nv_load(a.host.data(), dt, i);
                want[i] = nv_load(b.host.data(), dt, i) + prod;
            }
            int64_t bad = count_wrong(y, dt, n, want);
            CHECK_MSG(bad == 0, "axpy %s n=%lld: %lld wrong", amp_dtype_name(dt), (long long)n,
                      (long long)bad);
            CHECK(y.guard_intact());
        }
}

/* y may be x (unary), a (binary): the same thread reads then writes. Copy keeps every bit. */
static void test_in_place_and_copy(void) {
    const int64_t n = 70001;
    for (amp_dtype dt : float_dts) {
        dev_buf x = random_buf(dt, n, 10.0, true);
        std::vector<float> want(n);
        for (int64_t i = 0; i < n; i++)
            want[i] = ref_unary(AMP_UNARY_RELU, nv_load(x.host.data(), dt, i), 0);
        CHECK_OK(amp_cuda_unary(amp_cuda_device(), AMP_UNARY_RELU, dt, n, x.ptr, 0.0f, x.ptr));
        CHECK(dev_sync());
        x.download();
        CHECK(count_wrong(x, dt, n, want) == 0 && x.guard_intact());
        dev_buf b = random_buf(dt, n, 10.0, false);
        for (int64_t i = 0; i < n; i++)
            want[i] = nv_load(x.host.data(), dt, i) * nv_load(b.host.data(), dt, i);
        CHECK_OK(amp_cuda_binary(amp_cuda_device(), AMP_BINARY_MUL, dt, n, x.ptr, b.ptr, x.ptr));
        CHECK(dev_sync());
        x.download();
        CHECK(count_wrong(x, dt, n, want) == 0 && x.guard_intact());
    }
    /* copy: NaN payloads and i32 bits unchanged. */
    const int64_t m = 3001;
    dev_buf src(m * 4), dst(m * 4);
    uint32_t *s = src.h<uint32_t>();
    for (int64_t i = 0; i < m; i++) s[i] = (uint32_t)(rnd_uniform() * 4294967296.0);
    s[0] = 0x7fc01234u, s[m - 1] = 0xffa00001u; /* NaNs with payloads */
    src.upload();
    for (amp_dtype dt : {AMP_F32, AMP_I32}) {
        CHECK_OK(amp_cuda_unary(amp_cuda_device(), AMP_UNARY_COPY, dt, m, src.ptr, 0.0f, dst.ptr));
        CHECK(dev_sync());
        dst.download();
        CHECK(memcmp(dst.host.data(), src.host.data(), m * 4) == 0 && dst.guard_intact());
    }
    dev_buf half_dst(m * 2);
    CHECK_OK(amp_cuda_unary(amp_cuda_device(), AMP_UNARY_COPY, AMP_BF16, m, src.ptr, 0.0f,
                            half_dst.ptr));
    CHECK(dev_sync());
    half_dst.download();
    CHECK(memcmp(half_dst.host.data(), src.host.data(), m * 2) == 0 && half_dst.guard_intact());
}

static void test_errors(void) {
    float x[4] = {0}, y[4];
    CHECK_FAILS(amp_cuda_unary(amp_cuda_device(), (amp_unary_op)(AMP_UNARY_LAST + 1), AMP_F32, 4,
                               x, 1.0f, y),
                AMP_ERR_INVALID_ARG, "amp_cuda_unary: unknown op");
    CHECK_FAILS(amp_cuda_unary(amp_cuda_device(), AMP_UNARY_RELU, AMP_I32, 4, x, 1.0f, y),
                AMP_ERR_DTYPE, "amp_cuda_unary: dtype i32 is not a float type");
    CHECK_FAILS(amp_cuda_unary(amp_cuda_device(), AMP_UNARY_SCALE, AMP_F32, -1, x, 1.0f, y),
                AMP_ERR_INVALID_ARG, "n = -1 < 0");
    CHECK_FAILS(amp_cuda_unary(amp_cuda_device(), AMP_UNARY_RELU, AMP_F32, 4, nullptr, 1.0f, y),
                AMP_ERR_INVALID_ARG, "argument 'x' is NULL");
    CHECK_FAILS(amp_cuda_binary(amp_cuda_device(), (amp_binary_op)(AMP_BINARY_LAST + 1), AMP_F32,
                                4, x, x, y),
                AMP_ERR_INVALID_ARG, "amp_cuda_binary: unknown op");
    CHECK_FAILS(amp_cuda_binary(amp_cuda_device(), AMP_BINARY_ADD, AMP_F16, 4, x, nullptr, y),
                AMP_ERR_INVALID_ARG, "argument 'b' is NULL");
    CHECK_FAILS(amp_cuda_axpy(amp_cuda_device(), AMP_I32, 4, 1.0f, x, y), AMP_ERR_DTYPE,
                "amp_cuda_axpy: dtype i32");
    CHECK_FAILS(amp_cuda_axpy(amp_cuda_device(), AMP_F32, 4, 1.0f, x, nullptr), AMP_ERR_INVALID_ARG,
                "'y' is NULL");
    CHECK_OK(amp_cuda_binary(amp_cuda_device(), AMP_BINARY_SUB, AMP_BF16, 0, nullptr, nullptr,
                             nullptr));
    CHECK_OK(amp_cuda_axpy(amp_cuda_device(), AMP_F16, 0, 1.0f, nullptr, nullptr));
}

int main(void) {
    test_unary();
    test_binary_axpy();
    test_in_place_and_copy();
    test_errors();
    return test_summary("test_elementwise_cudacpu");
}
