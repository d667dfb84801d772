/* LAMB's per-element math (kernels/math/lamb.h) in plain C loops against tests/ref/lamb_ref.h,
 * which tests/ref/gen_lamb_ref.py computes in float64 straight from the paper's Algorithm 2 and
 * Apex FusedLAMB's conventions (not from this code): four steps, four tensors (a zero-gradient
 * one and a zero-weight one among them), with decoupled and L2 decay, with and without bias
 * correction, clipping and the trust ratio. The norms between the stages are reduced here in
 * double and rounded to f32, as a kernel would hand them over.
 *
 * Tolerance: |got - ref| <= LAMB_TOL * (the largest |ref| of that tensor and quantity), with
 * LAMB_TOL = 1e-5. The C state is f32 and the reference keeps float64 state, so they drift apart
 * by rounding alone: each element takes about a dozen f32 roundings per step (clip, two moments,
 * bias corrections, sqrt, eps, two divisions, decay, the step size from two rounded norms, the
 * update), each at most 2^-24 of operands no larger than the tensor's scale, and four steps
 * compound them: a few 1e-7 of the scale (the largest error measured is printed). Measured
 * against the tensor's scale rather than each element, a value that ends near zero by
 * cancellation (m = beta1 m + g with opposite signs) does not turn one rounding of its operands
 * into a large relative error. A formula slip is far larger: a missing bias correction is 10% at
 * step 1, eps inside the sqrt moves tensor 3 (its own scale, sqrt(v_hat) ~ eps) by whole
 * percents, a wrong clip or trust ratio moves every element by its own factor. The documented
 * conventions (ratio 1 when a norm is 0, no move for a tensor without gradient and decay) are
 * checked exactly. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/math/lamb.h"
#include "ref/lamb_ref.h"
#include "test_util.h"

#define LAMB_TOL 1e-5

static int tensor_offset(int k) {
    int off = 0;
    for (int j = 0; j < k; j++) off += lamb_ref_numel[j];
    return off;
}

static double norm_f32(const float *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return sqrt(s);
}

/* The largest error of got[] against ref[] over one tensor, in units of the tensor's scale. */
static double tensor_err(const float *got, const double *ref, int n) {
    double big = 0.0, worst = 0.0;
    for (int i = 0; i < n; i++) big = fmax(big, fabs(ref[i]));
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs((double)got[i] - ref[i]));
    return big > 0.0 ? worst / big : worst;
}

static double run_case(const lamb_ref_case *rc) {
    float p[LAMB_REF_NUMEL], m[LAMB_REF_NUMEL], v[LAMB_REF_NUMEL], u[LAMB_REF_NUMEL];
    memcpy(p, lamb_ref_init, sizeof p);
    memset(m, 0, sizeof m);
    memset(v, 0, sizeof v);
    double worst = 0.0;
    for (int step = 1; step <= LAMB_REF_N_STEPS; step++) {
        const float *g = lamb_ref_grad[step - 1];
        double gnorm = norm_f32(g, LAMB_REF_NUMEL);
        CHECK(fabs(gnorm - rc->global_grad_norm[step - 1]) <= 1e-12 * gnorm);
        float divisor = amp_lamb_clip_divisor((float)gnorm, rc->max_grad_norm);
        amp_lamb_coefs c = amp_lamb_coefs_make(rc->beta1, rc->beta2, rc->eps, rc->weight_decay,
                                               rc->decoupled, rc->bias_correction,
                                               rc->grad_averaging, step);
        for (int k = 0; k < LAMB_REF_N_TENSORS; k++) {
            int off = tensor_offset(k), n = lamb_ref_numel[k];
            float p_before[LAMB_REF_NUMEL];
            memcpy(p_before, p, sizeof p);
            for (int i = off; i < off + n; i++)
                u[i] = amp_lamb_stage1_elem(&c, divisor, p[i], g[i], &m[i], &v[i]);
            float pn = (float)norm_f32(p + off, n), un = (float)norm_f32(u + off, n);
            float step_size = amp_lamb_step_size(rc->lr, pn, un, rc->weight_decay,
                                                 rc->adapt_all);
            double ratio = (double)step_size / (double)rc->lr;
            double want = rc->trust_ratio[step - 1][k];
            CHECK_MSG(fabs(ratio - want) <= LAMB_TOL * want, "%s step %d tensor %d: ratio %.9g, "
                      "want %.9g", rc->name, step, k, ratio, want);
            for (int i = off; i < off + n; i++) amp_lamb_stage2_elem(step_size, &p[i], u[i]);

            /* the conventions, exactly */
            if (k == LAMB_REF_ZERO_WEIGHT && step == 1) CHECK(step_size == rc->lr);
            if (k == LAMB_REF_ZERO_GRAD && rc->weight_decay == 0.0f) {
                CHECK(memcmp(p + off, p_before + off, (size_t)n * sizeof(float)) == 0);
                for (int i = off; i < off + n; i++) CHECK(m[i] == 0.0f && v[i] == 0.0f);
            }
            double ep = tensor_err(p + off, rc->param[step - 1] + off, n);
            double em = tensor_err(m + off, rc->exp_avg[step - 1] + off, n);
            double ev = tensor_err(v + off, rc->exp_avg_sq[step - 1] + off, n);
            double e = fmax(ep, fmax(em, ev));
            CHECK_MSG(e <= LAMB_TOL, "%s step %d tensor %d: error %.3g of scale", rc->name, step,
                      k, e);
            worst = fmax(worst, e);
        }
    }
    return worst;
}

/* The helpers' edges, each against its documented value. */
static void test_helpers(void) {
    CHECK(amp_lamb_clip_divisor(2.0f, 1.0f) == 2.0f);
    CHECK(amp_lamb_clip_divisor(0.5f, 1.0f) == 1.0f);
    CHECK(amp_lamb_clip_divisor(1.0f, 1.0f) == 1.0f); /* only above the bound */
    CHECK(amp_lamb_clip_divisor(5.0f, 0.0f) == 1.0f); /* 0: clipping off */
    CHECK(amp_lamb_clip_divisor(NAN, 1.0f) == 1.0f);  /* the NaN gradients propagate themselves */

    const float lr = 0.25f;
    CHECK(amp_lamb_step_size(lr, 0.0f, 5.0f, 0.01f, 0) == lr); /* zero weights: ratio 1 */
    CHECK(amp_lamb_step_size(lr, 3.0f, 0.0f, 0.01f, 0) == lr); /* zero direction: ratio 1 */
    CHECK(amp_lamb_step_size(lr, 3.0f, 6.0f, 0.0f, 0) == lr);  /* no decay, not adapt_all */
    CHECK(amp_lamb_step_size(lr, 3.0f, 6.0f, 0.0f, 1) == lr * 0.5f);
    CHECK(amp_lamb_step_size(lr, 3.0f, 6.0f, 0.01f, 0) == lr * 0.5f);
    CHECK(isnan(amp_lamb_step_size(lr, NAN, 6.0f, 0.01f, 0)));

    /* stage 1 at step 1 with bias correction is Adam's first step: m_hat = g, v_hat = g^2, so
     * r = g / (|g| + eps); decoupled decay adds wd * p after it */
    amp_lamb_coefs c = amp_lamb_coefs_make(0.9f, 0.999f, 0.0f, 0.5f, 1, 1, 1, 1);
    float m = 0.0f, v = 0.0f;
    float r = amp_lamb_stage1_elem(&c, 1.0f, 2.0f, -0.75f, &m, &v);
    CHECK(fabsf(r - (-1.0f + 0.5f * 2.0f)) <= 1e-6f);
    CHECK(fabs(m - 0.1 * -0.75) <= 1e-6 * 0.075 && fabs(v - 0.001 * 0.5625) <= 1e-4 * 5.625e-4);
    /* L2: the decay enters the gradient, not the direction */
    c = amp_lamb_coefs_make(0.9f, 0.999f, 0.0f, 0.5f, 0, 1, 1, 1);
    m = v = 0.0f;
    r = amp_lamb_stage1_elem(&c, 1.0f, 2.0f, -0.75f, &m, &v);
    CHECK(fabsf(r - 1.0f) <= 1e-6f && fabs(m - 0.1 * 0.25) <= 1e-6 * 0.025);
    /* the clip divisor divides the gradient before the moments */
    c = amp_lamb_coefs_make(0.9f, 0.999f, 0.0f, 0.0f, 1, 0, 0, 1);
    m = v = 0.0f;
    r = amp_lamb_stage1_elem(&c, 4.0f, 1.0f, 2.0f, &m, &v);
    CHECK(m == 0.5f && fabs(v - 0.001 * 0.25) <= 1e-4 * 2.5e-4);

    float p = 1.5f;
    amp_lamb_stage2_elem(0.5f, &p, 1.0f);
    CHECK(p == 1.0f);
}

int main(void) {
    test_helpers();
    double worst = 0.0;
    for (int i = 0; i < LAMB_REF_N_CASES; i++) {
        double e = run_case(&lamb_ref_cases[i]);
        printf("%-24s largest error %.3g of scale (tolerance %g)\n", lamb_ref_cases[i].name, e,
               LAMB_TOL);
        worst = fmax(worst, e);
    }
    CHECK(worst > 0.0); /* f32 against float64 cannot agree everywhere: the comparison ran */
    return test_summary("test_lamb_math");
}
