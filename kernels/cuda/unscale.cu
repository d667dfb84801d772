/* The loss scaler's unscale on the device: the CUDA side of the table's unscale (the lists'
 * passes, unscale_multi, nonfinite_multi and sum_squares_multi, are unscale_multi.cu).
 *
 * unscale fuses the unscale and the inf/NaN check in one read of the gradient:
 * out[i] = (f32) grad[i] * inv_scale, with torch's rule (kernels/math/unscale.h, shared with the
 * CPU backend): the INPUT is tested; out is overwritten and may be grad itself when f32 (each
 * element is read and written by the same thread). A thread that saw an inf/NaN stores 1.0f into
 * *found_inf once, after its loop, with a plain store, as torch's CUDA kernel does: several
 * threads may store at the same time, but they all store the same value and nothing in the kernel
 * reads it, so the race is benign and the result is 1.0f whatever the order. A clean gradient
 * never writes the flag, so a flag zeroed once per step covers every tensor of the step.
 *
 * The loop is grid-stride with 64-bit indices. The launcher takes an explicit stream and checks
 * the launch; the entry validates its arguments (with the CPU backend's statuses and messages)
 * and runs on the context's stream. */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/load_store.h"
#include "kernels/math/unscale.h"

template <amp_dtype D>
static __global__ void unscale_kernel(const void *grad, int64_t n, float inv_scale, float *out,
                                      float *found_inf) {
    uint32_t bad = 0;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float g = amp_load_f32(grad, D, i);
        bad |= amp_unscale_nonfinite(g);
        out[i] = amp_unscale_elem(g, inv_scale);
    }
    if (bad) *found_inf = 1.0f; /* benign same-value race: see the header */
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

extern "C" amp_status amp_cuda_unscale_launch(amp_dtype g_dt, int64_t n, const void *grad,
                                              float inv_scale, float *out, float *found_inf,
                                              cudaStream_t stream) {
    if (n <= 0) return AMP_OK;
    unsigned grid = grid_for(n);
    switch (g_dt) {
    case AMP_F16:
        unscale_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(grad, n, inv_scale, out,
                                                                      found_inf);
        break;
    case AMP_BF16:
        unscale_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(grad, n, inv_scale, out,
                                                                       found_inf);
        break;
    default:
        unscale_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(grad, n, inv_scale, out,
                                                                      found_inf);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_unscale(amp_device_ctx *dev, amp_dtype g_dt, int64_t n,
                                       const void *grad, float inv_scale, float *out,
                                       float *found_inf) {
    AMP_TRY(amp_backend_check_unscale("amp_cuda_unscale", g_dt, n, grad, inv_scale, out, found_inf));
    if (n == 0) return AMP_OK;
    return amp_cuda_unscale_launch(g_dt, n, grad, inv_scale, out, found_inf, dev->stream);
}
