/* ReLU forward and backward, per element (PyTorch torch.relu / threshold_backward). */
#ifndef AMP_KERNELS_MATH_RELU_H
#define AMP_KERNELS_MATH_RELU_H

#include <stdint.h>

#include "core/hd.h"

/* max(x, 0) with NaN kept and -0 kept, bit for bit what torch.relu returns on the CPU. */
AMP_HD static inline float amp_relu(float x) {
    return x < 0.0f ? 0.0f : x;
}

/* The GEMM's ReLU epilogue (AMP_GEMM_EPILOGUE_RELU): amp_relu, NaN kept, but every zero is +0
 * (`v > 0 || v is NaN ? v : +0`). A NaN must reach the loss as it does through PyTorch's linear
 * and relu, where cuBLASLt's own ReLU epilogue (`max(v, 0)`) makes it +0; the CUDA backend
 * therefore applies this one in a pass of its own. With -0 made +0 the epilogue commutes with
 * rounding to a half dtype (rounding keeps the sign and NaN, and v > 0 rounds to >= +0), so it
 * gives the same bits before or after C is rounded, on either backend. */
AMP_HD static inline float amp_relu_epilogue(float v) {
    return v > 0.0f || v != v ? v : 0.0f;
}

/* amp_relu_epilogue on the bits of a half value, for the CPU's loops (no widening), with the bits
 * of widening, the f32 function and rounding back: the bits 1 ... inf_bits (sign clear, not
 * zero, not NaN; 0x7c00 for f16, 0x7f80 for bf16) are kept, a NaN becomes the canonical 0x7fff
 * (core/half.h's rounding of a NaN), every other pattern +0. */
AMP_HD static inline uint16_t amp_relu_epilogue_half_bits(uint16_t b, uint16_t inf_bits) {
    if ((uint16_t)(b & 0x7fffu) > inf_bits) return (uint16_t)0x7fff;
    return (uint16_t)(b - 1u) < inf_bits ? b : (uint16_t)0;
}

/* amp_relu and amp_relu_bwd on the bits of half values (inf_bits as above), for the CPU's
 * loops, with the bits of widening, the f32 function and rounding back: relu zeroes the negative
 * values that are not NaN and not -0 (sign set, magnitude bits 1 ... inf_bits); relu_bwd lets dy
 * through where y > 0 or y is NaN and gives +0 where y is a zero or negative. A NaN comes out as
 * the canonical 0x7fff, as core/half.h's rounding gives it. */
AMP_HD static inline uint16_t amp_half_bits_canonical(uint16_t x, uint16_t inf_bits) {
    return (uint16_t)(x & 0x7fffu) > inf_bits ? (uint16_t)0x7fff : x;
}

AMP_HD static inline uint16_t amp_relu_half_bits(uint16_t x, uint16_t inf_bits) {
    uint16_t mag = (uint16_t)(x & 0x7fffu);
    return (x & 0x8000u) && (uint16_t)(mag - 1u) < inf_bits ? (uint16_t)0
                                                            : amp_half_bits_canonical(x, inf_bits);
}

AMP_HD static inline uint16_t amp_relu_bwd_half_bits(uint16_t y, uint16_t dy, uint16_t inf_bits) {
    uint16_t mag = (uint16_t)(y & 0x7fffu);
    return mag == 0 || ((y & 0x8000u) && mag <= inf_bits) ? (uint16_t)0
                                                          : amp_half_bits_canonical(dy, inf_bits);
}

/* dx from the forward output y and dy. PyTorch's threshold_backward is `y <= 0 ? 0 : dy`, so a
 * NaN output lets dy through (and with it a NaN that the loss scaler must see). */
AMP_HD static inline float amp_relu_bwd(float y, float dy) {
    return y <= 0.0f ? 0.0f : dy;
}

#endif
