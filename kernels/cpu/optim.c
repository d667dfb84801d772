/* CPU optimizer updates: loops over the per-element math of kernels/math/sgd.h and adam.h for a
 * list of tensors in one pass (sgd_multi, adam_multi: Apex's multi_tensor_apply, planned by
 * core/multi_tensor.h and run by multi_tensor_apply.h's amp_cpu_mt_apply, one piece at a time).
 * Parameters and state are f32; the gradient is f32, f16 or bf16, widened exactly on load and
 * multiplied by grad_scale (the unscale, fused). The gradient dtype is chosen once per call,
 * outside the element loop. Each element is independent, so the result depends neither on the
 * thread count nor on how a list is cut into launches and pieces. With per-tensor step counts
 * (amp_opt_tensors.steps) a multi call makes each tensor's coefficients from its own count (SGD:
 * its first step) and advances the counts after the last launch.
 *
 * With a half copy (O2's model weights next to the f32 masters), each piece of updated f32
 * values is rounded into the copy right after its update, while it is still in L1 (a piece is
 * 16 KiB of f32), through the backend's cast (F16C / vectorised bf16, the bits of core/half.h):
 * one pass over the parameters instead of an update pass and a cast pass. Without an f32
 * parameter (O3: the half parameter is the only copy) each piece is widened into a stack buffer
 * first, so the update still runs in f32 with one rounding per step. */
#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/optim_cpu.h"
#include "kernels/math/adam.h"
#include "kernels/math/load_store.h"
#include "kernels/math/sgd.h"

/* One range loop per gradient dtype, each with its load inlined. Pointers start at the range's
 * first element; gs multiplies each gradient as it is loaded (1: exact, the gradient as is). */
#define AMP_SGD_RANGE(suffix)                                                                      \
    AMP_CPU_CLONED(static, void, amp_sgd_range_##suffix,                                          \
                   (const amp_sgd_coefs *cp, float gs, int64_t n, float *restrict param,          \
                    const void *restrict grad, float *restrict buf),                              \
                   (cp, gs, n, param, grad, buf)) {                                               \
        const amp_sgd_coefs c = *cp; /* a local copy: no store can alias it */                     \
        for (int64_t i = 0; i < n; i++)                                                            \
            amp_sgd_update_elem(&c, param + i, amp_ld_##suffix(grad, i) * gs,                      \
                                buf ? buf + i : NULL);                                             \
    }
AMP_SGD_RANGE(f32)
AMP_SGD_RANGE(bf16) /* f16 gradients are widened per chunk first (amp_optim_chunk_grad) */

#define AMP_ADAM_RANGE(suffix)                                                                     \
    AMP_CPU_CLONED(static, void, amp_adam_range_##suffix,                                         \
                   (const amp_adam_coefs *cp, float gs, int64_t n, float *restrict param,         \
                    const void *restrict grad, float *restrict m, float *restrict v),             \
                   (cp, gs, n, param, grad, m, v)) {                                              \
        const amp_adam_coefs c = *cp; /* a local copy: no store can alias it */                    \
        for (int64_t i = 0; i < n; i++)                                                            \
            amp_adam_update_elem(&c, param + i, amp_ld_##suffix(grad, i) * gs, m + i, v + i);     \
    }
AMP_ADAM_RANGE(f32)
AMP_ADAM_RANGE(bf16)

typedef void (*amp_sgd_range_fn)(const amp_sgd_coefs *, float, int64_t, float *, const void *,
                                 float *);
typedef void (*amp_adam_range_fn)(const amp_adam_coefs *, float, int64_t, float *, const void *,
                                  float *, float *);

/* Everything a chunk of one call needs, fixed before the loop. */
typedef struct amp_sgd_run {
    amp_sgd_coefs c;
    float gs;
    amp_dtype half_dt;
    bool widen_f16; /* f16 gradients: widened per chunk, then the f32 range */
    amp_sgd_range_fn range;
} amp_sgd_run;

typedef struct amp_adam_run {
    amp_adam_coefs c;
    float gs;
    amp_dtype half_dt;
    bool widen_f16;
    amp_adam_range_fn range;
} amp_adam_run;

static amp_sgd_run amp_sgd_run_make(const amp_sgd_desc *d, amp_dtype g_dt, float gs,
                                    amp_dtype half_dt) {
    amp_sgd_run r;
    r.c = amp_sgd_coefs_make(d->lr, d->momentum, d->dampening, d->weight_decay, d->nesterov,
                             d->first_step);
    r.gs = gs;
    r.half_dt = half_dt;
    r.widen_f16 = g_dt == AMP_F16;
    r.range = g_dt == AMP_BF16 ? amp_sgd_range_bf16 : amp_sgd_range_f32;
    return r;
}

static amp_adam_run amp_adam_run_make(const amp_adam_desc *d, amp_dtype g_dt, float gs,
                                      amp_dtype half_dt) {
    amp_adam_run r;
    r.c = amp_adam_coefs_make(d->lr, d->beta1, d->beta2, d->eps, d->weight_decay, d->decoupled,
                              d->step);
    r.gs = gs;
    r.half_dt = half_dt;
    r.widen_f16 = g_dt == AMP_F16;
    r.range = g_dt == AMP_BF16 ? amp_adam_range_bf16 : amp_adam_range_f32;
    return r;
}

/* One chunk of len <= AMP_CPU_OPTIM_CHUNK elements, every pointer at its first element: the
 * update (of the f32 parameter, or of the widened half parameter when param is NULL), then the
 * half copy. buf NULL: no momentum. */
static inline void amp_sgd_chunk(const amp_sgd_run *r, int64_t len, float *param, void *half,
                                 const void *grad, float *buf) {
    float local[AMP_CPU_OPTIM_CHUNK], grad32[AMP_CPU_OPTIM_CHUNK];
    float *p = amp_optim_chunk_values(param, half, r->half_dt, len, local);
    r->range(&r->c, r->gs, len, p, amp_optim_chunk_grad(grad, r->widen_f16, len, grad32), buf);
    amp_optim_write_half(half, r->half_dt, p, len);
}

static inline void amp_adam_chunk(const amp_adam_run *r, int64_t len, float *param, void *half,
                                  const void *grad, float *m, float *v) {
    float local[AMP_CPU_OPTIM_CHUNK], grad32[AMP_CPU_OPTIM_CHUNK];
    float *p = amp_optim_chunk_values(param, half, r->half_dt, len, local);
    r->range(&r->c, r->gs, len, p, amp_optim_chunk_grad(grad, r->widen_f16, len, grad32), m, v);
    amp_optim_write_half(half, r->half_dt, p, len);
}

static amp_status amp_optim_check_grad_dtype(const char *who, amp_dtype g_dt) {
    if (g_dt == AMP_F32 || g_dt == AMP_F16 || g_dt == AMP_BF16) return AMP_OK;
    return amp_fail(AMP_ERR_DTYPE, "%s: gradient dtype %s, want f32, f16 or bf16", who,
                    amp_dtype_name(g_dt));
}

static amp_status amp_optim_check_half_copy(const char *who, const void *half_copy,
                                            amp_dtype half_dt) {
    if (!half_copy || half_dt == AMP_F16 || half_dt == AMP_BF16) return AMP_OK;
    return amp_fail(AMP_ERR_DTYPE, "%s: half_dtype %s, want f16 or bf16", who,
                    amp_dtype_name(half_dt));
}

static amp_status amp_optim_check_grad_scale(const char *who, float gs) {
    if (gs == 0.0f || (gs > 0.0f && isfinite(gs))) return AMP_OK;
    return amp_fail(AMP_ERR_INVALID_ARG, "%s: grad_scale = %g, want a finite value > 0", who,
                    (double)gs);
}

/* ---- The checks of a multi-tensor list (shared with optim_lamb.c). ---------------------------- */

/* Each entry of array `arr` of a non-empty tensor must be set; `name` names the array. A macro:
 * the arrays' element types differ (float *, void *). */
#define AMP_OPT_CHECK_PTRS(fn, t, arr, name)                                                       \
    do {                                                                                           \
        for (int64_t i_ = 0; i_ < (t)->n; i_++)                                                    \
            if ((t)->numel[i_] > 0 && !(arr)[i_])                                                  \
                return amp_fail(AMP_ERR_INVALID_ARG,                                               \
                                "%s: tensor %lld (%lld elements) has no %s (NULL)", fn,            \
                                (long long)i_, (long long)(t)->numel[i_], name);                   \
    } while (0)

/* An array of the list that the entry needs must be set when the list is not empty. */
static amp_status amp_cpu_opt_need(const char *fn, const amp_opt_tensors *t, bool present,
                                   const char *field, const char *holds) {
    if (present) return AMP_OK;
    return amp_fail(AMP_ERR_INVALID_ARG, "%s: amp_opt_tensors.%s is NULL with n = %lld%s%s", fn,
                    field, (long long)t->n, holds ? "; it holds the " : "", holds ? holds : "");
}

amp_status amp_cpu_opt_check(const char *fn, const amp_opt_tensors *t, const char *state1_name,
                             const char *state2_name, amp_cpu_opt_lists *lists) {
    if (!t) return amp_fail(AMP_ERR_INVALID_ARG, "%s: the tensor list is NULL", fn);
    if (t->n < 0 || t->n > INT32_MAX)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: n = %lld tensors, want 0..%d", fn,
                        (long long)t->n, INT32_MAX);
    AMP_TRY(amp_optim_check_grad_dtype(fn, t->grad_dtype));
    AMP_TRY(amp_optim_check_half_copy(fn, t->half, t->half_dtype));
    if (!t->param && !t->half)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: no parameters (param and half are both NULL)",
                        fn);
    if (t->n > 0) {
        AMP_TRY(amp_cpu_opt_need(fn, t, t->numel, "numel", NULL));
        AMP_TRY(amp_cpu_opt_need(fn, t, t->grad, "grad", NULL));
        if (state1_name) AMP_TRY(amp_cpu_opt_need(fn, t, t->state1, "state1", state1_name));
        if (state2_name) AMP_TRY(amp_cpu_opt_need(fn, t, t->state2, "state2", state2_name));
        for (int64_t i = 0; i < t->n; i++)
            if (t->numel[i] < 0)
                return amp_fail(AMP_ERR_INVALID_ARG, "%s: tensor %lld has numel %lld", fn,
                                (long long)i, (long long)t->numel[i]);
        AMP_OPT_CHECK_PTRS(fn, t, t->grad, "grad");
        if (t->param) AMP_OPT_CHECK_PTRS(fn, t, t->param, "param");
        if (t->half) AMP_OPT_CHECK_PTRS(fn, t, t->half, "half");
        if (state1_name) AMP_OPT_CHECK_PTRS(fn, t, t->state1, state1_name);
        if (state2_name) AMP_OPT_CHECK_PTRS(fn, t, t->state2, state2_name);
        /* Step counts are host memory here, so they can be checked: t = steps[i] + 1 >= 1. */
        for (int64_t i = 0; t->steps && i < t->n; i++)
            if (t->numel[i] > 0 && (t->steps[i] < 0 || t->steps[i] == INT64_MAX))
                return amp_fail(AMP_ERR_INVALID_ARG, "%s: tensor %lld has step count %lld, want "
                                ">= 0", fn, (long long)i, (long long)t->steps[i]);
    }
    amp_cpu_opt_lists l = {.depth = 0, .grad = -1, .param = -1, .half = -1, .state1 = -1,
                           .state2 = -1};
    l.grad = l.depth;
    l.dtype[l.depth++] = t->grad_dtype;
    if (t->param) {
        l.param = l.depth;
        l.dtype[l.depth++] = AMP_F32;
    }
    if (t->half) {
        l.half = l.depth;
        l.dtype[l.depth++] = t->half_dtype;
    }
    if (state1_name) {
        l.state1 = l.depth;
        l.dtype[l.depth++] = AMP_F32;
    }
    if (state2_name) {
        l.state2 = l.depth;
        l.dtype[l.depth++] = AMP_F32;
    }
    *lists = l;
    return AMP_OK;
}

void amp_cpu_opt_table_fill(const amp_opt_tensors *t, const amp_cpu_opt_lists *lists,
                            amp_mt_tensor *table) {
    for (int64_t i = 0; i < t->n; i++) {
        amp_mt_tensor *e = &table[i];
        e->numel = t->numel[i];
        e->ptr[lists->grad] = t->grad[i];
        if (lists->param >= 0) e->ptr[lists->param] = t->param[i];
        if (lists->half >= 0) e->ptr[lists->half] = t->half[i];
        if (lists->state1 >= 0) e->ptr[lists->state1] = t->state1[i];
        if (lists->state2 >= 0) e->ptr[lists->state2] = t->state2[i];
    }
}

void amp_cpu_opt_steps_advance(const amp_opt_tensors *t) {
    for (int64_t i = 0; t->steps && i < t->n; i++)
        if (t->numel[i] > 0) t->steps[i]++;
}

amp_status amp_cpu_opt_check_no_desc_half(const char *fn, const void *desc_half_copy) {
    if (!desc_half_copy) return AMP_OK;
    return amp_fail(AMP_ERR_INVALID_ARG, "%s: the descriptor's half_copy is set; a list takes its "
                    "half copies in amp_opt_tensors.half", fn);
}

/* ---- Multi-tensor entries. ------------------------------------------------------------------ */

/* The planner over t's table, ready to iterate, with `extra` bytes after the table for the
 * caller; *table is freed by the caller. */
static amp_status amp_optim_multi_plan(const char *fn, const amp_opt_tensors *t,
                                       const amp_cpu_opt_lists *lists, size_t extra_bytes,
                                       amp_mt_tensor **table, void **extra, amp_mt_planner *pl) {
    AMP_TRY(amp_cpu_mt_table_alloc(fn, t->n, extra_bytes, table, extra));
    amp_cpu_opt_table_fill(t, lists, *table);
    amp_status s = amp_cpu_mt_planner_init(fn, pl, lists->depth, lists->dtype, *table, t->n);
    if (s != AMP_OK) {
        free(*table);
        *table = NULL;
    }
    return s;
}

/* The op of a multi call (amp_cpu_mt_apply): the run every piece uses, or with per-tensor step
 * counts the runs of the list's tensors. */
typedef struct amp_optim_apply {
    union {
        const amp_sgd_run *sgd;
        const amp_adam_run *adam;
    };
    bool per_tensor; /* the runs are per tensor: the piece's is that of its block's tensor */
    const amp_cpu_opt_lists *lists;
} amp_optim_apply;

static inline int64_t amp_optim_run_of(const amp_optim_apply *a, const amp_mt_launch *l,
                                       const amp_cpu_mt_piece *pc) {
    return a->per_tensor ? amp_cpu_mt_block_tensor(l, pc->block) : 0;
}

static void amp_sgd_piece(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_piece *pc) {
    const amp_optim_apply *a = ctx;
    const amp_cpu_opt_lists *ls = a->lists;
    amp_sgd_chunk(&a->sgd[amp_optim_run_of(a, l, pc)], pc->len,
                  amp_cpu_mt_piece_ptr(l, pc, ls->param), amp_cpu_mt_piece_ptr(l, pc, ls->half),
                  amp_cpu_mt_piece_ptr(l, pc, ls->grad), amp_cpu_mt_piece_ptr(l, pc, ls->state1));
}

static void amp_adam_piece(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_piece *pc) {
    const amp_optim_apply *a = ctx;
    const amp_cpu_opt_lists *ls = a->lists;
    amp_adam_chunk(&a->adam[amp_optim_run_of(a, l, pc)], pc->len,
                   amp_cpu_mt_piece_ptr(l, pc, ls->param), amp_cpu_mt_piece_ptr(l, pc, ls->half),
                   amp_cpu_mt_piece_ptr(l, pc, ls->grad), amp_cpu_mt_piece_ptr(l, pc, ls->state1),
                   amp_cpu_mt_piece_ptr(l, pc, ls->state2));
}

amp_status amp_cpu_sgd_multi(amp_device_ctx *dev, const amp_sgd_desc *d, const amp_opt_tensors *t,
                             const amp_step_scalars *scalars) {
    static const char fn[] = "amp_cpu_sgd_multi";
    AMP_CHECK_ARG(d);
    AMP_TRY(amp_cpu_opt_check_no_desc_half(fn, d->half_copy));
    AMP_TRY(amp_optim_check_grad_scale(fn, d->grad_scale));
    bool momentum = d->momentum != 0.0f;
    amp_cpu_opt_lists lists;
    AMP_TRY(amp_cpu_opt_check(fn, t, momentum ? "momentum buffer" : NULL, NULL, &lists));
    if (t->n == 0 || amp_cpu_mt_skipped(scalars)) return AMP_OK;
    float gs;
    AMP_TRY(amp_cpu_mt_grad_scale(fn, d->grad_scale, scalars, &gs));
    amp_mt_tensor *table;
    void *extra;
    amp_mt_planner pl;
    /* With per-tensor step counts, each tensor has its own run (its first_step). */
    size_t n_runs = t->steps ? (size_t)t->n : 0;
    AMP_TRY(amp_optim_multi_plan(fn, t, &lists, n_runs * sizeof(amp_sgd_run), &table, &extra,
                                 &pl));
    const amp_sgd_run r = amp_sgd_run_make(d, t->grad_dtype, gs, t->half_dtype);
    amp_sgd_run *runs = t->steps ? extra : NULL;
    for (size_t i = 0; i < n_runs; i++) {
        runs[i] = r;
        runs[i].c.first_step = t->steps[i] == 0;
    }
    amp_optim_apply a = {.sgd = runs ? runs : &r, .per_tensor = runs != NULL, .lists = &lists};
    amp_cpu_mt_apply(&pl, &(amp_cpu_mt_op){.piece = amp_sgd_piece, .ctx = &a});
    free(table);
    amp_cpu_opt_steps_advance(t);
    return AMP_OK;
}

amp_status amp_cpu_adam_multi(amp_device_ctx *dev, const amp_adam_desc *d, const amp_opt_tensors *t,
                              const amp_step_scalars *scalars) {
    static const char fn[] = "amp_cpu_adam_multi";
    AMP_CHECK_ARG(d);
    AMP_TRY(amp_cpu_opt_check_no_desc_half(fn, d->half_copy));
    AMP_TRY(amp_optim_check_grad_scale(fn, d->grad_scale));
    amp_cpu_opt_lists lists;
    AMP_TRY(amp_cpu_opt_check(fn, t, "exp_avg", "exp_avg_sq", &lists));
    if (!t->steps && d->step < 1) /* with per-tensor counts desc.step is not read */
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: step = %lld, want >= 1", fn,
                        (long long)d->step);
    if (t->n == 0 || amp_cpu_mt_skipped(scalars)) return AMP_OK;
    float gs;
    AMP_TRY(amp_cpu_mt_grad_scale(fn, d->grad_scale, scalars, &gs));
    amp_mt_tensor *table;
    void *extra;
    amp_mt_planner pl;
    /* With per-tensor step counts, each tensor has its own coefficients (from its t). */
    size_t n_runs = t->steps ? (size_t)t->n : 0;
    AMP_TRY(amp_optim_multi_plan(fn, t, &lists, n_runs * sizeof(amp_adam_run), &table, &extra,
                                 &pl));
    amp_adam_desc dt = *d;
    dt.step = t->steps ? 1 : d->step; /* the shared run is not used with per-tensor counts */
    const amp_adam_run r = amp_adam_run_make(&dt, t->grad_dtype, gs, t->half_dtype);
    amp_adam_run *runs = t->steps ? extra : NULL;
    for (size_t i = 0; i < n_runs; i++) {
        dt.step = t->numel[i] > 0 ? t->steps[i] + 1 : 1;
        runs[i] = amp_adam_run_make(&dt, t->grad_dtype, gs, t->half_dtype);
    }
    amp_optim_apply a = {.adam = runs ? runs : &r, .per_tensor = runs != NULL, .lists = &lists};
    amp_cpu_mt_apply(&pl, &(amp_cpu_mt_op){.piece = amp_adam_piece, .ctx = &a});
    free(table);
    amp_cpu_opt_steps_advance(t);
    return AMP_OK;
}
