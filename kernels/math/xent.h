/* Softmax cross-entropy per row and per element (PyTorch's cross_entropy with label smoothing),
 * shared by the CPU and CUDA kernels so both give the same bits:
 *  - a row's max m and s = sum e^(x - m) run as one warp runs them (kernels/math/lanes.h, the
 *    softmax's order), as does the sum of its logits when label smoothing needs it;
 *  - logsumexp lse = m + ln s; the row's loss is (1 - eps)(lse - x_label) + eps (lse - mean(x)),
 *    the second term being the mean over the classes of -log p (PyTorch's smoothing);
 *  - the gradient is (e^(x - lse) - target) * scale with target (1 - eps) onehot + eps / classes;
 *  - the loss total sums the rows' losses in double over AMP_XENT_TOTAL_LANES lanes (lane t
 *    takes rows t, t + 256, ... in order) and adds the lanes pairwise (lane t += lane t + half,
 *    half = 128, 64, ..., 1): one CUDA block's shared-memory tree, which the CPU repeats.
 * A NaN logit makes its row's loss NaN (as PyTorch); a row of -inf logits too (0 / 0). */
#ifndef AMP_KERNELS_MATH_XENT_H
#define AMP_KERNELS_MATH_XENT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/hd.h"
#include "kernels/math/binary.h"
#include "kernels/math/transcendental.h"

#define AMP_XENT_TOTAL_LANES 256

/* The row's logsumexp from its max m and sum s of e^(x - m). */
AMP_HD static inline float amp_xent_lse(float m, float s) {
    return m + amp_logf(s);
}

/* The row's loss from m, s, the label's logit xl and the sum of the row's logits sx (read only
 * when eps > 0). (m - xl) + ln s keeps the label's term exact when it holds the max. */
AMP_HD static inline float amp_xent_row_loss(float m, float s, float xl, float sx,
                                             int64_t classes, float eps) {
    float ln_s = amp_logf(s);
    float nll = (m - xl) + ln_s;
    if (eps == 0.0f) return nll;
    float smooth = (m - sx / (float)classes) + ln_s;
    return amp_mul_rn(1.0f - eps, nll) + amp_mul_rn(eps, smooth);
}

/* dlogit of one element: eps_c = eps / classes, scale = dloss / count (or dloss). */
AMP_HD static inline float amp_xent_grad(float x, float lse, bool is_label, float eps,
                                         float eps_c, float scale) {
    float target = is_label ? (1.0f - eps) + eps_c : eps_c;
    return amp_mul_rn(amp_expf(x - lse) - target, scale);
}

/* The gradient's scale: dloss over the counted rows for the mean, dloss for the sum. */
AMP_HD static inline float amp_xent_scale(float dloss, float count, bool sum) {
    return sum ? dloss : dloss / count;
}

/* The loss from the lanes' total and the count: the sum, or the mean (NaN for no rows). */
AMP_HD static inline float amp_xent_loss(double total, int64_t count, bool sum) {
    return sum ? (float)total : (float)(total / (double)count);
}

#endif
