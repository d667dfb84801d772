/* Mean squared error on the device: the CUDA side of the table's mse_fwd/mse_bwd (cross-entropy
 * is xent.cu). Numerics follow the CPU backend (kernels/cpu/loss.c) through the same
 * per-element functions (kernels/math/mse.h): mse_fwd is the two-pass sum of block_reduce.cuh
 * over (a - b)^2 (f32 squares, double sum), then (float)(total / n); mse_bwd is
 * da = ((a - b) * (2 / n)) * (*dloss), 2 / n rounded from double. Outputs are overwritten; da may
 * be a or b itself (the same thread reads and writes an element). */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/load_store.h"
#include "kernels/math/mse.h"

/* One term of mse_fwd's sum: (a[i] - b[i])^2 in f32, widened to double. */
template <amp_dtype D>
struct mse_term {
    const void *a, *b;
    __device__ double operator()(int64_t i) const {
        return (double)amp_mse_sq(amp_load_f32(a, D, i), amp_load_f32(b, D, i));
    }
};

template <amp_dtype D>
static __global__ void mse_bwd_kernel(const void *a, const void *b, int64_t n, float norm,
                                      const float *dloss, void *da) {
    float g = *dloss;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = amp_mse_grad(amp_load_f32(a, D, i), amp_load_f32(b, D, i), norm, g);
        amp_store_f32(da, D, i, v);
    }
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

template <amp_dtype D>
static void mse_partial_launch(const void *a, const void *b, int64_t n, double *partials,
                               int blocks, cudaStream_t stream) {
    amp_red_partial_kernel<mse_term<D> ><<<blocks, AMP_RED_BLOCK, 0, stream>>>(mse_term<D>{a, b},
                                                                               n, partials);
}

extern "C" amp_status amp_cuda_mse_fwd_launch(amp_dtype dt, int64_t n, const void *a,
                                              const void *b, float *loss, double *partials,
                                              cudaStream_t stream) {
    int blocks = amp_red_blocks(n);
    switch (dt) {
    case AMP_F16: mse_partial_launch<AMP_F16>(a, b, n, partials, blocks, stream); break;
    case AMP_BF16: mse_partial_launch<AMP_BF16>(a, b, n, partials, blocks, stream); break;
    default: mse_partial_launch<AMP_F32>(a, b, n, partials, blocks, stream); break;
    }
    AMP_CUDA_LAUNCHED(stream);
    /* n = 0: 0 / 0 = NaN, as torch's mean over nothing. */
    amp_red_final_kernel<<<1, AMP_RED_BLOCK, 0, stream>>>(partials, blocks, 1.0, (double)n, loss);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_mse_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *a,
                                       const void *b, float *loss) {
    AMP_TRY(amp_backend_check_mse("amp_cuda_mse_fwd", dt, n, a, b));
    AMP_CHECK_ARG(loss);
    double *partials = NULL;
    AMP_TRY(amp_cuda_alloc(dev, sizeof(double) * (size_t)amp_red_blocks(n), (void **)&partials));
    amp_status s = amp_cuda_mse_fwd_launch(dt, n, a, b, loss, partials, dev->stream);
    amp_cuda_free(dev, partials); /* reused only by work queued after these kernels (one stream) */
    return s;
}

extern "C" amp_status amp_cuda_mse_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *a,
                                       const void *b, const float *dloss, void *da) {
    AMP_TRY(amp_backend_check_mse("amp_cuda_mse_bwd", dt, n, a, b));
    AMP_CHECK_ARG(dloss);
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(da);
    float norm = (float)(2.0 / (double)n);
    cudaStream_t stream = dev->stream;
    unsigned grid = grid_for(n);
    switch (dt) {
    case AMP_F16:
        mse_bwd_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(a, b, n, norm, dloss, da);
        break;
    case AMP_BF16:
        mse_bwd_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(a, b, n, norm, dloss, da);
        break;
    default:
        mse_bwd_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(a, b, n, norm, dloss, da);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}
