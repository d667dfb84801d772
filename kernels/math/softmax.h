/* Softmax and log-softmax over the last dim, per row and per element, shared by the CPU and CUDA
 * kernels (the same bits on both): a row's max and sum run as a warp runs them
 * (kernels/math/lanes.h; the max lets a NaN through), and exp is kernels/math/transcendental.h's.
 *   y = e^(x - m) (1 / s) (softmax) or x - m - ln s (log-softmax), m the row's max,
 *   s = sum e^(x - m);
 *   a row entirely -inf (fully masked) gives 0 (softmax; PyTorch gives NaN) and -inf
 *   (log-softmax: probability 0); a NaN anywhere in a row makes it NaN, as PyTorch's.
 * Backward, from the output y: softmax dx = y (dy - sum(dy y)), log-softmax
 * dx = dy - e^y sum(dy). */
#ifndef AMP_KERNELS_MATH_SOFTMAX_H
#define AMP_KERNELS_MATH_SOFTMAX_H

#include <math.h>
#include <stdbool.h>

#include "core/hd.h"
#include "kernels/math/binary.h"
#include "kernels/math/transcendental.h"

/* e^(x - m), 0 for a fully masked row (m = -inf). */
AMP_HD static inline float amp_softmax_exp(float x, float m) {
    return m == -INFINITY ? 0.0f : amp_expf(x - m);
}

/* The output from x, the row's max m and sum s: e^(x - m) times 1 / s (PyTorch's CPU softmax
 * multiplies by the reciprocal too; a division per element was most of the CPU's time). */
AMP_HD static inline float amp_softmax_out(float x, float m, float s, bool log) {
    if (log) return m == -INFINITY ? -INFINITY : (x - m) - amp_logf(s);
    return m == -INFINITY ? 0.0f : amp_mul_rn(amp_expf(x - m), 1.0f / s);
}

/* dx from y, dy and the row's sum r: sum(dy y) (softmax) or sum(dy) (log-softmax). */
AMP_HD static inline float amp_softmax_dx(float y, float dy, float r, bool log) {
    if (log) return dy - amp_mul_rn(amp_expf(y), r);
    return amp_mul_rn(y, dy - r);
}

#endif
