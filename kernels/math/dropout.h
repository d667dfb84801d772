/* Inverted dropout per element (PyTorch native_dropout: output = input * mask * (1 / (1 - p))).
 * The mask comes from core/philox.h, a pure function of (seed, offset + i), so the CPU and CUDA
 * backends keep the same elements whatever their thread layout. */
#ifndef AMP_KERNELS_MATH_DROPOUT_H
#define AMP_KERNELS_MATH_DROPOUT_H

#include <stdint.h>

#include "core/hd.h"
#include "core/philox.h"

/* 1 when element `index` of stream `seed` is kept: its uniform draw in [0, 1) is >= p. */
AMP_HD static inline uint8_t amp_dropout_keep(uint64_t seed, uint64_t index, float p) {
    return amp_philox_uniform(seed, index) >= p;
}

/* 1 / (1 - p), computed in double and rounded once, as PyTorch's scale. */
AMP_HD static inline float amp_dropout_scale(float p) {
    return (float)(1.0 / (1.0 - (double)p));
}

/* (x * mask) * scale: forward on x, backward on dy. A dropped NaN or inf stays NaN, as in
 * PyTorch, so the loss scaler still sees an overflow that dropout hid. */
AMP_HD static inline float amp_dropout_apply(float x, uint8_t mask, float scale) {
    return (x * (mask ? 1.0f : 0.0f)) * scale;
}

#endif
