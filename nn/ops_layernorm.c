/* amp_norm: LayerNorm and RMSNorm over the last dim, either with the residual add before it fused
 * (llm.c's fused_residual_forward: the GPT block's x + attn(ln1(x)) then ln2 in one pass). One
 * layernorm_fwd pass forward (mean and rstd saved, f32 [rows]); one layernorm_bwd pass back
 * (dx, dgamma, dbeta). gamma and beta are f32 at every opt level (norm parameters are never
 * cast: keep_batchnorm_fp32 covers every norm). Cast category as torch.amp's: layer_norm is on
 * its fp32 list, so under autocast x runs in f32 and the output is f32. A residual narrower than
 * an f32 x is widened as the kernel reads it (PyTorch's promotion of x + r; O1's half branch
 * output joins the f32 stream without an f32 copy of it), and AMP_NORM_OUT_FOR_LINEAR gives y in
 * the half type the linear reading it would cast it to: the bits of the cast, without the f32 y
 * and its f32 gradient held for the step (the linear's dX then comes back in the half type, as
 * torch.autocast's does, not in f32 through nn/gemm.c's cast shortcut). */
#include "core/error.h"
#include "nn/autocast.h"

typedef struct ln_aux {
    amp_ln_desc d;
} ln_aux;

/* An f32 x's later gradient contribution is added by the kernel (the residual stream's: the
 * next block's add passed its gradient first), not written to a temporary and added. */
static amp_status ln_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_ln_desc d = ((const ln_aux *)node->aux)->d;
    amp_tensor *x = node->in[0], *gamma = node->in[1], *beta = node->in[2];
    amp_grad_sink sx = {.t = x}, sg, sb;
    if (x->requires_grad && x->dtype == AMP_F32) {
        float beta_x;
        AMP_TRY(amp_grad_target(x, &sx.buf, &beta_x));
        d.accumulate = beta_x != 0.0f;
    } else {
        AMP_TRY(amp_grad_begin(x, &sx));
    }
    AMP_TRY(amp_grad_begin(gamma, &sg));
    AMP_TRY(amp_grad_begin(beta, &sb));
    if (sx.buf || sg.buf || sb.buf)
        AMP_TRY(AMP_BE(dy->backend, layernorm_bwd, &d, x->data, dy->data,
                       gamma ? (const float *)gamma->data : NULL,
                       node->saved[0] ? (const float *)node->saved[0]->data : NULL,
                       (const float *)node->saved[1]->data, sx.buf ? sx.buf->data : NULL,
                       sg.buf ? (float *)sg.buf->data : NULL,
                       sb.buf ? (float *)sb.buf->data : NULL));
    AMP_TRY(amp_grad_end(&sx));
    AMP_TRY(amp_grad_end(&sg));
    return amp_grad_end(&sb);
}

/* y again from the node's input (the sum when the residual add was fused: the kernel's
 * statistics are those of the rounded sum, so the unfused pass gives the same bits), its
 * parameters, and statistics written to temporaries (the same as the saved ones). */
static amp_status ln_regenerate(const amp_tape_node *node, amp_tensor *into) {
    amp_ln_desc d = ((const ln_aux *)node->aux)->d;
    d.r_dt = d.dt;
    amp_tensor *x = node->in[0], *gamma = node->in[1], *beta = node->in[2];
    int64_t rows[1] = {d.rows};
    amp_tensor *mean = NULL, *rstd;
    if (!d.rms) AMP_TRY(amp_tensor_step(x->ctx, AMP_F32, 1, rows, &mean));
    AMP_TRY(amp_tensor_step(x->ctx, AMP_F32, 1, rows, &rstd));
    AMP_TRY(AMP_BE(x->backend, layernorm_fwd, &d, x->data, NULL, NULL,
                   gamma ? (const float *)gamma->data : NULL,
                   beta ? (const float *)beta->data : NULL, into->data,
                   mean ? (float *)mean->data : NULL, (float *)rstd->data));
    amp_tensor_step_release(mean);
    amp_tensor_step_release(rstd);
    return AMP_OK;
}

/* The parameters' checks: f32 (cast if not), [cols]. */
static amp_status check_param(const char *op, const char *arg, amp_tensor **p, int64_t cols) {
    if (!*p) return AMP_OK;
    AMP_TRY(amp_check_tensor(op, arg, *p, 1));
    AMP_TRY(amp_cast_to_f32(p));
    if ((*p)->shape[0] != cols)
        return amp_fail(AMP_ERR_SHAPE, "%s: %s has %lld elements, x's last dim %lld", op, arg,
                        (long long)(*p)->shape[0], (long long)cols);
    return AMP_OK;
}

static amp_status add_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *r = node->in[1];
    AMP_TRY(amp_grad_pass(node, node->in[0]));
    if (r->dtype == dy->dtype) return amp_grad_accumulate(r, dy, 1.0f);
    return amp_grad_accumulate_cast(r, dy); /* a half residual: as a cast to f32's backward */
}

/* Under autocast x runs in f32; a residual stays in its half type when x is f32. */
static amp_status ln_inputs(const char *op, amp_tensor **x, amp_tensor **r) {
    AMP_TRY(amp_autocast(AMP_CAT_WIDEN, x, 1));
    AMP_TRY(amp_check_float(op, "x", *x));
    if (!*r) return AMP_OK;
    AMP_TRY(amp_check_float(op, "residual", *r));
    if (!((*x)->dtype == AMP_F32 && (*r)->dtype != AMP_F32)) {
        AMP_TRY(amp_autocast(AMP_CAT_WIDEN, r, 1));
        if ((*r)->dtype != (*x)->dtype)
            return amp_fail(AMP_ERR_DTYPE, "%s: x is %s and the residual %s; a residual may be "
                            "narrower than an f32 x (widened as it is read), not wider: cast x "
                            "to f32", op, amp_dtype_name((*x)->dtype), amp_dtype_name((*r)->dtype));
    }
    if ((*r)->ctx != (*x)->ctx)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: x and the residual belong to different "
                        "contexts", op);
    return AMP_OK;
}

/* y = norm(x + r) (r may be NULL), with sum = x + r when r is given; y in the autocast half
 * type when for_linear and autocast is on. */
static amp_status ln_run(const char *op, bool rms, bool for_linear, amp_tensor *x, amp_tensor *r,
                         amp_tensor *gamma, amp_tensor *beta, float eps, amp_tensor **sum,
                         amp_tensor **out) {
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    if (r) AMP_TRY(amp_check_tensor(op, "residual", r, 0));
    AMP_TRY(ln_inputs(op, &x, &r));
    if (r) {
        if (!amp_same_shape(x, r)) {
            char bx[96], br[96];
            return amp_fail(AMP_ERR_SHAPE, "%s: x %s and residual %s differ in shape", op,
                            amp_shape_str(x, bx, sizeof bx), amp_shape_str(r, br, sizeof br));
        }
    }
    int64_t cols = x->shape[x->ndim - 1];
    AMP_TRY(check_param(op, "gamma", &gamma, cols));
    AMP_TRY(check_param(op, "beta", &beta, cols));
    amp_ln_desc d = {.rows = x->numel / cols, .cols = cols, .eps = eps, .dt = x->dtype,
                     .r_dt = r ? r->dtype : x->dtype, .y_dt = x->dtype, .rms = rms};
    if (for_linear && x->ctx->autocast.enabled) d.y_dt = x->ctx->autocast.half;
    int64_t rows[1] = {d.rows};
    amp_tensor *y, *s = NULL, *mean = NULL, *rstd;
    AMP_TRY(amp_tensor_step_like(x, d.y_dt, &y));
    if (r) AMP_TRY(amp_tensor_step_like(x, x->dtype, &s));
    if (!rms) AMP_TRY(amp_tensor_step(x->ctx, AMP_F32, 1, rows, &mean));
    AMP_TRY(amp_tensor_step(x->ctx, AMP_F32, 1, rows, &rstd));
    AMP_TRY(amp_fail_as(AMP_BE(x->backend, layernorm_fwd, &d, x->data, r ? r->data : NULL,
                               s ? s->data : NULL, gamma ? (const float *)gamma->data : NULL,
                               beta ? (const float *)beta->data : NULL, y->data,
                               mean ? (float *)mean->data : NULL, (float *)rstd->data),
                        op)); /* names a bad eps */
    amp_tape_node *node;
    if (r) { /* the sum is its own node: its gradient is the LayerNorm's plus the stream's */
        amp_tensor *pair[2] = {x, r};
        AMP_TRY(amp_record(s, "add", "x residual", add_bwd, 2, pair, 0, &node));
        amp_node_unread(node, 3u, true); /* a sum's backward reads no data */
        *sum = s;
    }
    amp_tensor *in[3] = {r ? s : x, gamma, beta};
    AMP_TRY(amp_record(y, rms ? "rms_norm" : "layer_norm", r ? "sum gamma beta" : "x gamma beta",
                       ln_bwd, 3, in, sizeof(ln_aux), &node));
    if (node) {
        amp_node_unread(node, 4u, true); /* it reads x, gamma and its statistics */
        ((ln_aux *)node->aux)->d = d;
        node->regenerate = ln_regenerate;
        amp_node_save(node, 0, mean, "mean");
        amp_node_save(node, 1, rstd, "rstd");
    }
    *out = y;
    return AMP_OK;
}

amp_status amp_norm(amp_tensor *x, amp_tensor *residual, amp_tensor *gamma, amp_tensor *beta,
                    const amp_norm_opts *opts, amp_tensor **sum, amp_tensor **out) {
    static const char op[] = "amp_norm";
    amp_norm_opts o = opts ? *opts : (amp_norm_opts){.kind = AMP_NORM_LAYER, .eps = 1e-5f};
    if (o.kind != AMP_NORM_LAYER && o.kind != AMP_NORM_RMS)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.kind = %d, want AMP_NORM_LAYER or "
                        "AMP_NORM_RMS", op, (int)o.kind);
    if (o.out != AMP_NORM_OUT_NORM && o.out != AMP_NORM_OUT_FOR_LINEAR)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.out = %d, want AMP_NORM_OUT_NORM or "
                        "AMP_NORM_OUT_FOR_LINEAR", op, (int)o.out);
    if (o.kind == AMP_NORM_RMS && beta)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: beta is given to an RMSNorm, which has none "
                        "(pass NULL)", op);
    if (residual && !sum)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'sum' is NULL; a residual add returns "
                        "x + residual there", op);
    return ln_run(op, o.kind == AMP_NORM_RMS, o.out == AMP_NORM_OUT_FOR_LINEAR, x, residual, gamma,
                  beta, o.eps, sum, out);
}
