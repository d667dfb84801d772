/* exp, log, tanh, sigmoid, SiLU, erf and GELU per element in f32, written once for both backends (Cephes'
 * single-precision algorithms: range reduction and a minimax polynomial), so the CPU and the
 * device compute the same bits: every product goes through amp_mul_rn (never fused with the add
 * after it, core/hd.h's rule for nvcc) and the C side builds with -ffp-contract=off, except the
 * exp's multiply-adds, which are fmaf on both (one rounding each, the same everywhere). No libm
 * call, so the CPU loops vectorise; floor is an integer conversion for the same reason.
 *
 * Accuracy against the correctly rounded result (tests/unit/test_transcendental.c measures it
 * over one f32 in 64 of the whole range): exp, log and tanh within 1 ulp, sigmoid within 2, SiLU
 * and erf within 3; GELU (both forms) within 16 above -3 and 1e-4 relative below, its own
 * conditioning (a relative slope near |x|^3 / 2 there, which the f32 rounding of its argument
 * meets in any f32 evaluation). Special values as C99's: exp(-inf) = 0,
 * exp(inf) = inf, log(0) = -inf, log(x < 0) = NaN, tanh(+-inf) = +-1, NaN in, NaN out. */
#ifndef AMP_KERNELS_MATH_TRANSCENDENTAL_H
#define AMP_KERNELS_MATH_TRANSCENDENTAL_H

#include <math.h>
#include <stdint.h>

#include "core/half.h"
#include "core/hd.h"
#include "kernels/math/binary.h"

/* 2^n for -126 <= n <= 127, exactly. */
AMP_HD static inline float amp_pow2i(int n) { return amp_f32_from_bits((uint32_t)(n + 127) << 23); }

/* p * 2^n for |p| in [2^-20, 2^20] and -152 <= n <= 129, with one rounding (into a subnormal at
 * the bottom): two exact power-of-two factors where one would leave the normal range. */
AMP_HD static inline float amp_scale_pow2(float p, int n) {
    int half = n >> 1; /* floor(n / 2) (arithmetic shift): no division, which would keep loops with
                        * a select from vectorising */
    return amp_mul_rn(amp_mul_rn(p, amp_pow2i(half)), amp_pow2i(n - half));
}

/* e^x = p 2^n for finite x in [-104, 88.73]: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two
 * parts, the first exact in 9 bits), p = e^r = 1 + r + r^2 q(r), in [0.7, 1.42]. The multiply-adds
 * are fmaf, one rounding each on both backends (a fused multiply-add instruction on the CPU's
 * FMA and AVX-512 builds and on the device; the correctly rounded libm call elsewhere): a third
 * fewer operations than separate products, which bound the CPU's softmax, GELU and attention
 * (bench/RESULTS.md, "exp with fused multiply-adds"). The constants are named for
 * kernels/cpu/exp_avx512.c, which spells the same steps in AVX-512 registers. */
#define AMP_EXP_LOG2E 1.44269504088896341f
#define AMP_EXP_LN2_HI -0.693359375f
#define AMP_EXP_LN2_LO 2.12194440e-4f
#define AMP_EXP_Q5 1.9875691500e-4f
#define AMP_EXP_Q4 1.3981999507e-3f
#define AMP_EXP_Q3 8.3334519073e-3f
#define AMP_EXP_Q2 4.1665795894e-2f
#define AMP_EXP_Q1 1.6666665459e-1f
#define AMP_EXP_Q0 5.0000001201e-1f
AMP_HD static inline float amp_exp_reduce(float x, int *n_out) {
    float zf = fmaf(AMP_EXP_LOG2E, x, 0.5f);
    int n = (int)zf;
    n -= (float)n > zf; /* floor: zf may be negative (a subtraction, not a branch: it vectorises) */
    float fn = (float)n;
    float r = fmaf(fn, AMP_EXP_LN2_HI, x);
    r = fmaf(fn, AMP_EXP_LN2_LO, r);
    float r2 = amp_mul_rn(r, r);
    float p = AMP_EXP_Q5;
    p = fmaf(p, r, AMP_EXP_Q4);
    p = fmaf(p, r, AMP_EXP_Q3);
    p = fmaf(p, r, AMP_EXP_Q2);
    p = fmaf(p, r, AMP_EXP_Q1);
    p = fmaf(p, r, AMP_EXP_Q0);
    *n_out = n;
    return fmaf(p, r2, r) + 1.0f;
}

/* e^x for x in [-103.97, 88.73] (amp_expf's range, without its special cases): no branch, so
 * a loop of it vectorises (the CPU's attention clamps its arguments into the range first). */
AMP_HD static inline float amp_expf_core(float x) {
    int n;
    float p = amp_exp_reduce(x, &n);
    return amp_scale_pow2(p, n);
}

AMP_HD static inline float amp_expf(float x) {
    if (x != x) return x;
    if (x > 88.72283935546875f) return amp_f32_from_bits(0x7f800000u);
    if (x < -103.97208404541015625f) return 0.0f;
    return amp_expf_core(x);
}

/* log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 + f^3 q(f) for f = m - 1,
 * plus e ln2 in two parts. */
AMP_HD static inline float amp_logf(float x) {
    if (x != x) return x;
    if (x < 0.0f) return amp_f32_from_bits(0x7fc00000u);
    if (x == 0.0f) return amp_f32_from_bits(0xff800000u);
    if (x == amp_f32_from_bits(0x7f800000u)) return x;
    int e = 0;
    if (x < 1.17549435e-38f) { /* subnormal: made normal first */
        x = amp_mul_rn(x, 8388608.0f);
        e = -23;
    }
    uint32_t u = amp_f32_bits(x);
    e += (int)(u >> 23) - 126;
    float m = amp_f32_from_bits((u & 0x007fffffu) | 0x3f000000u); /* [0.5, 1) */
    float f;
    if (m < 0.707106781186547524f) {
        e -= 1;
        f = m + m - 1.0f;
    } else {
        f = m - 1.0f;
    }
    float z = amp_mul_rn(f, f);
    float q = 7.0376836292e-2f;
    q = amp_mul_rn(q, f) - 1.1514610310e-1f;
    q = amp_mul_rn(q, f) + 1.1676998740e-1f;
    q = amp_mul_rn(q, f) - 1.2420140846e-1f;
    q = amp_mul_rn(q, f) + 1.4249322787e-1f;
    q = amp_mul_rn(q, f) - 1.6668057665e-1f;
    q = amp_mul_rn(q, f) + 2.0000714765e-1f;
    q = amp_mul_rn(q, f) - 2.4999993993e-1f;
    q = amp_mul_rn(q, f) + 3.3333331174e-1f;
    float y = amp_mul_rn(amp_mul_rn(q, f), z);
    float fe = (float)e;
    y = y + amp_mul_rn(fe, -2.12194440e-4f);
    y = y - amp_mul_rn(0.5f, z);
    return (f + y) + amp_mul_rn(fe, 0.693359375f);
}

/* tanh(x): an odd polynomial below 0.625, 1 - 2 / (e^2|x| + 1) above, +-1 past 9.01 (where the
 * f32 result is 1 to the last bit). */
/* Its two ranges for z = |x|, also run by the CPU's vector loops (kernels/cpu/elementwise.c):
 * the odd polynomial below 0.625, and 1 - 2 / (e + 1) from e = e^(2 z) above. */
AMP_HD static inline float amp_tanh_poly(float z) {
    float s = amp_mul_rn(z, z);
    float p = -5.70498872745e-3f;
    p = amp_mul_rn(p, s) + 2.06390887954e-2f;
    p = amp_mul_rn(p, s) - 5.37397155531e-2f;
    p = amp_mul_rn(p, s) + 1.33314422036e-1f;
    p = amp_mul_rn(p, s) - 3.33332819422e-1f;
    return amp_mul_rn(amp_mul_rn(p, s), z) + z;
}
AMP_HD static inline float amp_tanh_from_exp2z(float e) { return 1.0f - 2.0f / (e + 1.0f); }

AMP_HD static inline float amp_tanhf(float x) {
    if (x != x) return x;
    float z = x < 0.0f ? -x : x;
    float t;
    if (z > 9.01f) {
        t = 1.0f;
    } else if (z >= 0.625f) {
        t = amp_tanh_from_exp2z(amp_expf(z + z));
    } else {
        if (z == 0.0f) return x; /* keeps -0 */
        t = amp_tanh_poly(z);
    }
    return x < 0.0f ? -t : t;
}

/* sigmoid(x) = 1 / (1 + e^-x), as e^x / (1 + e^x) for x < 0: PyTorch's formula overflows e^-x
 * below -88.7 and returns 0 where the value is still a subnormal. */
AMP_HD static inline float amp_sigmoidf(float x) {
    if (x < 0.0f) {
        float e = amp_expf(x);
        return e / (1.0f + e);
    }
    return 1.0f / (1.0f + amp_expf(-x));
}

/* silu(x) = x sigmoid(x), as x / (1 + e^-x) for x >= 0 (PyTorch's formula) and x e^x / (1 + e^x)
 * below, for the same reason; below -80, where 1 + e^x is 1 and x e^x subnormal or 0, as
 * (x p) 2^n from e^x = p 2^n, so that the one rounding into the subnormal range comes last. */
AMP_HD static inline float amp_siluf(float x) {
    if (x < -80.0f) {
        /* |x e^x| < 2^-200; -inf gives NaN, as PyTorch's -inf / (1 + inf) */
        if (x < -150.0f)
            return x == amp_f32_from_bits(0xff800000u) ? amp_f32_from_bits(0x7fc00000u) : -0.0f;
        int n;
        float p = amp_exp_reduce(x, &n);
        return amp_scale_pow2(amp_mul_rn(x, p), n);
    }
    if (x < 0.0f) {
        float e = amp_expf(x);
        return amp_mul_rn(x, e) / (1.0f + e);
    }
    return x / (1.0f + amp_expf(-x));
}

/* erfc(z) for z >= 0: Numerical Recipes' Chebyshev fit t e^(-z^2 + P(t)), t = 1 / (1 + z / 2),
 * fractional error below 1.2e-7 everywhere. z^2 is split exactly (z = h + l, h of 12 bits:
 * z^2 = h^2 + (2 h l + l^2), each part exact), so that its rounding does not reach the exponent
 * where it is large: e^(-h^2) e^(P - 2 h l - l^2). */
AMP_HD static inline float amp_erfc_pos(float z) {
    if (z > 10.5f) return 0.0f; /* erfc(10.5) < 2^-160, below every f32 */
    float t = 1.0f / (1.0f + amp_mul_rn(0.5f, z));
    float p = 0.17087277f;
    p = amp_mul_rn(p, t) - 0.82215223f;
    p = amp_mul_rn(p, t) + 1.48851587f;
    p = amp_mul_rn(p, t) - 1.13520398f;
    p = amp_mul_rn(p, t) + 0.27886807f;
    p = amp_mul_rn(p, t) - 0.18628806f;
    p = amp_mul_rn(p, t) + 0.09678418f;
    p = amp_mul_rn(p, t) + 0.37409196f;
    p = amp_mul_rn(p, t) + 1.00002368f;
    p = amp_mul_rn(p, t) - 1.26551223f;
    float h = amp_f32_from_bits(amp_f32_bits(z) & 0xfffff000u), l = z - h;
    float rest = amp_mul_rn(amp_mul_rn(2.0f, h), l) + amp_mul_rn(l, l);
    return amp_mul_rn(amp_mul_rn(t, amp_expf(-amp_mul_rn(h, h))), amp_expf(p - rest));
}

/* erf(x): its Taylor series below 1/2 (no cancellation near 0), 1 - erfc(|x|) above. */
AMP_HD static inline float amp_erff(float x) {
    if (x != x) return x;
    float z = x < 0.0f ? -x : x;
    if (z < 0.5f) {
        float s = amp_mul_rn(x, x);
        float p = -1.0f / 75600.0f; /* the x^13 term's coefficient over 2 / sqrt(pi) */
        p = amp_mul_rn(p, s) + 1.0f / 9360.0f;
        p = amp_mul_rn(p, s) - 1.0f / 1320.0f;
        p = amp_mul_rn(p, s) + 1.0f / 216.0f;
        p = amp_mul_rn(p, s) - 1.0f / 42.0f;
        p = amp_mul_rn(p, s) + 0.1f;
        p = amp_mul_rn(p, s) - 1.0f / 3.0f;
        p = amp_mul_rn(p, s) + 1.0f;
        return amp_mul_rn(1.12837916709551257f, amp_mul_rn(p, x));
    }
    float e = 1.0f - amp_erfc_pos(z);
    return x < 0.0f ? -e : e;
}

/* GELU, exact: x Phi(x) = x erfc(-x / sqrt 2) / 2, as 0.5 x (1 + erf(x / sqrt 2)) for x >= 0
 * (PyTorch's formula) and through erfc below 0, where 1 + erf cancels. */
AMP_HD static inline float amp_gelu_erf(float x) {
    float u = amp_mul_rn(x, 0.707106781186547524f);
    if (x < 0.0f) return amp_mul_rn(amp_mul_rn(0.5f, x), amp_erfc_pos(-u));
    return amp_mul_rn(amp_mul_rn(0.5f, x), 1.0f + amp_erff(u));
}

/* GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3),
 * as x sigmoid(2 u) (the same function: 1 + tanh(u) = 2 sigmoid(2 u)), which does not cancel
 * where tanh(u) is near -1 (PyTorch's formula gives 0 there below x = -5). The argument u is
 * shared with the backward. */
AMP_HD static inline float amp_gelu_tanh_arg(float x) {
    float cube = amp_mul_rn(amp_mul_rn(x, x), x);
    return amp_mul_rn(0.7978845608028654f, x + amp_mul_rn(0.044715f, cube));
}

AMP_HD static inline float amp_gelu_tanh(float x) {
    float u = amp_gelu_tanh_arg(x);
    return amp_mul_rn(x, amp_sigmoidf(u + u));
}

/* Their derivatives times dy, as PyTorch's gelu_backward: exact, Phi(x) + x phi(x); tanh,
 * 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 0.044715 x^2), t the forward's tanh. */
AMP_HD static inline float amp_gelu_erf_bwd(float x, float dy) {
    float u = amp_mul_rn(x, 0.707106781186547524f);
    float cdf = x < 0.0f ? amp_mul_rn(0.5f, amp_erfc_pos(-u))
                         : amp_mul_rn(0.5f, 1.0f + amp_erff(u));
    float pdf = amp_mul_rn(0.398942280401432678f, amp_expf(amp_mul_rn(-0.5f, amp_mul_rn(x, x))));
    return amp_mul_rn(dy, cdf + amp_mul_rn(x, pdf));
}

/* The backward's value from x, dy and t = tanh(u). */
AMP_HD static inline float amp_gelu_tanh_bwd_from(float x, float dy, float t) {
    float x2 = amp_mul_rn(x, x);
    float left = amp_mul_rn(0.5f, 1.0f + t);
    float right = amp_mul_rn(amp_mul_rn(amp_mul_rn(0.5f, x), 1.0f - amp_mul_rn(t, t)),
                             amp_mul_rn(0.7978845608028654f, 1.0f + amp_mul_rn(0.134145f, x2)));
    return amp_mul_rn(dy, left + right);
}

AMP_HD static inline float amp_gelu_tanh_bwd(float x, float dy) {
    return amp_gelu_tanh_bwd_from(x, dy, amp_tanhf(amp_gelu_tanh_arg(x)));
}

/* Backward passes, as PyTorch's: tanh and sigmoid from their output y, SiLU from its input x. */
AMP_HD static inline float amp_tanh_bwd(float y, float dy) {
    return amp_mul_rn(dy, 1.0f - amp_mul_rn(y, y));
}

AMP_HD static inline float amp_sigmoid_bwd(float y, float dy) {
    return amp_mul_rn(amp_mul_rn(dy, 1.0f - y), y);
}

AMP_HD static inline float amp_silu_bwd(float x, float dy) {
    float s = amp_sigmoidf(x);
    return amp_mul_rn(amp_mul_rn(dy, s), 1.0f + amp_mul_rn(x, 1.0f - s));
}

#endif
