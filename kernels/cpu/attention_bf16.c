/* The CPU attention's tile products in bf16 (attention_tiles.h's attn_gemm), on CPUs with
 * AVX512-BF16: C = alpha op(A) op(B) + beta C for f32 tiles whose values are rounded to bf16 as
 * they are packed, multiplied exactly and summed in f32 by vdpbf16ps (two products a lane per
 * instruction, twice the f32 FMA's rate). For bf16 attention the q, k, v and dO tiles are read
 * from the tensors' bf16 storage as they are (a pair of bf16 values is one 32-bit word); P and
 * dS are rounded to bf16, as FlashAttention rounds them for its tensor-core products and as
 * PyTorch's half math path rounds the probabilities.
 * vdpbf16ps flushes denormal inputs and results to zero.
 *
 * op(A) (m x k) is packed as pairs of k: the 32-bit pair (op(A)[i][2q], op(A)[i][2q + 1]) at
 * ap[i * ars + q * aps], row-major pairs for 'N', column-major for 'T' (both written with
 * contiguous stores); op(B) (k x n) as pairs of k too, bp[q * np + j], zero-padded to n rounded
 * up to 16 columns and m to 16 rows ('T': b's rows as pairs, transposed 16 x 16 in registers).
 * Each block of 4 rows and up to 64 columns keeps its sums in 16 registers. The speed against
 * oneDNN's sgemm on the same tiles: bench/RESULTS.md ("the attention's products in bf16"). */
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/dnnl_util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/avx512_lanes.h"

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

static int64_t up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

/* Element i of an operand: f32, or bf16 storage (half). */
static inline const void *elem(const void *p, bool half, int64_t i) {
    return half ? (const void *)((const uint16_t *)p + i) : (const void *)((const float *)p + i);
}

/* 16 values from p (the first n, the rest 0) as bf16 zero-extended to 32-bit lanes: f32 rounded,
 * bf16 storage as it is. */
BF16_TARGET static inline __m512i lanes16(const void *p, bool half, int64_t n) {
    if (n <= 0) return _mm512_setzero_si512();
    if (half) return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(avx512_lanes(n), p));
    __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(avx512_lanes(n), p));
    return _mm512_cvtepu16_epi32(h);
}

/* The pairs (lo[l], hi[l]) of 16 columns of two rows (hi NULL: zeros). */
BF16_TARGET static inline __m512i pairs16(const void *lo, const void *hi, bool half, int64_t n) {
    __m512i a = lanes16(lo, half, n);
    if (!hi) return a;
    return _mm512_or_si512(a, _mm512_slli_epi32(lanes16(hi, half, n), 16));
}

/* The first n of 32 lanes (none for n <= 0). */
static inline __mmask32 lanes32(int64_t n) {
    return n <= 0 ? 0 : n >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << n) - 1u);
}

/* One row of k values (contiguous) as k / 2 pairs into out[0, kp2), zero-padded: bf16 storage
 * holds them as they are, two values a 32-bit word. */
BF16_TARGET static inline void row_pairs(const void *row, bool half, int64_t k, int64_t kp2,
                                         uint32_t *out) {
    for (int64_t q = 0; q < kp2; q += 16) {
        int64_t n = k - 2 * q; /* values left from pair q */
        __m512i v;
        if (half) {
            v = _mm512_maskz_loadu_epi16(lanes32(n), (const uint16_t *)row + 2 * q);
        } else {
            const float *f = (const float *)row + 2 * q;
            __m512 a = _mm512_maskz_loadu_ps(avx512_lanes(n), f);
            __m512 b = _mm512_maskz_loadu_ps(avx512_lanes(n - 16), f + 16);
            v = (__m512i)_mm512_cvtne2ps_pbh(b, a);
        }
        _mm512_mask_storeu_epi32(out + q, avx512_lanes(kp2 - q), v);
    }
}

/* op(A) (m x k) into ap: 'N' reads rows of a (row-major pairs, ars = kp2, aps = 1), 'T' columns
 * (column-major pairs, ars = 1, aps = mp). Rows m..mp are zero. */
BF16_TARGET static void pack_a(char ta, int64_t m, int64_t k, const void *a, bool half,
                               int64_t lda, int64_t mp, int64_t kp2, uint32_t *ap) {
    if (ta == 'N') {
        for (int64_t i = 0; i < m; i++)
            row_pairs(elem(a, half, i * lda), half, k, kp2, ap + i * kp2);
        memset(ap + m * kp2, 0, (size_t)((mp - m) * kp2) * sizeof *ap);
        return;
    }
    for (int64_t q = 0; q < kp2; q++) {
        int64_t lo = 2 * q * lda, hi = lo + lda;
        for (int64_t i = 0; i < mp; i += 16)
            _mm512_storeu_si512(ap + q * mp + i,
                                pairs16(elem(a, half, lo + i),
                                        2 * q + 1 < k ? elem(a, half, hi + i) : NULL, half, m - i));
    }
}

/* op(B) (k x n) into bp[q * np + j]: 'N' pairs two rows of b; 'T' takes 16 of b's rows (op(B)'s
 * columns) as pairs into rows (kp2r pairs each, zero past k and past n) and transposes them 16
 * by 16. Columns n..np are zero. */
BF16_TARGET static void pack_b(char tb, int64_t k, int64_t n, const void *b, bool half,
                               int64_t ldb, int64_t np, int64_t kp2, uint32_t *bp, uint32_t *rows) {
    if (tb == 'N') {
        for (int64_t q = 0; q < kp2; q++) {
            int64_t lo = 2 * q * ldb, hi = lo + ldb;
            for (int64_t j = 0; j < np; j += 16)
                _mm512_storeu_si512(bp + q * np + j,
                                    pairs16(elem(b, half, lo + j),
                                            2 * q + 1 < k ? elem(b, half, hi + j) : NULL, half,
                                            n - j));
        }
        return;
    }
    int64_t kp2r = up(kp2, 16);
    for (int64_t j0 = 0; j0 < np; j0 += 16) {
        for (int64_t r = 0; r < 16; r++) {
            if (j0 + r < n)
                row_pairs(elem(b, half, (j0 + r) * ldb), half, k, kp2r, rows + r * kp2r);
            else memset(rows + r * kp2r, 0, (size_t)kp2r * sizeof *rows);
        }
        for (int64_t q0 = 0; q0 < kp2; q0 += 16) {
            __m512 v[16]; /* pairs, moved as 32-bit lanes */
            for (int r = 0; r < 16; r++) v[r] = _mm512_loadu_ps(rows + r * kp2r + q0);
            avx512_transpose16(v);
            for (int64_t q = 0; q < 16 && q0 + q < kp2; q++)
                _mm512_storeu_ps(bp + (q0 + q) * np + j0, v[q]);
        }
    }
}

/* Rows i0..i0+4 (those below m stored) by columns j0..j0 + 16 nv (those below n stored). */
BF16_TARGET static inline __attribute__((always_inline)) void
block(int nv, int64_t i0, int64_t j0, int64_t m, int64_t n, int64_t kp2, const uint32_t *ap,
      int64_t ars, int64_t aps, const uint32_t *bp, int64_t np, float alpha, float beta, float *c,
      int64_t ldc) {
    __m512 acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    for (int64_t q = 0; q < kp2; q++) {
        __m512i b[4];
        for (int v = 0; v < nv; v++) b[v] = _mm512_loadu_si512(bp + q * np + j0 + 16 * v);
        for (int r = 0; r < 4; r++) {
            __m512i a = _mm512_set1_epi32((int)ap[(i0 + r) * ars + q * aps]);
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)a, (__m512bh)b[v]);
        }
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int r = 0; r < 4 && i0 + r < m; r++)
        for (int v = 0; v < nv; v++) {
            int64_t j = j0 + 16 * v, left = n - j;
            if (left <= 0) break;
            __mmask16 mk = avx512_lanes(left);
            float *p = c + (i0 + r) * ldc + j;
            __m512 y = _mm512_mul_ps(va, acc[r][v]);
            if (beta != 0.0f) y = _mm512_add_ps(y, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mk, p)));
            _mm512_mask_storeu_ps(p, mk, y);
        }
}

BF16_TARGET static bool gemm_bf16(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha,
                                  const void *a, bool a_half, int64_t lda, const void *b,
                                  bool b_half, int64_t ldb, float beta, float *c, int64_t ldc) {
    int64_t mp = up(m, 16), np = up(n, 16), kp2 = (k + 1) / 2;
    size_t words = (size_t)(mp * kp2 + kp2 * np + 16 * up(kp2, 16));
    uint32_t *ap = NULL;
    if (amp_dnnl_arena(AMP_DNNL_ARENA_SCRATCH, words * sizeof *ap, (void **)&ap) != AMP_OK)
        return false;
    uint32_t *bp = ap + mp * kp2, *rows = bp + kp2 * np;
    pack_a(ta, m, k, a, a_half, lda, mp, kp2, ap);
    pack_b(tb, k, n, b, b_half, ldb, np, kp2, bp, rows);
    int64_t ars = ta == 'N' ? kp2 : 1, aps = ta == 'N' ? 1 : mp;
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
        int64_t j0 = 0;
        for (; j0 + 64 <= np; j0 += 64)
            block(4, i0, j0, m, n, kp2, ap, ars, aps, bp, np, alpha, beta, c, ldc);
        for (; j0 + 32 <= np; j0 += 32)
            block(2, i0, j0, m, n, kp2, ap, ars, aps, bp, np, alpha, beta, c, ldc);
        for (; j0 < np; j0 += 16)
            block(1, i0, j0, m, n, kp2, ap, ars, aps, bp, np, alpha, beta, c, ldc);
    }
    return true;
}

bool amp_cpu_attn_gemm_bf16(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha,
                            const void *a, bool a_half, int64_t lda, const void *b, bool b_half,
                            int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m < 1 || n < 1 || k < 1) return false;
    return gemm_bf16(ta, tb, m, n, k, alpha, a, a_half, lda, b, b_half, ldb, beta, c, ldc);
}

#else
bool amp_cpu_attn_gemm_bf16(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha,
                            const void *a, bool a_half, int64_t lda, const void *b, bool b_half,
                            int64_t ldb, float beta, float *c, int64_t ldc) {
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)a_half, (void)lda;
    (void)b, (void)b_half, (void)ldb, (void)beta, (void)c, (void)ldc;
    return false;
}
#endif
