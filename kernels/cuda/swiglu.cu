/* SwiGLU on the device: the CUDA side of core/backend_kernels.def's swiglu_fwd and swiglu_bwd,
 * one thread per output element (grid-stride) over kernels/math/swiglu.h, so the bits are the
 * CPU loop's. Outputs are overwritten; nothing waits for the host. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/load_store.h"
#include "kernels/math/swiglu.h"

template <amp_dtype D>
static __global__ void swiglu_fwd_kernel(int64_t rows, int64_t cols, const void *a,
                                         const void *b, int64_t ld, void *y) {
    int64_t n = rows * cols, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        int64_t at = e / cols * ld + e % cols;
        amp_store_f32(y, D, e, amp_swiglu_elem(amp_load_f32(a, D, at), amp_load_f32(b, D, at), D));
    }
}

template <amp_dtype D>
static __global__ void swiglu_bwd_kernel(int64_t rows, int64_t cols, const void *a,
                                         const void *b, int64_t ld, const void *dy, void *da,
                                         void *db) {
    int64_t n = rows * cols, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        int64_t at = e / cols * ld + e % cols;
        float ga, gb;
        amp_swiglu_elem_bwd(amp_load_f32(a, D, at), amp_load_f32(b, D, at), amp_load_f32(dy, D, e),
                            D, &ga, &gb);
        amp_store_f32(da, D, at, ga);
        amp_store_f32(db, D, at, gb);
    }
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

extern "C" amp_status amp_cuda_swiglu_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t rows,
                                          int64_t cols, const void *a, const void *b, int64_t ld,
                                          void *y) {
    AMP_TRY(amp_backend_check_rows("amp_cuda_swiglu_fwd", dt, rows, cols, ld));
    if (rows * cols == 0) return AMP_OK;
    AMP_CHECK_ARG(a);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(y);
    cudaStream_t stream = dev->stream;
    unsigned grid = grid_for(rows * cols);
    switch (dt) {
    case AMP_F16:
        swiglu_fwd_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(rows, cols, a, b, ld, y);
        break;
    case AMP_BF16:
        swiglu_fwd_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(rows, cols, a, b, ld, y);
        break;
    default:
        swiglu_fwd_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(rows, cols, a, b, ld, y);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_swiglu_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t rows,
                                          int64_t cols, const void *a, const void *b, int64_t ld,
                                          const void *dy, void *da, void *db) {
    AMP_TRY(amp_backend_check_rows("amp_cuda_swiglu_bwd", dt, rows, cols, ld));
    if (rows * cols == 0) return AMP_OK;
    AMP_CHECK_ARG(a);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(da);
    AMP_CHECK_ARG(db);
    cudaStream_t stream = dev->stream;
    unsigned grid = grid_for(rows * cols);
    switch (dt) {
    case AMP_F16:
        swiglu_bwd_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(rows, cols, a, b, ld, dy,
                                                                        da, db);
        break;
    case AMP_BF16:
        swiglu_bwd_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(rows, cols, a, b, ld, dy,
                                                                         da, db);
        break;
    default:
        swiglu_bwd_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(rows, cols, a, b, ld, dy,
                                                                        da, db);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}
