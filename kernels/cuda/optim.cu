/* Fused SGD and Adam/AdamW on the device: the CUDA side of the table's sgd_multi and adam_multi
 * (LAMB is in optim_lamb.cu). One pass over a list of tensors reads
 * each gradient once, multiplies it by the grad scale as it is loaded (the unscale, fused:
 * Apex's fused optimizers' `scale`), updates the f32 parameter (or master) and the f32 state in
 * place, and writes the f16/bf16 copy of the parameter in the same pass (O2), round to nearest
 * even; without an f32 parameter (O3) the half parameter itself is widened, updated in f32 and
 * rounded back. Per element the math is kernels/math/sgd.h and adam.h, the very functions the
 * CPU backend loops over: both backends give the same bits (every multiply-add there is an
 * explicit fmaf; the only product written here, the grad scale's, is __fmul_rn, so nvcc
 * contracts nothing the CPU build does not). Without device step counts the coefficients are
 * made on the host once per call (amp_*_coefs_make, in double as torch does) and passed by value.
 *
 * Launches come from core/multi_tensor.h's planner through amp_mt_apply (multi_tensor_apply.cuh):
 * one kernel per launch of the plan, a block per chunk of 65536 elements. Lists, in order:
 *   SGD:  grad, param (or the half parameter, O3), [momentum buffer], [half copy]
 *   Adam: grad, param (or the half parameter, O3), exp_avg, exp_avg_sq, [half copy]
 * The gradient's dtype and where the parameter lives (amp_mt_store) are template arguments, so
 * every load and store is typed; whether SGD has momentum is a uniform branch.
 * The step scalars (amp_step_scalars) are read on the device: with found_inf set and non-zero
 * when the kernel runs, every block returns before its first store (the step is skipped and
 * leaves every bit as it was); a device grad scale replaces desc.grad_scale. With per-tensor
 * step counts on the device (amp_opt_tensors.steps), each tensor's coefficients are made on the
 * device from its own t = steps[i] + 1 (SGD: first_step = t == 1; Adam: amp_adam_coefs_make in
 * double there, so a GPU's pow, within 2 ulp of the host's, may move a bias correction's last
 * f32 bit about once in 2^28 tensors-steps; cudacpu uses the host's pow) and the counts advance
 * unless the step is skipped (multi_tensor_apply.cuh, amp_mt_steps). No entry waits for the
 * device or copies anything to or from the host: all work is queued on dev->stream.
 *
 * Entries validate their arguments first, as the CPU backend's entries do (same order and
 * statuses; messages name the entry), and an empty list (n == 0 or all numel 0) returns AMP_OK
 * having launched nothing. They take the half list from t (t->half, t->half_dtype) and refuse
 * desc.half_copy, a per-tensor pointer. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/multi_tensor_apply.cuh"
#include "kernels/math/adam.h"
#include "kernels/math/load_store.h"
#include "kernels/math/sgd.h"

/* ---- SGD ---- */

typedef struct sgd_args {
    amp_sgd_coefs c;
    amp_mt_step step;
    amp_mt_steps steps;
    const amp_sgd_coefs *coefs; /* per tensor, with device step counts (else c) */
    int copy_list;              /* the half copy's list (2 or 3), when the storage kind has one */
} sgd_args;

/* Bytes per element (f32 master, f16 gradient and f16 copy, O2): read g 2 + p 4 [+ buf 4], write
 * p 4 [+ buf 4] + half 2 = 12 without momentum, 20 with it (f32 gradients, no copy: 12 and 20
 * too). At 85% of an H100's 3.35 TB/s (2.85 TB/s): 4.2 ms (no momentum) or 7.0 ms (momentum)
 * per 10^9 parameters. The first step does not read the buffer (it is set to the gradient). */
template <amp_dtype G, int S>
struct sgd_op : sgd_args {
    __device__ void operator()(const amp_mt_launch &l, int b) const {
        typedef amp_mt_store_traits<S> st;
        if (amp_mt_skipped(step.found_inf)) return;
        amp_mt_steps_advance(steps, l, b);
        const float gs = amp_mt_grad_scale(step);
        const amp_sgd_coefs cf = coefs ? coefs[l.tensor_index[amp_mt_block_slot(&l, b)]] : c;
        const int n = (int)amp_mt_block_numel(&l, b);
        const void *g = amp_mt_block_ptr(&l, b, 0);
        void *p = amp_mt_block_ptr(&l, b, 1);
        float *buf = cf.momentum != 0.0f ? (float *)amp_mt_block_ptr(&l, b, 2) : NULL;
        void *copy = st::has_copy ? amp_mt_block_ptr(&l, b, copy_list) : NULL;
        const bool read_buf = buf && !cf.first_step;
        for (int base = 0; base < n; base += AMP_MT_ELEMS_PER_ITER) {
            float gr[AMP_MT_ILP] = {}, pr[AMP_MT_ILP] = {}, br[AMP_MT_ILP] = {};
            AMP_MT_UNROLL
            for (int k = 0; k < AMP_MT_ILP; k++) {
                int i = amp_mt_elem(base, k);
                if (i >= n) continue;
                gr[k] = amp_mt_load_grad<G>(g, i, gs);
                pr[k] = amp_load_f32(p, st::param, i);
                if (read_buf) br[k] = buf[i];
            }
            AMP_MT_UNROLL
            for (int k = 0; k < AMP_MT_ILP; k++) {
                int i = amp_mt_elem(base, k);
                if (i >= n) continue;
                amp_sgd_update_elem(&cf, &pr[k], gr[k], &br[k]);
                amp_store_f32(p, st::param, i, pr[k]);
                if (buf) buf[i] = br[k];
                if (st::has_copy) amp_store_f32(copy, st::copy, i, pr[k]);
            }
        }
    }
};

/* ---- Adam / AdamW ---- */

typedef struct adam_args {
    amp_adam_coefs c;
    amp_mt_step step;
    amp_mt_steps steps;
    const amp_adam_coefs *coefs; /* per tensor, with device step counts (else c) */
} adam_args;

/* Bytes per element (f32 master, f16 gradient and f16 copy, O2): read g 2 + p 4 + m 4 + v 4,
 * write p 4 + m 4 + v 4 + half 2 = 28; f32 gradient without a copy: 28 as well; O3 (f16
 * parameter in place, f16 gradient): 2 + 2 + 8 + 2 + 8 = 22. At 85% of an H100's 3.35 TB/s:
 * 9.8 ms (28 B) or 7.7 ms (22 B) per 10^9 parameters. */
template <amp_dtype G, int S>
struct adam_op : adam_args {
    __device__ void operator()(const amp_mt_launch &l, int b) const {
        typedef amp_mt_store_traits<S> st;
        if (amp_mt_skipped(step.found_inf)) return;
        amp_mt_steps_advance(steps, l, b);
        const float gs = amp_mt_grad_scale(step);
        const amp_adam_coefs cf = coefs ? coefs[l.tensor_index[amp_mt_block_slot(&l, b)]] : c;
        const int n = (int)amp_mt_block_numel(&l, b);
        const void *g = amp_mt_block_ptr(&l, b, 0);
        void *p = amp_mt_block_ptr(&l, b, 1);
        float *m = (float *)amp_mt_block_ptr(&l, b, 2);
        float *v = (float *)amp_mt_block_ptr(&l, b, 3);
        void *copy = st::has_copy ? amp_mt_block_ptr(&l, b, 4) : NULL;
        for (int base = 0; base < n; base += AMP_MT_ELEMS_PER_ITER) {
            float gr[AMP_MT_ILP] = {}, pr[AMP_MT_ILP] = {}, mr[AMP_MT_ILP] = {},
                  vr[AMP_MT_ILP] = {};
            AMP_MT_UNROLL
            for (int k = 0; k < AMP_MT_ILP; k++) {
                int i = amp_mt_elem(base, k);
                if (i >= n) continue;
                gr[k] = amp_mt_load_grad<G>(g, i, gs);
                pr[k] = amp_load_f32(p, st::param, i);
                mr[k] = m[i];
                vr[k] = v[i];
            }
            AMP_MT_UNROLL
            for (int k = 0; k < AMP_MT_ILP; k++) {
                int i = amp_mt_elem(base, k);
                if (i >= n) continue;
                amp_adam_update_elem(&cf, &pr[k], gr[k], &mr[k], &vr[k]);
                amp_store_f32(p, st::param, i, pr[k]);
                m[i] = mr[k];
                v[i] = vr[k];
                if (st::has_copy) amp_store_f32(copy, st::copy, i, pr[k]);
            }
        }
    }
};

/* ---- host side ---- */

/* Runs Op<G, S> over the planned list, G and S from the list's dtypes. */
template <template <amp_dtype, int> class Op, class Args>
static amp_status run_typed(amp_device_ctx *dev, const char *fn, const amp_opt_tensors *t,
                            const Args &args, int depth, const amp_dtype *dtypes,
                            const amp_mt_tensor *tensors) {
    return amp_mt_with_dtype(t->grad_dtype, [&](auto g) {
        return amp_mt_with_store(amp_mt_store_of(t), [&](auto s) {
            Op<decltype(g)::value, decltype(s)::value> op;
            static_cast<Args &>(op) = args;
            return amp_mt_apply(fn, depth, dtypes, tensors, t->n, op, dev->stream);
        });
    });
}

/* The lists shared by both optimizers: grad, then the parameter (f32, or the half one in O3). */
static void lists_head(const amp_opt_tensors *t, amp_mt_list *lists) {
    lists[0] = amp_mt_list{t->grad_dtype, "grad", t->grad, NULL};
    lists[1] = t->param ? amp_mt_list{AMP_F32, "param", NULL, t->param}
                        : amp_mt_list{t->half_dtype, "half", t->half, NULL};
}

/* Coefficients from a device step count (amp_mt_steps_kernel): SGD's first step is t == 1. */
struct sgd_make {
    typedef amp_sgd_coefs coefs_t;
    amp_sgd_coefs base;
    __device__ amp_sgd_coefs operator()(int64_t t) const {
        amp_sgd_coefs c = base;
        c.first_step = t == 1;
        return c;
    }
};

struct adam_make {
    typedef amp_adam_coefs coefs_t;
    float lr, beta1, beta2, eps, weight_decay;
    int decoupled;
    __device__ amp_adam_coefs operator()(int64_t t) const {
        return amp_adam_coefs_make(lr, beta1, beta2, eps, weight_decay, decoupled, t);
    }
};

/* A checked list's launches: its lists, the op's arguments and, with device step counts, the
 * per-tensor coefficients made first (amp_mt_steps_prepare). */
static amp_status sgd_launch(amp_device_ctx *dev, const char *fn, const amp_sgd_desc *d,
                             const amp_opt_tensors *t, const amp_step_scalars *scalars) {
    bool momentum = d->momentum != 0.0f;
    amp_mt_list lists[AMP_MT_MAX_DEPTH];
    lists_head(t, lists);
    int depth = 2;
    if (momentum) lists[depth++] = amp_mt_list{AMP_F32, "state1", NULL, t->state1};
    int copy_list = depth;
    if (t->param && t->half) lists[depth++] = amp_mt_list{t->half_dtype, "half", t->half, NULL};
    amp_mt_tensor *tensors = NULL;
    int64_t chunks = 0;
    AMP_TRY(amp_mt_tensors_make(fn, t->n, t->numel, lists, depth, &tensors, &chunks));
    if (!tensors) return AMP_OK;
    amp_dtype dtypes[AMP_MT_MAX_DEPTH];
    for (int i = 0; i < depth; i++) dtypes[i] = lists[i].dtype;
    sgd_args args = {};
    args.c = amp_sgd_coefs_make(d->lr, d->momentum, d->dampening, d->weight_decay, d->nesterov,
                                d->first_step);
    args.step = amp_mt_step_make(d->grad_scale, scalars);
    args.copy_list = copy_list;
    void *ws = NULL;
    amp_status s = AMP_OK;
    if (t->steps)
        s = amp_mt_steps_prepare(t->n, t->steps, sgd_make{args.c}, dev, &ws, &args.steps,
                                 &args.coefs);
    if (s == AMP_OK) s = run_typed<sgd_op>(dev, fn, t, args, depth, dtypes, tensors);
    amp_cuda_free(dev, ws); /* reused only by work queued after these kernels (one stream) */
    free(tensors);
    return s;
}

static amp_status adam_launch(amp_device_ctx *dev, const char *fn, const amp_adam_desc *d,
                              const amp_opt_tensors *t, const amp_step_scalars *scalars) {
    amp_mt_list lists[AMP_MT_MAX_DEPTH];
    lists_head(t, lists);
    lists[2] = amp_mt_list{AMP_F32, "state1", NULL, t->state1};
    lists[3] = amp_mt_list{AMP_F32, "state2", NULL, t->state2};
    int depth = 4;
    if (t->param && t->half) lists[depth++] = amp_mt_list{t->half_dtype, "half", t->half, NULL};
    amp_mt_tensor *tensors = NULL;
    int64_t chunks = 0;
    AMP_TRY(amp_mt_tensors_make(fn, t->n, t->numel, lists, depth, &tensors, &chunks));
    if (!tensors) return AMP_OK;
    amp_dtype dtypes[AMP_MT_MAX_DEPTH];
    for (int i = 0; i < depth; i++) dtypes[i] = lists[i].dtype;
    adam_args args = {};
    if (!t->steps)
        args.c = amp_adam_coefs_make(d->lr, d->beta1, d->beta2, d->eps, d->weight_decay,
                                     d->decoupled, d->step);
    args.step = amp_mt_step_make(d->grad_scale, scalars);
    void *ws = NULL;
    amp_status s = AMP_OK;
    if (t->steps) {
        adam_make mk = {d->lr, d->beta1, d->beta2, d->eps, d->weight_decay, d->decoupled};
        s = amp_mt_steps_prepare(t->n, t->steps, mk, dev, &ws, &args.steps, &args.coefs);
    }
    if (s == AMP_OK) s = run_typed<adam_op>(dev, fn, t, args, depth, dtypes, tensors);
    amp_cuda_free(dev, ws);
    free(tensors);
    return s;
}

extern "C" amp_status amp_cuda_sgd_multi(amp_device_ctx *dev, const amp_sgd_desc *d,
                                         const amp_opt_tensors *t,
                                         const amp_step_scalars *scalars) {
    const char *fn = "amp_cuda_sgd_multi";
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    bool momentum = d->momentum != 0.0f;
    AMP_TRY(amp_mt_check_opt(fn, t, d->half_copy, d->grad_scale, momentum, false));
    return sgd_launch(dev, fn, d, t, scalars);
}

extern "C" amp_status amp_cuda_adam_multi(amp_device_ctx *dev, const amp_adam_desc *d,
                                          const amp_opt_tensors *t,
                                          const amp_step_scalars *scalars) {
    const char *fn = "amp_cuda_adam_multi";
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    /* desc.step is not used with device step counts */
    if (d->step < 1 && !(t && t->steps))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: step = %lld, want >= 1", fn,
                        (long long)d->step);
    AMP_TRY(amp_mt_check_opt(fn, t, d->half_copy, d->grad_scale, true, true));
    return adam_launch(dev, fn, d, t, scalars);
}
