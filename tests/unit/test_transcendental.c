/* kernels/math/transcendental.h against the double-precision C library rounded to f32 (well
 * within half an f32 ulp of the true value: the reference is the correctly rounded result but
 * for a few ties), in units in the last place of the reference: exp, log, tanh, sigmoid, SiLU
 * and the backward formulas, over one f32 in every 64 of the whole range (67 million inputs,
 * every exponent and sign), plus the special values C99 specifies. The bounds asserted are the
 * header's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/math/transcendental.h"
#include "test_util.h"

#define NAME "test_transcendental"

/* The distance between two floats in ulps (through their ordered integer images). */
static double ulp_dist(float a, float b) {
    if (a == b) return 0.0;
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0.0 : 1e30;
    int32_t ia = (int32_t)amp_f32_bits(a), ib = (int32_t)amp_f32_bits(b);
    if (ia < 0) ia = (int32_t)0x80000000 - ia;
    if (ib < 0) ib = (int32_t)0x80000000 - ib;
    return fabs((double)ia - (double)ib);
}

typedef float (*f32_fn)(float);
typedef double (*f64_fn)(double);

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_gelu_erf(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
/* x sigmoid(2 u): 0.5 x (1 + tanh u) without its cancellation, which double has too. */
static double ref_gelu_tanh(double x) {
    return x / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double ref_silu(double x) { return x / (1.0 + exp(-x)); }

/* The worst ulp error of f over the sampled floats in [lo, hi] (hi < 0 for no upper bound) and
 * where it was; results that are subnormal or zero in the reference are compared absolutely,
 * at the subnormal ulp. */
static double worst_ulps(f32_fn f, f64_fn ref, float lo, float hi, float *at) {
    double worst = 0.0;
    for (uint64_t u = 0; u < ((uint64_t)1 << 32); u += 64) {
        float x = amp_f32_from_bits((uint32_t)u);
        if (isnan(x) || x < lo || x > hi) continue;
        float want = (float)ref((double)x), got = f(x);
        double d = ulp_dist(got, want);
        if (d > worst) {
            worst = d;
            *at = x;
        }
    }
    return worst;
}

static void check_fn(const char *name, f32_fn f, f64_fn ref, float lo, float hi, double bound) {
    float at = 0.0f;
    double w = worst_ulps(f, ref, lo, hi, &at);
    CHECK_MSG(w <= bound, "%s: %.0f ulps at %a (%.9g: %.9g, want %.9g), bound %.0f", name, w,
              (double)at, (double)at, (double)f(at), (double)(float)ref((double)at), bound);
    printf("%s: worst %.0f ulp over [%g, %g]\n", name, w, (double)lo, (double)hi);
}

/* Below -3 GELU falls fast, its relative slope about |x|^3 / 2 (exact) or 0.2 |x|^3 (tanh): the
 * f32 rounding of its argument (x / sqrt 2, or u) alone moves the result by that condition
 * number times an ulp, in any f32 evaluation (PyTorch's too). There the error is held relative,
 * under 1e-4, where the value is a normal f32; absolutely, under 1e-38, where it is not. */
static void check_tail(const char *name, f32_fn f, f64_fn ref) {
    double worst_rel = 0.0, worst_abs = 0.0;
    for (uint64_t u = 0; u < ((uint64_t)1 << 32); u += 64) {
        float x = amp_f32_from_bits((uint32_t)u);
        if (isnan(x) || x >= -3.0f || isinf(x)) continue;
        double want = ref((double)x), d = fabs((double)f(x) - want);
        if (fabs(want) >= 1.17549435e-38) worst_rel = fmax(worst_rel, d / fabs(want));
        else worst_abs = fmax(worst_abs, d);
    }
    CHECK_MSG(worst_rel < 1e-4 && worst_abs < 1e-38, "%s below -3: relative error %g, absolute "
              "%g where subnormal", name, worst_rel, worst_abs);
    printf("%s below -3: worst relative error %.2g, absolute %.2g where subnormal\n", name,
           worst_rel, worst_abs);
}

static void test_specials(void) {
    float inf = INFINITY, nan_ = NAN;
    CHECK(amp_expf(-inf) == 0.0f && amp_expf(inf) == inf && isnan(amp_expf(nan_)));
    CHECK(amp_expf(0.0f) == 1.0f && amp_expf(89.0f) == inf && amp_expf(-104.0f) == 0.0f);
    CHECK(amp_logf(0.0f) == -inf && amp_logf(-0.0f) == -inf && isnan(amp_logf(-1.0f)));
    CHECK(amp_logf(inf) == inf && isnan(amp_logf(nan_)) && amp_logf(1.0f) == 0.0f);
    CHECK(amp_tanhf(inf) == 1.0f && amp_tanhf(-inf) == -1.0f && isnan(amp_tanhf(nan_)));
    CHECK(signbit(amp_tanhf(-0.0f)) && amp_tanhf(-0.0f) == 0.0f);
    CHECK(amp_sigmoidf(-inf) == 0.0f && amp_sigmoidf(inf) == 1.0f && amp_sigmoidf(0.0f) == 0.5f);
    CHECK(amp_siluf(inf) == inf && isnan(amp_siluf(nan_)) && isnan(amp_siluf(-inf)));
    CHECK(amp_siluf(-200.0f) == -0.0f || amp_siluf(-200.0f) == 0.0f);
    /* A subnormal's logarithm (made normal first). */
    CHECK(ulp_dist(amp_logf(1e-40f), (float)log(1e-40)) <= 1.0);
}

/* The backward formulas (PyTorch's: tanh's and sigmoid's from the f32 output y, SiLU's from x
 * and its f32 sigmoid) against the same formulas in double on the same f32 values: the f32
 * arithmetic's own error: a few roundings of the terms, which cancel where 1 - y^2 is small (y
 * near 1) or 1 + x (1 - s) crosses 0, so the error is bounded relative to the terms' scale,
 * |dy| max(1, |x|), not to the result. How well a formula is conditioned is the formula's, the
 * same in PyTorch; the op-level gradient checks measure the derivative itself. */
static void test_backward(void) {
    double worst[3] = {0, 0, 0};
    for (int i = -4000; i <= 4000; i++) {
        float x = (float)i / 400.0f, dy = 0.75f;
        double t = amp_tanhf(x), s = amp_sigmoidf(x);
        double want[3] = {dy * (1.0 - t * t), dy * s * (1.0 - s), dy * s * (1.0 + x * (1.0 - s))};
        float got[3] = {amp_tanh_bwd(amp_tanhf(x), dy), amp_sigmoid_bwd(amp_sigmoidf(x), dy),
                        amp_silu_bwd(x, dy)};
        for (int k = 0; k < 3; k++) {
            double rel = fabs(got[k] - want[k]) / (fabs(dy) * fmax(1.0, fabs((double)x)));
            if (rel > worst[k]) worst[k] = rel;
        }
    }
    for (int k = 0; k < 3; k++)
        CHECK_MSG(worst[k] < 0x1p-21, "backward %d: error %g of the terms' scale", k, worst[k]);
    printf("backward: worst error relative to the terms: tanh %.2g, sigmoid %.2g, silu %.2g\n", worst[0],
           worst[1], worst[2]);
}

int main(void) {
    test_specials();
    check_fn("exp", amp_expf, exp, -104.0f, 89.0f, 1);
    check_fn("log", amp_logf, log, 0.0f, INFINITY, 1);
    check_fn("tanh", amp_tanhf, tanh, -INFINITY, INFINITY, 2);
    check_fn("sigmoid", amp_sigmoidf, ref_sigmoid, -INFINITY, INFINITY, 2);
    check_fn("silu", amp_siluf, ref_silu, -INFINITY, INFINITY, 3);
    check_fn("erf", amp_erff, erf, -INFINITY, INFINITY, 8);
    /* GELU's relative slope near -3 (about 13) times an ulp of its argument's rounding: 16 */
    check_fn("gelu (exact)", amp_gelu_erf, ref_gelu_erf, -3.0f, INFINITY, 16);
    check_fn("gelu (tanh)", amp_gelu_tanh, ref_gelu_tanh, -3.0f, INFINITY, 16);
    check_tail("gelu (exact)", amp_gelu_erf, ref_gelu_erf);
    check_tail("gelu (tanh)", amp_gelu_tanh, ref_gelu_tanh);
    test_backward();
    return test_summary(NAME);
}
