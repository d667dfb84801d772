/* reshape and flatten: new shape over the same data; the gradient flows back unchanged. And the
 * step struct every view is (amp_view_step: reshape's, and narrow's in ops_views.c). */
#include "core/error.h"
#include "nn/autograd.h"

amp_status amp_view_step(amp_tensor *x, int ndim, const int64_t *shape, int64_t at,
                         amp_tensor **out) {
    amp_tensor *y;
    AMP_TRY(amp_ctx_step_alloc(x->ctx, sizeof *y, (void **)&y));
    *y = *x; /* x's dtype, backend and version counter */
    y->ndim = ndim;
    y->numel = 1;
    for (int i = 0; i < AMP_MAX_DIMS; i++) {
        y->shape[i] = i < ndim ? shape[i] : 1;
        if (i < ndim) y->numel *= shape[i];
    }
    y->data = (char *)x->data + at * (int64_t)amp_dtype_size(x->dtype);
    y->data_readers = 0;
    y->view_of = x;
    x->data_readers++; /* the view reads x's data until it is dropped (amp_tensor_drop) */
    y->grad = NULL;
    y->requires_grad = false;
    y->grad_written = false;
    y->node = NULL;
    /* The struct is step memory; the data stays x's (read-only if x is a kept cast). */
    y->flags = AMP_TENSOR_STEP | (x->flags & AMP_TENSOR_SHARED);
    y->step_gen = x->ctx->step_gen;
    y->region = x->ctx->region_gen;
    *out = y;
    return AMP_OK;
}

static amp_status amp_reshape_bwd(amp_tape_node *node, const amp_tensor *dy) {
    (void)dy;
    return amp_grad_pass(node, node->in[0]);
}

/* A view's data are its base's: written again by the base's producer (into has the numel). */
static amp_status amp_reshape_regenerate(const amp_tape_node *n, amp_tensor *into) {
    const amp_tape_node *base = n->in[0]->node;
    return base->regenerate(base, into);
}

amp_status amp_reshape(amp_tensor *x, int ndim, const int64_t *shape, amp_tensor **out) {
    static const char *op = "amp_reshape";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    int64_t numel;
    AMP_TRY(amp_shape_check(op, ndim, shape, &numel));
    if (numel != x->numel) {
        char b[64];
        return amp_fail(AMP_ERR_SHAPE, "%s: x %s has %lld elements, the new shape %lld", op,
                        amp_shape_str(x, b, sizeof b), (long long)x->numel, (long long)numel);
    }
    amp_tensor *y;
    AMP_TRY(amp_view_step(x, ndim, shape, 0, &y));
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "reshape", "x", amp_reshape_bwd, 1, &x, 0, &node));
    amp_node_unread(node, 1u, true); /* the view itself reads x */
    /* A view of data written since its producer ran cannot be written again by it. */
    if (node && x->node && x->node->regenerate && *x->version == x->node->out_version)
        node->regenerate = amp_reshape_regenerate;
    *out = y;
    return AMP_OK;
}

amp_status amp_flatten(amp_tensor *x, amp_tensor **out) {
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor("amp_flatten", "x", x, 0));
    int64_t shape[2] = {x->shape[0], x->numel / x->shape[0]};
    return amp_reshape(x, 2, shape, out);
}
