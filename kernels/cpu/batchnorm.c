/* CPU backend: batch norm forward (training, eval) and backward over an [n, c, hw] tensor.
 *
 * Channels are independent, so the loops run one channel per task; within a channel the sums
 * visit the n planes in order, each plane in tiles of AMP_CPU_REDUCE_CHUNK with double lanes in
 * a fixed order: the statistics do not depend on the thread count. The variance is computed in
 * two passes (mean, then the mean squared deviation), in double, as PyTorch's CPU kernel; the
 * running variance takes the unbiased estimate. Outputs y, dx, dgamma, dbeta, save_* and the
 * running stats are overwritten. gamma/beta may be NULL (no affine: 1 and 0), and so may the
 * running stats (not tracked), save_*, dx and dgamma/dbeta (not wanted).
 *
 * bf16 is widened in the loops' registers (batchnorm_tiles.h's bn_load: a shift), every value
 * and sum as the f32 path's. Training with f16 storage widens each channel once into the
 * thread's f32 arena (its planes in order, so the tiles, and every sum, are the f32 path's) and
 * runs the passes on that copy: widening per pass (F16C) cost the forward's three passes and the
 * backward's two a third of their time, and the copies still cost more than f32 (bench/RESULTS.md, "Figures behind decisions in the code",
 * batchnorm.c). On CPUs with AVX-512 the loops
 * run as batchnorm_avx512.c's intrinsics (the same bits), which read f16 in place too: no copies. */
#include <stdbool.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/batchnorm_tiles.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/math/batchnorm.h"

/* sum(x) over channel ch, or sum((x - mean)^2) when squares is set, in double (f32 or bf16). */
AMP_CPU_CLONED(static, double, channel_sum, (const amp_bn_desc *d, const void *x, int64_t ch,
               double mean, int squares),
               (d, x, ch, mean, squares)) {
    bn_sum_kind kind = squares ? BN_SUM_SQ_DEV : BN_SUM_X;
    double s;
    channel_sums(d, kind, x, NULL, NULL, ch, mean, &s, NULL);
    return s;
}

/* y = x * scale + shift over channel ch, and its ReLU with d->relu (two loops: each
 * vectorises); dt f32 or bf16 (direct) or f16 (tiles: eval; training runs on the f32 copy). */
AMP_CPU_CLONE_INLINE void channel_apply_typed(const amp_bn_desc *d, amp_dtype dt, const void *x,
                                              int64_t ch, float scale, float shift, void *y) {
    float bx[AMP_CPU_REDUCE_CHUNK], by[AMP_CPU_REDUCE_CHUNK];
    for (int64_t t = 0; t < channel_tiles(d); t++) {
        int64_t len, off = channel_tile(d, ch, t, &len);
        if (dt == AMP_F16) {
            const float *v = tile_in(x, dt, off, len, bx);
            float *o = tile_out(y, dt, off, by);
            for (int64_t k = 0; k < len; k++)
                o[k] = d->relu ? amp_bn_apply_relu(v[k], scale, shift)
                               : amp_bn_apply(v[k], scale, shift);
            tile_out_store(y, dt, off, len, o);
        } else if (d->relu)
            for (int64_t k = off; k < off + len; k++)
                bn_store(y, dt, k, amp_bn_apply_relu(bn_load(x, dt, k), scale, shift));
        else
            for (int64_t k = off; k < off + len; k++)
                bn_store(y, dt, k, amp_bn_apply(bn_load(x, dt, k), scale, shift));
    }
}

AMP_CPU_CLONED(static, void, channel_apply, (const amp_bn_desc *d, const void *x, int64_t ch,
               float scale, float shift, void *y),
               (d, x, ch, scale, shift, y)) {
    if (amp_cpu_bn_vectorised(d)) amp_cpu_bn_apply_avx512(d, x, ch, scale, shift, y);
    else if (d->dtype == AMP_BF16) channel_apply_typed(d, AMP_BF16, x, ch, scale, shift, y);
    else if (d->dtype == AMP_F16) channel_apply_typed(d, AMP_F16, x, ch, scale, shift, y);
    else channel_apply_typed(d, AMP_F32, x, ch, scale, shift, y);
}

/* The f32 copy of channel ch: its n planes one after another, which a descriptor of one f32
 * channel (channel_desc) visits in the same tiles as d visits channel ch. */
static void channel_widen(const amp_bn_desc *d, const void *x, int64_t ch, float *buf) {
    for (int64_t i = 0; i < d->n; i++)
        (void)amp_cpu_convert(buf + i * d->hw, AMP_F32,
                              (const uint16_t *)x + (i * d->c + ch) * d->hw, d->dtype, d->hw);
}

static void channel_narrow(const amp_bn_desc *d, const float *buf, int64_t ch, void *y) {
    for (int64_t i = 0; i < d->n; i++)
        (void)amp_cpu_convert((uint16_t *)y + (i * d->c + ch) * d->hw, d->dtype, buf + i * d->hw,
                              AMP_F32, d->hw);
}

static amp_bn_desc channel_desc(const amp_bn_desc *d) {
    amp_bn_desc one = *d;
    one.c = 1;
    one.dtype = AMP_F32;
    return one;
}

static amp_status channel_arena_oom(const char *fn, const amp_bn_desc *d, int copies) {
    return amp_fail(AMP_ERR_OOM, "%s: out of memory for %d f32 cop%s of a channel (%lld values)",
                    fn, copies, copies == 1 ? "y" : "ies", (long long)(d->n * d->hw));
}

amp_status amp_cpu_bn_fwd_train(amp_device_ctx *dev, const amp_bn_desc *d, const void *x,
                                const float *gamma, const float *beta, void *y, float *save_mean,
                                float *save_invstd, float *running_mean, float *running_var) {
    AMP_TRY(amp_backend_check_bn(__func__, d, AMP_BN_PASS_TRAIN));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    int64_t count = d->n * d->hw;
    bool half = bn_through_f32_copies(d); /* else read in place (bn_load, batchnorm_avx512.c) */
    amp_bn_desc one = channel_desc(d);
    int failed = 0;
#pragma omp parallel for schedule(static) if (d->n * d->c * d->hw >= AMP_CPU_PARALLEL_MIN)
    for (int64_t ch = 0; ch < d->c; ch++) {
        /* src/sd/sc: the channel to read, as the tensor's channel ch or the f32 copy's only one */
        const amp_bn_desc *sd = d;
        const void *src = x;
        int64_t sc = ch;
        float *buf = NULL;
        if (half) {
            if (amp_dnnl_arena(AMP_DNNL_ARENA_WIDEN, (size_t)count * sizeof *buf,
                               (void **)&buf) != AMP_OK) {
#pragma omp atomic write
                failed = 1;
                continue;
            }
            channel_widen(d, x, ch, buf);
            sd = &one, src = buf, sc = 0;
        }
        double mean = channel_sum(sd, src, sc, 0.0, 0) / (double)count;
        double var_sum = channel_sum(sd, src, sc, mean, 1);
        double invstd = amp_bn_invstd(var_sum / (double)count, d->eps);
        float scale, shift;
        amp_bn_fold(mean, invstd, gamma ? gamma[ch] : 1.0f, beta ? beta[ch] : 0.0f, &scale,
                    &shift);
        if (half) {
            channel_apply(&one, buf, 0, scale, shift, buf);
            channel_narrow(d, buf, ch, y);
        } else {
            channel_apply(d, x, ch, scale, shift, y);
        }
        if (save_mean) save_mean[ch] = (float)mean;
        if (save_invstd) save_invstd[ch] = (float)invstd;
        if (running_mean)
            running_mean[ch] = amp_bn_running_update(running_mean[ch], mean, d->momentum);
        if (running_var)
            running_var[ch] =
                amp_bn_running_update(running_var[ch], var_sum / (double)(count - 1), d->momentum);
    }
    if (failed) return channel_arena_oom(__func__, d, 1);
    return AMP_OK;
}

amp_status amp_cpu_bn_fwd_eval(amp_device_ctx *dev, const amp_bn_desc *d, const void *x,
                               const float *gamma, const float *beta, const float *running_mean,
                               const float *running_var, void *y) {
    AMP_TRY(amp_backend_check_bn(__func__, d, AMP_BN_PASS_EVAL));
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

/* sum(dy) and sum((x - mean) * dy) over channel ch, in double; dt f32 or bf16; dy masked by
 * ReLU's backward on y when y is given (amp_bn_desc.relu). */
AMP_CPU_CLONED(static, void, channel_bwd_sums, (const amp_bn_desc *d, const void *x, const void *dy,
               const void *y, int64_t ch, double mean, double *sum_dy, double *dot),
               (d, x, dy, y, ch, mean, sum_dy, dot)) {
    channel_sums(d, BN_SUM_DY, x, dy, y, ch, mean, sum_dy, dot);
}

/* batchnorm_tiles.h's dx loop, built for the wider vectors (cpu_clones.h). */
AMP_CPU_CLONED(static, void, channel_bwd_dx, (const amp_bn_desc *d, const void *x, const void *dy,
               const void *y, int64_t ch, float mean, float proj, float mean_dy, float k,
               void *dx),
               (d, x, dy, y, ch, mean, proj, mean_dy, k, dx)) {
    channel_bwd_dx_tiles(d, x, dy, y, ch, mean, proj, mean_dy, k, dx);
}

/* channel_widen of the f16 dy masked by ReLU's backward on y, on the bits (as the binary entry's
 * AMP_BINARY_RELU_BWD does it) a tile at a time, then widened: a widening of y per element cost
 * several ms a step on the ConvNet (the same section). `one` (the copy's descriptor) visits the copy in the tiles in which
 * d visits channel ch. */
AMP_CPU_CLONED(static, void, channel_widen_relu_f16, (const amp_bn_desc *d, const amp_bn_desc *one,
               const void *dy, const void *y, int64_t ch, float *buf),
               (d, one, dy, y, ch, buf)) {
    uint16_t masked[AMP_CPU_REDUCE_CHUNK];
    const uint16_t *g = dy, *yb = y;
    for (int64_t t = 0; t < channel_tiles(d); t++) {
        int64_t len, off = channel_tile(d, ch, t, &len);
        for (int64_t k = 0; k < len; k++)
            masked[k] = amp_relu_bwd_half_bits(yb[off + k], g[off + k], 0x7c00u);
        (void)amp_cpu_convert(buf + channel_tile(one, 0, t, &len), AMP_F32, masked, AMP_F16, len);
    }
}

amp_status amp_cpu_bn_bwd(amp_device_ctx *dev, const amp_bn_desc *d, const void *x, const void *dy,
                          const void *y, const float *gamma, const float *save_mean,
                          const float *save_invstd, void *dx, float *dgamma, float *dbeta) {
    AMP_TRY(amp_backend_check_bn(__func__, d, AMP_BN_PASS_BWD));
    AMP_TRY(amp_backend_check_bn_bwd_y(__func__, d, y));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(save_mean);
    AMP_CHECK_ARG(save_invstd);
    int64_t numel = d->n * d->hw;
    double count = (double)numel;
    bool half = bn_through_f32_copies(d); /* else read in place (bn_load, batchnorm_avx512.c) */
    amp_bn_desc one = channel_desc(d);
    int failed = 0;
#pragma omp parallel for schedule(static) if (d->n * d->c * d->hw >= AMP_CPU_PARALLEL_MIN)
    for (int64_t ch = 0; ch < d->c; ch++) {
        const amp_bn_desc *sd = d;
        const void *sx = x, *sdy = dy;
        int64_t sc = ch;
        float *bx = NULL, *bdy = NULL;
        if (half) {
            if (amp_dnnl_arena(AMP_DNNL_ARENA_WIDEN, 2 * amp_dnnl_f32_nbytes(numel),
                               (void **)&bx) != AMP_OK) {
#pragma omp atomic write
                failed = 1;
                continue;
            }
            bdy = (float *)((char *)bx + amp_dnnl_f32_nbytes(numel));
            channel_widen(d, x, ch, bx);
            if (y) channel_widen_relu_f16(d, &one, dy, y, ch, bdy);
            else channel_widen(d, dy, ch, bdy);
            sd = &one, sx = bx, sdy = bdy, sc = 0;
        }
        const void *sy = half ? NULL : y; /* the copy of dy is masked already */
        double mean = save_mean[ch], invstd = save_invstd[ch], sum_dy, dot;
        channel_bwd_sums(sd, sx, sdy, sy, sc, mean, &sum_dy, &dot);
        if (dgamma) dgamma[ch] = (float)(dot * invstd);
        if (dbeta) dbeta[ch] = (float)sum_dy;
        if (!dx) continue;
        float proj = (float)(dot * invstd * invstd / count), mean_dy = (float)(sum_dy / count);
        float k = (float)((gamma ? (double)gamma[ch] : 1.0) * invstd);
        if (half) { /* dx over the copy of dy: each element is read before it is written */
            channel_bwd_dx(&one, bx, bdy, NULL, 0, save_mean[ch], proj, mean_dy, k, bdy);
            channel_narrow(d, bdy, ch, dx);
        } else {
            channel_bwd_dx(d, x, dy, y, ch, save_mean[ch], proj, mean_dy, k, dx);
        }
    }
    if (failed) return channel_arena_oom(__func__, d, 2);
    return AMP_OK;
}
