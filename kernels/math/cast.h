/* f32 <-> i32 conversion for casts and fills of i32 tensors (f32 <-> f16/bf16 is core/half.h). */
#ifndef AMP_KERNELS_MATH_CAST_H
#define AMP_KERNELS_MATH_CAST_H

#include <stdint.h>

#include "core/hd.h"

/* Truncates toward zero like C and PyTorch's .to(torch.int32), but defined everywhere, as CUDA's
 * __float2int_rz: NaN gives 0 and values past the i32 range saturate (plain C leaves them
 * undefined, and x86 gives INT32_MIN for both). */
AMP_HD static inline int32_t amp_f32_to_i32(float x) {
    if (x != x) return 0;
    if (x >= 2147483648.0f) return INT32_MAX;
    if (x <= -2147483648.0f) return INT32_MIN;
    return (int32_t)x;
}

AMP_HD static inline float amp_i32_to_f32(int32_t x) {
    return (float)x; /* round to nearest even past 2^24, as every IEEE conversion */
}

#endif
