/* CPU LAMB over a list of tensors (lamb_multi): Apex's FusedLAMB (csrc/multi_tensor_lamb.cu) as
 * kernels/math/lamb.h states it, run as multi-tensor apply (core/multi_tensor.h planned,
 * multi_tensor_apply.h run). Three passes over the list, each one plan:
 *   1. with max_grad_norm > 0, the global norm G of the gradients as the update sees them
 *      (each multiplied by the grad scale), and the clip divisor from it;
 *   2. stage 1 on every element: moments m and v written, the direction u formed and dropped;
 *      per piece, the sums of x^2 (x before this step) and of u^2;
 *   3. stage 2 on every element: u recomputed from the stored m, v and the unchanged x with the
 *      same operations as stage 1 (so the same bits as a stored u, without a buffer the size of
 *      the model), then x -= step_size(tensor) * u and the half copy written.
 * Reductions: every square is formed in f64 (exact for an f32), each piece summed in f64 (8
 * lanes, then a fixed tree), a chunk's pieces added in order, the chunks added in plan order
 * (list order, then chunk order) into one f64 sum per tensor (or one for G); a norm is the f64
 * square root rounded once to f32, as lamb.h hands the norms to amp_lamb_step_size. Threads only
 * decide who computes which piece, so the bits do not depend on the thread count.
 * The f32 state and arithmetic are Apex's; its norms are f32 sums, ours f64, which only moves the
 * norms' last bit. With per-tensor step counts (amp_opt_tensors.steps) each tensor's
 * coefficients come from its own t; the counts advance only after the last pass. */
#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "kernels/cpu/optim_cpu.h"
#include "kernels/math/lamb.h"
#include "kernels/math/unscale.h"

typedef void (*amp_lamb_stage1_fn)(const amp_lamb_coefs *, float, float, int64_t, const float *,
                                   const void *, float *, float *, float *);
typedef double (*amp_lamb_gsq_fn)(const void *, float, int64_t);

/* Sum of squares of the scaled gradients of one piece (pass 1). */
#define AMP_LAMB_GSQ_RANGE(suffix)                                                                 \
    AMP_CPU_CLONED(static, double, amp_lamb_gsq_##suffix,                                         \
                   (const void *restrict g, float gs, int64_t n), (g, gs, n)) {                   \
        double lane[8] = {0};                                                                      \
        int64_t i = 0;                                                                             \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int j = 0; j < 8; j++)                                                            \
                lane[j] += amp_square_f64(amp_ld_##suffix(g, i + j) * gs);                         \
        double s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +                                   \
                   ((lane[4] + lane[5]) + (lane[6] + lane[7]));                                    \
        for (; i < n; i++) s += amp_square_f64(amp_ld_##suffix(g, i) * gs);                        \
        return s;                                                                                  \
    }
AMP_LAMB_GSQ_RANGE(f32)
AMP_LAMB_GSQ_RANGE(bf16) /* f16 gradients are widened per piece first (amp_optim_chunk_grad) */

/* Stage 1 of one piece: moments updated in place, the direction into u. */
#define AMP_LAMB_STAGE1_RANGE(suffix)                                                              \
    AMP_CPU_CLONED(static, void, amp_lamb_stage1_##suffix,                                        \
                   (const amp_lamb_coefs *cp, float divisor, float gs, int64_t n,                 \
                    const float *restrict x, const void *restrict grad, float *restrict m,        \
                    float *restrict v, float *restrict u),                                        \
                   (cp, divisor, gs, n, x, grad, m, v, u)) {                                      \
        const amp_lamb_coefs c = *cp; /* a local copy: no store can alias it */                    \
        for (int64_t i = 0; i < n; i++)                                                            \
            u[i] = amp_lamb_stage1_elem(&c, divisor, x[i], amp_ld_##suffix(grad, i) * gs, m + i,  \
                                        v + i);                                                    \
    }
AMP_LAMB_STAGE1_RANGE(f32)
AMP_LAMB_STAGE1_RANGE(bf16)

/* Sum of x[i]^2 in f64, in the order of the gradient sums above. */
AMP_CPU_CLONED(static, double, amp_lamb_sumsq, (const float *restrict x, int64_t n), (x, n)) {
    double lane[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] += amp_square_f64(x[i + j]);
    double s =
        ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    for (; i < n; i++) s += amp_square_f64(x[i]);
    return s;
}

/* Stage 1's direction from its stored results: the last three operations of
 * amp_lamb_stage1_elem (kernels/math/lamb.h), one for one, on the m and v it stored and the x it
 * read, so u has stage 1's bits. (test_optim_multi compares the whole update with a stored u.) */
static inline float amp_lamb_direction(const amp_lamb_coefs *c, float m, float v, float x) {
    float denom = sqrtf(v / c->bias_correction2) + c->eps;
    float r = (m / c->bias_correction1) / denom;
    return c->decoupled_decay != 0.0f ? fmaf(c->decoupled_decay, x, r) : r;
}

AMP_CPU_CLONED(static, void, amp_lamb_stage2_range,
               (const amp_lamb_coefs *cp, float step_size, int64_t n, float *restrict x,
                const float *restrict m, const float *restrict v),
               (cp, step_size, n, x, m, v)) {
    const amp_lamb_coefs c = *cp;
    for (int64_t i = 0; i < n; i++)
        amp_lamb_stage2_elem(step_size, x + i, amp_lamb_direction(&c, m[i], v[i], x[i]));
}

/* Everything a piece of one call needs, fixed before the passes (divisor after pass 1). */
typedef struct amp_lamb_run {
    amp_lamb_coefs c;
    const amp_lamb_coefs *coefs; /* per tensor (amp_opt_tensors.steps given); NULL: c for all */
    float gs, divisor;
    amp_dtype half_dt;
    bool widen_f16; /* f16 gradients: widened per piece, then the f32 loops */
    amp_lamb_stage1_fn stage1;
    amp_lamb_gsq_fn gsq;
} amp_lamb_run;

/* The coefficients of the list's tensor i. */
static inline const amp_lamb_coefs *amp_lamb_coefs_of(const amp_lamb_run *r, int64_t i) {
    return r->coefs ? &r->coefs[i] : &r->c;
}

static void amp_lamb_stage1_chunk(const amp_lamb_run *r, const amp_lamb_coefs *c, int64_t len,
                                  float *param, const void *half, const void *grad, float *m,
                                  float *v, double *sum_x, double *sum_u) {
    float local[AMP_CPU_OPTIM_CHUNK], u[AMP_CPU_OPTIM_CHUNK], grad32[AMP_CPU_OPTIM_CHUNK];
    const float *x = amp_optim_chunk_values(param, half, r->half_dt, len, local);
    r->stage1(c, r->divisor, r->gs, len, x,
              amp_optim_chunk_grad(grad, r->widen_f16, len, grad32), m, v, u);
    *sum_x = amp_lamb_sumsq(x, len);
    *sum_u = amp_lamb_sumsq(u, len);
}

static void amp_lamb_stage2_chunk(const amp_lamb_run *r, const amp_lamb_coefs *c,
                                  float step_size, int64_t len, float *param, void *half,
                                  const float *m, const float *v) {
    float local[AMP_CPU_OPTIM_CHUNK];
    float *x = amp_optim_chunk_values(param, half, r->half_dt, len, local);
    amp_lamb_stage2_range(c, step_size, len, x, m, v);
    amp_optim_write_half(half, r->half_dt, x, len);
}

/* The per-call memory after the planner's table: one or two f64 partials per piece of a
 * launch, and per tensor the f64 sums of x^2 and u^2 and the step size. */
typedef struct amp_lamb_mem {
    double *part;   /* 2 * AMP_CPU_MT_MAX_PIECES */
    double *sum_x, *sum_u;
    float *step_size;
} amp_lamb_mem;

/* The op of a pass (amp_cpu_mt_apply): the run, the lists and the per-call memory. */
typedef struct amp_lamb_apply {
    const amp_lamb_run *r;
    const amp_cpu_opt_lists *lists;
    amp_lamb_mem *mem;
    double total; /* pass 1: the sum of squares so far */
} amp_lamb_apply;

/* Pass 1 over a depth-1 plan of the gradients (the same chunks as the update's plan): a piece's
 * sum of squares of the scaled gradients; after each launch its chunks' sums, in plan order. */
static void amp_lamb_gsq_piece(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_piece *pc) {
    const amp_lamb_apply *a = ctx;
    float grad32[AMP_CPU_OPTIM_CHUNK]; /* a piece is at most a chunk */
    a->mem->part[pc->k] = a->r->gsq(amp_optim_chunk_grad(amp_cpu_mt_piece_ptr(l, pc, 0),
                                                         a->r->widen_f16, pc->len, grad32),
                                    a->r->gs, pc->len);
}

static void amp_lamb_gsq_launch(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_pieces *pcs) {
    amp_lamb_apply *a = ctx;
    for (int b = 0; b < l->n_blocks; b++) a->total += amp_cpu_mt_block_sum(pcs, b, a->mem->part, 1);
}

/* Pass 2: stage 1 on a piece, its sums of x^2 and u^2 at part[2k] and part[2k + 1]; after each
 * launch its chunks' sums, into their tensors' sums in plan order. */
static void amp_lamb_stage1_piece(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_piece *pc) {
    const amp_lamb_apply *a = ctx;
    const amp_cpu_opt_lists *ls = a->lists;
    const amp_lamb_coefs *c = amp_lamb_coefs_of(a->r, amp_cpu_mt_block_tensor(l, pc->block));
    double *part = a->mem->part;
    amp_lamb_stage1_chunk(a->r, c, pc->len, amp_cpu_mt_piece_ptr(l, pc, ls->param),
                          amp_cpu_mt_piece_ptr(l, pc, ls->half),
                          amp_cpu_mt_piece_ptr(l, pc, ls->grad),
                          amp_cpu_mt_piece_ptr(l, pc, ls->state1),
                          amp_cpu_mt_piece_ptr(l, pc, ls->state2), &part[2 * pc->k],
                          &part[2 * pc->k + 1]);
}

static void amp_lamb_stage1_launch(void *ctx, const amp_mt_launch *l,
                                   const amp_cpu_mt_pieces *pcs) {
    amp_lamb_apply *a = ctx;
    amp_lamb_mem *mem = a->mem;
    for (int b = 0; b < l->n_blocks; b++) {
        int64_t i = amp_cpu_mt_block_tensor(l, b);
        mem->sum_x[i] += amp_cpu_mt_block_sum(pcs, b, mem->part, 2);
        mem->sum_u[i] += amp_cpu_mt_block_sum(pcs, b, mem->part + 1, 2);
    }
}

/* Pass 3: stage 2 on a piece with its tensor's step size. */
static void amp_lamb_stage2_piece(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_piece *pc) {
    const amp_lamb_apply *a = ctx;
    const amp_cpu_opt_lists *ls = a->lists;
    int64_t i = amp_cpu_mt_block_tensor(l, pc->block);
    amp_lamb_stage2_chunk(a->r, amp_lamb_coefs_of(a->r, i), a->mem->step_size[i], pc->len,
                          amp_cpu_mt_piece_ptr(l, pc, ls->param),
                          amp_cpu_mt_piece_ptr(l, pc, ls->half),
                          amp_cpu_mt_piece_ptr(l, pc, ls->state1),
                          amp_cpu_mt_piece_ptr(l, pc, ls->state2));
}

/* The three passes over the checked list t (grads: its gradients' plan, update: the whole
 * list's); the per-tensor sums and step sizes in mem. */
static void amp_lamb_passes(amp_lamb_run *r, const amp_lamb_desc *d, const amp_opt_tensors *t,
                            const amp_cpu_opt_lists *lists, const amp_mt_planner *grads,
                            const amp_mt_planner *update, amp_lamb_mem *mem) {
    amp_lamb_apply a = {.r = r, .lists = lists, .mem = mem, .total = 0.0};
    if (d->max_grad_norm > 0.0f) {
        amp_cpu_mt_apply(grads, &(amp_cpu_mt_op){.piece = amp_lamb_gsq_piece,
                                                 .launch_done = amp_lamb_gsq_launch, .ctx = &a});
        r->divisor = amp_lamb_clip_divisor((float)sqrt(a.total), d->max_grad_norm);
    }
    for (int64_t i = 0; i < t->n; i++) mem->sum_x[i] = mem->sum_u[i] = 0.0;
    amp_cpu_mt_apply(update, &(amp_cpu_mt_op){.piece = amp_lamb_stage1_piece,
                                              .launch_done = amp_lamb_stage1_launch, .ctx = &a});
    for (int64_t i = 0; i < t->n; i++)
        mem->step_size[i] = amp_lamb_step_size(d->lr, (float)sqrt(mem->sum_x[i]),
                                               (float)sqrt(mem->sum_u[i]), d->weight_decay,
                                               d->adapt_all);
    amp_cpu_mt_apply(update, &(amp_cpu_mt_op){.piece = amp_lamb_stage2_piece, .ctx = &a});
}

static amp_status amp_lamb_check_desc(const char *fn, const amp_lamb_desc *d,
                                      const amp_opt_tensors *t) {
    if (!t->steps && d->step < 1) /* with per-tensor counts desc.step is not read */
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: step = %lld, want >= 1", fn,
                        (long long)d->step);
    if (isnan(d->max_grad_norm))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: max_grad_norm is NaN (<= 0: no clipping)", fn);
    float unused;
    return amp_cpu_mt_grad_scale(fn, d->grad_scale, NULL, &unused);
}

amp_status amp_cpu_lamb_multi(amp_device_ctx *dev, const amp_lamb_desc *d, const amp_opt_tensors *t,
                              const amp_step_scalars *scalars) {
    static const char fn[] = "amp_cpu_lamb_multi";
    AMP_CHECK_ARG(d);
    amp_cpu_opt_lists lists;
    AMP_TRY(amp_cpu_opt_check(fn, t, "exp_avg", "exp_avg_sq", &lists));
    AMP_TRY(amp_lamb_check_desc(fn, d, t));
    if (t->n == 0 || amp_cpu_mt_skipped(scalars)) return AMP_OK;
    amp_lamb_run r;
    AMP_TRY(amp_cpu_mt_grad_scale(fn, d->grad_scale, scalars, &r.gs));
    r.c = amp_lamb_coefs_make(d->beta1, d->beta2, d->eps, d->weight_decay, d->decoupled,
                              d->bias_correction, d->grad_averaging, t->steps ? 1 : d->step);
    r.coefs = NULL;
    r.divisor = 1.0f;
    r.half_dt = t->half_dtype;
    amp_dtype g_dt = t->grad_dtype;
    r.widen_f16 = g_dt == AMP_F16;
    r.stage1 = g_dt == AMP_BF16 ? amp_lamb_stage1_bf16 : amp_lamb_stage1_f32;
    r.gsq = g_dt == AMP_BF16 ? amp_lamb_gsq_bf16 : amp_lamb_gsq_f32;

    size_t n = (size_t)t->n, n_coefs = t->steps ? n : 0;
    size_t extra = (2 * (size_t)AMP_CPU_MT_MAX_PIECES + 2 * n) * sizeof(double) +
                   n_coefs * sizeof(amp_lamb_coefs) + n * sizeof(float);
    amp_mt_tensor *table;
    void *extra_mem;
    AMP_TRY(amp_cpu_mt_table_alloc(fn, t->n, extra, &table, &extra_mem));
    amp_cpu_opt_table_fill(t, &lists, table);
    amp_lamb_mem mem;
    mem.part = extra_mem;
    mem.sum_x = mem.part + 2 * AMP_CPU_MT_MAX_PIECES;
    mem.sum_u = mem.sum_x + n;
    /* The coefficients (floats) after the doubles, then the step sizes. */
    amp_lamb_coefs *coefs = (amp_lamb_coefs *)(mem.sum_u + n);
    mem.step_size = (float *)(coefs + n_coefs);
    for (size_t i = 0; i < n_coefs; i++)
        coefs[i] = amp_lamb_coefs_make(d->beta1, d->beta2, d->eps, d->weight_decay, d->decoupled,
                                       d->bias_correction, d->grad_averaging,
                                       t->numel[i] > 0 ? t->steps[i] + 1 : 1);
    if (n_coefs) r.coefs = coefs;

    /* Both plans are made before anything is written (an iterator is a value: each pass takes
     * its own copy), so a failure leaves every byte as it was. */
    amp_mt_planner grads, update;
    amp_status s = amp_cpu_mt_planner_init(fn, &grads, 1, &lists.dtype[lists.grad], table, t->n);
    if (s == AMP_OK)
        s = amp_cpu_mt_planner_init(fn, &update, lists.depth, lists.dtype, table, t->n);
    if (s == AMP_OK) amp_lamb_passes(&r, d, t, &lists, &grads, &update, &mem);
    free(table);
    if (s == AMP_OK) amp_cpu_opt_steps_advance(t);
    return s;
}
