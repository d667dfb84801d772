/* CPU backend: copies between strided views (copy_strided: permute, narrow, cat, expand), binary
 * ops over broadcast operands (binary_bcast) and the select between them (where), the contracts
 * of core/backend.h.
 *
 * Both walk the output in rows of its last dim: the offsets of a row's first element come from
 * kernels/math/strided.h (as the CUDA kernels compute every element's), then the row is one
 * strided loop. Rows are split between threads; each element is written once, so the result
 * does not depend on the thread count. The arithmetic is binary's (kernels/math/binary_op.h),
 * the same bits. */
#include <string.h>

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

amp_status amp_cpu_copy_strided(amp_device_ctx *dev, const amp_strided_desc *d, const void *src,
                                void *dst) {
    AMP_TRY(amp_backend_check_strided(__func__, d));
    if (view_empty(d->ndim, d->shape)) return AMP_OK;
    AMP_CHECK_ARG(src);
    AMP_CHECK_ARG(dst);
    int nd = d->ndim;
    int64_t rows = view_rows(nd, d->shape), len = d->shape[nd - 1];
    int64_t ss = d->src_stride[nd - 1], ds = d->dst_stride[nd - 1];
    bool two = amp_dtype_size(d->dt) == 2;
#pragma omp parallel for schedule(static) if (rows * len >= AMP_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t so, dof;
        amp_view_offsets(nd - 1, d->shape, d->src_stride, d->dst_stride, r, &so, &dof);
        if (two) {
            const uint16_t *s = (const uint16_t *)src + so;
            uint16_t *t = (uint16_t *)dst + dof;
            for (int64_t i = 0; i < len; i++) t[i * ds] = s[i * ss];
        } else {
            const uint32_t *s = (const uint32_t *)src + so;
            uint32_t *t = (uint32_t *)dst + dof;
            for (int64_t i = 0; i < len; i++) t[i * ds] = s[i * ss];
        }
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
