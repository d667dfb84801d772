/* Elementwise ops on the device: the CUDA side of the table's unary (relu, scale, copy, the
 * scalar forms, exp, log, tanh, sigmoid, SiLU), binary (add, sub, mul, div, the backward forms)
 * and axpy.
 *
 * Numerics: f16/bf16 are widened exactly to f32 (kernels/math/load_store.h), computed in f32 by
 * the CPU backend's own per-element functions (kernels/math/relu.h, binary.h, transcendental.h)
 * and rounded back to
 * nearest even, so both backends write the same bits, NaN and signed zeros included. axpy's
 * product is rounded before the add (amp_axpy uses amp_mul_rn), as the CPU's, which nvcc would
 * otherwise contract into an fma. copy is a byte copy in any dtype (i32 too), keeping NaN
 * payloads, as the CPU's.
 * Outputs are overwritten; axpy updates y in place (y += alpha * x). y may be x, a or b itself:
 * each element is read and written by the same thread. Other overlaps are not supported.
 *
 * Loops are grid-stride (the grid is capped at AMP_CUDA_MAX_BLOCKS) with 64-bit indices; the op
 * and the dtype are template arguments, so each kernel is one straight loop. Launchers take an
 * explicit stream and check the launch; the entries validate their arguments with the CPU
 * backend's statuses and messages and run on dev->stream. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/pointwise_op.h"
#include "kernels/math/load_store.h"
#include "kernels/math/relu.h"
#include "kernels/math/transcendental.h"

/* OP is a constant: kernels/math/pointwise_op.h's switch folds away. */
template <amp_unary_op OP>
static __device__ inline float unary_elem(float x, float alpha) {
    return amp_unary_apply(OP, x, alpha);
}

template <amp_binary_op OP>
static __device__ inline float binary_elem(float a, float b) {
    return amp_binary_apply(OP, a, b);
}

template <amp_dtype D, amp_unary_op OP>
static __global__ void unary_kernel(const void *x, float alpha, void *y, int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        amp_store_f32(y, D, i, unary_elem<OP>(amp_load_f32(x, D, i), alpha));
}

template <amp_dtype D, amp_binary_op OP>
static __global__ void binary_kernel(const void *a, const void *b, void *y, int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        amp_store_f32(y, D, i, binary_elem<OP>(amp_load_f32(a, D, i), amp_load_f32(b, D, i)));
}

template <amp_dtype D>
static __global__ void axpy_kernel(float alpha, const void *x, void *y, int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        amp_store_f32(y, D, i, amp_axpy(amp_load_f32(y, D, i), alpha, amp_load_f32(x, D, i)));
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

/* One kernel per (dtype, op) of core/pointwise_ops.def: the op is a template argument, so each
 * loop is straight. A copy never comes here (the entry copies bytes). */
template <amp_dtype D>
static void unary_dt_launch(amp_unary_op op, int64_t n, const void *x, float alpha, void *y,
                            cudaStream_t stream) {
    unsigned grid = grid_for(n);
    switch (op) {
#define AMP_UNARY_OP(name, element)                                                                \
    case AMP_UNARY_##name:                                                                         \
        unary_kernel<D, AMP_UNARY_##name><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(x, alpha, y, n);    \
        break;
#include "core/pointwise_ops.def"
    default: break;
    }
}

template <amp_dtype D>
static void binary_dt_launch(amp_binary_op op, int64_t n, const void *a, const void *b, void *y,
                             cudaStream_t stream) {
    unsigned grid = grid_for(n);
    switch (op) {
#define AMP_BINARY_OP(name, element)                                                               \
    case AMP_BINARY_##name:                                                                        \
        binary_kernel<D, AMP_BINARY_##name><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(a, b, y, n);      \
        break;
#include "core/pointwise_ops.def"
    default: break;
    }
}

/* relu, scale, + or / a scalar of n >= 1 elements of a float dtype (validated by the caller). */
extern "C" amp_status amp_cuda_unary_launch(amp_unary_op op, amp_dtype dt, int64_t n,
                                            const void *x, float alpha, void *y,
                                            cudaStream_t stream) {
    switch (dt) {
    case AMP_F16: unary_dt_launch<AMP_F16>(op, n, x, alpha, y, stream); break;
    case AMP_BF16: unary_dt_launch<AMP_BF16>(op, n, x, alpha, y, stream); break;
    default: unary_dt_launch<AMP_F32>(op, n, x, alpha, y, stream); break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_binary_launch(amp_binary_op op, amp_dtype dt, int64_t n,
                                             const void *a, const void *b, void *y,
                                             cudaStream_t stream) {
    switch (dt) {
    case AMP_F16: binary_dt_launch<AMP_F16>(op, n, a, b, y, stream); break;
    case AMP_BF16: binary_dt_launch<AMP_BF16>(op, n, a, b, y, stream); break;
    default: binary_dt_launch<AMP_F32>(op, n, a, b, y, stream); break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_axpy_launch(amp_dtype dt, int64_t n, float alpha, const void *x,
                                           void *y, cudaStream_t stream) {
    unsigned grid = grid_for(n);
    switch (dt) {
    case AMP_F16:
        axpy_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(alpha, x, y, n);
        break;
    case AMP_BF16:
        axpy_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(alpha, x, y, n);
        break;
    default:
        axpy_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(alpha, x, y, n);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_unary(amp_device_ctx *dev, amp_unary_op op, amp_dtype dt, int64_t n,
                                     const void *x, float alpha, void *y) {
    if ((int)op < 0 || (int)op > (int)AMP_UNARY_LAST)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_cuda_unary: unknown op %d", (int)op);
    if (op != AMP_UNARY_COPY || dt != AMP_I32) AMP_TRY(amp_backend_check_float("amp_cuda_unary", dt));
    AMP_TRY(amp_backend_check_n("amp_cuda_unary", n));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    if (op == AMP_UNARY_COPY) {
        if (x == y) return AMP_OK; /* a copy onto itself: nothing changes */
        AMP_CUDA_TRY(cudaMemcpyAsync(y, x, (size_t)n * amp_dtype_size(dt), cudaMemcpyDeviceToDevice,
                                     dev->stream));
        return AMP_OK;
    }
    return amp_cuda_unary_launch(op, dt, n, x, alpha, y, dev->stream);
}

extern "C" amp_status amp_cuda_binary(amp_device_ctx *dev, amp_binary_op op, amp_dtype dt,
                                      int64_t n, const void *a, const void *b, void *y) {
    if ((int)op < 0 || (int)op > (int)AMP_BINARY_LAST)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_cuda_binary: unknown op %d", (int)op);
    AMP_TRY(amp_backend_check_float("amp_cuda_binary", dt));
    AMP_TRY(amp_backend_check_n("amp_cuda_binary", n));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(a);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(y);
    return amp_cuda_binary_launch(op, dt, n, a, b, y, dev->stream);
}

extern "C" amp_status amp_cuda_axpy(amp_device_ctx *dev, amp_dtype dt, int64_t n, float alpha,
                                    const void *x, void *y) {
    AMP_TRY(amp_backend_check_float("amp_cuda_axpy", dt));
    AMP_TRY(amp_backend_check_n("amp_cuda_axpy", n));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    return amp_cuda_axpy_launch(dt, n, alpha, x, y, dev->stream);
}
