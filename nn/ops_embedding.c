/* The embedding (torch.nn.functional.embedding): y[..., :] = weight[idx[...], :], a gather of
 * rows in the weight's dtype (no cast category: on none of torch.amp's lists). Backward: the
 * weight's gradient is the deterministic scatter-add of the rows of dy into an f32 gradient
 * (embedding_bwd: index order per element, no float atomics), cast to a half weight's dtype
 * where the weight is half (O2, O3). The indices get no gradient. */
#include "core/error.h"
#include "nn/autograd.h"

static amp_status embedding_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *idx = node->in[0], *w = node->in[1];
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(w, &s));
    if (s.buf) {
        int64_t vocab = w->shape[0], dim = w->shape[1];
        amp_tensor *g = s.buf;
        if (g->dtype != AMP_F32) AMP_TRY(amp_tensor_step(w->ctx, AMP_F32, 2, w->shape, &g));
        AMP_TRY(AMP_BE(dy->backend, embedding_bwd, dy->dtype, idx->numel, dim, vocab,
                       (const int32_t *)idx->data, dy->data, (float *)g->data));
        if (g != s.buf)
            AMP_TRY(AMP_BE(dy->backend, cast, s.buf->data, s.buf->dtype, g->data, AMP_F32,
                           g->numel));
    }
    return amp_grad_end(&s);
}

amp_status amp_embedding(amp_tensor *idx, amp_tensor *weight, amp_tensor **out) {
    static const char *op = "amp_embedding";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "idx", idx, 0));
    AMP_TRY(amp_check_tensor(op, "weight", weight, 2));
    AMP_TRY(amp_check_float(op, "weight", weight));
    if (idx->dtype != AMP_I32)
        return amp_fail(AMP_ERR_DTYPE, "%s: idx has dtype %s, want i32 token ids", op,
                        amp_dtype_name(idx->dtype));
    if (idx->backend != weight->backend)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: idx is on backend %s, weight on %s", op,
                        idx->backend->name, weight->backend->name);
    if (idx->ndim >= AMP_MAX_DIMS)
        return amp_fail(AMP_ERR_SHAPE, "%s: idx has %d dims; the output adds one, at most %d", op,
                        idx->ndim, AMP_MAX_DIMS);
    int64_t shape[AMP_MAX_DIMS];
    for (int k = 0; k < idx->ndim; k++) shape[k] = idx->shape[k];
    shape[idx->ndim] = weight->shape[1];
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(weight->ctx, weight->dtype, idx->ndim + 1, shape, &y));
    AMP_TRY(amp_fail_as(AMP_BE(weight->backend, embedding_fwd, weight->dtype, idx->numel,
                               weight->shape[1], weight->shape[0], (const int32_t *)idx->data,
                               weight->data, y->data),
                        op)); /* names a bad id and its position */
    amp_tensor *in[2] = {idx, weight};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "embedding", "idx weight", embedding_bwd, 2, in, 0, &node));
    /* It adds dy into the rows of idx: it reads idx, never the weight's values (a step may
     * write those under a retained graph, as PyTorch's embedding_backward allows). */
    amp_node_unread(node, 2u, true);
    *out = y;
    return AMP_OK;
}
