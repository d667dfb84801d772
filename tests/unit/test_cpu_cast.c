/* CPU backend memory, cast and fill (kernels/cpu/memory.c).
 *
 * The casts must give exactly the bits of core/half.h's scalar functions (themselves checked
 * against double references in test_half.c), whichever path runs (AVX-512, F16C/AVX2 under
 * AMP_CPU_ISA=sse41 as test_cpu_cast_generic, or portable): every
 * one of the 65536 half patterns is widened, random f32 bit patterns (NaN, inf, subnormals,
 * round-to-even ties) are narrowed, at lengths that exercise the vector tails and the parallel
 * path. */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "test_data.h"
#include "test_util.h"

/* 32 random bits: the high half of the generator's output. */
static uint32_t rng_u32(void) { return (uint32_t)(test_rng_next() >> 32); }

/* An f32 pattern that hits the interesting cases often: uniform bits, values near the half
 * ranges (exponent -30..17), exact f16/bf16 ties, NaNs with payloads, infinities. */
static float interesting_f32(void) {
    uint32_t u = rng_u32(), sign = u & 0x80000000u;
    switch (rng_u32() % 6) {
    case 0: return amp_f32_from_bits(u);
    case 1: return amp_f32_from_bits(sign | ((97u + rng_u32() % 48u) << 23) | (u & 0x7fffffu));
    case 2: return amp_f32_from_bits((u & ~0x1fffu) | 0x1000u);  /* f16 normal tie bits */
    case 3: return amp_f32_from_bits((u & ~0xffffu) | 0x8000u);  /* bf16 tie bits */
    case 4: return amp_f32_from_bits(sign | 0x7f800000u | (u % 3 ? (u & 0x7fffffu) | 1u : 0u));
    default: return amp_f32_from_bits(sign | (u & 0x807fffffu)); /* f32 subnormal */
    }
}

static void test_alloc(void) {
    void *p = NULL;
    size_t sizes[] = {0, 1, 63, 64, 65, 1000, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        CHECK_OK(amp_cpu_alloc(sizes[i], &p));
        CHECK(p != NULL && (uintptr_t)p % 64 == 0);
        if (p) memset(p, 0xab, sizes[i]);
        amp_cpu_free(p);
    }
    amp_cpu_free(NULL);
    CHECK_FAILS(amp_cpu_alloc(SIZE_MAX - 8, &p), AMP_ERR_OOM, "18446744073709551607 bytes");
    CHECK(p == NULL);
    CHECK_FAILS(amp_cpu_alloc((size_t)1 << 62, &p), AMP_ERR_OOM, "4611686018427387904 bytes");
    CHECK_FAILS(amp_cpu_alloc(16, NULL), AMP_ERR_INVALID_ARG, "out");

    unsigned char a[100], b[100];
    for (int i = 0; i < 100; i++) a[i] = (unsigned char)i;
    CHECK_OK(amp_cpu_copy(b, a, sizeof a));
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK_OK(amp_cpu_memset_zero(b + 10, 20));
    CHECK(b[9] == 9 && b[10] == 0 && b[29] == 0 && b[30] == 30);
    CHECK_OK(amp_cpu_copy(NULL, NULL, 0));
    CHECK_OK(amp_cpu_sync());
}

/* Every half pattern, widened by amp_cpu_cast, at the offset `shift` in the array (so every
 * pattern also lands in a scalar tail for some shift), equals core/half.h bit for bit. */
static void test_widen_all_patterns(amp_dtype dt, float (*ref)(uint16_t)) {
    enum { N = 65536 + 13 };
    static uint16_t h[N];
    static float f[N];
    for (int shift = 0; shift < 9; shift += 4) {
        for (int i = 0; i < N; i++) h[i] = (uint16_t)(i - shift);
        memset(f, 0, sizeof f);
        CHECK_OK(amp_cpu_cast(amp_cpu_device(), f, AMP_F32, h, dt, N));
        int bad = 0;
        for (int i = 0; i < N; i++)
            if (amp_f32_bits(f[i]) != amp_f32_bits(ref(h[i])) && bad++ < 5)
                fprintf(stderr, "%s 0x%04x -> 0x%08x, want 0x%08x\n", amp_dtype_name(dt), h[i],
                        amp_f32_bits(f[i]), amp_f32_bits(ref(h[i])));
        CHECK_MSG(bad == 0, "%s widen: %d of %d patterns differ", amp_dtype_name(dt), bad, N);
        /* And narrowing each widened value gives the pattern back (NaN: canonical). */
        static uint16_t back[N];
        CHECK_OK(amp_cpu_cast(amp_cpu_device(), back, dt, f, AMP_F32, N));
        bad = 0;
        for (int i = 0; i < N; i++) {
            int nan = dt == AMP_F16 ? (h[i] & 0x7fff) > 0x7c00 : (h[i] & 0x7fff) > 0x7f80;
            bad += back[i] != (nan ? 0x7fff : h[i]);
        }
        CHECK_MSG(bad == 0, "%s round trip: %d patterns differ", amp_dtype_name(dt), bad);
    }
}

static void test_narrow_random(amp_dtype dt, uint16_t (*ref)(float), int64_t n) {
    float *f = malloc((size_t)n * sizeof *f);
    uint16_t *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) f[i] = interesting_f32();
    CHECK_OK(amp_cpu_cast(amp_cpu_device(), h, dt, f, AMP_F32, n));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (h[i] != ref(f[i]) && bad++ < 5)
            fprintf(stderr, "%s 0x%08x -> 0x%04x, want 0x%04x\n", amp_dtype_name(dt),
                    amp_f32_bits(f[i]), h[i], ref(f[i]));
    CHECK_MSG(bad == 0, "%s narrow of %lld: %lld differ", amp_dtype_name(dt), (long long)n,
              (long long)bad);
    free(f);
    free(h);
}

/* f16 <-> bf16 equals the two-step path through f32 (exact widening, one rounding). */
static void test_half_to_half(void) {
    enum { N = 65536 };
    static uint16_t src[N], dst[N];
    for (int i = 0; i < N; i++) src[i] = (uint16_t)i;
    CHECK_OK(amp_cpu_cast(amp_cpu_device(), dst, AMP_BF16, src, AMP_F16, N));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += dst[i] != amp_f32_to_bf16_bits(amp_f16_bits_to_f32(src[i]));
    CHECK_MSG(bad == 0, "f16 -> bf16: %d differ", bad);
    CHECK_OK(amp_cpu_cast(amp_cpu_device(), dst, AMP_F16, src, AMP_BF16, N));
    bad = 0;
    for (int i = 0; i < N; i++) bad += dst[i] != amp_f32_to_f16_bits(amp_bf16_bits_to_f32(src[i]));
    CHECK_MSG(bad == 0, "bf16 -> f16: %d differ", bad);
    CHECK_OK(amp_cpu_cast(amp_cpu_device(), dst, AMP_F16, src, AMP_F16, N));
    CHECK(memcmp(dst, src, sizeof src) == 0);
}

static void test_i32(void) {
    float f[] = {0.0f, -0.0f, 1.9f, -1.9f, 16777217.0f, 2147483520.0f, 2147483648.0f, 1e20f,
                 -2147483648.0f, -1e20f, NAN, INFINITY, -INFINITY};
    int32_t want[] = {0, 0, 1, -1, 16777216, 2147483520, INT32_MAX, INT32_MAX,
                      INT32_MIN, INT32_MIN, 0, INT32_MAX, INT32_MIN};
    int32_t got[13];
    CHECK_OK(amp_cpu_cast(amp_cpu_device(), got, AMP_I32, f, AMP_F32, 13));
    for (int i = 0; i < 13; i++)
        CHECK_MSG(got[i] == want[i], "f32 %g -> i32 %d, want %d", (double)f[i], got[i], want[i]);
    int32_t ints[] = {0, -5, 16777217, INT32_MAX, INT32_MIN};
    float back[5];
    CHECK_OK(amp_cpu_cast(amp_cpu_device(), back, AMP_F32, ints, AMP_I32, 5));
    for (int i = 0; i < 5; i++) CHECK(back[i] == (float)(double)ints[i]);
    CHECK(back[2] == 16777216.0f); /* ties to even */
    uint16_t h[5];
    CHECK_FAILS(amp_cpu_cast(amp_cpu_device(), h, AMP_F16, ints, AMP_I32, 5), AMP_ERR_UNSUPPORTED,
                "i32");
    CHECK_FAILS(amp_cpu_cast(amp_cpu_device(), ints, AMP_I32, h, AMP_BF16, 5), AMP_ERR_UNSUPPORTED,
                "bf16");
    CHECK_FAILS(amp_cpu_cast(amp_cpu_device(), back, AMP_F32, f, AMP_F32, -1), AMP_ERR_INVALID_ARG,
                "n = -1");
    CHECK_FAILS(amp_cpu_cast(amp_cpu_device(), back, (amp_dtype)9, f, AMP_F32, 1), AMP_ERR_DTYPE,
                "dtype");
    CHECK_OK(amp_cpu_cast(amp_cpu_device(), NULL, AMP_F32, NULL, AMP_F16, 0));
}

static void test_fill(void) {
    enum { N = 40000 }; /* parallel path */
    static float f[N + 1];
    static uint16_t h[N + 1];
    static int32_t k[N + 1];
    f[N] = 7.0f;
    h[N] = 7;
    k[N] = 7;
    CHECK_OK(amp_cpu_fill(amp_cpu_device(), f, AMP_F32, N, -2.5f));
    CHECK(f[0] == -2.5f && f[N - 1] == -2.5f && f[N] == 7.0f);
    CHECK_OK(amp_cpu_fill(amp_cpu_device(), h, AMP_F16, N, 0.1f));
    CHECK(h[0] == amp_f32_to_f16_bits(0.1f) && h[N - 1] == h[0] && h[N] == 7);
    CHECK_OK(amp_cpu_fill(amp_cpu_device(), h, AMP_BF16, N, NAN));
    CHECK(h[0] == 0x7fff && h[N - 1] == 0x7fff && h[N] == 7);
    CHECK_OK(amp_cpu_fill(amp_cpu_device(), k, AMP_I32, N, -3.7f));
    CHECK(k[0] == -3 && k[N - 1] == -3 && k[N] == 7);
    float s = 3.0f;
    CHECK_OK(amp_cpu_fill_scalar(amp_cpu_device(), f, AMP_F32, 5, &s, 0.25f));
    CHECK(f[0] == 0.75f && f[4] == 0.75f && f[5] == -2.5f);
    CHECK_OK(amp_cpu_fill_scalar(amp_cpu_device(), h, AMP_BF16, 3, &s, 1.0f / 3.0f));
    CHECK(h[2] == amp_f32_to_bf16_bits(1.0f));
    CHECK_FAILS(amp_cpu_fill_scalar(amp_cpu_device(), f, AMP_F32, 5, NULL, 1.0f),
                AMP_ERR_INVALID_ARG, "scalar");
    CHECK_FAILS(amp_cpu_fill(amp_cpu_device(), f, AMP_F32, -2, 0.0f), AMP_ERR_INVALID_ARG,
                "n = -2");
}

int main(void) {
    test_rng_seed(0x9e3779b97f4a7c15ull);
    test_alloc();
    test_widen_all_patterns(AMP_F16, amp_f16_bits_to_f32);
    test_widen_all_patterns(AMP_BF16, amp_bf16_bits_to_f32);
    int64_t lengths[] = {1, 7, 8, 9, 1001, 100003};
    for (int t = 1; t <= 2; t++) {
        omp_set_num_threads(t);
        for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
            test_narrow_random(AMP_F16, amp_f32_to_f16_bits, lengths[i]);
            test_narrow_random(AMP_BF16, amp_f32_to_bf16_bits, lengths[i]);
        }
    }
    test_narrow_random(AMP_F16, amp_f32_to_f16_bits, 1 << 22);
    test_narrow_random(AMP_BF16, amp_f32_to_bf16_bits, 1 << 22);
    test_half_to_half();
    test_i32();
    test_fill();
    return test_summary("test_cpu_cast");
}
