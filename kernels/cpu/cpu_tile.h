/* Tiles for f16/bf16 storage: each kernel widens a tile of input into an f32 stack buffer and
 * narrows its f32 results back, so every inner loop is a plain float loop the compiler vectorises.
 * f32 tensors are used in place. */
#ifndef AMP_KERNELS_CPU_TILE_H
#define AMP_KERNELS_CPU_TILE_H

#include "kernels/cpu/cpu_backend.h"

/* Input elements [i0, i0 + len) as f32: the tensor itself when f32, else widened into buf. */
static inline const float *tile_in(const void *p, amp_dtype dt, int64_t i0, int64_t len, float *buf) {
    if (dt == AMP_F32) return (const float *)p + i0;
    amp_cpu_widen_tile(buf, (const uint16_t *)p + i0, dt, len);
    return buf;
}

/* Where output elements [i0, ...) are computed: the tensor when f32, else buf, which
 * tile_out_store then narrows into the tensor. */
static inline float *tile_out(void *p, amp_dtype dt, int64_t i0, float *buf) {
    return dt == AMP_F32 ? (float *)p + i0 : buf;
}

static inline void tile_out_store(void *p, amp_dtype dt, int64_t i0, int64_t len, const float *buf) {
    if (dt != AMP_F32) amp_cpu_round_tile((uint16_t *)p + i0, dt, buf, len);
}

#endif
