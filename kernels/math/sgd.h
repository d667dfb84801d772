/* One element of torch.optim.SGD's update (maximize=False), shared by the CPU loop
 * (kernels/cpu/optim.c) and the CUDA fused optimizer kernel.
 *
 * Bit-for-bit what torch's single-tensor SGD computes on the CPU, op by op:
 *   d = grad.add(param, alpha=wd)            -> fmaf(p, wd, g)          (only when wd != 0)
 *   buf = d (first step)  or  buf.mul_(momentum).add_(d, alpha=1 - dampening)
 *                                            -> fmaf(d, 1 - dampening, buf * momentum)
 *   d = nesterov ? d.add(buf, alpha=momentum) : buf   -> fmaf(buf, momentum, d)
 *   param.add_(d, alpha=-lr)                 -> fmaf(d, -lr, p)
 * ATen evaluates `a + alpha * b` as one fused multiply-add (Vectorized fmadd, and its scalar tail
 * is contracted the same way), so the fmaf calls are spelled out: the result is then the same on
 * every compiler, on the CPU and under nvcc, and equals torch's.
 * torch forms 1 - dampening and -lr in double from its Python floats and rounds them to f32 when
 * the kernel runs; amp_sgd_coefs_make does the same from the f32 options.
 * With a half copy (amp_*_desc.half_copy, O2), a kernel stores the updated value right after this
 * function returns, as amp_store_f32(half_copy, half_dtype, i, *param) (kernels/math/
 * load_store.h): round to nearest even, the bits the CPU backend writes. */
#ifndef AMP_KERNELS_MATH_SGD_H
#define AMP_KERNELS_MATH_SGD_H

#include <math.h>

#include "core/hd.h"

/* The f32 scalars of one SGD update of one tensor. */
typedef struct amp_sgd_coefs {
    float neg_lr;
    float momentum;            /* 0: no momentum buffer */
    float one_minus_dampening; /* weight of the new gradient in the buffer */
    float weight_decay;        /* 0: the gradient is used as is */
    int nesterov;
    int first_step; /* the buffer is (re)initialised to the gradient, as torch does when it has
                       no momentum_buffer for the parameter yet */
} amp_sgd_coefs;

AMP_HD static inline amp_sgd_coefs amp_sgd_coefs_make(float lr, float momentum, float dampening,
                                                      float weight_decay, int nesterov,
                                                      int first_step) {
    amp_sgd_coefs c;
    c.neg_lr = -lr;
    c.momentum = momentum;
    c.one_minus_dampening = (float)(1.0 - (double)dampening);
    c.weight_decay = weight_decay;
    c.nesterov = nesterov;
    c.first_step = first_step;
    return c;
}

/* Updates *param and, when momentum != 0, *buf (not read on the first step; untouched, and may
 * be NULL, without momentum). */
AMP_HD static inline void amp_sgd_update_elem(const amp_sgd_coefs *c, float *param, float grad,
                                              float *buf) {
    float p = *param;
    float d = grad;
    if (c->weight_decay != 0.0f) d = fmaf(p, c->weight_decay, d);
    if (c->momentum != 0.0f) {
        float b = c->first_step ? d : fmaf(d, c->one_minus_dampening, *buf * c->momentum);
        *buf = b;
        d = c->nesterov ? fmaf(b, c->momentum, d) : b;
    }
    *param = fmaf(d, c->neg_lr, p);
}

#endif
