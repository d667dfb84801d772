/* mean, cross_entropy (fused log-softmax + NLL, mean over rows) and mse_loss. Each gives a
 * one-element f32 tensor, computed and kept on the backend (no host sync in the step). */
#include "core/error.h"
#include "nn/autocast.h"

static const int64_t amp_scalar_shape[1] = {1};

static amp_status amp_mean_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *x = node->in[0];
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(x, &s));
    if (s.buf)
        AMP_TRY(AMP_BE(dy->backend, fill_scalar, s.buf->data, x->dtype, x->numel,
                       (const float *)dy->data, 1.0f / (float)x->numel));
    return amp_grad_end(&s);
}

amp_status amp_mean(amp_tensor *x, amp_tensor **out) {
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor("amp_mean", "x", x, 0));
    AMP_TRY(amp_check_float("amp_mean", "x", x));
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(x->ctx, AMP_F32, 1, amp_scalar_shape, &y));
    AMP_TRY(AMP_BE(x->backend, sum, x->dtype, x->numel, x->data, 1.0f / (float)x->numel,
                   (float *)y->data));
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "mean", amp_mean_bwd, 1, &x, 0, &node));
    *out = y;
    return AMP_OK;
}

static amp_status amp_xent_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *logits = node->in[0], *labels = node->in[1];
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(logits, &s));
    if (s.buf)
        AMP_TRY(AMP_BE(dy->backend, xent_bwd, logits->dtype, logits->shape[0], logits->shape[1],
                       node->saved[0]->data, labels->data, dy->data, s.buf->data));
    return amp_grad_end(&s);
}

amp_status amp_cross_entropy(amp_tensor *logits, amp_tensor *labels, amp_tensor **out) {
    static const char *op = "amp_cross_entropy";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "logits", logits, 2));
    AMP_TRY(amp_check_tensor(op, "labels", labels, 1));
    AMP_TRY(amp_check_float(op, "logits", logits));
    if (labels->dtype != AMP_I32)
        return amp_fail(AMP_ERR_DTYPE, "%s: labels have dtype %s, want i32", op,
                        amp_dtype_name(labels->dtype));
    if (labels->shape[0] != logits->shape[0])
        return amp_fail(AMP_ERR_SHAPE, "%s: %lld labels for %lld rows of logits", op,
                        (long long)labels->shape[0], (long long)logits->shape[0]);
    amp_tensor *loss, *logsoftmax;
    AMP_TRY(amp_tensor_step(logits->ctx, AMP_F32, 1, amp_scalar_shape, &loss));
    AMP_TRY(amp_tensor_step_like(logits, AMP_F32, &logsoftmax));
    amp_status s = AMP_BE(logits->backend, xent_fwd, logits->dtype, logits->shape[0],
                          logits->shape[1], logits->data, labels->data, loss->data, logsoftmax->data);
    if (s != AMP_OK) return amp_fail_context(s, "%s", op); /* names a bad label and its row */
    amp_tensor *in[2] = {logits, labels};
    amp_tape_node *node;
    AMP_TRY(amp_record(loss, "cross_entropy", amp_xent_bwd, 2, in, 0, &node));
    if (node) node->saved[0] = logsoftmax;
    *out = loss;
    return AMP_OK;
}

static amp_status amp_mse_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *a = node->in[0], *b = node->in[1];
    amp_tensor *da;
    if (!a->requires_grad && !b->requires_grad) return AMP_OK;
    AMP_TRY(amp_tensor_step_like(a, a->dtype, &da));
    AMP_TRY(AMP_BE(dy->backend, mse_bwd, a->dtype, a->numel, a->data, b->data, dy->data, da->data));
    AMP_TRY(amp_grad_accumulate(a, da, 1.0f));
    return amp_grad_accumulate(b, da, -1.0f);
}

amp_status amp_mse_loss(amp_tensor *a, amp_tensor *b, amp_tensor **out) {
    static const char *op = "amp_mse_loss";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "a", a, 0));
    AMP_TRY(amp_check_tensor(op, "b", b, 0));
    amp_tensor *io[2] = {a, b};
    AMP_TRY(amp_autocast(AMP_CAT_FP32, io, 2));
    a = io[0];
    b = io[1];
    AMP_TRY(amp_check_float(op, "a", a));
    AMP_TRY(amp_check_same_dtype(op, a, b));
    if (!amp_same_shape(a, b)) {
        char ba[64], bb[64];
        return amp_fail(AMP_ERR_SHAPE, "%s: a %s and b %s differ in shape", op,
                        amp_shape_str(a, ba, sizeof ba), amp_shape_str(b, bb, sizeof bb));
    }
    amp_tensor *loss;
    AMP_TRY(amp_tensor_step(a->ctx, AMP_F32, 1, amp_scalar_shape, &loss));
    AMP_TRY(AMP_BE(a->backend, mse_fwd, a->dtype, a->numel, a->data, b->data, loss->data));
    amp_tensor *in[2] = {a, b};
    amp_tape_node *node;
    AMP_TRY(amp_record(loss, "mse_loss", amp_mse_bwd, 2, in, 0, &node));
    *out = loss;
    return AMP_OK;
}
