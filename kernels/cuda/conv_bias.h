/* Internals of the CUDA convolution shared by its two files and its test:
 *  - conv_bias.cu: the f32 bias and its gradient on [n, c, hw] tensors (NCHW with hw = h * w).
 *    cuDNN's cudnnAddTensor and cudnnConvolutionBackwardBias want the bias in the tensor's dtype,
 *    and ours stays f32 whatever the activations' dtype, so these two are our own kernels;
 *  - conv.c: counters of its algorithm cache (tests check that a shape is searched once).
 * Launchers take an explicit stream, checked sizes (n, c, hw >= 1) and non-NULL pointers, and
 * check their launches. */
#ifndef AMP_KERNELS_CUDA_CONV_BIAS_H
#define AMP_KERNELS_CUDA_CONV_BIAS_H

#include <stdint.h>

#include "kernels/cuda/cuda_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[n, c, i] = (dt)bias[c] (f32, f16 or bf16): the output's starting value, to which cuDNN then
 * adds the convolution in f32 with one rounding (beta = 1). */
amp_status amp_cuda_conv_bias_fill_launch(amp_dtype dt, int64_t n, int64_t c, int64_t hw,
                                          const float *bias, void *y, cudaStream_t stream);

/* dbias[c] = sum over n and i of dy[n, c, i], overwritten: summed in double in an order fixed by
 * the shape (no atomics), rounded to f32 once. Deterministic; the CPU backend (oneDNN, f32
 * partial sums in a thread-dependent order) can differ within its own rounding error. */
amp_status amp_cuda_conv_bias_grad_launch(amp_dtype dt, int64_t n, int64_t c, int64_t hw,
                                          const void *dy, float *dbias, cudaStream_t stream);

/* The algorithm cache of conv.c, the device context's. */
typedef struct amp_cuda_conv_stats {
    int64_t algo_searches; /* calls of cudnnGetConvolution*Algorithm_v7: one per new plan */
    /* The cuDNN algorithm of the latest call of each entry (cudnnConvolutionFwdAlgo_t,
     * ...BwdDataAlgo_t, ...BwdFilterAlgo_t), -1 before the first. */
    int fwd_algo, bwd_data_algo, bwd_filter_algo;
    /* The cudnnMathType_t of the latest call's plan (CUDNN_FMA_MATH: true f32), -1 before. */
    int math_type;
} amp_cuda_conv_stats;

void amp_cuda_conv_stats_get(amp_device_ctx *dev, amp_cuda_conv_stats *out);

#ifdef __cplusplus
}
#endif

#endif
