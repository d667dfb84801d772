/* Runs kernels/cuda/dropout.cu on the CPU under ../shared/cudacpu and checks it two ways:
 *  - against the CPU backend's own dropout (kernels/cpu/dropout.c, linked in): the mask and
 *    the output bit for bit, forward and backward, for the same (seed, offset);
 *  - against the contract written out here independently: a Philox4x32-10 of its own (checked
 *    against the Random123 known-answer vectors), element i kept when the top 24 bits of the first
 *    word of philox(counter = offset + i, key = seed), times 2^-24, are >= p; y = (x * keep) *
 *    (float)(1 / (1 - (double)p)) rounded to the dtype with NVIDIA's conversions.
 * f32/f16/bf16, p in {0, 0.1, 0.5, 0.9}, offsets that carry into the counter's high word, sizes
 * past the grid cap, NaN/inf kept or dropped (a dropped NaN stays NaN), in place, guard zones
 * after every output, the CPU backend's argument errors. Run with CUDACPU_SCHEDULE=random:7 and
 * CUDACPU_STREAMS=random as well. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ops_ref.h"

/* The CPU backend's dropout (kernels/cpu/dropout.c) and the two functions it needs from the
 * rest of that backend, written here over NVIDIA's conversions (round to nearest even, as
 * memory.c's). */
extern "C" {
amp_status amp_cpu_dropout_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *x, float p,
                               uint64_t seed, uint64_t offset, void *y, uint8_t *mask);
amp_status amp_cpu_dropout_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *dy,
                               const uint8_t *mask, float p, void *dx);
amp_status amp_cpu_copy(void *dst, const void *src, size_t nbytes) {
    if (dst != src && nbytes) memmove(dst, src, nbytes);
    return AMP_OK;
}
amp_status amp_cpu_convert(void *dst, amp_dtype dst_dt, const void *src, amp_dtype src_dt,
                           int64_t n) {
    for (int64_t i = 0; i < n; i++) nv_store(dst, dst_dt, i, nv_load(src, src_dt, i));
    return AMP_OK;
}
void amp_cpu_widen_tile(float *dst, const uint16_t *src, amp_dtype half_dt, int64_t n) {
    (void)amp_cpu_convert(dst, AMP_F32, src, half_dt, n);
}
void amp_cpu_round_tile(uint16_t *dst, amp_dtype half_dt, const float *src, int64_t n) {
    (void)amp_cpu_convert(dst, half_dt, src, AMP_F32, n);
}
}

/* Philox4x32-10 as in Salmon et al. (SC'11) and Random123's philox.h: four 32-bit counter words,
 * two key words, ten rounds, the key bumped between rounds. */
static void philox_ref(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4]) {
    uint32_t c[4] = {ctr_in[0], ctr_in[1], ctr_in[2], ctr_in[3]}, k[2] = {key_in[0], key_in[1]};
    for (int r = 0; r < 10; r++) {
        if (r > 0) k[0] += 0x9E3779B9u, k[1] += 0xBB67AE85u;
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n[4] = {(uint32_t)(p1 >> 32) ^ c[1] ^ k[0], (uint32_t)p1,
                         (uint32_t)(p0 >> 32) ^ c[3] ^ k[1], (uint32_t)p0};
        memcpy(c, n, sizeof c);
    }
    memcpy(out, c, sizeof c);
}

static void test_philox_kat(void) {
    /* Random123 kat_vectors: philox4x32 10 rounds. */
    const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
         0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u,
         0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (const auto &v : kat) {
        uint32_t out[4];
        philox_ref(v, v + 4, out);
        CHECK(memcmp(out, v + 6, sizeof out) == 0);
    }
}

/* The contract's keep rule for element i. */
static bool keep_ref(uint64_t seed, uint64_t index, float p) {
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, out[4];
    philox_ref(ctr, key, out);
    return (double)(out[0] >> 8) * 0x1p-24 >= (double)p;
}

static void run_case(amp_dtype dt, int64_t n, float p, uint64_t seed, uint64_t offset) {
    size_t nbytes = (size_t)n * amp_dtype_size(dt);
    dev_buf x = random_buf(dt, n, 5.0, true);
    dev_buf y(nbytes), mask((size_t)n), dy = random_buf(dt, n, 1.0, true), dx(nbytes);
    CHECK_OK(amp_cuda_dropout_fwd(amp_cuda_device(), dt, n, x.ptr, p, seed, offset, y.ptr,
                                  mask.dev<uint8_t>()));
    CHECK_OK(
            amp_cuda_dropout_bwd(amp_cuda_device(), dt, n, dy.ptr, mask.dev<uint8_t>(), p, dx.ptr));
    CHECK(dev_sync());
    y.download();
    mask.download();
    dx.download();
    /* The CPU backend on the mirrors. */
    std::vector<uint8_t> cy(nbytes), cmask((size_t)n), cdx(nbytes);
    CHECK_OK(amp_cpu_dropout_fwd(amp_cpu_device(), dt, n, x.host.data(), p, seed, offset, cy.data(),
                                 cmask.data()));
    CHECK_OK(amp_cpu_dropout_bwd(amp_cpu_device(), dt, n, dy.host.data(), cmask.data(), p,
                                 cdx.data()));
    int64_t bad_mask = 0, bad_cpu = 0, bad_ref = 0, kept = 0;
    float scale = (float)(1.0 / (1.0 - (double)p));
    for (int64_t i = 0; i < n; i++) {
        uint8_t m = mask.host[i];
        bool want = p == 0.0f || keep_ref(seed, offset + (uint64_t)i, p);
        bad_mask += m != (uint8_t)want || m != cmask[i];
        kept += m;
        float gy = nv_load(y.host.data(), dt, i), gdx = nv_load(dx.host.data(), dt, i);
        bad_cpu += !same_f32(gy, nv_load(cy.data(), dt, i)) ||
                   !same_f32(gdx, nv_load(cdx.data(), dt, i));
        float xv = nv_load(x.host.data(), dt, i), gv = nv_load(dy.host.data(), dt, i);
        float ry = p == 0.0f ? xv : nv_round(dt, (xv * (want ? 1.0f : 0.0f)) * scale);
        float rdx = nv_round(dt, (gv * (want ? 1.0f : 0.0f)) * scale);
        bad_ref += !same_f32(gy, ry) || !same_f32(gdx, rdx);
    }
    CHECK_MSG(bad_mask == 0 && bad_cpu == 0 && bad_ref == 0,
              "dropout %s n=%lld p=%g seed=%llu offset=%llu: %lld masks, %lld values vs the CPU "
              "backend, %lld vs the reference wrong", amp_dtype_name(dt), (long long)n, (double)p,
              (unsigned long long)seed, (unsigned long long)offset, (long long)bad_mask,
              (long long)bad_cpu, (long long)bad_ref);
    if (n >= 1000) /* the keep rate is near 1 - p (a gross check of the rule's direction) */
        CHECK(std::fabs((double)kept / n - (1.0 - p)) < 0.05);
    CHECK(y.guard_intact() && mask.guard_intact() && dx.guard_intact());
}

static void test_against_cpu(void) {
    const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f};
    for (amp_dtype dt : float_dts)
        for (float p : ps) {
            run_case(dt, 1, p, 0, 0);
            run_case(dt, 1000, p, 0x123456789abcdefull, 0xffffff00ull); /* counter carries */
            run_case(dt, 5003, p, 42, 7);
        }
    run_case(AMP_F32, BIG_N, 0.5f, 2024, 1ull << 40);
    run_case(AMP_BF16, BIG_N, 0.2f, 7, 3);
}

/* y = x and dx = dy in place; p = 0 in place leaves x as it was. */
static void test_in_place(void) {
    const int64_t n = 7001;
    for (amp_dtype dt : float_dts)
        for (float p : {0.0f, 0.3f}) {
            dev_buf x = random_buf(dt, n, 2.0, true), mask((size_t)n);
            size_t nbytes = (size_t)n * amp_dtype_size(dt);
            std::vector<uint8_t> cy(nbytes), cmask((size_t)n), cdx(nbytes);
            CHECK_OK(amp_cpu_dropout_fwd(amp_cpu_device(), dt, n, x.host.data(), p, 9, 11,
                                         cy.data(), cmask.data()));
            CHECK_OK(amp_cpu_dropout_bwd(amp_cpu_device(), dt, n, cy.data(), cmask.data(), p,
                                         cdx.data()));
            CHECK_OK(amp_cuda_dropout_fwd(amp_cuda_device(), dt, n, x.ptr, p, 9, 11, x.ptr,
                                          mask.dev<uint8_t>()));
            CHECK_OK(amp_cuda_dropout_bwd(amp_cuda_device(), dt, n, x.ptr, mask.dev<uint8_t>(), p,
                                          x.ptr));
            CHECK(dev_sync());
            x.download();
            mask.download();
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++)
                bad += !same_f32(nv_load(x.host.data(), dt, i), nv_load(cdx.data(), dt, i)) ||
                       mask.host[i] != cmask[i];
            CHECK_MSG(bad == 0, "in place %s p=%g: %lld wrong", amp_dtype_name(dt), (double)p,
                      (long long)bad);
            CHECK(x.guard_intact() && mask.guard_intact());
        }
}

static void test_errors(void) {
    float x[4] = {0}, y[4];
    uint8_t m[4];
    CHECK_FAILS(amp_cuda_dropout_fwd(amp_cuda_device(), AMP_I32, 4, x, 0.5f, 0, 0, y, m),
                AMP_ERR_DTYPE, "amp_cuda_dropout_fwd: dtype i32 is not a float type");
    CHECK_FAILS(amp_cuda_dropout_fwd(amp_cuda_device(), AMP_F32, 4, x, 1.0f, 0, 0, y, m),
                AMP_ERR_INVALID_ARG, "p = 1 is outside [0, 1)");
    CHECK_FAILS(amp_cuda_dropout_fwd(amp_cuda_device(), AMP_F32, 4, x, NAN, 0, 0, y, m),
                AMP_ERR_INVALID_ARG, "is outside [0, 1)");
    CHECK_FAILS(amp_cuda_dropout_fwd(amp_cuda_device(), AMP_F32, -4, x, 0.5f, 0, 0, y, m),
                AMP_ERR_INVALID_ARG, "n = -4 < 0");
    CHECK_FAILS(amp_cuda_dropout_fwd(amp_cuda_device(), AMP_F16, 4, x, 0.5f, 0, 0, y, nullptr),
                AMP_ERR_INVALID_ARG, "'mask' is NULL");
    CHECK_FAILS(amp_cuda_dropout_bwd(amp_cuda_device(), AMP_F32, 4, x, m, -0.5f, y),
                AMP_ERR_INVALID_ARG, "amp_cuda_dropout_bwd: p = -0.5 is outside [0, 1)");
    CHECK_FAILS(amp_cuda_dropout_bwd(amp_cuda_device(), AMP_F32, 4, x, nullptr, 0.5f, y),
                AMP_ERR_INVALID_ARG, "'mask' is NULL");
    CHECK_OK(amp_cuda_dropout_fwd(amp_cuda_device(), AMP_BF16, 0, nullptr, 0.5f, 0, 0, nullptr,
                                  nullptr));
}

int main(void) {
    test_philox_kat();
    test_against_cpu();
    test_in_place();
    test_errors();
    return test_summary("test_dropout_cudacpu");
}
