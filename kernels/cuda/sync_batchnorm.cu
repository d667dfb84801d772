/* Synchronised batch norm on the device: the CUDA side of the table's bn_channel_sums,
 * bn_sync_stats and bn_bwd_elemt (core/backend.h) over this rank's [n, c, hw] tensor (x, dy, dx in
 * f32, f16 or bf16; every per-channel vector f32). The all-reduce between the sums and the
 * statistics is the caller's (parallel/).
 *
 * Numerics are the CPU backend's (kernels/cpu/sync_batchnorm.c), bit for bit, by the scheme of
 * batchnorm.cu: a channel is cut into tiles as the CPU cuts it (the n planes in order, each in
 * pieces of AMP_CPU_REDUCE_CHUNK); a tile is summed in double in 8 lanes (lane j takes elements
 * j, j + 8, ... in order), one thread per lane, joined by three warp butterflies (xor 1, 2, 4 give
 * the CPU's lanes_total tree; IEEE addition commutes); the tile totals go to a workspace and one
 * thread per channel adds them in tile order from 0 and rounds to f32 once. The terms and the
 * per-channel and per-element math are kernels/math/sync_batchnorm.h's and batchnorm.h's, whose
 * products are rounded on their own, so nvcc fuses nothing that the CPU (-ffp-contract=off) does
 * not. No float atomics: the bits depend on the data and the shape only.
 *  - channel_sums: with dy NULL, sum(x - center) and sum((x - center)^2); with dy, sum(dy) and
 *    sum(dy * (x - center)); center NULL is 0.
 *  - sync_stats: one thread per channel, amp_bn_sync_stats on the all-reduced sums.
 *  - bwd_elemt: dx per element, each thread deriving its plane's coefficients
 *    (amp_bn_sync_bwd_coef) from the all-reduced sums: no workspace, no second launch.
 * Outputs are overwritten (the running statistics updated in place). dx may be dy: the same
 * thread reads and then writes an element. channel_sums' workspace (the tile totals) comes from
 * the caching allocator and goes back right after the launches: the context's one stream orders
 * its reuse. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/batchnorm_tiles.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/sync_batchnorm.h"
#include "kernels/math/load_store.h"

/* tot_a[t * c + ch], tot_b[t * c + ch] = the two totals of tile t of channel ch (the terms of
 * the entry's out1 and out2). Grid: x over the tiles' lanes (unit u = tile u / 8, lane u % 8), y
 * over channels. Whole warps step through the units together so that the butterflies see all 32
 * lanes; units past the end add nothing. */
template <amp_dtype D, bool BWD>
static __global__ void sbn_tiles_kernel(const void *x, const void *dy, const float *center,
                                        int64_t c, int64_t hw, int64_t n_tiles, double *tot_a,
                                        double *tot_b) {
    int64_t per_plane = (hw + BN_TILE - 1) / BN_TILE, units = n_tiles * BN_LANES;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int lane = threadIdx.x & 31;
    for (int64_t ch = blockIdx.y; ch < c; ch += gridDim.y) {
        double cen = center ? (double)center[ch] : 0.0;
        for (int64_t warp0 = (int64_t)blockIdx.x * blockDim.x + (threadIdx.x - lane);
             warp0 < units; warp0 += stride) {
            int64_t u = warp0 + lane, t = u / BN_LANES;
            double a = 0.0, b = 0.0;
            if (u < units) {
                int64_t t0 = (t % per_plane) * BN_TILE;
                int64_t len = hw - t0 < BN_TILE ? hw - t0 : BN_TILE;
                int64_t off = ((t / per_plane) * c + ch) * hw + t0;
                for (int64_t k = u % BN_LANES; k < len; k += BN_LANES) {
                    float v = amp_load_f32(x, D, off + k);
                    if (BWD) {
                        float g = amp_load_f32(dy, D, off + k);
                        a += (double)g;
                        b += amp_bn_dy_dev(v, g, cen);
                    } else {
                        a += amp_bn_sync_dev(v, cen);
                        b += amp_bn_sq_dev(v, cen);
                    }
                }
            }
            a = bn_lanes_total(a);
            b = bn_lanes_total(b);
            if (u < units && u % BN_LANES == 0) {
                tot_a[t * c + ch] = a;
                tot_b[t * c + ch] = b;
            }
        }
    }
}

/* out1[ch], out2[ch] = the tile totals of channel ch added in tile order from 0 (the CPU's
 * `a += lanes_total(la)`), rounded to f32 once. */
static __global__ void sbn_sums_channel_kernel(const double *tot_a, const double *tot_b,
                                               int64_t c, int64_t n_tiles, float *out1,
                                               float *out2) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ch < c; ch += stride) {
        double a = 0.0, b = 0.0;
        for (int64_t t = 0; t < n_tiles; t++) {
            a += tot_a[t * c + ch];
            b += tot_b[t * c + ch];
        }
        out1[ch] = (float)a;
        out2[ch] = (float)b;
    }
}

/* The statistics of each channel from the all-reduced sums (s2 NULL: the mean only). */
static __global__ void sbn_stats_kernel(int64_t c, int64_t count, float eps, float momentum,
                                        const float *center, const float *s1, const float *s2,
                                        float *mean, float *var, float *invstd,
                                        float *running_mean, float *running_var) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ch < c; ch += stride)
        amp_bn_sync_stats(center ? (double)center[ch] : 0.0, s1[ch], s2 ? s2[ch] : 0.0f,
                          s2 != nullptr, count, eps, momentum, &mean[ch], var ? &var[ch] : nullptr,
                          invstd ? &invstd[ch] : nullptr,
                          running_mean ? &running_mean[ch] : nullptr,
                          running_var ? &running_var[ch] : nullptr);
}

/* dx = amp_bn_bwd_dx with the coefficients of the global count, over planes as batchnorm.cu's
 * elementwise passes (bn_plane_launch's grid, batchnorm_tiles.cuh); each thread derives the
 * coefficients once per plane it visits (a few double operations against hw elements). */
template <amp_dtype D>
static __global__ void sbn_dx_kernel(const void *x, const void *dy, int64_t c, int64_t hw,
                                     int64_t planes, int64_t count, const float *gamma,
                                     const float *mean, const float *invstd, const float *sum_dy,
                                     const float *sum_dy_xmu, void *dx) {
    int64_t py = (int64_t)gridDim.y * blockDim.y, px = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; p < planes; p += py) {
        int64_t ch = p % c, base = p * hw;
        float proj, mean_dy, k, m = mean[ch];
        amp_bn_sync_bwd_coef(count, sum_dy[ch], sum_dy_xmu[ch], gamma ? gamma[ch] : 1.0f,
                             invstd[ch], &proj, &mean_dy, &k);
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < hw; j += px) {
            float v = amp_bn_bwd_dx(amp_load_f32(x, D, base + j), amp_load_f32(dy, D, base + j),
                                    m, proj, mean_dy, k);
            amp_store_f32(dx, D, base + j, v);
        }
    }
}

/* The channel sums for one dtype; ws: the two tile-total arrays (n_tiles * c doubles each). */
template <amp_dtype D>
static amp_status sbn_sums_launch(const amp_bn_desc *d, const void *x, const float *center,
                                  const void *dy, float *out1, float *out2, void *ws,
                                  cudaStream_t stream) {
    int64_t c = d->c, n_tiles = bn_tiles(d);
    double *tot_a = (double *)ws, *tot_b = tot_a + n_tiles * c;
    dim3 tiles = bn_tiles_grid(d);
    if (dy)
        sbn_tiles_kernel<D, true><<<tiles, BN_BLOCK, 0, stream>>>(x, dy, center, c, d->hw,
                                                                   n_tiles, tot_a, tot_b);
    else
        sbn_tiles_kernel<D, false><<<tiles, BN_BLOCK, 0, stream>>>(x, nullptr, center, c, d->hw,
                                                                    n_tiles, tot_a, tot_b);
    AMP_CUDA_LAUNCHED(stream);
    sbn_sums_channel_kernel<<<bn_channel_grid(c), BN_CHANNEL_BLOCK, 0, stream>>>(
        tot_a, tot_b, c, n_tiles, out1, out2);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

static amp_status sbn_stats_launch(const amp_bn_desc *d, int64_t count, const float *center,
                                   const float *s1, const float *s2, float *mean, float *var,
                                   float *invstd, float *running_mean, float *running_var,
                                   cudaStream_t stream) {
    sbn_stats_kernel<<<bn_channel_grid(d->c), BN_CHANNEL_BLOCK, 0, stream>>>(
        d->c, count, d->eps, d->momentum, center, s1, s2, mean, var, invstd, running_mean,
        running_var);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

template <amp_dtype D>
static amp_status sbn_dx_launch(const amp_bn_desc *d, int64_t count, const void *x,
                                const void *dy, const float *gamma, const float *mean,
                                const float *invstd, const float *sum_dy,
                                const float *sum_dy_xmu, void *dx, cudaStream_t stream) {
    bn_plane_grid g = bn_plane_launch(d);
    sbn_dx_kernel<D><<<g.grid, g.block, 0, stream>>>(x, dy, d->c, d->hw, d->n * d->c, count,
                                                     gamma, mean, invstd, sum_dy, sum_dy_xmu,
                                                     dx);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_bn_channel_sums(amp_device_ctx *dev, const amp_bn_desc *d,
                                               const void *x, const float *center, const void *dy,
                                               float *out1, float *out2) {
    AMP_TRY(amp_backend_check_bn(__func__, d, AMP_BN_PASS_SYNC));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(out1);
    AMP_CHECK_ARG(out2);
    void *ws = NULL;
    AMP_TRY(amp_cuda_alloc(dev, 2 * sizeof(double) * (size_t)(bn_tiles(d) * d->c), &ws));
    cudaStream_t stream = dev->stream;
    amp_status s;
    switch (d->dtype) {
    case AMP_F16: s = sbn_sums_launch<AMP_F16>(d, x, center, dy, out1, out2, ws, stream); break;
    case AMP_BF16: s = sbn_sums_launch<AMP_BF16>(d, x, center, dy, out1, out2, ws, stream); break;
    default: s = sbn_sums_launch<AMP_F32>(d, x, center, dy, out1, out2, ws, stream); break;
    }
    amp_cuda_free(dev, ws); /* reused only by work queued after these kernels (one stream) */
    return s;
}

extern "C" amp_status amp_cuda_bn_sync_stats(amp_device_ctx *dev, const amp_bn_desc *d,
                                             int64_t count, const float *center, const float *s1,
                                             const float *s2, float *mean, float *var,
                                             float *invstd, float *running_mean,
                                             float *running_var) {
    AMP_TRY(amp_backend_check_bn(__func__, d, AMP_BN_PASS_SYNC));
    AMP_TRY(amp_backend_check_bn_count(__func__, count, s2 != NULL));
    AMP_CHECK_ARG(s1);
    AMP_CHECK_ARG(mean);
    return sbn_stats_launch(d, count, center, s1, s2, mean, var, invstd, running_mean, running_var,
                            dev->stream);
}

extern "C" amp_status amp_cuda_bn_bwd_elemt(amp_device_ctx *dev, const amp_bn_desc *d,
                                            int64_t count, const void *x, const void *dy,
                                            const float *gamma, const float *mean,
                                            const float *invstd, const float *sum_dy,
                                            const float *sum_dy_xmu, void *dx) {
    AMP_TRY(amp_backend_check_bn_bwd_elemt(__func__, d, count, x, dy, mean, invstd, sum_dy,
                                           sum_dy_xmu, dx));
    cudaStream_t stream = dev->stream;
    switch (d->dtype) {
    case AMP_F16:
        return sbn_dx_launch<AMP_F16>(d, count, x, dy, gamma, mean, invstd, sum_dy, sum_dy_xmu,
                                      dx, stream);
    case AMP_BF16:
        return sbn_dx_launch<AMP_BF16>(d, count, x, dy, gamma, mean, invstd, sum_dy, sum_dy_xmu,
                                       dx, stream);
    default:
        return sbn_dx_launch<AMP_F32>(d, count, x, dy, gamma, mean, invstd, sum_dy, sum_dy_xmu,
                                      dx, stream);
    }
}
