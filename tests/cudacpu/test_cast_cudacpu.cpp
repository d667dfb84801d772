/* Runs kernels/cuda/cast.cu on the CPU under ../shared/cudacpu and checks every output bit.
 *
 * Two references for each conversion: core/half.h (the code the kernels and the CPU backend
 * share) and NVIDIA's own __float2half_rn / __float2bfloat16_rn / __half2float /
 * __bfloat162float host implementations from cuda_fp16.h and cuda_bf16.h, which are independent
 * of ours. Inputs: every f16 and bf16 pattern (half -> f32, f16 <-> bf16); for f32 -> half every
 * f32 a half pattern maps to, every midpoint between consecutive halves (the ties), one f32 ulp
 * either side of both, and 10^5 random f32 (uniform bits, the subnormal-half range and the
 * overflow threshold). Also i32 <-> f32, fill, fill_scalar, the strided cast with bias, argument
 * errors and a guard zone after each output. Host code reaches device memory through cudaMemcpy
 * only (dev_buffer.h), as on a GPU. Run with CUDACPU_SCHEDULE=random:7 and CUDACPU_STREAMS=random
 * as well. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "core/half.h"
#include "dev_buffer.h"
#include "kernels/cuda/cuda_backend.h"
#include "test_device.h"
#include "test_util.h"

/* What cast.cu needs from the rest of the library, which is not built here. */
extern "C" size_t amp_dtype_size(amp_dtype dt) { return dt == AMP_F16 || dt == AMP_BF16 ? 2 : 4; }
extern "C" const char *amp_dtype_name(amp_dtype dt) {
    static const char *names[] = {"f32", "f16", "bf16", "i32"};
    return (unsigned)dt < 4 ? names[dt] : "unknown";
}

static uint16_t nv_f32_to_f16(float f) { return ((__half_raw)__float2half_rn(f)).x; }
static uint16_t nv_f32_to_bf16(float f) { return ((__nv_bfloat16_raw)__float2bfloat16_rn(f)).x; }
static float nv_f16_to_f32(uint16_t h) {
    __half_raw r;
    r.x = h;
    return __half2float(__half(r));
}
static float nv_bf16_to_f32(uint16_t h) {
    __nv_bfloat16_raw r;
    r.x = h;
    return __bfloat162float(__nv_bfloat16(r));
}

/* Runs amp_cuda_cast on host data through device buffers; returns the output. */
template <typename D, typename S>
static std::vector<D> run_cast(amp_dtype dst_dt, const std::vector<S> &src, amp_dtype src_dt) {
    size_t n = src.size();
    dev_buf ds(n * sizeof(S)), dd(n * sizeof(D));
    ds.upload(src.data());
    CHECK_OK(amp_cuda_cast(amp_cuda_device(), dd.ptr, dst_dt, ds.ptr, src_dt, (int64_t)n));
    CHECK(dev_sync());
    dd.download();
    CHECK_MSG(dd.guard_intact(), "cast %d -> %d wrote past n", src_dt, dst_dt);
    return std::vector<D>(dd.h<D>(), dd.h<D>() + n);
}

/* Every half pattern widened: bit-exact with core/half.h; with NVIDIA too, except that a NaN only
 * has to stay NaN: NVIDIA's f16 -> f32 (cvt.f32.f16 and its host emulation) returns the canonical
 * 0x7fffffff where core/half.h keeps the sign and payload. */
static void test_half_to_f32(amp_dtype dt) {
    std::vector<uint16_t> src(65536);
    for (uint32_t i = 0; i < 65536; i++) src[i] = (uint16_t)i;
    std::vector<float> out = run_cast<float>(AMP_F32, src, dt);
    int bad_ours = 0, bad_nv = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        float ours = dt == AMP_F16 ? amp_f16_bits_to_f32((uint16_t)i) : amp_bf16_bits_to_f32((uint16_t)i);
        float nv = dt == AMP_F16 ? nv_f16_to_f32((uint16_t)i) : nv_bf16_to_f32((uint16_t)i);
        if (amp_f32_bits(out[i]) != amp_f32_bits(ours) && bad_ours++ < 5)
            fprintf(stderr, "  %s 0x%04x -> 0x%08x, half.h 0x%08x\n", amp_dtype_name(dt), i,
                    amp_f32_bits(out[i]), amp_f32_bits(ours));
        bool both_nan = std::isnan(out[i]) && std::isnan(nv);
        if (amp_f32_bits(out[i]) != amp_f32_bits(nv) && !both_nan && bad_nv++ < 5)
            fprintf(stderr, "  %s 0x%04x -> 0x%08x, NVIDIA 0x%08x\n", amp_dtype_name(dt), i,
                    amp_f32_bits(out[i]), amp_f32_bits(nv));
    }
    CHECK_MSG(bad_ours == 0, "%s -> f32: %d of 65536 differ from core/half.h", amp_dtype_name(dt), bad_ours);
    CHECK_MSG(bad_nv == 0, "%s -> f32: %d of 65536 differ from NVIDIA", amp_dtype_name(dt), bad_nv);
}

/* xorshift64: the random f32 inputs are the same on every run. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

static void push_with_neighbours(std::vector<float> &v, float x) {
    v.push_back(x);
    v.push_back(std::nextafter(x, INFINITY));
    v.push_back(std::nextafter(x, -INFINITY));
}

/* The f32 inputs that decide f32 -> dt rounding. */
static std::vector<float> f32_inputs(amp_dtype dt) {
    std::vector<float> v;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = dt == AMP_F16 ? nv_f16_to_f32((uint16_t)h) : nv_bf16_to_f32((uint16_t)h);
        if (std::isnan(a)) {
            v.push_back(a);
            continue;
        }
        push_with_neighbours(v, a);
        if (std::isinf(a)) continue;
        /* The next half away from zero; past the largest finite one, where inf would sit if the
         * exponent went on (65536 for f16, 2^128 for bf16: the overflow tie). */
        double b;
        if ((h & 0x7fff) == (dt == AMP_F16 ? 0x7bffu : 0x7f7fu))
            b = std::copysign(dt == AMP_F16 ? 65536.0 : std::ldexp(1.0, 128), (double)a);
        else
            b = dt == AMP_F16 ? nv_f16_to_f32((uint16_t)(h + 1)) : nv_bf16_to_f32((uint16_t)(h + 1));
        double mid = ((double)a + b) / 2; /* exact: 12 (f16) or 9 (bf16) significant bits */
        push_with_neighbours(v, (float)mid);
    }
    for (int i = 0; i < 100000; i++) {
        uint32_t r = rnd32();
        switch (i % 4) {
        case 0: v.push_back(amp_f32_from_bits(r)); break;                          /* any pattern */
        case 1: v.push_back(std::ldexp((float)(r >> 8), -24 - 24) * ((r & 1) ? 1 : -1)); break; /* < 2^-24 */
        case 2: v.push_back(std::ldexp((float)(r >> 8), -24 - 14) * ((r & 1) ? 1 : -1)); break; /* f16 subnormals */
        default: /* around the overflow threshold of the dtype */
            v.push_back((dt == AMP_F16 ? 65520.0f : 3.3961776e38f) *
                        (1.0f + ((float)(int32_t)r) * 0x1p-36f));
        }
    }
    return v;
}

static void test_f32_to_half(amp_dtype dt) {
    std::vector<float> src = f32_inputs(dt);
    std::vector<uint16_t> out = run_cast<uint16_t>(dt, src, AMP_F32);
    int bad_ours = 0, bad_nv = 0;
    for (size_t i = 0; i < src.size(); i++) {
        uint16_t ours = dt == AMP_F16 ? amp_f32_to_f16_bits(src[i]) : amp_f32_to_bf16_bits(src[i]);
        uint16_t nv = dt == AMP_F16 ? nv_f32_to_f16(src[i]) : nv_f32_to_bf16(src[i]);
        if (out[i] != ours && bad_ours++ < 5)
            fprintf(stderr, "  f32 0x%08x -> %s 0x%04x, half.h 0x%04x\n", amp_f32_bits(src[i]),
                    amp_dtype_name(dt), out[i], ours);
        if (out[i] != nv && bad_nv++ < 5)
            fprintf(stderr, "  f32 0x%08x -> %s 0x%04x, NVIDIA 0x%04x\n", amp_f32_bits(src[i]),
                    amp_dtype_name(dt), out[i], nv);
    }
    printf("f32 -> %s: %zu inputs\n", amp_dtype_name(dt), src.size());
    CHECK_MSG(bad_ours == 0, "f32 -> %s: %d differ from core/half.h", amp_dtype_name(dt), bad_ours);
    CHECK_MSG(bad_nv == 0, "f32 -> %s: %d differ from NVIDIA", amp_dtype_name(dt), bad_nv);
}

/* f16 <-> bf16 over every pattern: through f32, which is exact, so NVIDIA's two steps are the
 * reference. */
static void test_half_to_half(amp_dtype dst_dt, amp_dtype src_dt) {
    std::vector<uint16_t> src(65536);
    for (uint32_t i = 0; i < 65536; i++) src[i] = (uint16_t)i;
    std::vector<uint16_t> out = run_cast<uint16_t>(dst_dt, src, src_dt);
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        float f = src_dt == AMP_F16 ? nv_f16_to_f32((uint16_t)i) : nv_bf16_to_f32((uint16_t)i);
        uint16_t want = dst_dt == AMP_F16 ? nv_f32_to_f16(f) : nv_f32_to_bf16(f);
        if (out[i] != want && bad++ < 5)
            fprintf(stderr, "  %s 0x%04x -> %s 0x%04x, NVIDIA 0x%04x\n", amp_dtype_name(src_dt), i,
                    amp_dtype_name(dst_dt), out[i], want);
    }
    CHECK_MSG(bad == 0, "%s -> %s: %d of 65536 differ", amp_dtype_name(src_dt),
              amp_dtype_name(dst_dt), bad);
}

static void test_same_dtype_copies(void) {
    std::vector<float> src = {1.5f, -0.0f, NAN, INFINITY, 3e-42f};
    std::vector<float> out = run_cast<float>(AMP_F32, src, AMP_F32);
    CHECK(memcmp(out.data(), src.data(), src.size() * 4) == 0);
}

/* Fills n elements and checks each, plus the guard. n above the grid cap exercises the
 * grid-stride loop. */
static void test_fill(amp_dtype dt, int64_t n, float value) {
    size_t es = amp_dtype_size(dt), nbytes = (size_t)n * es;
    dev_buf d(nbytes);
    CHECK_OK(amp_cuda_fill(amp_cuda_device(), d.ptr, dt, n, value));
    CHECK(dev_sync());
    d.download();
    uint32_t want = dt == AMP_F32   ? amp_f32_bits(value)
                    : dt == AMP_F16 ? nv_f32_to_f16(value)
                                    : nv_f32_to_bf16(value);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t got = es == 4 ? d.h<uint32_t>()[i] : d.h<uint16_t>()[i];
        bad += got != want;
    }
    CHECK_MSG(bad == 0, "fill %s n=%lld value %g: %lld wrong", amp_dtype_name(dt), (long long)n,
              value, (long long)bad);
    CHECK_MSG(d.guard_intact(), "fill %s n=%lld wrote past n", amp_dtype_name(dt), (long long)n);
}

static void test_fill_scalar(amp_dtype dt) {
    const int64_t n = 3000;
    float scalar = 0.1f, scale = -3.0f;
    dev_buf ds(sizeof(float)), d((size_t)n * amp_dtype_size(dt));
    ds.upload(&scalar);
    CHECK_OK(amp_cuda_fill_scalar(amp_cuda_device(), d.ptr, dt, n, ds.dev<float>(), scale));
    CHECK(dev_sync());
    d.download();
    float v = scale * scalar;
    uint32_t want = dt == AMP_F32   ? amp_f32_bits(v)
                    : dt == AMP_F16 ? nv_f32_to_f16(v)
                                    : nv_f32_to_bf16(v);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += (dt == AMP_F32 ? d.h<uint32_t>()[i] : d.h<uint16_t>()[i]) != want;
    CHECK_MSG(bad == 0, "fill_scalar %s: %d wrong", amp_dtype_name(dt), bad);
    CHECK(d.guard_intact());
}

static float load_ref(const void *p, amp_dtype dt, int64_t i) {
    if (dt == AMP_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == AMP_F16 ? nv_f16_to_f32(h) : nv_bf16_to_f32(h);
}

/* The GEMM's helper pass: dst = scale * src + bias (then the ReLU epilogue, v > 0 ? v : +0,
 * written out here) over a strided [rows, cols] window. Checks the window against fmaf + NVIDIA
 * rounding, and that the padding columns keep their sentinel. */
static void test_cast_rows(amp_dtype dst_dt, amp_dtype src_dt, bool with_src, bool with_bias,
                           bool in_place, bool relu = false) {
    const int64_t rows = 37, cols = 50, lds = 61, ldd = in_place ? lds : 53;
    const float scale = with_src ? 0.75f : 1.0f;
    size_t ses = amp_dtype_size(src_dt), des = amp_dtype_size(dst_dt);
    dev_buf src((size_t)(rows * lds) * ses);
    for (int64_t i = 0; i < rows * lds; i++) {
        float x = (float)((int32_t)rnd32() % 20000) / 64.0f;
        if (src_dt == AMP_F32) src.h<float>()[i] = x;
        else src.h<uint16_t>()[i] = src_dt == AMP_F16 ? nv_f32_to_f16(x) : nv_f32_to_bf16(x);
    }
    src.upload();
    std::vector<uint8_t> src_copy = src.host;
    std::optional<dev_buf> own_dst;
    if (!in_place) {
        own_dst.emplace((size_t)(rows * ldd) * des);
        memset(own_dst->host.data(), 0x5a, own_dst->nbytes);
        own_dst->upload();
    }
    dev_buf &dst = in_place ? src : *own_dst;
    dev_buf bias((size_t)cols * 4);
    for (int64_t j = 0; j < cols; j++) bias.h<float>()[j] = (float)j * 0.3f - 7.0f;
    bias.upload();
    CHECK_OK(amp_cuda_cast_rows_launch(dst.ptr, dst_dt, ldd, with_src ? src.ptr : nullptr, src_dt,
                                       lds, rows, cols, scale,
                                       with_bias ? bias.dev<float>() : nullptr, relu, 0));
    CHECK(dev_sync());
    dst.download();
    int bad = 0, pad_bad = 0;
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t j = 0; j < ldd; j++) {
            size_t off = (size_t)(i * ldd + j) * des;
            if (j >= cols) { /* padding: untouched (sentinel, or the source in place) */
                const uint8_t *orig = in_place ? &src_copy[off] : nullptr;
                uint8_t sentinel[4] = {0x5a, 0x5a, 0x5a, 0x5a};
                pad_bad += memcmp(&dst.host[off], orig ? orig : sentinel, des) != 0;
                continue;
            }
            float x = with_src ? load_ref(src_copy.data(), src_dt, i * lds + j) : 0.0f;
            float v = std::fma(scale, x, with_bias ? bias.h<float>()[j] : 0.0f);
            if (relu) v = v > 0.0f ? v : 0.0f;
            uint32_t want = dst_dt == AMP_F32   ? amp_f32_bits(v)
                            : dst_dt == AMP_F16 ? nv_f32_to_f16(v)
                                                : nv_f32_to_bf16(v);
            int64_t k = i * ldd + j;
            uint32_t got = des == 4 ? dst.h<uint32_t>()[k] : dst.h<uint16_t>()[k];
            bad += got != want;
        }
    }
    CHECK_MSG(bad == 0 && pad_bad == 0, "cast_rows %s -> %s src=%d bias=%d in_place=%d relu=%d: "
              "%d wrong, %d padding touched", amp_dtype_name(src_dt), amp_dtype_name(dst_dt),
              with_src, with_bias, in_place, relu, bad, pad_bad);
    /* In place the window lies inside src, whose guard is checked as well. */
    CHECK(dst.guard_intact());
}

/* i32 <-> f32 against plain definitions written here: truncation toward zero, NaN -> 0, values past
 * the i32 range saturate (CUDA's __float2int_rz); i32 -> f32 rounds to nearest even. */
static int32_t ref_f32_to_i32(float x) {
    if (std::isnan(x)) return 0;
    double t = std::trunc((double)x);
    return t >= 2147483647.0 ? INT32_MAX : t <= -2147483648.0 ? INT32_MIN : (int32_t)t;
}

static void test_i32(void) {
    std::vector<float> f = {0.0f, -0.0f, 2.5f, -2.5f, 0.999f, -0.999f, 16777217.0f, 2147483520.0f,
                            2147483648.0f, -2147483648.0f, -2147483904.0f, 1e10f, -1e10f,
                            INFINITY, -INFINITY, NAN, -NAN, 1e-40f};
    for (int i = 0; i < 1000; i++) f.push_back(amp_f32_from_bits(rnd32()));
    std::vector<int32_t> out = run_cast<int32_t>(AMP_I32, f, AMP_F32);
    int bad = 0;
    for (size_t i = 0; i < f.size(); i++) bad += out[i] != ref_f32_to_i32(f[i]);
    CHECK_MSG(bad == 0, "f32 -> i32: %d of %zu wrong", bad, f.size());
    std::vector<int32_t> ints = {0, 1, -1, 16777217, -16777219, INT32_MAX, INT32_MIN, 123456789};
    for (int i = 0; i < 1000; i++) ints.push_back((int32_t)rnd32());
    std::vector<float> back = run_cast<float>(AMP_F32, ints, AMP_I32);
    bad = 0;
    for (size_t i = 0; i < ints.size(); i++)
        bad += amp_f32_bits(back[i]) != amp_f32_bits((float)(double)ints[i]);
    CHECK_MSG(bad == 0, "i32 -> f32: %d of %zu wrong", bad, ints.size());
    std::vector<int32_t> same = run_cast<int32_t>(AMP_I32, ints, AMP_I32);
    CHECK(same == ints);

    dev_buf d(100 * 4);
    const int32_t *h = d.h<int32_t>();
    CHECK_OK(amp_cuda_fill(amp_cuda_device(), d.ptr, AMP_I32, 100, -3.7f));
    CHECK(dev_sync());
    d.download();
    CHECK(h[0] == -3 && h[99] == -3 && d.guard_intact());
    CHECK_OK(amp_cuda_fill(amp_cuda_device(), d.ptr, AMP_I32, 100, 1e10f));
    CHECK(dev_sync());
    d.download();
    CHECK(h[0] == INT32_MAX && h[99] == INT32_MAX);
    dev_buf scalar(4);
    const float nan = NAN;
    scalar.upload(&nan);
    d.h<int32_t>()[7] = 5;
    d.upload();
    CHECK_OK(amp_cuda_fill_scalar(amp_cuda_device(), d.ptr, AMP_I32, 100, scalar.dev<float>(),
                                  2.0f));
    CHECK(dev_sync());
    d.download();
    CHECK(h[7] == 0 && h[99] == 0);
}

static void test_errors(void) {
    float x = 0;
    CHECK_FAILS(amp_cuda_cast(amp_cuda_device(), &x, AMP_F16, &x, AMP_F32, -1), AMP_ERR_INVALID_ARG,
                "n = -1 < 0");
    CHECK_FAILS(amp_cuda_cast(amp_cuda_device(), &x, AMP_I32, &x, AMP_F16, 1), AMP_ERR_UNSUPPORTED,
                "f16 -> i32");
    CHECK_FAILS(amp_cuda_cast(amp_cuda_device(), &x, AMP_BF16, &x, AMP_I32, 1), AMP_ERR_UNSUPPORTED,
                "i32 -> bf16");
    CHECK_FAILS(amp_cuda_cast(amp_cuda_device(), &x, (amp_dtype)7, &x, AMP_F32, 1), AMP_ERR_DTYPE,
                "unknown dtype");
    CHECK_FAILS(amp_cuda_cast(amp_cuda_device(), nullptr, AMP_F16, &x, AMP_F32, 1),
                AMP_ERR_INVALID_ARG, "'dst'");
    CHECK_FAILS(amp_cuda_cast(amp_cuda_device(), &x, AMP_F16, nullptr, AMP_F32, 1),
                AMP_ERR_INVALID_ARG, "'src'");
    CHECK_OK(amp_cuda_cast(amp_cuda_device(), nullptr, AMP_F16, nullptr, AMP_F32, 0));
    CHECK_FAILS(amp_cuda_fill(amp_cuda_device(), &x, (amp_dtype)9, 1, 1.0f), AMP_ERR_DTYPE,
                "amp_cuda_fill: unknown dtype 9");
    CHECK_FAILS(amp_cuda_fill(amp_cuda_device(), nullptr, AMP_F32, 1, 1.0f), AMP_ERR_INVALID_ARG,
                "'dst'");
    CHECK_OK(amp_cuda_fill(amp_cuda_device(), nullptr, AMP_F32, 0, 1.0f));
    CHECK_FAILS(amp_cuda_fill_scalar(amp_cuda_device(), &x, AMP_F32, 1, nullptr, 1.0f),
                AMP_ERR_INVALID_ARG, "'scalar'");
    CHECK_FAILS(amp_cuda_fill_scalar(amp_cuda_device(), &x, AMP_F32, -2, &x, 1.0f),
                AMP_ERR_INVALID_ARG, "n = -2 < 0");
}

int main(void) {
    test_half_to_f32(AMP_F16);
    test_half_to_f32(AMP_BF16);
    test_f32_to_half(AMP_F16);
    test_f32_to_half(AMP_BF16);
    test_half_to_half(AMP_BF16, AMP_F16);
    test_half_to_half(AMP_F16, AMP_BF16);
    test_same_dtype_copies();
    const float values[] = {0.1f, -65520.0f, 1e-8f, 3.4e38f, -0.0f};
    for (float v : values) {
        test_fill(AMP_F32, 1000, v);
        test_fill(AMP_F16, 1001, v);
        test_fill(AMP_BF16, 999, v);
    }
    /* past AMP_CUDA_MAX_BLOCKS * AMP_CUDA_BLOCK threads: threads loop */
    test_fill(AMP_F16, (int64_t)AMP_CUDA_MAX_BLOCKS * AMP_CUDA_BLOCK + 777, 2.5f);
    test_fill_scalar(AMP_F32);
    test_fill_scalar(AMP_F16);
    test_fill_scalar(AMP_BF16);
    const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    for (amp_dtype d : dts)
        for (amp_dtype s : dts) test_cast_rows(d, s, true, true, false);
    test_cast_rows(AMP_F16, AMP_F32, false, true, false);
    test_cast_rows(AMP_F32, AMP_F32, true, false, false);
    test_cast_rows(AMP_F32, AMP_F32, true, true, true);
    test_cast_rows(AMP_BF16, AMP_BF16, true, true, true);
    test_cast_rows(AMP_F16, AMP_F32, true, true, false, true); /* the GEMM's late ReLU epilogue */
    test_cast_rows(AMP_F32, AMP_F32, true, true, true, true);
    test_i32();
    test_errors();
    return test_summary("test_cast_cudacpu");
}
