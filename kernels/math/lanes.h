/* A row reduced as one CUDA warp reduces it, for kernels that must give the same bits on the CPU
 * and the device (LayerNorm, softmax): 32 lanes, lane l taking the row's elements l, l + 32,
 * l + 64, ... in that order, then the lanes combined by the xor butterfly of __shfl_xor_sync
 * (offsets 16, 8, 4, 2, 1), after which every lane holds the same result. The device kernels are
 * that warp; the CPU kernels keep 32 accumulators (which vectorise) and call these for the tree. */
#ifndef AMP_KERNELS_MATH_LANES_H
#define AMP_KERNELS_MATH_LANES_H

#include "core/hd.h"

#define AMP_LANES 32

/* The max that lets a NaN through (either operand). */
AMP_HD static inline float amp_lanes_max2(float a, float b) { return a > b || a != a ? a : b; }

/* Lane 0's result of the butterfly over 32 lane values: sums (max = 0) or NaN-propagating
 * maxima (max = 1). At offset off lane 0 reads lanes [0, 2 off) only, and lane l < off takes
 * f(acc[l], acc[l + off]), so halving the lanes in place gives its bits with 31 operations
 * instead of 160 (every lane's would not be the same: the max is not symmetric in +0 and -0). */
static inline float amp_lanes_combine(float *acc, int max) {
    for (int off = AMP_LANES / 2; off >= 1; off /= 2)
        for (int l = 0; l < off; l++)
            acc[l] = max ? amp_lanes_max2(acc[l], acc[l + off]) : acc[l] + acc[l + off];
    return acc[0];
}

#endif
