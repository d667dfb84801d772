/* The order in which the CPU backend's batch norm entries visit a channel (batchnorm_cpu.c,
 * batchnorm_sync_cpu.c; batchnorm.cu and batchnorm_sync.cu copy it on the device): one order for
 * every sum, so a channel's statistics do not depend on the loop, thread or backend. */
#ifndef AMP_KERNELS_CPU_BATCHNORM_TILES_H
#define AMP_KERNELS_CPU_BATCHNORM_TILES_H

#include <string.h>

#include "core/backend.h"
#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/math/batchnorm.h"

/* A channel is visited in tiles: the n planes in order (plane i of channel ch starts at
 * (i * c + ch) * hw), each plane in pieces of AMP_CPU_REDUCE_CHUNK. Every loop over a channel
 * uses this one order, so the sums do not depend on which loop or thread runs them. */
static inline int64_t channel_tiles(const amp_bn_desc *d) {
    return d->n * ((d->hw + AMP_CPU_REDUCE_CHUNK - 1) / AMP_CPU_REDUCE_CHUNK);
}

/* Tile t of channel ch: returns its first element's offset and sets its length. */
static inline int64_t channel_tile(const amp_bn_desc *d, int64_t ch, int64_t t, int64_t *len) {
    int64_t per_plane = (d->hw + AMP_CPU_REDUCE_CHUNK - 1) / AMP_CPU_REDUCE_CHUNK;
    int64_t i = t / per_plane, t0 = (t % per_plane) * AMP_CPU_REDUCE_CHUNK;
    *len = d->hw - t0 < AMP_CPU_REDUCE_CHUNK ? d->hw - t0 : AMP_CPU_REDUCE_CHUNK;
    return (i * d->c + ch) * d->hw + t0;
}

/* The fixed tree that combines 8 double lanes. */
static inline double lanes_total(const double lane[8]) {
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
           ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/* Element i of a tensor of dtype dt (f32 or bf16, a constant where these are called, so that
 * each loop is built per dtype) as f32, and the store that rounds back as amp_cpu_cast does: a
 * bf16 value is widened in the register that the loop computes in (a shift) instead of through
 * a copy, which made bf16 batch norm slower than f32. f16 (no such shift) goes through tiles. */
AMP_CPU_CLONE_INLINE float bn_load(const void *p, amp_dtype dt, int64_t i) {
    return dt == AMP_BF16 ? amp_bf16_bits_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

AMP_CPU_CLONE_INLINE void bn_store(void *p, amp_dtype dt, int64_t i, float v) {
    if (dt == AMP_BF16) ((uint16_t *)p)[i] = amp_f32_to_bf16_bits(v);
    else ((float *)p)[i] = v;
}

/* Eight consecutive elements from i as doubles, for the sums' eight lanes: lane j of a sum
 * takes the elements k + j, and GCC did not vectorise that loop over j written as scalars (it
 * ran one double at a time). Vector extensions keep each lane's operations and their order, so
 * the sums have the scalar loop's bits at any vector width. */
typedef double bn_v8d __attribute__((vector_size(64)));

AMP_CPU_CLONE_INLINE void bn_load8(const void *p, amp_dtype dt, int64_t i, bn_v8d *out) {
    typedef float v8f __attribute__((vector_size(32)));
    typedef uint16_t v8u16 __attribute__((vector_size(16)));
    typedef uint32_t v8u32 __attribute__((vector_size(32)));
    v8f v;
    if (dt == AMP_BF16) {
        v8u16 h;
        memcpy(&h, (const uint16_t *)p + i, sizeof h);
        v8u32 w = __builtin_convertvector(h, v8u32) << 16;
        memcpy(&v, &w, sizeof v);
    } else {
        memcpy(&v, (const float *)p + i, sizeof v);
    }
    *out = __builtin_convertvector(v, bn_v8d);
}

/* dx over channel ch from the channel's folded backward terms (kernels/math/batchnorm.h), for dt
 * f32 or bf16 (direct) or f16 (tiles). dx may alias dy: each element is read before it is
 * written. */
AMP_CPU_CLONE_INLINE void channel_bwd_dx_typed(const amp_bn_desc *d, amp_dtype dt, const void *x,
                                               const void *dy, int64_t ch, float mean, float proj,
                                               float mean_dy, float k, void *dx) {
    float bx[AMP_CPU_REDUCE_CHUNK], bdy[AMP_CPU_REDUCE_CHUNK];
    for (int64_t t = 0; t < channel_tiles(d); t++) {
        int64_t len, off = channel_tile(d, ch, t, &len);
        if (dt != AMP_F16) {
            for (int64_t e = off; e < off + len; e++)
                bn_store(dx, dt, e,
                         amp_bn_bwd_dx(bn_load(x, dt, e), bn_load(dy, dt, e), mean, proj, mean_dy,
                                       k));
            continue;
        }
        const float *xv = tile_in(x, dt, off, len, bx);
        const float *gv = tile_in(dy, dt, off, len, bdy);
        float *o = tile_out(dx, dt, off, bdy);
        for (int64_t e = 0; e < len; e++) o[e] = amp_bn_bwd_dx(xv[e], gv[e], mean, proj, mean_dy, k);
        tile_out_store(dx, dt, off, len, o);
    }
}

/* The dx loop both batch norms' backward entries end with, for d's dtype. */
AMP_CPU_CLONE_INLINE void channel_bwd_dx_tiles(const amp_bn_desc *d, const void *x, const void *dy,
                                               int64_t ch, float mean, float proj, float mean_dy,
                                               float k, void *dx) {
    if (d->dtype == AMP_BF16) channel_bwd_dx_typed(d, AMP_BF16, x, dy, ch, mean, proj, mean_dy, k, dx);
    else if (d->dtype == AMP_F16) channel_bwd_dx_typed(d, AMP_F16, x, dy, ch, mean, proj, mean_dy, k, dx);
    else channel_bwd_dx_typed(d, AMP_F32, x, dy, ch, mean, proj, mean_dy, k, dx);
}

#endif
