/* Softmax cross-entropy per element, given the row statistics (PyTorch's log_softmax +
 * nll_loss, aten/src/ATen/native/cpu/SoftMaxKernel.cpp): log-softmax is
 * (x - max) - log(sum(exp(x - max))), stable for any logits. */
#ifndef AMP_KERNELS_MATH_XENT_H
#define AMP_KERNELS_MATH_XENT_H

#include <math.h>

#include "core/hd.h"

/* The row's running maximum; a NaN logit need not win here, since exp(NaN - max) turns the
 * row's sum, and so every log-softmax of the row, into NaN, as in PyTorch. */
AMP_HD static inline float amp_xent_max(float best, float x) {
    return x > best ? x : best;
}

/* exp(x - max): one term of the row's sum. */
AMP_HD static inline float amp_xent_exp(float x, float max) {
    return expf(x - max);
}

AMP_HD static inline float amp_xent_logsoftmax(float x, float max, float log_sum) {
    return (x - max) - log_sum;
}

/* dlogits = (softmax - onehot) * scale, with scale = dloss / rows for the mean reduction. */
AMP_HD static inline float amp_xent_grad(float logsoftmax, int is_label, float scale) {
    return (expf(logsoftmax) - (is_label ? 1.0f : 0.0f)) * scale;
}

#endif
