/* Autocast in the op dispatcher: each op declares its cast category beside its definition and
 * calls amp_autocast on its inputs before validating them. nn/ does not know the amp layer: it
 * obeys ctx->autocast, which amp_initialize switches on (O1). Categories follow Apex O1 / torch
 * autocast lists:
 *   HALF    GEMM, linear, conv: float inputs cast to the half type (tensor-core math);
 *   FP32    losses and reductions: run in f32 (the kernels widen half inputs on load and accumulate
 *           in f32 or double; inputs of different dtypes are cast to f32); results are f32;
 *   WIDEN   exp, log (torch.amp's fp32 list, ops whose kernels write their input's dtype): float
 *           inputs cast to f32 under autocast, so they run and return in f32; without autocast
 *           the input's dtype;
 *   PROMOTE add, sub, mul, div: the widest float input type, as PyTorch's type promotion (with
 *           or without autocast);
 *   PASS    relu, pooling, dropout, reshape, batch norm: the input's dtype (batch norm's statistics
 *           and parameters are f32 whatever the input dtype). */
#ifndef AMP_NN_AUTOCAST_H
#define AMP_NN_AUTOCAST_H

#include "nn/autograd.h"

typedef enum amp_cast_category {
    AMP_CAT_HALF,
    AMP_CAT_FP32,
    AMP_CAT_WIDEN,
    AMP_CAT_PROMOTE,
    AMP_CAT_PASS
} amp_cast_category;

/* Replaces in[0..n) (NULL entries and i32 tensors untouched) with their casts for category. */
amp_status amp_autocast(amp_cast_category cat, amp_tensor **in, int n);

/* When t is the output of a cast of an f32 tensor that needs a gradient (under autocast: the
 * per-step half copy of an f32 weight), that f32 tensor; else NULL. A GEMM producing t's gradient
 * can then write it into the f32 tensor's gradient directly (amp_gemm_grad, nn/gemm.c). */
amp_tensor *amp_cast_f32_source(const amp_tensor *t);

/* Whether autocast's cache may hold a cast of x for the ops after this one: a leaf that requires
 * grad and is no step tensor (a parameter, a caller's tensor). Any other cast is its op's alone:
 * also a recomputation's leaf over an intermediate (nn/recompute.c), whose casts must be as many
 * as without recomputation for the gradients to add up the same. */
static inline bool amp_cast_cacheable(const amp_tensor *x) {
    return x->requires_grad && !x->node && !(x->flags & AMP_TENSOR_STEP);
}

/* Casts a float tensor to f32 when it is not (bias and batch-norm parameters of a half model). */
amp_status amp_cast_to_f32(amp_tensor **t);

#endif
