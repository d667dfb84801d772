/* Fused LAMB on the device: the CUDA side of the table's lamb_multi, Apex's FusedLAMB (its math
 * and conventions are kernels/math/lamb.h's, shared with the CPU). One call queues, on
 * dev->stream and without waiting for the device:
 *   1. with max_grad_norm > 0, the global gradient norm: a sum of squares over every gradient as
 *      stage 1 loads it (times the grad scale, in f32), one double partial per chunk, the
 *      partials added in plan order by one thread, G = (float)sqrt(total); the clip divisor
 *      amp_lamb_clip_divisor(G, max_grad_norm) stays on the device for stage 1;
 *   2. stage 1 over every element: the moments (amp_lamb_stage1_elem) stored in place, and, when
 *      the trust ratio applies (weight_decay != 0 or adapt_all), per-chunk double partials of
 *      sum(x^2) (x before the update) and sum(u^2);
 *   3. one small kernel, a thread per tensor: the tensor's chunk partials added in chunk order,
 *      the norms (float)sqrt(sum) and the tensor's step size (amp_lamb_step_size);
 *   4. stage 2 over every element: u recomputed from the stored moments and the unchanged
 *      parameter, x -= step_size * u (amp_lamb_stage2_elem), the half copy written.
 * Without the trust ratio, steps 2's partials and 3 are skipped and the step size is lr.
 *
 * u is never stored (Apex writes it over the gradient): stage 1 computes it with lamb_direction
 * from the moments it has just stored, and stage 2 with the same function from the same stored
 * values and the same parameter, so both see the same bits. lamb_direction is the last three
 * lines of amp_lamb_stage1_elem, operation for operation; the cudacpu test compares the bits of
 * the whole update with amp_lamb_stage1_elem's own u, so any drift between the two is caught.
 * Sums are in double (squares of f32 values are exact there): each chunk's threads in element
 * order, then the block's fixed butterfly (multi_tensor_apply.cuh), then chunk partials in plan
 * order; the bits depend on the data and the list's shapes only, never on timing. Norms are
 * rounded to f32 once, as tests/unit/test_lamb_math.c hands them over.
 *
 * Lists: stage 1 takes grad, param (or the half parameter, O3), exp_avg, exp_avg_sq; stage 2
 * takes param, exp_avg, exp_avg_sq and the half copy (O2). The two plans differ (depths differ):
 * stage 1's partials are indexed by its global block number, and a table written by the first
 * chunk of each tensor ((first block, chunk count) per tensor, zeroed first so empty tensors
 * read as none) lets step 3 find them; stage 2 reads step sizes by tensor_index. Workspace
 * (partials, table, step sizes, divisor) is one block from amp_cuda_alloc, returned right after
 * the launches: the context's one stream orders its reuse after them. A skipped step (found_inf
 * set when the kernels run) writes nothing anywhere: every block of every kernel reads the flag
 * first. With device step counts (amp_opt_tensors.steps) each tensor's coefficients (its bias
 * corrections) are made on the device from its t = steps[i] + 1 (multi_tensor_apply.cuh,
 * amp_mt_steps), and stage 2 advances the counts. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/multi_tensor_apply.cuh"
#include "kernels/math/lamb.h"
#include "kernels/math/load_store.h"

/* Threads per block of the per-tensor norm kernel (one thread per tensor). */
#define NORM_BLOCK 128

/* u from the stored moments: amp_lamb_stage1_elem's direction, the same operations in the same
 * order (a division by each bias correction, IEEE sqrtf, one fmaf for the decoupled decay), so
 * that stage 1 (for the norm) and stage 2 (for the update) get identical bits. */
static __device__ __forceinline__ float lamb_direction(const amp_lamb_coefs &c, float param,
                                                       float m, float v) {
    float denom = sqrtf(v / c.bias_correction2) + c.eps;
    float r = (m / c.bias_correction1) / denom;
    return c.decoupled_decay != 0.0f ? fmaf(c.decoupled_decay, param, r) : r;
}

/* ---- stage 1 ---- */

typedef struct lamb1_args {
    amp_lamb_coefs c;
    const amp_lamb_coefs *coefs; /* per tensor, with device step counts (else c) */
    amp_mt_step step;
    const float *clip_divisor; /* NULL: 1 (no clipping) */
    double *part_x, *part_u;   /* per global block; NULL: no trust ratio, no sums */
    int64_t *table;            /* [2 * n]: first global block, chunk count, per tensor */
} lamb1_args;

/* Bytes per element (f32 master, f16 gradient): read g 2 + p 4 + m 4 + v 4, write m 4 + v 4 =
 * 22 (f32 gradient: 24; O3 f16 parameter: 20). With the norm pass (g 2) and stage 2 (read p 4 +
 * m 4 + v 4, write p 4 + half 2 = 18), a clipped O2 step moves 42 bytes per parameter: at 85%
 * of an H100's 3.35 TB/s, 7.7 ms for stage 1 and 14.7 ms for the whole step per 10^9
 * parameters. (Apex stores u and reads the parameters and u again for its norms: 8-16 more.) */
template <amp_dtype G, int S>
struct lamb1_op : lamb1_args {
    __device__ void operator()(const amp_mt_launch &l, int b) const {
        typedef amp_mt_store_traits<S> st;
        if (amp_mt_skipped(step.found_inf)) return;
        const float gs = amp_mt_grad_scale(step);
        const float div = clip_divisor ? *clip_divisor : 1.0f;
        const amp_lamb_coefs cf = coefs ? coefs[l.tensor_index[amp_mt_block_slot(&l, b)]] : c;
        const int n = (int)amp_mt_block_numel(&l, b);
        const void *g = amp_mt_block_ptr(&l, b, 0);
        const void *p = amp_mt_block_ptr(&l, b, 1);
        float *m = (float *)amp_mt_block_ptr(&l, b, 2);
        float *v = (float *)amp_mt_block_ptr(&l, b, 3);
        double sx = 0.0, su = 0.0;
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
                /* its u is lamb_direction's below; only the moments are taken from here */
                (void)amp_lamb_stage1_elem(&cf, div, pr[k], gr[k], &mr[k], &vr[k]);
                m[i] = mr[k];
                v[i] = vr[k];
                if (part_x) {
                    sx += amp_square_f64(pr[k]);
                    su += amp_square_f64(lamb_direction(cf, pr[k], mr[k], vr[k]));
                }
            }
        }
        if (!part_x) return; /* uniform: the whole grid takes the same branch */
        sx = amp_mt_block_sum_f64(sx);
        su = amp_mt_block_sum_f64(su);
        if (threadIdx.x == 0) {
            int64_t gb = l.first_block + b;
            part_x[gb] = sx;
            part_u[gb] = su;
            if (amp_mt_block_chunk(&l, b) == 0) {
                int slot = amp_mt_block_slot(&l, b);
                int64_t ti = l.tensor_index[slot];
                table[2 * ti] = gb;
                table[2 * ti + 1] = amp_mt_n_chunks(l.numel[slot], l.chunk_numel);
            }
        }
    }
};

/* ---- the norms and step sizes ---- */

/* Thread i: tensor i's chunk partials in chunk order, its norms rounded to f32 once, its step
 * size. Empty tensors (count 0 in the zeroed table) are left alone; stage 2 never reads them.
 * Bytes: 16 per chunk read, 4 per tensor written: nothing next to the passes over elements. */
static __global__ void lamb_norms_kernel(int64_t n, const int64_t *table, const double *part_x,
                                         const double *part_u, float lr, float weight_decay,
                                         int adapt_all, const float *found_inf, float *step_size) {
    if (amp_mt_skipped(found_inf)) return;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int64_t first = table[2 * i], count = table[2 * i + 1];
    if (count == 0) return;
    float xn = (float)sqrt(amp_mt_sum_in_order(part_x + first, count));
    float un = (float)sqrt(amp_mt_sum_in_order(part_u + first, count));
    step_size[i] = amp_lamb_step_size(lr, xn, un, weight_decay, adapt_all);
}

/* The global norm's second pass: the clip divisor from the plan-order total. */
struct clip_fin {
    float *divisor;
    float max_grad_norm;
    const float *found_inf;
    __device__ void operator()(double total) const {
        if (amp_mt_skipped(found_inf)) return;
        *divisor = amp_lamb_clip_divisor((float)sqrt(total), max_grad_norm);
    }
};

/* ---- stage 2 ---- */

typedef struct lamb2_args {
    amp_lamb_coefs c;
    const amp_lamb_coefs *coefs; /* per tensor, with device step counts (else c) */
    amp_mt_steps steps;
    float lr;
    const float *step_size; /* per tensor (caller's index); NULL: lr for every tensor */
    const float *found_inf;
} lamb2_args;

/* Bytes per element (f32 master, f16 copy): read p 4 + m 4 + v 4, write p 4 + half 2 = 18 (O3
 * f16 parameter: 2 + 8 + 2 = 12). At 85% of an H100's 3.35 TB/s: 6.3 ms per 10^9 parameters. */
template <int S>
struct lamb2_op : lamb2_args {
    __device__ void operator()(const amp_mt_launch &l, int b) const {
        typedef amp_mt_store_traits<S> st;
        if (amp_mt_skipped(found_inf)) return;
        amp_mt_steps_advance(steps, l, b);
        const int64_t ti = l.tensor_index[amp_mt_block_slot(&l, b)];
        const amp_lamb_coefs cf = coefs ? coefs[ti] : c;
        const float sz = step_size ? step_size[ti] : lr;
        const int n = (int)amp_mt_block_numel(&l, b);
        void *p = amp_mt_block_ptr(&l, b, 0);
        const float *m = (const float *)amp_mt_block_ptr(&l, b, 1);
        const float *v = (const float *)amp_mt_block_ptr(&l, b, 2);
        void *copy = st::has_copy ? amp_mt_block_ptr(&l, b, 3) : NULL;
        for (int base = 0; base < n; base += AMP_MT_ELEMS_PER_ITER) {
            float pr[AMP_MT_ILP] = {}, mr[AMP_MT_ILP] = {}, vr[AMP_MT_ILP] = {};
            AMP_MT_UNROLL
            for (int k = 0; k < AMP_MT_ILP; k++) {
                int i = amp_mt_elem(base, k);
                if (i >= n) continue;
                pr[k] = amp_load_f32(p, st::param, i);
                mr[k] = m[i];
                vr[k] = v[i];
            }
            AMP_MT_UNROLL
            for (int k = 0; k < AMP_MT_ILP; k++) {
                int i = amp_mt_elem(base, k);
                if (i >= n) continue;
                amp_lamb_stage2_elem(sz, &pr[k], lamb_direction(cf, pr[k], mr[k], vr[k]));
                amp_store_f32(p, st::param, i, pr[k]);
                if (st::has_copy) amp_store_f32(copy, st::copy, i, pr[k]);
            }
        }
    }
};

/* ---- host side ---- */

/* Coefficients from a device step count (amp_mt_steps_kernel). */
struct lamb_make {
    typedef amp_lamb_coefs coefs_t;
    float beta1, beta2, eps, weight_decay;
    int decoupled, bias_correction, grad_averaging;
    __device__ amp_lamb_coefs operator()(int64_t t) const {
        return amp_lamb_coefs_make(beta1, beta2, eps, weight_decay, decoupled, bias_correction,
                                   grad_averaging, t);
    }
};

/* The device workspace of one call, carved from one allocation (doubles first: alignment). */
typedef struct lamb_ws {
    void *block;
    double *grad_part, *part_x, *part_u;
    int64_t *table;
    float *step_size, *divisor;
} lamb_ws;

static amp_status lamb_ws_alloc(amp_device_ctx *dev, lamb_ws *w, int64_t n, int64_t chunks,
                                bool clip, bool adapt) {
    memset(w, 0, sizeof *w);
    size_t n_doubles = (clip ? (size_t)chunks : 0) + (adapt ? 2 * (size_t)chunks : 0);
    size_t n_table = adapt ? 2 * (size_t)n : 0;
    size_t n_floats = (adapt ? (size_t)n : 0) + (clip ? 1 : 0);
    size_t nbytes = 8 * n_doubles + 8 * n_table + 4 * n_floats;
    if (nbytes == 0) return AMP_OK;
    AMP_TRY(amp_cuda_alloc(dev, nbytes, &w->block));
    double *d = (double *)w->block;
    if (clip) {
        w->grad_part = d;
        d += chunks;
    }
    if (adapt) {
        w->part_x = d;
        w->part_u = d + chunks;
        d += 2 * chunks;
    }
    int64_t *t = (int64_t *)d;
    if (adapt) {
        w->table = t;
        t += 2 * n;
    }
    float *f = (float *)t;
    if (adapt) {
        w->step_size = f;
        f += n;
    }
    if (clip) w->divisor = f;
    return AMP_OK;
}

/* Stage 1's dispatch: the parameter's dtype only (its half copy is stage 2's). */
template <class F>
static amp_status with_param_store(const amp_opt_tensors *t, F &&f) {
    if (t->param) return f(std::integral_constant<int, AMP_MT_F32>());
    if (t->half_dtype == AMP_BF16) return f(std::integral_constant<int, AMP_MT_BF16>());
    return f(std::integral_constant<int, AMP_MT_F16>());
}

/* Step 1: the clip divisor into w->divisor. `tensors` are stage 1's, whose first list is the
 * gradients: planned at depth 1 they are the gradient list (the planner reads ptr[0] only), with
 * the same chunks in the same order. */
static amp_status lamb_clip(const char *fn, const amp_opt_tensors *t, float max_grad_norm,
                            const amp_mt_step &step, const amp_mt_tensor *tensors, int64_t chunks,
                            const lamb_ws *w, cudaStream_t stream) {
    AMP_TRY(amp_mt_with_dtype(t->grad_dtype, [&](auto g) {
        amp_mt_sumsq_op<decltype(g)::value> op;
        op.partials = w->grad_part;
        op.step = step;
        op.scaled = 1;
        return amp_mt_apply(fn, 1, &t->grad_dtype, tensors, t->n, op, stream);
    }));
    clip_fin fin = {w->divisor, max_grad_norm, step.found_inf};
    amp_mt_final_kernel<clip_fin><<<1, 1, 0, stream>>>(w->grad_part, chunks, fin);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

/* Steps 2 to 4 once the workspace is there. */
static amp_status lamb_stages(const char *fn, const amp_lamb_desc *d, const amp_opt_tensors *t,
                              const amp_mt_step &step, const amp_mt_steps &steps,
                              const amp_lamb_coefs *coefs, bool adapt, const lamb_ws *w,
                              const amp_mt_tensor *stage1, const amp_mt_tensor *stage2,
                              int depth2, const amp_dtype *dtypes1, const amp_dtype *dtypes2,
                              cudaStream_t stream) {
    amp_lamb_coefs c = {};
    if (!coefs)
        c = amp_lamb_coefs_make(d->beta1, d->beta2, d->eps, d->weight_decay, d->decoupled,
                                d->bias_correction, d->grad_averaging, d->step);
    if (adapt) AMP_CUDA_TRY(cudaMemsetAsync(w->table, 0, 16 * (size_t)t->n, stream));
    lamb1_args a1 = {c, coefs, step, w->divisor, w->part_x, w->part_u, w->table};
    AMP_TRY(amp_mt_with_dtype(t->grad_dtype, [&](auto g) {
        return with_param_store(t, [&](auto s) {
            lamb1_op<decltype(g)::value, decltype(s)::value> op;
            static_cast<lamb1_args &>(op) = a1;
            return amp_mt_apply(fn, 4, dtypes1, stage1, t->n, op, stream);
        });
    }));
    if (adapt) {
        unsigned grid = (unsigned)((t->n + NORM_BLOCK - 1) / NORM_BLOCK);
        lamb_norms_kernel<<<grid, NORM_BLOCK, 0, stream>>>(t->n, w->table, w->part_x, w->part_u,
                                                           d->lr, d->weight_decay, d->adapt_all,
                                                           step.found_inf, w->step_size);
        AMP_CUDA_LAUNCHED(stream);
    }
    lamb2_args a2 = {c, coefs, steps, d->lr, w->step_size, step.found_inf};
    return amp_mt_with_store(amp_mt_store_of(t), [&](auto s) {
        lamb2_op<decltype(s)::value> op;
        static_cast<lamb2_args &>(op) = a2;
        return amp_mt_apply(fn, depth2, dtypes2, stage2, t->n, op, stream);
    });
}

extern "C" amp_status amp_cuda_lamb_multi(amp_device_ctx *dev, const amp_lamb_desc *d,
                                          const amp_opt_tensors *t,
                                          const amp_step_scalars *scalars) {
    const char *fn = "amp_cuda_lamb_multi";
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    /* desc.step is not used with device step counts */
    if (d->step < 1 && !(t && t->steps))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: step = %lld, want >= 1", fn,
                        (long long)d->step);
    if (isnan(d->max_grad_norm))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: max_grad_norm is NaN (<= 0: no clipping)", fn);
    AMP_TRY(amp_mt_check_opt(fn, t, NULL, d->grad_scale, true, true));
    amp_mt_list p = t->param ? amp_mt_list{AMP_F32, "param", NULL, t->param}
                             : amp_mt_list{t->half_dtype, "half", t->half, NULL};
    amp_mt_list m = {AMP_F32, "state1", NULL, t->state1};
    amp_mt_list v = {AMP_F32, "state2", NULL, t->state2};
    amp_mt_list lists1[4] = {{t->grad_dtype, "grad", t->grad, NULL}, p, m, v};
    amp_mt_list lists2[4] = {p, m, v, {t->half_dtype, "half", t->half, NULL}};
    int depth2 = t->param && t->half ? 4 : 3;
    amp_dtype dtypes1[4], dtypes2[4];
    for (int i = 0; i < 4; i++) dtypes1[i] = lists1[i].dtype, dtypes2[i] = lists2[i].dtype;
    amp_mt_tensor *stage1 = NULL, *stage2 = NULL;
    int64_t chunks = 0, chunks2 = 0;
    AMP_TRY(amp_mt_tensors_make(fn, t->n, t->numel, lists1, 4, &stage1, &chunks));
    if (!stage1) return AMP_OK;
    amp_status s = amp_mt_tensors_make(fn, t->n, t->numel, lists2, depth2, &stage2, &chunks2);
    if (s != AMP_OK) {
        free(stage1);
        return s;
    }
    bool clip = d->max_grad_norm > 0.0f;
    bool adapt = d->adapt_all || d->weight_decay != 0.0f;
    amp_mt_step step = amp_mt_step_make(d->grad_scale, scalars);
    cudaStream_t stream = dev->stream;
    amp_mt_steps steps = {NULL, NULL};
    const amp_lamb_coefs *coefs = NULL;
    void *steps_ws = NULL;
    if (t->steps) {
        lamb_make mk = {d->beta1, d->beta2, d->eps, d->weight_decay, d->decoupled,
                        d->bias_correction, d->grad_averaging};
        s = amp_mt_steps_prepare(t->n, t->steps, mk, dev, &steps_ws, &steps, &coefs);
    }
    lamb_ws w;
    memset(&w, 0, sizeof w);
    if (s == AMP_OK) s = lamb_ws_alloc(dev, &w, t->n, chunks, clip, adapt);
    if (s == AMP_OK && clip)
        s = lamb_clip(fn, t, d->max_grad_norm, step, stage1, chunks, &w, stream);
    if (s == AMP_OK)
        s = lamb_stages(fn, d, t, step, steps, coefs, adapt, &w, stage1, stage2, depth2, dtypes1,
                        dtypes2, stream);
    /* reused only by work queued after these kernels (one stream) */
    amp_cuda_free(dev, w.block);
    amp_cuda_free(dev, steps_ws);
    free(stage1);
    free(stage2);
    return s;
}
