/* linear and matmul: GEMMs on the backend; bias added in the GEMM (an epilogue on cuBLASLt). */
#include "core/error.h"
#include "nn/autocast.h"

static amp_status amp_gemm(const amp_backend *be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                           const amp_tensor *a, int64_t lda, const amp_tensor *b, int64_t ldb,
                           amp_tensor *c, const float *bias) {
    amp_gemm_desc d = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f,
                       .beta = 0.0f, .a = a->data, .a_dtype = a->dtype, .lda = lda, .b = b->data,
                       .b_dtype = b->dtype, .ldb = ldb, .c = c->data, .c_dtype = c->dtype,
                       .ldc = n, .bias = bias};
    return AMP_BE(be, gemm, &d);
}

/* y[n,out] = x[n,in] @ w[out,in]^T + b:  dx = dy @ w,  dw = dy^T @ x,  db = column sums of dy. */
static amp_status amp_linear_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const amp_backend *be = dy->backend;
    int64_t n = x->shape[0], in = x->shape[1], out = w->shape[0];
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(x, &s));
    if (s.buf) AMP_TRY(amp_gemm(be, false, false, n, in, out, dy, out, w, in, s.buf, NULL));
    AMP_TRY(amp_grad_end(&s));
    AMP_TRY(amp_grad_begin(w, &s));
    if (s.buf) AMP_TRY(amp_gemm(be, true, false, out, in, n, dy, out, x, in, s.buf, NULL));
    AMP_TRY(amp_grad_end(&s));
    AMP_TRY(amp_grad_begin(b, &s));
    if (s.buf) AMP_TRY(AMP_BE(be, sum_rows, dy->dtype, n, out, dy->data, (float *)s.buf->data));
    return amp_grad_end(&s);
}

amp_status amp_linear(amp_tensor *x, amp_tensor *w, amp_tensor *b, amp_tensor **out) {
    static const char *op = "amp_linear";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "x", x, 2));
    AMP_TRY(amp_check_tensor(op, "w", w, 2));
    amp_tensor *io[2] = {x, w};
    AMP_TRY(amp_autocast(AMP_CAT_HALF, io, 2));
    x = io[0];
    w = io[1];
    AMP_TRY(amp_cast_to_f32(&b)); /* the GEMM epilogue adds an f32 bias */
    AMP_TRY(amp_check_float(op, "x", x));
    AMP_TRY(amp_check_same_dtype(op, x, w));
    char bx[64], bw[64];
    if (x->shape[1] != w->shape[1])
        return amp_fail(AMP_ERR_SHAPE, "%s: x %s and w %s: in_features differ (%lld vs %lld)", op,
                        amp_shape_str(x, bx, sizeof bx), amp_shape_str(w, bw, sizeof bw),
                        (long long)x->shape[1], (long long)w->shape[1]);
    if (b) {
        AMP_TRY(amp_check_tensor(op, "b", b, 1));
        if (b->shape[0] != w->shape[0])
            return amp_fail(AMP_ERR_SHAPE, "%s: b has %lld elements, w has %lld output features", op,
                            (long long)b->shape[0], (long long)w->shape[0]);
        if (b->dtype != AMP_F32)
            return amp_fail(AMP_ERR_DTYPE, "%s: b has dtype %s, want f32", op, amp_dtype_name(b->dtype));
    }
    int64_t shape[2] = {x->shape[0], w->shape[0]};
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(x->ctx, x->dtype, 2, shape, &y));
    AMP_TRY(amp_gemm(x->backend, false, true, shape[0], shape[1], x->shape[1], x, x->shape[1], w,
                     w->shape[1], y, b ? (const float *)b->data : NULL));
    amp_tensor *in[3] = {x, w, b};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "linear", amp_linear_bwd, 3, in, 0, &node));
    *out = y;
    return AMP_OK;
}

/* y[m,n] = a[m,k] @ b[k,n]:  da = dy @ b^T,  db = a^T @ dy. */
static amp_status amp_matmul_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *a = node->in[0], *b = node->in[1];
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(a, &s));
    if (s.buf) AMP_TRY(amp_gemm(dy->backend, false, true, m, k, n, dy, n, b, n, s.buf, NULL));
    AMP_TRY(amp_grad_end(&s));
    AMP_TRY(amp_grad_begin(b, &s));
    if (s.buf) AMP_TRY(amp_gemm(dy->backend, true, false, k, n, m, a, k, dy, n, s.buf, NULL));
    return amp_grad_end(&s);
}

amp_status amp_matmul(amp_tensor *a, amp_tensor *b, amp_tensor **out) {
    static const char *op = "amp_matmul";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "a", a, 2));
    AMP_TRY(amp_check_tensor(op, "b", b, 2));
    amp_tensor *io[2] = {a, b};
    AMP_TRY(amp_autocast(AMP_CAT_HALF, io, 2));
    a = io[0];
    b = io[1];
    AMP_TRY(amp_check_float(op, "a", a));
    AMP_TRY(amp_check_same_dtype(op, a, b));
    char ba[64], bb[64];
    if (a->shape[1] != b->shape[0])
        return amp_fail(AMP_ERR_SHAPE, "%s: a %s @ b %s: inner dimensions differ", op,
                        amp_shape_str(a, ba, sizeof ba), amp_shape_str(b, bb, sizeof bb));
    int64_t shape[2] = {a->shape[0], b->shape[1]};
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(a->ctx, a->dtype, 2, shape, &y));
    AMP_TRY(amp_gemm(a->backend, false, false, shape[0], shape[1], a->shape[1], a, a->shape[1], b,
                     b->shape[1], y, NULL));
    amp_tensor *in[2] = {a, b};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "matmul", amp_matmul_bwd, 2, in, 0, &node));
    *out = y;
    return AMP_OK;
}
