/* Strided views on the device: the CUDA side of the table's copy_strided (permute, narrow, cat,
 * expand), binary_bcast (binary ops over broadcast operands) and where (the select between them),
 * core/backend.h's contracts.
 *
 * One thread per output element in a grid-stride loop: its offsets come from
 * kernels/math/strided.h (a division per dim, up to 8), the arithmetic from
 * kernels/math/pointwise_op.h, so the bits are the CPU backend's. The descriptor travels by value
 * as a kernel argument (under 300 bytes). Bytes per output element: a copy reads and writes one
 * element; a broadcast op reads two and writes one, where a broadcast operand's repeated reads
 * mostly hit the cache. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/pointwise_op.h"
#include "kernels/math/load_store.h"
#include "kernels/math/strided.h"

template <typename T>
static __global__ void copy_strided_kernel(amp_strided_desc d, int64_t n, const T *src, T *dst) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t so, dof;
        amp_view_offsets(d.ndim, d.shape, d.src_stride, d.dst_stride, i, &so, &dof);
        dst[dof] = src[so];
    }
}

template <amp_dtype D>
static __global__ void bcast_kernel(amp_bcast_desc d, int64_t n, const void *a, const void *b,
                                    void *y) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t ao, bo;
        amp_view_offsets(d.ndim, d.shape, d.a_stride, d.b_stride, i, &ao, &bo);
        amp_store_f32(y, D, i, amp_binary_apply(d.op, amp_load_f32(a, D, ao),
                                                amp_load_f32(b, D, bo)));
    }
}

/* y[i] = cond ? a : b, the chosen element's bits (T: the storage's width). */
template <typename T>
static __global__ void where_kernel(amp_where_desc d, int64_t n, const int32_t *cond, const T *a,
                                    const T *b, T *y) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t ao, bo, co = amp_view_offset(d.ndim, d.shape, d.cond_stride, i);
        amp_view_offsets(d.ndim, d.shape, d.a_stride, d.b_stride, i, &ao, &bo);
        y[i] = cond[co] != 0 ? a[ao] : b[bo];
    }
}

static int64_t view_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) n *= shape[k];
    return n;
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

extern "C" amp_status amp_cuda_copy_strided(amp_device_ctx *dev, const amp_strided_desc *d,
                                            const void *src, void *dst) {
    AMP_TRY(amp_backend_check_strided("amp_cuda_copy_strided", d));
    int64_t n = view_numel(d->ndim, d->shape);
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(src);
    AMP_CHECK_ARG(dst);
    cudaStream_t stream = dev->stream;
    if (amp_dtype_size(d->dt) == 2)
        copy_strided_kernel<uint16_t><<<grid_for(n), AMP_CUDA_BLOCK, 0, stream>>>(
            *d, n, (const uint16_t *)src, (uint16_t *)dst);
    else
        copy_strided_kernel<uint32_t><<<grid_for(n), AMP_CUDA_BLOCK, 0, stream>>>(
            *d, n, (const uint32_t *)src, (uint32_t *)dst);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_binary_bcast(amp_device_ctx *dev, const amp_bcast_desc *d,
                                            const void *a, const void *b, void *y) {
    AMP_TRY(amp_backend_check_bcast("amp_cuda_binary_bcast", d));
    int64_t n = view_numel(d->ndim, d->shape);
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(a);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(y);
    cudaStream_t stream = dev->stream;
    unsigned grid = grid_for(n);
    switch (d->dt) {
    case AMP_F16: bcast_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, n, a, b, y); break;
    case AMP_BF16:
        bcast_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, n, a, b, y);
        break;
    default: bcast_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, n, a, b, y); break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_where(amp_device_ctx *dev, const amp_where_desc *d,
                                     const int32_t *cond, const void *a, const void *b, void *y) {
    AMP_TRY(amp_backend_check_where("amp_cuda_where", d));
    int64_t n = view_numel(d->ndim, d->shape);
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(cond);
    AMP_CHECK_ARG(a);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(y);
    cudaStream_t stream = dev->stream;
    unsigned grid = grid_for(n);
    if (amp_dtype_size(d->dt) == 2)
        where_kernel<uint16_t><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(
            *d, n, cond, (const uint16_t *)a, (const uint16_t *)b, (uint16_t *)y);
    else
        where_kernel<uint32_t><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(
            *d, n, cond, (const uint32_t *)a, (const uint32_t *)b, (uint32_t *)y);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}
