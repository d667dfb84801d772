/* matmul, as torch.matmul for the shapes models use: a [m, k] @ b [k, n]; a [..., m, k] @ b [k, n]
 * (one GEMM over the leading dims, as linear); a [..., m, k] @ b [..., k, n] with the same
 * leading dims, or a [m, k] shared by every b: a strided batch of GEMMs (cuBLASLt's batch count,
 * oneDNN's batch dim), attention's Q K^T and P V. Cast category HALF, as linear.
 * Backward: da = dy b^T and db = a^T dy, batched the same way; a shared a's gradient is the
 * batch's products summed (a batch of GEMMs into a temporary, then one reduce_dim). */
#include "core/error.h"
#include "core/shape.h"
#include "nn/autocast.h"
#include "nn/gemm_internal.h"

typedef struct matmul_shape {
    int64_t batch, m, k, n;
    bool shared_a; /* a is 2-D, b batched */
} matmul_shape;

static matmul_shape shape_of(const amp_tensor *a, const amp_tensor *b) {
    matmul_shape s = {.m = a->shape[a->ndim - 2], .k = a->shape[a->ndim - 1],
                      .n = b->shape[b->ndim - 1], .batch = 1, .shared_a = a->ndim == 2};
    for (int i = 0; i < b->ndim - 2; i++) s.batch *= b->shape[i];
    return s;
}

/* d with the batch of s: strides of dense [m, k], [k, n] or [m, n] products (0: shared). */
static amp_gemm_desc batched(amp_gemm_desc d, int64_t batch, int64_t sa, int64_t sb, int64_t sc) {
    if (batch > 1) d.batch = batch, d.stride_a = sa, d.stride_b = sb, d.stride_c = sc;
    return d;
}

static amp_status matmul_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *a = node->in[0], *b = node->in[1];
    const amp_backend *be = dy->backend;
    matmul_shape s = b->ndim == 2 ? (matmul_shape){1, a->shape[0], a->shape[1], b->shape[1], false}
                                  : shape_of(a, b);
    int64_t m = s.m, k = s.k, n = s.n, mk = m * k, kn = k * n, mn = m * n;
    bool wrote;
    /* da = dy @ b^T */
    if (a->requires_grad && s.shared_a && s.batch > 1) {
        amp_tensor *t, *r;
        AMP_TRY(amp_tensor_step(a->ctx, a->dtype, 3, (const int64_t[]){s.batch, m, k}, &t));
        amp_gemm_desc d = batched(amp_gemm_desc_of(false, true, m, k, n, dy, n, b, n, t),
                                  s.batch, mn, kn, mk);
        AMP_TRY(AMP_BE(be, gemm, &d));
        AMP_TRY(amp_tensor_step(a->ctx, a->dtype, 2, (const int64_t[]){m, k}, &r));
        AMP_TRY(AMP_BE(be, reduce_dim, AMP_REDUCE_SUM, a->dtype, 1, s.batch, mk, t->data, 1.0f,
                       r->data, NULL));
        AMP_TRY(amp_grad_accumulate(a, r, 1.0f));
    } else if (a->requires_grad) {
        AMP_TRY(amp_gemm_grad(be, batched(amp_gemm_desc_of(false, true, m, k, n, dy, n, b, n, a),
                                          s.batch, mn, kn, mk),
                              a, &wrote));
    }
    /* db = a^T @ dy */
    return amp_gemm_grad(be, batched(amp_gemm_desc_of(true, false, k, n, m, a, k, dy, n, b),
                                     s.batch, s.shared_a ? 0 : mk, mn, kn),
                         b, &wrote);
}

static amp_status check_shapes(const char *op, const amp_tensor *a, const amp_tensor *b) {
    char ba[96], bb[96];
    bool ok = a->shape[a->ndim - 1] == b->shape[b->ndim - 2];
    if (ok && b->ndim > 2) {
        ok = a->ndim == 2 || a->ndim == b->ndim;
        for (int i = 0; ok && a->ndim == b->ndim && i < a->ndim - 2; i++)
            ok = a->shape[i] == b->shape[i];
    }
    if (!ok)
        return amp_fail(AMP_ERR_SHAPE, "%s: a %s @ b %s: the inner dimensions or the batch dims "
                        "differ (b's batch dims must be a's, or a 2-D)", op,
                        amp_shape_str(a, ba, sizeof ba), amp_shape_str(b, bb, sizeof bb));
    return AMP_OK;
}

amp_status amp_matmul(amp_tensor *a, amp_tensor *b, amp_tensor **out) {
    static const char *op = "amp_matmul";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "a", a, 0));
    AMP_TRY(amp_check_tensor(op, "b", b, 0));
    if (a->ndim < 2 || b->ndim < 2)
        return amp_fail(AMP_ERR_SHAPE, "%s: a has %d dims and b %d; both need at least 2", op,
                        a->ndim, b->ndim);
    amp_tensor *io[2] = {a, b};
    AMP_TRY(amp_autocast(AMP_CAT_HALF, io, 2));
    a = io[0];
    b = io[1];
    AMP_TRY(amp_check_float(op, "a", a));
    AMP_TRY(amp_check_same_dtype(op, a, b));
    AMP_TRY(check_shapes(op, a, b));
    if (b->ndim == 2 && a->ndim > 2) { /* one GEMM over a's leading dims */
        int64_t k = a->shape[a->ndim - 1], flat[2] = {a->numel / k, k}, shape[AMP_MAX_DIMS];
        amp_tensor *a2, *y2;
        AMP_TRY(amp_reshape(a, 2, flat, &a2));
        AMP_TRY(amp_matmul(a2, b, &y2));
        for (int i = 0; i < a->ndim - 1; i++) shape[i] = a->shape[i];
        shape[a->ndim - 1] = b->shape[1];
        return amp_reshape(y2, a->ndim, shape, out);
    }
    matmul_shape s = b->ndim == 2 ? (matmul_shape){1, a->shape[0], a->shape[1], b->shape[1], false}
                                  : shape_of(a, b);
    int64_t shape[AMP_MAX_DIMS];
    for (int i = 0; i < b->ndim - 2; i++) shape[i] = b->shape[i];
    shape[b->ndim - 2] = s.m;
    shape[b->ndim - 1] = s.n;
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(a->ctx, a->dtype, b->ndim, shape, &y));
    amp_gemm_desc d = batched(amp_gemm_desc_of(false, false, s.m, s.n, s.k, a, s.k, b, s.n, y),
                              s.batch, s.shared_a ? 0 : s.m * s.k, s.k * s.n, s.m * s.n);
    AMP_TRY(AMP_BE(a->backend, gemm, &d));
    amp_tensor *in[2] = {a, b};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "matmul", "a b", matmul_bwd, 2, in, 0, &node));
    amp_node_unread(node, 0u, true); /* da and db read b and a, never y */
    *out = y;
    return AMP_OK;
}
