/* The order in which the CPU backend's batch norm entries visit a channel (batchnorm_cpu.c,
 * batchnorm_sync_cpu.c; batchnorm.cu and batchnorm_sync.cu copy it on the device): one order for
 * every sum, so a channel's statistics do not depend on the loop, thread or backend. */
#ifndef AMP_KERNELS_CPU_BATCHNORM_TILES_H
#define AMP_KERNELS_CPU_BATCHNORM_TILES_H

#include "core/backend.h"
#include "kernels/cpu/cpu_backend.h"
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

/* dx over channel ch from the channel's folded backward terms (kernels/math/batchnorm.h), the
 * loop both batch norms' backward entries end with. dx may alias dy: each element is read before
 * it is written. */
static inline void channel_bwd_dx_tiles(const amp_bn_desc *d, const void *x, const void *dy,
                                        int64_t ch, float mean, float proj, float mean_dy, float k,
                                        void *dx) {
    float bx[AMP_CPU_REDUCE_CHUNK], bdy[AMP_CPU_REDUCE_CHUNK];
    for (int64_t t = 0; t < channel_tiles(d); t++) {
        int64_t len, off = channel_tile(d, ch, t, &len);
        const float *xv = tile_in(x, d->dtype, off, len, bx);
        const float *gv = tile_in(dy, d->dtype, off, len, bdy);
        float *o = tile_out(dx, d->dtype, off, bdy);
        for (int64_t e = 0; e < len; e++) o[e] = amp_bn_bwd_dx(xv[e], gv[e], mean, proj, mean_dy, k);
        tile_out_store(dx, d->dtype, off, len, o);
    }
}

#endif
