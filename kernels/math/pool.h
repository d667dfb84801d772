/* Max pooling per window (PyTorch's CPU max_pool2d, aten/src/ATen/native/cpu/MaxPoolKernel.cpp). */
#ifndef AMP_KERNELS_MATH_POOL_H
#define AMP_KERNELS_MATH_POOL_H

#include <math.h>
#include <stdint.h>

#include "core/hd.h"
#include "kernels/math/load_store.h"

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

/* The window [h0, h1) x [w0, w1) of the plane at x + base (row length w_in, dtype dt): its
 * maximum in *best and the plane index (h * w_in + w) of the element that holds it. The scan
 * starts from -inf with the index on the first element and goes in row-major order, so the
 * forward (which keeps the value) and the backward (which finds the index again from the same
 * input, as cuDNN's pooling backward does) agree on every window. */
AMP_HD static inline int64_t amp_pool_argmax(const void *x, amp_dtype dt, int64_t base,
                                             int64_t w_in, int64_t h0, int64_t h1, int64_t w0,
                                             int64_t w1, float *best) {
    float b = -INFINITY;
    int64_t best_i = h0 * w_in + w0;
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) {
            float v = amp_load_f32(x, dt, base + ih * w_in + iw);
            if (amp_maxpool_takes(v, b)) {
                b = v;
                best_i = ih * w_in + iw;
            }
        }
    *best = b;
    return best_i;
}

#endif
