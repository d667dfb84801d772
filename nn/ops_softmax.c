/* softmax and log_softmax over a dim (torch.softmax(x, dim)): one softmax_fwd pass over rows of
 * the last dim (kernels/math/softmax.h: a fully masked row, all -inf, gives 0, or -inf for
 * log_softmax, where PyTorch gives NaN); another dim is moved last and back (two transposes).
 * Backward from the output: one softmax_bwd pass. Cast category as torch.amp's: both are on its
 * fp32 list, so under autocast they run in f32 and return f32. */
#include "core/error.h"
#include "core/shape.h"
#include "nn/autocast.h"

static amp_status softmax_bwd(amp_tape_node *node, const amp_tensor *dy) {
    const amp_softmax_desc *d = node->aux;
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(node->in[0], &s));
    if (s.buf)
        AMP_TRY(AMP_BE(dy->backend, softmax_bwd, d, node->out->data, dy->data, s.buf->data));
    return amp_grad_end(&s);
}

static amp_status softmax_run(const char *op, bool log, amp_tensor *x, int dim,
                              amp_tensor **out) {
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    AMP_TRY(amp_autocast(AMP_CAT_WIDEN, &x, 1));
    AMP_TRY(amp_check_float(op, "x", x));
    int d;
    AMP_TRY(amp_dim_index(op, x->ndim, dim, &d));
    if (d != x->ndim - 1) {
        amp_tensor *t, *y;
        AMP_TRY(amp_transpose(x, d, -1, &t));
        AMP_TRY(softmax_run(op, log, t, -1, &y));
        return amp_transpose(y, d, -1, out);
    }
    int64_t cols = x->shape[d];
    amp_softmax_desc desc = {.rows = x->numel / cols, .cols = cols, .dt = x->dtype, .log = log};
    amp_tensor *y;
    AMP_TRY(amp_tensor_step_like(x, x->dtype, &y));
    AMP_TRY(AMP_BE(x->backend, softmax_fwd, &desc, x->data, y->data));
    amp_tape_node *node;
    AMP_TRY(amp_record(y, log ? "log_softmax" : "softmax", "x", softmax_bwd, 1, &x, sizeof desc,
                       &node));
    amp_node_unread(node, 1u, false); /* its backward reads y, not x */
    if (node) *(amp_softmax_desc *)node->aux = desc;
    *out = y;
    return AMP_OK;
}

amp_status amp_softmax(amp_tensor *x, int dim, amp_tensor **out) {
    return softmax_run("amp_softmax", false, x, dim, out);
}

amp_status amp_log_softmax(amp_tensor *x, int dim, amp_tensor **out) {
    return softmax_run("amp_log_softmax", true, x, dim, out);
}
