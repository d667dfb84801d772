/* One element of torch.optim.Adam / AdamW's update (amsgrad=False, maximize=False), shared by
 * the CPU loop (kernels/cpu/optim.c) and the CUDA fused optimizer kernel.
 *
 * Bit-for-bit what torch's single-tensor Adam computes on the CPU (torch/optim/adam.py,
 * _single_tensor_adam, capturable=False), op by op:
 *   AdamW: param.mul_(1 - lr * wd)                          -> p * f32(1 - lr*wd)
 *   Adam:  grad = grad.add(param, alpha=wd)                 -> fmaf(p, wd, g)   (wd != 0 only)
 *   exp_avg.lerp_(grad, 1 - beta1)                          -> amp_lerp_f32 (ATen's lerp: two
 *                                                              branches around weight 0.5)
 *   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
 *                                                           -> fmaf((1-beta2) * g, g, v * beta2)
 *   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
 *   param.addcdiv_(exp_avg, denom, value=-step_size)        -> p + (-step_size * m) / denom
 * ATen evaluates `a + alpha * b`, lerp and addcmul as fused multiply-adds (Vectorized fmadd, and
 * contracted scalar tails), so the fmaf calls are spelled out: the same bits on every compiler,
 * on the CPU and under nvcc. No other a*b+c is left for a compiler to contract.
 * The step scalars are Python doubles in torch (bias_correction1 = 1 - beta1**step,
 * step_size = lr / bias_correction1, bias_correction2_sqrt = (1 - beta2**step)**0.5), rounded to
 * f32 when a kernel takes them; amp_adam_coefs_make computes them the same way from the f32
 * options (pow(x, 0.5) as Python's ** does, not sqrt). Compute them on the host once per tensor
 * and step: device pow may differ from the host's in the last double bit.
 * With a half copy (amp_*_desc.half_copy, O2), a kernel stores the updated value right after this
 * function returns, as amp_store_f32(half_copy, half_dtype, i, *param) (kernels/math/
 * load_store.h): round to nearest even, the bits the CPU backend writes. */
#ifndef AMP_KERNELS_MATH_ADAM_H
#define AMP_KERNELS_MATH_ADAM_H

#include <math.h>
#include <stdint.h>

#include "core/hd.h"

/* The f32 scalars of one Adam update of one tensor at step t (t >= 1, per parameter). */
typedef struct amp_adam_coefs {
    float lerp_weight;         /* 1 - beta1 */
    float beta2;
    float one_minus_beta2;
    float neg_step_size;       /* -lr / (1 - beta1^t) */
    float bias_correction2_sqrt; /* (1 - beta2^t)^0.5 */
    float eps;
    float weight_decay;        /* Adam: L2 added to the gradient; 0: none */
    float decay_factor;        /* AdamW: 1 - lr * weight_decay; 1: none */
} amp_adam_coefs;

AMP_HD static inline amp_adam_coefs amp_adam_coefs_make(float lr, float beta1, float beta2,
                                                        float eps, float weight_decay,
                                                        int decoupled, int64_t step) {
    double t = (double)step;
    double bias_correction1 = 1.0 - pow((double)beta1, t);
    double bias_correction2 = 1.0 - pow((double)beta2, t);
    amp_adam_coefs c;
    c.lerp_weight = (float)(1.0 - (double)beta1);
    c.beta2 = beta2;
    c.one_minus_beta2 = (float)(1.0 - (double)beta2);
    c.neg_step_size = (float)(-((double)lr / bias_correction1));
    c.bias_correction2_sqrt = (float)pow(bias_correction2, 0.5);
    c.eps = eps;
    c.weight_decay = decoupled ? 0.0f : weight_decay;
    c.decay_factor = decoupled ? (float)(1.0 - (double)lr * (double)weight_decay) : 1.0f;
    return c;
}

/* ATen's lerp(self, end, weight): self + w * (end - self) for |w| < 0.5, else
 * end - (end - self) * (1 - w), each one rounding of a multiply-add; written as ATen's vector
 * lerp writes it (select a coefficient and a base, one fma; w - 1 == -(1 - w) exactly there), so
 * a loop over it has no branch. */
AMP_HD static inline float amp_lerp_f32(float self, float end, float w) {
    int small = fabsf(w) < 0.5f;
    return fmaf(small ? w : w - 1.0f, end - self, small ? self : end);
}

/* The options' branches are selects (no control flow: loops over this vectorise), each taking
 * exactly torch's path: no decay multiply and no L2 term when those are off. */
AMP_HD static inline void amp_adam_update_elem(const amp_adam_coefs *c, float *param, float grad,
                                               float *exp_avg, float *exp_avg_sq) {
    float p = c->decay_factor != 1.0f ? *param * c->decay_factor : *param;
    float g = c->weight_decay != 0.0f ? fmaf(p, c->weight_decay, grad) : grad;
    float m = amp_lerp_f32(*exp_avg, g, c->lerp_weight);
    float v = fmaf(c->one_minus_beta2 * g, g, *exp_avg_sq * c->beta2);
    float denom = sqrtf(v) / c->bias_correction2_sqrt + c->eps;
    *param = p + (c->neg_step_size * m) / denom;
    *exp_avg = m;
    *exp_avg_sq = v;
}

#endif
