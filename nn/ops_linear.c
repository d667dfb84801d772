/* linear, linear_relu and matmul: GEMMs on the backend. The bias is added in the GEMM (an
 * epilogue on cuBLASLt), linear_relu's ReLU is the GEMM's epilogue (a pass over its output, NaN
 * kept), and a linear layer's bias gradient is taken in its weight-gradient GEMM (core/backend.h,
 * amp_gemm_desc). */
#include "core/error.h"
#include "nn/autocast.h"

/* C[m, n] = op(A) op(B) of row-major tensors, C overwritten, with the context's TF32 switch; the
 * caller adds a bias, an epilogue or a bias gradient. c: the output, or the tensor whose
 * gradient C is (amp_gemm_grad then points C at it). */
static amp_gemm_desc amp_gemm_desc_of(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                      const amp_tensor *a, int64_t lda, const amp_tensor *b,
                                      int64_t ldb, amp_tensor *c) {
    return (amp_gemm_desc){.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f,
                           .beta = 0.0f, .a = a->data, .a_dtype = a->dtype, .lda = lda,
                           .b = b->data, .b_dtype = b->dtype, .ldb = ldb, .c = c->data,
                           .c_dtype = c->dtype, .ldc = n, .allow_tf32 = c->ctx->allow_tf32};
}

static amp_status amp_gemm(const amp_backend *be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                           const amp_tensor *a, int64_t lda, const amp_tensor *b, int64_t ldb,
                           amp_tensor *c) {
    amp_gemm_desc d = amp_gemm_desc_of(ta, tb, m, n, k, a, lda, b, ldb, c);
    return AMP_BE(be, gemm, &d);
}

/* C = the gradient of t, from the GEMM d (its C unset): written through t's sink; or, when t is
 * autocast's half copy of an f32 tensor (O1's per-step weight cast), straight into that tensor's
 * f32 gradient (half x half -> f32, beta 1 after an earlier contribution). That skips the half
 * gradient, its rounding to half and the cast's backward pass over it (which torch.autocast and
 * Apex O1 make: a read of the half gradient and a write of the f32 one per parameter); an
 * overflow of the half type there no longer reaches the f32 gradient. *wrote: whether t wanted
 * a gradient at all. */
static amp_status amp_gemm_grad(const amp_backend *be, amp_gemm_desc d, amp_tensor *t, bool *wrote) {
    *wrote = false;
    amp_tensor *src = amp_cast_f32_source(t);
    /* An f32 leaf (a parameter at O0 and O1, an input) takes the GEMM's output in place too, with
     * beta 1 after an earlier contribution: the bits of a temporary added to it (the GEMM sums
     * in f32 either way, and the f32 sum is rounded once), without the temporary, which
     * accumulation over micro-batches would otherwise need for every weight. */
    if (!src && t && t->requires_grad && t->dtype == AMP_F32 && !(t->flags & AMP_TENSOR_STEP))
        src = t;
    if (src) {
        amp_tensor *g;
        AMP_TRY(amp_grad_target(src, &g, &d.beta));
        d.c = g->data;
        d.c_dtype = AMP_F32;
        AMP_TRY(AMP_BE(be, gemm, &d));
        amp_grad_mark_written(src);
        *wrote = true;
        return AMP_OK;
    }
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(t, &s));
    if (s.buf) {
        d.c = s.buf->data;
        d.c_dtype = s.buf->dtype;
        AMP_TRY(AMP_BE(be, gemm, &d));
        *wrote = true;
    }
    return amp_grad_end(&s);
}

/* The backward of z = x @ w^T + b from dz: dx = dz @ w, dw = dz^T @ x, db = column sums of dz.
 * When both dw and db are wanted, db comes out of dw's GEMM (its bias_grad: dz^T is that GEMM's
 * op(A)), so dz is read once for both; db alone is sum_rows. */
static amp_status amp_linear_bwd_dz(amp_tensor *x, amp_tensor *w, amp_tensor *b,
                                    const amp_tensor *dz) {
    const amp_backend *be = dz->backend;
    int64_t n = x->shape[0], in = x->shape[1], out = w->shape[0];
    bool wrote;
    AMP_TRY(amp_gemm_grad(be, amp_gemm_desc_of(false, false, n, in, out, dz, out, w, in, x), x,
                          &wrote));
    amp_grad_sink sb;
    AMP_TRY(amp_grad_begin(b, &sb));
    amp_gemm_desc dw = amp_gemm_desc_of(true, false, out, in, n, dz, out, x, in, w);
    dw.bias_grad = sb.buf ? (float *)sb.buf->data : NULL;
    AMP_TRY(amp_gemm_grad(be, dw, w, &wrote));
    if (!wrote && sb.buf)
        AMP_TRY(AMP_BE(be, sum_rows, dz->dtype, n, out, dz->data, (float *)sb.buf->data));
    return amp_grad_end(&sb);
}

/* y[n,out] = x[n,in] @ w[out,in]^T + b. */
static amp_status amp_linear_bwd(amp_tape_node *node, const amp_tensor *dy) {
    return amp_linear_bwd_dz(node->in[0], node->in[1], node->in[2], dy);
}

/* y = relu(z), z = x @ w^T + b: dz = y > 0 ? dy : 0 (from the output, as relu's backward, so no
 * mask is kept), then linear's backward. */
static amp_status amp_linear_relu_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *dz;
    AMP_TRY(amp_tensor_step_like(node->out, dy->dtype, &dz));
    AMP_TRY(AMP_BE(dy->backend, binary, AMP_BINARY_RELU_BWD, dy->dtype, dy->numel,
                   node->out->data, dy->data, dz->data));
    return amp_linear_bwd_dz(node->in[0], node->in[1], node->in[2], dz);
}

/* linear and linear_relu: autocast (HALF: x and w in the half type under O1; the bias f32), the
 * checks naming `op`, one GEMM with the epilogue, and the tape node. */
static amp_status amp_linear_run(const char *op, const char *node_name, amp_backward_fn bwd,
                                 amp_gemm_epilogue epilogue, amp_tensor *x, amp_tensor *w,
                                 amp_tensor *b, amp_tensor **out) {
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
    amp_gemm_desc d = amp_gemm_desc_of(false, true, shape[0], shape[1], x->shape[1], x,
                                       x->shape[1], w, w->shape[1], y);
    d.bias = b ? (const float *)b->data : NULL;
    d.epilogue = epilogue;
    AMP_TRY(AMP_BE(x->backend, gemm, &d));
    amp_tensor *in[3] = {x, w, b};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, node_name, bwd, 3, in, 0, &node));
    *out = y;
    return AMP_OK;
}

amp_status amp_linear(amp_tensor *x, amp_tensor *w, amp_tensor *b, amp_tensor **out) {
    AMP_CHECK_ARG(out);
    return amp_linear_run("amp_linear", "linear", amp_linear_bwd, AMP_GEMM_EPILOGUE_NONE, x, w, b,
                          out);
}

amp_status amp_linear_relu(amp_tensor *x, amp_tensor *w, amp_tensor *b, amp_tensor **out) {
    AMP_CHECK_ARG(out);
    return amp_linear_run("amp_linear_relu", "linear_relu", amp_linear_relu_bwd,
                          AMP_GEMM_EPILOGUE_RELU, x, w, b, out);
}

/* y[m,n] = a[m,k] @ b[k,n]:  da = dy @ b^T,  db = a^T @ dy. */
static amp_status amp_matmul_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *a = node->in[0], *b = node->in[1];
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
    bool wrote;
    AMP_TRY(amp_gemm_grad(dy->backend, amp_gemm_desc_of(false, true, m, k, n, dy, n, b, n, a), a,
                          &wrote));
    return amp_gemm_grad(dy->backend, amp_gemm_desc_of(true, false, k, n, m, a, k, dy, n, b), b,
                         &wrote);
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
                     b->shape[1], y));
    amp_tensor *in[2] = {a, b};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "matmul", amp_matmul_bwd, 2, in, 0, &node));
    *out = y;
    return AMP_OK;
}
