/* The arithmetic elementwise ops, per element, in f32 (storage dtype conversion is the caller's:
 * kernels/math/load_store.h). IEEE semantics: NaN and inf propagate. */
#ifndef AMP_KERNELS_MATH_BINARY_H
#define AMP_KERNELS_MATH_BINARY_H

#include "core/hd.h"

AMP_HD static inline float amp_add(float a, float b) { return a + b; }
AMP_HD static inline float amp_sub(float a, float b) { return a - b; }
AMP_HD static inline float amp_mul(float a, float b) { return a * b; }
AMP_HD static inline float amp_div(float a, float b) { return a / b; }
AMP_HD static inline float amp_scale(float x, float alpha) { return alpha * x; }
AMP_HD static inline float amp_add_scalar(float x, float alpha) { return x + alpha; }
AMP_HD static inline float amp_div_scalar(float x, float alpha) { return x / alpha; }

/* a * b rounded on its own, never fused with an add that follows. The C files build with
 * -ffp-contract=off, but nvcc contracts a * b + c into one fma by default: __fmul_rn is the
 * product nvcc leaves alone, so both backends round the product and then the sum. */
AMP_HD static inline float amp_mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

/* y + alpha * x: gradient accumulation (two roundings, the same on every backend). */
AMP_HD static inline float amp_axpy(float y, float alpha, float x) {
    return y + amp_mul_rn(alpha, x);
}

#endif
