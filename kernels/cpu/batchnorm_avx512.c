/* Batch norm's channel loops (both batch norms' sums, the forward's normalising pass, the
 * backward's dx) in AVX-512 intrinsics, for f32, bf16 and f16 storage, each widened in the
 * registers (bf16 a shift, f16 vcvtph2ps: exact), so f16 needs none of the generic loops' f32
 * copies of a channel (batchnorm.c), which cost the f16 ConvNet's batch norm twice its time
 * (bench/RESULTS.md, "Figures behind decisions in the code", batchnorm_avx512.c). They visit
 * a channel in batchnorm_tiles.h's order and do its arithmetic in its order (eight double lanes
 * per tile, lane j taking the elements k + j, the tail and the lane tree by the same inline
 * functions), so the bits are the generic loops': the cudacpu tests hold both against the CUDA
 * kernels bit for bit.
 *
 * Why not the generic loops' AVX-512 clones: GCC 12 lowers their f32 -> double conversions
 * (__builtin_convertvector of eight lanes) piecewise, two 128-bit halves with extracts and
 * inserts, and the widening of bf16 four lanes at a time; two thirds of the sums' instructions
 * were those shuffles, all on one port (the same section). */
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/batchnorm_tiles.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/avx512_lanes.h"

#define BN_TARGET AMP_AVX512_TARGET

/* ---- loads and stores --------------------------------------------------------------------- */

/* Eight elements from i as f32 (bf16: a shift; f16: vcvtph2ps), for the sums' double lanes. */
BN_TARGET static inline __m256 load8(const void *p, amp_dtype dt, int64_t i) {
    if (dt == AMP_F32) return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (dt == AMP_F16) /* AVX-512F's vcvtph2ps (the 256-bit form is F16C's) */
        return _mm512_castps512_ps256(_mm512_cvtph_ps(_mm256_castsi128_si256(h)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Eight elements of dy from i, masked by ReLU's backward on y when y is given (amp_relu_bwd:
 * +0 where y <= 0; a NaN y lets dy through). */
BN_TARGET static inline __m256 load8_dy(const void *dy, const void *y, amp_dtype dt, int64_t i) {
    __m256 g = load8(dy, dt, i);
    if (!y) return g;
    __mmask8 le = _mm256_cmp_ps_mask(load8(y, dt, i), _mm256_setzero_ps(), _CMP_LE_OQ);
    return _mm256_mask_mov_ps(g, le, _mm256_setzero_ps());
}

/* ---- the channel sums ------------------------------------------------------------------- */

/* One eight-element step of `kind` (batchnorm_tiles.h's bn_sum_step8). */
BN_TARGET static inline __attribute__((always_inline)) void
sum_step8(bn_sum_kind kind, amp_dtype dt, const void *x, const void *dy, const void *y, int64_t at,
          __m512d c, __m512d *a, __m512d *b) {
    __m512d xv = _mm512_cvtps_pd(load8(x, dt, at));
    switch (kind) {
    case BN_SUM_X: *a = _mm512_add_pd(*a, xv); break;
    case BN_SUM_SQ_DEV:
        xv = _mm512_sub_pd(xv, c);
        *a = _mm512_add_pd(*a, _mm512_mul_pd(xv, xv));
        break;
    case BN_SUM_CENTERED:
        xv = _mm512_sub_pd(xv, c);
        *a = _mm512_add_pd(*a, xv);
        *b = _mm512_add_pd(*b, _mm512_mul_pd(xv, xv));
        break;
    case BN_SUM_DY: {
        __m512d gv = _mm512_cvtps_pd(load8_dy(dy, y, dt, at));
        *a = _mm512_add_pd(*a, gv);
        *b = _mm512_add_pd(*b, _mm512_mul_pd(_mm512_sub_pd(xv, c), gv));
        break;
    }
    }
}

/* batchnorm_tiles.h's channel_sums for one kind (a constant after inlining). */
BN_TARGET static inline __attribute__((always_inline)) void
sums_kind(const amp_bn_desc *d, bn_sum_kind kind, const void *x, const void *dy, const void *y,
          int64_t ch, double c, double *s1, double *s2) {
    amp_dtype dt = d->dtype;
    __m512d cv = _mm512_set1_pd(c);
    double a = 0.0, b = 0.0;
    int64_t tiles = channel_tiles(d);
    for (int64_t t = 0; t < tiles; t += BN_TILE_GROUP) {
        int g = tiles - t < BN_TILE_GROUP ? (int)(tiles - t) : BN_TILE_GROUP;
        int64_t off[BN_TILE_GROUP], len[BN_TILE_GROUP], common = AMP_CPU_REDUCE_CHUNK, k = 0;
        __m512d va[BN_TILE_GROUP], vb[BN_TILE_GROUP];
        for (int i = 0; i < g; i++) {
            off[i] = channel_tile(d, ch, t + i, &len[i]);
            common = len[i] < common ? len[i] : common;
            va[i] = vb[i] = _mm512_setzero_pd();
        }
        if (g == BN_TILE_GROUP)
            for (; k + 8 <= common; k += 8)
                for (int i = 0; i < BN_TILE_GROUP; i++)
                    sum_step8(kind, dt, x, dy, y, off[i] + k, cv, &va[i], &vb[i]);
        for (int i = 0; i < g; i++) {
            int64_t j = k;
            for (; j + 8 <= len[i]; j += 8)
                sum_step8(kind, dt, x, dy, y, off[i] + j, cv, &va[i], &vb[i]);
            double la[8], lb[8];
            _mm512_storeu_pd(la, va[i]);
            _mm512_storeu_pd(lb, vb[i]);
            for (; j < len[i]; j++)
                bn_sum_step1(kind, dt, x, dy, y, off[i] + j, c, &la[j & 7], &lb[j & 7]);
            a += lanes_total(la);
            b += lanes_total(lb);
        }
    }
    *s1 = a;
    if (s2) *s2 = b;
}

BN_TARGET static void bn_sums(const amp_bn_desc *d, bn_sum_kind kind, const void *x,
                              const void *dy, const void *y, int64_t ch, double c, double *s1,
                              double *s2) {
    switch (kind) {
    case BN_SUM_X: sums_kind(d, BN_SUM_X, x, dy, y, ch, c, s1, s2); break;
    case BN_SUM_SQ_DEV: sums_kind(d, BN_SUM_SQ_DEV, x, dy, y, ch, c, s1, s2); break;
    case BN_SUM_CENTERED: sums_kind(d, BN_SUM_CENTERED, x, dy, y, ch, c, s1, s2); break;
    case BN_SUM_DY: sums_kind(d, BN_SUM_DY, x, dy, y, ch, c, s1, s2); break;
    }
}

/* ---- the elementwise passes ------------------------------------------------------------- */

/* y = amp_bn_apply(x, scale, shift) (amp_mul_rn, then + shift), with amp_relu when d->relu
 * (x < 0 gives +0; NaN and -0 stay). */
BN_TARGET static void bn_apply(const amp_bn_desc *d, const void *x, int64_t ch, float scale,
                               float shift, void *y) {
    amp_dtype dt = d->dtype;
    __m512 sc = _mm512_set1_ps(scale), sh = _mm512_set1_ps(shift), zero = _mm512_setzero_ps();
    for (int64_t t = 0; t < channel_tiles(d); t++) {
        int64_t len, off = channel_tile(d, ch, t, &len);
        for (int64_t e = 0; e < len; e += 16) {
            __mmask16 m = avx512_lanes(len - e);
            __m512 v = _mm512_add_ps(_mm512_mul_ps(avx512_load16(x, dt, off + e, m), sc), sh);
            if (d->relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
            avx512_store16(y, dt, off + e, m, v);
        }
    }
}

/* dx = amp_bn_bwd_dx(x, dy, ...) = (dy - amp_mul_rn(x - mean, proj) - mean_dy) * k, dy masked
 * by y when given. dx may alias dy (each element is read before it is written). */
BN_TARGET static void bn_bwd_dx(const amp_bn_desc *d, const void *x, const void *dy,
                                const void *y, int64_t ch, float mean, float proj, float mean_dy,
                                float k, void *dx) {
    amp_dtype dt = d->dtype;
    __m512 vm = _mm512_set1_ps(mean), vp = _mm512_set1_ps(proj), vmd = _mm512_set1_ps(mean_dy);
    __m512 vk = _mm512_set1_ps(k), zero = _mm512_setzero_ps();
    for (int64_t t = 0; t < channel_tiles(d); t++) {
        int64_t len, off = channel_tile(d, ch, t, &len);
        for (int64_t e = 0; e < len; e += 16) {
            __mmask16 m = avx512_lanes(len - e);
            __m512 g = avx512_load16(dy, dt, off + e, m);
            if (y) {
                __m512 yv = avx512_load16(y, dt, off + e, m);
                g = _mm512_mask_mov_ps(g, _mm512_cmp_ps_mask(yv, zero, _CMP_LE_OQ), zero);
            }
            __m512 dev = _mm512_mul_ps(_mm512_sub_ps(avx512_load16(x, dt, off + e, m), vm), vp);
            __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_sub_ps(g, dev), vmd), vk);
            avx512_store16(dx, dt, off + e, m, v);
        }
    }
}

bool amp_cpu_bn_vectorised(const amp_bn_desc *d) {
    (void)d;
    return amp_cpu_avx512_kernels();
}

void amp_cpu_bn_sums_avx512(const amp_bn_desc *d, bn_sum_kind kind, const void *x, const void *dy,
                            const void *y, int64_t ch, double c, double *s1, double *s2) {
    bn_sums(d, kind, x, dy, y, ch, c, s1, s2);
}

void amp_cpu_bn_apply_avx512(const amp_bn_desc *d, const void *x, int64_t ch, float scale,
                             float shift, void *y) {
    bn_apply(d, x, ch, scale, shift, y);
}

void amp_cpu_bn_bwd_dx_avx512(const amp_bn_desc *d, const void *x, const void *dy, const void *y,
                              int64_t ch, float mean, float proj, float mean_dy, float k,
                              void *dx) {
    bn_bwd_dx(d, x, dy, y, ch, mean, proj, mean_dy, k, dx);
}

#else /* not x86-64 with GCC or Clang: the generic loops, and these are never called */

bool amp_cpu_bn_vectorised(const amp_bn_desc *d) {
    (void)d;
    return false;
}

void amp_cpu_bn_sums_avx512(const amp_bn_desc *d, bn_sum_kind kind, const void *x, const void *dy,
                            const void *y, int64_t ch, double c, double *s1, double *s2) {
    (void)d, (void)kind, (void)x, (void)dy, (void)y, (void)ch, (void)c, (void)s1, (void)s2;
}

void amp_cpu_bn_apply_avx512(const amp_bn_desc *d, const void *x, int64_t ch, float scale,
                             float shift, void *y) {
    (void)d, (void)x, (void)ch, (void)scale, (void)shift, (void)y;
}

void amp_cpu_bn_bwd_dx_avx512(const amp_bn_desc *d, const void *x, const void *dy, const void *y,
                              int64_t ch, float mean, float proj, float mean_dy, float k,
                              void *dx) {
    (void)d, (void)x, (void)dy, (void)y, (void)ch, (void)mean, (void)proj, (void)mean_dy, (void)k,
        (void)dx;
}
#endif
