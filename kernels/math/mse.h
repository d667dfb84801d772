/* Mean squared error per element (torch.nn.functional.mse_loss, reduction='mean'). */
#ifndef AMP_KERNELS_MATH_MSE_H
#define AMP_KERNELS_MATH_MSE_H

#include "core/hd.h"

/* (a - b)^2 in f32; the mean over elements is the caller's reduction. */
AMP_HD static inline float amp_mse_sq(float a, float b) {
    float d = a - b;
    return d * d;
}

/* da = ((a - b) * norm) * dloss with norm = 2 / n, in PyTorch's order (mse_loss_backward_out:
 * sub, mul_(norm), mul_(grad_output)). */
AMP_HD static inline float amp_mse_grad(float a, float b, float norm, float dloss) {
    return ((a - b) * norm) * dloss;
}

#endif
