/* The library's transformer modules (torch.nn's LayerNorm, RMSNorm, Embedding and GELU), models
 * of the public API as modules.c's. LayerNorm's and RMSNorm's parameters stay f32 at every opt
 * level, O3 included (AMP_NORM_F32), where Apex's O2 casts a LayerNorm to half. */
#include <math.h>

#include "core/error.h"
#include "nn/model_internal.h"

static amp_status check_norm(const char *who, int64_t dim, float eps) {
    if (dim < 1) return amp_fail(AMP_ERR_INVALID_ARG, "%s: dim = %lld, must be >= 1", who, (long long)dim);
    if (!(eps >= 0.0f) || !isfinite(eps))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: eps = %g, want a finite value >= 0", who,
                        (double)eps);
    return AMP_OK;
}

static amp_status layer_norm_forward(amp_model *m, amp_tensor *const *in, int n, amp_tensor **y) {
    AMP_TRY(amp_module_one_input("LayerNorm", n));
    amp_norm_opts o = {.kind = AMP_NORM_LAYER, .eps = m->cfg.eps};
    return amp_norm(in[0], NULL, m->params[0].t, m->cfg.bias ? m->params[1].t : NULL, &o, NULL, y);
}

static amp_status rms_norm_forward(amp_model *m, amp_tensor *const *in, int n, amp_tensor **y) {
    AMP_TRY(amp_module_one_input("RMSNorm", n));
    amp_norm_opts o = {.kind = AMP_NORM_RMS, .eps = m->cfg.eps};
    return amp_norm(in[0], NULL, m->params[0].t, NULL, &o, NULL, y);
}

static amp_status embedding_forward(amp_model *m, amp_tensor *const *in, int n, amp_tensor **y) {
    AMP_TRY(amp_module_one_input("Embedding", n));
    return amp_embedding(in[0], m->params[0].t, y);
}

static amp_status gelu_forward(amp_model *m, amp_tensor *const *in, int n, amp_tensor **y) {
    AMP_TRY(amp_module_one_input("GELU", n));
    return amp_gelu(in[0], m->cfg.tanh_approx, y);
}

amp_status amp_module_layer_norm(amp_ctx *ctx, int64_t dim, float eps, bool bias,
                                 amp_model **m) {
    AMP_CHECK_ARG(m);
    AMP_TRY(check_norm(__func__, dim, eps));
    amp_model *l;
    AMP_TRY(amp_module_new(ctx, __func__, AMP_MODULE_LAYER_NORM, layer_norm_forward, &l));
    l->cfg = (amp_module_cfg){.in = dim, .out = dim, .eps = eps, .bias = bias};
    l->norm = AMP_NORM_F32;
    amp_status s = amp_model_register_param(l, "weight", 1, &dim, AMP_INIT_ONE_VALUES, NULL);
    if (s == AMP_OK && bias)
        s = amp_model_register_param(l, "bias", 1, &dim, AMP_INIT_ZERO_VALUES, NULL);
    return amp_module_done(l, s, m);
}

amp_status amp_module_rms_norm(amp_ctx *ctx, int64_t dim, float eps, amp_model **m) {
    AMP_CHECK_ARG(m);
    AMP_TRY(check_norm(__func__, dim, eps));
    amp_model *l;
    AMP_TRY(amp_module_new(ctx, __func__, AMP_MODULE_RMS_NORM, rms_norm_forward, &l));
    l->cfg = (amp_module_cfg){.in = dim, .out = dim, .eps = eps};
    l->norm = AMP_NORM_F32;
    amp_status s = amp_model_register_param(l, "weight", 1, &dim, AMP_INIT_ONE_VALUES, NULL);
    return amp_module_done(l, s, m);
}

amp_status amp_module_embedding(amp_ctx *ctx, int64_t vocab, int64_t dim, amp_model **m) {
    AMP_CHECK_ARG(m);
    if (vocab < 1 || vocab > INT32_MAX || dim < 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: vocab = %lld and dim = %lld, want 1 <= vocab "
                        "<= 2^31 - 1 and dim >= 1", __func__, (long long)vocab, (long long)dim);
    amp_model *l;
    AMP_TRY(amp_module_new(ctx, __func__, AMP_MODULE_EMBEDDING, embedding_forward, &l));
    l->cfg = (amp_module_cfg){.in = vocab, .out = dim};
    int64_t shape[2] = {vocab, dim};
    amp_status s = amp_model_register_param(l, "weight", 2, shape, AMP_INIT_NORMAL_OF(0.0f, 1.0f),
                                            NULL);
    return amp_module_done(l, s, m);
}

amp_status amp_module_gelu(amp_ctx *ctx, bool tanh_approx, amp_model **m) {
    AMP_CHECK_ARG(m);
    AMP_TRY(amp_module_new(ctx, __func__, AMP_MODULE_GELU, gelu_forward, m));
    (*m)->cfg.tanh_approx = tanh_approx;
    return AMP_OK;
}
