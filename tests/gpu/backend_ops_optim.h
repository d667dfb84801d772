/* test_backend_ops: the loss scaler's per-tensor unscale, its setup, run and rows;
 * backend_ops_multi.h has the multi-tensor optimizer and scaler entries. Included by
 * test_backend_ops.c after op_row, its helpers and the tolerance macros. */
#ifndef AMP_TESTS_GPU_BACKEND_OPS_OPTIM_H
#define AMP_TESTS_GPU_BACKEND_OPS_OPTIM_H

/* unscale: s = {n}, f = {inv_scale}; grad (dt) with specials where the row asks, out f32, and the
 * found_inf flag (f32, starts at 0; a backend writes 1.0f or leaves it). */
static void setup_unscale(const op_row *r, tcase *c) {
    in_main(r, c, 0, "grad", ek_of(r->dt), r->s[0]);
    slot_decl(c, 1, "out", ROLE_OUT, EK_F32, r->s[0]);
    in_range(c, 2, "found_inf", ROLE_INOUT, EK_F32, 1, 0, 0);
}
static amp_status run_unscale(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.unscale(be->dev, r->dt, r->s[0], p[0], r->f[0], p[1], p[2]);
}

/* ---- The rows ------------------------------------------------------------------------------- */

static const op_row optim_rows[] = {
    /* unscale multiplies once (exact bits); the flag must agree too. */
    {"unscale_f32_specials", E_unscale, {ACT_L1}, F32, .f = {1.0f / 65536}, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"unscale_f16", E_unscale, {10007}, F16, .f = {1.0f / 1024}, .tol = EXACT, .lo = -60000, .hi = 60000},
    {"unscale_bf16_specials", E_unscale, {10007}, BF16, .f = {0.125f}, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
};

#endif
