/* The FLOPs of one call of a backend entry, as amp/profile.h counts them: the helpers the
 * expressions of core/backend_kernels.def use. */
#ifndef AMP_CORE_BACKEND_FLOPS_H
#define AMP_CORE_BACKEND_FLOPS_H

#include "core/backend.h"

static inline double amp_flops_sum_numel(int64_t n, const int64_t *numel) {
    double total = 0.0;
    for (int64_t i = 0; numel && i < n; i++) total += (double)numel[i];
    return total;
}

/* 2 m n k, plus a bias add, a GELU epilogue (one per element, as the unary entry counts it)
 * and a bias gradient's sum where the descriptor has them, per product of a batch. */
static inline double amp_flops_gemm(const amp_gemm_desc *d) {
    double f = 2.0 * (double)d->m * (double)d->n * (double)d->k;
    if (d->bias) f += (double)d->m * (double)d->n;
    if (amp_gemm_epilogue_is_gelu(d->epilogue)) f += (double)d->m * (double)d->n;
    if (d->bias_grad) f += (double)d->m * (double)d->k;
    return d->batch > 1 ? f * (double)d->batch : f;
}

static inline double amp_flops_conv_macs2(const amp_conv2d_desc *d) {
    return 2.0 * (double)d->n * (double)d->c_out * (double)d->h_out * (double)d->w_out *
           (double)d->c_in * (double)d->kh * (double)d->kw;
}

static inline double amp_flops_conv_out(const amp_conv2d_desc *d) {
    return (double)d->n * (double)d->c_out * (double)d->h_out * (double)d->w_out;
}

static inline double amp_flops_bn_elems(const amp_bn_desc *d) {
    return (double)d->n * (double)d->c * (double)d->hw;
}

/* The elements of a shape (an output's: one FLOP each). */
static inline double amp_flops_shape(int ndim, const int64_t *shape) {
    double n = 1.0;
    for (int k = 0; k < ndim; k++) n *= (double)shape[k];
    return n;
}

static inline double amp_flops_pool_out(const amp_pool_desc *d) {
    return (double)d->n * (double)d->c * (double)d->h_out * (double)d->w_out;
}

#endif
