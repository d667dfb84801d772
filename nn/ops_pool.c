/* maxpool2d: square window, PyTorch's output size floor((h + 2p - k) / s) + 1, p <= k / 2. The
 * backward keeps x, not an index per output (core/backend.h: it finds the maxima again); x is a
 * step tensor that the op before holds for its own backward anyway (the ReLU's output). */
#include "core/error.h"
#include "nn/autograd.h"

static amp_status amp_maxpool_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(node->in[0], &s));
    if (s.buf)
        AMP_TRY(AMP_BE(dy->backend, maxpool_bwd, node->aux, dy->data, node->in[0]->data,
                       s.buf->data));
    return amp_grad_end(&s);
}

amp_status amp_maxpool2d(amp_tensor *x, int kernel, int stride, int padding, amp_tensor **out) {
    static const char *op = "amp_maxpool2d";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "x", x, 4));
    AMP_TRY(amp_check_float(op, "x", x));
    if (kernel < 1 || stride < 1 || padding < 0 || padding > kernel / 2)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: kernel %d, stride %d, padding %d: want kernel >= 1, "
                        "stride >= 1, 0 <= padding <= kernel/2", op, kernel, stride, padding);
    amp_pool_desc d = {.n = x->shape[0], .c = x->shape[1], .h_in = x->shape[2], .w_in = x->shape[3],
                       .k = kernel, .stride = stride, .pad = padding, .dtype = x->dtype};
    if (d.h_in + 2 * padding < kernel || d.w_in + 2 * padding < kernel)
        return amp_fail(AMP_ERR_SHAPE, "%s: window %d is larger than the input %lldx%lld", op, kernel,
                        (long long)d.h_in, (long long)d.w_in);
    d.h_out = (d.h_in + 2 * padding - kernel) / stride + 1;
    d.w_out = (d.w_in + 2 * padding - kernel) / stride + 1;
    int64_t shape[4] = {d.n, d.c, d.h_out, d.w_out};
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(x->ctx, x->dtype, 4, shape, &y));
    AMP_TRY(AMP_BE(x->backend, maxpool_fwd, &d, x->data, y->data));
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "maxpool2d", "x", amp_maxpool_bwd, 1, &x, sizeof d, &node));
    amp_node_unread(node, 0u, true); /* it finds the maxima in x again, not in y */
    if (node) *(amp_pool_desc *)node->aux = d;
    *out = y;
    return AMP_OK;
}
