/* SwiGLU (Shazeer's GLU variant, the Llama MLP's silu(gate(x)) * up(x)): amp_swiglu over a
 * tensor holding both halves, and amp_linear_swiglu, which makes the gate and up projections
 * with one GEMM when the weights are one block in memory (two dense ones otherwise, amp_linear's
 * own calls, so its bits) and feeds them to the same fused op. Only the projections are kept for
 * the backward (as linear_gelu keeps z); the silu, its output and the product are never stored.
 * No cast category of its own: x's dtype (under O1 the projections' half type, as torch.autocast
 * leaves silu and mul). */
#include <string.h>

#include "core/error.h"
#include "core/tensor_internal.h"
#include "nn/autocast.h"
#include "nn/gemm_internal.h"

static amp_status swiglu_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *gu = node->in[0];
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(gu, &s));
    if (s.buf) {
        int64_t cols = gu->shape[gu->ndim - 1] / 2, rows = gu->numel / (2 * cols);
        size_t half = (size_t)cols * amp_dtype_size(gu->dtype);
        AMP_TRY(AMP_BE(dy->backend, swiglu_bwd, gu->dtype, rows, cols, gu->data,
                       (const char *)gu->data + half, 2 * cols, dy->data, s.buf->data,
                       (char *)s.buf->data + half));
    }
    return amp_grad_end(&s);
}

amp_status amp_swiglu(amp_tensor *gu, amp_tensor **out) {
    static const char op[] = "amp_swiglu";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "gu", gu, 0));
    AMP_TRY(amp_check_float(op, "gu", gu));
    if (gu->ndim < 1 || gu->shape[gu->ndim - 1] % 2 != 0) {
        char b[96];
        return amp_fail(AMP_ERR_SHAPE, "%s: gu %s must end in an even dim (the gate's half, then "
                        "the up projection's)", op, amp_shape_str(gu, b, sizeof b));
    }
    int64_t shape[AMP_MAX_DIMS], cols = gu->shape[gu->ndim - 1] / 2;
    memcpy(shape, gu->shape, (size_t)gu->ndim * sizeof *shape);
    shape[gu->ndim - 1] = cols;
    amp_tensor *y;
    AMP_TRY(amp_tensor_step(gu->ctx, gu->dtype, gu->ndim, shape, &y));
    size_t half = (size_t)cols * amp_dtype_size(gu->dtype);
    AMP_TRY(amp_fail_as(AMP_BE(gu->backend, swiglu_fwd, gu->dtype, gu->numel / (2 * cols), cols,
                               gu->data, (const char *)gu->data + half, 2 * cols, y->data),
                        op));
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "swiglu", "gu", swiglu_bwd, 1, &gu, 0, &node));
    amp_node_unread(node, 0u, true); /* it reads gu, never y */
    *out = y;
    return AMP_OK;
}

/* The backward of the linear form, in the order the unfused ops' takes it (up's linear was
 * recorded last): dx and dW of up, then of gate, each reading its part of the projections'
 * gradient; joined, dx is one GEMM over both halves. */
static amp_status linear_swiglu_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *x = node->in[0], *wg = node->in[1], *wu = node->in[2], *xv = x;
    amp_tensor *g = node->saved[0], *u = node->saved[1]; /* u NULL: g holds both halves */
    const amp_backend *be = dy->backend;
    int64_t n = x->shape[0], in = x->shape[1], f = wg->shape[0], ld = u ? f : 2 * f;
    size_t half = (size_t)f * amp_dtype_size(g->dtype);
    amp_tensor *dg, *du = NULL;
    AMP_TRY(amp_tensor_step_like(g, g->dtype, &dg));
    if (u) AMP_TRY(amp_tensor_step_like(u, u->dtype, &du));
    const void *ub = u ? u->data : (const char *)g->data + half;
    void *dub = du ? du->data : (char *)dg->data + half;
    AMP_TRY(AMP_BE(be, swiglu_bwd, g->dtype, n, f, g->data, ub, ld, dy->data, dg->data, dub));
    /* x's values for the weight gradients: written again where the forward did not keep them */
    if (*(const bool *)node->aux) AMP_TRY(amp_regenerate_input(x, &xv));
    bool wrote;
    amp_gemm_desc d;
    if (!u) { /* dx = [dG, dU] @ [w_gate; w_up]: one GEMM */
        d = amp_gemm_desc_of(false, false, n, in, 2 * f, dg, 2 * f, wg, in, x);
        AMP_TRY(amp_gemm_grad(be, d, x, &wrote));
    } else {
        AMP_TRY(amp_gemm_grad(be, amp_gemm_desc_of(false, false, n, in, f, du, f, wu, in, x), x,
                              &wrote));
    }
    d = amp_gemm_desc_of(true, false, f, in, n, dg, ld, xv, in, wu);
    d.a = dub;
    AMP_TRY(amp_gemm_grad(be, d, wu, &wrote));
    if (u)
        AMP_TRY(amp_gemm_grad(be, amp_gemm_desc_of(false, false, n, in, f, dg, f, wg, in, x), x,
                              &wrote));
    AMP_TRY(amp_gemm_grad(be, amp_gemm_desc_of(true, false, f, in, n, dg, ld, xv, in, wg), wg,
                          &wrote));
    if (xv != x) amp_tensor_step_release(xv);
    if (du) amp_tensor_step_release(du);
    amp_tensor_step_release(dg);
    return AMP_OK;
}

/* y again from the projections the node keeps: the same kernel on the same rounded gate and
 * up, so the same bits (selective recomputation: down_proj's amp_linear_ex recompute_input). */
static amp_status linear_swiglu_regenerate(const amp_tape_node *node, amp_tensor *into) {
    const amp_tensor *g = node->saved[0], *u = node->saved[1];
    int64_t n = into->numel / node->in[1]->shape[0], f = node->in[1]->shape[0];
    const void *ub = u ? u->data : (const char *)g->data + (size_t)f * amp_dtype_size(g->dtype);
    return AMP_BE(into->backend, swiglu_fwd, g->dtype, n, f, g->data, ub, u ? f : 2 * f,
                  into->data);
}

/* x [n, in] (checked, autocast applied): the projections, y = silu(gate) * up, the node, which
 * keeps x unless recompute_x (its producer writes it again for the weight gradients). */
static amp_status linear_swiglu_run(const char *op, amp_tensor *x, amp_tensor *wg, amp_tensor *wu,
                                    bool recompute_x, amp_tensor **out) {
    int64_t n = x->shape[0], in = x->shape[1], f = wg->shape[0];
    size_t half = (size_t)f * amp_dtype_size(x->dtype);
    /* [w_gate; w_up] one [2F, in] matrix (consecutive parameters): one GEMM into [n, 2F] */
    bool joined = (const char *)wu->data == (const char *)wg->data + half * (size_t)in;
    amp_tensor *g, *u = NULL, *y;
    AMP_TRY(amp_tensor_step(x->ctx, x->dtype, 2, (const int64_t[]){n, joined ? 2 * f : f}, &g));
    AMP_TRY(amp_gemm(x->backend, false, true, n, joined ? 2 * f : f, in, x, in, wg, in, g));
    if (!joined) {
        AMP_TRY(amp_tensor_step(x->ctx, x->dtype, 2, (const int64_t[]){n, f}, &u));
        AMP_TRY(amp_gemm(x->backend, false, true, n, f, in, x, in, wu, in, u));
    }
    AMP_TRY(amp_tensor_step(x->ctx, x->dtype, 2, (const int64_t[]){n, f}, &y));
    const void *ub = u ? u->data : (const char *)g->data + half;
    AMP_TRY(amp_fail_as(AMP_BE(x->backend, swiglu_fwd, x->dtype, n, f, g->data, ub,
                               joined ? 2 * f : f, y->data),
                        op));
    amp_tensor *inputs[3] = {x, wg, wu};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "linear_swiglu", "x w_gate w_up", linear_swiglu_bwd, 3, inputs,
                       sizeof(bool), &node));
    /* its GEMMs read x (unless written again) and both weights, never y */
    amp_node_unread(node, recompute_x ? 1u : 0u, true);
    if (node) {
        *(bool *)node->aux = recompute_x;
        amp_node_save(node, 0, g, joined ? "gate and up" : "gate");
        amp_node_save(node, 1, u, "up");
        node->regenerate = linear_swiglu_regenerate;
    }
    *out = y;
    return AMP_OK;
}

static amp_status linear_swiglu(const char *op, amp_tensor *x, amp_tensor *w_gate,
                                amp_tensor *w_up, bool recompute_x, amp_tensor **out) {
    if (!out) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'out' is NULL", op);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    AMP_TRY(amp_check_tensor(op, "w_gate", w_gate, 2));
    AMP_TRY(amp_check_tensor(op, "w_up", w_up, 2));
    char bx[96], bg[64], bu[64];
    if (x->ndim < 1 || !amp_same_shape(w_gate, w_up) || x->shape[x->ndim - 1] != w_gate->shape[1])
        return amp_fail(AMP_ERR_SHAPE, "%s: x %s, w_gate %s and w_up %s: the weights must be one "
                        "shape [intermediate, in] and in x's last dim", op,
                        amp_shape_str(x, bx, sizeof bx), amp_shape_str(w_gate, bg, sizeof bg),
                        amp_shape_str(w_up, bu, sizeof bu));
    amp_tensor *io[3] = {x, w_gate, w_up};
    AMP_TRY(amp_autocast(AMP_CAT_HALF, io, 3));
    AMP_TRY(amp_check_float(op, "x", io[0]));
    AMP_TRY(amp_check_same_dtype(op, io[0], io[1]));
    AMP_TRY(amp_check_same_dtype(op, io[0], io[2]));
    x = io[0];
    int64_t in = x->shape[x->ndim - 1], rows = x->numel / in;
    bool records = x->ctx->grad_enabled &&
                   (x->requires_grad || io[1]->requires_grad || io[2]->requires_grad);
    /* x itself, not the flat view: a view made after a write in place could not tell */
    if (recompute_x && records) AMP_TRY(amp_check_recompute_input(op, x));
    amp_tensor *x2 = x, *y2;
    if (x->ndim != 2) AMP_TRY(amp_reshape(x, 2, (const int64_t[]){rows, in}, &x2));
    AMP_TRY(linear_swiglu_run(op, x2, io[1], io[2], recompute_x, &y2));
    if (recompute_x && x2 != x) amp_tensor_step_drop(x2); /* no reader left: x's data may go */
    if (x->ndim == 2) {
        *out = y2;
        return AMP_OK;
    }
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, x->shape, (size_t)x->ndim * sizeof *shape);
    shape[x->ndim - 1] = w_gate->shape[0];
    AMP_TRY(amp_reshape(y2, x->ndim, shape, out));
    amp_tensor_step_drop(y2); /* the view reads it: it goes when the caller drops the view */
    return AMP_OK;
}

amp_status amp_linear_swiglu(amp_tensor *x, amp_tensor *w_gate, amp_tensor *w_up,
                             amp_tensor **out) {
    return linear_swiglu("amp_linear_swiglu", x, w_gate, w_up, false, out);
}

amp_status amp_linear_swiglu_ex(amp_tensor *x, amp_tensor *w_gate, amp_tensor *w_up,
                                const amp_linear_opts *o, amp_tensor **out) {
    static const char op[] = "amp_linear_swiglu_ex";
    if (!o) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'opts' is NULL", op);
    if (o->activation != AMP_LINEAR_NONE)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.activation = %d: the SwiGLU is this op's "
                        "activation, want AMP_LINEAR_NONE", op, (int)o->activation);
    return linear_swiglu(op, x, w_gate, w_up, o->recompute_input, out);
}
