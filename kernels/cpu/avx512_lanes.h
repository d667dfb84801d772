/* Sixteen-lane loads and stores of f32, f16 and bf16 for the CPU backend's hand-vectorised
 * AVX-512 kernels (pool_2x2_avx512.c, batchnorm_avx512.c, channel_blocks_avx512.c, the casts of
 * memory.c, attention_bf16.c's packing): half values are widened in registers
 * and rounded back as core/half.h's conversions round them (to nearest even; NaN as 0x7fff).
 * x86-64 with GCC or Clang only; the functions are built for AVX-512 F, BW and VL, which the
 * caller checks at run time (amp_cpu_avx512_kernels). */
#ifndef AMP_KERNELS_CPU_AVX512_LANES_H
#define AMP_KERNELS_CPU_AVX512_LANES_H

#include <immintrin.h>
#include <stdint.h>

#include "amp/tensor.h"

#define AMP_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

/* The first n lanes (none for n <= 0, all sixteen for n >= 16). */
static inline __mmask16 avx512_lanes(int64_t n) {
    return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* r[i] becomes column i of the 16x16 matrix whose rows r held (32-bit lanes of any kind: f32
 * here, bf16 pairs in attention_bf16.c through the casts). */
AMP_AVX512_TARGET static inline void avx512_transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4j + k], 128-bit lane L: rows 4j..4j+3 of column 4L + k. */
    for (int j = 0; j < 4; j++) {
        __m512d a = _mm512_castps_pd(t[4 * j]), b = _mm512_castps_pd(t[4 * j + 2]);
        __m512d c = _mm512_castps_pd(t[4 * j + 1]), d = _mm512_castps_pd(t[4 * j + 3]);
        u[4 * j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * j + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        u[4 * j + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    for (int k = 0; k < 4; k++) {
        __m512 even_lo = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88);
        __m512 even_hi = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88);
        __m512 odd_lo = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xdd);
        __m512 odd_hi = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xdd);
        r[k] = _mm512_shuffle_f32x4(even_lo, even_hi, 0x88);
        r[8 + k] = _mm512_shuffle_f32x4(even_lo, even_hi, 0xdd);
        r[4 + k] = _mm512_shuffle_f32x4(odd_lo, odd_hi, 0x88);
        r[12 + k] = _mm512_shuffle_f32x4(odd_lo, odd_hi, 0xdd);
    }
}

/* Sixteen elements from p[i] as f32; masked-off lanes read nothing and hold 0. */
AMP_AVX512_TARGET static inline __m512 avx512_load16(const void *p, amp_dtype dt, int64_t i,
                                                     __mmask16 m) {
    if (dt == AMP_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i);
    if (dt == AMP_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* avx512_load16 with f16 NaN payloads widened unchanged, as core/half.h widens them (vcvtph2ps
 * sets the quiet bit): the exact widening amp_cpu_cast gives. */
AMP_AVX512_TARGET static inline __m512 avx512_load16_exact(const void *p, amp_dtype dt, int64_t i,
                                                           __mmask16 m) {
    __m512 v = avx512_load16(p, dt, i, m);
    if (dt != AMP_F16) return v;
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (!nan) return v;
    __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(0x8000)), 16);
    __m512i payload = _mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(0x3ff)), 13);
    __m512i bits = _mm512_or_si512(_mm512_or_si512(sign, payload), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(bits));
}

/* The lanes of m of v to p[i], rounded to dt as core/half.h's amp_f32_to_f16_bits and
 * amp_f32_to_bf16_bits round (vcvtps2ph: to nearest even, overflow to inf, subnormals kept; bf16
 * in integer lanes), NaN as 0x7fff. */
AMP_AVX512_TARGET static inline void avx512_store16(void *p, amp_dtype dt, int64_t i, __mmask16 m,
                                                    __m512 v) {
    if (dt == AMP_F32) {
        _mm512_mask_storeu_ps((float *)p + i, m, v);
        return;
    }
    __m256i h;
    if (dt == AMP_F16) {
        h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
        __m512i x = _mm512_castps_si512(v);
        __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), odd);
        h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
    }
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    h = _mm256_mask_mov_epi16(h, nan, _mm256_set1_epi16(0x7fff));
    _mm256_mask_storeu_epi16((uint16_t *)p + i, m, h);
}

#endif
