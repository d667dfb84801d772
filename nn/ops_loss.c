/* mean, cross_entropy (fused softmax + NLL: no probabilities kept) and mse_loss. Each gives a
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
    AMP_TRY(amp_record(y, "mean", "x", amp_mean_bwd, 1, &x, 0, &node));
    amp_node_unread(node, 1u, true); /* dy / numel everywhere: no data read */
    *out = y;
    return AMP_OK;
}

static amp_status amp_xent_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *logits = node->in[0], *labels = node->in[1];
    const amp_xent_desc *d = node->aux;
    amp_tensor *over;
    AMP_TRY(amp_grad_over_input(logits, &over));
    if (over) /* dlogits over the logits: the kernel reads each element before writing it */
        return AMP_BE(dy->backend, xent_bwd, d, logits->data, labels->data,
                      node->saved[0]->data, dy->data, over->data);
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(logits, &s));
    if (s.buf)
        AMP_TRY(AMP_BE(dy->backend, xent_bwd, d, logits->data, labels->data,
                       node->saved[0]->data, dy->data, s.buf->data));
    return amp_grad_end(&s);
}

amp_xent_options amp_xent_defaults(void) {
    return (amp_xent_options){.ignore_index = -100, .label_smoothing = 0.0f, .sum = false};
}

amp_status amp_cross_entropy_ex(amp_tensor *logits, amp_tensor *labels,
                                const amp_xent_options *options, amp_tensor **out) {
    static const char *op = "amp_cross_entropy";
    AMP_CHECK_ARG(out);
    AMP_CHECK_ARG(options);
    AMP_TRY(amp_check_tensor(op, "logits", logits, 2));
    AMP_TRY(amp_check_tensor(op, "labels", labels, 1));
    AMP_TRY(amp_check_float(op, "logits", logits));
    if (labels->dtype != AMP_I32)
        return amp_fail(AMP_ERR_DTYPE, "%s: labels have dtype %s, want i32", op,
                        amp_dtype_name(labels->dtype));
    if (labels->shape[0] != logits->shape[0])
        return amp_fail(AMP_ERR_SHAPE, "%s: %lld labels for %lld rows of logits", op,
                        (long long)labels->shape[0], (long long)logits->shape[0]);
    if (!(options->label_smoothing >= 0.0f && options->label_smoothing <= 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: label_smoothing = %g is outside [0, 1]", op,
                        (double)options->label_smoothing);
    int64_t width = logits->shape[1], classes = options->classes ? options->classes : width;
    if (classes < 1 || classes > width)
        return amp_fail(AMP_ERR_SHAPE, "%s: options->classes = %lld is outside [1, %lld], the "
                        "logits' columns (0: all of them)", op, (long long)options->classes,
                        (long long)width);
    amp_xent_desc d = {.rows = logits->shape[0],
                       .classes = classes,
                       .padding = width - classes,
                       .dt = logits->dtype,
                       .ignore_index = options->ignore_index,
                       .label_smoothing = options->label_smoothing,
                       .sum = options->sum};
    int64_t stats_shape[1] = {2 * d.rows + 1};
    amp_tensor *loss, *stats;
    AMP_TRY(amp_tensor_step(logits->ctx, AMP_F32, 1, amp_scalar_shape, &loss));
    AMP_TRY(amp_tensor_step(logits->ctx, AMP_F32, 1, stats_shape, &stats));
    amp_status s = AMP_BE(logits->backend, xent_fwd, &d, logits->data, labels->data, stats->data,
                          loss->data);
    if (s != AMP_OK) return amp_fail_as(s, op); /* names a bad label and its row */
    amp_tensor *in[2] = {logits, labels};
    amp_tape_node *node;
    AMP_TRY(amp_record(loss, "cross_entropy", "logits labels", amp_xent_bwd, 2, in, sizeof d,
                       &node));
    amp_node_unread(node, 0u, true); /* it reads the logits, the labels and its statistics */
    if (node) {
        amp_node_save(node, 0, stats, "statistics");
        *(amp_xent_desc *)node->aux = d;
    }
    *out = loss;
    return AMP_OK;
}

amp_status amp_cross_entropy(amp_tensor *logits, amp_tensor *labels, amp_tensor **out) {
    amp_xent_options o = amp_xent_defaults();
    return amp_cross_entropy_ex(logits, labels, &o, out);
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
    AMP_TRY(amp_record(loss, "mse_loss", "a b", amp_mse_bwd, 2, in, 0, &node));
    amp_node_unread(node, 0u, true); /* it reads a and b, not the loss */
    *out = loss;
    return AMP_OK;
}
