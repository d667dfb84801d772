/* Ops that rearrange dims: narrow, split and chunk along a dim; permute and transpose; cat.
 * Tensors are dense row-major (amp/tensor.h), so a piece is a view costing nothing where it is
 * one contiguous block (every dim before `dim` of extent 1: a split of the leading dim, a batch
 * row), and otherwise one copy_strided pass, as is a permutation (PyTorch's
 * x.transpose(1, 2).contiguous()) and a concatenation. No cast category: the input's dtype.
 * Backward: the gradient goes back through the same strided copy the other way, into a zeroed
 * gradient of the input for a piece. */
#include <string.h>

#include "core/error.h"
#include "core/shape.h"
#include "nn/autograd.h"

/* ---- narrow (split and chunk are narrows) ---- */

typedef struct narrow_aux {
    int dim;
    int64_t start;
} narrow_aux;

/* The strided picture of x's [start, start + len) along dim: shape and x's strides, with the
 * offset of its first element. */
static int64_t piece_desc(const amp_tensor *x, int dim, int64_t start, int64_t len,
                          amp_strided_desc *d, bool piece_is_src) {
    int64_t xs[AMP_MAX_DIMS], ps[AMP_MAX_DIMS], shape[AMP_MAX_DIMS];
    amp_dense_strides(x->ndim, x->shape, xs);
    memcpy(shape, x->shape, sizeof shape);
    shape[dim] = len;
    amp_dense_strides(x->ndim, shape, ps);
    memset(d, 0, sizeof *d);
    d->dt = x->dtype;
    d->ndim = x->ndim;
    for (int k = 0; k < x->ndim; k++) {
        d->shape[k] = shape[k];
        d->src_stride[k] = piece_is_src ? ps[k] : xs[k];
        d->dst_stride[k] = piece_is_src ? xs[k] : ps[k];
    }
    return start * xs[dim];
}

/* A piece that is one contiguous range of x (every dim before a->dim of extent 1: q, k and v
 * chunked out of one tensor) goes straight into x's gradient: the step's first piece zeroes it
 * and copies itself in, later ones add themselves to their range only. Through a temporary of
 * x's size each piece cost a fill and an add of all of x (1.7 ms of a GPT step). */
static bool narrow_bwd_in_place(const narrow_aux *a, amp_tensor *x, const amp_tensor *dy,
                                amp_status *st) {
    for (int k = 0; k < a->dim; k++)
        if (x->shape[k] != 1) return false;
    amp_tensor *g;
    float beta;
    if ((*st = amp_grad_target(x, &g, &beta)) != AMP_OK) return true;
    int64_t inner = 1;
    for (int k = a->dim + 1; k < x->ndim; k++) inner *= x->shape[k];
    char *at = (char *)g->data + a->start * inner * (int64_t)amp_dtype_size(g->dtype);
    if (beta == 0.0f) {
        *st = AMP_BE(dy->backend, fill, g->data, g->dtype, g->numel, 0.0f);
        if (*st == AMP_OK) *st = AMP_DEV(dy->backend, copy, at, dy->data, amp_tensor_nbytes(dy));
    } else {
        *st = AMP_BE(dy->backend, axpy, g->dtype, dy->numel, 1.0f, dy->data, at);
    }
    if (*st == AMP_OK) amp_grad_mark_written(x);
    return true;
}

static amp_status narrow_bwd(amp_tape_node *node, const amp_tensor *dy) {
    const narrow_aux *a = node->aux;
    amp_tensor *x = node->in[0];
    if (!x->requires_grad) return AMP_OK;
    amp_status st;
    if (dy->dtype == x->dtype && narrow_bwd_in_place(a, x, dy, &st)) return st;
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(x, &s));
    if (s.buf) {
        amp_strided_desc d;
        int64_t at = piece_desc(x, a->dim, a->start, dy->shape[a->dim], &d, true);
        AMP_TRY(AMP_BE(dy->backend, fill, s.buf->data, s.buf->dtype, s.buf->numel, 0.0f));
        AMP_TRY(AMP_BE(dy->backend, copy_strided, &d, dy->data,
                       (char *)s.buf->data + at * (int64_t)amp_dtype_size(dy->dtype)));
    }
    return amp_grad_end(&s);
}

amp_status amp_narrow(amp_tensor *x, int dim, int64_t start, int64_t length, amp_tensor **out) {
    static const char *op = "amp_narrow";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    int d;
    AMP_TRY(amp_dim_index(op, x->ndim, dim, &d));
    if (start < 0 || length < 1 || start + length > x->shape[d]) {
        char b[96];
        return amp_fail(AMP_ERR_SHAPE, "%s: [%lld, %lld) along dim %d of x %s", op,
                        (long long)start, (long long)(start + length), d,
                        amp_shape_str(x, b, sizeof b));
    }
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[d] = length;
    bool contiguous = true;
    for (int k = 0; k < d; k++) contiguous &= x->shape[k] == 1;
    amp_tensor *y;
    if (contiguous) {
        int64_t inner = 1;
        for (int k = d + 1; k < x->ndim; k++) inner *= x->shape[k];
        AMP_TRY(amp_view_step(x, x->ndim, shape, start * inner, &y));
    } else {
        AMP_TRY(amp_tensor_step(x->ctx, x->dtype, x->ndim, shape, &y));
        amp_strided_desc desc;
        int64_t at = piece_desc(x, d, start, length, &desc, false);
        AMP_TRY(AMP_BE(x->backend, copy_strided, &desc,
                       (const char *)x->data + at * (int64_t)amp_dtype_size(x->dtype), y->data));
    }
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "narrow", "x", narrow_bwd, 1, &x, sizeof(narrow_aux), &node));
    if (node) {
        *(narrow_aux *)node->aux = (narrow_aux){d, start};
        amp_node_unread(node, 1u, true); /* a view reads x itself (amp_view_step) */
    }
    *out = y;
    return AMP_OK;
}

amp_status amp_split(amp_tensor *x, int64_t size, int dim, amp_tensor **outs, int n_outs) {
    static const char *op = "amp_split";
    AMP_CHECK_ARG(outs);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    int d;
    AMP_TRY(amp_dim_index(op, x->ndim, dim, &d));
    int64_t extent = x->shape[d];
    int64_t pieces = size >= 1 ? (extent + size - 1) / size : 0;
    if (size < 1 || pieces != n_outs)
        return amp_fail(AMP_ERR_SHAPE, "%s: pieces of %lld along dim %d (extent %lld) make %lld "
                        "tensors, %d asked for", op, (long long)size, d, (long long)extent,
                        (long long)pieces, n_outs);
    for (int i = 0; i < n_outs; i++) {
        int64_t start = (int64_t)i * size, len = extent - start < size ? extent - start : size;
        AMP_TRY(amp_narrow(x, d, start, len, &outs[i]));
    }
    return AMP_OK;
}

amp_status amp_chunk(amp_tensor *x, int chunks, int dim, amp_tensor **outs) {
    static const char *op = "amp_chunk";
    AMP_CHECK_ARG(outs);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    int d;
    AMP_TRY(amp_dim_index(op, x->ndim, dim, &d));
    int64_t extent = x->shape[d];
    if (chunks < 1 || extent % chunks != 0)
        return amp_fail(AMP_ERR_SHAPE, "%s: dim %d of extent %lld does not split into %d equal "
                        "chunks (amp_split takes uneven pieces)", op, d, (long long)extent,
                        chunks);
    return amp_split(x, extent / chunks, d, outs, chunks);
}

/* ---- permute and transpose ---- */

typedef struct permute_aux {
    int perm[AMP_MAX_DIMS];
} permute_aux;

/* y = x with y's dim k being x's dim perm[k]; or, inverse, x from y. */
static amp_status permute_copy(const amp_tensor *src, const int *perm, bool inverse, void *dst) {
    amp_strided_desc d = {.dt = src->dtype, .ndim = src->ndim};
    int64_t ss[AMP_MAX_DIMS], shape[AMP_MAX_DIMS], ds[AMP_MAX_DIMS];
    amp_dense_strides(src->ndim, src->shape, ss);
    for (int k = 0; k < src->ndim; k++) {
        if (inverse) shape[perm[k]] = src->shape[k];
        else shape[k] = src->shape[perm[k]];
    }
    amp_dense_strides(src->ndim, shape, ds);
    /* Walk the source in its own order; each element lands at its permuted place. */
    for (int k = 0; k < src->ndim; k++) {
        d.shape[k] = src->shape[k];
        d.src_stride[k] = ss[k];
    }
    for (int k = 0; k < src->ndim; k++) {
        if (inverse) d.dst_stride[k] = ds[perm[k]];
        else d.dst_stride[perm[k]] = ds[k];
    }
    return AMP_BE(src->backend, copy_strided, &d, src->data, dst);
}

static amp_status permute_bwd(amp_tape_node *node, const amp_tensor *dy) {
    const permute_aux *a = node->aux;
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(node->in[0], &s));
    if (s.buf) AMP_TRY(permute_copy(dy, a->perm, true, s.buf->data));
    return amp_grad_end(&s);
}

amp_status amp_permute(amp_tensor *x, const int *dims, amp_tensor **out) {
    static const char *op = "amp_permute";
    AMP_CHECK_ARG(out);
    AMP_CHECK_ARG(dims);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    permute_aux aux;
    bool seen[AMP_MAX_DIMS] = {false};
    int64_t shape[AMP_MAX_DIMS];
    for (int k = 0; k < x->ndim; k++) {
        int d;
        AMP_TRY(amp_dim_index(op, x->ndim, dims[k], &d));
        if (seen[d])
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: dim %d appears twice in the permutation",
                            op, d);
        seen[d] = true;
        aux.perm[k] = d;
        shape[k] = x->shape[d];
    }
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(x->ctx, x->dtype, x->ndim, shape, &y));
    AMP_TRY(permute_copy(x, aux.perm, false, y->data));
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "permute", "x", permute_bwd, 1, &x, sizeof aux, &node));
    amp_node_unread(node, 1u, true); /* dy permuted back: no data read */
    if (node) *(permute_aux *)node->aux = aux;
    *out = y;
    return AMP_OK;
}

amp_status amp_transpose(amp_tensor *x, int dim0, int dim1, amp_tensor **out) {
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor("amp_transpose", "x", x, 0));
    int a, b, perm[AMP_MAX_DIMS];
    AMP_TRY(amp_dim_index("amp_transpose", x->ndim, dim0, &a));
    AMP_TRY(amp_dim_index("amp_transpose", x->ndim, dim1, &b));
    for (int k = 0; k < x->ndim; k++) perm[k] = k == a ? b : k == b ? a : k;
    return amp_permute(x, perm, out);
}

/* ---- cat ---- */

typedef struct cat_aux {
    int dim;
} cat_aux;

/* The strided picture of piece i (of extent len at start along dim) inside y. */
static amp_status cat_move(const amp_tensor *y, const amp_tensor *piece, int dim, int64_t start,
                           bool into_y, void *piece_data) {
    amp_strided_desc d;
    int64_t at = piece_desc(y, dim, start, piece->shape[dim], &d, into_y);
    char *y_at = (char *)y->data + at * (int64_t)amp_dtype_size(y->dtype);
    return into_y ? AMP_BE(y->backend, copy_strided, &d, piece_data, y_at)
                  : AMP_BE(y->backend, copy_strided, &d, y_at, piece_data);
}

static amp_status cat_bwd(amp_tape_node *node, const amp_tensor *dy) {
    int dim = ((const cat_aux *)node->aux)->dim;
    int64_t start = 0;
    for (int i = 0; i < node->n_in; i++) {
        amp_tensor *x = node->in[i];
        amp_grad_sink s;
        AMP_TRY(amp_grad_begin(x, &s));
        if (s.buf) AMP_TRY(cat_move(dy, x, dim, start, false, s.buf->data));
        AMP_TRY(amp_grad_end(&s));
        start += x->shape[dim];
    }
    return AMP_OK;
}

amp_status amp_cat(amp_tensor *const *xs, int n, int dim, amp_tensor **out) {
    static const char *op = "amp_cat";
    AMP_CHECK_ARG(out);
    AMP_CHECK_ARG(xs);
    if (n < 1 || n > AMP_NODE_MAX_IN)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: %d tensors, want 1..%d (concatenate more in "
                        "steps)", op, n, AMP_NODE_MAX_IN);
    for (int i = 0; i < n; i++) AMP_TRY(amp_check_tensor(op, "xs[i]", xs[i], 0));
    int d;
    AMP_TRY(amp_dim_index(op, xs[0]->ndim, dim, &d));
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, xs[0]->shape, sizeof shape);
    shape[d] = 0;
    for (int i = 0; i < n; i++) {
        bool fits = xs[i]->ndim == xs[0]->ndim && xs[i]->dtype == xs[0]->dtype &&
                    xs[i]->backend == xs[0]->backend;
        for (int k = 0; k < xs[0]->ndim && fits; k++) fits = k == d || xs[i]->shape[k] == shape[k];
        if (!fits) {
            char b0[96], bi[96];
            return amp_fail(AMP_ERR_SHAPE, "%s: xs[%d] %s %s does not match xs[0] %s %s but "
                            "along dim %d", op, i, amp_dtype_name(xs[i]->dtype),
                            amp_shape_str(xs[i], bi, sizeof bi), amp_dtype_name(xs[0]->dtype),
                            amp_shape_str(xs[0], b0, sizeof b0), d);
        }
        shape[d] += xs[i]->shape[d];
    }
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(xs[0]->ctx, xs[0]->dtype, xs[0]->ndim, shape, &y));
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        AMP_TRY(cat_move(y, xs[i], d, start, true, xs[i]->data));
        start += xs[i]->shape[d];
    }
    amp_tape_node *node;
    /* dy cut into pieces: no data read, so no input is ever named (xs[i] all alike). */
    AMP_TRY(amp_record(y, "cat", "xs", cat_bwd, n, xs, sizeof(cat_aux), &node));
    amp_node_unread(node, (1u << n) - 1u, true);
    if (node) ((cat_aux *)node->aux)->dim = d;
    *out = y;
    return AMP_OK;
}

/* Outside autograd on purpose, as amp_accumulate: a key/value cache's rows written once per new
 * token by a no-grad forward; the cache is the caller's and outlives the step. */
amp_status amp_tensor_write_slice(amp_tensor *dst, int dim, int64_t start, const amp_tensor *src) {
    static const char *op = "amp_tensor_write_slice";
    AMP_TRY(amp_check_tensor(op, "dst", dst, 0));
    AMP_TRY(amp_tensor_check_writable(op, "dst", dst));
    AMP_TRY(amp_check_tensor(op, "src", src, 0));
    AMP_TRY(amp_check_same_dtype(op, dst, src));
    if (dst->backend != src->backend)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: dst is on backend %s, src on %s", op,
                        dst->backend->name, src->backend->name);
    int d = dim < 0 ? dim + dst->ndim : dim;
    char bd[96], bs[96];
    bool fits = d >= 0 && d < dst->ndim && src->ndim == dst->ndim && start >= 0 &&
                start + src->shape[d] <= dst->shape[d];
    for (int k = 0; fits && k < dst->ndim; k++) fits = k == d || src->shape[k] == dst->shape[k];
    if (!fits)
        return amp_fail(AMP_ERR_SHAPE, "%s: src %s does not fit dst %s at %lld along dim %d", op,
                        amp_shape_str(src, bs, sizeof bs), amp_shape_str(dst, bd, sizeof bd),
                        (long long)start, dim);
    if (src->numel == 0) return AMP_OK;
    amp_strided_desc desc;
    int64_t at = piece_desc(dst, d, start, src->shape[d], &desc, true);
    amp_tensor_mark_written(dst);
    return AMP_BE(dst->backend, copy_strided, &desc, src->data,
                  (char *)dst->data + at * (int64_t)amp_dtype_size(dst->dtype));
}
