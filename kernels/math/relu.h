/* ReLU forward and backward, per element (PyTorch torch.relu / threshold_backward). */
#ifndef AMP_KERNELS_MATH_RELU_H
#define AMP_KERNELS_MATH_RELU_H

#include "core/hd.h"

/* max(x, 0) with NaN kept and -0 kept, bit for bit what torch.relu returns on the CPU. */
AMP_HD static inline float amp_relu(float x) {
    return x < 0.0f ? 0.0f : x;
}

/* The GEMM's ReLU epilogue (AMP_GEMM_EPILOGUE_RELU): cuBLASLt's `v > 0 ? v : 0`, so a NaN and
 * -0 become +0. Applied to a value already rounded to a half dtype it gives the bits of rounding
 * the f32 value after the epilogue (rounding keeps the sign, and v > 0 rounds to >= +0). */
AMP_HD static inline float amp_relu_epilogue(float v) {
    return v > 0.0f ? v : 0.0f;
}

/* dx from the forward output y and dy. PyTorch's threshold_backward is `y <= 0 ? 0 : dy`, so a
 * NaN output lets dy through (and with it a NaN that the loss scaler must see). */
AMP_HD static inline float amp_relu_bwd(float y, float dy) {
    return y <= 0.0f ? 0.0f : dy;
}

#endif
