/* CPU backend: LayerNorm and RMSNorm over the last dim (layernorm_fwd, layernorm_bwd), the
 * arithmetic and order of kernels/math/layernorm.h: each row's sums in the 32 lanes a CUDA warp
 * uses and its butterfly, so both backends give the same bits. Rows run in parallel
 * (amp_cpu_each_row); each row is read in place (f32) or widened once into the thread's f32
 * buffer, then read three times by vector loops built per ISA.
 * The column sums of the backward (dgamma, dbeta) are chunks of AMP_LN_COL_CHUNK rows in f64,
 * added in chunk order, blocks of columns in parallel. */
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/cpu/exp_avx512.h"
#include "kernels/math/layernorm.h"

/* The 32-lane total of v[0, n). */
AMP_CPU_CLONE_INLINE float lanes_sum(const float *v, int64_t n) {
    if (amp_cpu_avx512_kernels()) return amp_avx512_row_sum(v, n, 0.0f, false);
    float acc[AMP_LN_LANES] = {0};
    int64_t i = 0;
    for (; i + AMP_LN_LANES <= n; i += AMP_LN_LANES)
        for (int l = 0; l < AMP_LN_LANES; l++) acc[l] += v[i + l];
    for (int l = 0; i + l < n; l++) acc[l] += v[i + l];
    return amp_lanes_combine(acc, 0);
}

/* The 32-lane total of (v - c)^2 (c: the mean) or v^2 (RMSNorm: c = 0, the same products). */
AMP_CPU_CLONE_INLINE float lanes_sum_sq(const float *v, int64_t n, float c) {
    if (amp_cpu_avx512_kernels()) return amp_avx512_row_sum(v, n, c, true);
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
} ln_call;

/* buf: the rows of x and r widened, the sum, and the output before its narrowing, cols floats
 * each; vector loops, built per ISA. */
AMP_CPU_CLONES static void fwd_row(void *ctx, int64_t row, float *buf) {
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
    float mu = d->rms ? 0.0f : lanes_sum(v, cols) / (float)cols;
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

/* buf: g = dy gamma, g xhat, the row of x widened and dx before its narrowing, cols floats
 * each; vector loops, built per ISA. */
AMP_CPU_CLONES static void dx_row(void *ctx, int64_t row, float *buf) {
    const ln_call *c = ctx;
    const amp_ln_desc *d = c->d;
    int64_t cols = d->cols, base = row * cols;
    float *g = buf, *gx = buf + cols;
    float mu = d->rms ? 0.0f : c->mean_in[row], rs = c->rstd_in[row];
    const float *xv = tile_in(c->x, d->dt, base, cols, buf + 2 * cols);
    const float *dy = tile_in(c->dy, d->y_dt, base, cols, g); /* g itself when widened */
    const float *gamma = c->gamma;
    for (int64_t j = 0; j < cols; j++) {
        g[j] = amp_mul_rn(dy[j], gamma ? gamma[j] : 1.0f);
        gx[j] = amp_mul_rn(g[j], amp_ln_xhat(xv[j], mu, rs));
    }
    float m1 = d->rms ? 0.0f : lanes_sum(g, cols) / (float)cols;
    float m2 = lanes_sum(gx, cols) / (float)cols;
    float *y = tile_out(c->out, d->dt, base, buf + 3 * cols);
    if (d->accumulate) /* f32: y is dx's row itself */
        for (int64_t j = 0; j < cols; j++) y[j] += amp_ln_dx(g[j], amp_ln_xhat(xv[j], mu, rs), m1, m2, rs);
    else
        for (int64_t j = 0; j < cols; j++) y[j] = amp_ln_dx(g[j], amp_ln_xhat(xv[j], mu, rs), m1, m2, rs);
    tile_out_store(c->out, d->dt, base, cols, y);
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

/* Columns per task of the column sums: a block's rows are read as contiguous runs, its f64
 * partials stay in registers or L1. */
#define LN_COL_BLOCK 64

/* dgamma[j] and dbeta[j] for the columns [j0, j0 + nj) (nj <= LN_COL_BLOCK): per column the
 * additions of column_sums, in its order; across the block's columns vector loops. */
AMP_CPU_CLONES static void column_block(const amp_ln_desc *d, const void *x, const void *dy,
                                        const float *mean, const float *rstd, int64_t j0,
                                        int64_t nj, float *dgamma, float *dbeta) {
    double g_total[LN_COL_BLOCK] = {0}, b_total[LN_COL_BLOCK] = {0};
    double g[LN_COL_BLOCK], b[LN_COL_BLOCK];
    float xb[LN_COL_BLOCK], eb[LN_COL_BLOCK];
    int64_t cols = d->cols;
    for (int64_t start = 0; start < d->rows; start += AMP_LN_COL_CHUNK) {
        int64_t end = start + AMP_LN_COL_CHUNK < d->rows ? start + AMP_LN_COL_CHUNK : d->rows;
        for (int64_t j = 0; j < nj; j++) g[j] = b[j] = 0.0;
        for (int64_t row = start; row < end; row++) {
            const float *e = tile_in(dy, d->y_dt, row * cols + j0, nj, eb);
            const float *xv = tile_in(x, d->dt, row * cols + j0, nj, xb);
            float mu = d->rms ? 0.0f : mean[row], rs = rstd[row];
            for (int64_t j = 0; j < nj; j++) {
                g[j] += (double)amp_mul_rn(e[j], amp_ln_xhat(xv[j], mu, rs));
                b[j] += (double)e[j];
            }
        }
        for (int64_t j = 0; j < nj; j++) g_total[j] += g[j], b_total[j] += b[j];
    }
    for (int64_t j = 0; j < nj; j++) {
        if (dgamma) dgamma[j0 + j] = (float)g_total[j];
        if (dbeta) dbeta[j0 + j] = (float)b_total[j];
    }
}

/* dgamma[j] = sum over rows of dy xhat, dbeta[j] = sum of dy: chunks of AMP_LN_COL_CHUNK rows
 * summed in f64 in row order, then the chunks in order; blocks of columns in parallel. (A task
 * per column read one float per row, a cache line each: 10 ms of a 97 ms GPT step,
 * bench/RESULTS.md.) */
static void column_sums(const amp_ln_desc *d, const void *x, const void *dy, const float *mean,
                        const float *rstd, float *dgamma, float *dbeta) {
    int64_t blocks = (d->cols + LN_COL_BLOCK - 1) / LN_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < blocks; k++) {
        int64_t j0 = k * LN_COL_BLOCK, nj = d->cols - j0 < LN_COL_BLOCK ? d->cols - j0 : LN_COL_BLOCK;
        column_block(d, x, dy, mean, rstd, j0, nj, dgamma, dbeta);
    }
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
    if (dgamma || dbeta) column_sums(d, x, dy, mean, rstd, dgamma, dbeta);
    if (!dx) return AMP_OK;
    ln_call c = {.d = d, .x = x, .dy = dy, .out = dx, .gamma = gamma, .mean_in = mean,
                 .rstd_in = rstd};
    return amp_cpu_each_row(__func__, d->rows, 4 * d->cols, dx_row, &c);
}
