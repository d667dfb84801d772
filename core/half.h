/* Bit-exact conversions between f32 and the half types, shared by the CPU backend and the CUDA
 * kernels (AMP_HD). Rounding is to nearest, ties to even; values past the largest finite half
 * become inf; subnormals are kept; every NaN becomes the canonical quiet NaN 0x7fff, as CUDA's
 * __float2half_rn / __float2bfloat16_rn do, so both backends produce the same bits. */
#ifndef AMP_CORE_HALF_H
#define AMP_CORE_HALF_H

#include <stdint.h>
#include <string.h>

#include "core/hd.h"

AMP_HD static inline uint32_t amp_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

AMP_HD static inline float amp_f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* Adds one to h when the dropped bits `rem` (of `shift` bits) are above half, or exactly half and
 * h is odd: round to nearest even. */
AMP_HD static inline uint32_t amp_round_nearest_even(uint32_t h, uint32_t rem, int shift) {
    uint32_t halfway = 1u << (shift - 1);
    return h + (rem > halfway || (rem == halfway && (h & 1u)));
}

AMP_HD static inline uint16_t amp_f32_to_f16_bits(float f) {
    uint32_t x = amp_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return 0x7fffu;                 /* NaN */
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 (or inf): inf */
    if (x >= 0x38800000u) {                                /* normal half: >= 2^-14 */
        uint32_t h = (x >> 13) - (112u << 10);             /* rebias exponent 127 -> 15 */
        return (uint16_t)(sign | amp_round_nearest_even(h, x & 0x1fffu, 13));
    }
    if (x < 0x33000000u) return (uint16_t)sign;            /* < 2^-25: rounds to zero */
    uint32_t e = x >> 23, m = (x & 0x7fffffu) | 0x800000u;
    int shift = (int)(126u - e);                           /* 14..24: subnormal half */
    uint32_t h = m >> shift;
    return (uint16_t)(sign | amp_round_nearest_even(h, m & ((1u << shift) - 1u), shift));
}

AMP_HD static inline float amp_f16_bits_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31) return amp_f32_from_bits(sign | 0x7f800000u | (m << 13));
    if (e != 0) return amp_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return amp_f32_from_bits(sign);
    uint32_t e32 = 113;                                    /* normalise the subnormal */
    while (!(m & 0x400u)) {
        m <<= 1;
        e32--;
    }
    return amp_f32_from_bits(sign | (e32 << 23) | ((m & 0x3ffu) << 13));
}

AMP_HD static inline uint16_t amp_f32_to_bf16_bits(float f) {
    uint32_t x = amp_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;   /* NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

AMP_HD static inline float amp_bf16_bits_to_f32(uint16_t h) {
    return amp_f32_from_bits((uint32_t)h << 16);
}

#endif
