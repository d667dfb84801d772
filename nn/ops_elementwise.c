/* Elementwise ops: relu, add, sub, mul, div (broadcast operands: ops_broadcast.c), dropout;
 * accumulate (in place, not recorded). */
#include "core/ctx.h"
#include "core/error.h"
#include "core/tensor_internal.h"
#include "core/rng.h"
#include "nn/autocast.h"
#include "nn/broadcast_internal.h"

static amp_status amp_relu_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(node->in[0], &s));
    if (s.buf) /* the output's sign decides: y > 0 exactly where x > 0 */
        AMP_TRY(AMP_BE(dy->backend, binary, AMP_BINARY_RELU_BWD, dy->dtype, dy->numel,
                       node->out->data, dy->data, s.buf->data));
    return amp_grad_end(&s);
}

amp_status amp_relu(amp_tensor *x, amp_tensor **out) {
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor("amp_relu", "x", x, 0));
    AMP_TRY(amp_check_float("amp_relu", "x", x));
    amp_tensor *y;
    AMP_TRY(amp_tensor_step_like(x, x->dtype, &y));
    AMP_TRY(AMP_BE(x->backend, unary, AMP_UNARY_RELU, x->dtype, x->numel, x->data, 0.0f, y->data));
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "relu", "x", amp_relu_bwd, 1, &x, 0, &node));
    amp_node_unread(node, 1u, false); /* its backward reads y, not x */
    *out = y;
    return AMP_OK;
}

static amp_status amp_check_binary(const char *op, const amp_tensor *a, const amp_tensor *b) {
    AMP_TRY(amp_check_tensor(op, "a", a, 0));
    AMP_TRY(amp_check_tensor(op, "b", b, 0));
    AMP_TRY(amp_check_float(op, "a", a));
    return amp_check_same_dtype(op, a, b);
}

static amp_status amp_binary_run(const char *op, const char *name, amp_binary_op kind,
                                amp_backward_fn bwd, amp_tensor *a, amp_tensor *b, amp_tensor **out) {
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "a", a, 0));
    AMP_TRY(amp_check_tensor(op, "b", b, 0));
    amp_tensor *io[2] = {a, b};
    AMP_TRY(amp_autocast(AMP_CAT_PROMOTE, io, 2));
    AMP_TRY(amp_check_binary(op, io[0], io[1]));
    if (amp_same_shape(io[0], io[1])) {
        amp_tensor *y;
        AMP_TRY(amp_tensor_step_like(io[0], io[0]->dtype, &y));
        AMP_TRY(AMP_BE(y->backend, binary, kind, y->dtype, y->numel, io[0]->data, io[1]->data,
                       y->data));
        amp_tape_node *node;
        AMP_TRY(amp_record(y, name, "a b", bwd, 2, io, 0, &node));
        amp_binary_unread(node, kind);
        *out = y;
    } else {
        AMP_TRY(amp_bcast_binary_run(op, name, kind, io[0], io[1], out));
    }
    /* A promotion's cast made here (x + a half branch under autocast) is this op's alone: it goes
     * once nothing reads it (an add's backward does not). A cached cast stays for later ops. */
    amp_tensor *orig[2] = {a, b};
    for (int i = 0; i < 2; i++)
        if (io[i] != orig[i] && !amp_cast_cacheable(orig[i])) amp_tensor_step_drop(io[i]);
    return AMP_OK;
}

static amp_status amp_add_bwd(amp_tape_node *node, const amp_tensor *dy) {
    AMP_TRY(amp_grad_pass(node, node->in[0]));
    return amp_grad_accumulate(node->in[1], dy, 1.0f);
}

amp_status amp_add(amp_tensor *a, amp_tensor *b, amp_tensor **out) {
    return amp_binary_run("amp_add", "add", AMP_BINARY_ADD, amp_add_bwd, a, b, out);
}

/* d(a*b) = dy*b for a, dy*a for b. */
static amp_status amp_mul_bwd(amp_tape_node *node, const amp_tensor *dy) {
    for (int i = 0; i < 2; i++) {
        amp_grad_sink s;
        AMP_TRY(amp_grad_begin(node->in[i], &s));
        if (s.buf)
            AMP_TRY(AMP_BE(dy->backend, binary, AMP_BINARY_MUL, dy->dtype, dy->numel, dy->data,
                           node->in[1 - i]->data, s.buf->data));
        AMP_TRY(amp_grad_end(&s));
    }
    return AMP_OK;
}

amp_status amp_mul(amp_tensor *a, amp_tensor *b, amp_tensor **out) {
    return amp_binary_run("amp_mul", "mul", AMP_BINARY_MUL, amp_mul_bwd, a, b, out);
}

static amp_status amp_sub_bwd(amp_tape_node *node, const amp_tensor *dy) {
    AMP_TRY(amp_grad_pass(node, node->in[0]));
    return amp_grad_accumulate(node->in[1], dy, -1.0f);
}

amp_status amp_sub(amp_tensor *a, amp_tensor *b, amp_tensor **out) {
    return amp_binary_run("amp_sub", "sub", AMP_BINARY_SUB, amp_sub_bwd, a, b, out);
}

/* d(a/b) = dy / b for a; for b, -(dy / b) * y (y = a / b: PyTorch's -dy a / b^2 with the
 * quotient already formed), each rounded once per pass. */
static amp_status amp_div_bwd(amp_tape_node *node, const amp_tensor *dy) {
    const amp_backend *be = dy->backend;
    amp_tensor *a = node->in[0], *b = node->in[1];
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(a, &s));
    if (s.buf)
        AMP_TRY(AMP_BE(be, binary, AMP_BINARY_DIV, dy->dtype, dy->numel, dy->data, b->data,
                       s.buf->data));
    AMP_TRY(amp_grad_end(&s));
    AMP_TRY(amp_grad_begin(b, &s));
    if (s.buf) {
        AMP_TRY(AMP_BE(be, binary, AMP_BINARY_DIV, dy->dtype, dy->numel, dy->data, b->data,
                       s.buf->data));
        AMP_TRY(AMP_BE(be, binary, AMP_BINARY_MUL, dy->dtype, dy->numel, s.buf->data,
                       node->out->data, s.buf->data));
        AMP_TRY(AMP_BE(be, unary, AMP_UNARY_SCALE, dy->dtype, dy->numel, s.buf->data, -1.0f,
                       s.buf->data));
    }
    return amp_grad_end(&s);
}

amp_status amp_div(amp_tensor *a, amp_tensor *b, amp_tensor **out) {
    return amp_binary_run("amp_div", "div", AMP_BINARY_DIV, amp_div_bwd, a, b, out);
}

typedef struct amp_dropout_aux {
    float p;
} amp_dropout_aux;

static amp_status amp_dropout_bwd(amp_tape_node *node, const amp_tensor *dy) {
    const amp_dropout_aux *aux = node->aux;
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(node->in[0], &s));
    if (s.buf)
        AMP_TRY(AMP_BE(dy->backend, dropout_bwd, dy->dtype, dy->numel, dy->data,
                       node->saved[0]->data, aux->p, s.buf->data));
    return amp_grad_end(&s);
}

amp_status amp_dropout(amp_tensor *x, float p, bool training, amp_tensor **out) {
    static const char *op = "amp_dropout";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    AMP_TRY(amp_check_float(op, "x", x));
    if (!(p >= 0.0f && p < 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: p = %g, want 0 <= p < 1", op, (double)p);
    if (!training || p == 0.0f) {
        *out = x; /* identity, as torch.nn.functional.dropout in eval mode */
        return AMP_OK;
    }
    amp_ctx *ctx = x->ctx;
    amp_tensor *y, *mask;
    AMP_TRY(amp_tensor_step_like(x, x->dtype, &y));
    /* The mask is u8: an i32-sized step tensor would waste 3 bytes a value, so size it in words. */
    int64_t words = (x->numel + 3) / 4;
    AMP_TRY(amp_tensor_step(ctx, AMP_I32, 1, &words, &mask));
    uint64_t offset = amp_rng_reserve(&ctx->rng, (uint64_t)x->numel);
    AMP_TRY(AMP_BE(x->backend, dropout_fwd, x->dtype, x->numel, x->data, p, ctx->rng.seed, offset,
                   y->data, (uint8_t *)mask->data));
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "dropout", "x", amp_dropout_bwd, 1, &x, sizeof(amp_dropout_aux),
                       &node));
    if (node) {
        amp_node_unread(node, 1u, true); /* its backward reads the mask */
        ((amp_dropout_aux *)node->aux)->p = p;
        amp_node_save(node, 0, mask, "mask");
    }
    *out = y;
    return AMP_OK;
}

/* Outside autograd on purpose: a running sum of losses must not keep every step's graph alive
 * (PyTorch's loss.detach()), and nothing reads a gradient of it. */
amp_status amp_accumulate(amp_tensor *acc, const amp_tensor *x) {
    static const char *op = "amp_accumulate";
    AMP_TRY(amp_check_tensor(op, "acc", acc, 0));
    AMP_TRY(amp_tensor_check_writable(op, "acc", acc));
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    AMP_TRY(amp_check_float(op, "x", x));
    AMP_TRY(amp_check_same_dtype(op, acc, x));
    if (!amp_same_shape(acc, x)) {
        char ba[64], bx[64];
        return amp_fail(AMP_ERR_SHAPE, "%s: acc %s and x %s differ in shape", op,
                        amp_shape_str(acc, ba, sizeof ba), amp_shape_str(x, bx, sizeof bx));
    }
    if (acc->backend != x->backend)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: acc is on backend %s, x on %s", op,
                        acc->backend->name, x->backend->name);
    amp_tensor_mark_written((amp_tensor *)acc);
    return AMP_BE(x->backend, axpy, x->dtype, x->numel, 1.0f, x->data, acc->data);
}
