/* A warp's butterflies over the 32 lanes of kernels/math/lanes.h (__shfl_xor_sync at offsets 16,
 * 8, 4, 2, 1): every lane ends with the result, lane 0 with the bits amp_lanes_combine gives on
 * the CPU, so the row kernels that use them (LayerNorm, softmax, cross-entropy, attention)
 * can give the CPU backend's bits. */
#ifndef AMP_KERNELS_CUDA_WARP_LANES_CUH
#define AMP_KERNELS_CUDA_WARP_LANES_CUH

#include "kernels/math/lanes.h"

static __device__ inline float amp_warp_sum(float v) {
    for (int off = AMP_LANES / 2; off >= 1; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* The max that lets a NaN through (amp_lanes_max2). */
static __device__ inline float amp_warp_max(float v) {
    for (int off = AMP_LANES / 2; off >= 1; off /= 2) {
        v = amp_lanes_max2(v, __shfl_xor_sync(0xffffffffu, v, off));
    }
    return v;
}

#endif
