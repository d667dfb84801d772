/* ReLU forward and backward, per element (PyTorch torch.relu / threshold_backward). */
#ifndef AMP_KERNELS_MATH_RELU_H
#define AMP_KERNELS_MATH_RELU_H

#include "core/hd.h"

/* max(x, 0) with NaN kept and -0 kept, bit for bit what torch.relu returns on the CPU. */
AMP_HD static inline float amp_relu(float x) {
    return x < 0.0f ? 0.0f : x;
}

/* dx from the forward output y and dy. PyTorch's threshold_backward is `y <= 0 ? 0 : dy`, so a
 * NaN output lets dy through (and with it a NaN that the loss scaler must see). */
AMP_HD static inline float amp_relu_bwd(float y, float dy) {
    return y <= 0.0f ? 0.0f : dy;
}

#endif
