/* CPU backend: the entries of synchronised batch norm (core/backend.h: bn_channel_sums,
 * bn_sync_stats, bn_bwd_elemt) over this rank's [n, c, hw] tensor.
 *
 * The channel sums visit a channel in batch norm's order (kernels/cpu/batchnorm_tiles.h: planes in
 * order, tiles of AMP_CPU_REDUCE_CHUNK, 8 double lanes joined by a fixed tree), accumulate in
 * double and round to f32 once: the bits do not depend on the thread count, and
 * kernels/cuda/sync_batchnorm.cu reproduces them. One channel per OpenMP task; outputs are
 * overwritten. The per-channel and per-element math is kernels/math/sync_batchnorm.h's. */
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/batchnorm_tiles.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/math/sync_batchnorm.h"

/* Channel ch's two sums (see the entry), in double, for f16 (through f32 tiles); lane j takes
 * the elements k + j, as batchnorm_tiles.h's channel_sums does for f32 and bf16. */
static void sync_channel_sums_f16(const amp_bn_desc *d, const void *x, double center,
                                  const void *dy, int64_t ch, double *s1, double *s2) {
    float bx[AMP_CPU_REDUCE_CHUNK], bdy[AMP_CPU_REDUCE_CHUNK];
    double a = 0.0, b = 0.0;
    for (int64_t t = 0; t < channel_tiles(d); t++) {
        int64_t len, off = channel_tile(d, ch, t, &len);
        double la[8] = {0}, lb[8] = {0};
        const float *xv = tile_in(x, AMP_F16, off, len, bx);
        const float *gv = dy ? tile_in(dy, AMP_F16, off, len, bdy) : NULL;
        for (int64_t k = 0; k < len; k++) {
            if (gv) {
                la[k & 7] += (double)gv[k];
                lb[k & 7] += amp_bn_dy_dev(xv[k], gv[k], center);
            } else {
                la[k & 7] += amp_bn_sync_dev(xv[k], center);
                lb[k & 7] += amp_bn_sq_dev(xv[k], center);
            }
        }
        a += lanes_total(la);
        b += lanes_total(lb);
    }
    *s1 = a;
    *s2 = b;
}

AMP_CPU_CLONED(static, void, sync_channel_sums, (const amp_bn_desc *d, const void *x, double center,
               const void *dy, int64_t ch, double *s1, double *s2),
               (d, x, center, dy, ch, s1, s2)) {
    bn_sum_kind kind = dy ? BN_SUM_DY : BN_SUM_CENTERED;
    if (d->dtype == AMP_F16) sync_channel_sums_f16(d, x, center, dy, ch, s1, s2);
    else channel_sums(d, kind, x, dy, NULL, ch, center, s1, s2);
}

amp_status amp_cpu_bn_channel_sums(amp_device_ctx *dev, const amp_bn_desc *d, const void *x,
                                   const float *center, const void *dy, float *out1, float *out2) {
    AMP_TRY(amp_backend_check_bn(__func__, d, AMP_BN_PASS_SYNC));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(out1);
    AMP_CHECK_ARG(out2);
#pragma omp parallel for schedule(static) if (d->n * d->c * d->hw >= AMP_CPU_PARALLEL_MIN)
    for (int64_t ch = 0; ch < d->c; ch++) {
        double s1, s2;
        sync_channel_sums(d, x, center ? (double)center[ch] : 0.0, dy, ch, &s1, &s2);
        out1[ch] = (float)s1;
        out2[ch] = (float)s2;
    }
    return AMP_OK;
}

amp_status amp_cpu_bn_sync_stats(amp_device_ctx *dev, const amp_bn_desc *d, int64_t count,
                                 const float *center, const float *s1, const float *s2, float *mean,
                                 float *var, float *invstd, float *running_mean,
                                 float *running_var) {
    AMP_TRY(amp_backend_check_bn(__func__, d, AMP_BN_PASS_SYNC));
    AMP_TRY(amp_backend_check_bn_count(__func__, count, s2 != NULL));
    AMP_CHECK_ARG(s1);
    AMP_CHECK_ARG(mean);
    for (int64_t ch = 0; ch < d->c; ch++)
        amp_bn_sync_stats(center ? (double)center[ch] : 0.0, s1[ch], s2 ? s2[ch] : 0.0f, s2 != NULL,
                          count, d->eps, d->momentum, &mean[ch], var ? &var[ch] : NULL,
                          invstd ? &invstd[ch] : NULL, running_mean ? &running_mean[ch] : NULL,
                          running_var ? &running_var[ch] : NULL);
    return AMP_OK;
}

/* batchnorm_tiles.h's dx loop, built for the wider vectors (cpu_clones.h). */
AMP_CPU_CLONED(static, void, sync_channel_dx, (const amp_bn_desc *d, const void *x, const void *dy,
               int64_t ch, float mean, float proj, float mean_dy, float k, void *dx),
               (d, x, dy, ch, mean, proj, mean_dy, k, dx)) {
    channel_bwd_dx_tiles(d, x, dy, NULL, ch, mean, proj, mean_dy, k, dx);
}

amp_status amp_cpu_bn_bwd_elemt(amp_device_ctx *dev, const amp_bn_desc *d, int64_t count,
                                const void *x, const void *dy, const float *gamma,
                                const float *mean, const float *invstd, const float *sum_dy,
                                const float *sum_dy_xmu, void *dx) {
    AMP_TRY(amp_backend_check_bn_bwd_elemt(__func__, d, count, x, dy, mean, invstd, sum_dy,
                                           sum_dy_xmu, dx));
#pragma omp parallel for schedule(static) if (d->n * d->c * d->hw >= AMP_CPU_PARALLEL_MIN)
    for (int64_t ch = 0; ch < d->c; ch++) {
        float proj, mean_dy, k, m = mean[ch];
        amp_bn_sync_bwd_coef(count, sum_dy[ch], sum_dy_xmu[ch], gamma ? gamma[ch] : 1.0f,
                             invstd[ch], &proj, &mean_dy, &k);
        sync_channel_dx(d, x, dy, ch, m, proj, mean_dy, k, dx);
    }
    return AMP_OK;
}
