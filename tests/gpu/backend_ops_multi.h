/* test_backend_ops: the multi-tensor entries (sgd_multi, adam_multi, lamb_multi, unscale_multi,
 * nonfinite_multi, sum_squares_multi), their setups, runs and rows. Included by
 * test_backend_ops.c after op_row, its helpers and the tolerance macros.
 *
 * A list of tensors lives in ONE slot per list: the slot is carved into the list's tensors (the
 * slot's parts, backend_ops_harness.h), and run builds each pointer array from the slot's device
 * pointer plus the tensors' offsets. Every list of a row has the same layout (mt_layout), a
 * function of the row alone, so setup and run make it alike:
 *   - s[0] tensors: tensor 0 of 4097 elements (one more than the CPU backend's piece; it holds
 *     the specials that gen_specials puts first), tensor 1 empty, tensor 2 of s[1] elements
 *     (over 65536: several multi-tensor chunks, the last one short), tensor 3 of exactly one
 *     chunk, the last one empty (a list that ends with an empty tensor is where Apex's planner
 *     drops its last launch), the others from 1 to 700 elements;
 *   - s[0] exceeds the tensor slots of one launch at the entry's depth (Apex's 110 / 64 / 48 /
 *     36 / 30 for depth 1..5), so every row but the all-empty ones runs several launches;
 *   - each tensor starts at a multiple of MT_ALIGN elements and is followed by at least one
 *     element of padding, which the harness checks is left alone.
 * Empty tensors get real addresses, like every other.
 *
 * Optimizer rows (sgd_multi, adam_multi, lamb_multi): grad in dt (the row's range), the f32
 * parameter list (absent with MT_O3), the half list in dt2 (MT_O2: the copy, an output; MT_O3:
 * the parameters themselves), the f32 states, and where the row asks, the device step counts
 * and step scalars. desc.grad_scale is the row's (a value whose product rounds); with
 * MT_SCALARS it is a decoy, MT_DECOY_SCALE, and the device scalar holds the row's value. With
 * MT_SKIP (found_inf = 1 on the device) every list becomes an input: nothing may change.
 * Tolerances: SGD and Adam keep the per-tensor rows' (both backends run kernels/math/sgd.h and
 * adam.h with every multiply-add spelled as fmaf), one ulp more for the halves rounded from
 * their f32 results. LAMB's global gradient norm and per-tensor norms are f64 sums in other
 * orders on the two backends, which may move a norm's f32 bit: the clip divisor's moves each
 * gradient, so exp_avg by an ulp and exp_avg_sq (its square) by two; a step size's moves the
 * parameter, and the half rounded from it, by an ulp. sum_squares_multi: one f32 rounding of f64
 * sums in other orders, an ulp. unscale_multi and nonfinite_multi: exact. */
#ifndef AMP_TESTS_GPU_BACKEND_OPS_MULTI_H
#define AMP_TESTS_GPU_BACKEND_OPS_MULTI_H

#include "core/multi_tensor.h"

/* Row variants of the multi entries (NESTEROV, FIRST_STEP and DECOUPLED as for the per-tensor
 * entries; DECOUPLED is LAMB's adam_w_mode too). */
enum {
    MT_O2 = 1 << 10,           /* the half list is a copy of the f32 parameters, written */
    MT_O3 = 1 << 11,           /* no f32 parameter list: the half list is updated in place */
    MT_STEPS = 1 << 12,        /* amp_opt_tensors.steps: device step counts */
    MT_SCALARS = 1 << 13,      /* amp_step_scalars: device grad scale, found_inf = 0 */
    MT_SKIP = 1 << 14,         /* amp_step_scalars with found_inf = 1: a skipped step */
    MT_ADAPT_ALL = 1 << 15,    /* LAMB: trust ratio without weight decay */
    MT_NO_BIAS_CORR = 1 << 16, /* LAMB: bias_correction false */
    MT_NO_GRAD_AVG = 1 << 17,  /* LAMB: grad_averaging false */
    MT_IN_PLACE = 1 << 18,     /* unscale_multi: out is grad (f32) */
    MT_ONE_INF = 1 << 19,      /* nonfinite_multi: clean but for an inf as the list's last value */
    MT_ALL_EMPTY = 1 << 20,    /* every tensor of the list empty */
};

#define MT_ALIGN 32
#define MT_DECOY_SCALE 8.0f
/* Tensors per row: past 64 slots (depth 2) for the optimizers, past 110 (depth 1) for the
 * others; the large tensor: two chunks and 3 elements. */
#define MT_OPT_LIST 70, 131075
#define MT_FLAT_LIST 120, 131075

typedef struct mt_layout {
    int64_t k;      /* tensors */
    int64_t *numel; /* [k] */
    int64_t *off;   /* [k]: first element, a multiple of MT_ALIGN */
    int64_t total;  /* elements of each list's slot */
} mt_layout;

/* The row's layout, in one allocation (free() it). */
static mt_layout *mt_layout_make(const op_row *r) {
    int64_t k = r->s[0];
    mt_layout *L = xcalloc(sizeof *L + 2 * (size_t)k * sizeof(int64_t));
    L->k = k;
    L->numel = (int64_t *)(L + 1);
    L->off = L->numel + k;
    uint64_t g = 0x6d756c7469ull + (uint64_t)k; /* fixed: setup and run must agree */
    for (int64_t i = 0; i < k; i++) {
        int64_t n = 1 + rng_below(&g, 700);
        if (i == 0) n = 4097;
        if (i == 2) n = r->s[1];
        if (i == 3) n = AMP_MT_CHUNK_NUMEL;
        if (i == 1 || i == k - 1 || (r->flags & MT_ALL_EMPTY)) n = 0;
        L->numel[i] = n;
        L->off[i] = L->total;
        L->total = (L->total + n + 1 + MT_ALIGN - 1) / MT_ALIGN * MT_ALIGN;
    }
    return L;
}

/* The case's layout, kept with it (tcase.owned) for the slots' parts. */
static const mt_layout *mt_layout_keep(const op_row *r, tcase *c) {
    mt_layout *L = mt_layout_make(r);
    c->owned = L;
    return L;
}

/* Declares slot i as a list of L's tensors. */
static void *mt_list(tcase *c, int i, const char *name, role ro, ek k, const mt_layout *L) {
    void *p = slot_decl(c, i, name, ro, k, L->total);
    c->s[i].n_parts = (int)L->k;
    c->s[i].part_off = L->off;
    c->s[i].part_len = L->numel;
    return p;
}

/* Tensor i's address in a list whose slot is at `base` (NULL: the list is absent). */
static void *mt_at(const mt_layout *L, void *base, ek k, int64_t i) {
    return base ? (char *)base + (size_t)L->off[i] * ek_size(k) : NULL;
}

/* ---- Optimizers ---------------------------------------------------------------------------- */

/* The slots of an optimizer row (ROLE_NONE where the row has no such list). */
enum { MT_GRAD, MT_PARAM, MT_HALF, MT_STATE1, MT_STATE2, MT_STEP_COUNTS, MT_GS, MT_FOUND_INF };

/* grad in the row's range; param and a half parameter in [-1, 1); the first state (momentum or
 * exp_avg) in [-0.1, 0.1), the second (exp_avg_sq) in [0, 0.01); step counts 0 on every third
 * tensor (SGD's first step), else up to 1000; the scalars from f[gs_index]. */
static void setup_opt_multi(const op_row *r, tcase *c, int n_states, int gs_index) {
    const mt_layout *L = mt_layout_keep(r, c);
    bool skip = r->flags & MT_SKIP;
    role w = skip ? ROLE_IN : ROLE_INOUT;
    mt_list(c, MT_GRAD, "grad", ROLE_IN, ek_of(r->dt), L);
    gen_main(r, c, MT_GRAD);
    if (!(r->flags & MT_O3)) {
        mt_list(c, MT_PARAM, "param", w, EK_F32, L);
        gen_uniform(c, MT_PARAM, -1, 1);
    }
    if (r->flags & MT_O3) {
        mt_list(c, MT_HALF, "half_param", w, ek_of(r->dt2), L);
        gen_uniform(c, MT_HALF, -1, 1);
    } else if (r->flags & MT_O2) {
        mt_list(c, MT_HALF, "half_copy", skip ? ROLE_IN : ROLE_OUT, ek_of(r->dt2), L);
        if (skip) gen_uniform(c, MT_HALF, -1, 1);
    }
    if (n_states >= 1) {
        mt_list(c, MT_STATE1, "state1", w, EK_F32, L);
        gen_uniform(c, MT_STATE1, -0.1, 0.1);
    }
    if (n_states >= 2) {
        mt_list(c, MT_STATE2, "state2", w, EK_F32, L);
        gen_uniform(c, MT_STATE2, 0, 0.01);
    }
    if (r->flags & MT_STEPS) {
        int64_t *steps = slot_decl(c, MT_STEP_COUNTS, "steps", w, EK_I64, L->k);
        for (int64_t i = 0; i < L->k; i++) steps[i] = i % 3 == 0 ? 0 : rng_below(&c->rng, 1000);
    }
    if (r->flags & (MT_SCALARS | MT_SKIP)) {
        float *gs = slot_decl(c, MT_GS, "grad_scale", ROLE_IN, EK_F32, 1);
        gs[0] = r->f[gs_index];
        float *found = slot_decl(c, MT_FOUND_INF, "found_inf", ROLE_IN, EK_F32, 1);
        found[0] = skip ? 1.0f : 0.0f;
    }
}

/* One optimizer call's lists: amp_opt_tensors over the slots' device pointers (host arrays of
 * device addresses, as the contract has them), and the step scalars. */
typedef struct mt_call {
    mt_layout *L;
    void **grad, **half;
    float **param, **state1, **state2;
    amp_opt_tensors t;
    amp_step_scalars sc;
    const amp_step_scalars *scalars; /* NULL or &sc */
    float grad_scale;                /* desc.grad_scale */
} mt_call;

static float **mt_float_list(const mt_layout *L, void *base) {
    if (!base) return NULL;
    float **a = xcalloc((size_t)L->k * sizeof *a);
    for (int64_t i = 0; i < L->k; i++) a[i] = mt_at(L, base, EK_F32, i);
    return a;
}

static void **mt_void_list(const mt_layout *L, void *base, ek k) {
    if (!base) return NULL;
    void **a = xcalloc((size_t)L->k * sizeof *a);
    for (int64_t i = 0; i < L->k; i++) a[i] = mt_at(L, base, k, i);
    return a;
}

static void mt_call_make(mt_call *m, const op_row *r, void *const *p, int gs_index) {
    m->L = mt_layout_make(r);
    m->grad = mt_void_list(m->L, p[MT_GRAD], ek_of(r->dt));
    m->param = mt_float_list(m->L, p[MT_PARAM]);
    m->half = mt_void_list(m->L, p[MT_HALF], ek_of(r->dt2));
    m->state1 = mt_float_list(m->L, p[MT_STATE1]);
    m->state2 = mt_float_list(m->L, p[MT_STATE2]);
    m->t = (amp_opt_tensors){.n = m->L->k, .numel = m->L->numel, .grad = m->grad,
                             .grad_dtype = r->dt, .param = m->param, .half = m->half,
                             .half_dtype = r->dt2, .state1 = m->state1, .state2 = m->state2,
                             .steps = p[MT_STEP_COUNTS]};
    m->sc = (amp_step_scalars){.grad_scale = p[MT_GS], .found_inf = p[MT_FOUND_INF]};
    m->scalars = p[MT_GS] || p[MT_FOUND_INF] ? &m->sc : NULL;
    m->grad_scale = p[MT_GS] ? MT_DECOY_SCALE : r->f[gs_index];
}

static void mt_call_free(mt_call *m) {
    free(m->grad);
    free(m->param);
    free(m->half);
    free(m->state1);
    free(m->state2);
    free(m->L);
}

/* sgd_multi: s = {tensors, large numel}, f = {lr, momentum, dampening, weight_decay,
 * grad_scale}; the momentum list only with momentum. */
static void setup_sgd_multi(const op_row *r, tcase *c) {
    setup_opt_multi(r, c, r->f[1] != 0.0f ? 1 : 0, 4);
}
static amp_status run_sgd_multi(const op_row *r, const amp_backend *be, void *const *p) {
    mt_call m;
    mt_call_make(&m, r, p, 4);
    amp_sgd_desc d = {.lr = r->f[0], .momentum = r->f[1], .dampening = r->f[2],
                      .weight_decay = r->f[3], .nesterov = r->flags & NESTEROV,
                      .first_step = r->flags & FIRST_STEP, .grad_scale = m.grad_scale};
    amp_status st = be->k.sgd_multi(be->dev, &d, &m.t, m.scalars);
    mt_call_free(&m);
    return st;
}

/* adam_multi: s = {tensors, large numel, step}, f = {lr, beta1, beta2, eps, weight_decay,
 * grad_scale}. */
static void setup_adam_multi(const op_row *r, tcase *c) {
    setup_opt_multi(r, c, 2, 5);
}
static amp_status run_adam_multi(const op_row *r, const amp_backend *be, void *const *p) {
    mt_call m;
    mt_call_make(&m, r, p, 5);
    amp_adam_desc d = {.lr = r->f[0], .beta1 = r->f[1], .beta2 = r->f[2], .eps = r->f[3],
                       .weight_decay = r->f[4], .decoupled = r->flags & DECOUPLED,
                       .step = r->s[2], .grad_scale = m.grad_scale};
    amp_status st = be->k.adam_multi(be->dev, &d, &m.t, m.scalars);
    mt_call_free(&m);
    return st;
}

/* lamb_multi: s = {tensors, large numel, step}, f = {lr, beta1, beta2, eps, weight_decay,
 * max_grad_norm, grad_scale}. */
static void setup_lamb_multi(const op_row *r, tcase *c) {
    setup_opt_multi(r, c, 2, 6);
}
static amp_status run_lamb_multi(const op_row *r, const amp_backend *be, void *const *p) {
    mt_call m;
    mt_call_make(&m, r, p, 6);
    amp_lamb_desc d = {.lr = r->f[0], .beta1 = r->f[1], .beta2 = r->f[2], .eps = r->f[3],
                       .weight_decay = r->f[4], .decoupled = r->flags & DECOUPLED,
                       .bias_correction = !(r->flags & MT_NO_BIAS_CORR),
                       .grad_averaging = !(r->flags & MT_NO_GRAD_AVG),
                       .adapt_all = r->flags & MT_ADAPT_ALL, .max_grad_norm = r->f[5],
                       .step = r->s[2], .grad_scale = m.grad_scale};
    amp_status st = be->k.lamb_multi(be->dev, &d, &m.t, m.scalars);
    mt_call_free(&m);
    return st;
}

/* ---- The loss scaler's list passes ---------------------------------------------------------- */

/* unscale_multi: s = {tensors, large numel}, f = {inv_scale, found_inf before}; grad (dt) with
 * specials where the row asks, out f32 (grad itself with MT_IN_PLACE); with MT_SCALARS the
 * device scalar holds inv_scale and the argument is MT_DECOY_SCALE. */
static void setup_unscale_multi(const op_row *r, tcase *c) {
    const mt_layout *L = mt_layout_keep(r, c);
    bool in_place = r->flags & MT_IN_PLACE;
    mt_list(c, 0, "grad", in_place ? ROLE_INOUT : ROLE_IN, ek_of(r->dt), L);
    gen_main(r, c, 0);
    if (!in_place) mt_list(c, 1, "out", ROLE_OUT, EK_F32, L);
    float *found = slot_decl(c, 2, "found_inf", ROLE_INOUT, EK_F32, 1);
    found[0] = r->f[1];
    if (r->flags & MT_SCALARS) {
        float *gs = slot_decl(c, 3, "grad_scale", ROLE_IN, EK_F32, 1);
        gs[0] = r->f[0];
    }
}
static amp_status run_unscale_multi(const op_row *r, const amp_backend *be, void *const *p) {
    mt_layout *L = mt_layout_make(r);
    void **grad = mt_void_list(L, p[0], ek_of(r->dt));
    float **out = mt_float_list(L, r->flags & MT_IN_PLACE ? p[0] : p[1]);
    amp_step_scalars sc = {.grad_scale = p[3]};
    amp_status st =
            be->k.unscale_multi(be->dev, r->dt, L->k, L->numel, (const void *const *)grad,
                                p[3] ? MT_DECOY_SCALE : r->f[0], out, p[2], p[3] ? &sc : NULL);
    free(grad);
    free(out);
    free(L);
    return st;
}

/* nonfinite_multi: s = {tensors, large numel}, f = {_, found_inf before}; x (dt) with specials
 * where the row asks, or with MT_ONE_INF a single inf as the last element of the last non-empty
 * tensor. */
static void setup_nonfinite_multi(const op_row *r, tcase *c) {
    const mt_layout *L = mt_layout_keep(r, c);
    void *x = mt_list(c, 0, "x", ROLE_IN, ek_of(r->dt), L);
    gen_main(r, c, 0);
    int64_t last = L->k - 1;
    while (last > 0 && L->numel[last] == 0) last--;
    if (r->flags & MT_ONE_INF)
        ek_store(x, ek_of(r->dt), L->off[last] + L->numel[last] - 1, INFINITY);
    float *found = slot_decl(c, 1, "found_inf", ROLE_INOUT, EK_F32, 1);
    found[0] = r->f[1];
}
static amp_status run_nonfinite_multi(const op_row *r, const amp_backend *be, void *const *p) {
    mt_layout *L = mt_layout_make(r);
    void **x = mt_void_list(L, p[0], ek_of(r->dt));
    amp_status st =
            be->k.nonfinite_multi(be->dev, r->dt, L->k, L->numel, (const void *const *)x, p[1]);
    free(x);
    free(L);
    return st;
}

/* sum_squares_multi: s = {tensors, large numel}; x (dt) in the row's range. */
static void setup_sum_squares_multi(const op_row *r, tcase *c) {
    const mt_layout *L = mt_layout_keep(r, c);
    mt_list(c, 0, "x", ROLE_IN, ek_of(r->dt), L);
    gen_main(r, c, 0);
    slot_decl(c, 1, "out", ROLE_OUT, EK_F32, 1);
}
static amp_status run_sum_squares_multi(const op_row *r, const amp_backend *be, void *const *p) {
    mt_layout *L = mt_layout_make(r);
    void **x = mt_void_list(L, p[0], ek_of(r->dt));
    amp_status st =
            be->k.sum_squares_multi(be->dev, r->dt, L->k, L->numel, (const void *const *)x, p[1],
                                    NULL);
    free(x);
    free(L);
    return st;
}

/* ---- The rows ------------------------------------------------------------------------------- */

/* SGD and Adam: the per-tensor rows' tolerance, and an ulp for a half rounded from an f32 value
 * that may differ in its last bits. LAMB: two ulps of each output (see the top of the file). */
#define MT_TOL_OPT TOL_ULPS(1e-6, 1e-6, 1)
#define MT_TOL_LAMB TOL_ULPS(1e-9, 0, 2)
/* A grad scale whose products round: the inverse of a loss scale of 1024 times a clip of 0.7. */
#define MT_GS (0.7f / 1024)

static const op_row multi_rows[] = {
    /* sgd_multi: f = {lr, momentum, dampening, weight_decay, grad_scale}; grads of a loss
     * scale of 1024 in [-1024, 1024). */
    {"sgd_multi_f32_plain", E_sgd_multi, {MT_OPT_LIST}, F32, F32, .f = {0.1f, 0, 0, 0, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"sgd_multi_bf16_momentum", E_sgd_multi, {MT_OPT_LIST}, BF16, F32, .f = {0.05f, 0.9f, 0, 0, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"sgd_multi_f32_momentum_wd", E_sgd_multi, {MT_OPT_LIST}, F32, F32, .f = {0.05f, 0.9f, 0.1f, 1e-4f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"sgd_multi_f16_o2_f16_nesterov", E_sgd_multi, {MT_OPT_LIST}, F16, F16, .flags = MT_O2 | NESTEROV, .f = {0.05f, 0.9f, 0, 5e-4f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"sgd_multi_bf16_o2_bf16_first_step", E_sgd_multi, {MT_OPT_LIST}, BF16, BF16, .flags = MT_O2 | FIRST_STEP, .f = {0.1f, 0.9f, 0.5f, 0, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"sgd_multi_f32_o2_bf16_plain_wd", E_sgd_multi, {MT_OPT_LIST}, F32, BF16, .flags = MT_O2, .f = {0.1f, 0, 0, 1e-2f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"sgd_multi_f16_o3_f16_plain", E_sgd_multi, {MT_OPT_LIST}, F16, F16, .flags = MT_O3, .f = {0.1f, 0, 0, 0, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"sgd_multi_bf16_o3_bf16_momentum", E_sgd_multi, {MT_OPT_LIST}, BF16, BF16, .flags = MT_O3, .f = {0.05f, 0.9f, 0, 1e-4f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"sgd_multi_f16_o2_f16_steps_momentum", E_sgd_multi, {MT_OPT_LIST}, F16, F16, .flags = MT_O2 | MT_STEPS, .f = {0.05f, 0.9f, 0.1f, 1e-4f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"sgd_multi_f32_scalars_momentum", E_sgd_multi, {MT_OPT_LIST}, F32, F32, .flags = MT_SCALARS, .f = {0.05f, 0.9f, 0, 0, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"sgd_multi_bf16_o2_bf16_skipped", E_sgd_multi, {MT_OPT_LIST}, BF16, BF16, .flags = MT_O2 | MT_STEPS | MT_SKIP, .f = {0.05f, 0.9f, 0, 1e-4f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    /* adam_multi: s = {.., step}, f = {lr, beta1, beta2, eps, weight_decay, grad_scale}. */
    {"adam_multi_f32_step1", E_adam_multi, {MT_OPT_LIST, 1}, F32, F32, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 0, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"adam_multi_f32_step1000_wd", E_adam_multi, {MT_OPT_LIST, 1000}, F32, F32, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"adam_multi_f16_step2", E_adam_multi, {MT_OPT_LIST, 2}, F16, F32, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 0, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"adamw_multi_f16_o2_f16_step10", E_adam_multi, {MT_OPT_LIST, 10}, F16, F16, .flags = MT_O2 | DECOUPLED, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"adamw_multi_bf16_o2_bf16_step3", E_adam_multi, {MT_OPT_LIST, 3}, BF16, BF16, .flags = MT_O2 | DECOUPLED, .f = {3e-4f, 0.8f, 0.99f, 1e-6f, 0.1f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"adam_multi_f32_o2_f16_step2", E_adam_multi, {MT_OPT_LIST, 2}, F32, F16, .flags = MT_O2, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 0, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"adam_multi_bf16_o3_bf16_wd_step7", E_adam_multi, {MT_OPT_LIST, 7}, BF16, BF16, .flags = MT_O3, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"adamw_multi_f16_o3_f16_step1", E_adam_multi, {MT_OPT_LIST, 1}, F16, F16, .flags = MT_O3 | DECOUPLED, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"adamw_multi_bf16_o2_bf16_steps", E_adam_multi, {MT_OPT_LIST, 0}, BF16, BF16, .flags = MT_O2 | DECOUPLED | MT_STEPS, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"adam_multi_f32_scalars_step5", E_adam_multi, {MT_OPT_LIST, 5}, F32, F32, .flags = MT_SCALARS, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 0, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    {"adamw_multi_f16_o3_f16_skipped", E_adam_multi, {MT_OPT_LIST, 4}, F16, F16, .flags = MT_O3 | DECOUPLED | MT_STEPS | MT_SKIP, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, MT_GS}, .tol = MT_TOL_OPT, .lo = -1024, .hi = 1024},
    /* lamb_multi: s = {.., step}, f = {lr, beta1, beta2, eps, weight_decay, max_grad_norm,
     * grad_scale}; a max_grad_norm of 1 clips these lists (norm about 300), 1e6 does not. */
    {"lamb_multi_f32_clip_wd", E_lamb_multi, {MT_OPT_LIST, 1}, F32, F32, .flags = DECOUPLED, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 1e-2f, 1.0f, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_f32_adapt_all_noclip", E_lamb_multi, {MT_OPT_LIST, 10}, F32, F32, .flags = DECOUPLED | MT_ADAPT_ALL, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 0, 0, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_f32_clip_not_reached", E_lamb_multi, {MT_OPT_LIST, 2}, F32, F32, .flags = DECOUPLED, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 1e-2f, 1e6f, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_f32_l2_no_bc_no_avg", E_lamb_multi, {MT_OPT_LIST, 3}, F32, F32, .flags = MT_NO_BIAS_CORR | MT_NO_GRAD_AVG, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 1e-2f, 1.0f, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_f32_no_trust_ratio", E_lamb_multi, {MT_OPT_LIST, 3}, F32, F32, .flags = DECOUPLED, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 0, 1.0f, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_bf16_clip_wd", E_lamb_multi, {MT_OPT_LIST, 8}, BF16, F32, .flags = DECOUPLED, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 1e-2f, 1.0f, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_f16_o2_f16_clip_adapt_all", E_lamb_multi, {MT_OPT_LIST, 5}, F16, F16, .flags = MT_O2 | DECOUPLED | MT_ADAPT_ALL, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 1e-2f, 1.0f, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_bf16_o2_bf16_clip", E_lamb_multi, {MT_OPT_LIST, 1}, BF16, BF16, .flags = MT_O2 | DECOUPLED, .f = {2e-3f, 0.8f, 0.99f, 1e-6f, 0.1f, 1.0f, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_f32_o2_bf16_adapt_all", E_lamb_multi, {MT_OPT_LIST, 20}, F32, BF16, .flags = MT_O2 | DECOUPLED | MT_ADAPT_ALL, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 0, 0, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_bf16_o3_bf16_clip", E_lamb_multi, {MT_OPT_LIST, 2}, BF16, BF16, .flags = MT_O3 | DECOUPLED, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 1e-2f, 1.0f, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_f16_o3_f16_adapt_all", E_lamb_multi, {MT_OPT_LIST, 1}, F16, F16, .flags = MT_O3 | DECOUPLED | MT_ADAPT_ALL, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 0, 1.0f, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_bf16_o2_bf16_steps_clip", E_lamb_multi, {MT_OPT_LIST, 0}, BF16, BF16, .flags = MT_O2 | DECOUPLED | MT_STEPS, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 1e-2f, 1.0f, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_f32_scalars_clip", E_lamb_multi, {MT_OPT_LIST, 4}, F32, F32, .flags = DECOUPLED | MT_SCALARS, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 1e-2f, 1.0f, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    {"lamb_multi_f16_o2_f16_skipped", E_lamb_multi, {MT_OPT_LIST, 6}, F16, F16, .flags = MT_O2 | DECOUPLED | MT_STEPS | MT_SKIP, .f = {1e-3f, 0.9f, 0.999f, 1e-6f, 1e-2f, 1.0f, MT_GS}, .tol = MT_TOL_LAMB, .lo = -1024, .hi = 1024},
    /* unscale_multi (one multiply: exact bits, the flag too): f = {inv_scale, found_inf}. */
    {"unscale_multi_f32_specials", E_unscale_multi, {MT_FLAT_LIST}, F32, .f = {1.0f / 65536}, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"unscale_multi_f16_clean", E_unscale_multi, {MT_FLAT_LIST}, F16, .f = {1.0f / 1024}, .tol = EXACT, .lo = -60000, .hi = 60000},
    {"unscale_multi_bf16_specials", E_unscale_multi, {MT_FLAT_LIST}, BF16, .f = {0.7f}, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"unscale_multi_f32_in_place_specials", E_unscale_multi, {MT_FLAT_LIST}, F32, .flags = MT_IN_PLACE, .f = {1.0f / 3}, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"unscale_multi_f16_scalar", E_unscale_multi, {MT_FLAT_LIST}, F16, .flags = MT_SCALARS, .f = {0.7f / 1024}, .tol = EXACT, .lo = -60000, .hi = 60000},
    {"unscale_multi_bf16_flag_kept", E_unscale_multi, {MT_FLAT_LIST}, BF16, .f = {0.125f, 1}, .tol = EXACT, .lo = -4, .hi = 4},
    {"unscale_multi_f32_all_empty", E_unscale_multi, {3}, F32, .flags = MT_ALL_EMPTY, .f = {0.5f}, .tol = EXACT, .lo = -4, .hi = 4},
    /* nonfinite_multi: the flag, exact; f = {_, found_inf}. */
    {"nonfinite_multi_f32_specials", E_nonfinite_multi, {MT_FLAT_LIST}, F32, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"nonfinite_multi_f16_clean", E_nonfinite_multi, {MT_FLAT_LIST}, F16, .tol = EXACT, .lo = -60000, .hi = 60000},
    {"nonfinite_multi_bf16_specials", E_nonfinite_multi, {MT_FLAT_LIST}, BF16, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"nonfinite_multi_f16_one_inf_last", E_nonfinite_multi, {MT_FLAT_LIST}, F16, .flags = MT_ONE_INF, .tol = EXACT, .lo = -4, .hi = 4},
    {"nonfinite_multi_bf16_one_inf_last", E_nonfinite_multi, {MT_FLAT_LIST}, BF16, .flags = MT_ONE_INF, .tol = EXACT, .lo = -4, .hi = 4},
    {"nonfinite_multi_f32_flag_kept", E_nonfinite_multi, {MT_FLAT_LIST}, F32, .f = {0, 1}, .tol = EXACT, .lo = -4, .hi = 4},
    /* sum_squares_multi: f64 sums in other orders, one rounding to f32: an ulp. */
    {"sum_squares_multi_f32", E_sum_squares_multi, {MT_FLAT_LIST}, F32, .tol = TOL_ULPS(0, 0, 1), .lo = -1, .hi = 1},
    {"sum_squares_multi_f16", E_sum_squares_multi, {MT_FLAT_LIST}, F16, .tol = TOL_ULPS(0, 0, 1), .lo = -60000, .hi = 60000},
    {"sum_squares_multi_bf16", E_sum_squares_multi, {MT_FLAT_LIST}, BF16, .tol = TOL_ULPS(0, 0, 1), .lo = -1, .hi = 1},
    {"sum_squares_multi_f32_specials", E_sum_squares_multi, {MT_FLAT_LIST}, F32, .tol = TOL_ULPS(0, 0, 1), .lo = -1, .hi = 1, .specials = true},
    {"sum_squares_multi_f32_all_empty", E_sum_squares_multi, {3}, F32, .flags = MT_ALL_EMPTY, .tol = EXACT},
};

#endif
