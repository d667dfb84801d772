/* Batch norm on the device: the CUDA side of the table's bn_fwd_train, bn_fwd_eval and bn_bwd over
 * an [n, c, hw] tensor (x, y, dy, dx in f32, f16 or bf16; every per-channel vector f32).
 *
 * Numerics are the CPU backend's (kernels/cpu/batchnorm.c), bit for bit: the same per-element
 * and per-channel math (kernels/math/batchnorm.h, whose products are rounded on their own so that
 * nvcc fuses nothing the CPU does not), and the same order for every sum. A channel is cut into
 * tiles as the CPU cuts it (the n planes in order, each in pieces of AMP_CPU_REDUCE_CHUNK); a tile
 * is summed in double in 8 lanes (lane j takes elements j, j + 8, ... in order) joined by a fixed
 * tree, and the tile totals are added in tile order. Here each lane of each tile is one thread,
 * the tree is three warp butterflies (xor 1, 2, 4 give ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), as
 * the CPU's lanes_total; IEEE addition commutes), the tile totals go to a workspace, and one
 * thread per channel adds them in order. No float atomics: the bits depend on the data and the
 * shape only, never on the schedule, and equal the CPU backend's.
 *  - fwd_train: tile sums of x -> mean; tile sums of (x - mean)^2 -> biased variance, invstd,
 *    save_*, running stats (momentum, unbiased variance, in double) and the per-channel fold
 *    y = x * scale + shift; then y. Needs n * hw >= 2.
 *  - fwd_eval: the fold from running_mean/running_var, then y.
 *  - bwd: tile sums of dy and (x - mean) * dy -> dbeta, dgamma and dx's per-channel coefficients;
 *    then dx = (dy - (x - mean) * proj - mean_dy) * k. With relu, every pass reads dy masked by
 *    ReLU's backward on the forward's output y (kernels/math/relu.h), as the CPU's.
 * Outputs are overwritten. gamma/beta NULL mean 1 and 0; save_*, the running stats, dx and
 * dgamma/dbeta may be NULL (not wanted; bwd with all three NULL has nothing to do). y may be x and
 * dx may be dy: the elementwise passes run after every sum, and the same thread reads and writes an
 * element. The workspace (tile totals and per-channel values) comes from the caching allocator
 * and goes back right after the launches: the context's one stream orders its reuse. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/batchnorm_tiles.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/batchnorm.h"
#include "kernels/math/load_store.h"

/* The three kinds of tile sums. */
enum bn_pass {
    BN_SUM_X,  /* a = sum(x) */
    BN_SUM_SQ, /* a = sum((x - mean)^2), mean in double */
    BN_SUM_BWD /* a = sum(dy), b = sum((x - mean) * dy), mean = save_mean */
};

/* tot_a[t * c + ch] (and tot_b for the backward) = the total of tile t of channel ch. Grid: x over
 * the tiles' lanes (unit u = tile u / 8, lane u % 8), y over channels. Whole warps step through
 * the units together so that the butterflies see all 32 lanes; units past the end add nothing. */
template <amp_dtype D, bn_pass PASS>
static __global__ void bn_tiles_kernel(const void *x, const void *dy, const void *y, int64_t c,
                                       int64_t hw, int64_t n_tiles, const double *mean_sq,
                                       const float *mean_bwd, double *tot_a, double *tot_b) {
    int64_t per_plane = (hw + BN_TILE - 1) / BN_TILE, units = n_tiles * BN_LANES;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int lane = threadIdx.x & 31;
    for (int64_t ch = blockIdx.y; ch < c; ch += gridDim.y) {
        double mean = PASS == BN_SUM_SQ ? mean_sq[ch] : PASS == BN_SUM_BWD ? mean_bwd[ch] : 0.0;
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
                    if (PASS == BN_SUM_X) {
                        a += (double)v;
                    } else if (PASS == BN_SUM_SQ) {
                        a += amp_bn_sq_dev(v, mean);
                    } else {
                        float g = amp_load_f32(dy, D, off + k);
                        if (y) g = amp_relu_bwd(amp_load_f32(y, D, off + k), g);
                        a += (double)g;
                        b += amp_bn_dy_dev(v, g, mean);
                    }
                }
            }
            a = bn_lanes_total(a);
            if (PASS == BN_SUM_BWD) b = bn_lanes_total(b);
            if (u < units && u % BN_LANES == 0) {
                tot_a[t * c + ch] = a;
                if (PASS == BN_SUM_BWD) tot_b[t * c + ch] = b;
            }
        }
    }
}

/* The tile totals of channel ch added in tile order, from 0 (the CPU's `total += tile`). */
static __device__ double bn_channel_total(const double *tot, int64_t c, int64_t n_tiles,
                                          int64_t ch) {
    double s = 0.0;
    for (int64_t t = 0; t < n_tiles; t++) s += tot[t * c + ch];
    return s;
}

/* mean[ch] = sum(x) / count, in double (the squares pass reads it). */
static __global__ void bn_mean_kernel(const double *tot, int64_t c, int64_t n_tiles, double count,
                                      double *mean) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ch < c; ch += stride)
        mean[ch] = bn_channel_total(tot, c, n_tiles, ch) / count;
}

/* Per-channel outputs of training (the CPU's loop body after its two sums): save_*, running
 * stats, and the fold into scale/shift for the y pass. */
static __global__ void bn_train_channel_kernel(const double *tot, int64_t c, int64_t n_tiles,
                                               int64_t count, const double *mean, float eps,
                                               float momentum, const float *gamma,
                                               const float *beta, float *save_mean,
                                               float *save_invstd, float *running_mean,
                                               float *running_var, float *scale, float *shift) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ch < c; ch += stride) {
        double m = mean[ch], var_sum = bn_channel_total(tot, c, n_tiles, ch);
        double invstd = amp_bn_invstd(var_sum / (double)count, eps);
        amp_bn_fold(m, invstd, gamma ? gamma[ch] : 1.0f, beta ? beta[ch] : 0.0f, &scale[ch],
                    &shift[ch]);
        if (save_mean) save_mean[ch] = (float)m;
        if (save_invstd) save_invstd[ch] = (float)invstd;
        if (running_mean) running_mean[ch] = amp_bn_running_update(running_mean[ch], m, momentum);
        if (running_var)
            running_var[ch] =
                amp_bn_running_update(running_var[ch], var_sum / (double)(count - 1), momentum);
    }
}

/* The fold of eval, from the running statistics. */
static __global__ void bn_eval_channel_kernel(int64_t c, float eps, const float *gamma,
                                              const float *beta, const float *running_mean,
                                              const float *running_var, float *scale,
                                              float *shift) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ch < c; ch += stride)
        amp_bn_fold(running_mean[ch], amp_bn_invstd(running_var[ch], eps),
                    gamma ? gamma[ch] : 1.0f, beta ? beta[ch] : 0.0f, &scale[ch], &shift[ch]);
}

/* Per-channel outputs of the backward (the CPU's, from the same doubles): dgamma, dbeta and
 * coef[3 ch ..] = proj, mean_dy, k for the dx pass. */
static __global__ void bn_bwd_channel_kernel(const double *tot_dy, const double *tot_dot,
                                             int64_t c, int64_t n_tiles, double count,
                                             const float *gamma, const float *save_invstd,
                                             float *dgamma, float *dbeta, float *coef) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ch < c; ch += stride) {
        double invstd = save_invstd[ch];
        double sum_dy = bn_channel_total(tot_dy, c, n_tiles, ch);
        double dot = bn_channel_total(tot_dot, c, n_tiles, ch);
        if (dgamma) dgamma[ch] = (float)(dot * invstd);
        if (dbeta) dbeta[ch] = (float)sum_dy;
        if (coef) {
            coef[3 * ch] = (float)(dot * invstd * invstd / count);
            coef[3 * ch + 1] = (float)(sum_dy / count);
            coef[3 * ch + 2] = (float)((gamma ? (double)gamma[ch] : 1.0) * invstd);
        }
    }
}

/* y = x * scale[ch] + shift[ch], and its ReLU with `relu` (amp_bn_desc.relu). */
template <amp_dtype D>
static __global__ void bn_apply_kernel(const void *x, int64_t c, int64_t hw, int64_t planes,
                                       const float *scale, const float *shift, bool relu,
                                       void *y) {
    int64_t py = (int64_t)gridDim.y * blockDim.y, px = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; p < planes; p += py) {
        int64_t ch = p % c, base = p * hw;
        float sc = scale[ch], sh = shift[ch];
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < hw; j += px) {
            float v = amp_load_f32(x, D, base + j);
            amp_store_f32(y, D, base + j,
                          relu ? amp_bn_apply_relu(v, sc, sh) : amp_bn_apply(v, sc, sh));
        }
    }
}

/* dx from the per-channel coefficients; the mean is save_mean's f32, as the CPU's. */
template <amp_dtype D>
static __global__ void bn_dx_kernel(const void *x, const void *dy, const void *y, int64_t c,
                                    int64_t hw, int64_t planes, const float *save_mean,
                                    const float *coef, void *dx) {
    int64_t py = (int64_t)gridDim.y * blockDim.y, px = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; p < planes; p += py) {
        int64_t ch = p % c, base = p * hw;
        float mean = save_mean[ch], proj = coef[3 * ch], mean_dy = coef[3 * ch + 1];
        float k = coef[3 * ch + 2];
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < hw; j += px) {
            float g = amp_load_f32(dy, D, base + j);
            if (y) g = amp_relu_bwd(amp_load_f32(y, D, base + j), g);
            float v = amp_bn_bwd_dx(amp_load_f32(x, D, base + j), g, mean, proj, mean_dy, k);
            amp_store_f32(dx, D, base + j, v);
        }
    }
}

/* Training forward for one dtype. ws: tile totals (n_tiles * c doubles), then mean (c doubles),
 * then scale and shift (c floats each). */
template <amp_dtype D>
static amp_status bn_fwd_train_launch(const amp_bn_desc *d, const void *x, const float *gamma,
                                      const float *beta, void *y, float *save_mean,
                                      float *save_invstd, float *running_mean, float *running_var,
                                      void *ws, cudaStream_t stream) {
    int64_t c = d->c, n_tiles = bn_tiles(d), count = d->n * d->hw;
    double *tot = (double *)ws, *mean = tot + n_tiles * c;
    float *scale = (float *)(mean + c), *shift = scale + c;
    dim3 tiles = bn_tiles_grid(d);
    unsigned chans = bn_channel_grid(c);
    bn_tiles_kernel<D, BN_SUM_X><<<tiles, BN_BLOCK, 0, stream>>>(
        x, nullptr, nullptr, c, d->hw, n_tiles, nullptr, nullptr, tot, nullptr);
    AMP_CUDA_LAUNCHED(stream);
    bn_mean_kernel<<<chans, BN_CHANNEL_BLOCK, 0, stream>>>(tot, c, n_tiles, (double)count, mean);
    AMP_CUDA_LAUNCHED(stream);
    bn_tiles_kernel<D, BN_SUM_SQ><<<tiles, BN_BLOCK, 0, stream>>>(
        x, nullptr, nullptr, c, d->hw, n_tiles, mean, nullptr, tot, nullptr);
    AMP_CUDA_LAUNCHED(stream);
    bn_train_channel_kernel<<<chans, BN_CHANNEL_BLOCK, 0, stream>>>(
        tot, c, n_tiles, count, mean, d->eps, d->momentum, gamma, beta, save_mean, save_invstd,
        running_mean, running_var, scale, shift);
    AMP_CUDA_LAUNCHED(stream);
    bn_plane_grid g = bn_plane_launch(d);
    bn_apply_kernel<D><<<g.grid, g.block, 0, stream>>>(x, c, d->hw, d->n * c, scale, shift,
                                                       d->relu, y);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

/* Eval forward for one dtype; ws: scale and shift (c floats each). */
template <amp_dtype D>
static amp_status bn_fwd_eval_launch(const amp_bn_desc *d, const void *x, const float *gamma,
                                     const float *beta, const float *running_mean,
                                     const float *running_var, void *y, void *ws,
                                     cudaStream_t stream) {
    float *scale = (float *)ws, *shift = scale + d->c;
    bn_eval_channel_kernel<<<bn_channel_grid(d->c), BN_CHANNEL_BLOCK, 0, stream>>>(
        d->c, d->eps, gamma, beta, running_mean, running_var, scale, shift);
    AMP_CUDA_LAUNCHED(stream);
    bn_plane_grid g = bn_plane_launch(d);
    bn_apply_kernel<D><<<g.grid, g.block, 0, stream>>>(x, d->c, d->hw, d->n * d->c, scale, shift,
                                                       d->relu, y);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

/* Backward for one dtype. ws: tile totals of dy and of (x - mean) * dy (n_tiles * c doubles
 * each), then 3 c floats of dx coefficients. */
template <amp_dtype D>
static amp_status bn_bwd_launch(const amp_bn_desc *d, const void *x, const void *dy,
                                const void *y, const float *gamma, const float *save_mean,
                                const float *save_invstd, void *dx, float *dgamma, float *dbeta,
                                void *ws, cudaStream_t stream) {
    int64_t c = d->c, n_tiles = bn_tiles(d);
    double *tot_dy = (double *)ws, *tot_dot = tot_dy + n_tiles * c;
    float *coef = dx ? (float *)(tot_dot + n_tiles * c) : nullptr;
    bn_tiles_kernel<D, BN_SUM_BWD><<<bn_tiles_grid(d), BN_BLOCK, 0, stream>>>(
        x, dy, y, c, d->hw, n_tiles, nullptr, save_mean, tot_dy, tot_dot);
    AMP_CUDA_LAUNCHED(stream);
    bn_bwd_channel_kernel<<<bn_channel_grid(c), BN_CHANNEL_BLOCK, 0, stream>>>(
        tot_dy, tot_dot, c, n_tiles, (double)(d->n * d->hw), gamma, save_invstd, dgamma, dbeta,
        coef);
    AMP_CUDA_LAUNCHED(stream);
    if (dx) {
        bn_plane_grid g = bn_plane_launch(d);
        bn_dx_kernel<D><<<g.grid, g.block, 0, stream>>>(x, dy, y, c, d->hw, d->n * c,
                                                        save_mean, coef, dx);
        AMP_CUDA_LAUNCHED(stream);
    }
    return AMP_OK;
}

extern "C" amp_status amp_cuda_bn_fwd_train(amp_device_ctx *dev, const amp_bn_desc *d,
                                            const void *x, const float *gamma, const float *beta,
                                            void *y, float *save_mean, float *save_invstd,
                                            float *running_mean, float *running_var) {
    AMP_TRY(amp_backend_check_bn(__func__, d, AMP_BN_PASS_TRAIN));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    size_t nbytes = sizeof(double) * (size_t)((bn_tiles(d) + 1) * d->c) +
                    2 * sizeof(float) * (size_t)d->c;
    void *ws = NULL;
    AMP_TRY(amp_cuda_alloc(dev, nbytes, &ws));
    cudaStream_t stream = dev->stream;
    amp_status s;
    switch (d->dtype) {
    case AMP_F16:
        s = bn_fwd_train_launch<AMP_F16>(d, x, gamma, beta, y, save_mean, save_invstd,
                                         running_mean, running_var, ws, stream);
        break;
    case AMP_BF16:
        s = bn_fwd_train_launch<AMP_BF16>(d, x, gamma, beta, y, save_mean, save_invstd,
                                          running_mean, running_var, ws, stream);
        break;
    default:
        s = bn_fwd_train_launch<AMP_F32>(d, x, gamma, beta, y, save_mean, save_invstd,
                                         running_mean, running_var, ws, stream);
        break;
    }
    amp_cuda_free(dev, ws); /* reused only by work queued after these kernels (one stream) */
    return s;
}

extern "C" amp_status amp_cuda_bn_fwd_eval(amp_device_ctx *dev, const amp_bn_desc *d, const void *x,
                                           const float *gamma, const float *beta,
                                           const float *running_mean, const float *running_var,
                                           void *y) {
    AMP_TRY(amp_backend_check_bn(__func__, d, AMP_BN_PASS_EVAL));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    AMP_CHECK_ARG(running_mean);
    AMP_CHECK_ARG(running_var);
    void *ws = NULL;
    AMP_TRY(amp_cuda_alloc(dev, 2 * sizeof(float) * (size_t)d->c, &ws));
    cudaStream_t stream = dev->stream;
    amp_status s;
    switch (d->dtype) {
    case AMP_F16:
        s = bn_fwd_eval_launch<AMP_F16>(d, x, gamma, beta, running_mean, running_var, y, ws,
                                        stream);
        break;
    case AMP_BF16:
        s = bn_fwd_eval_launch<AMP_BF16>(d, x, gamma, beta, running_mean, running_var, y, ws,
                                         stream);
        break;
    default:
        s = bn_fwd_eval_launch<AMP_F32>(d, x, gamma, beta, running_mean, running_var, y, ws,
                                        stream);
        break;
    }
    amp_cuda_free(dev, ws); /* as in amp_cuda_bn_fwd_train */
    return s;
}

extern "C" amp_status amp_cuda_bn_bwd(amp_device_ctx *dev, const amp_bn_desc *d, const void *x,
                                      const void *dy, const void *y, const float *gamma,
                                      const float *save_mean, const float *save_invstd, void *dx,
                                      float *dgamma, float *dbeta) {
    AMP_TRY(amp_backend_check_bn(__func__, d, AMP_BN_PASS_BWD));
    AMP_TRY(amp_backend_check_bn_bwd_y(__func__, d, y));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(save_mean);
    AMP_CHECK_ARG(save_invstd);
    /* Every output is optional; with none wanted the sums would be thrown away. */
    if (!dx && !dgamma && !dbeta) return AMP_OK;
    size_t nbytes = 2 * sizeof(double) * (size_t)(bn_tiles(d) * d->c) +
                    (dx ? 3 * sizeof(float) * (size_t)d->c : 0);
    void *ws = NULL;
    AMP_TRY(amp_cuda_alloc(dev, nbytes, &ws));
    cudaStream_t stream = dev->stream;
    amp_status s;
    switch (d->dtype) {
    case AMP_F16:
        s = bn_bwd_launch<AMP_F16>(d, x, dy, y, gamma, save_mean, save_invstd, dx, dgamma,
                                   dbeta, ws, stream);
        break;
    case AMP_BF16:
        s = bn_bwd_launch<AMP_BF16>(d, x, dy, y, gamma, save_mean, save_invstd, dx, dgamma,
                                    dbeta, ws, stream);
        break;
    default:
        s = bn_bwd_launch<AMP_F32>(d, x, dy, y, gamma, save_mean, save_invstd, dx, dgamma,
                                   dbeta, ws, stream);
        break;
    }
    amp_cuda_free(dev, ws); /* as in amp_cuda_bn_fwd_train */
    return s;
}
