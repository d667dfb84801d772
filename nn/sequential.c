/* The sequential builder and its forward pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "core/error.h"
#include "nn/model_internal.h"
#include "nn/norm_internal.h"

/* torch.nn.BatchNorm2d defaults. */
#define AMP_BN_MOMENTUM 0.1f
#define AMP_BN_EPS 1e-5f

amp_status amp_seq_create(amp_ctx *ctx, amp_model **out) {
    AMP_CHECK_ARG(ctx);
    AMP_CHECK_ARG(out);
    amp_model *m = calloc(1, sizeof *m);
    if (!m) return amp_fail(AMP_ERR_OOM, "amp_seq_create: out of memory");
    m->ctx = ctx;
    m->training = true;
    m->in_dtype = m->out_dtype = AMP_I32;
    amp_ctx_hold(ctx);
    *out = m;
    return AMP_OK;
}

/* Appends a layer named `name` (or its index) with no parameters yet. */
static amp_status amp_seq_push(amp_model *m, const char *who, const char *name, amp_layer_kind kind,
                               amp_layer **out) {
    if (!m) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'm' is NULL", who);
    if (m->built)
        return amp_fail(AMP_ERR_STATE, "%s: the model is already built; add layers before", who);
    if (name && (strlen(name) == 0 || strlen(name) >= AMP_NAME_MAX))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: layer name must have 1..%d characters", who,
                        AMP_NAME_MAX - 1);
    if (m->n_layers == m->cap_layers) {
        int c = m->cap_layers ? 2 * m->cap_layers : 8;
        amp_layer *l = realloc(m->layers, (size_t)c * sizeof *l);
        if (!l) return amp_fail(AMP_ERR_OOM, "%s: out of memory", who);
        m->layers = l;
        m->cap_layers = c;
    }
    amp_layer *l = &m->layers[m->n_layers];
    memset(l, 0, sizeof *l);
    l->kind = kind;
    l->weight = l->bias_param = l->running_mean = l->running_var = -1;
    if (name) snprintf(l->name, sizeof l->name, "%s", name);
    else snprintf(l->name, sizeof l->name, "%d", m->n_layers);
    m->n_layers++;
    *out = l;
    return AMP_OK;
}

static amp_status amp_check_positive(const char *who, const char *what, int64_t v) {
    if (v < 1) return amp_fail(AMP_ERR_INVALID_ARG, "%s: %s = %lld, must be >= 1", who, what, (long long)v);
    return AMP_OK;
}

amp_status amp_seq_add_linear(amp_model *m, const char *name, int64_t in, int64_t out, bool bias) {
    AMP_TRY(amp_check_positive(__func__, "in", in));
    AMP_TRY(amp_check_positive(__func__, "out", out));
    amp_layer *l = NULL;
    AMP_TRY(amp_seq_push(m, __func__, name, AMP_LAYER_LINEAR, &l));
    l->in = in;
    l->out = out;
    l->bias = bias;
    int64_t ws[2] = {out, in};
    AMP_TRY(amp_model_add_param(m, l->name, "weight", 2, ws, &l->weight));
    if (bias) AMP_TRY(amp_model_add_param(m, l->name, "bias", 1, &out, &l->bias_param));
    return AMP_OK;
}

amp_status amp_seq_add_conv2d(amp_model *m, const char *name, int64_t c_in, int64_t c_out,
                              int kernel, int stride, int padding, bool bias) {
    AMP_TRY(amp_check_positive(__func__, "c_in", c_in));
    AMP_TRY(amp_check_positive(__func__, "c_out", c_out));
    AMP_TRY(amp_check_positive(__func__, "kernel", kernel));
    AMP_TRY(amp_check_positive(__func__, "stride", stride));
    if (padding < 0) return amp_fail(AMP_ERR_INVALID_ARG, "%s: padding %d < 0", __func__, padding);
    amp_layer *l = NULL;
    AMP_TRY(amp_seq_push(m, __func__, name, AMP_LAYER_CONV2D, &l));
    l->in = c_in;
    l->out = c_out;
    l->kernel = kernel;
    l->stride = stride;
    l->padding = padding;
    l->bias = bias;
    int64_t ws[4] = {c_out, c_in, kernel, kernel};
    AMP_TRY(amp_model_add_param(m, l->name, "weight", 4, ws, &l->weight));
    if (bias) AMP_TRY(amp_model_add_param(m, l->name, "bias", 1, &c_out, &l->bias_param));
    return AMP_OK;
}

amp_status amp_seq_add_batchnorm2d(amp_model *m, const char *name, int64_t c) {
    AMP_TRY(amp_check_positive(__func__, "c", c));
    amp_layer *l = NULL;
    AMP_TRY(amp_seq_push(m, __func__, name, AMP_LAYER_BATCHNORM2D, &l));
    l->in = l->out = c;
    AMP_TRY(amp_model_add_param(m, l->name, "weight", 1, &c, &l->weight));
    AMP_TRY(amp_model_add_param(m, l->name, "bias", 1, &c, &l->bias_param));
    AMP_TRY(amp_model_add_buffer(m, l->name, "running_mean", 1, &c, &l->running_mean));
    AMP_TRY(amp_model_add_buffer(m, l->name, "running_var", 1, &c, &l->running_var));
    return AMP_OK;
}

amp_status amp_seq_add_relu(amp_model *m, const char *name) {
    amp_layer *l = NULL;
    return amp_seq_push(m, __func__, name, AMP_LAYER_RELU, &l);
}

amp_status amp_seq_add_maxpool2d(amp_model *m, const char *name, int kernel, int stride) {
    AMP_TRY(amp_check_positive(__func__, "kernel", kernel));
    AMP_TRY(amp_check_positive(__func__, "stride", stride));
    amp_layer *l = NULL;
    AMP_TRY(amp_seq_push(m, __func__, name, AMP_LAYER_MAXPOOL2D, &l));
    l->kernel = kernel;
    l->stride = stride;
    return AMP_OK;
}

amp_status amp_seq_add_flatten(amp_model *m, const char *name) {
    amp_layer *l = NULL;
    return amp_seq_push(m, __func__, name, AMP_LAYER_FLATTEN, &l);
}

amp_status amp_seq_add_dropout(amp_model *m, const char *name, float p) {
    if (!(p >= 0.0f && p < 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: p = %g, want 0 <= p < 1", __func__, (double)p);
    amp_layer *l = NULL;
    AMP_TRY(amp_seq_push(m, __func__, name, AMP_LAYER_DROPOUT, &l));
    l->p = p;
    return AMP_OK;
}

static amp_tensor *amp_param_or_null(const amp_model *m, int i) { return i < 0 ? NULL : m->params[i].t; }

/* A batch-norm layer, plain or flagged by amp_model_convert_sync_batchnorm (SyncBatchNorm), with
 * the ReLU that follows it fused in when `relu`. */
static amp_status amp_layer_batchnorm(amp_model *m, amp_layer *l, bool relu, amp_tensor *x,
                                      amp_tensor **y) {
    typedef amp_status (*bn_fn)(amp_tensor *, amp_tensor *, amp_tensor *, amp_tensor *,
                                amp_tensor *, bool, float, float, amp_tensor **);
    static const bn_fn fns[2][2] = {{amp_batchnorm2d, amp_batchnorm2d_relu},
                                    {amp_sync_batchnorm2d, amp_sync_batchnorm2d_relu}};
    amp_status s = fns[l->sync][relu](x, amp_param_or_null(m, l->weight),
                                      amp_param_or_null(m, l->bias_param),
                                      m->buffers[l->running_mean].t, m->buffers[l->running_var].t,
                                      m->training, AMP_BN_MOMENTUM, AMP_BN_EPS, y);
    if (s == AMP_OK && m->training) l->num_batches_tracked++;
    return s;
}

static amp_status amp_layer_forward(amp_model *m, amp_layer *l, amp_tensor *x, amp_tensor **y) {
    amp_tensor *w = amp_param_or_null(m, l->weight), *b = amp_param_or_null(m, l->bias_param);
    switch (l->kind) {
    case AMP_LAYER_LINEAR: return amp_linear(x, w, b, y);
    case AMP_LAYER_CONV2D: return amp_conv2d(x, w, b, l->stride, l->padding, y);
    case AMP_LAYER_BATCHNORM2D: return amp_layer_batchnorm(m, l, false, x, y);
    case AMP_LAYER_RELU: return amp_relu(x, y);
    case AMP_LAYER_MAXPOOL2D: return amp_maxpool2d(x, l->kernel, l->stride, 0, y);
    case AMP_LAYER_FLATTEN: return amp_flatten(x, y);
    case AMP_LAYER_DROPOUT: return amp_dropout(x, l->p, m->training, y);
    }
    return amp_fail(AMP_ERR_STATE, "layer %s: unknown kind %d", l->name, (int)l->kind);
}

amp_status amp_model_forward(amp_model *m, amp_tensor *x, amp_tensor **out) {
    AMP_CHECK_ARG(m);
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(out);
    if (x->ctx != m->ctx)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_model_forward: x belongs to another context");
    AMP_TRY(amp_model_build(m));
    amp_tensor *h = x;
    if (m->in_dtype != AMP_I32 && x->dtype != AMP_I32) AMP_TRY(amp_cast(x, m->in_dtype, &h));
    for (int i = 0; i < m->n_layers; i++) {
        amp_layer *l = &m->layers[i];
        amp_tensor *next;
        amp_status s;
        bool then_relu = i + 1 < m->n_layers && m->layers[i + 1].kind == AMP_LAYER_RELU;
        if (then_relu &&
            (l->kind == AMP_LAYER_LINEAR || l->kind == AMP_LAYER_BATCHNORM2D)) {
            /* Linear then ReLU: one GEMM with the bias in its epilogue and the ReLU in place on
             * its output (kernels/cuda/gemm_cublaslt.c says what it saves). Batch norm then
             * ReLU: the ReLU in the normalising pass, no tensor between them. Same gradients. */
            if (l->kind == AMP_LAYER_LINEAR)
                s = amp_linear_relu(h, amp_param_or_null(m, l->weight),
                                    amp_param_or_null(m, l->bias_param), &next);
            else
                s = amp_layer_batchnorm(m, l, true, h, &next);
            if (s != AMP_OK)
                return amp_fail_context(s, "layers '%s' and '%s'", l->name, m->layers[i + 1].name);
            i++;
        } else {
            s = amp_layer_forward(m, l, h, &next);
            if (s != AMP_OK) return amp_fail_context(s, "layer '%s'", l->name);
        }
        h = next;
    }
    if (m->out_dtype != AMP_I32) AMP_TRY(amp_cast(h, m->out_dtype, &h));
    /* A forward without gradients and with no graph pending (an evaluation batch) is a release
     * point (core/step_regions.c): what it and the batch before made goes, its output stays. */
    amp_ctx *ctx = m->ctx;
    if (!ctx->grad_enabled && ctx->n_tape == 0) AMP_TRY(amp_ctx_release_region(ctx, NULL, h));
    *out = h;
    return AMP_OK;
}
