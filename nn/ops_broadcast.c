/* add, sub, mul and div over operands of different shapes, and where / masked_fill, by
 * PyTorch's broadcasting rules (core/shape.h): one binary_bcast (or where) pass forward. Backward, each operand's gradient is the
 * output's gradient (times the other operand, for mul and div) summed over the dims that operand
 * was repeated along: reduce_dim passes, one per run of such dims, in a fixed order (the same
 * bits on every backend). */
#include <string.h>

#include "core/error.h"
#include "core/shape.h"
#include "nn/autocast.h"
#include "nn/autograd.h"
#include "nn/broadcast_internal.h"

/* y = op(p, q) over the broadcast shape of y, p and q read through their strides. */
static amp_status bcast_pass(amp_binary_op op, const amp_tensor *y, const amp_tensor *p,
                             const amp_tensor *q) {
    amp_bcast_desc d = {.op = op, .dt = y->dtype, .ndim = y->ndim};
    for (int k = 0; k < y->ndim; k++) d.shape[k] = y->shape[k];
    amp_broadcast_strides(p, y->ndim, y->shape, d.a_stride);
    amp_broadcast_strides(q, y->ndim, y->shape, d.b_stride);
    return AMP_BE(y->backend, binary_bcast, &d, p->data, q->data, y->data);
}

/* g (the output's shape) summed down to x's shape: *out is g itself when nothing repeats, else a
 * step tensor of x's numel. */
static amp_status sum_to(const amp_tensor *g, const amp_tensor *x, const amp_tensor **out) {
    int nd = g->ndim, off = g->ndim - x->ndim;
    int64_t shape[AMP_MAX_DIMS];
    for (int k = 0; k < nd; k++) shape[k] = g->shape[k];
    const amp_tensor *cur = g;
    for (int k = 0; k < nd;) {
        int64_t want = k >= off ? x->shape[k - off] : 1;
        if (shape[k] == want) {
            k++;
            continue;
        }
        /* dims k..m-1 all repeat: one pass over their product */
        int m = k;
        int64_t n = 1;
        while (m < nd && shape[m] != (m >= off ? x->shape[m - off] : 1)) n *= shape[m++];
        int64_t outer = 1, inner = 1;
        for (int j = 0; j < k; j++) outer *= shape[j];
        for (int j = m; j < nd; j++) inner *= shape[j];
        for (int j = k; j < m; j++) shape[j] = 1;
        amp_tensor *r;
        AMP_TRY(amp_tensor_step(g->ctx, g->dtype, nd, shape, &r));
        AMP_TRY(AMP_BE(g->backend, reduce_dim, AMP_REDUCE_SUM, g->dtype, outer, n, inner,
                       cur->data, 1.0f, r->data, NULL));
        cur = r;
        k = m;
    }
    *out = cur;
    return AMP_OK;
}

/* grad(x) += alpha * sum_to(g). */
static amp_status accumulate_to(amp_tensor *x, const amp_tensor *g, float alpha) {
    if (!x->requires_grad) return AMP_OK;
    const amp_tensor *r;
    AMP_TRY(sum_to(g, x, &r));
    return amp_grad_accumulate(x, r, alpha);
}

static amp_status bcast_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_binary_op op = *(const amp_binary_op *)node->aux;
    amp_tensor *a = node->in[0], *b = node->in[1], *t = NULL;
    switch (op) {
    case AMP_BINARY_ADD:
    case AMP_BINARY_SUB:
        if (amp_same_shape(a, dy)) AMP_TRY(amp_grad_pass(node, a));
        else AMP_TRY(accumulate_to(a, dy, 1.0f));
        return accumulate_to(b, dy, op == AMP_BINARY_SUB ? -1.0f : 1.0f);
    case AMP_BINARY_MUL:
        AMP_TRY(amp_tensor_step_like(dy, dy->dtype, &t));
        if (a->requires_grad) {
            AMP_TRY(bcast_pass(AMP_BINARY_MUL, t, dy, b));
            AMP_TRY(accumulate_to(a, t, 1.0f));
        }
        if (b->requires_grad) {
            AMP_TRY(bcast_pass(AMP_BINARY_MUL, t, dy, a));
            AMP_TRY(accumulate_to(b, t, 1.0f));
        }
        return AMP_OK;
    default: /* div: dy / b for a; -(dy / b) y for b, as the same-shape div */
        AMP_TRY(amp_tensor_step_like(dy, dy->dtype, &t));
        AMP_TRY(bcast_pass(AMP_BINARY_DIV, t, dy, b));
        AMP_TRY(accumulate_to(a, t, 1.0f));
        if (!b->requires_grad) return AMP_OK;
        AMP_TRY(AMP_BE(dy->backend, binary, AMP_BINARY_MUL, dy->dtype, dy->numel, t->data,
                       node->out->data, t->data));
        return accumulate_to(b, t, -1.0f);
    }
}

amp_status amp_bcast_binary_run(const char *op, const char *name, amp_binary_op kind,
                                amp_tensor *a, amp_tensor *b, amp_tensor **out) {
    int nd;
    int64_t shape[AMP_MAX_DIMS];
    AMP_TRY(amp_broadcast_shape(op, a, b, &nd, shape));
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(a->ctx, a->dtype, nd, shape, &y));
    AMP_TRY(bcast_pass(kind, y, a, b));
    amp_tensor *in[2] = {a, b};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, name, "a b", bcast_bwd, 2, in, sizeof kind, &node));
    if (node) *(amp_binary_op *)node->aux = kind;
    amp_binary_unread(node, kind);
    *out = y;
    return AMP_OK;
}

/* y = cond ? p : q over y's shape, each operand through its broadcast strides. */
static amp_status where_pass(const amp_tensor *y, const amp_tensor *cond, const amp_tensor *p,
                             const amp_tensor *q) {
    amp_where_desc d = {.dt = y->dtype, .ndim = y->ndim};
    for (int k = 0; k < y->ndim; k++) d.shape[k] = y->shape[k];
    amp_broadcast_strides(cond, y->ndim, y->shape, d.cond_stride);
    amp_broadcast_strides(p, y->ndim, y->shape, d.a_stride);
    amp_broadcast_strides(q, y->ndim, y->shape, d.b_stride);
    return AMP_BE(y->backend, where, &d, cond->data, p->data, q->data, y->data);
}

/* A one-element step tensor of dt holding value (broadcast with strides 0). */
static amp_status scalar_tensor(amp_ctx *ctx, const amp_backend *be, amp_dtype dt, float value,
                                amp_tensor **out) {
    const int64_t one[1] = {1};
    AMP_TRY(amp_tensor_step(ctx, dt, 1, one, out));
    return AMP_BE(be, fill, (*out)->data, dt, 1, value);
}

/* a's gradient: dy where cond holds, 0 elsewhere; b's the other way; each summed to its shape. */
static amp_status where_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *cond = node->in[0], *a = node->in[1], *b = node->in[2], *zero, *t;
    AMP_TRY(scalar_tensor(dy->ctx, dy->backend, dy->dtype, 0.0f, &zero));
    AMP_TRY(amp_tensor_step_like(dy, dy->dtype, &t));
    if (a->requires_grad) {
        AMP_TRY(where_pass(t, cond, dy, zero));
        AMP_TRY(accumulate_to(a, t, 1.0f));
    }
    if (b->requires_grad) {
        AMP_TRY(where_pass(t, cond, zero, dy));
        AMP_TRY(accumulate_to(b, t, 1.0f));
    }
    return AMP_OK;
}

/* cond_name: how the caller calls the condition (cond, mask); args: the node's names of
 * (cond, a, b). */
static amp_status where_run(const char *op, const char *cond_name, const char *args,
                            amp_tensor *cond, amp_tensor *a, amp_tensor *b, amp_tensor **out) {
    if (cond->dtype != AMP_I32)
        return amp_fail(AMP_ERR_DTYPE, "%s: %s has dtype %s, want i32 (nonzero: true)", op,
                        cond_name, amp_dtype_name(cond->dtype));
    int nd;
    int64_t shape[AMP_MAX_DIMS];
    AMP_TRY(amp_broadcast_shape(op, a, b, &nd, shape));
    AMP_TRY(amp_broadcast_shape_with(op, cond_name, cond, &nd, shape));
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(a->ctx, a->dtype, nd, shape, &y));
    AMP_TRY(where_pass(y, cond, a, b));
    amp_tensor *in[3] = {cond, a, b};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, op + strlen("amp_"), args, where_bwd, 3, in, 0, &node));
    amp_node_unread(node, 6u, true); /* its backward reads cond alone (a's and b's shapes) */
    *out = y;
    return AMP_OK;
}

amp_status amp_where(amp_tensor *cond, amp_tensor *a, amp_tensor *b, amp_tensor **out) {
    static const char *op = "amp_where";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "cond", cond, 0));
    AMP_TRY(amp_check_tensor(op, "a", a, 0));
    AMP_TRY(amp_check_tensor(op, "b", b, 0));
    amp_tensor *io[2] = {a, b};
    AMP_TRY(amp_autocast(AMP_CAT_PROMOTE, io, 2));
    AMP_TRY(amp_check_float(op, "a", io[0]));
    AMP_TRY(amp_check_same_dtype(op, io[0], io[1]));
    return where_run(op, "cond", "cond a b", cond, io[0], io[1], out);
}

amp_status amp_masked_fill(amp_tensor *x, amp_tensor *mask, float value, amp_tensor **out) {
    static const char *op = "amp_masked_fill";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    AMP_TRY(amp_check_tensor(op, "mask", mask, 0));
    AMP_TRY(amp_check_float(op, "x", x));
    amp_tensor *v;
    AMP_TRY(scalar_tensor(x->ctx, x->backend, x->dtype, value, &v));
    return where_run(op, "mask", "mask value x", mask, v, x, out);
}
