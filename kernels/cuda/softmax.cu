/* Softmax and log-softmax over the last dim on the device: the CUDA side of softmax_fwd and
 * softmax_bwd, with the arithmetic and order of kernels/math/softmax.h (the same bits as the CPU
 * backend's). One warp per row (8 rows per 256-thread block, grid-stride over rows), lane l on
 * elements l, l + 32, ..., the max and sums by __shfl_xor_sync butterflies. The forward reads the
 * row three times (max, sum, output: the later two from L1/L2) and writes it once; per element
 * one load and one store of the storage dtype and two exps, so a bf16 [8 x 12 x 1024, 1024]
 * attention-sized softmax (about 400 MB moved) takes about 0.14 ms at 85 % of an H100's
 * 3.35 TB/s. The backward reads y and dy twice and writes dx. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/warp_lanes.cuh"
#include "kernels/math/load_store.h"
#include "kernels/math/softmax.h"

#define SM_WARPS 8

template <amp_dtype D>
static __global__ void softmax_fwd_kernel(amp_softmax_desc d, const void *x, void *y) {
    int lane = threadIdx.x % AMP_LANES;
    int64_t warps = (int64_t)gridDim.x * SM_WARPS;
    for (int64_t row = (int64_t)blockIdx.x * SM_WARPS + threadIdx.x / AMP_LANES; row < d.rows;
         row += warps) {
        int64_t base = row * d.cols;
        float m = -INFINITY;
        for (int64_t j = lane; j < d.cols; j += AMP_LANES) {
            float v = amp_load_f32(x, D, base + j);
            m = amp_lanes_max2(m, v); /* the CPU's order */
        }
        m = amp_warp_max(m);
        float s = 0.0f;
        for (int64_t j = lane; j < d.cols; j += AMP_LANES)
            s += amp_softmax_exp(amp_load_f32(x, D, base + j), m);
        s = amp_warp_sum(s);
        for (int64_t j = lane; j < d.cols; j += AMP_LANES) {
            float v = amp_load_f32(x, D, base + j);
            amp_store_f32(y, D, base + j, amp_softmax_out(v, m, s, d.log));
        }
    }
}

template <amp_dtype D>
static __global__ void softmax_bwd_kernel(amp_softmax_desc d, const void *y, const void *dy,
                                          void *dx) {
    int lane = threadIdx.x % AMP_LANES;
    int64_t warps = (int64_t)gridDim.x * SM_WARPS;
    for (int64_t row = (int64_t)blockIdx.x * SM_WARPS + threadIdx.x / AMP_LANES; row < d.rows;
         row += warps) {
        int64_t base = row * d.cols;
        float r = 0.0f;
        for (int64_t j = lane; j < d.cols; j += AMP_LANES) {
            float g = amp_load_f32(dy, D, base + j);
            r += d.log ? g : amp_mul_rn(g, amp_load_f32(y, D, base + j));
        }
        r = amp_warp_sum(r);
        for (int64_t j = lane; j < d.cols; j += AMP_LANES)
            amp_store_f32(dx, D, base + j,
                          amp_softmax_dx(amp_load_f32(y, D, base + j),
                                         amp_load_f32(dy, D, base + j), r, d.log));
    }
}

static unsigned grid_for_rows(int64_t rows) {
    int64_t blocks = (rows + SM_WARPS - 1) / SM_WARPS;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

extern "C" amp_status amp_cuda_softmax_fwd(amp_device_ctx *dev, const amp_softmax_desc *d,
                                           const void *x, void *y) {
    AMP_TRY(amp_backend_check_softmax("amp_cuda_softmax_fwd", d));
    if (d->rows == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    cudaStream_t stream = dev->stream;
    unsigned grid = grid_for_rows(d->rows);
    switch (d->dt) {
    case AMP_F16:
        softmax_fwd_kernel<AMP_F16><<<grid, SM_WARPS * AMP_LANES, 0, stream>>>(*d, x, y);
        break;
    case AMP_BF16:
        softmax_fwd_kernel<AMP_BF16><<<grid, SM_WARPS * AMP_LANES, 0, stream>>>(*d, x, y);
        break;
    default:
        softmax_fwd_kernel<AMP_F32><<<grid, SM_WARPS * AMP_LANES, 0, stream>>>(*d, x, y);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_softmax_bwd(amp_device_ctx *dev, const amp_softmax_desc *d,
                                           const void *y, const void *dy, void *dx) {
    AMP_TRY(amp_backend_check_softmax("amp_cuda_softmax_bwd", d));
    if (d->rows == 0) return AMP_OK;
    AMP_CHECK_ARG(y);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(dx);
    cudaStream_t stream = dev->stream;
    unsigned grid = grid_for_rows(d->rows);
    switch (d->dt) {
    case AMP_F16:
        softmax_bwd_kernel<AMP_F16><<<grid, SM_WARPS * AMP_LANES, 0, stream>>>(*d, y, dy, dx);
        break;
    case AMP_BF16:
        softmax_bwd_kernel<AMP_BF16><<<grid, SM_WARPS * AMP_LANES, 0, stream>>>(*d, y, dy, dx);
        break;
    default:
        softmax_bwd_kernel<AMP_F32><<<grid, SM_WARPS * AMP_LANES, 0, stream>>>(*d, y, dy, dx);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}
