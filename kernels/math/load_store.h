/* Loading any float storage dtype as f32 and storing f32 back with round-to-nearest-even: the
 * one place where the CPU loops and the CUDA kernels widen and narrow. */
#ifndef AMP_KERNELS_MATH_LOAD_STORE_H
#define AMP_KERNELS_MATH_LOAD_STORE_H

#include "amp/tensor.h"
#include "core/half.h"
#include "kernels/math/cast.h"

AMP_HD static inline float amp_load_f32(const void *p, amp_dtype dt, int64_t i) {
    switch (dt) {
    case AMP_F16: return amp_f16_bits_to_f32(((const uint16_t *)p)[i]);
    case AMP_BF16: return amp_bf16_bits_to_f32(((const uint16_t *)p)[i]);
    case AMP_I32: return (float)((const int32_t *)p)[i];
    default: return ((const float *)p)[i];
    }
}

AMP_HD static inline void amp_store_f32(void *p, amp_dtype dt, int64_t i, float v) {
    switch (dt) {
    case AMP_F16: ((uint16_t *)p)[i] = amp_f32_to_f16_bits(v); break;
    case AMP_BF16: ((uint16_t *)p)[i] = amp_f32_to_bf16_bits(v); break;
    case AMP_I32: ((int32_t *)p)[i] = amp_f32_to_i32(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

#endif
