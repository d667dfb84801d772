/* Max pooling per window (PyTorch's CPU max_pool2d, aten/src/ATen/native/cpu/MaxPoolKernel.cpp). */
#ifndef AMP_KERNELS_MATH_POOL_H
#define AMP_KERNELS_MATH_POOL_H

#include <stdint.h>

#include "core/hd.h"

/* The input range [*start, *end) that output position o reads along one axis: the window
 * [o * stride - pad, o * stride - pad + k) clipped to the input, since padding never wins. */
AMP_HD static inline void amp_pool_window(int64_t o, int64_t stride, int64_t pad, int64_t k,
                                          int64_t in, int64_t *start, int64_t *end) {
    int64_t s = o * stride - pad, e = s + k;
    *start = s < 0 ? 0 : s;
    *end = e > in ? in : e;
}

/* Whether v replaces the running maximum: strictly greater (so the first maximum in row-major
 * window order keeps the argmax), or NaN (so NaN propagates, and the last NaN holds the argmax),
 * as PyTorch's `(val > maxval) || std::isnan(val)`. */
AMP_HD static inline int amp_maxpool_takes(float v, float best) {
    return v > best || v != v;
}

#endif
