/* SwiGLU's per-element arithmetic, shared by the CPU loop and the CUDA kernel: y = silu(a) * b
 * for the gate a and the up projection b, with the roundings amp_silu followed by amp_mul make
 * (silu's output rounded to the storage dtype, then the product), and a backward with theirs
 * (amp_mul's dy b and dy silu(a), each rounded, then silu's backward of the first), so the fused
 * op gives the unfused ops' bits in every dtype. */
#ifndef AMP_KERNELS_MATH_SWIGLU_H
#define AMP_KERNELS_MATH_SWIGLU_H

#include "amp/tensor.h"
#include "core/half.h"
#include "kernels/math/transcendental.h"

/* v rounded to dt (f32, f16 or bf16) and back: what storing it in a tensor of dt keeps. */
AMP_HD static inline float amp_round_to(float v, amp_dtype dt) {
    if (dt == AMP_BF16) return amp_bf16_bits_to_f32(amp_f32_to_bf16_bits(v));
    if (dt == AMP_F16) return amp_f16_bits_to_f32(amp_f32_to_f16_bits(v));
    return v;
}

/* y (before its own rounding to dt) of gate a and up b. */
AMP_HD static inline float amp_swiglu_elem(float a, float b, amp_dtype dt) {
    return amp_round_to(amp_siluf(a), dt) * b;
}

/* The gradients (before their rounding to dt) of gate a and up b from dy. */
AMP_HD static inline void amp_swiglu_elem_bwd(float a, float b, float dy, amp_dtype dt, float *da,
                                         float *db) {
    *db = dy * amp_round_to(amp_siluf(a), dt);
    *da = amp_silu_bwd(a, amp_round_to(dy * b, dt));
}

#endif
