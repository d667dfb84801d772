/* The CPU attention's bf16 tile products (kernels/cpu/attention_bf16.c) against a float64 GEMM of
 * the same bf16-rounded operands, for 'N' and 'T' on both sides, alpha and beta 0 or 1, and
 * shapes with every remainder (odd k, rows not a multiple of 4, columns not a multiple of 16):
 *  - small integers (every product and sum exact in f32): the same values exactly;
 *  - uniform values: within the f32 sums' rounding (k ulps of the sum of |products|);
 *  - A, B or both given as bf16 storage (the attention's q, k, v and dO): the same bits as the
 *    f32 operands they round from.
 * SKIPPED on a CPU without AVX512-BF16 (the attention uses oneDNN's sgemm there). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/cpu_backend.h"
#include "test_util.h"

#define NAME "test_cpu_attn_bf16"

static float bf16_round(float x) { return amp_bf16_bits_to_f32(amp_f32_to_bf16_bits(x)); }

static double op_at(char t, const float *x, int64_t ld, int64_t i, int64_t j) {
    return bf16_round(t == 'N' ? x[i * ld + j] : x[j * ld + i]);
}

static void run(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                bool integers) {
    int64_t lda = (ta == 'N' ? k : m) + 3, ldb = (tb == 'N' ? n : k) + 5, ldc = n + 2;
    int64_t ra = ta == 'N' ? m : k, rb = tb == 'N' ? k : n;
    float *a = malloc(sizeof(float) * (size_t)(ra * lda));
    float *b = malloc(sizeof(float) * (size_t)(rb * ldb));
    float *c = malloc(sizeof(float) * (size_t)(m * ldc));
    float *c0 = malloc(sizeof(float) * (size_t)(m * ldc));
    if (!a || !b || !c || !c0) abort();
    for (int64_t i = 0; i < ra * lda; i++)
        a[i] = integers ? (float)(rand() % 9 - 4) : (float)rand() / (float)RAND_MAX - 0.5f;
    for (int64_t i = 0; i < rb * ldb; i++)
        b[i] = integers ? (float)(rand() % 9 - 4) : (float)rand() / (float)RAND_MAX - 0.5f;
    for (int64_t i = 0; i < m * ldc; i++) c[i] = c0[i] = integers ? (float)(rand() % 5) : 0.25f;
    CHECK(amp_cpu_attn_gemm_bf16(ta, tb, m, n, k, alpha, a, false, lda, b, false, ldb, beta, c,
                                 ldc));
    uint16_t *ah = malloc(sizeof(uint16_t) * (size_t)(ra * lda));
    uint16_t *bh = malloc(sizeof(uint16_t) * (size_t)(rb * ldb));
    float *ch = malloc(sizeof(float) * (size_t)(m * ldc));
    if (!ah || !bh || !ch) abort();
    for (int64_t i = 0; i < ra * lda; i++) ah[i] = amp_f32_to_bf16_bits(a[i]);
    for (int64_t i = 0; i < rb * ldb; i++) bh[i] = amp_f32_to_bf16_bits(b[i]);
    for (int halves = 1; halves < 4; halves++) { /* A, B, both from bf16 storage */
        bool a_half = halves & 1, b_half = halves & 2;
        memcpy(ch, c0, sizeof(float) * (size_t)(m * ldc));
        CHECK(amp_cpu_attn_gemm_bf16(ta, tb, m, n, k, alpha, a_half ? (void *)ah : (void *)a,
                                     a_half, lda, b_half ? (void *)bh : (void *)b, b_half, ldb,
                                     beta, ch, ldc));
        CHECK_MSG(memcmp(ch, c, sizeof(float) * (size_t)(m * ldc)) == 0,
                  "%c%c m %lld n %lld k %lld: bf16 storage for %s gives other bits", ta, tb,
                  (long long)m, (long long)n, (long long)k,
                  halves == 1 ? "A" : halves == 2 ? "B" : "A and B");
    }
    free(ah), free(bh), free(ch);
    int bad = 0;
    double worst = 0.0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            if (j >= n) { /* past the columns: untouched */
                bad += c[i * ldc + j] != c0[i * ldc + j];
                continue;
            }
            double s = 0.0, mag = 0.0;
            for (int64_t p = 0; p < k; p++) {
                double t = op_at(ta, a, lda, i, p) * op_at(tb, b, ldb, p, j);
                s += t, mag += fabs(t);
            }
            double want = alpha * s + beta * c0[i * ldc + j], got = c[i * ldc + j];
            double tol =
                integers ? 0.0 : (double)(k + 2) * 0x1p-24 * (fabs(alpha) * mag + fabs(want));
            bad += fabs(got - want) > tol;
            worst = fmax(worst, fabs(got - want));
        }
    CHECK_MSG(bad == 0, "%c%c m %lld n %lld k %lld alpha %g beta %g %s: %d wrong (worst %.3g)", ta,
              tb, (long long)m, (long long)n, (long long)k, (double)alpha, (double)beta,
              integers ? "integers" : "uniform", bad, worst);
    free(a), free(b), free(c), free(c0);
}

int main(void) {
    if (!amp_cpu_avx512_bf16_kernels())
        return test_skip(NAME, "this CPU has no AVX512-BF16 (or AMP_CPU_ISA caps it)");
    srand(7);
    const int64_t shapes[][3] = {{1, 1, 1}, {5, 17, 3}, {64, 128, 64}, {37, 70, 33},
                                 {128, 32, 64}, {4, 200, 129}, {63, 16, 2}};
    const char t[2] = {'N', 'T'};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
        for (int x = 0; x < 2; x++)
            for (int y = 0; y < 2; y++)
                for (int beta = 0; beta < 2; beta++) {
                    const int64_t *d = shapes[s];
                    run(t[x], t[y], d[0], d[1], d[2], beta ? 0.125f : 1.0f, (float)beta, true);
                    run(t[x], t[y], d[0], d[1], d[2], 0.7f, (float)beta, false);
                }
    return test_summary(NAME);
}
