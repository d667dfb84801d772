/* CPU backend: 2-D max pooling forward (values) and backward (scatter), NCHW.
 *
 * One task per (n, c) plane. The forward keeps PyTorch's CPU semantics: the window starts at
 * -inf with the argmax on its first in-bounds element, a value wins when strictly greater or NaN
 * (kernels/math/pool.h). No index tensor is kept between the passes: the backward takes the
 * forward's input x and finds each window's argmax again by the same scan (cuDNN's pooling
 * backward takes x for the same reason), which saves the i32 index per output that PyTorch keeps
 * (at O3 that index was as large as the pooled half activations it indexes). The backward
 * overwrites dx: zero, then dx[argmax] += dy in output order within the plane, in f32 (windows
 * overlap when stride < k), rounded once on store for f16/bf16. Planes of f16/bf16 are widened
 * into per-thread f32 buffers. The ConvNet's 2x2 stride-2 pooling runs sixteen outputs per vector
 * on CPUs with AVX-512 (pool_2x2_avx512.c, below AMP_CPU_ISA's cap), in every dtype without
 * the copies. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/pool.h"

/* A thread's planes: an i32 index per output; for f16/bf16 storage an f32 input plane; and an
 * f32 output plane for f16/bf16 storage or the backward (which scans for the maxima again into
 * it). NULL where not needed; returns 1 when one that is needed could not be allocated (the
 * caller frees them all either way). */
typedef struct plane_scratch {
    float *in, *out;
    int32_t *argmax;
} plane_scratch;

static int plane_scratch_alloc(plane_scratch *p, amp_dtype dt, int64_t in_sz, int64_t out_sz,
                               bool backward) {
    *p = (plane_scratch){0};
    if (dt != AMP_F32 && !(p->in = malloc((size_t)in_sz * sizeof *p->in))) return 1;
    if ((dt != AMP_F32 || backward) && !(p->out = malloc((size_t)out_sz * sizeof *p->out)))
        return 1;
    return !(p->argmax = malloc((size_t)out_sz * sizeof *p->argmax));
}

static void plane_scratch_free(plane_scratch *p) {
    free(p->in);
    free(p->out);
    free(p->argmax);
}

static amp_status plane_scratch_oom(const char *fn, int64_t in_sz, int64_t out_sz) {
    return amp_fail(AMP_ERR_OOM, "%s: out of memory for %lld + %lld plane elements", fn,
                    (long long)in_sz, (long long)out_sz);
}

/* One plane's maxima into y and their input-plane indices into argmax. */
static void pool_plane_fwd(const amp_pool_desc *d, const float *x, float *y, int32_t *argmax) {
    for (int64_t oh = 0; oh < d->h_out; oh++) {
        int64_t h0, h1;
        amp_pool_window(oh, d->stride, d->pad, d->k, d->h_in, &h0, &h1);
        for (int64_t ow = 0; ow < d->w_out; ow++) {
            int64_t w0, w1;
            amp_pool_window(ow, d->stride, d->pad, d->k, d->w_in, &w0, &w1);
            float best;
            int64_t at = amp_pool_argmax(x, AMP_F32, 0, d->w_in, h0, h1, w0, w1, &best);
            y[oh * d->w_out + ow] = best;
            argmax[oh * d->w_out + ow] = (int32_t)at;
        }
    }
}

/* The common 2x2 window with stride 2 and no padding (every window in bounds): the same four
 * candidates in the same row-major order as amp_pool_argmax, with selects instead of the
 * generic window loops, which took a sixth of the ConvNet's step (bench/RESULTS.md, "Figures behind decisions in the code", pool.c). */
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

/* The forward's 2x2 stride-2 maxima without indices (the forward keeps none): the same scan as
 * pool_plane_fwd_2x2, as a chain of selects. Not built for AVX-512 (kernels/cpu/cpu_clones.h):
 * with rows of 7 and 14 outputs that clone ran slower (the same section). */
static inline float pool_best(float v, float best) {
    return amp_maxpool_takes(v, best) ? v : best;
}

static void pool_plane_max_2x2(const amp_pool_desc *d, const float *x, float *y) {
    int64_t w_in = d->w_in, w_out = d->w_out;
    for (int64_t oh = 0; oh < d->h_out; oh++) {
        const float *r0 = x + 2 * oh * w_in, *r1 = r0 + w_in;
        float *yr = y + oh * w_out;
        for (int64_t ow = 0; ow < w_out; ow++) {
            float best = r0[2 * ow];
            best = pool_best(r0[2 * ow + 1], best);
            best = pool_best(r1[2 * ow], best);
            yr[ow] = pool_best(r1[2 * ow + 1], best);
        }
    }
}

typedef void (*plane_fwd_fn)(const amp_pool_desc *, const float *, float *, int32_t *);

static plane_fwd_fn plane_fwd_for(const amp_pool_desc *d) {
    return d->k == 2 && d->stride == 2 && d->pad == 0 ? pool_plane_fwd_2x2 : pool_plane_fwd;
}

amp_status amp_cpu_maxpool_fwd(amp_device_ctx *dev, const amp_pool_desc *d, const void *x,
                               void *y) {
    AMP_TRY(amp_backend_check_pool(__func__, d));
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    int64_t planes = d->n * d->c, in_sz = d->h_in * d->w_in, out_sz = d->h_out * d->w_out;
    amp_dtype dt = d->dtype;
    if (amp_cpu_pool2x2_vectorised(d)) {
        size_t elem = amp_dtype_size(dt);
#pragma omp parallel for schedule(static) if (planes * in_sz >= AMP_CPU_PARALLEL_MIN)
        for (int64_t p = 0; p < planes; p++)
            amp_cpu_pool2x2_fwd_plane(d, (const char *)x + (size_t)(p * in_sz) * elem,
                                      (char *)y + (size_t)(p * out_sz) * elem);
        return AMP_OK;
    }
    plane_fwd_fn plane_fwd = plane_fwd_for(d);
    bool is_2x2 = plane_fwd == pool_plane_fwd_2x2;
    int failed = 0;
#pragma omp parallel if (planes * in_sz >= AMP_CPU_PARALLEL_MIN)
    {
        plane_scratch sc;
        int oom = plane_scratch_alloc(&sc, dt, in_sz, out_sz, false);
        if (oom) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t p = 0; p < planes; p++) {
            if (oom) continue;
            if (dt == AMP_F32 && is_2x2) {
                pool_plane_max_2x2(d, (const float *)x + p * in_sz, (float *)y + p * out_sz);
            } else if (dt == AMP_F32) {
                plane_fwd(d, (const float *)x + p * in_sz, (float *)y + p * out_sz, sc.argmax);
            } else {
                (void)amp_cpu_convert(sc.in, AMP_F32, (const uint16_t *)x + p * in_sz, dt, in_sz);
                if (is_2x2) pool_plane_max_2x2(d, sc.in, sc.out);
                else plane_fwd(d, sc.in, sc.out, sc.argmax);
                (void)amp_cpu_convert((uint16_t *)y + p * out_sz, dt, sc.out, AMP_F32, out_sz);
            }
        }
        plane_scratch_free(&sc);
    }
    if (failed) return plane_scratch_oom(__func__, in_sz, out_sz);
    return AMP_OK;
}

/* dx = 0, then dx[argmax] += dy over one plane. */
static void pool_plane_scatter(int64_t in_sz, int64_t out_sz, const float *dy,
                               const int32_t *argmax, float *dx) {
    memset(dx, 0, (size_t)in_sz * sizeof *dx);
    for (int64_t o = 0; o < out_sz; o++) dx[argmax[o]] += dy[o];
}

amp_status amp_cpu_maxpool_bwd(amp_device_ctx *dev, const amp_pool_desc *d, const void *dy,
                               const void *x, void *dx) {
    AMP_TRY(amp_backend_check_pool(__func__, d));
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(dx);
    int64_t planes = d->n * d->c, in_sz = d->h_in * d->w_in, out_sz = d->h_out * d->w_out;
    amp_dtype dt = d->dtype;
    if (amp_cpu_pool2x2_vectorised(d)) {
        size_t elem = amp_dtype_size(dt);
#pragma omp parallel for schedule(static) if (planes * in_sz >= AMP_CPU_PARALLEL_MIN)
        for (int64_t p = 0; p < planes; p++)
            amp_cpu_pool2x2_bwd_plane(d, (const char *)x + (size_t)(p * in_sz) * elem,
                                      (const char *)dy + (size_t)(p * out_sz) * elem,
                                      (char *)dx + (size_t)(p * in_sz) * elem);
        return AMP_OK;
    }
    plane_fwd_fn plane_fwd = plane_fwd_for(d);
    int failed = 0;
#pragma omp parallel if (planes * in_sz >= AMP_CPU_PARALLEL_MIN)
    {
        /* The f32 output plane holds the recomputed maxima (unused), then, for half storage,
         * the widened dy; the f32 input plane the widened x, then dx. */
        plane_scratch sc;
        int oom = plane_scratch_alloc(&sc, dt, in_sz, out_sz, true);
        if (oom) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t p = 0; p < planes; p++) {
            if (oom) continue;
            if (dt == AMP_F32) {
                plane_fwd(d, (const float *)x + p * in_sz, sc.out, sc.argmax);
                pool_plane_scatter(in_sz, out_sz, (const float *)dy + p * out_sz, sc.argmax,
                                   (float *)dx + p * in_sz);
            } else {
                (void)amp_cpu_convert(sc.in, AMP_F32, (const uint16_t *)x + p * in_sz, dt, in_sz);
                plane_fwd(d, sc.in, sc.out, sc.argmax);
                (void)amp_cpu_convert(sc.out, AMP_F32, (const uint16_t *)dy + p * out_sz, dt,
                                      out_sz);
                pool_plane_scatter(in_sz, out_sz, sc.out, sc.argmax, sc.in);
                (void)amp_cpu_convert((uint16_t *)dx + p * in_sz, dt, sc.in, AMP_F32, in_sz);
            }
        }
        plane_scratch_free(&sc);
    }
    if (failed) return plane_scratch_oom(__func__, in_sz, out_sz);
    return AMP_OK;
}
