/* RoPE's per-pair arithmetic, shared by the CPU loop and the CUDA kernel (core/backend.h's
 * amp_rope_desc). The pair (a, b) at angle theta becomes (a cos - b sin, b cos + a sin): Hugging
 * Face's q * cos + rotate_half(q) * sin in f32 term for term, each product rounded before the add
 * (amp_mul_rn: nvcc would otherwise fuse it into an fma and the backends would part by an ulp).
 * The backward is the rotation by -theta. */
#ifndef AMP_KERNELS_MATH_ROPE_H
#define AMP_KERNELS_MATH_ROPE_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/math/binary.h"

AMP_HD static inline void amp_rope_pair(float a, float b, float c, float s, float *ya, float *yb) {
    *ya = amp_mul_rn(a, c) - amp_mul_rn(b, s);
    *yb = amp_mul_rn(b, c) + amp_mul_rn(a, s);
}

/* The element offsets, within a head's row of head_dim, of pair i's two members. */
AMP_HD static inline void amp_rope_members(int64_t i, int64_t head_dim, bool interleaved,
                                           int64_t *ia, int64_t *ib) {
    *ia = interleaved ? 2 * i : i;
    *ib = interleaved ? 2 * i + 1 : i + head_dim / 2;
}

#endif
