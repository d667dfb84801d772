/* amp_initialize: resolves the options, creates f32 master weights before anything is cast,
 * casts the model (O2/O3), switches autocast on (O1), creates one loss scaler per loss. */
#include <stdlib.h>
#include <string.h>

#include "amp/amp_state.h"
#include "core/error.h"
#include "core/log.h"
#include "nn/model_internal.h"
#include "optim/optimizer_internal.h"

static amp_dtype amp_half_dtype(amp_half_type h) { return h == AMP_HALF_BF16 ? AMP_BF16 : AMP_F16; }

static amp_dtype amp_cast_dtype(amp_cast_type c, amp_half_type h) {
    return c == AMP_CAST_HALF ? amp_half_dtype(h) : c == AMP_CAST_F32 ? AMP_F32 : AMP_I32;
}

void amp_state_free(void *p) {
    amp_state *st = p;
    if (!st) return;
    for (int i = 0; i < AMP_MAX_LOSSES; i++) amp_scaler_free(st->scalers[i]);
    const amp_backend *be = st->ctx->backend;
    if (st->found_inf) be->free(st->found_inf);
    if (st->accum_block) be->free(st->accum_block);
    free(st->accum);
    free(st->accum_has);
    free(st);
}

amp_status amp_state_of(const char *who, const amp_optimizer *opt, amp_state **out) {
    if (!opt) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'opt' is NULL", who);
    amp_state *st = opt->ctx ? opt->ctx->amp : NULL;
    if (!st || st->opt != opt)
        return amp_fail(AMP_ERR_STATE, "%s: amp_initialize was not called for this optimizer", who);
    *out = st;
    return AMP_OK;
}

static amp_status amp_state_create_scalers(amp_state *st) {
    const amp_options *o = &st->opts;
    for (int i = 0; i < o->num_losses; i++) {
        amp_scaler_config c = {
            .dynamic = o->loss_scale == AMP_LOSS_SCALE_DYNAMIC,
            .scale = o->loss_scale == AMP_LOSS_SCALE_DYNAMIC ? o->init_scale : o->loss_scale,
            .growth_factor = o->growth_factor,
            .backoff_factor = o->backoff_factor,
            .growth_interval = o->growth_interval,
            .min_scale = o->min_loss_scale,
            .max_scale = o->max_loss_scale,
            .hysteresis = o->hysteresis,
            /* Apex checks for overflow only with a dynamic scale; torch's GradScaler always. An
             * explicit static scale with f16 checks too (a skipped step beats a NaN model). */
            .check_overflow = o->loss_scale == AMP_LOSS_SCALE_DYNAMIC ||
                              (o->loss_scale != 1.0f && o->half_type != AMP_HALF_BF16),
            .quiet = o->quiet,
            .loss_id = i,
        };
        AMP_TRY(amp_scaler_create(&c, &st->scalers[i]));
    }
    const amp_backend *be = st->ctx->backend;
    size_t nbytes = sizeof(float) * (size_t)o->num_losses;
    AMP_TRY(be->alloc(nbytes, (void **)&st->found_inf));
    return be->memset_zero(st->found_inf, nbytes);
}

/* num_losses > 1 without masters: an f32 block that sums each loss's unscaled gradients. */
static amp_status amp_state_create_accum(amp_state *st) {
    amp_optimizer *opt = st->opt;
    int n = opt->n_params;
    st->accum = calloc((size_t)n, sizeof *st->accum);
    st->accum_has = calloc((size_t)n, sizeof *st->accum_has);
    if (!st->accum || !st->accum_has) return amp_fail(AMP_ERR_OOM, "amp_initialize: out of memory");
    if (st->masters) {
        for (int i = 0; i < n; i++) st->accum[i] = amp_optimizer_master_grad(opt, i);
        return AMP_OK;
    }
    size_t total = 0;
    for (int i = 0; i < n; i++) total += ((size_t)opt->params[i]->numel * 4 + 63) / 64 * 64;
    AMP_TRY(st->ctx->backend->alloc(total ? total : 64, &st->accum_block));
    for (int i = 0, off = 0; i < n; i++) {
        st->accum[i] = (float *)((char *)st->accum_block + off);
        off += (int)(((size_t)opt->params[i]->numel * 4 + 63) / 64 * 64);
    }
    return AMP_OK;
}

static amp_status amp_check_model_fp32(const amp_model *m) {
    for (int i = 0; i < amp_model_n_params(m); i++)
        if (amp_model_param(m, i)->dtype != AMP_F32)
            return amp_fail(AMP_ERR_DTYPE, "amp_initialize: parameter '%s' is %s; amp_initialize "
                            "takes an f32 model (as Apex checks)", amp_model_param_name(m, i),
                            amp_dtype_name(amp_model_param(m, i)->dtype));
    return AMP_OK;
}

amp_status amp_initialize_ex(amp_model *m, amp_optimizer *opt, const amp_options *opts) {
    AMP_CHECK_ARG(m);
    AMP_CHECK_ARG(opt);
    AMP_CHECK_ARG(opts);
    if (opt->model != m)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_initialize: the optimizer was not created for "
                        "this model");
    amp_ctx *ctx = amp_model_ctx(m);
    if (ctx->amp)
        return amp_fail(AMP_ERR_STATE, "amp_initialize: called a second time for this model's "
                        "context; call it once, after building the model and the optimizer");
    amp_options o;
    AMP_TRY(amp_options_resolve(opts, &o));
    AMP_TRY(amp_model_build(m));
    AMP_TRY(amp_check_model_fp32(m));
    amp_state *st = calloc(1, sizeof *st);
    if (!st) return amp_fail(AMP_ERR_OOM, "amp_initialize: out of memory");
    *st = (amp_state){.opts = o, .model = m, .opt = opt, .ctx = ctx};
    amp_dtype cast_to = amp_cast_dtype(o.cast_model_type, o.half_type);
    bool half_model = cast_to == AMP_F16 || cast_to == AMP_BF16;
    amp_status s = AMP_OK;
    /* Masters first, from the f32 weights (Apex copies them from the already-cast model, which
     * rounds them to half once for nothing). O3's "no master weights" still needs f32 scratch. */
    if (half_model) {
        s = amp_optimizer_make_masters(opt, o.master_weights == AMP_OPT_TRUE);
        st->masters = s == AMP_OK;
    }
    if (s == AMP_OK) s = amp_state_create_scalers(st);
    if (s == AMP_OK && o.num_losses > 1) s = amp_state_create_accum(st);
    if (s == AMP_OK && half_model)
        s = amp_model_cast(m, cast_to, o.keep_batchnorm_fp32 == AMP_OPT_TRUE);
    if (s != AMP_OK) {
        if (st->masters && opt->params[0]->dtype == AMP_F32) amp_optimizer_drop_masters(opt);
        amp_state_free(st);
        return s;
    }
    /* Apex: a cast model takes its inputs in its own type; cast_model_outputs applies at any
     * level (its default is f32 for a cast model, none otherwise). */
    amp_model_set_io_cast(m, half_model ? cast_to : AMP_I32,
                          amp_cast_dtype(o.cast_model_outputs, o.half_type));
    ctx->autocast.enabled = o.autocast == AMP_OPT_TRUE;
    ctx->autocast.half = amp_half_dtype(o.half_type);
    ctx->amp = st;
    ctx->amp_free = amp_state_free;
    amp_options_log(&o);
    return AMP_OK;
}

amp_status amp_initialize(amp_model *m, amp_optimizer *opt, amp_opt_level level) {
    amp_options o = {.opt_level = level};
    return amp_initialize_ex(m, opt, &o);
}

amp_status amp_get_options(const amp_optimizer *opt, amp_options *out) {
    AMP_CHECK_ARG(out);
    amp_state *st;
    AMP_TRY(amp_state_of(__func__, opt, &st));
    *out = st->opts;
    return AMP_OK;
}
