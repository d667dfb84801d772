/* The tiling shared by batch norm's kernels (batchnorm.cu) and synchronised batch norm's
 * (sync_batchnorm.cu): a channel's sums are bit-identical to the CPU backend's
 * (kernels/cpu/batchnorm_tiles.h) only with its tile length and lane count, so both files take
 * them, and the grids over them, from here; and the grid of their elementwise passes over
 * planes, which both launch alike. */
#ifndef AMP_KERNELS_CUDA_BATCHNORM_TILES_CUH
#define AMP_KERNELS_CUDA_BATCHNORM_TILES_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include "core/backend.h"
extern "C" {
#include "kernels/cpu/cpu_backend.h" /* AMP_CPU_REDUCE_CHUNK: the CPU's tile, matched here */
}
#include "kernels/cuda/cuda_backend.h"

#define BN_TILE AMP_CPU_REDUCE_CHUNK
#define BN_LANES 8
/* Threads per block of the tile sums (each warp holds 4 tiles' 8 lanes) and of the elementwise
 * passes: 8 warps, as the backend's other kernels. */
#define BN_BLOCK 256
/* The per-channel kernels run one thread per channel. */
#define BN_CHANNEL_BLOCK 128
/* grid.y (channels of the tile sums, plane groups of the elementwise passes) stays under CUDA's
 * limit of 65535; kernels loop beyond. */
#define BN_MAX_GRID_Y 65535

static_assert(BN_BLOCK % 32 == 0 && 32 % BN_LANES == 0, "a tile's lanes share a warp");

/* Tiles of one channel: ceil(hw / BN_TILE) per plane, n planes. */
static inline int64_t bn_tiles(const amp_bn_desc *d) {
    return d->n * ((d->hw + BN_TILE - 1) / BN_TILE);
}

/* The CPU's lanes_total over the 8 lanes of a tile held by 8 neighbouring threads (every lane of
 * the warp calls; each thread gets its tile's total). */
static __device__ inline double bn_lanes_total(double v) {
    for (int m = 1; m < BN_LANES; m <<= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}

static inline unsigned bn_channel_grid(int64_t c) {
    int64_t blocks = (c + BN_CHANNEL_BLOCK - 1) / BN_CHANNEL_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

/* The tile sums' grid: x covers one channel's units (capped so that the whole grid stays near
 * AMP_CUDA_MAX_BLOCKS blocks), y the channels. */
static inline dim3 bn_tiles_grid(const amp_bn_desc *d) {
    int64_t gy = d->c < BN_MAX_GRID_Y ? d->c : BN_MAX_GRID_Y;
    int64_t gx = (bn_tiles(d) * BN_LANES + BN_BLOCK - 1) / BN_BLOCK;
    int64_t gx_max = AMP_CUDA_MAX_BLOCKS / gy;
    if (gx > gx_max) gx = gx_max;
    if (gx < 1) gx = 1;
    return dim3((unsigned)gx, (unsigned)gy);
}

/* The elementwise passes (batch norm's apply and dx, synchronised batch norm's dx) walk planes
 * (plane p = i * c + ch holds hw elements): a block is (bx, by) threads, bx along a plane (the
 * power of two >= hw, at most BN_BLOCK), by planes side by side, so that small planes (7x7, or
 * hw = 1 of a 1-d batch norm) still fill the block and neighbouring threads read neighbouring
 * elements. Both dimensions are grid-stride loops. */
struct bn_plane_grid {
    dim3 grid, block;
};

static inline bn_plane_grid bn_plane_launch(const amp_bn_desc *d) {
    unsigned bx = 1;
    while (bx < BN_BLOCK && (int64_t)bx < d->hw) bx <<= 1;
    unsigned by = BN_BLOCK / bx;
    int64_t gx = (d->hw + bx - 1) / bx, planes = d->n * d->c;
    if (gx > AMP_CUDA_MAX_BLOCKS) gx = AMP_CUDA_MAX_BLOCKS;
    int64_t gy = (planes + by - 1) / by, gy_max = AMP_CUDA_MAX_BLOCKS / gx;
    if (gy > gy_max) gy = gy_max;
    if (gy < 1) gy = 1;
    if (gy > BN_MAX_GRID_Y) gy = BN_MAX_GRID_Y;
    return {dim3((unsigned)gx, (unsigned)gy), dim3(bx, by)};
}

#endif
