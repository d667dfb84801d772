/* The exps of the CPU's row kernels (softmax, cross-entropy, GELU, sigmoid, attention) and the
 * row max and sums around them in AVX2 registers, with amp_expf_core's bits
 * (kernels/math/transcendental.h), for CPUs without AVX-512 (exp_avx512.c's eight-lane twin):
 *  - the same fused multiply-adds in the same order (FMA3; every other product a plain vmulps);
 *  - floor(z) by vroundps where the generic loop truncates, converts back and corrects: the same
 *    integer (z is never -0: z = log2(e) t + 1/2 rounded, and a sum that cancels to 0 is +0);
 *  - p 2^n as amp_scale_pow2 takes it, with no vscalefps in AVX2: the two exact powers of two
 *    2^floor(n/2) and 2^(n - floor(n/2)) built in the exponent field (n in [-151, 128] keeps both
 *    in [-76, 64]), two vmulps, so that the one rounding into a subnormal is the portable one.
 * The row max and the sum of the exps keep kernels/math/lanes.h's 32 lanes (four registers) and
 * its combine, the sum in the exps' pass. GCC vectorises the portable loops at this width too,
 * but as three passes (the clamp, the exp, the sum) with a four-instruction floor, and the max
 * with a compare-and-blend per vector for the NaN rule (bench/results/2026-12-02.md). */
#include "kernels/cpu/exp_avx2.h"

#include <math.h>

#include "kernels/cpu/vector_exp.h"
#include "kernels/math/lanes.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/avx2_lanes.h"

/* Registers of a row's 32 lanes (register k: lanes 8k..8k+7). */
#define AVX2_REGS (AMP_LANES / 8)

/* 2^k for -126 <= k <= 127 in each lane, exactly (amp_pow2i). */
AMP_AVX2_TARGET static inline __m256 pow2i8(__m256i k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

/* amp_expf_core(v - m) on 8 lanes, the argument first clamped as amp_cpu_exp_shifted does. */
AMP_AVX2_TARGET static inline __m256 exp8(__m256 v, __m256 m) {
    __m256 t = _mm256_sub_ps(v, m);
    __m256 in_range = _mm256_cmp_ps(t, _mm256_set1_ps(AMP_EXP_LOW), _CMP_GE_OQ);
    t = _mm256_blendv_ps(_mm256_set1_ps(AMP_EXP_ZERO_ARG), t, in_range);
    __m256 z = _mm256_fmadd_ps(_mm256_set1_ps(AMP_EXP_LOG2E), t, _mm256_set1_ps(0.5f));
    __m256 fn = _mm256_floor_ps(z);
    __m256 r = _mm256_fmadd_ps(fn, _mm256_set1_ps(AMP_EXP_LN2_HI), t);
    r = _mm256_fmadd_ps(fn, _mm256_set1_ps(AMP_EXP_LN2_LO), r);
    __m256 r2 = _mm256_mul_ps(r, r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(AMP_EXP_Q5), r, _mm256_set1_ps(AMP_EXP_Q4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AMP_EXP_Q3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AMP_EXP_Q2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AMP_EXP_Q1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AMP_EXP_Q0));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
    __m256i n = _mm256_cvttps_epi32(fn); /* exact: fn is an integer in [-151, 128] */
    __m256i half = _mm256_srai_epi32(n, 1);
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2i8(half)), pow2i8(_mm256_sub_epi32(n, half)));
}

AMP_AVX2_TARGET void amp_avx2_exp_shifted(const float *v, int64_t n, float m, float *e) {
    __m256 mm = _mm256_set1_ps(m);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(e + j, exp8(_mm256_loadu_ps(v + j), mm));
    if (j < n) {
        __m256i k = avx2_lanes(n - j);
        _mm256_maskstore_ps(e + j, k, exp8(_mm256_maskload_ps(v + j, k), mm));
    }
}

/* kernels/math/lanes.h's halving of the 32 lanes, lane l < off taking op(lane l, lane l + off):
 * the sum, or the max of lanes without a NaN (vmaxps(a, b) is a > b ? a : b, amp_lanes_max2's
 * choice there, signed zeros included). */
AMP_AVX2_TARGET static inline float combine_sum(const __m256 a[AVX2_REGS]) {
    __m256 y = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3])); /* 16, 8 */
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));  /* 4 */
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));                                        /* 2 */
    return _mm_cvtss_f32(_mm_add_ps(x, _mm_shuffle_ps(x, x, 1)));                  /* 1 */
}

AMP_AVX2_TARGET static inline float combine_max(const __m256 a[AVX2_REGS]) {
    __m256 y = _mm256_max_ps(_mm256_max_ps(a[0], a[2]), _mm256_max_ps(a[1], a[3]));
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ps(x, _mm_shuffle_ps(x, x, 1)));
}

/* amp_lanes_max2(acc, x) in each lane: acc where it is above x or NaN, else x. */
AMP_AVX2_TARGET static inline __m256 max2(__m256 acc, __m256 x) {
    __m256 keep =
        _mm256_or_ps(_mm256_cmp_ps(acc, x, _CMP_GT_OQ), _mm256_cmp_ps(acc, acc, _CMP_UNORD_Q));
    return _mm256_blendv_ps(x, acc, keep);
}

/* The lanes' max through max2, for a row with a NaN (three instructions a vector where vmaxps
 * takes one). */
AMP_AVX2_TARGET static float row_max_nan(const float *v, int64_t n) {
    __m256 a[AVX2_REGS];
    for (int k = 0; k < AVX2_REGS; k++) a[k] = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + AMP_LANES <= n; j += AMP_LANES)
        for (int k = 0; k < AVX2_REGS; k++) a[k] = max2(a[k], _mm256_loadu_ps(v + j + 8 * k));
    for (int k = 0; k < AVX2_REGS; k++) {
        __m256i lanes = avx2_lanes(n - j - 8 * k);
        __m256 x = _mm256_maskload_ps(v + j + 8 * k, lanes);
        a[k] = _mm256_blendv_ps(a[k], max2(a[k], x), _mm256_castsi256_ps(lanes));
    }
    float acc[AMP_LANES];
    for (int k = 0; k < AVX2_REGS; k++) _mm256_storeu_ps(acc + 8 * k, a[k]);
    return amp_lanes_combine(acc, 1);
}

/* Without a NaN, vmaxps(acc, x) is acc > x ? acc : x, which is amp_lanes_max2's choice; one
 * compare per two registers watches for a NaN, and a row that has one is taken again by
 * row_max_nan (where vmaxps would drop the NaN). */
AMP_AVX2_TARGET float amp_avx2_row_max(const float *v, int64_t n) {
    __m256 a[AVX2_REGS], nan = _mm256_setzero_ps();
    for (int k = 0; k < AVX2_REGS; k++) a[k] = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + AMP_LANES <= n; j += AMP_LANES) {
        __m256 x[AVX2_REGS];
        for (int k = 0; k < AVX2_REGS; k++) x[k] = _mm256_loadu_ps(v + j + 8 * k);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(x[0], x[1], _CMP_UNORD_Q));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(x[2], x[3], _CMP_UNORD_Q));
        for (int k = 0; k < AVX2_REGS; k++) a[k] = _mm256_max_ps(a[k], x[k]);
    }
    for (int k = 0; k < AVX2_REGS; k++) { /* the tail: masked-off lanes read 0 and keep a[k] */
        __m256i lanes = avx2_lanes(n - j - 8 * k);
        __m256 x = _mm256_maskload_ps(v + j + 8 * k, lanes);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        a[k] = _mm256_blendv_ps(a[k], _mm256_max_ps(a[k], x), _mm256_castsi256_ps(lanes));
    }
    if (_mm256_movemask_ps(nan)) return row_max_nan(v, n);
    return combine_max(a);
}

AMP_AVX2_TARGET float amp_avx2_exp_sum(const float *v, int64_t n, float m, float *e) {
    __m256 mm = _mm256_set1_ps(m), a[AVX2_REGS];
    for (int k = 0; k < AVX2_REGS; k++) a[k] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + AMP_LANES <= n; j += AMP_LANES)
        for (int k = 0; k < AVX2_REGS; k++) {
            __m256 x = exp8(_mm256_loadu_ps(v + j + 8 * k), mm);
            _mm256_storeu_ps(e + j + 8 * k, x);
            a[k] = _mm256_add_ps(a[k], x);
        }
    for (int k = 0; k < AVX2_REGS && j + 8 * k < n; k++) {
        __m256i lanes = avx2_lanes(n - j - 8 * k);
        __m256 x = exp8(_mm256_maskload_ps(v + j + 8 * k, lanes), mm);
        _mm256_maskstore_ps(e + j + 8 * k, lanes, x);
        a[k] = _mm256_blendv_ps(a[k], _mm256_add_ps(a[k], x), _mm256_castsi256_ps(lanes));
    }
    return combine_sum(a);
}

/* A term of amp_avx2_row_sum: x, or (x - c)^2 rounded before it is added. */
AMP_AVX2_TARGET static inline __m256 row_term(__m256 x, __m256 c, bool squares) {
    if (!squares) return x;
    __m256 t = _mm256_sub_ps(x, c);
    return _mm256_mul_ps(t, t);
}

AMP_AVX2_TARGET float amp_avx2_row_sum(const float *v, int64_t n, float c, bool squares) {
    __m256 cc = _mm256_set1_ps(c), a[AVX2_REGS];
    for (int k = 0; k < AVX2_REGS; k++) a[k] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + AMP_LANES <= n; j += AMP_LANES)
        for (int k = 0; k < AVX2_REGS; k++)
            a[k] = _mm256_add_ps(a[k], row_term(_mm256_loadu_ps(v + j + 8 * k), cc, squares));
    for (int k = 0; k < AVX2_REGS && j + 8 * k < n; k++) {
        __m256i lanes = avx2_lanes(n - j - 8 * k);
        __m256 x = row_term(_mm256_maskload_ps(v + j + 8 * k, lanes), cc, squares);
        a[k] = _mm256_blendv_ps(a[k], _mm256_add_ps(a[k], x), _mm256_castsi256_ps(lanes));
    }
    return combine_sum(a);
}

#else /* not x86-64 with GCC or Clang: the level is never avx2 and these are not called; should
       * one be, it gives the same bits by the portable loops */

void amp_avx2_exp_shifted(const float *v, int64_t n, float m, float *e) {
    for (int64_t j = 0; j < n; j++) {
        float t = v[j] - m;
        e[j] = amp_expf_core(t >= AMP_EXP_LOW ? t : AMP_EXP_ZERO_ARG);
    }
}

float amp_avx2_row_max(const float *v, int64_t n) {
    float acc[AMP_LANES];
    for (int l = 0; l < AMP_LANES; l++) acc[l] = -INFINITY;
    for (int64_t j = 0; j < n; j++) acc[j % AMP_LANES] = amp_lanes_max2(acc[j % AMP_LANES], v[j]);
    return amp_lanes_combine(acc, 1);
}

float amp_avx2_row_sum(const float *v, int64_t n, float c, bool squares) {
    float acc[AMP_LANES] = {0};
    for (int64_t j = 0; j < n; j++) {
        float t = v[j] - c;
        acc[j % AMP_LANES] += squares ? amp_mul_rn(t, t) : v[j];
    }
    return amp_lanes_combine(acc, 0);
}

float amp_avx2_exp_sum(const float *v, int64_t n, float m, float *e) {
    float acc[AMP_LANES] = {0};
    amp_avx2_exp_shifted(v, n, m, e);
    for (int64_t j = 0; j < n; j++) acc[j % AMP_LANES] += e[j];
    return amp_lanes_combine(acc, 0);
}

#endif
