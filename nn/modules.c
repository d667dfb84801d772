/* The library's modules (torch.nn's Linear, Conv2d, BatchNorm2d, ReLU, MaxPool2d, Flatten,
 * Dropout; the transformer's are modules_transformer.c): each is a model of the public API with
 * its settings in the node and a forward over the public ops. */
#include <stdio.h>

#include "core/error.h"
#include "nn/model_internal.h"
#include "nn/norm_internal.h"

/* torch.nn.BatchNorm2d defaults. */
#define AMP_BN_MOMENTUM 0.1f
#define AMP_BN_EPS 1e-5f

static amp_status amp_check_positive(const char *who, const char *what, int64_t v) {
    if (v < 1) return amp_fail(AMP_ERR_INVALID_ARG, "%s: %s = %lld, must be >= 1", who, what, (long long)v);
    return AMP_OK;
}

amp_status amp_module_one_input(const char *who, int n_inputs) {
    if (n_inputs != 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: %d inputs, the module takes one", who, n_inputs);
    return AMP_OK;
}

static amp_tensor *amp_module_bias(const amp_model *m) {
    return m->cfg.bias ? m->params[1].t : NULL;
}

static amp_status amp_linear_forward(amp_model *m, amp_tensor *const *in, int n, amp_tensor **y) {
    AMP_TRY(amp_module_one_input("Linear", n));
    return amp_linear(in[0], m->params[0].t, amp_module_bias(m), y);
}

static amp_status amp_conv2d_forward(amp_model *m, amp_tensor *const *in, int n, amp_tensor **y) {
    AMP_TRY(amp_module_one_input("Conv2d", n));
    return amp_conv2d(in[0], m->params[0].t, amp_module_bias(m), m->cfg.stride, m->cfg.padding,
                      y);
}

/* A recomputation's second run (nn/recompute.c) must leave the running statistics as the first
 * run updated them (PyTorch's checkpoint updates them twice): they are copied before and back
 * after, and the count stays. */
static amp_status amp_bn_stats_copy(amp_model *m, amp_tensor **saved, bool back) {
    for (int i = 0; i < 2; i++) {
        amp_tensor *t = m->buffers[i].t;
        if (!back) AMP_TRY(amp_tensor_step_like(t, t->dtype, &saved[i]));
        void *dst = back ? t->data : saved[i]->data, *src = back ? saved[i]->data : t->data;
        AMP_TRY(AMP_DEV(t->backend, copy, dst, src, amp_tensor_nbytes(t)));
        if (back) amp_tensor_mark_written(t);
    }
    return AMP_OK;
}

amp_status amp_module_batchnorm_run(amp_model *m, bool relu, amp_tensor *x, amp_tensor **y) {
    typedef amp_status (*bn_fn)(amp_tensor *, amp_tensor *, amp_tensor *, amp_tensor *,
                                amp_tensor *, bool, float, float, amp_tensor **);
    static const bn_fn fns[2][2] = {{amp_batchnorm2d, amp_batchnorm2d_relu},
                                    {amp_sync_batchnorm2d, amp_sync_batchnorm2d_relu}};
    bool replay = m->ctx->recompute_replay && m->training;
    amp_tensor *saved[2];
    if (replay) AMP_TRY(amp_bn_stats_copy(m, saved, false));
    amp_status s = fns[m->cfg.sync][relu](x, m->params[0].t, m->params[1].t, m->buffers[0].t,
                                          m->buffers[1].t, m->training, AMP_BN_MOMENTUM,
                                          AMP_BN_EPS, y);
    if (s == AMP_OK && replay) return amp_bn_stats_copy(m, saved, true);
    if (s == AMP_OK && m->training) m->cfg.num_batches_tracked++;
    return s;
}

static amp_status amp_batchnorm_forward(amp_model *m, amp_tensor *const *in, int n,
                                        amp_tensor **y) {
    AMP_TRY(amp_module_one_input("BatchNorm2d", n));
    return amp_module_batchnorm_run(m, false, in[0], y);
}

static amp_status amp_relu_forward(amp_model *m, amp_tensor *const *in, int n, amp_tensor **y) {
    (void)m;
    AMP_TRY(amp_module_one_input("ReLU", n));
    return amp_relu(in[0], y);
}

static amp_status amp_maxpool_forward(amp_model *m, amp_tensor *const *in, int n,
                                      amp_tensor **y) {
    AMP_TRY(amp_module_one_input("MaxPool2d", n));
    return amp_maxpool2d(in[0], m->cfg.kernel, m->cfg.stride, 0, y);
}

static amp_status amp_flatten_forward(amp_model *m, amp_tensor *const *in, int n,
                                      amp_tensor **y) {
    (void)m;
    AMP_TRY(amp_module_one_input("Flatten", n));
    return amp_flatten(in[0], y);
}

static amp_status amp_dropout_forward(amp_model *m, amp_tensor *const *in, int n,
                                      amp_tensor **y) {
    AMP_TRY(amp_module_one_input("Dropout", n));
    return amp_dropout(in[0], m->cfg.p, m->training, y);
}

amp_status amp_module_done(amp_model *m, amp_status s, amp_model **out) {
    if (s != AMP_OK) {
        amp_model_free(m);
        *out = NULL;
        return s;
    }
    *out = m;
    return AMP_OK;
}

amp_status amp_module_linear(amp_ctx *ctx, int64_t in, int64_t out, bool bias, amp_model **m) {
    AMP_CHECK_ARG(m);
    AMP_TRY(amp_check_positive(__func__, "in", in));
    AMP_TRY(amp_check_positive(__func__, "out", out));
    amp_model *l;
    AMP_TRY(amp_module_new(ctx, __func__, AMP_MODULE_LINEAR, amp_linear_forward, &l));
    l->cfg = (amp_module_cfg){.in = in, .out = out, .bias = bias};
    int64_t ws[2] = {out, in};
    amp_status s = amp_model_register_param(l, "weight", 2, ws, AMP_INIT_TORCH_FAN_IN(in), NULL);
    if (s == AMP_OK && bias)
        s = amp_model_register_param(l, "bias", 1, &out, AMP_INIT_TORCH_FAN_IN(in), NULL);
    return amp_module_done(l, s, m);
}

amp_status amp_module_conv2d(amp_ctx *ctx, int64_t c_in, int64_t c_out, int kernel, int stride,
                             int padding, bool bias, amp_model **m) {
    AMP_CHECK_ARG(m);
    AMP_TRY(amp_check_positive(__func__, "c_in", c_in));
    AMP_TRY(amp_check_positive(__func__, "c_out", c_out));
    AMP_TRY(amp_check_positive(__func__, "kernel", kernel));
    AMP_TRY(amp_check_positive(__func__, "stride", stride));
    if (padding < 0) return amp_fail(AMP_ERR_INVALID_ARG, "%s: padding %d < 0", __func__, padding);
    amp_model *l;
    AMP_TRY(amp_module_new(ctx, __func__, AMP_MODULE_CONV2D, amp_conv2d_forward, &l));
    l->cfg = (amp_module_cfg){.in = c_in, .out = c_out, .kernel = kernel, .stride = stride,
                              .padding = padding, .bias = bias};
    int64_t ws[4] = {c_out, c_in, kernel, kernel};
    amp_init init = AMP_INIT_TORCH_FAN_IN(c_in * kernel * kernel);
    amp_status s = amp_model_register_param(l, "weight", 4, ws, init, NULL);
    if (s == AMP_OK && bias) s = amp_model_register_param(l, "bias", 1, &c_out, init, NULL);
    return amp_module_done(l, s, m);
}

amp_status amp_module_batchnorm2d(amp_ctx *ctx, int64_t c, amp_model **m) {
    AMP_CHECK_ARG(m);
    AMP_TRY(amp_check_positive(__func__, "c", c));
    amp_model *l;
    AMP_TRY(amp_module_new(ctx, __func__, AMP_MODULE_BATCHNORM2D, amp_batchnorm_forward, &l));
    l->cfg = (amp_module_cfg){.in = c, .out = c, .bias = true};
    l->norm = AMP_NORM_KEEP;
    amp_status s = amp_model_register_param(l, "weight", 1, &c, AMP_INIT_ONE_VALUES, NULL);
    if (s == AMP_OK) s = amp_model_register_param(l, "bias", 1, &c, AMP_INIT_ZERO_VALUES, NULL);
    if (s == AMP_OK)
        s = amp_model_register_buffer(l, "running_mean", 1, &c, AMP_INIT_ZERO_VALUES, NULL);
    if (s == AMP_OK)
        s = amp_model_register_buffer(l, "running_var", 1, &c, AMP_INIT_ONE_VALUES, NULL);
    return amp_module_done(l, s, m);
}

amp_status amp_module_relu(amp_ctx *ctx, amp_model **m) {
    AMP_CHECK_ARG(m);
    return amp_module_new(ctx, __func__, AMP_MODULE_RELU, amp_relu_forward, m);
}

amp_status amp_module_maxpool2d(amp_ctx *ctx, int kernel, int stride, amp_model **m) {
    AMP_CHECK_ARG(m);
    AMP_TRY(amp_check_positive(__func__, "kernel", kernel));
    AMP_TRY(amp_check_positive(__func__, "stride", stride));
    AMP_TRY(amp_module_new(ctx, __func__, AMP_MODULE_MAXPOOL2D, amp_maxpool_forward, m));
    (*m)->cfg = (amp_module_cfg){.kernel = kernel, .stride = stride};
    return AMP_OK;
}

amp_status amp_module_flatten(amp_ctx *ctx, amp_model **m) {
    AMP_CHECK_ARG(m);
    return amp_module_new(ctx, __func__, AMP_MODULE_FLATTEN, amp_flatten_forward, m);
}

amp_status amp_module_dropout(amp_ctx *ctx, float p, amp_model **m) {
    AMP_CHECK_ARG(m);
    if (!(p >= 0.0f && p < 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: p = %g, want 0 <= p < 1", __func__, (double)p);
    AMP_TRY(amp_module_new(ctx, __func__, AMP_MODULE_DROPOUT, amp_dropout_forward, m));
    (*m)->cfg.p = p;
    return AMP_OK;
}
