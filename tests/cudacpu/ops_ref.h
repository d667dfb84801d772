/* Shared pieces of the cudacpu op tests (elementwise, reduce, loss, dropout): what the kernel
 * files need from the rest of the library (not built here), NVIDIA's own f16/bf16 conversions
 * for the references (independent of core/half.h), random data with special values, and bit
 * comparisons. Include once per test binary (it defines the library stubs). */
#ifndef AMP_TESTS_CUDACPU_OPS_REF_H
#define AMP_TESTS_CUDACPU_OPS_REF_H

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/half.h"
#include "dev_buffer.h"
#include "kernels/cuda/cuda_backend.h"
#include "test_device.h"
#include "test_util.h"

extern "C" size_t amp_dtype_size(amp_dtype dt) { return dt == AMP_F16 || dt == AMP_BF16 ? 2 : 4; }
extern "C" const char *amp_dtype_name(amp_dtype dt) {
    static const char *names[] = {"f32", "f16", "bf16", "i32"};
    return (unsigned)dt < 4 ? names[dt] : "unknown";
}

static const amp_dtype float_dts[] = {AMP_F32, AMP_F16, AMP_BF16};

/* Past AMP_CUDA_MAX_BLOCKS * AMP_CUDA_BLOCK elements and not a multiple of the block: threads
 * of a grid-stride loop run a second, partial iteration. */
static const int64_t BIG_N = (int64_t)AMP_CUDA_MAX_BLOCKS * AMP_CUDA_BLOCK + 777;

static inline float nv_load(const void *p, amp_dtype dt, int64_t i) {
    if (dt == AMP_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    if (dt == AMP_F16) {
        __half_raw r;
        r.x = h;
        return __half2float(__half(r));
    }
    __nv_bfloat16_raw r;
    r.x = h;
    return __bfloat162float(__nv_bfloat16(r));
}

static inline void nv_store(void *p, amp_dtype dt, int64_t i, float v) {
    if (dt == AMP_F32) ((float *)p)[i] = v;
    else if (dt == AMP_F16) ((uint16_t *)p)[i] = ((__half_raw)__float2half_rn(v)).x;
    else ((uint16_t *)p)[i] = ((__nv_bfloat16_raw)__float2bfloat16_rn(v)).x;
}

/* v rounded to dtype dt and widened again. */
static inline float nv_round(amp_dtype dt, float v) {
    uint32_t buf = 0;
    nv_store(&buf, dt, 0, v);
    return nv_load(&buf, dt, 0);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline double rnd_uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

/* Specials placed at the start, the middle and the end of random data. */
static const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 1e-40f, -3.0f, 2.5f};
static const int n_specials = sizeof specials / sizeof specials[0];

/* n values in dt, uniform in [-scale, scale), with the specials at the start, the middle and the
 * end when `special` is set (as many as fit), uploaded; the mirror keeps them. */
static inline dev_buf random_buf(amp_dtype dt, int64_t n, double scale, bool special) {
    dev_buf b((size_t)n * amp_dtype_size(dt));
    for (int64_t i = 0; i < n; i++)
        nv_store(b.host.data(), dt, i, (float)((2 * rnd_uniform() - 1) * scale));
    if (special)
        for (int s = 0; s < n_specials; s++) {
            int64_t at[] = {s, n / 2 + s, n - 1 - s};
            for (int64_t i : at)
                if (i >= 0 && i < n) nv_store(b.host.data(), dt, i, specials[s]);
        }
    b.upload();
    return b;
}

/* Same bits, or both NaN (NaN payloads are not part of the contract). */
static inline bool same_f32(float a, float b) {
    return amp_f32_bits(a) == amp_f32_bits(b) || (std::isnan(a) && std::isnan(b));
}

/* One f32 in a device buffer: set, and read back. */
static inline void set_scalar(dev_buf &b, float v) { b.upload(&v); }
static inline float get_scalar(dev_buf &b) {
    b.download();
    return b.h<float>()[0];
}

#endif
