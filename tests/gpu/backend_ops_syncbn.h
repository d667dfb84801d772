/* test_backend_ops: the synchronised batch norm entries (bn_channel_sums, bn_sync_stats,
 * bn_bwd_elemt), their setups, runs and rows. Included by test_backend_ops.c after op_row, its
 * helpers, the batch norm helpers (bn_desc, bn_numel) and the tolerance macros.
 *
 * Every row is EXACT: core/backend.h promises the same bits on both backends (each channel summed
 * in batch norm's tile/lane order in double and rounded to f32 once; the statistics and dx from
 * kernels/math/sync_batchnorm.h with every product rounded on its own). Rows with specials are
 * TOL(0, 0), the same values with NaN only in place: which NaN a sum of several propagates, and
 * its sign, is the hardware's (x86 keeps an operand's payload, a GPU gives its canonical NaN). The sums that
 * bn_sync_stats and bn_bwd_elemt take are drawn as all-reduced sums over `count` values would
 * be, so that the variance stays positive and the coefficients finite. */
#ifndef AMP_TESTS_GPU_BACKEND_OPS_SYNCBN_H
#define AMP_TESTS_GPU_BACKEND_OPS_SYNCBN_H

/* Row variants of the synchronised batch norm entries (NO_AFFINE is test_backend_ops.c's). */
enum {
    SB_DY = 1 << 18,        /* bn_channel_sums: the backward's sums (dy given) */
    SB_NO_CENTER = 1 << 19, /* bn_channel_sums, bn_sync_stats: center NULL (0) */
    SB_MEAN_ONLY = 1 << 20, /* bn_sync_stats: s2 NULL, only mean written */
    SB_BARE = 1 << 21,      /* bn_sync_stats: var, invstd and the running stats NULL */
};

/* bn_channel_sums: s = {n, c, hw}; x in the row's range, center in the middle of it give or
 * take 0.25 (a provisional mean), dy in [-1, 1). */
static void setup_bn_channel_sums(const op_row *r, tcase *c) {
    int64_t ch = r->s[1];
    double mid = 0.5 * ((double)r->lo + (double)r->hi);
    in_main(r, c, 0, "x", ek_of(r->dt), bn_numel(r));
    if (!(r->flags & SB_NO_CENTER))
        in_range(c, 1, "center", ROLE_IN, EK_F32, ch, mid - 0.25, mid + 0.25);
    if (r->flags & SB_DY) in_range(c, 2, "dy", ROLE_IN, ek_of(r->dt), bn_numel(r), -1, 1);
    slot_decl(c, 3, "out1", ROLE_OUT, EK_F32, ch);
    slot_decl(c, 4, "out2", ROLE_OUT, EK_F32, ch);
}
static amp_status run_bn_channel_sums(const op_row *r, const amp_backend *be, void *const *p) {
    amp_bn_desc d = bn_desc(r);
    return be->k.bn_channel_sums(be->dev, &d, p[0], p[1], p[2], p[3], p[4]);
}

/* bn_sync_stats: s = {c, count}, f = {eps, momentum}; d = [1, c, 1]. s1 / count in
 * [-0.5, 0.5) and s2 / count in [0.5, 2): the biased variance s2 / count - (s1 / count)^2 is
 * positive. */
static amp_bn_desc bn_sync_desc(const op_row *r) {
    return (amp_bn_desc){.n = 1, .c = r->s[0], .hw = 1, .eps = r->f[0], .momentum = r->f[1],
                         .dtype = r->dt};
}
static void setup_bn_sync_stats(const op_row *r, tcase *c) {
    int64_t ch = r->s[0];
    double n = (double)r->s[1];
    if (!(r->flags & SB_NO_CENTER)) in_range(c, 0, "center", ROLE_IN, EK_F32, ch, -2, 3);
    in_range(c, 1, "s1", ROLE_IN, EK_F32, ch, -0.5 * n, 0.5 * n);
    if (!(r->flags & SB_MEAN_ONLY)) in_range(c, 2, "s2", ROLE_IN, EK_F32, ch, 0.5 * n, 2 * n);
    slot_decl(c, 3, "mean", ROLE_OUT, EK_F32, ch);
    if (r->flags & SB_BARE) return;
    if (r->flags & SB_MEAN_ONLY) { /* var and invstd must come back as they went in */
        in_range(c, 4, "var", ROLE_INOUT, EK_F32, ch, 1, 2);
        in_range(c, 5, "invstd", ROLE_INOUT, EK_F32, ch, 1, 2);
    } else {
        slot_decl(c, 4, "var", ROLE_OUT, EK_F32, ch);
        slot_decl(c, 5, "invstd", ROLE_OUT, EK_F32, ch);
    }
    in_range(c, 6, "running_mean", ROLE_INOUT, EK_F32, ch, -0.5, 0.5);
    in_range(c, 7, "running_var", ROLE_INOUT, EK_F32, ch, 0.5, 2);
}
static amp_status run_bn_sync_stats(const op_row *r, const amp_backend *be, void *const *p) {
    amp_bn_desc d = bn_sync_desc(r);
    return be->k.bn_sync_stats(be->dev, &d, r->s[1], p[0], p[1], p[2], p[3], p[4], p[5], p[6],
                               p[7]);
}

/* bn_bwd_elemt: s = {n, c, hw, count}, f = {eps}; x in the row's range, dy in [-1, 1), mean in
 * the middle of x's range give or take 0.25, invstd in [0.5, 2), gamma in [0.5, 1.5), sum_dy /
 * count and sum_dy_xmu / count in [-0.1, 0.1). */
static void setup_bn_bwd_elemt(const op_row *r, tcase *c) {
    int64_t ch = r->s[1];
    double n = (double)r->s[3], mid = 0.5 * ((double)r->lo + (double)r->hi);
    in_main(r, c, 0, "x", ek_of(r->dt), bn_numel(r));
    in_range(c, 1, "dy", ROLE_IN, ek_of(r->dt), bn_numel(r), -1, 1);
    if (!(r->flags & NO_AFFINE)) in_range(c, 2, "gamma", ROLE_IN, EK_F32, ch, 0.5, 1.5);
    in_range(c, 3, "mean", ROLE_IN, EK_F32, ch, mid - 0.25, mid + 0.25);
    in_range(c, 4, "invstd", ROLE_IN, EK_F32, ch, 0.5, 2);
    in_range(c, 5, "sum_dy", ROLE_IN, EK_F32, ch, -0.1 * n, 0.1 * n);
    in_range(c, 6, "sum_dy_xmu", ROLE_IN, EK_F32, ch, -0.1 * n, 0.1 * n);
    slot_decl(c, 7, "dx", ROLE_OUT, ek_of(r->dt), bn_numel(r));
}
static amp_status run_bn_bwd_elemt(const op_row *r, const amp_backend *be, void *const *p) {
    amp_bn_desc d = bn_desc(r);
    return be->k.bn_bwd_elemt(be->dev, &d, r->s[3], p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
}

/* ---- The rows ------------------------------------------------------------------------------- */

/* The ConvNet's layer1 and layer2 activations at batch 8 (as the batch norm rows), an odd shape,
 * a 1-d batch norm (hw = 1) and planes past one tile; four ranks' count where a count is given. */
static const op_row syncbn_rows[] = {
    {"bn_channel_sums_f32_l1", E_bn_channel_sums, {8, 16, 784}, F32, .tol = EXACT, .lo = -2, .hi = 3},
    {"bn_channel_sums_f32_l1_dy", E_bn_channel_sums, {8, 16, 784}, F32, .flags = SB_DY, .tol = EXACT, .lo = -2, .hi = 3},
    {"bn_channel_sums_bf16_l2_uncentred", E_bn_channel_sums, {8, 32, 196}, BF16, .flags = SB_NO_CENTER, .tol = EXACT, .lo = -2, .hi = 3},
    {"bn_channel_sums_bf16_l2_dy", E_bn_channel_sums, {8, 32, 196}, BF16, .flags = SB_DY | SB_NO_CENTER, .tol = EXACT, .lo = -2, .hi = 3},
    {"bn_channel_sums_f16_odd", E_bn_channel_sums, {3, 5, 7}, F16, .tol = EXACT, .lo = -2, .hi = 3},
    {"bn_channel_sums_f16_1d_dy", E_bn_channel_sums, {300, 7, 1}, F16, .flags = SB_DY, .tol = EXACT, .lo = -2, .hi = 3},
    {"bn_channel_sums_f32_tiles_specials", E_bn_channel_sums, {2, 3, 4100}, F32, .tol = TOL(0, 0), .lo = -2, .hi = 3, .specials = true},
    {"bn_sync_stats_f32", E_bn_sync_stats, {64, 4 * 8 * 784}, F32, .f = {1e-5f, 0.1f}, .tol = EXACT},
    {"bn_sync_stats_f32_uncentred", E_bn_sync_stats, {33, 7}, F32, .flags = SB_NO_CENTER, .f = {1e-3f, 0.3f}, .tol = EXACT},
    {"bn_sync_stats_f32_mean_only", E_bn_sync_stats, {33, 1}, F32, .flags = SB_MEAN_ONLY, .f = {1e-5f, 0.1f}, .tol = EXACT},
    {"bn_sync_stats_f32_bare", E_bn_sync_stats, {300, 2}, F32, .flags = SB_BARE | SB_NO_CENTER, .f = {1e-5f, 0.1f}, .tol = EXACT},
    {"bn_bwd_elemt_f32_l1", E_bn_bwd_elemt, {8, 16, 784, 4 * 8 * 784}, F32, .f = {1e-5f}, .tol = EXACT, .lo = -2, .hi = 3},
    {"bn_bwd_elemt_bf16_l2_bare", E_bn_bwd_elemt, {8, 32, 196, 4 * 8 * 196}, BF16, .flags = NO_AFFINE, .f = {1e-5f}, .tol = EXACT, .lo = -2, .hi = 3},
    {"bn_bwd_elemt_f16_odd", E_bn_bwd_elemt, {3, 5, 7, 21}, F16, .f = {1e-3f}, .tol = EXACT, .lo = -2, .hi = 3},
    {"bn_bwd_elemt_f32_specials", E_bn_bwd_elemt, {2, 3, 4100, 8200}, F32, .f = {1e-5f}, .tol = TOL(0, 0), .lo = -2, .hi = 3, .specials = true},
};

#endif
