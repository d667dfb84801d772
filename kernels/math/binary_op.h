/* One amp_binary_op applied to one pair of f32 values: the per-element function of every binary
 * entry (binary's tiles pick theirs once per tile; binary_bcast calls this per element), on both
 * backends. */
#ifndef AMP_KERNELS_MATH_BINARY_OP_H
#define AMP_KERNELS_MATH_BINARY_OP_H

#include "core/backend.h"
#include "kernels/math/binary.h"
#include "kernels/math/relu.h"
#include "kernels/math/transcendental.h"

AMP_HD static inline float amp_binary_apply(amp_binary_op op, float a, float b) {
    switch (op) {
    case AMP_BINARY_ADD: return amp_add(a, b);
    case AMP_BINARY_SUB: return amp_sub(a, b);
    case AMP_BINARY_MUL: return amp_mul(a, b);
    case AMP_BINARY_DIV: return amp_div(a, b);
    case AMP_BINARY_TANH_BWD: return amp_tanh_bwd(a, b);
    case AMP_BINARY_SIGMOID_BWD: return amp_sigmoid_bwd(a, b);
    case AMP_BINARY_SILU_BWD: return amp_silu_bwd(a, b);
    case AMP_BINARY_GELU_TANH_BWD: return amp_gelu_tanh_bwd(a, b);
    case AMP_BINARY_GELU_ERF_BWD: return amp_gelu_erf_bwd(a, b);
    default: return amp_relu_bwd(a, b);
    }
}

#endif
