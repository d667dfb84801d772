/* The convolution's bias on the device, around cuDNN (conv.c): our bias and its gradient
 * are f32 whatever the activations' dtype, and cuDNN's cudnnAddTensor/ConvolutionBackwardBias want
 * them in the tensor's dtype, so both are done here. Tensors are [n, c, hw] (NCHW, hw = h * w).
 *
 *  - bias fill, before the convolution: y = (dt)bias[c]; cuDNN then adds the convolution to it in
 *    f32 (beta = 1) and rounds once. Exact for f32; for f16/bf16 the bias itself is rounded to
 *    the output's type first, so the result is round(conv + round(bias)), within half a unit of
 *    the bias's last place of the CPU's round(conv + bias). PyTorch's cuDNN path adds the bias to
 *    the rounded output instead (two roundings of the result, which the contract does not allow).
 *  - bias gradient, overwritten: one block per channel; thread t sums its fixed share of the
 *    channel's n * hw elements in double in index order, amp_block_sum_f64 adds the threads in a
 *    fixed butterfly, and the total is rounded to f32 once. No atomics: the bits depend on the
 *    shape and the data only. Double, as the linear layer's bias gradient (reduce.cu's sum_rows),
 *    keeps the result within an f32 rounding of the exact sum; the CPU backend (oneDNN) sums in f32
 *    in a thread-dependent order, so the two agree within the CPU's own rounding error.
 * Launchers take an explicit stream and checked arguments (conv_bias.h) and check the launch. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
/* block_reduce.cuh defines its two-pass sum's final kernel as a plain static function, which this
 * file does not use (g++ under cudacpu warns; nvcc does not). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "kernels/cuda/block_reduce.cuh"
#pragma GCC diagnostic pop
#include "kernels/cuda/conv_bias.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/load_store.h"

/* Threads per block of the bias gradient, one block per channel: 8 warps keep a channel's loads
 * in flight; a layer has tens to hundreds of channels, so the grid fills the SMs. */
#define DBIAS_BLOCK 256

template <amp_dtype D>
static __global__ void bias_fill_kernel(void *y, const float *bias, int64_t c, int64_t hw,
                                        int64_t numel) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += stride)
        amp_store_f32(y, D, i, bias[(i / hw) % c]);
}

/* Block ch sums channel ch. When a plane fits in the block (hw <= DBIAS_BLOCK), the block reads
 * `rows` planes at once: thread t takes position t % hw of planes t / hw, t / hw + rows, ...
 * (threads past rows * hw idle). Otherwise every thread walks each plane in turn at t, t + BLOCK,
 * .... Either way each thread's order, and so the result, is fixed by the shape. */
template <amp_dtype D>
static __global__ void bias_grad_kernel(const void *dy, int64_t n, int64_t c, int64_t hw,
                                        float *dbias) {
    const int64_t ch = blockIdx.x, t = threadIdx.x;
    double acc = 0.0;
    if (hw <= DBIAS_BLOCK) {
        int64_t rows = DBIAS_BLOCK / hw;
        if (t < rows * hw)
            for (int64_t r = t / hw; r < n; r += rows)
                acc += (double)amp_load_f32(dy, D, (r * c + ch) * hw + t % hw);
    } else {
        for (int64_t r = 0; r < n; r++)
            for (int64_t i = t; i < hw; i += DBIAS_BLOCK)
                acc += (double)amp_load_f32(dy, D, (r * c + ch) * hw + i);
    }
    double s = amp_block_sum_f64<DBIAS_BLOCK>(acc);
    if (t == 0) dbias[ch] = (float)s;
}

extern "C" amp_status amp_cuda_conv_bias_fill_launch(amp_dtype dt, int64_t n, int64_t c,
                                                    int64_t hw, const float *bias, void *y,
                                                    cudaStream_t stream) {
    int64_t numel = n * c * hw;
    int64_t blocks = (numel + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    unsigned grid = (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
    switch (dt) {
    case AMP_F16:
        bias_fill_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(y, bias, c, hw, numel);
        break;
    case AMP_BF16:
        bias_fill_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(y, bias, c, hw, numel);
        break;
    default:
        bias_fill_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(y, bias, c, hw, numel);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_conv_bias_grad_launch(amp_dtype dt, int64_t n, int64_t c,
                                                     int64_t hw, const void *dy, float *dbias,
                                                     cudaStream_t stream) {
    /* One block per channel: grid.x takes up to 2^31 - 1, more channels than cuDNN's int
     * descriptors allow. */
    unsigned grid = (unsigned)c;
    switch (dt) {
    case AMP_F16:
        bias_grad_kernel<AMP_F16><<<grid, DBIAS_BLOCK, 0, stream>>>(dy, n, c, hw, dbias);
        break;
    case AMP_BF16:
        bias_grad_kernel<AMP_BF16><<<grid, DBIAS_BLOCK, 0, stream>>>(dy, n, c, hw, dbias);
        break;
    default:
        bias_grad_kernel<AMP_F32><<<grid, DBIAS_BLOCK, 0, stream>>>(dy, n, c, hw, dbias);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}
