/* Inverted dropout on the device: the CUDA side of the table's dropout_fwd and dropout_bwd.
 *
 * Element i is kept when philox(seed, offset + i) >= p (kernels/math/dropout.h over
 * core/philox.h, the CPU backend's functions): the draw is a pure function of (seed, offset + i),
 * so the mask is bit-identical to the CPU backend's whatever the grid or the schedule. Kept
 * values are (x * 1) * (1 / (1 - p)) in f32 and rounded to the storage dtype once; a dropped
 * NaN or inf stays NaN (PyTorch's native_dropout), so the loss scaler still sees it.
 * Outputs (y, mask, dx) are overwritten; y may be x and dx may be dy (the same thread reads and
 * writes an element). p = 0 copies x and sets every mask byte to 1, as the CPU backend (PyTorch
 * returns its input unchanged then); backward needs no such case (scale 1, all kept).
 *
 * Loops are grid-stride with 64-bit indices. Launchers take an explicit stream and check the
 * launch; the entries validate their arguments with the CPU backend's statuses and messages and
 * run on dev->stream. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/dropout.h"
#include "kernels/math/load_store.h"

template <amp_dtype D>
static __global__ void dropout_fwd_kernel(const void *x, int64_t n, float p, float scale,
                                          uint64_t seed, uint64_t offset, void *y,
                                          uint8_t *mask) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint8_t keep = amp_dropout_keep(seed, offset + (uint64_t)i, p);
        mask[i] = keep;
        amp_store_f32(y, D, i, amp_dropout_apply(amp_load_f32(x, D, i), keep, scale));
    }
}

template <amp_dtype D>
static __global__ void dropout_bwd_kernel(const void *dy, const uint8_t *mask, int64_t n,
                                          float scale, void *dx) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        amp_store_f32(dx, D, i, amp_dropout_apply(amp_load_f32(dy, D, i), mask[i], scale));
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

/* p in (0, 1), n >= 1, validated by the caller. */
extern "C" amp_status amp_cuda_dropout_fwd_launch(amp_dtype dt, int64_t n, const void *x,
                                                  float p, uint64_t seed, uint64_t offset,
                                                  void *y, uint8_t *mask, cudaStream_t stream) {
    unsigned grid = grid_for(n);
    float scale = amp_dropout_scale(p);
    switch (dt) {
    case AMP_F16:
        dropout_fwd_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(x, n, p, scale, seed,
                                                                          offset, y, mask);
        break;
    case AMP_BF16:
        dropout_fwd_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(x, n, p, scale, seed,
                                                                           offset, y, mask);
        break;
    default:
        dropout_fwd_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(x, n, p, scale, seed,
                                                                          offset, y, mask);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_dropout_bwd_launch(amp_dtype dt, int64_t n, const void *dy,
                                                  const uint8_t *mask, float p, void *dx,
                                                  cudaStream_t stream) {
    unsigned grid = grid_for(n);
    float scale = amp_dropout_scale(p);
    switch (dt) {
    case AMP_F16:
        dropout_bwd_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(dy, mask, n, scale, dx);
        break;
    case AMP_BF16:
        dropout_bwd_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(dy, mask, n, scale, dx);
        break;
    default:
        dropout_bwd_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(dy, mask, n, scale, dx);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_dropout_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t n,
                                           const void *x, float p, uint64_t seed, uint64_t offset,
                                           void *y, uint8_t *mask) {
    AMP_TRY(amp_backend_check_dropout("amp_cuda_dropout_fwd", dt, n, p));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    AMP_CHECK_ARG(mask);
    cudaStream_t stream = dev->stream;
    if (p == 0.0f) {
        AMP_CUDA_TRY(cudaMemsetAsync(mask, 1, (size_t)n, stream));
        if (y != x)
            AMP_CUDA_TRY(cudaMemcpyAsync(y, x, (size_t)n * amp_dtype_size(dt),
                                         cudaMemcpyDeviceToDevice, stream));
        return AMP_OK;
    }
    return amp_cuda_dropout_fwd_launch(dt, n, x, p, seed, offset, y, mask, stream);
}

extern "C" amp_status amp_cuda_dropout_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t n,
                                           const void *dy, const uint8_t *mask, float p, void *dx) {
    AMP_TRY(amp_backend_check_dropout("amp_cuda_dropout_bwd", dt, n, p));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(mask);
    AMP_CHECK_ARG(dx);
    return amp_cuda_dropout_bwd_launch(dt, n, dy, mask, p, dx, dev->stream);
}
