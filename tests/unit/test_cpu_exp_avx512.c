/* The row kernels' exps in AVX-512 registers (kernels/cpu/exp_avx512.c) give the bits of the
 * portable functions that the CUDA kernels run too:
 *  - amp_avx512_exp_shifted against amp_expf_core after vector_exp.h's clamp: every float argument
 *    from -106 to -85 (where e^x leaves the normal range and vscalefps rounds into a subnormal),
 *    every 251st one elsewhere, -inf, the range's ends, with shifts m;
 *  - rows (amp_cpu_row_max_sumexp, and the AVX-512 max and exp-sum directly) against a reference
 *    written here: a CUDA warp's xor butterfly over 32 lanes, exactly as a warp runs it, and
 *    amp_softmax_exp per element. Every length from 0 to 100 and a few long ones (the masked
 *    tails), ties of +0 and -0, partly and fully masked rows, NaN anywhere, infinities. Without
 *    AVX-512 (or under AMP_CPU_ISA=avx2) the row checks still hold the portable loops;
 *  - amp_avx512_row_sum (AVX-512 only), the plain sum and LayerNorm's squares about a centre, on
 *    the same rows, against the butterfly over 32 lanes summed in order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/exp_avx512.h"
#include "kernels/cpu/vector_exp.h"
#include "kernels/math/lanes.h"
#include "kernels/math/softmax.h"
#include "test_util.h"

#define NAME "test_cpu_exp_avx512"

/* Equal bits, or both NaN (a NaN's payload is not part of the contract). */
static bool same(float a, float b) {
    return (a != a && b != b) || amp_f32_bits(a) == amp_f32_bits(b);
}

static float ref_exp(float v, float m) {
    float t = v - m;
    return amp_expf_core(t >= AMP_EXP_LOW ? t : AMP_EXP_ZERO_ARG);
}

/* Lane 0 after the warp's butterfly: every lane t[l] = f(acc[l], acc[l ^ off]). */
static float butterfly(const float *lanes, int max) {
    float acc[AMP_LANES], t[AMP_LANES];
    memcpy(acc, lanes, sizeof acc);
    for (int off = AMP_LANES / 2; off >= 1; off /= 2) {
        for (int l = 0; l < AMP_LANES; l++)
            t[l] = max ? amp_lanes_max2(acc[l], acc[l ^ off]) : acc[l] + acc[l ^ off];
        memcpy(acc, t, sizeof acc);
    }
    return acc[0];
}

static float ref_max(const float *v, int64_t n) {
    float acc[AMP_LANES];
    for (int l = 0; l < AMP_LANES; l++) acc[l] = -INFINITY;
    for (int64_t j = 0; j < n; j++) acc[j % AMP_LANES] = amp_lanes_max2(acc[j % AMP_LANES], v[j]);
    return butterfly(acc, 1);
}

static float ref_sum(const float *e, int64_t n) {
    float acc[AMP_LANES] = {0};
    for (int64_t j = 0; j < n; j++) acc[j % AMP_LANES] += e[j];
    return butterfly(acc, 0);
}

/* LayerNorm's sum of squares about c (kernels/math/layernorm.h): each square rounded first. */
static float ref_sum_sq(const float *v, int64_t n, float c) {
    float acc[AMP_LANES] = {0};
    for (int64_t j = 0; j < n; j++) {
        float t = v[j] - c;
        acc[j % AMP_LANES] += amp_mul_rn(t, t);
    }
    return butterfly(acc, 0);
}

/* One block of arguments through amp_avx512_exp_shifted; returns the mismatches. */
static int exp_block(const float *v, int64_t n, float m, float *e) {
    amp_avx512_exp_shifted(v, n, m, e);
    int bad = 0;
    for (int64_t j = 0; j < n; j++)
        if (!same(e[j], ref_exp(v[j], m)) && bad++ < 3)
            fprintf(stderr, "  exp(%a - %a): %a, expected %a\n", v[j], m, e[j], ref_exp(v[j], m));
    return bad;
}

static void exp_arguments(void) {
    enum { BLOCK = 4093 }; /* odd, so that every block ends in a masked tail */
    static float v[BLOCK], e[BLOCK];
    int64_t n = 0, checked = 0;
    int bad = 0;
    /* every float from -106 to -85: bits 0xc2d40000 down to 0xc2aa0000 (negative: larger bits are
     * smaller numbers) */
    for (uint32_t u = 0xc2aa0000u; u <= 0xc2d40000u; u++) {
        v[n++] = amp_f32_from_bits(u);
        if (n == BLOCK) bad += exp_block(v, n, 0.0f, e), checked += n, n = 0;
    }
    /* every 251st float from -106 to 88.72 (the range amp_cpu_exp_shifted is given) */
    for (uint32_t u = 0; u <= 0x42d40000u; u += 251) {
        if (u <= 0x42b17217u) v[n++] = amp_f32_from_bits(u);
        if (n == BLOCK) bad += exp_block(v, n, 0.0f, e), checked += n, n = 0;
        v[n++] = amp_f32_from_bits(u | 0x80000000u);
        if (n == BLOCK) bad += exp_block(v, n, 0.0f, e), checked += n, n = 0;
    }
    const float edges[] = {-INFINITY, AMP_EXP_LOW, nextafterf(AMP_EXP_LOW, -200.0f),
                           nextafterf(AMP_EXP_LOW, 0.0f), 88.72283935546875f, -0.0f, 0.0f,
                           -87.33654f, -1e-30f, 1e-30f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) v[n++] = edges[i];
    bad += exp_block(v, n, 0.0f, e), checked += n;
    /* shifted by a row max, in place (e = v), every length of tail */
    for (int len = 1; len <= 40; len++) {
        float w[40], r[40];
        for (int j = 0; j < len; j++) w[j] = r[j] = (float)(j * 7 % 23) - 3.5f;
        amp_avx512_exp_shifted(w, len, 19.25f, w);
        for (int j = 0; j < len; j++) bad += !same(w[j], ref_exp(r[j], 19.25f));
        checked += len;
    }
    CHECK_MSG(bad == 0, "exp: %d of %lld arguments differ from amp_expf_core", bad,
              (long long)checked);
}

enum {
    KIND_RANDOM,
    KIND_ZEROS,
    KIND_MASKED,
    KIND_ALL_MASKED,
    KIND_NAN,
    KIND_INF,
    KIND_WIDE,
    N_KINDS
};

static void fill(float *v, int64_t n, int kind) {
    for (int64_t j = 0; j < n; j++) {
        float u = (float)rand() / (float)RAND_MAX;
        switch (kind) {
        case KIND_ZEROS: /* ties of +0 and -0 among -1s, so that which lane wins shows */
            v[j] = rand() % 3 ? -1.0f : rand() % 2 ? 0.0f : -0.0f;
            break;
        case KIND_ALL_MASKED:
            v[j] = -INFINITY;
            break;
        case KIND_WIDE:
            v[j] = 240.0f * u - 200.0f;
            break; /* exps underflow to 0 and subnormals */
        default:
            v[j] = 8.0f * u - 4.0f;
        }
    }
    if (n == 0) return;
    if (kind == KIND_MASKED)
        for (int64_t j = 0; j < n; j += 1 + rand() % 3) v[j] = -INFINITY;
    if (kind == KIND_NAN) v[rand() % n] = NAN;
    if (kind == KIND_INF) v[rand() % n] = INFINITY;
}

static void rows(void) {
    enum { LONGEST = 1031 };
    static float v[LONGEST], e[LONGEST], e_ref[LONGEST];
    int bad = 0, cases = 0;
    const bool avx512 = amp_cpu_avx512_kernels();
    for (int64_t n = 0; n <= LONGEST; n = n < 100 ? n + 1 : n == 100 ? 767 : n + 132) {
        for (int kind = 0; kind < N_KINDS; kind++) {
            fill(v, n, kind);
            float m_ref = ref_max(v, n);
            for (int64_t j = 0; j < n; j++) e_ref[j] = amp_softmax_exp(v[j], m_ref);
            float s_ref = ref_sum(e_ref, n), m, s;
            amp_cpu_row_max_sumexp(v, n, e, &m, &s);
            bool ok = same(m, m_ref) && same(s, s_ref);
            for (int64_t j = 0; j < n; j++) ok = ok && same(e[j], e_ref[j]);
            if (avx512) {
                float m2 = amp_avx512_row_max(v, n);
                ok = ok && same(m2, m_ref);
                if (isfinite(m_ref)) {
                    ok = ok && same(amp_avx512_exp_sum(v, n, m_ref, e), s_ref);
                    for (int64_t j = 0; j < n; j++) ok = ok && same(e[j], e_ref[j]);
                }
            }
            if (avx512) { /* the plain sum and the squares about 0.3 and about 0 (RMSNorm's) */
                ok = ok && same(amp_avx512_row_sum(v, n, 0.0f, false), ref_sum(v, n));
                ok = ok && same(amp_avx512_row_sum(v, n, 0.3f, true), ref_sum_sq(v, n, 0.3f));
                ok = ok && same(amp_avx512_row_sum(v, n, 0.0f, true), ref_sum_sq(v, n, 0.0f));
            }
            if (!ok && bad++ < 5)
                fprintf(stderr, "  row of %lld, kind %d: max %a (expected %a), sum %a (%a)\n",
                        (long long)n, kind, m, m_ref, s, s_ref);
            cases++;
        }
    }
    CHECK_MSG(bad == 0, "rows: %d of %d differ from the warp's order%s", bad, cases,
              avx512 ? " (AVX-512 kernels)" : " (portable loops)");
}

int main(void) {
    srand(11);
    rows();
    if (!amp_cpu_avx512_kernels()) { /* what runs here was checked: the portable loops */
        printf("%s: the AVX-512 exp not checked: this CPU has no AVX-512 F/BW/VL, or "
               "AMP_CPU_ISA caps it\n",
               NAME);
        return test_summary(NAME);
    }
    exp_arguments();
    return test_summary(NAME);
}
