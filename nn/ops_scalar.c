/* A tensor and a number: x * s, x + s, x / s (PyTorch's `loss / accumulation_steps`, `x * 0.5`,
 * `x + 1`). The result keeps x's dtype, as a Python scalar does not promote a tensor in PyTorch
 * (autocast's PASS category), and is computed in f32 with one rounding. */

#include "core/error.h"
#include "core/tensor_internal.h"
#include "nn/autocast.h"

typedef struct amp_scalar_aux {
    float s;
} amp_scalar_aux;

/* d(x * s) = dy * s; d(x + s) = dy. */
static amp_status amp_mul_scalar_bwd(amp_tape_node *node, const amp_tensor *dy) {
    return amp_grad_accumulate(node->in[0], dy, ((const amp_scalar_aux *)node->aux)->s);
}

static amp_status amp_add_scalar_bwd(amp_tape_node *node, const amp_tensor *dy) {
    (void)dy;
    return amp_grad_pass(node, node->in[0]);
}

/* d(x / s) = dy / s, a true division as PyTorch's DivBackward (not dy * (1 / s)). */
static amp_status amp_div_scalar_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_grad_sink sink;
    AMP_TRY(amp_grad_begin(node->in[0], &sink));
    if (sink.buf)
        AMP_TRY(AMP_BE(dy->backend, unary, AMP_UNARY_DIV_SCALAR, dy->dtype, dy->numel, dy->data,
                       ((const amp_scalar_aux *)node->aux)->s, sink.buf->data));
    return amp_grad_end(&sink);
}

static amp_status amp_scalar_run(const char *op, const char *name, amp_unary_op kind,
                                 amp_backward_fn bwd, amp_tensor *x, float s, amp_tensor **out) {
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    AMP_TRY(amp_autocast(AMP_CAT_PASS, &x, 1));
    AMP_TRY(amp_check_float(op, "x", x));
    amp_tensor *y;
    AMP_TRY(amp_tensor_step_like(x, x->dtype, &y));
    AMP_TRY(AMP_BE(x->backend, unary, kind, x->dtype, x->numel, x->data, s, y->data));
    amp_tape_node *node;
    AMP_TRY(amp_record(y, name, "x", bwd, 1, &x, sizeof(amp_scalar_aux), &node));
    amp_node_unread(node, 1u, true); /* dy scaled, passed or divided: no data read */
    if (node) ((amp_scalar_aux *)node->aux)->s = s;
    *out = y;
    return AMP_OK;
}

amp_status amp_mul_scalar(amp_tensor *x, float s, amp_tensor **out) {
    return amp_scalar_run("amp_mul_scalar", "mul_scalar", AMP_UNARY_SCALE, amp_mul_scalar_bwd, x,
                          s, out);
}

amp_status amp_add_scalar(amp_tensor *x, float s, amp_tensor **out) {
    return amp_scalar_run("amp_add_scalar", "add_scalar", AMP_UNARY_ADD_SCALAR, amp_add_scalar_bwd,
                          x, s, out);
}

amp_status amp_div_scalar(amp_tensor *x, float s, amp_tensor **out) {
    return amp_scalar_run("amp_div_scalar", "div_scalar", AMP_UNARY_DIV_SCALAR, amp_div_scalar_bwd,
                          x, s, out);
}
