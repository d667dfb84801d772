/* CPU backend: copies between strided views (copy_strided: permute, narrow, cat, expand), binary
 * ops over broadcast operands (binary_bcast) and the select between them (where), the contracts
 * of core/backend.h.
 *
 * They walk the output in rows of its last dim: the offsets of a row's first element come from
 * kernels/math/strided.h (as the CUDA kernels compute every element's; the copy steps them from
 * row to row instead), then the row is one strided loop. Rows are split between threads; each element is written once, so the result
 * does not depend on the thread count. The arithmetic is binary's (kernels/math/binary_op.h),
 * the same bits. */
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/binary_op.h"
#include "kernels/math/load_store.h"
#include "kernels/math/strided.h"

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

/* Rows [r0, r1) of a copy: the first row's offsets from its index, the next ones by stepping
 * the row's multi-index like an odometer (no divisions); a row that is contiguous on both sides
 * is one memcpy (permutes of [.., T, heads, head_dim] keep head_dim contiguous). */
static void copy_rows(const amp_strided_desc *d, const char *src, char *dst, int64_t r0,
                      int64_t r1) {
    int nd = d->ndim, outer = nd - 1;
    int64_t len = d->shape[nd - 1], ss = d->src_stride[nd - 1], ds = d->dst_stride[nd - 1];
    size_t es = amp_dtype_size(d->dt);
    int64_t idx[AMP_BE_MAX_DIMS] = {0}, so = 0, dof = 0;
    for (int64_t i = r0, k = outer - 1; k >= 0; k--) { /* row r0's multi-index and offsets */
        idx[k] = i % d->shape[k];
        i /= d->shape[k];
        so += idx[k] * d->src_stride[k], dof += idx[k] * d->dst_stride[k];
    }
    for (int64_t r = r0; r < r1; r++) {
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
        for (int k = outer - 1; k >= 0; k--) { /* the next row's multi-index and offsets */
            so += d->src_stride[k], dof += d->dst_stride[k];
            if (++idx[k] < d->shape[k]) break;
            so -= d->shape[k] * d->src_stride[k], dof -= d->shape[k] * d->dst_stride[k];
            idx[k] = 0;
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
#ifdef _OPENMP
        int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
#else
        int64_t threads = 1, me = 0;
#endif
        int64_t per = rows / threads, extra = rows % threads;
        int64_t r0 = me * per + (me < extra ? me : extra), r1 = r0 + per + (me < extra);
        if (r0 < r1) copy_rows(d, src, dst, r0, r1);
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
#pragma omp parallel for schedule(static) if (rows * len >= AMP_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t ao, bo;
        amp_view_offsets(nd - 1, d->shape, d->a_stride, d->b_stride, r, &ao, &bo);
        for (int64_t i = 0; i < len; i++) {
            float v = amp_binary_apply(d->op, amp_load_f32(a, d->dt, ao + i * as),
                                       amp_load_f32(b, d->dt, bo + i * bs));
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
#pragma omp parallel for schedule(static) if (rows * len >= AMP_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t ao, bo, co = amp_view_offset(nd - 1, d->shape, d->cond_stride, r);
        amp_view_offsets(nd - 1, d->shape, d->a_stride, d->b_stride, r, &ao, &bo);
        for (int64_t i = 0; i < len; i++) {
            bool take_a = cond[co + i * cs] != 0;
            int64_t from = take_a ? ao + i * as : bo + i * bs;
            const void *src = take_a ? a : b;
            if (two) ((uint16_t *)y)[r * len + i] = ((const uint16_t *)src)[from];
            else ((uint32_t *)y)[r * len + i] = ((const uint32_t *)src)[from];
        }
    }
    return AMP_OK;
}
