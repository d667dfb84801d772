/* The loss scaler's passes on the device: the CUDA side of the table's unscale and sum_squares.
 *
 * unscale fuses the unscale and the inf/NaN check in one read of the gradient:
 * out[i] = (f32) grad[i] * inv_scale, with torch's rule (kernels/math/unscale.h, shared with the
 * CPU backend): the INPUT is tested; out is overwritten and may be grad itself when f32 (each
 * element is read and written by the same thread). A thread that saw an inf/NaN stores 1.0f into
 * *found_inf once, after its loop, with a plain store, as torch's CUDA kernel does: several
 * threads may store at the same time, but they all store the same value and nothing in the kernel
 * reads it, so the race is benign and the result is 1.0f whatever the order. A clean gradient
 * never writes the flag, so a flag zeroed once per step covers every tensor of the step.
 * nonfinite is the same test and the same flag store without the writes of out.
 *
 * sum_squares is deterministic without float atomics, in two passes:
 *   1. SUMSQ_BLOCKS(n) blocks; each thread sums the squares (exact in double) of its grid-stride
 *      elements in index order, the block reduces its threads with __shfl_xor_sync in each warp
 *      and shared memory across warps, and writes one double partial;
 *   2. one block sums the partials the same way and rounds to f32 once.
 * The grid depends on n only, so the bits depend on n and the data only. They differ from the
 * CPU backend's (another order), within the final f32 rounding of an accurate double sum.
 * The partials (at most SUMSQ_MAX_BLOCKS doubles) come from the caching allocator and go back
 * to it right after the launches: the context's one stream orders their reuse.
 *
 * Loops are grid-stride with 64-bit indices. Launchers take an explicit stream and check the
 * launch; the entries validate their arguments (with the CPU backend's statuses and messages)
 * and run on the context's stream. */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/load_store.h"
#include "kernels/math/unscale.h"

/* Pass 1 of sum_squares: at most this many blocks, i.e. partials. 1024 x 256 threads keep an
 * H100's 132 SMs full several times over for a memory-bound read, and pass 2 then reads only
 * 8 KiB. */
#define SUMSQ_MAX_BLOCKS 1024
/* Threads per block of both passes: 8 warps (a power of two, at most 32 warps, as the
 * cross-warp step below assumes). */
#define SUMSQ_BLOCK 256
#define SUMSQ_WARPS (SUMSQ_BLOCK / 32)

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

template <amp_dtype D>
static __global__ void nonfinite_kernel(const void *x, int64_t n, float *found_inf) {
    uint32_t bad = 0;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        bad |= amp_unscale_nonfinite(amp_load_f32(x, D, i));
    if (bad) *found_inf = 1.0f; /* benign same-value race, as in unscale_kernel */
}

/* The sum of v over the block, valid in thread 0. Every thread of the block must call it. Each
 * warp reduces with a butterfly (lane l adds lane l ^ k for k = 16..1: a fixed order), lane 0
 * of each warp stores its warp's sum, and warp 0 reduces those the same way. */
static __device__ double block_sum(double v) {
    __shared__ double warp_sums[SUMSQ_WARPS];
    for (int k = 16; k >= 1; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < SUMSQ_WARPS ? warp_sums[lane] : 0.0;
        for (int k = 16; k >= 1; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
    }
    return v;
}

template <amp_dtype D>
static __global__ void sumsq_partial_kernel(const void *x, int64_t n, double *partials) {
    double acc = 0.0;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        acc += amp_square_f64(amp_load_f32(x, D, i));
    double s = block_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

/* One block: thread t sums partials t, t + SUMSQ_BLOCK, ... in order, then the block sum. */
static __global__ void sumsq_final_kernel(const double *partials, int n_partials, float *out) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < n_partials; i += blockDim.x) acc += partials[i];
    double s = block_sum(acc);
    if (threadIdx.x == 0) *out = (float)s;
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

extern "C" int amp_cuda_sum_squares_blocks(int64_t n) {
    int64_t blocks = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    if (blocks < 1) blocks = 1;
    return (int)(blocks < SUMSQ_MAX_BLOCKS ? blocks : SUMSQ_MAX_BLOCKS);
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

extern "C" amp_status amp_cuda_nonfinite_launch(amp_dtype dt, int64_t n, const void *x,
                                                float *found_inf, cudaStream_t stream) {
    if (n <= 0) return AMP_OK;
    unsigned grid = grid_for(n);
    switch (dt) {
    case AMP_F16:
        nonfinite_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(x, n, found_inf);
        break;
    case AMP_BF16:
        nonfinite_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(x, n, found_inf);
        break;
    default:
        nonfinite_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(x, n, found_inf);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_sum_squares_launch(amp_dtype dt, int64_t n, const void *x,
                                                  float *out, double *partials,
                                                  cudaStream_t stream) {
    int blocks = amp_cuda_sum_squares_blocks(n);
    switch (dt) {
    case AMP_F16:
        sumsq_partial_kernel<AMP_F16><<<blocks, SUMSQ_BLOCK, 0, stream>>>(x, n, partials);
        break;
    case AMP_BF16:
        sumsq_partial_kernel<AMP_BF16><<<blocks, SUMSQ_BLOCK, 0, stream>>>(x, n, partials);
        break;
    default:
        sumsq_partial_kernel<AMP_F32><<<blocks, SUMSQ_BLOCK, 0, stream>>>(x, n, partials);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    sumsq_final_kernel<<<1, SUMSQ_BLOCK, 0, stream>>>(partials, blocks, out);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

static amp_status check_float(const char *fn, const char *what, amp_dtype dt) {
    if (dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16) return AMP_OK;
    return amp_fail(AMP_ERR_DTYPE, "%s: %s dtype %s, want f32, f16 or bf16", fn, what,
                    amp_dtype_name(dt));
}

extern "C" amp_status amp_cuda_unscale(amp_device_ctx *dev, amp_dtype g_dt, int64_t n,
                                       const void *grad, float inv_scale, float *out,
                                       float *found_inf) {
    AMP_TRY(amp_backend_check_unscale("amp_cuda_unscale", g_dt, n, grad, inv_scale, out, found_inf));
    if (n == 0) return AMP_OK;
    return amp_cuda_unscale_launch(g_dt, n, grad, inv_scale, out, found_inf, dev->stream);
}

extern "C" amp_status amp_cuda_sum_squares(amp_device_ctx *dev, amp_dtype dt, int64_t n,
                                           const void *x, float *out) {
    AMP_TRY(check_float("amp_cuda_sum_squares", "input", dt));
    if (n < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_cuda_sum_squares: n = %lld < 0", (long long)n);
    AMP_CHECK_ARG(out);
    if (n > 0) AMP_CHECK_ARG(x);
    double *partials = NULL;
    size_t nbytes = sizeof(double) * (size_t)amp_cuda_sum_squares_blocks(n);
    AMP_TRY(amp_cuda_alloc(dev, nbytes, (void **)&partials));
    amp_status s = amp_cuda_sum_squares_launch(dt, n, x, out, partials, dev->stream);
    amp_cuda_free(dev, partials); /* reused only by work queued after these kernels (one stream) */
    return s;
}

extern "C" amp_status amp_cuda_nonfinite(amp_device_ctx *dev, amp_dtype dt, int64_t n,
                                         const void *x, float *found_inf) {
    AMP_TRY(amp_backend_check_nonfinite("amp_cuda_nonfinite", dt, n, x, found_inf));
    return amp_cuda_nonfinite_launch(dt, n, x, found_inf, dev->stream);
}
