/* Synchronised batch norm (torch.nn.SyncBatchNorm) per element and per channel, shared by the CPU
 * backend (kernels/cpu/sync_batchnorm.c) and the CUDA one (kernels/cuda/sync_batchnorm.cu).
 *
 * The statistics come from sums that every rank computes over its own batch and the ranks
 * all-reduce: first sum(x) for a provisional mean, then the sums centred on it, sum(x - c) and
 * sum((x - c)^2), from which mean = c + s1 / N and var = s2 / N - (s1 / N)^2 (centring keeps the
 * subtraction free of the cancellation that sum(x^2) - N mean^2 suffers; s1 / N is what the f32
 * provisional mean missed, so the final mean is exact to double rounding). PyTorch gathers each
 * rank's Welford mean and variance instead (batch_norm_gather_stats_with_counts); the results
 * agree to rounding. The backward's dx is batchnorm's (amp_bn_bwd_dx) with the means of dy and
 * dy * (x - mean) taken over the global count, as PyTorch's batch_norm_backward_elemt. */
#ifndef AMP_KERNELS_MATH_BATCHNORM_SYNC_H
#define AMP_KERNELS_MATH_BATCHNORM_SYNC_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/math/batchnorm.h"

/* x - center in double, the term of the centred first sum (exact unless the exponents of x and
 * center are far apart). */
AMP_HD static inline double amp_bn_sync_dev(float x, double center) { return (double)x - center; }

/* The per-channel statistics from the all-reduced sums over `count` values (see the top). With
 * has_s2 unset only *mean is written. The variance is clamped at 0 (rounding of the two terms).
 * invstd is taken from the f32 variance, as bn_fwd_eval takes it, so the forward's normalisation
 * and the saved invstd agree exactly. Running stats: momentum with the unbiased variance. */
AMP_HD static inline void amp_bn_sync_stats(double center, float s1, float s2, bool has_s2,
                                             int64_t count, float eps, float momentum,
                                             float *mean, float *var, float *invstd,
                                             float *running_mean, float *running_var) {
    double n = (double)count, d = (double)s1 / n, m = center + d;
    *mean = (float)m;
    if (!has_s2) return;
    double v = (double)s2 / n - amp_bn_dmul_rn(d, d);
    if (v < 0.0) v = 0.0;
    float vf = (float)v;
    if (var) *var = vf;
    if (invstd) *invstd = (float)amp_bn_invstd((double)vf, eps);
    if (running_mean) *running_mean = amp_bn_running_update(*running_mean, m, momentum);
    if (running_var)
        *running_var = amp_bn_running_update(*running_var, v * n / (n - 1.0), momentum);
}

/* The coefficients of amp_bn_bwd_dx from the all-reduced backward sums: proj = mean_dy_xmu *
 * invstd^2, mean_dy = sum_dy / count, k = gamma * invstd (batchnorm's bwd, in double). */
AMP_HD static inline void amp_bn_sync_bwd_coef(int64_t count, float sum_dy, float sum_dy_xmu,
                                               float gamma, float invstd, float *proj,
                                               float *mean_dy, float *k) {
    double n = (double)count, is = (double)invstd;
    *proj = (float)(amp_bn_dmul_rn(amp_bn_dmul_rn((double)sum_dy_xmu, is), is) / n);
    *mean_dy = (float)((double)sum_dy / n);
    *k = (float)amp_bn_dmul_rn((double)gamma, is);
}

#endif
