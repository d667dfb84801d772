/* Batch norm per element and per channel, given the channel statistics (the reductions that
 * produce them are the backend's). Follows PyTorch's CPU kernels (aten/src/ATen/native/
 * Normalization.cpp, batch_norm_cpu_*): normalisation folded into one scale and shift per
 * channel, statistics and running-stat updates in double.
 *
 * Every product that an add follows is rounded on its own (amp_mul_rn, amp_bn_dmul_rn): the C
 * files build with -ffp-contract=off, nvcc would fuse a * b + c into one fma, and the CPU and CUDA
 * backends must round the same way to give the same bits. */
#ifndef AMP_KERNELS_MATH_BATCHNORM_H
#define AMP_KERNELS_MATH_BATCHNORM_H

#include <math.h>

#include "core/hd.h"
#include "kernels/math/binary.h"
#include "kernels/math/relu.h"

/* a * b in double, rounded before any add that follows (amp_mul_rn's double twin). */
AMP_HD static inline double amp_bn_dmul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

/* The terms of the channel sums, in double, each rounded before the backend adds it to a lane:
 * (x - mean)^2 for the variance, (x - mean) * dy for the backward's projection. */
AMP_HD static inline double amp_bn_sq_dev(float x, double mean) {
    double dev = (double)x - mean;
    return amp_bn_dmul_rn(dev, dev);
}

AMP_HD static inline double amp_bn_dy_dev(float x, float dy, double mean) {
    return amp_bn_dmul_rn((double)x - mean, (double)dy);
}

/* 1 / sqrt(var + eps) with the biased variance (the normalisation of training and eval). */
AMP_HD static inline double amp_bn_invstd(double var, float eps) {
    return 1.0 / sqrt(var + (double)eps);
}

/* The per-channel fold: y = x * scale + shift equals gamma * (x - mean) * invstd + beta. */
AMP_HD static inline void amp_bn_fold(double mean, double invstd, float gamma, float beta,
                                      float *scale, float *shift) {
    double s = (double)gamma * invstd;
    *scale = (float)s;
    *shift = (float)((double)beta - amp_bn_dmul_rn(mean, s));
}

AMP_HD static inline float amp_bn_apply(float x, float scale, float shift) {
    return amp_mul_rn(x, scale) + shift;
}

/* A batch norm fused with the ReLU after it (amp_bn_desc.relu): amp_relu on the f32 value,
 * before y is rounded to its dtype. The same bits as the ReLU on the rounded value, but for a
 * negative value that rounds to -0, which the ReLU keeps and this makes +0. */
AMP_HD static inline float amp_bn_apply_relu(float x, float scale, float shift) {
    return amp_relu(amp_bn_apply(x, scale, shift));
}

/* running <- momentum * batch_stat + (1 - momentum) * running (PyTorch's order, in double); the
 * caller passes the unbiased variance sum / (N - 1) for running_var. */
AMP_HD static inline float amp_bn_running_update(float running, double batch_stat, float momentum) {
    return (float)(amp_bn_dmul_rn((double)momentum, batch_stat) +
                   amp_bn_dmul_rn(1.0 - (double)momentum, (double)running));
}

/* Training backward (PyTorch batch_norm_backward_cpu_template), per channel with N = n * hw:
 *   mean_dy = sum(dy) / N,  proj = sum((x - mean) * dy) * invstd^2 / N,  k = gamma * invstd
 *   dx = (dy - (x - mean) * proj - mean_dy) * k
 *   dgamma = sum((x - mean) * dy) * invstd,  dbeta = sum(dy) */
AMP_HD static inline float amp_bn_bwd_dx(float x, float dy, float mean, float proj, float mean_dy,
                                         float k) {
    return (dy - amp_mul_rn(x - mean, proj) - mean_dy) * k;
}

#endif
