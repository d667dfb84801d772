/* CPU backend: SwiGLU forward and backward (core/backend_kernels.def's swiglu_*), rows in
 * parallel, each row in tiles whose exps run as one vector pass (vector_exp.h), built per ISA:
 * as one amp_siluf call an element (and a second exp for the backward's sigmoid) the scalar
 * loop took half of a Llama step (bench/results/2026-12-02.md). The tiles keep
 * kernels/math/swiglu.h's bits: silu(a) = a / (1 + e) for a >= 0 and (a e) / (1 + e) below,
 * the sigmoid (a < 0 ? e : 1) / (1 + e), both from the one e = amp_expf(-|a|) that amp_siluf
 * and amp_sigmoidf compute; a tile holding a NaN or an a below -80 (amp_siluf's own range
 * there) takes the scalar functions. */
#include <math.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/cpu/vector_exp.h"
#include "kernels/math/load_store.h"
#include "kernels/math/swiglu.h"

/* Elements per tile: a handful of f32 tiles of 4 KiB each, in L1. */
#define SG_TILE 1024

/* e[i] = e^-|a[i]| for i < n; false (nothing computed) when a tile must take the scalar way. */
AMP_CPU_CLONE_INLINE bool neg_abs_exp(const float *a, int64_t n, float *e) {
    int odd = 0;
    for (int64_t i = 0; i < n; i++) {
        e[i] = -fabsf(a[i]);
        odd |= (a[i] != a[i]) | (a[i] < -80.0f);
    }
    if (odd) return false;
    amp_cpu_exp_shifted(e, n, 0.0f, e);
    return true;
}

AMP_CPU_CLONE_INLINE float silu_from(float a, float e) {
    return (a < 0.0f ? amp_mul_rn(a, e) : a) / (1.0f + e);
}

/* y[i] = silu(a[i]) rounded to dt, times b[i] (before y's own rounding). */
AMP_CPU_CLONED(static, void, fwd_tile, (const float *a, const float *b, int64_t n, amp_dtype dt,
               float *y), (a, b, n, dt, y)) {
    float e[SG_TILE];
    if (!neg_abs_exp(a, n, e)) {
        for (int64_t i = 0; i < n; i++) y[i] = amp_swiglu_elem(a[i], b[i], dt);
        return;
    }
    for (int64_t i = 0; i < n; i++) y[i] = amp_round_to(silu_from(a[i], e[i]), dt) * b[i];
}

/* da, db from a, b and dy: db = dy silu(a) (silu rounded to dt), da = silu's backward of dy b
 * rounded to dt, amp_silu_bwd's arithmetic with the tile's sigmoid. */
AMP_CPU_CLONED(static, void, bwd_tile, (const float *a, const float *b, const float *dy, int64_t n,
               amp_dtype dt, float *da, float *db), (a, b, dy, n, dt, da, db)) {
    float e[SG_TILE];
    if (!neg_abs_exp(a, n, e)) {
        for (int64_t i = 0; i < n; i++) amp_swiglu_elem_bwd(a[i], b[i], dy[i], dt, &da[i], &db[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float s = (a[i] < 0.0f ? e[i] : 1.0f) / (1.0f + e[i]);
        float g = amp_round_to(dy[i] * b[i], dt);
        db[i] = dy[i] * amp_round_to(silu_from(a[i], e[i]), dt);
        da[i] = amp_mul_rn(amp_mul_rn(g, s), 1.0f + amp_mul_rn(a[i], 1.0f - s));
    }
}

amp_status amp_cpu_swiglu_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t rows, int64_t cols,
                              const void *a, const void *b, int64_t ld, void *y) {
    AMP_TRY(amp_backend_check_rows(__func__, dt, rows, cols, ld));
    if (rows * cols == 0) return AMP_OK;
    AMP_CHECK_ARG(a);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(y);
#pragma omp parallel for schedule(static) if (rows * cols >= AMP_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c0 = 0; c0 < cols; c0 += SG_TILE) {
            int64_t n = cols - c0 < SG_TILE ? cols - c0 : SG_TILE;
            float ab[SG_TILE], bb[SG_TILE], yb[SG_TILE];
            const float *at = tile_in(a, dt, r * ld + c0, n, ab);
            const float *bt = tile_in(b, dt, r * ld + c0, n, bb);
            float *yt = tile_out(y, dt, r * cols + c0, yb);
            fwd_tile(at, bt, n, dt, yt);
            tile_out_store(y, dt, r * cols + c0, n, yt);
        }
    return AMP_OK;
}

amp_status amp_cpu_swiglu_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t rows, int64_t cols,
                              const void *a, const void *b, int64_t ld, const void *dy, void *da,
                              void *db) {
    AMP_TRY(amp_backend_check_rows(__func__, dt, rows, cols, ld));
    if (rows * cols == 0) return AMP_OK;
    AMP_CHECK_ARG(a);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(da);
    AMP_CHECK_ARG(db);
#pragma omp parallel for schedule(static) if (rows * cols >= AMP_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c0 = 0; c0 < cols; c0 += SG_TILE) {
            int64_t n = cols - c0 < SG_TILE ? cols - c0 : SG_TILE, at = r * ld + c0;
            float ab[SG_TILE], bb[SG_TILE], gb[SG_TILE], dab[SG_TILE], dbb[SG_TILE];
            const float *a_t = tile_in(a, dt, at, n, ab), *b_t = tile_in(b, dt, at, n, bb);
            const float *g_t = tile_in(dy, dt, r * cols + c0, n, gb);
            float *da_t = tile_out(da, dt, at, dab), *db_t = tile_out(db, dt, at, dbb);
            bwd_tile(a_t, b_t, g_t, n, dt, da_t, db_t);
            tile_out_store(da, dt, at, n, da_t);
            tile_out_store(db, dt, at, n, db_t);
        }
    return AMP_OK;
}
