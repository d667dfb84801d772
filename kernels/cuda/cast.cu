/* Dtype conversion and fill on the device: the CUDA side of the table's cast, fill and
 * fill_scalar, and the strided cast-with-bias that the GEMM uses around cuBLASLt.
 *
 * Numerics: the per-element code is the CPU backend's: core/half.h's integer conversions for
 * f16/bf16 (round to nearest even, overflow to inf, subnormals kept, NaN -> 0x7fff) and
 * kernels/math/cast.h for i32 (truncation, NaN -> 0, saturation), so both backends write the same
 * bits. f16 <-> bf16 goes through f32, which holds every f16 and bf16 value exactly, so it rounds
 * once; i32 converts to and from f32 only (as the CPU backend). Outputs are overwritten.
 *
 * Loops are grid-stride (the grid is capped at AMP_CUDA_MAX_BLOCKS) with 64-bit indices. Each
 * launcher takes an explicit stream and checks the launch; the entries validate their arguments
 * (with the CPU backend's statuses) and run on the context's stream. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/cast.h"
#include "kernels/math/load_store.h"
#include "kernels/math/relu.h"

/* Stores v as dtype D. i32 goes through amp_f32_to_i32, whose NaN and out-of-range results are
 * defined (a plain (int32_t) cast is not). */
template <amp_dtype D>
static __device__ inline void store_as(void *p, int64_t i, float v) {
    if (D == AMP_I32) ((int32_t *)p)[i] = amp_f32_to_i32(v);
    else amp_store_f32(p, D, i, v);
}

/* dst[i] = (D)(float)src[i]. S and D are template arguments so that load and store compile to
 * the one conversion each pair needs. */
template <amp_dtype S, amp_dtype D>
static __global__ void cast_kernel(void *dst, const void *src, int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        store_as<D>(dst, i, amp_load_f32(src, S, i));
}

/* dst[i] = bits: the value was converted once on the host with the same per-element code. */
template <typename T>
static __global__ void fill_bits_kernel(T *dst, int64_t n, T bits) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = bits;
}

/* dst[i] = (D)(scale * *scalar): the scalar stays on the device, so no host sync. */
template <amp_dtype D>
static __global__ void fill_scalar_kernel(void *dst, int64_t n, const float *scalar, float scale) {
    float v = scale * *scalar;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        store_as<D>(dst, i, v);
}

/* Strided 2-D dst = epilogue(scale * src + bias[col]), src and bias optional, float dtypes, the
 * epilogue the GEMM's ReLU (kernels/math/relu.h) or none. The dtypes are runtime values (the
 * switch is uniform across the grid): this pass runs beside a GEMM, not in a hot loop. The fma
 * is written out so that nvcc and g++ (cudacpu) round alike. */
static __global__ void cast_rows_kernel(void *dst, amp_dtype dst_dt, int64_t ldd, const void *src,
                                        amp_dtype src_dt, int64_t lds, int64_t rows, int64_t cols,
                                        float scale, const float *bias, bool relu) {
    int64_t total = rows * cols;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        int64_t i = idx / cols, j = idx - i * cols;
        float b = bias ? bias[j] : 0.0f;
        float v = src ? __fmaf_rn(scale, amp_load_f32(src, src_dt, i * lds + j), b) : b;
        amp_store_f32(dst, dst_dt, i * ldd + j, relu ? amp_relu_epilogue(v) : v);
    }
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

template <amp_dtype S, amp_dtype D>
static void cast_pair_launch(void *dst, const void *src, int64_t n, cudaStream_t stream) {
    cast_kernel<S, D><<<grid_for(n), AMP_CUDA_BLOCK, 0, stream>>>(dst, src, n);
}

template <amp_dtype S>
static void cast_from_float_launch(void *dst, amp_dtype dst_dt, const void *src, int64_t n,
                                   cudaStream_t stream) {
    switch (dst_dt) {
    case AMP_F16: cast_pair_launch<S, AMP_F16>(dst, src, n, stream); break;
    case AMP_BF16: cast_pair_launch<S, AMP_BF16>(dst, src, n, stream); break;
    default: cast_pair_launch<S, AMP_F32>(dst, src, n, stream); break;
    }
}

/* Launches dst = (dst_dt)src for n >= 1 elements of a validated pair of different dtypes. */
static amp_status cast_launch(void *dst, amp_dtype dst_dt, const void *src, amp_dtype src_dt,
                              int64_t n, cudaStream_t stream) {
    if (dst_dt == AMP_I32) cast_pair_launch<AMP_F32, AMP_I32>(dst, src, n, stream);
    else if (src_dt == AMP_I32) cast_pair_launch<AMP_I32, AMP_F32>(dst, src, n, stream);
    else if (src_dt == AMP_F16) cast_from_float_launch<AMP_F16>(dst, dst_dt, src, n, stream);
    else if (src_dt == AMP_BF16) cast_from_float_launch<AMP_BF16>(dst, dst_dt, src, n, stream);
    else cast_from_float_launch<AMP_F32>(dst, dst_dt, src, n, stream);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

static amp_status fill_launch(void *dst, amp_dtype dt, int64_t n, float value, cudaStream_t stream) {
    unsigned grid = grid_for(n);
    if (dt == AMP_F32 || dt == AMP_I32) {
        uint32_t bits = dt == AMP_F32 ? amp_f32_bits(value) : (uint32_t)amp_f32_to_i32(value);
        fill_bits_kernel<uint32_t><<<grid, AMP_CUDA_BLOCK, 0, stream>>>((uint32_t *)dst, n, bits);
    } else {
        uint16_t bits = dt == AMP_F16 ? amp_f32_to_f16_bits(value) : amp_f32_to_bf16_bits(value);
        fill_bits_kernel<uint16_t><<<grid, AMP_CUDA_BLOCK, 0, stream>>>((uint16_t *)dst, n, bits);
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

static amp_status fill_scalar_launch(void *dst, amp_dtype dt, int64_t n, const float *scalar,
                                     float scale, cudaStream_t stream) {
    unsigned grid = grid_for(n);
    switch (dt) {
    case AMP_F16:
        fill_scalar_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(dst, n, scalar, scale);
        break;
    case AMP_BF16:
        fill_scalar_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(dst, n, scalar, scale);
        break;
    case AMP_I32:
        fill_scalar_kernel<AMP_I32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(dst, n, scalar, scale);
        break;
    default:
        fill_scalar_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(dst, n, scalar, scale);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_cast_rows_launch(void *dst, amp_dtype dst_dt, int64_t ldd,
                                                const void *src, amp_dtype src_dt, int64_t lds,
                                                int64_t rows, int64_t cols, float scale,
                                                const float *bias, bool relu,
                                                cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return AMP_OK;
    cast_rows_kernel<<<grid_for(rows * cols), AMP_CUDA_BLOCK, 0, stream>>>(
        dst, dst_dt, ldd, src, src_dt, lds, rows, cols, scale, bias, relu);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

static bool is_known_dtype(amp_dtype dt) {
    return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16 || dt == AMP_I32;
}

static amp_status check_fill(const char *fn, void *dst, amp_dtype dt, int64_t n) {
    if (!is_known_dtype(dt)) return amp_fail(AMP_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)dt);
    if (n < 0) return amp_fail(AMP_ERR_INVALID_ARG, "%s: n = %lld < 0", fn, (long long)n);
    if (n > 0 && !dst) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'dst' is NULL", fn);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_cast(amp_device_ctx *dev, void *dst, amp_dtype dst_dt,
                                    const void *src, amp_dtype src_dt, int64_t n) {
    if (!is_known_dtype(dst_dt) || !is_known_dtype(src_dt))
        return amp_fail(AMP_ERR_DTYPE, "amp_cuda_cast: unknown dtype (src %d, dst %d)", (int)src_dt,
                        (int)dst_dt);
    bool half_src = src_dt == AMP_F16 || src_dt == AMP_BF16;
    bool half_dst = dst_dt == AMP_F16 || dst_dt == AMP_BF16;
    if ((src_dt == AMP_I32 || dst_dt == AMP_I32) && src_dt != dst_dt && (half_src || half_dst))
        return amp_fail(AMP_ERR_UNSUPPORTED,
                        "amp_cuda_cast: %s -> %s is not supported (cast through f32)",
                        amp_dtype_name(src_dt), amp_dtype_name(dst_dt));
    if (n < 0) return amp_fail(AMP_ERR_INVALID_ARG, "amp_cuda_cast: n = %lld < 0", (long long)n);
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(dst);
    AMP_CHECK_ARG(src);
    cudaStream_t stream = dev->stream;
    if (dst_dt == src_dt) {
        AMP_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)n * amp_dtype_size(dst_dt),
                                     cudaMemcpyDeviceToDevice, stream));
        return AMP_OK;
    }
    return cast_launch(dst, dst_dt, src, src_dt, n, stream);
}

extern "C" amp_status amp_cuda_fill(amp_device_ctx *dev, void *dst, amp_dtype dt, int64_t n,
                                    float value) {
    AMP_TRY(check_fill("amp_cuda_fill", dst, dt, n));
    if (n == 0) return AMP_OK;
    return fill_launch(dst, dt, n, value, dev->stream);
}

extern "C" amp_status amp_cuda_fill_scalar(amp_device_ctx *dev, void *dst, amp_dtype dt, int64_t n,
                                           const float *scalar, float scale) {
    AMP_CHECK_ARG(scalar);
    AMP_TRY(check_fill("amp_cuda_fill_scalar", dst, dt, n));
    if (n == 0) return AMP_OK;
    return fill_scalar_launch(dst, dt, n, scalar, scale, dev->stream);
}
