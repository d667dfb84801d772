/* ReLU forward and backward, per element (PyTorch torch.relu / threshold_backward). */
#ifndef AMP_KERNELS_MATH_RELU_H
#define AMP_KERNELS_MATH_RELU_H

#include <stdint.h>

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

/* amp_relu_epilogue on the bits of a half value, for the CPU's loops (no widening): v > 0 holds
 * exactly for the bits 1 ... inf_bits (sign clear, not zero, not NaN; 0x7c00 for f16, 0x7f80
 * for bf16), which are kept; every other pattern becomes +0. */
AMP_HD static inline uint16_t amp_relu_epilogue_half_bits(uint16_t b, uint16_t inf_bits) {
    return (uint16_t)(b - 1u) < inf_bits ? b : (uint16_t)0;
}

/* dx from the forward output y and dy. PyTorch's threshold_backward is `y <= 0 ? 0 : dy`, so a
 * NaN output lets dy through (and with it a NaN that the loss scaler must see). */
AMP_HD static inline float amp_relu_bwd(float y, float dy) {
    return y <= 0.0f ? 0.0f : dy;
}

#endif
