/* test_backend_ops: the per-tensor optimizer updates (sgd_update, adam_update) and the loss
 * scaler's per-tensor passes (unscale, nonfinite, sum_squares), their setups, runs and rows;
 * backend_ops_multi.h has their multi-tensor versions. Included by test_backend_ops.c after
 * op_row, its helpers and the tolerance macros. */
#ifndef AMP_TESTS_GPU_BACKEND_OPS_OPTIM_H
#define AMP_TESTS_GPU_BACKEND_OPS_OPTIM_H

/* sgd_update: s = {n}, f = {lr, momentum, dampening, weight_decay}; grad (dt) in the row's range,
 * param in [-1, 1), momentum buffer (only with momentum) in [-0.1, 0.1). */
static void setup_sgd(const op_row *r, tcase *c) {
    in_range(c, 0, "param", ROLE_INOUT, EK_F32, r->s[0], -1, 1);
    in_main(r, c, 1, "grad", ek_of(r->dt), r->s[0]);
    if (r->f[1] != 0.0f) in_range(c, 2, "momentum_buf", ROLE_INOUT, EK_F32, r->s[0], -0.1, 0.1);
}
static amp_status run_sgd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_sgd_desc d = {.lr = r->f[0], .momentum = r->f[1], .dampening = r->f[2],
                      .weight_decay = r->f[3], .nesterov = r->flags & NESTEROV,
                      .first_step = r->flags & FIRST_STEP};
    return be->sgd_update(&d, r->s[0], p[0], p[1], r->dt, p[2]);
}

/* adam_update: s = {n, step}, f = {lr, beta1, beta2, eps, weight_decay}; grad (dt) in the row's
 * range, param in [-1, 1), exp_avg in [-0.1, 0.1), exp_avg_sq in [0, 0.01). */
static void setup_adam(const op_row *r, tcase *c) {
    in_range(c, 0, "param", ROLE_INOUT, EK_F32, r->s[0], -1, 1);
    in_main(r, c, 1, "grad", ek_of(r->dt), r->s[0]);
    in_range(c, 2, "exp_avg", ROLE_INOUT, EK_F32, r->s[0], -0.1, 0.1);
    in_range(c, 3, "exp_avg_sq", ROLE_INOUT, EK_F32, r->s[0], 0, 0.01);
}
static amp_status run_adam(const op_row *r, const amp_backend *be, void *const *p) {
    amp_adam_desc d = {.lr = r->f[0], .beta1 = r->f[1], .beta2 = r->f[2], .eps = r->f[3],
                       .weight_decay = r->f[4], .decoupled = r->flags & DECOUPLED,
                       .step = r->s[1]};
    return be->adam_update(&d, r->s[0], p[0], p[1], r->dt, p[2], p[3]);
}

/* unscale: s = {n}, f = {inv_scale}; grad (dt) with specials where the row asks, out f32, and the
 * found_inf flag (f32, starts at 0; a backend writes 1.0f or leaves it). */
static void setup_unscale(const op_row *r, tcase *c) {
    in_main(r, c, 0, "grad", ek_of(r->dt), r->s[0]);
    slot_decl(c, 1, "out", ROLE_OUT, EK_F32, r->s[0]);
    in_range(c, 2, "found_inf", ROLE_INOUT, EK_F32, 1, 0, 0);
}
static amp_status run_unscale(const op_row *r, const amp_backend *be, void *const *p) {
    return be->unscale(r->dt, r->s[0], p[0], r->f[0], p[1], p[2]);
}

/* sum_squares: s = {n}. */
static void setup_sum_squares(const op_row *r, tcase *c) {
    in_main(r, c, 0, "x", ek_of(r->dt), r->s[0]);
    slot_decl(c, 1, "out", ROLE_OUT, EK_F32, 1);
}
static amp_status run_sum_squares(const op_row *r, const amp_backend *be, void *const *p) {
    return be->sum_squares(r->dt, r->s[0], p[0], p[1]);
}

/* nonfinite: s = {n}; x (dt) with specials where the row asks, the found_inf flag as unscale's. */
static void setup_nonfinite(const op_row *r, tcase *c) {
    in_main(r, c, 0, "x", ek_of(r->dt), r->s[0]);
    in_range(c, 1, "found_inf", ROLE_INOUT, EK_F32, 1, 0, 0);
}
static amp_status run_nonfinite(const op_row *r, const amp_backend *be, void *const *p) {
    return be->nonfinite(r->dt, r->s[0], p[0], p[1]);
}

/* ---- The rows ------------------------------------------------------------------------------- */

static const op_row optim_rows[] = {
    /* Optimizers: f = {lr, momentum, dampening, weight_decay} / {lr, beta1, beta2, eps, wd}. */
    {"sgd_f32_plain", E_SGD, {ACT_L1}, F32, .f = {0.1f}, .tol = TOL(1e-6, 1e-6), .lo = -1, .hi = 1},
    {"sgd_f32_momentum_wd", E_SGD, {10007}, F32, .f = {0.05f, 0.9f, 0.1f, 1e-4f}, .tol = TOL(1e-6, 1e-6), .lo = -1, .hi = 1},
    {"sgd_f16_nesterov", E_SGD, {10007}, F16, .flags = NESTEROV, .f = {0.05f, 0.9f, 0, 5e-4f}, .tol = TOL(1e-6, 1e-6), .lo = -1, .hi = 1},
    {"sgd_bf16_first_step", E_SGD, {10007}, BF16, .flags = FIRST_STEP, .f = {0.1f, 0.9f, 0.5f, 0}, .tol = TOL(1e-6, 1e-6), .lo = -1, .hi = 1},
    {"adam_f32_step1", E_ADAM, {ACT_L1, 1}, F32, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 0}, .tol = TOL(1e-6, 1e-6), .lo = -1, .hi = 1},
    {"adam_f32_step1000_wd", E_ADAM, {10007, 1000}, F32, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f}, .tol = TOL(1e-6, 1e-6), .lo = -1, .hi = 1},
    {"adamw_f16_step10", E_ADAM, {10007, 10}, F16, .flags = DECOUPLED, .f = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f}, .tol = TOL(1e-6, 1e-6), .lo = -1, .hi = 1},
    /* unscale multiplies once (exact bits); the flag must agree too. */
    {"unscale_f32_specials", E_UNSCALE, {ACT_L1}, F32, .f = {1.0f / 65536}, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"unscale_f16", E_UNSCALE, {10007}, F16, .f = {1.0f / 1024}, .tol = EXACT, .lo = -60000, .hi = 60000},
    {"unscale_bf16_specials", E_UNSCALE, {10007}, BF16, .f = {0.125f}, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"nonfinite_f32_specials", E_NONFINITE, {ACT_L1}, F32, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"nonfinite_f16_clean", E_NONFINITE, {10007}, F16, .tol = EXACT, .lo = -60000, .hi = 60000},
    {"nonfinite_bf16_specials", E_NONFINITE, {10007}, BF16, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"sum_squares_f32", E_SUM_SQUARES, {ACT_L1}, F32, .tol = TOL(1e-6, 1e-5), .lo = -1, .hi = 1},
    {"sum_squares_f16", E_SUM_SQUARES, {10007}, F16, .tol = TOL(1e-6, 1e-5), .lo = -1, .hi = 1},
    {"adam_bf16_step3", E_ADAM, {10007, 3}, BF16, .f = {3e-4f, 0.8f, 0.99f, 1e-6f, 0}, .tol = TOL(1e-6, 1e-6), .lo = -1, .hi = 1},
};

#endif
