/* CPU backend: batch norm forward (training, eval) and backward over an [n, c, hw] tensor.
 *
 * Channels are independent, so the loops run one channel per task; within a channel the sums
 * visit the n planes in order, each plane in tiles of AMP_CPU_REDUCE_CHUNK with double lanes in
 * a fixed order: the statistics do not depend on the thread count. The variance is computed in
 * two passes (mean, then the mean squared deviation), in double, as PyTorch's CPU kernel; the
 * running variance takes the unbiased estimate. Outputs y, dx, dgamma, dbeta, save_* and the
 * running stats are overwritten. gamma/beta may be NULL (no affine: 1 and 0), and so may the
 * running stats (not tracked), save_*, dx and dgamma/dbeta (not wanted). */
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/batchnorm_tiles.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/math/batchnorm.h"

/* sum(x) over channel ch, or sum((x - mean)^2) when squares is set, in double. */
AMP_CPU_CLONES static double channel_sum(const amp_bn_desc *d, const void *x, int64_t ch, double mean,
                          int squares) {
    float buf[AMP_CPU_REDUCE_CHUNK];
    double total = 0.0;
    for (int64_t t = 0; t < channel_tiles(d); t++) {
        int64_t len, off = channel_tile(d, ch, t, &len);
        const float *v = tile_in(x, d->dtype, off, len, buf);
        double lane[8] = {0};
        int64_t k = 0;
        if (squares) {
            for (; k + 8 <= len; k += 8)
                for (int j = 0; j < 8; j++) lane[j] += amp_bn_sq_dev(v[k + j], mean);
            for (; k < len; k++) lane[k & 7] += amp_bn_sq_dev(v[k], mean);
        } else {
            for (; k + 8 <= len; k += 8)
                for (int j = 0; j < 8; j++) lane[j] += (double)v[k + j];
            for (; k < len; k++) lane[k & 7] += (double)v[k];
        }
        total += lanes_total(lane);
    }
    return total;
}

/* y = x * scale + shift over channel ch. */
AMP_CPU_CLONES static void channel_apply(const amp_bn_desc *d, const void *x, int64_t ch, float scale,
                          float shift, void *y) {
    float bx[AMP_CPU_REDUCE_CHUNK], by[AMP_CPU_REDUCE_CHUNK];
    for (int64_t t = 0; t < channel_tiles(d); t++) {
        int64_t len, off = channel_tile(d, ch, t, &len);
        const float *v = tile_in(x, d->dtype, off, len, bx);
        float *o = tile_out(y, d->dtype, off, by);
        for (int64_t k = 0; k < len; k++) o[k] = amp_bn_apply(v[k], scale, shift);
        tile_out_store(y, d->dtype, off, len, o);
    }
}

amp_status amp_cpu_bn_fwd_train(const amp_bn_desc *d, const void *x, const float *gamma,
                                const float *beta, void *y, float *save_mean, float *save_invstd,
                                float *running_mean, float *running_var) {
    AMP_TRY(amp_backend_check_bn(__func__, d, true));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    int64_t count = d->n * d->hw;
#pragma omp parallel for schedule(static) if (d->n * d->c * d->hw >= AMP_CPU_PARALLEL_MIN)
    for (int64_t ch = 0; ch < d->c; ch++) {
        double mean = channel_sum(d, x, ch, 0.0, 0) / (double)count;
        double var_sum = channel_sum(d, x, ch, mean, 1);
        double invstd = amp_bn_invstd(var_sum / (double)count, d->eps);
        float scale, shift;
        amp_bn_fold(mean, invstd, gamma ? gamma[ch] : 1.0f, beta ? beta[ch] : 0.0f, &scale,
                    &shift);
        channel_apply(d, x, ch, scale, shift, y);
        if (save_mean) save_mean[ch] = (float)mean;
        if (save_invstd) save_invstd[ch] = (float)invstd;
        if (running_mean)
            running_mean[ch] = amp_bn_running_update(running_mean[ch], mean, d->momentum);
        if (running_var)
            running_var[ch] =
                amp_bn_running_update(running_var[ch], var_sum / (double)(count - 1), d->momentum);
    }
    return AMP_OK;
}

amp_status amp_cpu_bn_fwd_eval(const amp_bn_desc *d, const void *x, const float *gamma,
                               const float *beta, const float *running_mean,
                               const float *running_var, void *y) {
    AMP_TRY(amp_backend_check_bn(__func__, d, false));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    AMP_CHECK_ARG(running_mean);
    AMP_CHECK_ARG(running_var);
#pragma omp parallel for schedule(static) if (d->n * d->c * d->hw >= AMP_CPU_PARALLEL_MIN)
    for (int64_t ch = 0; ch < d->c; ch++) {
        float scale, shift;
        amp_bn_fold(running_mean[ch], amp_bn_invstd(running_var[ch], d->eps),
                    gamma ? gamma[ch] : 1.0f, beta ? beta[ch] : 0.0f, &scale, &shift);
        channel_apply(d, x, ch, scale, shift, y);
    }
    return AMP_OK;
}

/* sum(dy) and sum((x - mean) * dy) over channel ch, in double. */
AMP_CPU_CLONES static void channel_bwd_sums(const amp_bn_desc *d, const void *x, const void *dy, int64_t ch,
                             double mean, double *sum_dy, double *dot) {
    float bx[AMP_CPU_REDUCE_CHUNK], bdy[AMP_CPU_REDUCE_CHUNK];
    double s = 0.0, p = 0.0;
    for (int64_t t = 0; t < channel_tiles(d); t++) {
        int64_t len, off = channel_tile(d, ch, t, &len);
        const float *xv = tile_in(x, d->dtype, off, len, bx);
        const float *gv = tile_in(dy, d->dtype, off, len, bdy);
        double ls[8] = {0}, lp[8] = {0};
        int64_t k = 0;
        for (; k + 8 <= len; k += 8)
            for (int j = 0; j < 8; j++) {
                ls[j] += (double)gv[k + j];
                lp[j] += amp_bn_dy_dev(xv[k + j], gv[k + j], mean);
            }
        for (; k < len; k++) {
            ls[k & 7] += (double)gv[k];
            lp[k & 7] += amp_bn_dy_dev(xv[k], gv[k], mean);
        }
        s += lanes_total(ls);
        p += lanes_total(lp);
    }
    *sum_dy = s;
    *dot = p;
}

/* dx over channel ch from the channel's folded backward terms (kernels/math/batchnorm.h). */
AMP_CPU_CLONES static void channel_bwd_dx(const amp_bn_desc *d, const void *x, const void *dy,
                                          int64_t ch, float mean, float proj, float mean_dy,
                                          float k, void *dx) {
    float bx[AMP_CPU_REDUCE_CHUNK], bdy[AMP_CPU_REDUCE_CHUNK];
    for (int64_t t = 0; t < channel_tiles(d); t++) {
        int64_t len, off = channel_tile(d, ch, t, &len);
        const float *xv = tile_in(x, d->dtype, off, len, bx);
        const float *gv = tile_in(dy, d->dtype, off, len, bdy);
        /* dx may alias dy: each element is read before it is written. */
        float *o = tile_out(dx, d->dtype, off, bdy);
        for (int64_t e = 0; e < len; e++) o[e] = amp_bn_bwd_dx(xv[e], gv[e], mean, proj, mean_dy, k);
        tile_out_store(dx, d->dtype, off, len, o);
    }
}

amp_status amp_cpu_bn_bwd(const amp_bn_desc *d, const void *x, const void *dy, const float *gamma,
                          const float *save_mean, const float *save_invstd, void *dx,
                          float *dgamma, float *dbeta) {
    AMP_TRY(amp_backend_check_bn(__func__, d, false));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(save_mean);
    AMP_CHECK_ARG(save_invstd);
    double count = (double)(d->n * d->hw);
#pragma omp parallel for schedule(static) if (d->n * d->c * d->hw >= AMP_CPU_PARALLEL_MIN)
    for (int64_t ch = 0; ch < d->c; ch++) {
        double mean = save_mean[ch], invstd = save_invstd[ch], sum_dy, dot;
        channel_bwd_sums(d, x, dy, ch, mean, &sum_dy, &dot);
        if (dgamma) dgamma[ch] = (float)(dot * invstd);
        if (dbeta) dbeta[ch] = (float)sum_dy;
        if (!dx) continue;
        float proj = (float)(dot * invstd * invstd / count), mean_dy = (float)(sum_dy / count);
        float k = (float)((gamma ? (double)gamma[ch] : 1.0) * invstd);
        channel_bwd_dx(d, x, dy, ch, save_mean[ch], proj, mean_dy, k, dx);
    }
    return AMP_OK;
}
