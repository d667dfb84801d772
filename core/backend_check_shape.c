/* Argument checks of the entries over dims and strided views (reduce_dim, scatter_dim,
 * binary_bcast, where, copy_strided), of the ops over the last dim (layernorm_*, softmax_*) and of
 * attention, shared by every backend. */
#include <math.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/error.h"

amp_status amp_backend_check_reduce_dim(const char *fn, amp_reduce_op op, amp_dtype dt,
                                        int64_t outer, int64_t n, int64_t inner) {
    if (op != AMP_REDUCE_SUM && op != AMP_REDUCE_MAX)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: unknown reduction %d", fn, (int)op);
    AMP_TRY(amp_backend_check_float(fn, dt));
    if (outer < 0 || inner < 0 || n < 1)
        return amp_fail(AMP_ERR_SHAPE, "%s: [%lld, %lld, %lld] needs outer, inner >= 0 and n >= 1",
                        fn, (long long)outer, (long long)n, (long long)inner);
    return AMP_OK;
}

/* The extents and the strides of one view: ndim in range, all >= 0. */
static amp_status check_view(const char *fn, int ndim, const int64_t *shape,
                             const int64_t *s1, const int64_t *s2) {
    if (ndim < 1 || ndim > AMP_BE_MAX_DIMS)
        return amp_fail(AMP_ERR_SHAPE, "%s: ndim %d is outside 1..%d", fn, ndim, AMP_BE_MAX_DIMS);
    for (int k = 0; k < ndim; k++)
        if (shape[k] < 0 || s1[k] < 0 || s2[k] < 0)
            return amp_fail(AMP_ERR_SHAPE, "%s: dim %d has extent %lld and strides %lld, %lld "
                            "(all must be >= 0)", fn, k, (long long)shape[k], (long long)s1[k],
                            (long long)s2[k]);
    return AMP_OK;
}

amp_status amp_backend_check_bcast(const char *fn, const amp_bcast_desc *d) {
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    if ((int)d->op < 0 || (int)d->op > (int)AMP_BINARY_LAST)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: unknown op %d", fn, (int)d->op);
    AMP_TRY(amp_backend_check_float(fn, d->dt));
    return check_view(fn, d->ndim, d->shape, d->a_stride, d->b_stride);
}

amp_status amp_backend_check_where(const char *fn, const amp_where_desc *d) {
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    AMP_TRY(amp_backend_check_float(fn, d->dt));
    AMP_TRY(check_view(fn, d->ndim, d->shape, d->a_stride, d->b_stride));
    return check_view(fn, d->ndim, d->shape, d->cond_stride, d->cond_stride);
}

amp_status amp_backend_check_strided(const char *fn, const amp_strided_desc *d) {
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    if (d->dt != AMP_I32) AMP_TRY(amp_backend_check_float(fn, d->dt));
    return check_view(fn, d->ndim, d->shape, d->src_stride, d->dst_stride);
}

amp_status amp_backend_check_ln(const char *fn, const amp_ln_desc *d) {
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    AMP_TRY(amp_backend_check_float(fn, d->dt));
    if (d->rows < 0 || d->cols < 1)
        return amp_fail(AMP_ERR_SHAPE, "%s: [%lld, %lld] needs rows >= 0 and cols >= 1", fn,
                        (long long)d->rows, (long long)d->cols);
    if (!(d->eps >= 0.0f) || isinf(d->eps))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: eps = %g, want a finite value >= 0", fn,
                        (double)d->eps);
    AMP_TRY(amp_backend_check_float(fn, d->r_dt));
    AMP_TRY(amp_backend_check_float(fn, d->y_dt));
    if ((d->r_dt != d->dt || d->y_dt != d->dt) && d->dt != AMP_F32)
        return amp_fail(AMP_ERR_DTYPE, "%s: x is %s with residual %s and y %s; only an f32 x may "
                        "take a half residual or give a half y", fn, amp_dtype_name(d->dt),
                        amp_dtype_name(d->r_dt), amp_dtype_name(d->y_dt));
    if (d->accumulate && d->dt != AMP_F32)
        return amp_fail(AMP_ERR_DTYPE, "%s: accumulating into dx needs an f32 x (x is %s)", fn,
                        amp_dtype_name(d->dt));
    return AMP_OK;
}

amp_status amp_backend_check_softmax(const char *fn, const amp_softmax_desc *d) {
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    AMP_TRY(amp_backend_check_float(fn, d->dt));
    if (d->rows < 0 || d->cols < 1)
        return amp_fail(AMP_ERR_SHAPE, "%s: [%lld, %lld] needs rows >= 0 and cols >= 1", fn,
                        (long long)d->rows, (long long)d->cols);
    return AMP_OK;
}

amp_status amp_backend_check_rows(const char *fn, amp_dtype dt, int64_t rows, int64_t cols,
                                  int64_t ld) {
    AMP_TRY(amp_backend_check_float(fn, dt));
    if (rows < 0 || cols < 0 || ld < cols)
        return amp_fail(AMP_ERR_SHAPE, "%s: [%lld, %lld] with row stride %lld needs rows, cols >= 0 "
                        "and a stride >= cols", fn, (long long)rows, (long long)cols, (long long)ld);
    return AMP_OK;
}

amp_status amp_backend_check_rope(const char *fn, const amp_rope_desc *d) {
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    AMP_TRY(amp_backend_check_float(fn, d->dt));
    if (d->batch < 0 || d->seq < 0 || d->heads < 0 || d->head_dim < 2 || d->head_dim % 2)
        return amp_fail(AMP_ERR_SHAPE, "%s: [%lld, %lld, %lld, %lld] needs batch, seq, heads >= 0 "
                        "and an even head_dim >= 2", fn, (long long)d->batch, (long long)d->seq,
                        (long long)d->heads, (long long)d->head_dim);
    if (d->rot_heads < 0 || d->rot_heads > d->heads)
        return amp_fail(AMP_ERR_SHAPE, "%s: rot_heads = %lld is outside [0, heads = %lld]", fn,
                        (long long)d->rot_heads, (long long)d->heads);
    if (d->offset < 0 || d->table_rows < 0 || d->offset + d->seq > d->table_rows)
        return amp_fail(AMP_ERR_SHAPE, "%s: positions [%lld, %lld) are outside the table's %lld",
                        fn, (long long)d->offset, (long long)(d->offset + d->seq),
                        (long long)d->table_rows);
    return AMP_OK;
}

amp_status amp_backend_check_embedding(const char *fn, amp_dtype dt, int64_t n, int64_t dim,
                                       int64_t vocab, const int32_t *idx) {
    AMP_TRY(amp_backend_check_float(fn, dt));
    if (n < 0 || dim < 1 || vocab < 1 || vocab > INT32_MAX)
        return amp_fail(AMP_ERR_SHAPE, "%s: %lld indices into [%lld, %lld] need n >= 0, dim >= 1 "
                        "and 1 <= vocab <= 2^31 - 1", fn, (long long)n, (long long)vocab,
                        (long long)dim);
    if (n > 0 && !idx) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'idx' is NULL", fn);
    return AMP_OK;
}

static amp_status check_attn_desc(const char *fn, const amp_attn_desc *d) {
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    AMP_TRY(amp_backend_check_float(fn, d->dt));
    if (d->batch < 0 || d->heads < 0 || d->seq < 0 || d->head_dim < 1)
        return amp_fail(AMP_ERR_SHAPE,
                        "%s: [%lld, %lld, %lld, %lld] needs batch, heads, seq >= 0 and head_dim >= 1",
                        fn, (long long)d->batch, (long long)d->heads, (long long)d->seq,
                        (long long)d->head_dim);
    if (d->kv_heads < 0 || (d->kv_heads > 0 && d->heads % d->kv_heads != 0) || d->kv_seq < 0 ||
        (d->packed && d->kv_seq > 0 && d->kv_seq != d->seq))
        return amp_fail(AMP_ERR_SHAPE, "%s: kv_heads = %lld must divide heads = %lld and kv_seq = "
                        "%lld be >= 0 (the packed layout's equal to seq = %lld)", fn,
                        (long long)d->kv_heads, (long long)d->heads, (long long)d->kv_seq,
                        (long long)d->seq);
    if (!isfinite(d->scale))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: scale = %g is not finite", fn, (double)d->scale);
    if (!(d->dropout_p >= 0.0f && d->dropout_p < 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: dropout_p = %g is outside [0, 1)", fn,
                        (double)d->dropout_p);
    return AMP_OK;
}

/* The first NULL of n arrays, named; none is needed without rows. */
static amp_status check_attn_arrays(const char *fn, const amp_attn_desc *d, int n,
                                    const void *const *arrays, const char *const *names) {
    if (d->batch * d->heads * d->seq == 0) return AMP_OK;
    for (int a = 0; a < n; a++)
        if (!arrays[a])
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument '%s' is NULL", fn, names[a]);
    return AMP_OK;
}

amp_status amp_backend_check_attn_fwd(const char *fn, const amp_attn_desc *d, const void *q,
                                      const void *k, const void *v, const void *o,
                                      const float *lse) {
    AMP_TRY(check_attn_desc(fn, d));
    const void *arrays[] = {q, k, v, o, lse};
    static const char *const names[] = {"q", "k", "v", "o", "lse"};
    return check_attn_arrays(fn, d, 5, arrays, names);
}

amp_status amp_backend_check_attn_bwd(const char *fn, const amp_attn_desc *d, const void *q,
                                      const void *k, const void *v, const void *o,
                                      const void *dout, const float *lse, const float *delta,
                                      const void *dq, const void *dk, const void *dv) {
    AMP_TRY(check_attn_desc(fn, d));
    const void *arrays[] = {q, k, v, o, dout, lse, delta, dq, dk, dv};
    static const char *const names[] = {"q", "k", "v", "o", "dout", "lse", "delta", "dq", "dk", "dv"};
    return check_attn_arrays(fn, d, 10, arrays, names);
}
