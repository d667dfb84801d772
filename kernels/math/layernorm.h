/* LayerNorm and RMSNorm over the last dim, per row and per element, shared by the CPU and CUDA
 * kernels so that both give the same bits (Apex FusedLayerNorm's numerics: statistics in f32
 * whatever the storage, mean and rstd saved in f32).
 *
 * A row's sums run as a warp runs them (kernels/math/lanes.h). Two passes: the mean, then
 * the variance around it (no cancellation of E[x^2] - E[x]^2); RMSNorm's one pass is the mean
 * square. rstd = 1 / sqrt(var + eps), IEEE square root and division (correctly rounded on both).
 *
 * The column sums of the backward (dgamma, dbeta) add rows in chunks of AMP_LN_COL_CHUNK in row
 * order in f64, then the chunks' sums in chunk order, rounded to f32 once: the same order on both
 * backends, fixed by the shape. */
#ifndef AMP_KERNELS_MATH_LAYERNORM_H
#define AMP_KERNELS_MATH_LAYERNORM_H

#include <math.h>

#include "core/hd.h"
#include "kernels/math/binary.h"
#include "kernels/math/lanes.h"

#define AMP_LN_LANES AMP_LANES
#define AMP_LN_COL_CHUNK 32

AMP_HD static inline float amp_ln_rstd(float var, float eps) { return 1.0f / sqrtf(var + eps); }

/* x normalised: (x - mean) rstd (mean 0 for RMSNorm). */
AMP_HD static inline float amp_ln_xhat(float x, float mean, float rstd) {
    return amp_mul_rn(x - mean, rstd);
}

/* y = xhat gamma + beta (gamma 1 and beta 0 where absent). */
AMP_HD static inline float amp_ln_affine(float xhat, float gamma, float beta) {
    return amp_mul_rn(xhat, gamma) + beta;
}

/* dx = rstd (g - m1 - xhat m2), g = dy gamma, m1 = mean of g over the row (0 for RMSNorm),
 * m2 = mean of g xhat (PyTorch's and Apex's formula). */
AMP_HD static inline float amp_ln_dx(float g, float xhat, float m1, float m2, float rstd) {
    return amp_mul_rn(rstd, (g - m1) - amp_mul_rn(xhat, m2));
}

#endif
