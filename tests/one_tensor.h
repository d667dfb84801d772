/* One tensor's SGD and Adam update, sum of squares and inf/NaN check, for the tests that hold a
 * list's call to its tensors' calls one by one (test_optim_multi.c), step a few tensors with a
 * reference optimizer (test_scaler.c, test_optim_masters.c, test_optim.c) or check the passes on
 * a single buffer (test_unscale.c). The library does not ship these: nothing in it steps or
 * checks one tensor (optimizers and the loss scaler hand the backend lists), so they are the CPU
 * backend's multi-tensor entries over a one-tensor list, with the per-tensor signature the tests
 * were written against (a descriptor's half_copy is the list's half copy). An update's elements
 * are independent, so a tensor updated alone gets the bits it gets in any list; sum_squares adds
 * in the order of its one-tensor plan (pieces, then chunks). Errors are the entries' own, naming
 * them (amp_cpu_sgd_multi, ...). */
#ifndef AMP_TESTS_ONE_TENSOR_H
#define AMP_TESTS_ONE_TENSOR_H

#include <string.h>

#include "kernels/cpu/cpu_backend.h"

/* The list of one tensor over the caller's pointers (borrowed, not copied). */
typedef struct one_tensor {
    int64_t numel;
    void *grad, *half;
    float *param, *state1, *state2;
    amp_opt_tensors t;
} one_tensor;

static inline void one_tensor_make(one_tensor *o, int64_t n, float *param, const void *grad,
                                   amp_dtype g_dt, void *half, amp_dtype half_dt, float *s1,
                                   float *s2) {
    o->numel = n;
    o->grad = (void *)grad;
    o->half = half;
    o->param = param;
    o->state1 = s1;
    o->state2 = s2;
    memset(&o->t, 0, sizeof o->t);
    o->t.n = 1;
    o->t.numel = &o->numel;
    o->t.grad = &o->grad;
    o->t.grad_dtype = g_dt;
    o->t.param = param || !half ? &o->param : NULL; /* NULL only at O3 (half holds it) */
    o->t.half = half ? &o->half : NULL;
    o->t.half_dtype = half_dt;
    o->t.state1 = &o->state1;
    o->t.state2 = &o->state2;
}

/* SGD on n elements: param (NULL: d->half_copy holds the parameter, O3), grad of g_dt, the
 * momentum buffer (read only with d->momentum != 0), d->half_copy written when set (O2). */
static inline amp_status one_tensor_sgd(const amp_sgd_desc *d, int64_t n, float *param,
                                        const void *grad, amp_dtype g_dt, float *momentum_buf) {
    amp_sgd_desc dl = *d;
    dl.half_copy = NULL;
    one_tensor o;
    one_tensor_make(&o, n, param, grad, g_dt, d->half_copy, d->half_dtype, momentum_buf, NULL);
    return amp_cpu_sgd_multi(amp_cpu_device(), &dl, &o.t, NULL);
}

/* Adam/AdamW on n elements at d->step, as one_tensor_sgd. */
static inline amp_status one_tensor_adam(const amp_adam_desc *d, int64_t n, float *param,
                                         const void *grad, amp_dtype g_dt, float *exp_avg,
                                         float *exp_avg_sq) {
    amp_adam_desc dl = *d;
    dl.half_copy = NULL;
    one_tensor o;
    one_tensor_make(&o, n, param, grad, g_dt, d->half_copy, d->half_dtype, exp_avg, exp_avg_sq);
    return amp_cpu_adam_multi(amp_cpu_device(), &dl, &o.t, NULL);
}

/* *out = the sum of x[i]^2 over n elements of dt (f32, f16, bf16), squares in f64, one rounding. */
static inline amp_status one_tensor_sum_squares(amp_dtype dt, int64_t n, const void *x,
                                                float *out) {
    const void *xs[1] = {x};
    return amp_cpu_sum_squares_multi(amp_cpu_device(), dt, 1, &n, xs, out, NULL);
}

/* *found_inf = 1 when one of the n elements of x is inf or NaN; never cleared. */
static inline amp_status one_tensor_nonfinite(amp_dtype dt, int64_t n, const void *x,
                                              float *found_inf) {
    const void *xs[1] = {x};
    return amp_cpu_nonfinite_multi(amp_cpu_device(), dt, 1, &n, xs, found_inf);
}

#endif
