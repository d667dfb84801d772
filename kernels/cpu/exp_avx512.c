/* The exps of the CPU's row kernels (softmax, cross-entropy, GELU, sigmoid, attention) in AVX-512
 * registers, with amp_expf_core's bits (kernels/math/transcendental.h):
 *  - the same fused multiply-adds in the same order;
 *  - floor(z) by one rounding instruction (vrndscaleps) where the generic loop truncates, converts
 *    back and corrects: the same integer, in one instruction instead of four;
 *  - p 2^n by vscalefps, which rounds the exact product once, as amp_scale_pow2's two exact
 *    power-of-two factors do (a subnormal result included): one instruction instead of eight.
 * The row max and the sum of the exps keep kernels/math/lanes.h's 32 lanes (two registers) and
 * its combine, and the sum runs in the exps' pass instead of a pass of its own. GCC does not emit
 * these instructions from the portable loops, whose exp was most of the softmax's time
 * (bench/RESULTS.md, "softmax's exps in AVX-512 registers"). */
#include "kernels/cpu/exp_avx512.h"

#include <math.h>

#include "kernels/cpu/vector_exp.h"
#include "kernels/math/lanes.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/avx512_lanes.h"

/* amp_expf_core(v - m) on 16 lanes, the argument first clamped as amp_cpu_exp_shifted does. */
AMP_AVX512_TARGET static inline __m512 exp16(__m512 v, __m512 m) {
    __m512 t = _mm512_sub_ps(v, m);
    __mmask16 in_range = _mm512_cmp_ps_mask(t, _mm512_set1_ps(AMP_EXP_LOW), _CMP_GE_OQ);
    t = _mm512_mask_blend_ps(in_range, _mm512_set1_ps(AMP_EXP_ZERO_ARG), t);
    __m512 z = _mm512_fmadd_ps(_mm512_set1_ps(AMP_EXP_LOG2E), t, _mm512_set1_ps(0.5f));
    __m512 n = _mm512_roundscale_ps(z, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(AMP_EXP_LN2_HI), t);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(AMP_EXP_LN2_LO), r);
    __m512 r2 = _mm512_mul_ps(r, r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(AMP_EXP_Q5), r, _mm512_set1_ps(AMP_EXP_Q4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AMP_EXP_Q3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AMP_EXP_Q2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AMP_EXP_Q1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AMP_EXP_Q0));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

AMP_AVX512_TARGET void amp_avx512_exp_shifted(const float *v, int64_t n, float m, float *e) {
    __m512 mm = _mm512_set1_ps(m);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(e + j, exp16(_mm512_loadu_ps(v + j), mm));
    __mmask16 k = avx512_lanes(n - j);
    if (k) _mm512_mask_storeu_ps(e + j, k, exp16(_mm512_maskz_loadu_ps(k, v + j), mm));
}

/* kernels/math/lanes.h's halving of two registers' 32 lanes, in registers, lane l < off taking
 * op(lane l, lane l + off): the sum, or the max of lanes without a NaN (vmaxps(a, b) is
 * a > b ? a : b, amp_lanes_max2's choice there). */
#define AMP_AVX512_HALVINGS(op, v)                                                                 \
    do {                                                                                           \
        v = op(v, _mm512_shuffle_f32x4(v, v, 0xee)); /* lanes 8..15 onto 0..7 */                   \
        v = op(v, _mm512_shuffle_f32x4(v, v, 0x01)); /* 4..7 onto 0..3 */                          \
        v = op(v, _mm512_permute_ps(v, 0x0e));       /* 2, 3 onto 0, 1 */                          \
        v = op(v, _mm512_permute_ps(v, 0x01));       /* 1 onto 0 */                                \
    } while (0)

AMP_AVX512_TARGET static inline float combine_sum(__m512 lo, __m512 hi) {
    __m512 v = _mm512_add_ps(lo, hi);
    AMP_AVX512_HALVINGS(_mm512_add_ps, v);
    return _mm512_cvtss_f32(v);
}

AMP_AVX512_TARGET static inline float combine_max(__m512 lo, __m512 hi) {
    __m512 v = _mm512_max_ps(lo, hi);
    AMP_AVX512_HALVINGS(_mm512_max_ps, v);
    return _mm512_cvtss_f32(v);
}

/* acc with the lanes k where x is above it (or acc is NaN) kept, the others taking x:
 * amp_lanes_max2(acc, x) in each lane of k. */
AMP_AVX512_TARGET static inline __m512 max2(__m512 acc, __m512 x, __mmask16 k) {
    __mmask16 keep =
        _mm512_cmp_ps_mask(acc, x, _CMP_GT_OQ) | _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(acc, k & (__mmask16)~keep, x);
}

/* The lanes' max through max2, for a row with a NaN (its chain of mask operations is about three
 * times slower than vmaxps's). */
AMP_AVX512_TARGET static float row_max_nan(const float *v, int64_t n) {
    __m512 lo = _mm512_set1_ps(-INFINITY), hi = lo;
    int64_t j = 0;
    for (; j + AMP_LANES <= n; j += AMP_LANES) {
        lo = max2(lo, _mm512_loadu_ps(v + j), 0xffff);
        hi = max2(hi, _mm512_loadu_ps(v + j + 16), 0xffff);
    }
    __mmask16 klo = avx512_lanes(n - j), khi = avx512_lanes(n - j - 16);
    lo = max2(lo, _mm512_maskz_loadu_ps(klo, v + j), klo);
    hi = max2(hi, _mm512_maskz_loadu_ps(khi, v + j + 16), khi);
    float acc[AMP_LANES];
    _mm512_storeu_ps(acc, lo);
    _mm512_storeu_ps(acc + 16, hi);
    return amp_lanes_combine(acc, 1);
}

/* Without a NaN, vmaxps(acc, x) is acc > x ? acc : x, which is amp_lanes_max2's choice, signed
 * zeros included; one compare per two registers watches for a NaN, and a row that has one is
 * taken again by row_max_nan (where vmaxps would drop the NaN). */
AMP_AVX512_TARGET float amp_avx512_row_max(const float *v, int64_t n) {
    __m512 lo = _mm512_set1_ps(-INFINITY), hi = lo;
    __mmask16 nan = 0;
    int64_t j = 0;
    for (; j + AMP_LANES <= n; j += AMP_LANES) {
        __m512 a = _mm512_loadu_ps(v + j), b = _mm512_loadu_ps(v + j + 16);
        nan |= _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
        lo = _mm512_max_ps(lo, a);
        hi = _mm512_max_ps(hi, b);
    }
    __mmask16 klo = avx512_lanes(n - j), khi = avx512_lanes(n - j - 16);
    __m512 a = _mm512_maskz_loadu_ps(klo, v + j), b = _mm512_maskz_loadu_ps(khi, v + j + 16);
    nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
    if (nan) return row_max_nan(v, n);
    lo = _mm512_mask_max_ps(lo, klo, lo, a);
    hi = _mm512_mask_max_ps(hi, khi, hi, b);
    return combine_max(lo, hi);
}

AMP_AVX512_TARGET float amp_avx512_exp_sum(const float *v, int64_t n, float m, float *e) {
    __m512 mm = _mm512_set1_ps(m), lo = _mm512_setzero_ps(), hi = lo;
    int64_t j = 0;
    for (; j + AMP_LANES <= n; j += AMP_LANES) {
        __m512 a = exp16(_mm512_loadu_ps(v + j), mm), b = exp16(_mm512_loadu_ps(v + j + 16), mm);
        _mm512_storeu_ps(e + j, a);
        _mm512_storeu_ps(e + j + 16, b);
        lo = _mm512_add_ps(lo, a);
        hi = _mm512_add_ps(hi, b);
    }
    __mmask16 klo = avx512_lanes(n - j), khi = avx512_lanes(n - j - 16);
    if (klo) {
        __m512 a = exp16(_mm512_maskz_loadu_ps(klo, v + j), mm);
        _mm512_mask_storeu_ps(e + j, klo, a);
        lo = _mm512_mask_add_ps(lo, klo, lo, a);
    }
    if (khi) {
        __m512 b = exp16(_mm512_maskz_loadu_ps(khi, v + j + 16), mm);
        _mm512_mask_storeu_ps(e + j + 16, khi, b);
        hi = _mm512_mask_add_ps(hi, khi, hi, b);
    }
    return combine_sum(lo, hi);
}

/* A term of amp_avx512_row_sum: x, or (x - c)^2 rounded before it is added. */
AMP_AVX512_TARGET static inline __m512 row_term(__m512 x, __m512 c, bool squares) {
    if (!squares) return x;
    __m512 t = _mm512_sub_ps(x, c);
    return _mm512_mul_ps(t, t);
}

AMP_AVX512_TARGET float amp_avx512_row_sum(const float *v, int64_t n, float c, bool squares) {
    __m512 cc = _mm512_set1_ps(c), lo = _mm512_setzero_ps(), hi = lo;
    int64_t j = 0;
    for (; j + AMP_LANES <= n; j += AMP_LANES) {
        lo = _mm512_add_ps(lo, row_term(_mm512_loadu_ps(v + j), cc, squares));
        hi = _mm512_add_ps(hi, row_term(_mm512_loadu_ps(v + j + 16), cc, squares));
    }
    __mmask16 klo = avx512_lanes(n - j), khi = avx512_lanes(n - j - 16);
    __m512 a = _mm512_maskz_loadu_ps(klo, v + j), b = _mm512_maskz_loadu_ps(khi, v + j + 16);
    lo = _mm512_mask_add_ps(lo, klo, lo, row_term(a, cc, squares));
    hi = _mm512_mask_add_ps(hi, khi, hi, row_term(b, cc, squares));
    return combine_sum(lo, hi);
}

#else /* not x86-64 with GCC or Clang: amp_cpu_avx512_kernels() is false and these are not
       * called; should one be, it gives the same bits by the portable loops */

void amp_avx512_exp_shifted(const float *v, int64_t n, float m, float *e) {
    for (int64_t j = 0; j < n; j++) {
        float t = v[j] - m;
        e[j] = amp_expf_core(t >= AMP_EXP_LOW ? t : AMP_EXP_ZERO_ARG);
    }
}

float amp_avx512_row_max(const float *v, int64_t n) {
    float acc[AMP_LANES];
    for (int l = 0; l < AMP_LANES; l++) acc[l] = -INFINITY;
    for (int64_t j = 0; j < n; j++) acc[j % AMP_LANES] = amp_lanes_max2(acc[j % AMP_LANES], v[j]);
    return amp_lanes_combine(acc, 1);
}

float amp_avx512_row_sum(const float *v, int64_t n, float c, bool squares) {
    float acc[AMP_LANES] = {0};
    for (int64_t j = 0; j < n; j++) {
        float t = v[j] - c;
        acc[j % AMP_LANES] += squares ? amp_mul_rn(t, t) : v[j];
    }
    return amp_lanes_combine(acc, 0);
}

float amp_avx512_exp_sum(const float *v, int64_t n, float m, float *e) {
    float acc[AMP_LANES] = {0};
    amp_avx512_exp_shifted(v, n, m, e);
    for (int64_t j = 0; j < n; j++) acc[j % AMP_LANES] += e[j];
    return amp_lanes_combine(acc, 0);
}

#endif
