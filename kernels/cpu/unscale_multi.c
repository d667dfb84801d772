/* CPU backend: the loss scaler's passes over a list of tensors in one call (unscale_multi,
 * nonfinite_multi, sum_squares_multi; core/backend.h states the contracts), planned by
 * core/multi_tensor.h and run by multi_tensor_apply.h's amp_cpu_mt_apply, one op each.
 *
 * unscale and nonfinite run unscale.c's piece functions, those of the per-tensor unscale entry
 * (the same test on the input, the same product, a half piece widened into out and unscaled
 * there while in L1): each piece keeps its own flag, the flags are ORed after each launch, and
 * the caller's flag is written once, after the last launch, and only when an inf/NaN was seen
 * (never cleared). As in Apex's multi_tensor_scale, whose noop check is commented out, the
 * unscale runs whatever scalars->found_inf holds: only scalars->grad_scale is read.
 *
 * sum_squares: each square in f64 (exact), each piece of 4096 elements summed in f64 (8 lanes,
 * then a fixed tree), a chunk of the plan (65536 elements) as its pieces added in order, the
 * chunks added in plan order (list order, then chunk order) in f64, one rounding to f32. The
 * bits do not depend on the thread count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/cpu/multi_tensor_apply.h"
#include "kernels/math/unscale.h"

/* ---- Checks. -------------------------------------------------------------------------------- */

static amp_status mt_check_float(const char *fn, amp_dtype dt) {
    if (dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16) return AMP_OK;
    return amp_fail(AMP_ERR_DTYPE, "%s: dtype %s, want f32, f16 or bf16", fn, amp_dtype_name(dt));
}

/* n in range, and with n > 0 the arrays set and every numel >= 0. */
static amp_status mt_check_list(const char *fn, int64_t n, const int64_t *numel, const void *x,
                                const char *x_name) {
    if (n < 0 || n > INT32_MAX)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: n = %lld tensors, want 0..%d", fn, (long long)n,
                        INT32_MAX);
    if (n == 0) return AMP_OK;
    if (!numel) return amp_fail(AMP_ERR_INVALID_ARG, "%s: numel is NULL with n = %lld", fn,
                                (long long)n);
    if (!x) return amp_fail(AMP_ERR_INVALID_ARG, "%s: %s is NULL with n = %lld", fn, x_name,
                            (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (numel[i] < 0)
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: tensor %lld has numel %lld", fn,
                            (long long)i, (long long)numel[i]);
    return AMP_OK;
}

static amp_status mt_check_ptrs(const char *fn, int64_t n, const int64_t *numel,
                                const void *const *x, const char *x_name) {
    for (int64_t i = 0; i < n; i++)
        if (numel[i] > 0 && !x[i])
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: tensor %lld (%lld elements): %s[%lld] is "
                            "NULL", fn, (long long)i, (long long)numel[i], x_name, (long long)i);
    return AMP_OK;
}

/* The planner's depth-1 table over x, with `extra` bytes after it. */
static amp_status mt_table(const char *fn, int64_t n, const int64_t *numel, const void *const *x,
                           size_t extra_bytes, amp_mt_tensor **table, void **extra) {
    AMP_TRY(amp_cpu_mt_table_alloc(fn, n, extra_bytes, table, extra));
    for (int64_t i = 0; i < n; i++) {
        (*table)[i].numel = numel[i];
        (*table)[i].ptr[0] = (void *)x[i]; /* the planner only hands addresses out */
    }
    return AMP_OK;
}

/* ---- The ops (amp_cpu_mt_apply). ------------------------------------------------------------ */

/* unscale and nonfinite: each piece's flag (1: an inf/NaN seen), ORed after each launch. */
typedef struct mt_flags {
    amp_dtype dt;
    float scale; /* unscale's */
    uint32_t bad;
    uint8_t piece_bad[AMP_CPU_MT_MAX_PIECES];
} mt_flags;

static void mt_unscale_piece(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_piece *pc) {
    mt_flags *f = ctx;
    f->piece_bad[pc->k] = (uint8_t)amp_cpu_unscale_piece(
            f->dt, amp_cpu_mt_piece_ptr(l, pc, 0), f->scale, amp_cpu_mt_piece_ptr(l, pc, 1),
            pc->len);
}

static void mt_nonfinite_piece(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_piece *pc) {
    mt_flags *f = ctx;
    f->piece_bad[pc->k] =
            (uint8_t)amp_cpu_nonfinite_piece(f->dt, amp_cpu_mt_piece_ptr(l, pc, 0), pc->len);
}

static void mt_flags_launch(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_pieces *pcs) {
    mt_flags *f = ctx;
    for (int k = 0; k < pcs->n; k++) f->bad |= f->piece_bad[k];
}

/* ---- unscale ------------------------------------------------------------------------------- */

amp_status amp_cpu_unscale_multi(amp_device_ctx *dev, amp_dtype g_dt, int64_t n,
                                 const int64_t *numel, const void *const *grad, float inv_scale,
                                 float *const *out, float *found_inf,
                                 const amp_step_scalars *scalars) {
    static const char fn[] = "amp_cpu_unscale_multi";
    AMP_TRY(mt_check_float(fn, g_dt));
    AMP_TRY(mt_check_list(fn, n, numel, grad, "grad"));
    if (n > 0 && !out)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: out is NULL with n = %lld", fn, (long long)n);
    if (!found_inf) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'found_inf' is NULL", fn);
    bool from_scalar = scalars && scalars->grad_scale;
    float scale = from_scalar ? *scalars->grad_scale : inv_scale;
    /* A device scale is used as it is, 0 included (core/backend.h: a clip coefficient of 0, from
     * an infinite norm, zeroes the gradients of a step that is then skipped); the host's must be
     * > 0, as the per-tensor entry's. */
    bool bad_scale = from_scalar ? !(scale >= 0.0f) || isinf(scale) : !(scale > 0.0f) || isinf(scale);
    if (bad_scale)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: %s = %g, want a finite value %s 0", fn,
                        from_scalar ? "*scalars->grad_scale" : "inv_scale", (double)scale,
                        from_scalar ? ">=" : ">");
    /* Each tensor as the per-tensor entry checks it (pointers, out overlapping grad other than
     * the same f32 buffer); the message names the tensor. Its scale was checked above. */
    for (int64_t i = 0; i < n; i++) {
        if (amp_backend_check_unscale(fn, g_dt, numel[i], grad[i], 1.0f, out[i], found_inf) ==
            AMP_OK)
            continue;
        char who[96];
        snprintf(who, sizeof who, "%s: tensor %lld", fn, (long long)i);
        return amp_backend_check_unscale(who, g_dt, numel[i], grad[i], 1.0f, out[i], found_inf);
    }
    if (n == 0) return AMP_OK;
    amp_mt_tensor *table;
    AMP_TRY(amp_cpu_mt_table_alloc(fn, n, 0, &table, NULL));
    for (int64_t i = 0; i < n; i++) {
        table[i].numel = numel[i];
        table[i].ptr[0] = (void *)grad[i];
        table[i].ptr[1] = out[i];
    }
    amp_mt_planner pl;
    const amp_dtype dtypes[2] = {g_dt, AMP_F32};
    amp_status s = amp_cpu_mt_planner_init(fn, &pl, 2, dtypes, table, n);
    mt_flags f = {.dt = g_dt, .scale = scale, .bad = 0};
    if (s == AMP_OK)
        amp_cpu_mt_apply(&pl, &(amp_cpu_mt_op){.piece = mt_unscale_piece,
                                               .launch_done = mt_flags_launch, .ctx = &f});
    free(table);
    if (s == AMP_OK && f.bad) *found_inf = 1.0f;
    return s;
}

/* ---- nonfinite ----------------------------------------------------------------------------- */

amp_status amp_cpu_nonfinite_multi(amp_device_ctx *dev, amp_dtype dt, int64_t n,
                                   const int64_t *numel, const void *const *x, float *found_inf) {
    static const char fn[] = "amp_cpu_nonfinite_multi";
    AMP_TRY(mt_check_float(fn, dt));
    AMP_TRY(mt_check_list(fn, n, numel, x, "x"));
    if (!found_inf) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'found_inf' is NULL", fn);
    if (n == 0) return AMP_OK;
    AMP_TRY(mt_check_ptrs(fn, n, numel, x, "x"));
    amp_mt_tensor *table;
    AMP_TRY(mt_table(fn, n, numel, x, 0, &table, NULL));
    amp_mt_planner pl;
    amp_status s = amp_cpu_mt_planner_init(fn, &pl, 1, &dt, table, n);
    mt_flags f = {.dt = dt, .bad = 0};
    if (s == AMP_OK)
        amp_cpu_mt_apply(&pl, &(amp_cpu_mt_op){.piece = mt_nonfinite_piece,
                                               .launch_done = mt_flags_launch, .ctx = &f});
    free(table);
    if (s == AMP_OK && f.bad) *found_inf = 1.0f;
    return s;
}

/* ---- sum_squares --------------------------------------------------------------------------- */

/* Sum of x[i]^2 over one piece in f64: 8 independent lanes (vectorised), a fixed tree, the tail. */
static double mt_sumsq_f32(const float *x, int64_t n) {
    double lane[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] += amp_square_f64(x[i + j]);
    double s =
        ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    for (; i < n; i++) s += amp_square_f64(x[i]);
    return s;
}

/* sum_squares: each piece's sum at part[k]; after each launch its chunks' sums, in plan order. */
typedef struct mt_sumsq {
    amp_dtype dt;
    double *part; /* AMP_CPU_MT_MAX_PIECES */
    double total;
} mt_sumsq;

static void mt_sumsq_piece(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_piece *pc) {
    mt_sumsq *f = ctx;
    float buf[AMP_CPU_MT_PIECE];
    const float *v = tile_in(amp_cpu_mt_piece_ptr(l, pc, 0), f->dt, 0, pc->len, buf);
    f->part[pc->k] = mt_sumsq_f32(v, pc->len);
}

static void mt_sumsq_launch(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_pieces *pcs) {
    mt_sumsq *f = ctx;
    for (int b = 0; b < l->n_blocks; b++) f->total += amp_cpu_mt_block_sum(pcs, b, f->part, 1);
}

amp_status amp_cpu_sum_squares_multi(amp_device_ctx *dev, amp_dtype dt, int64_t n,
                                     const int64_t *numel, const void *const *x, float *out,
                                     float *out_lo) {
    static const char fn[] = "amp_cpu_sum_squares_multi";
    AMP_TRY(mt_check_float(fn, dt));
    AMP_TRY(mt_check_list(fn, n, numel, x, "x"));
    if (!out) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'out' is NULL", fn);
    if (n == 0) {
        *out = 0.0f; /* the sum over an empty list */
        if (out_lo) *out_lo = 0.0f;
        return AMP_OK;
    }
    AMP_TRY(mt_check_ptrs(fn, n, numel, x, "x"));
    amp_mt_tensor *table;
    void *extra;
    AMP_TRY(mt_table(fn, n, numel, x, AMP_CPU_MT_MAX_PIECES * sizeof(double), &table, &extra));
    amp_mt_planner pl;
    amp_status s = amp_cpu_mt_planner_init(fn, &pl, 1, &dt, table, n);
    mt_sumsq f = {.dt = dt, .part = extra, .total = 0.0};
    if (s == AMP_OK)
        amp_cpu_mt_apply(&pl, &(amp_cpu_mt_op){.piece = mt_sumsq_piece,
                                               .launch_done = mt_sumsq_launch, .ctx = &f});
    free(table);
    if (s == AMP_OK) *out = (float)f.total;
    if (s == AMP_OK && out_lo) *out_lo = (float)(f.total - (double)*out);
    return s;
}
