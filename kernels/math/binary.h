/* The arithmetic elementwise ops, per element, in f32 (storage dtype conversion is the caller's:
 * kernels/math/load_store.h). IEEE semantics: NaN and inf propagate. */
#ifndef AMP_KERNELS_MATH_BINARY_H
#define AMP_KERNELS_MATH_BINARY_H

#include "core/hd.h"

AMP_HD static inline float amp_add(float a, float b) { return a + b; }
AMP_HD static inline float amp_sub(float a, float b) { return a - b; }
AMP_HD static inline float amp_mul(float a, float b) { return a * b; }
AMP_HD static inline float amp_scale(float x, float alpha) { return alpha * x; }

/* y + alpha * x: gradient accumulation. */
AMP_HD static inline float amp_axpy(float y, float alpha, float x) { return y + alpha * x; }

#endif
