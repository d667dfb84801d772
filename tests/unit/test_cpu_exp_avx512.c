/* The row kernels' exps in AVX-512 registers (kernels/cpu/exp_avx512.c) and in AVX2 registers
 * (kernels/cpu/exp_avx2.c) give the bits of the portable functions that the CUDA kernels run too.
 * Each set is called directly where this CPU runs it: the AVX-512 set below AMP_CPU_ISA's cap
 * (amp_cpu_avx512_kernels), the AVX2 set on any CPU with AVX2 and FMA whatever the cap, so that
 * an AVX-512 machine holds both, under every cap:
 *  - exp_shifted against amp_expf_core after vector_exp.h's clamp: every float argument from -106
 *    to -85 (where e^x leaves the normal range and the result is rounded into a subnormal, by
 *    vscalefps or by the second of two exact power-of-two factors), every 251st one elsewhere,
 *    -inf, NaN (clamped as the portable select clamps it), the range's ends, with shifts m, in
 *    place, every length of tail;
 *  - rows (amp_cpu_row_max_sumexp and amp_cpu_row_sum, which dispatch at the running level, and
 *    each set's max and exp-sum directly) against a reference written here: a CUDA warp's xor
 *    butterfly over 32 lanes, exactly as a warp runs it, and amp_softmax_exp per element. Every
 *    length from 0 to 100 and a few long ones (the masked tails), ties of +0 and -0, partly and
 *    fully masked rows, NaN anywhere, infinities, and rows of -1 with a +0 and a -0 at every
 *    pair of places among 64 (which zero the max keeps). Without AVX-512 (or under
 *    AMP_CPU_ISA=avx2) the dispatching checks hold the AVX2 set, under AMP_CPU_ISA=sse41 the
 *    portable loops;
 *  - each set's row_sum, the plain sum and LayerNorm's squares about a centre, on the same rows,
 *    against the butterfly over 32 lanes summed in order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu_info.h"
#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/exp_avx2.h"
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

/* One hand-written set of row kernels, and whether this CPU can run it now. */
typedef struct exp_kernels {
    const char *name;
    bool (*here)(void);
    void (*exp_shifted)(const float *v, int64_t n, float m, float *e);
    float (*row_max)(const float *v, int64_t n);
    float (*exp_sum)(const float *v, int64_t n, float m, float *e);
    float (*row_sum)(const float *v, int64_t n, float c, bool squares);
} exp_kernels;

static bool avx512_here(void) { return amp_cpu_avx512_kernels(); }

/* The CPU's own AVX2 and FMA, not the capped level: the set is called directly. */
static bool avx2_here(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

static const exp_kernels sets[] = {
    {"AVX-512", avx512_here, amp_avx512_exp_shifted, amp_avx512_row_max, amp_avx512_exp_sum,
     amp_avx512_row_sum},
    {"AVX2", avx2_here, amp_avx2_exp_shifted, amp_avx2_row_max, amp_avx2_exp_sum,
     amp_avx2_row_sum},
};
#define N_SETS (int)(sizeof sets / sizeof sets[0])

/* One block of arguments through k's exp_shifted; returns the mismatches. */
static int exp_block(const exp_kernels *k, const float *v, int64_t n, float m, float *e) {
    k->exp_shifted(v, n, m, e);
    int bad = 0;
    for (int64_t j = 0; j < n; j++)
        if (!same(e[j], ref_exp(v[j], m)) && bad++ < 3)
            fprintf(stderr, "  %s exp(%a - %a): %a, expected %a\n", k->name, v[j], m, e[j],
                    ref_exp(v[j], m));
    return bad;
}

static void exp_arguments(const exp_kernels *k) {
    enum { BLOCK = 4093 }; /* odd, so that every block ends in a masked tail */
    static float v[BLOCK], e[BLOCK];
    int64_t n = 0, checked = 0;
    int bad = 0;
    /* every float from -106 to -85: bits 0xc2d40000 down to 0xc2aa0000 (negative: larger bits are
     * smaller numbers) */
    for (uint32_t u = 0xc2aa0000u; u <= 0xc2d40000u; u++) {
        v[n++] = amp_f32_from_bits(u);
        if (n == BLOCK) bad += exp_block(k, v, n, 0.0f, e), checked += n, n = 0;
    }
    /* every 251st float from -106 to 88.72 (the range amp_cpu_exp_shifted is given) */
    for (uint32_t u = 0; u <= 0x42d40000u; u += 251) {
        if (u <= 0x42b17217u) v[n++] = amp_f32_from_bits(u);
        if (n == BLOCK) bad += exp_block(k, v, n, 0.0f, e), checked += n, n = 0;
        v[n++] = amp_f32_from_bits(u | 0x80000000u);
        if (n == BLOCK) bad += exp_block(k, v, n, 0.0f, e), checked += n, n = 0;
    }
    const float edges[] = {-INFINITY, AMP_EXP_LOW, nextafterf(AMP_EXP_LOW, -200.0f),
                           nextafterf(AMP_EXP_LOW, 0.0f), 88.72283935546875f, -0.0f, 0.0f,
                           -87.33654f, -1e-30f, 1e-30f, NAN};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) v[n++] = edges[i];
    bad += exp_block(k, v, n, 0.0f, e), checked += n;
    /* shifted by a row max, in place (e = v), every length of tail */
    for (int len = 1; len <= 40; len++) {
        float w[40], r[40];
        for (int j = 0; j < len; j++) w[j] = r[j] = (float)(j * 7 % 23) - 3.5f;
        k->exp_shifted(w, len, 19.25f, w);
        for (int j = 0; j < len; j++) bad += !same(w[j], ref_exp(r[j], 19.25f));
        checked += len;
    }
    CHECK_MSG(bad == 0, "%s exp: %d of %lld arguments differ from amp_expf_core", k->name, bad,
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

/* One row through k's max, exp-sum and sums; false on a difference from the references. */
static bool row_direct(const exp_kernels *k, const float *v, int64_t n, float m_ref,
                       const float *e_ref, float s_ref, float *e) {
    bool ok = same(k->row_max(v, n), m_ref);
    if (isfinite(m_ref)) {
        ok = ok && same(k->exp_sum(v, n, m_ref, e), s_ref);
        for (int64_t j = 0; j < n; j++) ok = ok && same(e[j], e_ref[j]);
    }
    /* the plain sum and the squares about 0.3 and about 0 (RMSNorm's) */
    ok = ok && same(k->row_sum(v, n, 0.0f, false), ref_sum(v, n));
    ok = ok && same(k->row_sum(v, n, 0.3f, true), ref_sum_sq(v, n, 0.3f));
    ok = ok && same(k->row_sum(v, n, 0.0f, true), ref_sum_sq(v, n, 0.0f));
    return ok;
}

static void rows(void) {
    enum { LONGEST = 1031 };
    static float v[LONGEST], e[LONGEST], e_ref[LONGEST];
    int bad = 0, cases = 0, bad_set[N_SETS] = {0};
    for (int64_t n = 0; n <= LONGEST; n = n < 100 ? n + 1 : n == 100 ? 767 : n + 132) {
        for (int kind = 0; kind < N_KINDS; kind++) {
            fill(v, n, kind);
            float m_ref = ref_max(v, n);
            for (int64_t j = 0; j < n; j++) e_ref[j] = amp_softmax_exp(v[j], m_ref);
            float s_ref = ref_sum(e_ref, n), m, s;
            amp_cpu_row_max_sumexp(v, n, e, &m, &s);
            bool ok = same(m, m_ref) && same(s, s_ref);
            for (int64_t j = 0; j < n; j++) ok = ok && same(e[j], e_ref[j]);
            ok = ok && same(amp_cpu_row_sum(v, n), ref_sum(v, n));
            if (!ok && bad++ < 5)
                fprintf(stderr, "  row of %lld, kind %d: max %a (expected %a), sum %a (%a)\n",
                        (long long)n, kind, m, m_ref, s, s_ref);
            for (int k = 0; k < N_SETS; k++)
                if (sets[k].here() && !row_direct(&sets[k], v, n, m_ref, e_ref, s_ref, e) &&
                    bad_set[k]++ < 5)
                    fprintf(stderr, "  %s: row of %lld, kind %d differs\n", sets[k].name,
                            (long long)n, kind);
            cases++;
        }
    }
    CHECK_MSG(bad == 0, "rows: %d of %d differ from the warp's order (at level %s)", bad, cases,
              amp_cpu_level_name(amp_cpu_level_get()));
    for (int k = 0; k < N_SETS; k++)
        if (sets[k].here())
            CHECK_MSG(bad_set[k] == 0, "rows: %d of %d differ in the %s kernels", bad_set[k],
                      cases, sets[k].name);
}

/* The max's order where it shows: a row of -1s with one +0 and one -0 at every pair of places,
 * in one lane's first and second element or in two lanes (which of two zeros wins is the order
 * of the operands at each step, which random rows seldom reach through the whole tree). */
static void zero_ties(void) {
    enum { N = 2 * AMP_LANES };
    float v[N], e[N];
    int bad = 0, cases = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            if (i == j) continue;
            for (int k = 0; k < N; k++) v[k] = -1.0f;
            v[i] = 0.0f;
            v[j] = -0.0f;
            float m_ref = ref_max(v, N), m, s;
            amp_cpu_row_max_sumexp(v, N, e, &m, &s);
            bool ok = same(m, m_ref);
            for (int k = 0; k < N_SETS; k++)
                if (sets[k].here()) ok = ok && same(sets[k].row_max(v, N), m_ref);
            if (!ok && bad++ < 5) fprintf(stderr, "  +0 at %d, -0 at %d: max %a\n", i, j, m);
            cases++;
        }
    CHECK_MSG(bad == 0, "zero ties: %d of %d rows' max differ from the warp's order", bad, cases);
}

int main(void) {
    srand(11);
    rows();
    zero_ties();
    for (int k = 0; k < N_SETS; k++) {
        if (sets[k].here())
            exp_arguments(&sets[k]);
        else /* what runs here was checked: the dispatching rows above */
            printf("%s: the %s exp not checked: this CPU has none, or AMP_CPU_ISA caps it\n",
                   NAME, sets[k].name);
    }
    return test_summary(NAME);
}
