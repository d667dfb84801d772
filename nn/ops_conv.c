/* conv2d: NCHW x OIHW, groups 1, dilation 1, symmetric zero padding (torch.nn.functional.conv2d). */
#include "core/error.h"
#include "nn/autocast.h"

static amp_status amp_conv2d_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const amp_conv2d_desc *d = node->aux;
    const amp_backend *be = dy->backend;
    amp_grad_sink sx, sw, sb;
    AMP_TRY(amp_grad_begin(x, &sx));
    if (sx.buf) AMP_TRY(AMP_BE(be, conv2d_bwd_data, d, dy->data, w->data, sx.buf->data));
    AMP_TRY(amp_grad_end(&sx));
    AMP_TRY(amp_grad_begin(w, &sw));
    AMP_TRY(amp_grad_begin(b, &sb));
    if (sw.buf || sb.buf) {
        amp_tensor *dw = sw.buf;
        if (!dw) AMP_TRY(amp_tensor_step_like(w, w->dtype, &dw)); /* only the bias learns */
        AMP_TRY(AMP_BE(be, conv2d_bwd_weight, d, x->data, dy->data, dw->data,
                       sb.buf ? (float *)sb.buf->data : NULL));
    }
    AMP_TRY(amp_grad_end(&sw));
    return amp_grad_end(&sb);
}

amp_status amp_conv2d(amp_tensor *x, amp_tensor *w, amp_tensor *b, int stride, int padding,
                      amp_tensor **out) {
    static const char *op = "amp_conv2d";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "x", x, 4));
    AMP_TRY(amp_check_tensor(op, "w", w, 4));
    amp_tensor *io[2] = {x, w};
    AMP_TRY(amp_autocast(AMP_CAT_HALF, io, 2));
    x = io[0];
    w = io[1];
    AMP_TRY(amp_cast_to_f32(&b)); /* bias and its gradient are f32 in the kernels */
    AMP_TRY(amp_check_float(op, "x", x));
    AMP_TRY(amp_check_same_dtype(op, x, w));
    char bx[64], bw[64];
    if (x->shape[1] != w->shape[1])
        return amp_fail(AMP_ERR_SHAPE, "%s: x %s has %lld channels, w %s expects %lld", op,
                        amp_shape_str(x, bx, sizeof bx), (long long)x->shape[1],
                        amp_shape_str(w, bw, sizeof bw), (long long)w->shape[1]);
    if (stride < 1 || padding < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: stride %d must be >= 1 and padding %d >= 0", op,
                        stride, padding);
    if (b) {
        AMP_TRY(amp_check_tensor(op, "b", b, 1));
        if (b->shape[0] != w->shape[0])
            return amp_fail(AMP_ERR_SHAPE, "%s: b has %lld elements, w has %lld output channels", op,
                            (long long)b->numel, (long long)w->shape[0]);
        if (b->dtype != AMP_F32)
            return amp_fail(AMP_ERR_DTYPE, "%s: b has dtype %s, want f32", op, amp_dtype_name(b->dtype));
    }
    amp_conv2d_desc d = {.n = x->shape[0], .c_in = x->shape[1], .h_in = x->shape[2],
                         .w_in = x->shape[3], .c_out = w->shape[0], .kh = w->shape[2],
                         .kw = w->shape[3], .stride_h = stride, .stride_w = stride,
                         .pad_h = padding, .pad_w = padding, .dtype = x->dtype,
                         .allow_tf32 = x->ctx->allow_tf32,
                         .allow_nondeterministic = x->ctx->allow_nondeterministic};
    int64_t hp = d.h_in + 2 * d.pad_h, wp = d.w_in + 2 * d.pad_w;
    if (hp < d.kh || wp < d.kw)
        return amp_fail(AMP_ERR_SHAPE, "%s: kernel %lldx%lld is larger than the padded input %lldx%lld",
                        op, (long long)d.kh, (long long)d.kw, (long long)hp, (long long)wp);
    d.h_out = (hp - d.kh) / stride + 1;
    d.w_out = (wp - d.kw) / stride + 1;
    int64_t shape[4] = {d.n, d.c_out, d.h_out, d.w_out};
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(x->ctx, x->dtype, 4, shape, &y));
    AMP_TRY(AMP_BE(x->backend, conv2d_fwd, &d, x->data, w->data, b ? (const float *)b->data : NULL,
                   y->data));
    amp_tensor *in[3] = {x, w, b};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "conv2d", "x w b", amp_conv2d_bwd, 3, in, sizeof d, &node));
    amp_node_unread(node, 4u, true); /* it reads x and w; the bias gradient comes from dy */
    if (node) *(amp_conv2d_desc *)node->aux = d;
    *out = y;
    return AMP_OK;
}
