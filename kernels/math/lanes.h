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

/* The butterfly over 32 lane values: sums (max = 0) or NaN-propagating maxima (max = 1). */
static inline float amp_lanes_combine(float *acc, int max) {
    for (int off = AMP_LANES / 2; off >= 1; off /= 2) {
        float t[AMP_LANES];
        for (int l = 0; l < AMP_LANES; l++)
            t[l] = max ? amp_lanes_max2(acc[l], acc[l ^ off]) : acc[l] + acc[l ^ off];
        for (int l = 0; l < AMP_LANES; l++) acc[l] = t[l];
    }
    return acc[0];
}

#endif
