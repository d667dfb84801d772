/* 2-D max pooling on the device: the CUDA side of the table's maxpool_fwd and maxpool_bwd, NCHW,
 * square window k, stride, padding that never wins. No index tensor lives between the passes:
 * the backward takes the forward's input x and finds each window's maximum again, as cuDNN's
 * cudnnPoolingBackward does (core/backend.h).
 *
 * Numerics are the CPU backend's (kernels/cpu/pool.c), bit for bit:
 *  - forward: one thread per output element scans its window with amp_pool_argmax
 *    (kernels/math/pool.h): row-major from -inf with the argmax on the first in-bounds element;
 *    a value wins when strictly greater or NaN, so ties keep the first maximum and the last NaN
 *    holds the argmax, as PyTorch's CPU kernel. y is an input value, stored exactly in any dtype.
 *  - backward: no scatter and no atomics. One thread per INPUT element gathers dy from the output
 *    windows that contain it (PyTorch's CUDA max_pool backward does the same; windows overlap when
 *    stride < k), rescanning each such window with the same amp_pool_argmax and adding, in f32
 *    from +0, the dy of each whose maximum it holds, in output order: the CPU's
 *    `dx[argmax[o]] += dy[o]` over o visits them in the same order, so the sums round the same
 *    way; one rounding to f16/bf16 on store. dx is overwritten: 0 where no window picked the
 *    element. A window is read k * k times over (once per element that can be its maximum):
 *    4 loads an input for the common 2x2 stride 2.
 * Loops are grid-stride with 64-bit indices; the descriptor goes to the kernels by value. */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/load_store.h"
#include "kernels/math/pool.h"

template <amp_dtype D>
static __global__ void maxpool_fwd_kernel(amp_pool_desc d, const void *x, void *y) {
    int64_t plane_out = d.h_out * d.w_out, total = d.n * d.c * plane_out;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += stride) {
        int64_t p = o / plane_out, r = o - p * plane_out, oh = r / d.w_out, ow = r - oh * d.w_out;
        int64_t h0, h1, w0, w1;
        amp_pool_window(oh, d.stride, d.pad, d.k, d.h_in, &h0, &h1);
        amp_pool_window(ow, d.stride, d.pad, d.k, d.w_in, &w0, &w1);
        float best;
        (void)amp_pool_argmax(x, D, p * d.h_in * d.w_in, d.w_in, h0, h1, w0, w1, &best);
        amp_store_f32(y, D, o, best);
    }
}

/* The outputs along one axis whose windows contain input position i: [*lo, *hi). */
static __device__ void pool_outputs_of(int64_t i, int64_t stride, int64_t pad, int64_t k,
                                       int64_t out, int64_t *lo, int64_t *hi) {
    *lo = i + pad < k ? 0 : (i + pad - k) / stride + 1;
    int64_t e = (i + pad) / stride + 1;
    *hi = e < out ? e : out;
}

template <amp_dtype D>
static __global__ void maxpool_bwd_kernel(amp_pool_desc d, const void *dy, const void *x,
                                          void *dx) {
    int64_t plane_in = d.h_in * d.w_in, total = d.n * d.c * plane_in;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int64_t p = i / plane_in, r = i - p * plane_in, ih = r / d.w_in, iw = r - ih * d.w_in;
        int64_t oh0, oh1, ow0, ow1;
        pool_outputs_of(ih, d.stride, d.pad, d.k, d.h_out, &oh0, &oh1);
        pool_outputs_of(iw, d.stride, d.pad, d.k, d.w_out, &ow0, &ow1);
        float acc = 0.0f;
        for (int64_t oh = oh0; oh < oh1; oh++)
            for (int64_t ow = ow0; ow < ow1; ow++) {
                int64_t h0, h1, w0, w1;
                amp_pool_window(oh, d.stride, d.pad, d.k, d.h_in, &h0, &h1);
                amp_pool_window(ow, d.stride, d.pad, d.k, d.w_in, &w0, &w1);
                float best;
                int64_t at = amp_pool_argmax(x, D, p * plane_in, d.w_in, h0, h1, w0, w1, &best);
                if (at == r) acc += amp_load_f32(dy, D, (p * d.h_out + oh) * d.w_out + ow);
            }
        amp_store_f32(dx, D, i, acc);
    }
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

static amp_status maxpool_fwd_launch(const amp_pool_desc *d, const void *x, void *y,
                                     cudaStream_t stream) {
    unsigned grid = grid_for(d->n * d->c * d->h_out * d->w_out);
    switch (d->dtype) {
    case AMP_F16:
        maxpool_fwd_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, x, y);
        break;
    case AMP_BF16:
        maxpool_fwd_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, x, y);
        break;
    default:
        maxpool_fwd_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, x, y);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

static amp_status maxpool_bwd_launch(const amp_pool_desc *d, const void *dy, const void *x,
                                     void *dx, cudaStream_t stream) {
    unsigned grid = grid_for(d->n * d->c * d->h_in * d->w_in);
    switch (d->dtype) {
    case AMP_F16:
        maxpool_bwd_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, dy, x, dx);
        break;
    case AMP_BF16:
        maxpool_bwd_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, dy, x, dx);
        break;
    default:
        maxpool_bwd_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, dy, x, dx);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_maxpool_fwd(amp_device_ctx *dev, const amp_pool_desc *d,
                                           const void *x, void *y) {
    AMP_TRY(amp_backend_check_pool(__func__, d));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    return maxpool_fwd_launch(d, x, y, dev->stream);
}

extern "C" amp_status amp_cuda_maxpool_bwd(amp_device_ctx *dev, const amp_pool_desc *d,
                                           const void *dy, const void *x, void *dx) {
    AMP_TRY(amp_backend_check_pool(__func__, d));
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(dx);
    return maxpool_bwd_launch(d, dy, x, dx, dev->stream);
}
