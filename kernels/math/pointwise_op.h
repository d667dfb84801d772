/* One pointwise op applied to one element's f32 values: the per-element function of the unary,
 * binary and binary_bcast entries on both backends (the CPU's tiles pick their loop once per
 * tile; binary_bcast calls this per element; CUDA's kernels take the op as a template argument,
 * so the switch folds away). Made from core/pointwise_ops.def. */
#ifndef AMP_KERNELS_MATH_POINTWISE_OP_H
#define AMP_KERNELS_MATH_POINTWISE_OP_H

#include "core/backend.h"
#include "kernels/math/binary.h"
#include "kernels/math/relu.h"
#include "kernels/math/transcendental.h"

AMP_HD static inline float amp_unary_apply(amp_unary_op op, float x, float alpha) {
    switch (op) {
#define AMP_UNARY_OP(name, element)                                                                \
    case AMP_UNARY_##name: return element;
#include "core/pointwise_ops.def"
    default: return (float)NAN; /* not an op: the entries refuse it before */
    }
}

AMP_HD static inline float amp_binary_apply(amp_binary_op op, float a, float b) {
    switch (op) {
#define AMP_BINARY_OP(name, element)                                                               \
    case AMP_BINARY_##name: return element;
#include "core/pointwise_ops.def"
    default: return (float)NAN; /* not an op: the entries refuse it before */
    }
}

#endif
