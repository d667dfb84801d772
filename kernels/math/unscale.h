/* Per-element math of the loss scaler: the unscale-and-check pass and the squares of the
 * gradient-norm reduction, shared by the CPU loops (kernels/cpu/unscale.c) and the CUDA kernels
 * (kernels/cuda/unscale.cu).
 *
 * Unscale follows torch's _amp_foreach_non_finite_check_and_unscale_ (ATen
 * AmpGradScalerKernels.cpp on the CPU, AmpKernels.cu on CUDA) element for element:
 *   - the INPUT is tested: a gradient that is inf or NaN raises the flag, whatever the product
 *     becomes; a finite gradient whose product overflows (only possible with a scale below 1)
 *     does not, exactly as in torch;
 *   - out = g * inv_scale in f32, or g itself when inv_scale == 1 (torch skips the multiply
 *     there, which keeps a signalling NaN's bits);
 *   - f16/bf16 gradients are widened exactly first, so their test is the same as on the half.
 *
 * Squares for the norm are formed in double: an f32 has 24 significant bits, its square 48, so
 * the square is exact and only the (double) sum rounds. */
#ifndef AMP_KERNELS_MATH_UNSCALE_H
#define AMP_KERNELS_MATH_UNSCALE_H

#include <stdint.h>

#include "core/half.h"
#include "core/hd.h"

/* 1 when g is inf or NaN (all exponent bits set), else 0. On the bits rather than isfinite():
 * the same code under cc, g++ (cudacpu) and nvcc, and a plain integer test the loops vectorise. */
AMP_HD static inline uint32_t amp_unscale_nonfinite(float g) {
    return (amp_f32_bits(g) & 0x7f800000u) == 0x7f800000u;
}

AMP_HD static inline float amp_unscale_elem(float g, float inv_scale) {
    return inv_scale == 1.0f ? g : g * inv_scale;
}

AMP_HD static inline double amp_square_f64(float x) {
    double d = (double)x;
    return d * d;
}

#endif
