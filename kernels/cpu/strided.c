/* CPU backend: copies between strided views (copy_strided: permute, narrow, cat, expand), binary
 * ops over broadcast operands (binary_bcast) and the select between them (where), the contracts
 * of core/backend.h.
 *
 * They walk the output in rows of its last dim, each thread a contiguous range of rows: the
 * offsets of the range's first row come from its index (as kernels/math/strided.h computes every
 * element's for the CUDA kernels), the next rows' by stepping the multi-index like an odometer,
 * without divisions; then the row is one strided loop, or a memcpy for a copy contiguous on both
 * sides. Each element is written once, so the result does not depend on the thread count. The
 * arithmetic is binary's (kernels/math/pointwise_op.h), the same bits. */
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/pointwise_op.h"
#include "kernels/math/load_store.h"

/* A row's multi-index over the outer dims (all but the last) and its first element's offset
 * through up to three sets of strides. */
typedef struct row_walk {
    int outer, n;
    const int64_t *shape, *stride[3];
    int64_t idx[AMP_BE_MAX_DIMS], off[3];
} row_walk;

/* The walk over shape's outer dims through the strides s0, s1 and s2 (NULL: two sets), at row. */
static void walk_start(row_walk *w, int outer, const int64_t *shape, const int64_t *s0,
                       const int64_t *s1, const int64_t *s2, int64_t row) {
    *w = (row_walk){.outer = outer, .n = s2 ? 3 : 2, .shape = shape, .stride = {s0, s1, s2}};
    for (int k = w->outer - 1; k >= 0; k--) {
        w->idx[k] = row % w->shape[k];
        row /= w->shape[k];
        for (int s = 0; s < w->n; s++) w->off[s] += w->idx[k] * w->stride[s][k];
    }
}

static void walk_next(row_walk *w) {
    for (int k = w->outer - 1; k >= 0; k--) {
        for (int s = 0; s < w->n; s++) w->off[s] += w->stride[s][k];
        if (++w->idx[k] < w->shape[k]) return;
        for (int s = 0; s < w->n; s++) w->off[s] -= w->shape[k] * w->stride[s][k];
        w->idx[k] = 0;
    }
}

/* This thread's rows [*r0, *r1) of rows, inside a parallel region (all of them outside one). */
static void thread_rows(int64_t rows, int64_t *r0, int64_t *r1) {
#ifdef _OPENMP
    int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
#else
    int64_t threads = 1, me = 0;
#endif
    int64_t per = rows / threads, extra = rows % threads;
    *r0 = me * per + (me < extra ? me : extra);
    *r1 = *r0 + per + (me < extra);
}

static int64_t view_rows(int ndim, const int64_t *shape) {
    int64_t r = 1;
    for (int k = 0; k < ndim - 1; k++) r *= shape[k];
    return r;
}

static bool view_empty(int ndim, const int64_t *shape) {
    for (int k = 0; k < ndim; k++)
        if (shape[k] == 0) return true;
    return false;
}

/* Rows [r0, r1) of a copy; a row contiguous on both sides is one memcpy (the permutes of
 * [..., T, heads, head_dim] keep head_dim contiguous). */
static void copy_rows(const amp_strided_desc *d, const char *src, char *dst, int64_t r0,
                      int64_t r1) {
    int nd = d->ndim;
    int64_t len = d->shape[nd - 1], ss = d->src_stride[nd - 1], ds = d->dst_stride[nd - 1];
    size_t es = amp_dtype_size(d->dt);
    row_walk w;
    walk_start(&w, nd - 1, d->shape, d->src_stride, d->dst_stride, NULL, r0);
    for (int64_t r = r0; r < r1; r++, walk_next(&w)) {
        int64_t so = w.off[0], dof = w.off[1];
        if (ss == 1 && ds == 1) {
            memcpy(dst + (size_t)dof * es, src + (size_t)so * es, (size_t)len * es);
        } else if (es == 2) {
            const uint16_t *s = (const uint16_t *)src + so;
            uint16_t *t = (uint16_t *)dst + dof;
            for (int64_t i = 0; i < len; i++) t[i * ds] = s[i * ss];
        } else {
            const uint32_t *s = (const uint32_t *)src + so;
            uint32_t *t = (uint32_t *)dst + dof;
            for (int64_t i = 0; i < len; i++) t[i * ds] = s[i * ss];
        }
    }
}

amp_status amp_cpu_copy_strided(amp_device_ctx *dev, const amp_strided_desc *d, const void *src,
                                void *dst) {
    AMP_TRY(amp_backend_check_strided(__func__, d));
    if (view_empty(d->ndim, d->shape)) return AMP_OK;
    AMP_CHECK_ARG(src);
    AMP_CHECK_ARG(dst);
    int64_t rows = view_rows(d->ndim, d->shape), len = d->shape[d->ndim - 1];
#pragma omp parallel if (rows * len >= AMP_CPU_PARALLEL_MIN)
    {
        int64_t r0, r1;
        thread_rows(rows, &r0, &r1);
        copy_rows(d, src, dst, r0, r1);
    }
    return AMP_OK;
}

amp_status amp_cpu_binary_bcast(amp_device_ctx *dev, const amp_bcast_desc *d, const void *a,
                                const void *b, void *y) {
    AMP_TRY(amp_backend_check_bcast(__func__, d));
    if (view_empty(d->ndim, d->shape)) return AMP_OK;
    AMP_CHECK_ARG(a);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(y);
    int nd = d->ndim;
    int64_t rows = view_rows(nd, d->shape), len = d->shape[nd - 1];
    int64_t as = d->a_stride[nd - 1], bs = d->b_stride[nd - 1];
#pragma omp parallel if (rows * len >= AMP_CPU_PARALLEL_MIN)
    {
        int64_t r0, r1;
        thread_rows(rows, &r0, &r1);
        row_walk w;
        walk_start(&w, nd - 1, d->shape, d->a_stride, d->b_stride, NULL, r0);
        for (int64_t r = r0; r < r1; r++, walk_next(&w))
            for (int64_t i = 0; i < len; i++) {
                float v = amp_binary_apply(d->op, amp_load_f32(a, d->dt, w.off[0] + i * as),
                                           amp_load_f32(b, d->dt, w.off[1] + i * bs));
                amp_store_f32(y, d->dt, r * len + i, v);
            }
    }
    return AMP_OK;
}

amp_status amp_cpu_where(amp_device_ctx *dev, const amp_where_desc *d, const int32_t *cond,
                         const void *a, const void *b, void *y) {
    AMP_TRY(amp_backend_check_where(__func__, d));
    if (view_empty(d->ndim, d->shape)) return AMP_OK;
    AMP_CHECK_ARG(cond);
    AMP_CHECK_ARG(a);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(y);
    int nd = d->ndim;
    int64_t rows = view_rows(nd, d->shape), len = d->shape[nd - 1];
    int64_t cs = d->cond_stride[nd - 1], as = d->a_stride[nd - 1], bs = d->b_stride[nd - 1];
    bool two = amp_dtype_size(d->dt) == 2;
#pragma omp parallel if (rows * len >= AMP_CPU_PARALLEL_MIN)
    {
        int64_t r0, r1;
        thread_rows(rows, &r0, &r1);
        row_walk w;
        walk_start(&w, nd - 1, d->shape, d->cond_stride, d->a_stride, d->b_stride, r0);
        for (int64_t r = r0; r < r1; r++, walk_next(&w))
            for (int64_t i = 0; i < len; i++) {
                bool take_a = cond[w.off[0] + i * cs] != 0;
                int64_t from = take_a ? w.off[1] + i * as : w.off[2] + i * bs;
                const void *src = take_a ? a : b;
                if (two) ((uint16_t *)y)[r * len + i] = ((const uint16_t *)src)[from];
                else ((uint32_t *)y)[r * len + i] = ((const uint32_t *)src)[from];
            }
    }
    return AMP_OK;
}
