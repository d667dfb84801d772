/* CPU backend: LayerNorm and RMSNorm over the last dim (layernorm_fwd, layernorm_bwd), the
 * arithmetic and order of kernels/math/layernorm.h: each row's sums in the 32 lanes a CUDA warp
 * uses and its butterfly, so both backends give the same bits. Rows run in parallel
 * (amp_cpu_each_row); each row is read in place (f32) or widened once into the thread's f32
 * buffer, then read three times by vector loops built per ISA.
 * The backward's tasks are chunks of AMP_LN_COL_CHUNK rows: each row's x and dy are widened once
 * for its dx and for the chunk's f64 column sums (dgamma, dbeta), which are then added in chunk
 * order, blocks of columns in parallel. Reading x and dy a second time for the column sums was
 * a third of the backward's bytes (bench/RESULTS.md, "bias gradients in registers"). */
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/exp_avx2.h"
#include "kernels/cpu/exp_avx512.h"
#include "kernels/math/layernorm.h"

/* The 32-lane total of (v - c)^2 (c: the mean) or v^2 (RMSNorm: c = 0, the same products). */
AMP_CPU_CLONE_INLINE float lanes_sum_sq(const float *v, int64_t n, float c) {
    if (amp_cpu_avx512_kernels()) return amp_avx512_row_sum(v, n, c, true);
    if (amp_cpu_avx2_exp_kernels()) return amp_avx2_row_sum(v, n, c, true);
    float acc[AMP_LN_LANES] = {0};
    int64_t i = 0;
    for (; i + AMP_LN_LANES <= n; i += AMP_LN_LANES)
        for (int l = 0; l < AMP_LN_LANES; l++) {
            float t = v[i + l] - c;
            acc[l] += amp_mul_rn(t, t);
        }
    for (int l = 0; i + l < n; l++) {
        float t = v[i + l] - c;
        acc[l] += amp_mul_rn(t, t);
    }
    return amp_lanes_combine(acc, 0);
}

/* One call's operands, for the row functions. */
typedef struct ln_call {
    const amp_ln_desc *d;
    const void *x, *r, *dy;
    void *sum, *out;
    const float *gamma, *beta;
    float *mean;
    const float *mean_in, *rstd_in;
    float *rstd;
    double *partial; /* the backward's column sums, per chunk of rows (NULL: none asked) */
} ln_call;

/* buf: the rows of x and r widened, the sum, and the output before its narrowing, cols floats
 * each; vector loops, built per ISA. */
AMP_CPU_CLONED(static, void, fwd_row, (void *ctx, int64_t row, float *buf),
               (ctx, row, buf)) {
    const ln_call *c = ctx;
    const amp_ln_desc *d = c->d;
    int64_t cols = d->cols, base = row * cols;
    const float *v = tile_in(c->x, d->dt, base, cols, buf);
    if (c->r) { /* the sum as stored: rounded to dt, read back */
        const float *r = tile_in(c->r, d->r_dt, base, cols, buf + cols);
        float *sum = tile_out(c->sum, d->dt, base, buf + 2 * cols);
        for (int64_t j = 0; j < cols; j++) sum[j] = v[j] + r[j];
        tile_out_store(c->sum, d->dt, base, cols, sum);
        v = tile_in(c->sum, d->dt, base, cols, buf + 2 * cols);
    }
    float mu = d->rms ? 0.0f : amp_cpu_row_sum(v, cols) / (float)cols;
    float rs = amp_ln_rstd(lanes_sum_sq(v, cols, mu) / (float)cols, d->eps);
    if (!d->rms) c->mean[row] = mu;
    c->rstd[row] = rs;
    float *y = tile_out(c->out, d->y_dt, base, buf + 3 * cols);
    const float *gamma = c->gamma, *beta = c->beta;
    for (int64_t j = 0; j < cols; j++)
        y[j] = amp_ln_affine(amp_ln_xhat(v[j], mu, rs), gamma ? gamma[j] : 1.0f,
                             beta ? beta[j] : 0.0f);
    tile_out_store(c->out, d->y_dt, base, cols, y);
}

/* One row's dx from its x and dy widened (xv, dy): g = dy gamma and g xhat in buf, dx's row
 * before its narrowing after them, cols floats each; vector loops, built per ISA. */
AMP_CPU_CLONE_INLINE void dx_row(const ln_call *c, int64_t row, const float *xv, const float *dy,
                                 float *buf) {
    const amp_ln_desc *d = c->d;
    int64_t cols = d->cols, base = row * cols;
    float *g = buf, *gx = buf + cols;
    float mu = d->rms ? 0.0f : c->mean_in[row], rs = c->rstd_in[row];
    const float *gamma = c->gamma;
    for (int64_t j = 0; j < cols; j++) {
        g[j] = amp_mul_rn(dy[j], gamma ? gamma[j] : 1.0f);
        gx[j] = amp_mul_rn(g[j], amp_ln_xhat(xv[j], mu, rs));
    }
    float m1 = d->rms ? 0.0f : amp_cpu_row_sum(g, cols) / (float)cols;
    float m2 = amp_cpu_row_sum(gx, cols) / (float)cols;
    float *y = tile_out(c->out, d->dt, base, buf + 2 * cols);
    if (d->accumulate) /* f32: y is dx's row itself */
        for (int64_t j = 0; j < cols; j++)
            y[j] += amp_ln_dx(g[j], amp_ln_xhat(xv[j], mu, rs), m1, m2, rs);
    else
        for (int64_t j = 0; j < cols; j++)
            y[j] = amp_ln_dx(g[j], amp_ln_xhat(xv[j], mu, rs), m1, m2, rs);
    tile_out_store(c->out, d->dt, base, cols, y);
}

/* Chunk k of the backward: its AMP_LN_COL_CHUNK rows in order, each row's x and dy widened once
 * for both its column sums (dgamma's sum of dy xhat and dbeta's of dy, in f64, into the chunk's
 * partials) and its dx (when asked). buf: x, dy, then dx_row's three rows. Built per ISA. */
AMP_CPU_CLONED(static, void, bwd_chunk, (void *ctx, int64_t k, float *buf),
               (ctx, k, buf)) {
    const ln_call *c = ctx;
    const amp_ln_desc *d = c->d;
    int64_t cols = d->cols, r0 = k * AMP_LN_COL_CHUNK;
    int64_t r1 = r0 + AMP_LN_COL_CHUNK < d->rows ? r0 + AMP_LN_COL_CHUNK : d->rows;
    double *pg = c->partial ? c->partial + k * 2 * cols : NULL, *pb = pg ? pg + cols : NULL;
    for (int64_t j = 0; pg && j < 2 * cols; j++) pg[j] = 0.0;
    for (int64_t row = r0; row < r1; row++) {
        const float *xv = tile_in(c->x, d->dt, row * cols, cols, buf);
        const float *dy = tile_in(c->dy, d->y_dt, row * cols, cols, buf + cols);
        if (pg) {
            float mu = d->rms ? 0.0f : c->mean_in[row], rs = c->rstd_in[row];
            for (int64_t j = 0; j < cols; j++) {
                pg[j] += (double)amp_mul_rn(dy[j], amp_ln_xhat(xv[j], mu, rs));
                pb[j] += (double)dy[j];
            }
        }
        if (c->out) dx_row(c, row, xv, dy, buf + 2 * cols);
    }
}

amp_status amp_cpu_layernorm_fwd(amp_device_ctx *dev, const amp_ln_desc *d, const void *x,
                                 const void *r, void *sum, const float *gamma, const float *beta,
                                 void *y, float *mean, float *rstd) {
    AMP_TRY(amp_backend_check_ln(__func__, d));
    if (d->rows == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    AMP_CHECK_ARG(rstd);
    if (!d->rms) AMP_CHECK_ARG(mean);
    if (r) AMP_CHECK_ARG(sum);
    ln_call c = {.d = d, .x = x, .r = r, .sum = sum, .out = y, .gamma = gamma, .beta = beta,
                 .mean = mean, .rstd = rstd};
    return amp_cpu_each_row(__func__, d->rows, 4 * d->cols, fwd_row, &c);
}

amp_status amp_cpu_layernorm_bwd(amp_device_ctx *dev, const amp_ln_desc *d, const void *x,
                                 const void *dy, const float *gamma, const float *mean,
                                 const float *rstd, void *dx, float *dgamma, float *dbeta) {
    AMP_TRY(amp_backend_check_ln(__func__, d));
    if (d->rows == 0) {
        if (dgamma) memset(dgamma, 0, (size_t)d->cols * sizeof *dgamma);
        if (dbeta) memset(dbeta, 0, (size_t)d->cols * sizeof *dbeta);
        return AMP_OK;
    }
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(rstd);
    if (!d->rms) AMP_CHECK_ARG(mean);
    ln_call c = {.d = d, .x = x, .dy = dy, .out = dx, .gamma = gamma, .mean_in = mean,
                 .rstd_in = rstd};
    int64_t n_chunks = (d->rows + AMP_LN_COL_CHUNK - 1) / AMP_LN_COL_CHUNK;
    if (dgamma || dbeta) /* the calling thread's scratch: the tasks' arenas are WIDEN's */
        AMP_TRY(amp_dnnl_scratch((size_t)(n_chunks * 2 * d->cols) * sizeof(double),
                                 (void **)&c.partial));
    if (!dx && !c.partial) return AMP_OK;
    AMP_TRY(amp_cpu_each_row(__func__, n_chunks, 5 * d->cols, bwd_chunk, &c));
    if (!c.partial) return AMP_OK;
    int64_t blocks = (d->cols + AMP_CPU_FOLD_BLOCK - 1) / AMP_CPU_FOLD_BLOCK;
#pragma omp parallel for schedule(static) if (n_chunks * d->cols >= AMP_CPU_PARALLEL_MIN)
    for (int64_t k = 0; k < blocks; k++) {
        int64_t j0 = k * AMP_CPU_FOLD_BLOCK, left = d->cols - j0;
        int64_t w = left < AMP_CPU_FOLD_BLOCK ? left : AMP_CPU_FOLD_BLOCK;
        if (dgamma) amp_cpu_fold_chunks(c.partial, n_chunks, 2 * d->cols, j0, w, dgamma);
        if (dbeta) amp_cpu_fold_chunks(c.partial + d->cols, n_chunks, 2 * d->cols, j0, w, dbeta);
    }
    return AMP_OK;
}
