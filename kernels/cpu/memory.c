/* CPU backend: memory, casts and fills.
 *
 * Casts between f32 and f16/bf16 give exactly the bits of core/half.h (round to nearest even,
 * subnormals kept, every NaN the canonical 0x7fff, f16 NaN payloads widened unchanged), which is
 * also what the CUDA backend stores. They are the hot path of mixed precision (weights, activations
 * and gradients cross them every step), so:
 *  - f32 <-> bf16 runs the core/half.h functions in loops the compiler vectorises (they are
 *    branch-free after if-conversion), built twice: for the baseline ISA and for AVX2;
 *  - f32 <-> f16 uses the F16C instructions (vcvtps2ph with RNE, vcvtph2ps) where the CPU has them,
 *    then patches NaN lanes to the core/half.h bits (the instructions keep and quieten payloads);
 *    the portable fallback is the core/half.h loop;
 *  - at the avx512_core level (amp_cpu_avx512_kernels) both run sixteen lanes at a time through
 *    avx512_lanes.h, the tail masked, NaN lanes patched only in a vector that has one. In L1 (the
 *    optimizer rounds each 4096-element chunk into its half copy while the chunk is there) that
 *    beats the F16C and AVX2 loops; a matrix in DRAM converts at memory speed either way
 *    (bench/RESULTS.md, "Figures behind decisions in the code", memory.c).
 * The x86 paths are chosen at run time by the CPU's level, capped by AMP_CPU_ISA
 * (core/cpu_info.h), so one binary runs everywhere and any path runs on a CPU above it. */
#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/cpu_info.h"
#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/cast.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define AMP_CPU_X86 1
#include <immintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#define AMP_CPU_AVX512 1
#include "kernels/cpu/avx512_lanes.h"
#endif

/* Alignment of every allocation: one cache line, and a full AVX-512 vector. */
#define CPU_ALIGN 64
/* Casts of at least AMP_CPU_PARALLEL_MIN elements are split into blocks of this many across
 * threads; f16 <-> bf16 goes through an f32 stack buffer of this size. */
#define CAST_BLOCK 4096

/* Bytes of backend memory held now and at most since the last reset (amp_ctx_memory): what a
 * training step keeps in tensors, gradients, masters, optimizer state and step arenas, without
 * the allocator's or the libraries' own overheads. Counted in usable bytes, which free() can ask
 * for again (glibc's malloc_usable_size), so no header is needed. */
static _Atomic size_t g_cpu_in_use, g_cpu_peak;
static _Atomic uint64_t g_cpu_allocs; /* aligned_alloc calls (system_allocs) */

uint64_t amp_cpu_system_allocs(void) { return atomic_load(&g_cpu_allocs); }

void amp_cpu_memory_count(size_t add, size_t sub) {
    if (sub) atomic_fetch_sub(&g_cpu_in_use, sub);
    if (!add) return;
    size_t now = atomic_fetch_add(&g_cpu_in_use, add) + add;
    size_t peak = atomic_load(&g_cpu_peak);
    while (now > peak && !atomic_compare_exchange_weak(&g_cpu_peak, &peak, now)) {}
}

void amp_cpu_memory_stats(size_t *in_use, size_t *peak) {
    if (in_use) *in_use = atomic_load(&g_cpu_in_use);
    if (peak) *peak = atomic_load(&g_cpu_peak);
}

void amp_cpu_memory_reset_peak(void) { atomic_store(&g_cpu_peak, atomic_load(&g_cpu_in_use)); }

amp_status amp_cpu_alloc(size_t nbytes, void **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    /* aligned_alloc wants a multiple of the alignment; 0 bytes still gives a pointer to free. */
    if (nbytes > SIZE_MAX - CPU_ALIGN)
        return amp_fail(AMP_ERR_OOM, "amp_cpu_alloc: out of memory allocating %zu bytes", nbytes);
    size_t rounded = nbytes == 0 ? CPU_ALIGN : (nbytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    void *p = aligned_alloc(CPU_ALIGN, rounded);
    atomic_fetch_add(&g_cpu_allocs, 1);
    if (!p)
        return amp_fail(AMP_ERR_OOM, "amp_cpu_alloc: out of memory allocating %zu bytes", nbytes);
    amp_cpu_memory_count(malloc_usable_size(p), 0);
    *out = p;
    return AMP_OK;
}

void amp_cpu_free(void *p) {
    if (!p) return;
    amp_cpu_memory_count(0, malloc_usable_size(p));
    free(p);
}

amp_status amp_cpu_memset_zero(void *p, size_t nbytes) {
    if (nbytes == 0) return AMP_OK;
    AMP_CHECK_ARG(p);
    memset(p, 0, nbytes);
    return AMP_OK;
}

amp_status amp_cpu_copy(void *dst, const void *src, size_t nbytes) {
    if (nbytes == 0) return AMP_OK;
    AMP_CHECK_ARG(dst);
    AMP_CHECK_ARG(src);
    memmove(dst, src, nbytes);
    return AMP_OK;
}

amp_status amp_cpu_sync(void) {
    return AMP_OK; /* every CPU kernel has finished when it returns */
}

/* ---- Portable conversion loops (the reference bits) ---------------------------------------- */

static void f32_to_bf16_generic(uint16_t *restrict dst, const float *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = amp_f32_to_bf16_bits(src[i]);
}

static void bf16_to_f32_generic(float *restrict dst, const uint16_t *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = amp_bf16_bits_to_f32(src[i]);
}

static void f32_to_f16_generic(uint16_t *restrict dst, const float *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = amp_f32_to_f16_bits(src[i]);
}

static void f16_to_f32_generic(float *restrict dst, const uint16_t *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = amp_f16_bits_to_f32(src[i]);
}

/* ---- x86: AVX2 for bf16, F16C for f16 ------------------------------------------------------- */

#ifdef AMP_CPU_X86
#define CPU_TARGET_AVX2 __attribute__((target("avx2,f16c")))

/* The same core/half.h loops, vectorised 8 lanes wide. */
CPU_TARGET_AVX2 static void f32_to_bf16_avx2(uint16_t *restrict dst, const float *restrict src,
                                             int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = amp_f32_to_bf16_bits(src[i]);
}

CPU_TARGET_AVX2 static void bf16_to_f32_avx2(float *restrict dst, const uint16_t *restrict src,
                                             int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = amp_bf16_bits_to_f32(src[i]);
}

/* vcvtps2ph rounds to nearest even, overflows to inf and keeps subnormals, as core/half.h; it
 * differs only on NaN (it keeps the payload), so NaN lanes become 0x7fff. */
CPU_TARGET_AVX2 static void f32_to_f16_f16c(uint16_t *restrict dst, const float *restrict src,
                                            int64_t n) {
    const __m128i canonical_nan = _mm_set1_epi16(0x7fff);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32),
                                        _mm256_extracti128_si256(nan32, 1));
        _mm_storeu_si128((__m128i *)(dst + i), _mm_blendv_epi8(h, canonical_nan, nan16));
    }
    for (; i < n; i++) dst[i] = amp_f32_to_f16_bits(src[i]);
}

/* vcvtph2ps is exact, subnormals included; on NaN it sets the quiet bit, where core/half.h (and
 * CUDA's __half2float) widens the payload unchanged, so NaN lanes are rebuilt from their bits. */
CPU_TARGET_AVX2 static void f16_to_f32_f16c(float *restrict dst, const uint16_t *restrict src,
                                            int64_t n) {
    const __m256i sign_mask = _mm256_set1_epi32(0x8000), mant_mask = _mm256_set1_epi32(0x3ff);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fff), inf_bits = _mm256_set1_epi32(0x7c00);
    const __m256i f32_inf = _mm256_set1_epi32(0x7f800000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        __m256 f = _mm256_cvtph_ps(h);
        __m256i w = _mm256_cvtepu16_epi32(h);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(w, abs_mask), inf_bits);
        __m256i exact = _mm256_or_si256(
            _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, sign_mask), 16), f32_inf),
            _mm256_slli_epi32(_mm256_and_si256(w, mant_mask), 13));
        __m256i bits = _mm256_blendv_epi8(_mm256_castps_si256(f), exact, nan);
        _mm256_storeu_si256((__m256i *)(dst + i), bits);
    }
    for (; i < n; i++) dst[i] = amp_f16_bits_to_f32(src[i]);
}

/* The avx2 level (core/cpu_info.h) has F16C too; AMP_CPU_ISA=sse41 keeps the portable loops. */
static bool cpu_has_avx2_f16c(void) {
    return amp_cpu_level_get() >= AMP_CPU_AVX2;
}
#endif

#ifdef AMP_CPU_AVX512
/* The same bits sixteen lanes at a time (avx512_lanes.h rounds and widens as core/half.h). */
AMP_AVX512_TARGET static void f32_to_half_avx512(uint16_t *dst, amp_dtype dt, const float *src,
                                                 int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = avx512_lanes(n - i);
        avx512_store16(dst, dt, i, m, _mm512_maskz_loadu_ps(m, src + i));
    }
}

AMP_AVX512_TARGET static void half_to_f32_avx512(float *dst, const uint16_t *src, amp_dtype dt,
                                                 int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = avx512_lanes(n - i);
        _mm512_mask_storeu_ps(dst + i, m, avx512_load16_exact(src, dt, i, m));
    }
}
#endif

static void f32_to_half(uint16_t *dst, amp_dtype dt, const float *src, int64_t n) {
#ifdef AMP_CPU_AVX512
    if (amp_cpu_avx512_kernels()) {
        f32_to_half_avx512(dst, dt, src, n);
        return;
    }
#endif
#ifdef AMP_CPU_X86
    if (cpu_has_avx2_f16c()) {
        if (dt == AMP_F16) f32_to_f16_f16c(dst, src, n);
        else f32_to_bf16_avx2(dst, src, n);
        return;
    }
#endif
    if (dt == AMP_F16) f32_to_f16_generic(dst, src, n);
    else f32_to_bf16_generic(dst, src, n);
}

static void half_to_f32(float *dst, const uint16_t *src, amp_dtype dt, int64_t n) {
#ifdef AMP_CPU_AVX512
    if (amp_cpu_avx512_kernels()) {
        half_to_f32_avx512(dst, src, dt, n);
        return;
    }
#endif
#ifdef AMP_CPU_X86
    if (cpu_has_avx2_f16c()) {
        if (dt == AMP_F16) f16_to_f32_f16c(dst, src, n);
        else bf16_to_f32_avx2(dst, src, n);
        return;
    }
#endif
    if (dt == AMP_F16) f16_to_f32_generic(dst, src, n);
    else bf16_to_f32_generic(dst, src, n);
}

void amp_cpu_widen_tile(float *dst, const uint16_t *src, amp_dtype half_dt, int64_t n) {
    if (n > 0) half_to_f32(dst, src, half_dt, n);
}

void amp_cpu_round_tile(uint16_t *dst, amp_dtype half_dt, const float *src, int64_t n) {
    if (n > 0) f32_to_half(dst, half_dt, src, n);
}

/* ---- Cast ----------------------------------------------------------------------------------- */

static bool is_half(amp_dtype dt) {
    return dt == AMP_F16 || dt == AMP_BF16;
}

static bool is_known_dtype(amp_dtype dt) {
    return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16 || dt == AMP_I32;
}

/* One block of a cast whose dtype pair has been validated. */
static void cast_block(void *dst, amp_dtype dst_dt, const void *src, amp_dtype src_dt, int64_t n) {
    if (dst_dt == src_dt) {
        memcpy(dst, src, (size_t)n * amp_dtype_size(dst_dt));
    } else if (src_dt == AMP_F32 && is_half(dst_dt)) {
        f32_to_half(dst, dst_dt, src, n);
    } else if (is_half(src_dt) && dst_dt == AMP_F32) {
        half_to_f32(dst, src, src_dt, n);
    } else if (is_half(src_dt) && is_half(dst_dt)) {
        /* f16 -> f32 is exact, so one rounding happens: the same bits as a direct conversion. */
        float buf[CAST_BLOCK];
        for (int64_t i = 0; i < n; i += CAST_BLOCK) {
            int64_t len = n - i < CAST_BLOCK ? n - i : CAST_BLOCK;
            half_to_f32(buf, (const uint16_t *)src + i, src_dt, len);
            f32_to_half((uint16_t *)dst + i, dst_dt, buf, len);
        }
    } else if (src_dt == AMP_I32) {
        const int32_t *s = src;
        float *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = amp_i32_to_f32(s[i]);
    } else {
        const float *s = src;
        int32_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = amp_f32_to_i32(s[i]);
    }
}

amp_status amp_cpu_cast(amp_device_ctx *dev, void *dst, amp_dtype dst_dt, const void *src,
                        amp_dtype src_dt, int64_t n) {
    return amp_cpu_convert(dst, dst_dt, src, src_dt, n);
}

amp_status amp_cpu_convert(void *dst, amp_dtype dst_dt, const void *src, amp_dtype src_dt,
                           int64_t n) {
    if (!is_known_dtype(dst_dt) || !is_known_dtype(src_dt))
        return amp_fail(AMP_ERR_DTYPE, "amp_cpu_cast: unknown dtype (src %d, dst %d)", (int)src_dt,
                        (int)dst_dt);
    if ((src_dt == AMP_I32 || dst_dt == AMP_I32) && src_dt != dst_dt &&
        (is_half(src_dt) || is_half(dst_dt)))
        return amp_fail(AMP_ERR_UNSUPPORTED,
                        "amp_cpu_cast: %s -> %s is not supported (cast through f32)",
                        amp_dtype_name(src_dt), amp_dtype_name(dst_dt));
    if (n < 0) return amp_fail(AMP_ERR_INVALID_ARG, "amp_cpu_cast: n = %lld < 0", (long long)n);
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(dst);
    AMP_CHECK_ARG(src);
    size_t dst_es = amp_dtype_size(dst_dt), src_es = amp_dtype_size(src_dt);
    bool serial = n < AMP_CPU_PARALLEL_MIN;
#ifdef _OPENMP
    serial = serial || omp_in_parallel(); /* a tile of a kernel that is already parallel */
#endif
    if (serial) {
        cast_block(dst, dst_dt, src, src_dt, n);
        return AMP_OK;
    }
    int64_t n_blocks = (n + CAST_BLOCK - 1) / CAST_BLOCK;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < n_blocks; b++) {
        int64_t i = b * CAST_BLOCK, len = n - i < CAST_BLOCK ? n - i : CAST_BLOCK;
        cast_block((char *)dst + (size_t)i * dst_es, dst_dt, (const char *)src + (size_t)i * src_es,
                   src_dt, len);
    }
    return AMP_OK;
}

/* ---- Fill ----------------------------------------------------------------------------------- */

static void fill_block(void *dst, amp_dtype dt, int64_t n, float value) {
    switch (dt) {
    case AMP_F16:
    case AMP_BF16: {
        uint16_t bits = dt == AMP_F16 ? amp_f32_to_f16_bits(value) : amp_f32_to_bf16_bits(value);
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = bits;
        break;
    }
    case AMP_I32: {
        int32_t v = amp_f32_to_i32(value);
        int32_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = v;
        break;
    }
    default: {
        float *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = value;
        break;
    }
    }
}

static amp_status fill(const char *fn, void *dst, amp_dtype dt, int64_t n, float value) {
    if (!is_known_dtype(dt)) return amp_fail(AMP_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)dt);
    if (n < 0) return amp_fail(AMP_ERR_INVALID_ARG, "%s: n = %lld < 0", fn, (long long)n);
    if (n == 0) return AMP_OK;
    if (!dst) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'dst' is NULL", fn);
    size_t es = amp_dtype_size(dt);
    int64_t n_blocks = (n + CAST_BLOCK - 1) / CAST_BLOCK;
#pragma omp parallel for schedule(static) if (n >= AMP_CPU_PARALLEL_MIN)
    for (int64_t b = 0; b < n_blocks; b++) {
        int64_t i = b * CAST_BLOCK, len = n - i < CAST_BLOCK ? n - i : CAST_BLOCK;
        fill_block((char *)dst + (size_t)i * es, dt, len, value);
    }
    return AMP_OK;
}

amp_status amp_cpu_fill(amp_device_ctx *dev, void *dst, amp_dtype dt, int64_t n, float value) {
    return fill(__func__, dst, dt, n, value);
}

amp_status amp_cpu_fill_scalar(amp_device_ctx *dev, void *dst, amp_dtype dt, int64_t n,
                               const float *scalar, float scale) {
    AMP_CHECK_ARG(scalar);
    return fill(__func__, dst, dt, n, scale * *scalar);
}
