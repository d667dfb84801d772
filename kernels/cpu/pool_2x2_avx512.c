/* CPU max pooling with a 2x2 window, stride 2 and no padding (the ConvNet's), sixteen outputs
 * per AVX-512 vector. Row-wise: two input rows give a row of outputs; their even and odd columns
 * are split into four candidate vectors by two permutes per row, and the candidates are taken in
 * the window's row-major order with PyTorch's rule (strictly greater or NaN, kernels/math/pool.h),
 * so values and argmax are those of pool.c's scalar scan, bit for bit. The backward finds the
 * argmax again the same way (no index tensor, as pool.c) and writes dx row by row: 0 + dy at
 * the argmax, +0 elsewhere and in the rows and columns no window reads; windows do not overlap,
 * so there is nothing to accumulate.
 *
 * f16 and bf16 are widened in registers and stored back exactly (every value stored is one of
 * the inputs, or 0 + dy, so rounding keeps it); NaN is stored as 0x7fff, as core/half.h's
 * conversions do (avx512_lanes.h). The scalar scan it replaces widened each plane into an f32
 * copy and back (bench/RESULTS.md, "Figures behind decisions in the code", pool_2x2_avx512.c). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/avx512_lanes.h"

#define POOL_TARGET AMP_AVX512_TARGET

/* The four candidates of n (1..16) windows whose top-left corners are row[2j], j < n, for the
 * input rows at `row` and `row + w_in`: top-left, top-right, bottom-left, bottom-right. */
POOL_TARGET static inline void candidates(const void *x, amp_dtype dt, int64_t row, int64_t w_in,
                                          int64_t n, __m512 cand[4]) {
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd =
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __mmask16 lo = avx512_lanes(2 * n), hi = avx512_lanes(2 * n - 16);
    for (int r = 0; r < 2; r++) {
        int64_t at = row + r * w_in;
        __m512 a = avx512_load16(x, dt, at, lo), b = avx512_load16(x, dt, at + 16, hi);
        cand[2 * r] = _mm512_permutex2var_ps(a, even, b);
        cand[2 * r + 1] = _mm512_permutex2var_ps(a, odd, b);
    }
}

/* The windows' maxima in window order (amp_maxpool_takes), and which candidate holds each. */
POOL_TARGET static inline __m512 window_max(const __m512 cand[4], __m512i *which) {
    __m512 best = cand[0];
    __m512i at = _mm512_setzero_si512();
    for (int j = 1; j < 4; j++) {
        __mmask16 takes = _mm512_cmp_ps_mask(cand[j], best, _CMP_GT_OQ) |
                          _mm512_cmp_ps_mask(cand[j], cand[j], _CMP_UNORD_Q);
        best = _mm512_mask_mov_ps(best, takes, cand[j]);
        at = _mm512_mask_mov_epi32(at, takes, _mm512_set1_epi32(j));
    }
    *which = at;
    return best;
}

POOL_TARGET static void pool2x2_fwd_plane(const amp_pool_desc *d, const void *x, void *y) {
    for (int64_t oh = 0; oh < d->h_out; oh++)
        for (int64_t ow = 0; ow < d->w_out; ow += 16) {
            int64_t n = d->w_out - ow < 16 ? d->w_out - ow : 16;
            __m512 cand[4];
            __m512i which;
            candidates(x, d->dtype, 2 * oh * d->w_in + 2 * ow, d->w_in, n, cand);
            avx512_store16(y, d->dtype, oh * d->w_out + ow, avx512_lanes(n),
                           window_max(cand, &which));
        }
}

/* Zeroes count elements of a plane from element i. */
static void zero_elems(void *p, int64_t i, int64_t count, size_t elem) {
    if (count > 0) memset((char *)p + (size_t)i * elem, 0, (size_t)count * elem);
}

POOL_TARGET static void pool2x2_bwd_plane(const amp_pool_desc *d, const void *x, const void *dy,
                                          void *dx) {
    const __m512i lo_half =
        _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi_half =
        _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    amp_dtype dt = d->dtype;
    size_t elem = amp_dtype_size(dt);
    int64_t w_in = d->w_in;
    for (int64_t oh = 0; oh < d->h_out; oh++) {
        int64_t row = 2 * oh * w_in;
        for (int64_t ow = 0; ow < d->w_out; ow += 16) {
            int64_t n = d->w_out - ow < 16 ? d->w_out - ow : 16;
            __m512 cand[4], g[4];
            __m512i which;
            candidates(x, dt, row + 2 * ow, w_in, n, cand);
            (void)window_max(cand, &which);
            __m512 grad = avx512_load16(dy, dt, oh * d->w_out + ow, avx512_lanes(n));
            for (int j = 0; j < 4; j++) {
                __mmask16 here = _mm512_cmpeq_epi32_mask(which, _mm512_set1_epi32(j));
                g[j] = _mm512_add_ps(_mm512_setzero_ps(), _mm512_maskz_mov_ps(here, grad));
            }
            __mmask16 lo = avx512_lanes(2 * n), hi = avx512_lanes(2 * n - 16);
            for (int r = 0; r < 2; r++) { /* interleave left and right back into the row */
                int64_t at = row + r * w_in + 2 * ow;
                __m512 left = g[2 * r], right = g[2 * r + 1];
                avx512_store16(dx, dt, at, lo, _mm512_permutex2var_ps(left, lo_half, right));
                avx512_store16(dx, dt, at + 16, hi,
                               _mm512_permutex2var_ps(left, hi_half, right));
            }
        }
        for (int r = 0; r < 2; r++) /* the column no window reads (odd widths) */
            zero_elems(dx, row + r * w_in + 2 * d->w_out, w_in - 2 * d->w_out, elem);
    }
    zero_elems(dx, 2 * d->h_out * w_in, (d->h_in - 2 * d->h_out) * w_in, elem);
}

bool amp_cpu_pool2x2_vectorised(const amp_pool_desc *d) {
    return amp_cpu_avx512_kernels() && d->k == 2 && d->stride == 2 && d->pad == 0 &&
           2 * d->h_out <= d->h_in && 2 * d->w_out <= d->w_in;
}

void amp_cpu_pool2x2_fwd_plane(const amp_pool_desc *d, const void *x, void *y) {
    pool2x2_fwd_plane(d, x, y);
}

void amp_cpu_pool2x2_bwd_plane(const amp_pool_desc *d, const void *x, const void *dy, void *dx) {
    pool2x2_bwd_plane(d, x, dy, dx);
}

#else /* not x86-64 with GCC or Clang: pool.c's scalar scan, and these are never called */

bool amp_cpu_pool2x2_vectorised(const amp_pool_desc *d) {
    (void)d;
    return false;
}

void amp_cpu_pool2x2_fwd_plane(const amp_pool_desc *d, const void *x, void *y) {
    (void)d, (void)x, (void)y;
}

void amp_cpu_pool2x2_bwd_plane(const amp_pool_desc *d, const void *x, const void *dy, void *dx) {
    (void)d, (void)x, (void)dy, (void)dx;
}
#endif
