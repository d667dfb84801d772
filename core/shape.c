/* PyTorch's shape rules for the ops on dims (core/shape.h). */
#include "core/shape.h"

#include <stdio.h>

#include "core/error.h"

amp_status amp_broadcast_shape(const char *op, const amp_tensor *a, const amp_tensor *b,
                               int *ndim, int64_t *shape) {
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int k = 0; k < n; k++) {
        int ka = k - (n - a->ndim), kb = k - (n - b->ndim);
        int64_t ea = ka >= 0 ? a->shape[ka] : 1, eb = kb >= 0 ? b->shape[kb] : 1;
        if (ea != eb && ea != 1 && eb != 1) {
            char sa[96], sb[96];
            return amp_fail(AMP_ERR_SHAPE, "%s: a %s and b %s do not broadcast (dim %d from the "
                            "end: %lld against %lld)", op, amp_shape_str(a, sa, sizeof sa),
                            amp_shape_str(b, sb, sizeof sb), n - k, (long long)ea, (long long)eb);
        }
        shape[k] = ea == 1 ? eb : ea;
    }
    *ndim = n;
    return AMP_OK;
}

amp_status amp_broadcast_shape_with(const char *op, const char *name, const amp_tensor *x,
                                    int *ndim, int64_t *shape) {
    int n = x->ndim > *ndim ? x->ndim : *ndim, cur = *ndim;
    int64_t out[AMP_MAX_DIMS];
    for (int k = 0; k < n; k++) {
        int kx = k - (n - x->ndim), ks = k - (n - cur);
        int64_t ex = kx >= 0 ? x->shape[kx] : 1, es = ks >= 0 ? shape[ks] : 1;
        if (ex != es && ex != 1 && es != 1) {
            char sx[96];
            return amp_fail(AMP_ERR_SHAPE, "%s: %s %s does not broadcast with the other operands "
                            "(dim %d from the end: %lld against %lld)", op, name,
                            amp_shape_str(x, sx, sizeof sx), n - k, (long long)ex, (long long)es);
        }
        out[k] = ex == 1 ? es : ex;
    }
    for (int k = 0; k < n; k++) shape[k] = out[k];
    *ndim = n;
    return AMP_OK;
}

void amp_dense_strides(int ndim, const int64_t *shape, int64_t *stride) {
    int64_t s = 1;
    for (int k = ndim - 1; k >= 0; k--) {
        stride[k] = s;
        s *= shape[k];
    }
}

void amp_broadcast_strides(const amp_tensor *x, int ndim, const int64_t *shape, int64_t *stride) {
    int64_t own[AMP_MAX_DIMS];
    amp_dense_strides(x->ndim, x->shape, own);
    for (int k = 0; k < ndim; k++) {
        int kx = k - (ndim - x->ndim);
        stride[k] = kx >= 0 && x->shape[kx] == shape[k] ? own[kx] : 0;
    }
}

amp_status amp_dim_index(const char *op, int ndim, int dim, int *out) {
    if (dim < -ndim || dim >= ndim)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: dim %d is outside [%d, %d) for a %d-D tensor",
                        op, dim, -ndim, ndim, ndim);
    *out = dim < 0 ? dim + ndim : dim;
    return AMP_OK;
}

void amp_split_at_dim(const amp_tensor *x, int dim, int64_t *outer, int64_t *n, int64_t *inner) {
    int64_t o = 1, i = 1;
    for (int k = 0; k < dim; k++) o *= x->shape[k];
    for (int k = dim + 1; k < x->ndim; k++) i *= x->shape[k];
    *outer = o;
    *n = x->shape[dim];
    *inner = i;
}
