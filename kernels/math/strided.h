/* Strided views (core/backend.h's amp_bcast_desc, amp_strided_desc) and the reduction over a
 * middle dim, per element, shared by the CPU and CUDA kernels so that both address and combine
 * the same elements in the same order. */
#ifndef AMP_KERNELS_MATH_STRIDED_H
#define AMP_KERNELS_MATH_STRIDED_H

#include <stdint.h>

#include "core/hd.h"

/* The offsets through strides s1 and s2 of the element at dense row-major index i of shape. */
AMP_HD static inline void amp_view_offsets(int ndim, const int64_t *shape, const int64_t *s1,
                                           const int64_t *s2, int64_t i, int64_t *o1,
                                           int64_t *o2) {
    int64_t a = 0, b = 0;
    for (int k = ndim - 1; k >= 0; k--) {
        int64_t e = shape[k], ik = i % e;
        i /= e;
        a += ik * s1[k];
        b += ik * s2[k];
    }
    *o1 = a;
    *o2 = b;
}

/* The offset through stride s of the element at dense row-major index i of shape. */
AMP_HD static inline int64_t amp_view_offset(int ndim, const int64_t *shape, const int64_t *s,
                                             int64_t i) {
    int64_t o = 0;
    for (int k = ndim - 1; k >= 0; k--) {
        o += (i % shape[k]) * s[k];
        i /= shape[k];
    }
    return o;
}

/* x[j] > best in torch.max's order: a NaN beats everything and, once taken, keeps the place;
 * equal values keep the first. */
AMP_HD static inline int amp_max_takes(float v, float best) {
    return best == best && (v > best || v != v);
}

#endif
