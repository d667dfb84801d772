/* One element of LAMB's update, in two stages, shared by the CPU loop and the CUDA fused
 * optimizer kernel.
 *
 * LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76
 * minutes", Algorithm 2) is Adam's direction scaled per tensor by a trust ratio:
 *     m = beta1 m + (1 - beta1) g            v = beta2 v + (1 - beta2) g^2
 *     r = m_hat / (sqrt(v_hat) + eps)        m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t)
 *     u = r + wd x                           (decoupled weight decay, inside the direction)
 *     x = x - lr * (||x|| / ||u||) * u       (norms over the whole tensor)
 * The variant here is Apex's FusedLAMB (apex/optimizers/fused_lamb.py, csrc/multi_tensor_lamb.cu)
 * with its defaults adam_w_mode=True, grad_averaging=True, bias_correction=True:
 *   - stage 1 runs on every element: the gradient divided by the global clip divisor, moments,
 *     and the direction u (Apex writes u over the gradient buffer); the caller stores u;
 *   - between the stages the caller reduces ||x|| (before this step's update) and ||u|| per
 *     tensor, in f32 on a device (deterministically, in a fixed order);
 *   - stage 2 runs on every element: x = x - step_size * u, step_size from amp_lamb_step_size.
 * Conventions, Apex's, which the paper leaves open:
 *   - the trust ratio ||x|| / ||u|| is taken as 1 when either norm is 0 (a zero tensor, e.g. a
 *     bias initialised to 0, still moves by lr * u; a tensor with no gradient and no decay has
 *     u = 0 and does not move);
 *   - the ratio is applied only to tensors with weight_decay != 0 unless adapt_all (Apex's
 *     use_nvlamb); the paper applies it to every layer, which is adapt_all = 1;
 *   - scaling function phi is the identity, with no clamp (Apex; the paper allows bounds);
 *   - optional global gradient clipping before the moments: with G the L2 norm of all gradients of
 *     the step and G > max_grad_norm, every gradient is divided by G / max_grad_norm (Apex's
 *     FusedLAMB, default max_grad_norm 1.0). Here max_grad_norm <= 0 turns clipping off; Apex has
 *     no off switch (0 would divide every gradient by infinity);
 *   - with decoupled = 0 (Apex's adam_w_mode=False), wd x is added to the (clipped) gradient
 *     before the moments instead, and u = r; with grad_averaging = 0 the gradient enters m with
 *     weight 1; with bias_correction = 0, m_hat = m and v_hat = v.
 * Numerics: f32 throughout, as Apex's MATH_T. Divisions are written as Apex writes them (by the
 * clip divisor, by the bias corrections, by the denominator), not as reciprocal multiplies, and
 * the multiply-adds are spelled as fmaf so the CPU and nvcc round identically (no a*b+c is left
 * for a compiler to contract). Bias corrections are formed in double from the f32 options and
 * rounded once (Apex: 1 - std::pow(beta, step) in double, stored in float); compute the
 * coefficients on the host. Inf/NaN propagate (Apex: "I'd like this kernel to propagate
 * infs/nans"); a step with a non-finite gradient is skipped by the scaler before it gets here. */
#ifndef AMP_KERNELS_MATH_LAMB_H
#define AMP_KERNELS_MATH_LAMB_H

#include <math.h>
#include <stdint.h>

#include "core/hd.h"

/* The f32 scalars of one LAMB stage 1 over one parameter group at step t (t >= 1). */
typedef struct amp_lamb_coefs {
    float beta1;
    float grad_weight;       /* 1 - beta1 (grad_averaging), else 1: Apex's beta3 */
    float beta2;
    float one_minus_beta2;
    float bias_correction1;  /* 1 - beta1^t, or 1 without bias correction */
    float bias_correction2;  /* 1 - beta2^t, or 1 */
    float eps;
    float l2_decay;          /* decoupled = 0: added to the gradient; else 0 */
    float decoupled_decay;   /* decoupled = 1: added to the direction; else 0 */
} amp_lamb_coefs;

AMP_HD static inline amp_lamb_coefs amp_lamb_coefs_make(float beta1, float beta2, float eps,
                                                        float weight_decay, int decoupled,
                                                        int bias_correction, int grad_averaging,
                                                        int64_t step) {
    double t = (double)step;
    amp_lamb_coefs c;
    c.beta1 = beta1;
    c.grad_weight = grad_averaging ? (float)(1.0 - (double)beta1) : 1.0f;
    c.beta2 = beta2;
    c.one_minus_beta2 = (float)(1.0 - (double)beta2);
    c.bias_correction1 = bias_correction ? (float)(1.0 - pow((double)beta1, t)) : 1.0f;
    c.bias_correction2 = bias_correction ? (float)(1.0 - pow((double)beta2, t)) : 1.0f;
    c.eps = eps;
    c.l2_decay = decoupled ? 0.0f : weight_decay;
    c.decoupled_decay = decoupled ? weight_decay : 0.0f;
    return c;
}

/* What every gradient of the step is divided by: G / max_grad_norm when the global gradient norm
 * G exceeds max_grad_norm > 0, else 1. A kernel may read G from device memory. */
AMP_HD static inline float amp_lamb_clip_divisor(float global_grad_norm, float max_grad_norm) {
    return max_grad_norm > 0.0f && global_grad_norm > max_grad_norm
               ? global_grad_norm / max_grad_norm
               : 1.0f;
}

/* Stage 1: updates *exp_avg and *exp_avg_sq and returns the direction u of this element.
 * param is read only for weight decay (when both decays are 0 it may be anything finite). */
AMP_HD static inline float amp_lamb_stage1_elem(const amp_lamb_coefs *c, float clip_divisor,
                                                float param, float grad, float *exp_avg,
                                                float *exp_avg_sq) {
    float g = grad / clip_divisor;
    g = c->l2_decay != 0.0f ? fmaf(c->l2_decay, param, g) : g;
    float m = fmaf(c->grad_weight, g, *exp_avg * c->beta1);
    float v = fmaf(c->one_minus_beta2 * g, g, *exp_avg_sq * c->beta2);
    *exp_avg = m;
    *exp_avg_sq = v;
    float denom = sqrtf(v / c->bias_correction2) + c->eps;
    float r = (m / c->bias_correction1) / denom;
    return c->decoupled_decay != 0.0f ? fmaf(c->decoupled_decay, param, r) : r;
}

/* The step of one tensor: lr * ||x|| / ||u||, or lr when the ratio does not apply (weight_decay
 * 0 without adapt_all) or either norm is 0. param_norm is the norm before this step's update. A
 * NaN norm gives a NaN step (it propagates). */
AMP_HD static inline float amp_lamb_step_size(float lr, float param_norm, float update_norm,
                                              float weight_decay, int adapt_all) {
    int adapt = adapt_all || weight_decay != 0.0f;
    return adapt && param_norm != 0.0f && update_norm != 0.0f ? lr * (param_norm / update_norm)
                                                              : lr;
}

/* Stage 2: x = x - step_size * u, one rounding. */
AMP_HD static inline void amp_lamb_stage2_elem(float step_size, float *param, float update) {
    *param = fmaf(-step_size, update, *param);
}

#endif
