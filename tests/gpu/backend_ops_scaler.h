/* test_backend_ops: the loss scaler's entries (scaler_seed, scaler_clip, scaler_update), their
 * setups, runs and rows. Included by test_backend_ops.c after op_row, its helpers and the
 * tolerance macros.
 *
 * Each row's slot 0 is one amp_scaler_dev in backend memory (EK_SCALER: compared bit for bit,
 * reported field by field); both backends apply kernels/math/scaler.h's function to it on one
 * thread, so every row is exact. The state starts with the row's scale and counters and a
 * distinct value in every other field, so a field that an entry should leave alone and one that
 * it should write both show. amp_scaler_params is host memory, read at the call (core/backend.h),
 * so run builds it on its stack. */
#ifndef AMP_TESTS_GPU_BACKEND_OPS_SCALER_H
#define AMP_TESTS_GPU_BACKEND_OPS_SCALER_H

/* Row variants of the scaler entries. */
enum {
    SC_NO_F32 = 1 << 10,        /* scaler_clip: sumsq_f32 NULL (read as 0) */
    SC_NO_HALF = 1 << 11,       /* scaler_clip: sumsq_half NULL */
    SC_FOUND = 1 << 12,         /* scaler_update: *found_inf = 1 */
    SC_NO_FLAG = 1 << 13,       /* scaler_update: found_inf NULL */
    SC_DYNAMIC = 1 << 14,       /* amp_scaler_params.dynamic */
    SC_CHECK_OVERFLOW = 1 << 15, /* amp_scaler_params.check_overflow */
    SC_CHECKS = 1 << 16,        /* scaler_update's checks */
    SC_OTHER_SKIP = 1 << 17,    /* scaler_update's other_skip */
};

/* Slot 0: the state, scale = f[0], growth_tracker = s[0], hysteresis_left = s[1], the rest
 * distinct values of a step in progress. */
static amp_scaler_dev *scaler_state(const op_row *r, tcase *c) {
    amp_scaler_dev *s = slot_decl(c, 0, "state", ROLE_INOUT, EK_SCALER, 1);
    *s = (amp_scaler_dev){.scale = r->f[0], .used_scale = 1234.5f, .inv_used_scale = 0.375f,
                          .half_grad_scale = 0.0625f, .clip_coef = 0.5f, .grad_norm = 42.25f,
                          .hysteresis_left = (int32_t)r->s[1], .last_skipped = 1,
                          .overflow_scale = 96.0f, .overflow_hysteresis = 2,
                          .growth_tracker = r->s[0], .total_steps = 1000 + rng_below(&c->rng, 99),
                          .skipped_steps = 17, .overflows = 5, .taken_steps = 978};
    return s;
}

/* A one-f32 input slot holding v. */
static void scaler_scalar(tcase *c, int i, const char *name, role ro, float v) {
    float *p = slot_decl(c, i, name, ro, EK_F32, 1);
    p[0] = v;
}

/* scaler_seed: f = {scale, cap}. */
static void setup_scaler_seed(const op_row *r, tcase *c) {
    scaler_state(r, c);
}
static amp_status run_scaler_seed(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.scaler_seed(be->dev, p[0], r->f[1]);
}

/* scaler_clip: f = {scale, sumsq_f32, sumsq_half, max_norm}; the state seeded on the host first
 * (amp_scaler_dev_seed with cap = scale: used_scale = scale, half_grad_scale = 1 / scale), as
 * a step has it when it clips. */
static void setup_scaler_clip(const op_row *r, tcase *c) {
    amp_scaler_dev_seed(scaler_state(r, c), r->f[0]);
    if (!(r->flags & SC_NO_F32)) scaler_scalar(c, 1, "sumsq_f32", ROLE_IN, r->f[1]);
    if (!(r->flags & SC_NO_HALF)) scaler_scalar(c, 2, "sumsq_half", ROLE_IN, r->f[2]);
}
static amp_status run_scaler_clip(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.scaler_clip(be->dev, p[0], p[1], p[2], r->f[3]);
}

/* scaler_update: s = {growth_tracker, hysteresis_left, growth_interval, hysteresis}, f = {scale,
 * growth_factor, backoff_factor, floor, max_scale}; found_inf (1 with SC_FOUND, else 0; absent
 * with SC_NO_FLAG) is zeroed by the entry. */
static void setup_scaler_update(const op_row *r, tcase *c) {
    scaler_state(r, c);
    if (!(r->flags & SC_NO_FLAG))
        scaler_scalar(c, 1, "found_inf", ROLE_INOUT, r->flags & SC_FOUND ? 1.0f : 0.0f);
}
static amp_status run_scaler_update(const op_row *r, const amp_backend *be, void *const *p) {
    amp_scaler_params sp = {.growth_factor = r->f[1], .backoff_factor = r->f[2],
                            .floor = r->f[3], .max_scale = r->f[4],
                            .growth_interval = r->s[2], .hysteresis = (int32_t)r->s[3],
                            .dynamic = !!(r->flags & SC_DYNAMIC),
                            .check_overflow = !!(r->flags & SC_CHECK_OVERFLOW)};
    return be->k.scaler_update(be->dev, p[0], &sp, p[1], r->flags & SC_CHECKS,
                               r->flags & SC_OTHER_SKIP);
}

/* ---- The rows ------------------------------------------------------------------------------- */

/* torch.amp.GradScaler's defaults with Apex's bounds: growth 2 every 2000 steps, backoff 0.5,
 * floor 1, max 2^24. */
#define SC_TORCH 2.0f, 0.5f, 1.0f, 0x1p24f
#define SC_TORCH_DYNAMIC (SC_DYNAMIC | SC_CHECK_OVERFLOW | SC_CHECKS)

static const op_row scaler_rows[] = {
    /* seed: f = {scale, cap}; 65504 is f16's largest value (a half loss's cap). */
    {"scaler_seed_cap_above", E_scaler_seed, {0}, F32, .f = {65536.0f, INFINITY}, .tol = EXACT},
    {"scaler_seed_cap_below", E_scaler_seed, {0}, F32, .f = {0x1p24f, 65504.0f}, .tol = EXACT},
    {"scaler_seed_cap_equal_odd", E_scaler_seed, {0}, F32, .f = {3.0f, 3.0f}, .tol = EXACT},
    /* clip: f = {scale, sumsq_f32, sumsq_half, max_norm}; half sums are of gradients still
     * scaled by 1024. */
    {"scaler_clip_f32_only", E_scaler_clip, {0}, F32, .flags = SC_NO_HALF, .f = {1024.0f, 123.456f, 0, 1.0f}, .tol = EXACT},
    {"scaler_clip_half_only", E_scaler_clip, {0}, F32, .flags = SC_NO_F32, .f = {1024.0f, 0, 7.5e7f, 1.0f}, .tol = EXACT},
    {"scaler_clip_both", E_scaler_clip, {0}, F32, .f = {1024.0f, 3.25f, 2.9e6f, 0.5f}, .tol = EXACT},
    {"scaler_clip_norm_below_max", E_scaler_clip, {0}, F32, .f = {1024.0f, 0.5f, 1.5e5f, 5.0f}, .tol = EXACT},
    {"scaler_clip_nan_norm", E_scaler_clip, {0}, F32, .f = {1024.0f, NAN, 1.0f, 1.0f}, .tol = EXACT},
    /* update: s = {growth_tracker, hysteresis_left, growth_interval, hysteresis}, f = {scale,
     * growth, backoff, floor, max_scale}. */
    {"scaler_update_clean_dynamic", E_scaler_update, {5, 1, 2000, 1}, F32, .flags = SC_TORCH_DYNAMIC, .f = {65536.0f, SC_TORCH}, .tol = EXACT},
    {"scaler_update_growth_at_interval", E_scaler_update, {1999, 1, 2000, 2}, F32, .flags = SC_TORCH_DYNAMIC, .f = {65536.0f, SC_TORCH}, .tol = EXACT},
    {"scaler_update_growth_at_max_scale", E_scaler_update, {1999, 1, 2000, 1}, F32, .flags = SC_TORCH_DYNAMIC, .f = {0x1p24f, SC_TORCH}, .tol = EXACT},
    {"scaler_update_growth_clamped_to_max", E_scaler_update, {9, 1, 10, 1}, F32, .flags = SC_TORCH_DYNAMIC, .f = {0x1p24f * 0.75f, SC_TORCH}, .tol = EXACT},
    {"scaler_update_growth_past_f32", E_scaler_update, {0, 1, 1, 1}, F32, .flags = SC_TORCH_DYNAMIC, .f = {0x1p127f, 2.0f, 0.5f, 1.0f, INFINITY}, .tol = EXACT},
    {"scaler_update_found_backoff", E_scaler_update, {77, 1, 2000, 1}, F32, .flags = SC_TORCH_DYNAMIC | SC_FOUND, .f = {65536.0f, SC_TORCH}, .tol = EXACT},
    {"scaler_update_found_hysteresis", E_scaler_update, {77, 3, 2000, 3}, F32, .flags = SC_TORCH_DYNAMIC | SC_FOUND, .f = {65536.0f, SC_TORCH}, .tol = EXACT},
    {"scaler_update_found_to_floor", E_scaler_update, {3, 1, 2000, 1}, F32, .flags = SC_TORCH_DYNAMIC | SC_FOUND, .f = {1.5f, SC_TORCH}, .tol = EXACT},
    {"scaler_update_found_odd_backoff", E_scaler_update, {3, 1, 2000, 1}, F32, .flags = SC_TORCH_DYNAMIC | SC_FOUND, .f = {3000.0f, 2.0f, 0.3f, 0x1p-126f, 0x1p24f}, .tol = EXACT},
    {"scaler_update_static_found", E_scaler_update, {3, 1, 2000, 1}, F32, .flags = SC_CHECK_OVERFLOW | SC_CHECKS | SC_FOUND, .f = {128.0f, SC_TORCH}, .tol = EXACT},
    {"scaler_update_static_clean", E_scaler_update, {1999, 1, 2000, 1}, F32, .flags = SC_CHECK_OVERFLOW | SC_CHECKS, .f = {128.0f, SC_TORCH}, .tol = EXACT},
    {"scaler_update_found_checks_only", E_scaler_update, {3, 1, 2000, 1}, F32, .flags = SC_DYNAMIC | SC_CHECKS | SC_FOUND, .f = {65536.0f, SC_TORCH}, .tol = EXACT},
    {"scaler_update_found_unchecked", E_scaler_update, {3, 1, 2000, 1}, F32, .flags = SC_DYNAMIC | SC_FOUND, .f = {65536.0f, SC_TORCH}, .tol = EXACT},
    {"scaler_update_other_skip", E_scaler_update, {3, 1, 2000, 1}, F32, .flags = SC_TORCH_DYNAMIC | SC_OTHER_SKIP, .f = {65536.0f, SC_TORCH}, .tol = EXACT},
    {"scaler_update_no_flag", E_scaler_update, {1999, 1, 2000, 1}, F32, .flags = SC_TORCH_DYNAMIC | SC_NO_FLAG, .f = {65536.0f, SC_TORCH}, .tol = EXACT},
};

#endif
