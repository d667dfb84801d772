/* Reductions over one dim: sum, mean and max (with the index of the max), PyTorch's
 * x.sum(dim), x.mean(dim), x.max(dim). One reduce_dim pass over x seen as [outer, n, inner];
 * sums in f64 in index order (the same bits on every backend). Cast categories as torch.amp's
 * CUDA lists: sum runs in f32 under autocast (its fp32 list), mean and max in x's dtype.
 * Backward: sum and mean repeat dy along the dim (a copy_strided with stride 0 there, mean's
 * then scaled by 1/n); max sends dy to the index it took (scatter_dim). */
#include "core/error.h"
#include "core/shape.h"
#include "nn/autocast.h"

typedef struct dim_aux {
    int64_t outer, n, inner;
    bool mean;
} dim_aux;

/* The output's shape: x's without dim, or with extent 1 there. */
static void reduced_shape(const amp_tensor *x, int dim, bool keepdim, int *ndim, int64_t *shape) {
    int k = 0;
    for (int j = 0; j < x->ndim; j++) {
        if (j != dim) shape[k++] = x->shape[j];
        else if (keepdim) shape[k++] = 1;
    }
    if (k == 0) shape[k++] = 1; /* a 1-D x reduced whole: one element */
    *ndim = k;
}

static amp_status sum_bwd(amp_tape_node *node, const amp_tensor *dy) {
    const dim_aux *a = node->aux;
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(node->in[0], &s));
    if (s.buf) {
        /* dx viewed as [outer, n, inner] reads dy[outer, inner] with stride 0 along n */
        amp_strided_desc d = {.dt = dy->dtype, .ndim = 3, .shape = {a->outer, a->n, a->inner},
                              .src_stride = {a->inner, 0, 1},
                              .dst_stride = {a->n * a->inner, a->inner, 1}};
        AMP_TRY(AMP_BE(dy->backend, copy_strided, &d, dy->data, s.buf->data));
        if (a->mean)
            AMP_TRY(AMP_BE(dy->backend, unary, AMP_UNARY_DIV_SCALAR, dy->dtype, s.buf->numel,
                           s.buf->data, (float)a->n, s.buf->data));
    }
    return amp_grad_end(&s);
}

static amp_status max_bwd(amp_tape_node *node, const amp_tensor *dy) {
    const dim_aux *a = node->aux;
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(node->in[0], &s));
    if (s.buf)
        AMP_TRY(AMP_BE(dy->backend, scatter_dim, dy->dtype, a->outer, a->n, a->inner,
                       (const int32_t *)node->saved[0]->data, dy->data, s.buf->data));
    return amp_grad_end(&s);
}

static amp_status reduce_run(const char *op, const char *name, amp_reduce_op kind, bool mean,
                             amp_tensor *x, int dim, bool keepdim, amp_tensor **values,
                             amp_tensor **indices) {
    AMP_CHECK_ARG(values);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    AMP_TRY(amp_autocast(kind == AMP_REDUCE_SUM && !mean ? AMP_CAT_WIDEN : AMP_CAT_PASS, &x, 1));
    AMP_TRY(amp_check_float(op, "x", x));
    int d;
    AMP_TRY(amp_dim_index(op, x->ndim, dim, &d));
    dim_aux aux = {.mean = mean};
    amp_split_at_dim(x, d, &aux.outer, &aux.n, &aux.inner);
    int nd;
    int64_t shape[AMP_MAX_DIMS];
    reduced_shape(x, d, keepdim, &nd, shape);
    amp_tensor *y, *idx = NULL;
    AMP_TRY(amp_tensor_step(x->ctx, x->dtype, nd, shape, &y));
    if (kind == AMP_REDUCE_MAX) AMP_TRY(amp_tensor_step(x->ctx, AMP_I32, nd, shape, &idx));
    float alpha = mean ? 1.0f / (float)aux.n : 1.0f;
    AMP_TRY(AMP_BE(x->backend, reduce_dim, kind, x->dtype, aux.outer, aux.n, aux.inner, x->data,
                   alpha, y->data, idx ? (int32_t *)idx->data : NULL));
    amp_tape_node *node;
    AMP_TRY(amp_record(y, name, "x", kind == AMP_REDUCE_MAX ? max_bwd : sum_bwd, 1, &x,
                       sizeof aux, &node));
    amp_node_unread(node, 1u, true); /* dy repeated, or sent to the saved indices: no data */
    if (node) {
        *(dim_aux *)node->aux = aux;
        amp_node_save(node, 0, idx, "indices");
    }
    *values = y;
    if (indices) *indices = idx;
    return AMP_OK;
}

amp_status amp_sum_dim(amp_tensor *x, int dim, bool keepdim, amp_tensor **out) {
    return reduce_run("amp_sum_dim", "sum_dim", AMP_REDUCE_SUM, false, x, dim, keepdim, out, NULL);
}

amp_status amp_mean_dim(amp_tensor *x, int dim, bool keepdim, amp_tensor **out) {
    return reduce_run("amp_mean_dim", "mean_dim", AMP_REDUCE_SUM, true, x, dim, keepdim, out, NULL);
}

amp_status amp_max_dim(amp_tensor *x, int dim, bool keepdim, amp_tensor **values,
                       amp_tensor **indices) {
    return reduce_run("amp_max_dim", "max_dim", AMP_REDUCE_MAX, false, x, dim, keepdim, values,
                      indices);
}
