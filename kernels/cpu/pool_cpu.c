/* CPU backend: 2-D max pooling forward (values and i32 argmax) and backward (scatter).
 *
 * One task per (n, c) plane. The forward keeps PyTorch's CPU semantics: the window starts at
 * -inf with the argmax on its first in-bounds element, a value wins when strictly greater or NaN.
 * The backward overwrites dx: zero, then dx[argmax] += dy in output order within the plane, in
 * f32 (windows overlap when stride < k), rounded once on store for f16/bf16. Planes of f16/bf16
 * are widened into per-thread f32 buffers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/pool.h"

/* A thread's f32 planes for f16/bf16 storage (none for f32): in_sz and out_sz floats. Returns 1
 * when they could not be allocated; the caller frees both either way. */
static int plane_buffers(amp_dtype dt, int64_t in_sz, int64_t out_sz, float **bin, float **bout) {
    *bin = *bout = NULL;
    if (dt == AMP_F32) return 0;
    *bin = malloc((size_t)in_sz * sizeof **bin);
    *bout = malloc((size_t)out_sz * sizeof **bout);
    return !*bin || !*bout;
}

static amp_status plane_buffers_oom(const char *fn, int64_t in_sz, int64_t out_sz) {
    return amp_fail(AMP_ERR_OOM, "%s: out of memory for %lld + %lld floats", fn, (long long)in_sz,
                    (long long)out_sz);
}

static void pool_plane_fwd(const amp_pool_desc *d, const float *x, float *y, int32_t *argmax) {
    for (int64_t oh = 0; oh < d->h_out; oh++) {
        int64_t h0, h1;
        amp_pool_window(oh, d->stride, d->pad, d->k, d->h_in, &h0, &h1);
        for (int64_t ow = 0; ow < d->w_out; ow++) {
            int64_t w0, w1;
            amp_pool_window(ow, d->stride, d->pad, d->k, d->w_in, &w0, &w1);
            float best = -INFINITY;
            int64_t best_i = h0 * d->w_in + w0;
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++) {
                    float v = x[ih * d->w_in + iw];
                    if (amp_maxpool_takes(v, best)) {
                        best = v;
                        best_i = ih * d->w_in + iw;
                    }
                }
            y[oh * d->w_out + ow] = best;
            argmax[oh * d->w_out + ow] = (int32_t)best_i;
        }
    }
}

/* The common 2x2 window with stride 2 and no padding (every window in bounds): the same four
 * candidates in the same row-major order as pool_plane_fwd, with selects instead of the generic
 * window loops, which took 10 ns an output (5.8 of the ConvNet's 36 ms step). */
static inline void pool_take(float v, int32_t i, float *best, int32_t *best_i) {
    int takes = amp_maxpool_takes(v, *best);
    *best = takes ? v : *best;
    *best_i = takes ? i : *best_i;
}

static void pool_plane_fwd_2x2(const amp_pool_desc *d, const float *x, float *y, int32_t *argmax) {
    int32_t w_in = (int32_t)d->w_in;
    for (int32_t oh = 0; oh < (int32_t)d->h_out; oh++) {
        const float *r0 = x + (int64_t)(2 * oh) * w_in, *r1 = r0 + w_in;
        float *yr = y + oh * d->w_out;
        int32_t *ar = argmax + oh * d->w_out;
        int32_t base = 2 * oh * w_in;
        for (int32_t ow = 0; ow < (int32_t)d->w_out; ow++) {
            int32_t c = 2 * ow;
            float best = r0[c]; /* -inf start: the first element holds the argmax either way */
            int32_t best_i = base + c;
            pool_take(r0[c + 1], base + c + 1, &best, &best_i);
            pool_take(r1[c], base + w_in + c, &best, &best_i);
            pool_take(r1[c + 1], base + w_in + c + 1, &best, &best_i);
            yr[ow] = best;
            ar[ow] = best_i;
        }
    }
}

amp_status amp_cpu_maxpool_fwd(const amp_pool_desc *d, const void *x, void *y, int32_t *argmax) {
    AMP_TRY(amp_backend_check_pool(__func__, d));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    AMP_CHECK_ARG(argmax);
    int64_t planes = d->n * d->c, in_sz = d->h_in * d->w_in, out_sz = d->h_out * d->w_out;
    amp_dtype dt = d->dtype;
    void (*plane_fwd)(const amp_pool_desc *, const float *, float *, int32_t *) =
        d->k == 2 && d->stride == 2 && d->pad == 0 ? pool_plane_fwd_2x2 : pool_plane_fwd;
    int failed = 0;
#pragma omp parallel if (planes * in_sz >= AMP_CPU_PARALLEL_MIN)
    {
        float *bin, *bout;
        if (plane_buffers(dt, in_sz, out_sz, &bin, &bout)) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t p = 0; p < planes; p++) {
            if (dt == AMP_F32) {
                plane_fwd(d, (const float *)x + p * in_sz, (float *)y + p * out_sz,
                          argmax + p * out_sz);
            } else if (bin && bout) {
                (void)amp_cpu_cast(bin, AMP_F32, (const uint16_t *)x + p * in_sz, dt, in_sz);
                plane_fwd(d, bin, bout, argmax + p * out_sz);
                (void)amp_cpu_cast((uint16_t *)y + p * out_sz, dt, bout, AMP_F32, out_sz);
            }
        }
        free(bin);
        free(bout);
    }
    if (failed) return plane_buffers_oom(__func__, in_sz, out_sz);
    return AMP_OK;
}

/* dx = 0, then dx[argmax] += dy over one plane; 0 on success, 1 for an argmax outside it. */
static int pool_plane_bwd(int64_t in_sz, int64_t out_sz, const float *dy, const int32_t *argmax,
                          float *dx) {
    memset(dx, 0, (size_t)in_sz * sizeof *dx);
    for (int64_t o = 0; o < out_sz; o++) {
        int32_t i = argmax[o];
        if (i < 0 || i >= in_sz) return 1;
        dx[i] += dy[o];
    }
    return 0;
}

amp_status amp_cpu_maxpool_bwd(const amp_pool_desc *d, const void *dy, const int32_t *argmax,
                               void *dx) {
    AMP_TRY(amp_backend_check_pool(__func__, d));
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(argmax);
    AMP_CHECK_ARG(dx);
    int64_t planes = d->n * d->c, in_sz = d->h_in * d->w_in, out_sz = d->h_out * d->w_out;
    amp_dtype dt = d->dtype;
    int failed = 0, bad_index = 0;
#pragma omp parallel if (planes * in_sz >= AMP_CPU_PARALLEL_MIN)
    {
        float *bin, *bout;
        if (plane_buffers(dt, in_sz, out_sz, &bin, &bout)) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t p = 0; p < planes; p++) {
            int bad = 0;
            if (dt == AMP_F32) {
                bad = pool_plane_bwd(in_sz, out_sz, (const float *)dy + p * out_sz,
                                     argmax + p * out_sz, (float *)dx + p * in_sz);
            } else if (bin && bout) {
                (void)amp_cpu_cast(bout, AMP_F32, (const uint16_t *)dy + p * out_sz, dt, out_sz);
                bad = pool_plane_bwd(in_sz, out_sz, bout, argmax + p * out_sz, bin);
                (void)amp_cpu_cast((uint16_t *)dx + p * in_sz, dt, bin, AMP_F32, in_sz);
            }
            if (bad) {
#pragma omp atomic write
                bad_index = 1;
            }
        }
        free(bin);
        free(bout);
    }
    if (failed) return plane_buffers_oom(__func__, in_sz, out_sz);
    if (bad_index)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "amp_cpu_maxpool_bwd: argmax holds an index outside the input plane "
                        "[0, %lld)",
                        (long long)in_sz);
    return AMP_OK;
}
