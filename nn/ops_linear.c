/* linear, linear_relu and linear_gelu: GEMMs on the backend (the GEMM helpers: nn/gemm.c). The
 * bias is added in the GEMM (an epilogue on cuBLASLt), linear_relu's ReLU is the GEMM's epilogue
 * (a pass over its output, NaN kept), linear_gelu's GELU too (the pre-activation saved for the
 * backward: core/backend.h's GELU epilogues), and a linear layer's bias gradient is taken in its weight-gradient GEMM (core/backend.h,
 * amp_gemm_desc). */
#include "core/error.h"
#include "nn/autocast.h"
#include "nn/gemm_internal.h"

/* What a linear node keeps besides its inputs: a GELU's epilogue, and whether x was not kept
 * (amp_linear_ex's recompute_input: its producer writes it again for w's gradient). */
typedef struct linear_aux {
    amp_gemm_epilogue epilogue;
    bool recompute_x;
} linear_aux;

/* x's values for w's gradient: x, or its producer's output written again into a temporary. */
static amp_status linear_x_values(const amp_tape_node *node, amp_tensor **xv) {
    amp_tensor *x = node->in[0];
    const linear_aux *a = node->aux;
    *xv = x;
    return a && a->recompute_x ? amp_regenerate_input(x, xv) : AMP_OK;
}

/* The backward of z = x @ w^T + b from dz: dx = dz @ w, dw = dz^T @ x, db = column sums of dz
 * (x's values from xv, which is x unless they were not kept). When both dw and db are wanted,
 * db comes out of dw's GEMM (its bias_grad: dz^T is that GEMM's op(A)), so dz is read once for
 * both; db alone is sum_rows. */
static amp_status amp_linear_bwd_dz(amp_tensor *x, const amp_tensor *xv, amp_tensor *w,
                                    amp_tensor *b, const amp_tensor *dz) {
    const amp_backend *be = dz->backend;
    int64_t n = x->shape[0], in = x->shape[1], out = w->shape[0];
    bool wrote;
    AMP_TRY(amp_gemm_grad(be, amp_gemm_desc_of(false, false, n, in, out, dz, out, w, in, x), x,
                          &wrote));
    amp_grad_sink sb;
    AMP_TRY(amp_grad_begin(b, &sb));
    amp_gemm_desc dw = amp_gemm_desc_of(true, false, out, in, n, dz, out, xv, in, w);
    dw.bias_grad = sb.buf ? (float *)sb.buf->data : NULL;
    AMP_TRY(amp_gemm_grad(be, dw, w, &wrote));
    if (!wrote && sb.buf)
        AMP_TRY(AMP_BE(be, sum_rows, dz->dtype, n, out, dz->data, (float *)sb.buf->data));
    return amp_grad_end(&sb);
}

/* y = GELU(z) again from the pre-activation the node keeps: the unary kernel the forward's
 * epilogue ran (gelu_exact: amp_linear_ex), so the same bits, for a reader whose
 * recompute_input did not keep y (the GPT MLP's c_proj, llm.c's -r 1). */
static amp_status linear_gelu_regenerate(const amp_tape_node *node, amp_tensor *into) {
    const amp_tensor *z = node->saved[0];
    bool tanh_form = ((const linear_aux *)node->aux)->epilogue == AMP_GEMM_EPILOGUE_GELU_TANH;
    return AMP_BE(z->backend, unary, tanh_form ? AMP_UNARY_GELU_TANH : AMP_UNARY_GELU_ERF,
                  z->dtype, z->numel, z->data, 1.0f, into->data);
}

/* linear's backward from dz, x's values written again first where they were not kept. */
static amp_status amp_linear_bwd_from(amp_tape_node *node, const amp_tensor *dz) {
    amp_tensor *xv;
    AMP_TRY(linear_x_values(node, &xv));
    AMP_TRY(amp_linear_bwd_dz(node->in[0], xv, node->in[1], node->in[2], dz));
    if (xv != node->in[0]) amp_tensor_step_release(xv);
    return AMP_OK;
}

/* y[n,out] = x[n,in] @ w[out,in]^T + b. */
static amp_status amp_linear_bwd(amp_tape_node *node, const amp_tensor *dy) {
    return amp_linear_bwd_from(node, dy);
}

/* Where dz = f(z, dy) goes: dy's own memory when dy is this backward's gradient of the output
 * (AMP_TENSOR_BW_TEMP: nothing reads it after this node; a kept output's gradient is not one),
 * else a temporary. The binary kernels may write in place. Either goes back to the arena once
 * linear's backward has read it. */
static amp_status dz_buffer(amp_tape_node *node, const amp_tensor *dy, amp_tensor **dz) {
    if ((dy->flags & AMP_TENSOR_BW_TEMP) && node->out->grad == dy) {
        *dz = (amp_tensor *)dy;
        return AMP_OK;
    }
    return amp_tensor_step_like(node->out, dy->dtype, dz);
}

/* y = relu(z), z = x @ w^T + b: dz = y > 0 ? dy : 0 (from the output, as relu's backward, so no
 * mask is kept), then linear's backward. */
static amp_status amp_linear_relu_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *dz;
    AMP_TRY(dz_buffer(node, dy, &dz));
    AMP_TRY(AMP_BE(dy->backend, binary, AMP_BINARY_RELU_BWD, dy->dtype, dy->numel,
                   node->out->data, dy->data, dz->data));
    AMP_TRY(amp_linear_bwd_from(node, dz));
    amp_tensor_step_release(dz);
    return AMP_OK;
}

/* y = gelu(z), z = x @ w^T + b kept by the forward (the GEMM's aux): dz = GELU'(z) dy, the
 * binary GELU_BWD kernel (amp_gelu's backward bits), then linear's backward. */
static amp_status amp_linear_gelu_bwd(amp_tape_node *node, const amp_tensor *dy) {
    const amp_tensor *z = node->saved[0];
    bool tanh_form = ((const linear_aux *)node->aux)->epilogue == AMP_GEMM_EPILOGUE_GELU_TANH;
    amp_tensor *dz;
    AMP_TRY(dz_buffer(node, dy, &dz));
    AMP_TRY(AMP_BE(dy->backend, binary,
                   tanh_form ? AMP_BINARY_GELU_TANH_BWD : AMP_BINARY_GELU_ERF_BWD, dy->dtype,
                   dy->numel, z->data, dy->data, dz->data));
    AMP_TRY(amp_linear_bwd_from(node, dz));
    amp_tensor_step_release(dz);
    return AMP_OK;
}

/* Which linear: the public op's name, the node's, its backward and epilogue, and amp_linear_ex's
 * choices (x not kept; a GELU output exactly GELU(z), so that it can be written again). */
typedef struct linear_call {
    const char *op, *node_name;
    amp_backward_fn bwd;
    amp_gemm_epilogue epilogue;
    bool recompute_x, exact;
} linear_call;

/* linear, linear_relu and linear_gelu: autocast (HALF: x and w in the half type under O1; the
 * bias f32), the checks naming `op`, one GEMM with the epilogue (a GELU's pre-activation into a
 * step tensor the node saves), and the tape node. */
static amp_status amp_linear_run(const linear_call *c, amp_tensor *x, amp_tensor *w,
                                 amp_tensor *b, amp_tensor **out) {
    const char *op = c->op;
    amp_gemm_epilogue epilogue = c->epilogue;
    bool recompute_x = c->recompute_x;
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
    bool records = x->ctx->grad_enabled &&
                   (x->requires_grad || w->requires_grad || (b && b->requires_grad));
    if (recompute_x && records) AMP_TRY(amp_check_recompute_input(op, x));
    int64_t shape[2] = {x->shape[0], w->shape[0]};
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(x->ctx, x->dtype, 2, shape, &y));
    amp_gemm_desc d = amp_gemm_desc_of(false, true, shape[0], shape[1], x->shape[1], x,
                                       x->shape[1], w, w->shape[1], y);
    d.bias = b ? (const float *)b->data : NULL;
    d.epilogue = epilogue;
    d.gelu_exact = c->exact;
    amp_tensor *z = NULL;
    if (amp_gemm_epilogue_is_gelu(epilogue)) {
        AMP_TRY(amp_tensor_step(x->ctx, x->dtype, 2, shape, &z));
        d.aux = z->data;
    }
    AMP_TRY(AMP_BE(x->backend, gemm, &d));
    amp_tensor *in[3] = {x, w, b};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, c->node_name, "x w b", c->bwd, 3, in,
                       z || recompute_x ? sizeof(linear_aux) : 0, &node));
    /* The bias gradient comes from dy alone; only the ReLU's backward reads the output; x is
     * not kept when its producer writes it again. */
    amp_node_unread(node, 4u | (recompute_x ? 1u : 0u), epilogue != AMP_GEMM_EPILOGUE_RELU);
    if (node && (z || recompute_x))
        *(linear_aux *)node->aux = (linear_aux){.epilogue = epilogue, .recompute_x = recompute_x};
    if (node && z) amp_node_save(node, 0, z, "pre-activation");
    if (node && z && c->exact) node->regenerate = linear_gelu_regenerate;
    *out = y;
    return AMP_OK;
}

/* x [..., in] with more than two dims: run as [N, in] (a free reshape each way, recorded, so the
 * gradient comes back in x's shape), as PyTorch's linear over [B, T, C]. */
static amp_status amp_linear_nd(const linear_call *c, amp_tensor *x, amp_tensor *w,
                                amp_tensor *b, amp_tensor **out) {
    const char *op = c->op;
    if (!out) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'out' is NULL", op);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    if (x->ndim <= 2)
        return amp_linear_run(c, x, w, b, out);
    AMP_TRY(amp_check_tensor(op, "w", w, 2));
    if (x->shape[x->ndim - 1] != w->shape[1]) {
        char bx[96], bw[96];
        return amp_fail(AMP_ERR_SHAPE, "%s: x %s and w %s: in_features differ (%lld vs %lld)", op,
                        amp_shape_str(x, bx, sizeof bx), amp_shape_str(w, bw, sizeof bw),
                        (long long)x->shape[x->ndim - 1], (long long)w->shape[1]);
    }
    /* A write in place since x was made is named on x itself: the flat view made after it
     * could only say that it cannot be written again. */
    if (c->recompute_x && x->ctx->grad_enabled && x->node && x->node->regenerate)
        AMP_TRY(amp_check_recompute_input(op, x));
    int64_t flat[2] = {x->numel / x->shape[x->ndim - 1], x->shape[x->ndim - 1]};
    amp_tensor *x2, *y2;
    AMP_TRY(amp_reshape(x, 2, flat, &x2));
    AMP_TRY(amp_linear_run(c, x2, w, b, &y2));
    if (c->recompute_x) amp_tensor_step_drop(x2); /* no reader left: x's data may go with x */
    int64_t shape[AMP_MAX_DIMS];
    for (int k = 0; k < x->ndim - 1; k++) shape[k] = x->shape[k];
    shape[x->ndim - 1] = w->shape[0];
    AMP_TRY(amp_reshape(y2, x->ndim, shape, out));
    amp_tensor_step_drop(y2); /* the view reads it: it goes when the caller drops the view */
    return AMP_OK;
}

amp_status amp_linear_ex(amp_tensor *x, amp_tensor *w, amp_tensor *b, const amp_linear_opts *o,
                         amp_tensor **out) {
    static const char op[] = "amp_linear_ex";
    if (!o) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'opts' is NULL", op);
    static const amp_backward_fn bwds[] = {amp_linear_bwd, amp_linear_relu_bwd, amp_linear_gelu_bwd,
                                           amp_linear_gelu_bwd};
    static const amp_gemm_epilogue epilogues[] = {AMP_GEMM_EPILOGUE_NONE, AMP_GEMM_EPILOGUE_RELU,
                                                  AMP_GEMM_EPILOGUE_GELU_ERF,
                                                  AMP_GEMM_EPILOGUE_GELU_TANH};
    static const char *const names[] = {"linear", "linear_relu", "linear_gelu",
                                        "linear_gelu_tanh"};
    int a = (int)o->activation;
    if (a < AMP_LINEAR_NONE || a > AMP_LINEAR_GELU_TANH)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.activation = %d, want an amp_linear_act",
                        op, a);
    linear_call c = {op, names[a], bwds[a], epilogues[a], o->recompute_input, true};
    return amp_linear_nd(&c, x, w, b, out);
}

amp_status amp_linear(amp_tensor *x, amp_tensor *w, amp_tensor *b, amp_tensor **out) {
    static const linear_call c = {"amp_linear", "linear", amp_linear_bwd,
                                  AMP_GEMM_EPILOGUE_NONE, false, false};
    return amp_linear_nd(&c, x, w, b, out);
}

amp_status amp_linear_relu(amp_tensor *x, amp_tensor *w, amp_tensor *b, amp_tensor **out) {
    static const linear_call c = {"amp_linear_relu", "linear_relu", amp_linear_relu_bwd,
                                  AMP_GEMM_EPILOGUE_RELU, false, false};
    return amp_linear_nd(&c, x, w, b, out);
}

amp_status amp_linear_gelu(amp_tensor *x, amp_tensor *w, amp_tensor *b, bool tanh_approximation,
                           amp_tensor **out) {
    linear_call c = {"amp_linear_gelu", tanh_approximation ? "linear_gelu_tanh" : "linear_gelu",
                     amp_linear_gelu_bwd,
                     tanh_approximation ? AMP_GEMM_EPILOGUE_GELU_TANH : AMP_GEMM_EPILOGUE_GELU_ERF,
                     false, false};
    return amp_linear_nd(&c, x, w, b, out);
}
