/* amp_initialize: resolves the options, creates f32 master weights before anything is cast,
 * casts the models (O2/O3), switches autocast on (O1), creates one loss scaler per loss, and
 * hooks the amp layer into the context; amp_deinitialize undoes all of it. */
#include <stdlib.h>
#include <string.h>

#include "core/cpu_info.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tensor_internal.h"
#include "nn/model_internal.h"
#include "optim/optimizer_internal.h"
#include "amp/state_internal.h"

static amp_dtype amp_half_dtype(amp_half_type h) { return h == AMP_HALF_BF16 ? AMP_BF16 : AMP_F16; }

static amp_dtype amp_cast_dtype(amp_cast_type c, amp_half_type h) {
    return c == AMP_CAST_HALF ? amp_half_dtype(h) : c == AMP_CAST_F32 ? AMP_F32 : AMP_I32;
}

static void amp_opt_state_free(amp_state *st, amp_opt_state *os) {
    amp_ledger_free(st->ctx, os->accum_block);
    free(os->accum);
    free(os->accum_has);
    *os = (amp_opt_state){0};
}

static void amp_state_free(void *p) {
    amp_state *st = p;
    if (!st) return;
    for (int i = 0; i < AMP_MAX_LOSSES; i++) amp_scaler_free(st->scalers[i]);
    for (int i = 0; i < st->n_opts; i++) amp_opt_state_free(st, &st->opts_state[i]);
    amp_ledger_free(st->ctx, st->found_inf);
    amp_ledger_free(st->ctx, st->scaler_dev);
    free(st);
}

amp_opt_state *amp_opt_state_find(amp_state *st, const amp_optimizer *opt) {
    for (int i = 0; st && i < st->n_opts; i++)
        if (st->opts_state[i].opt == opt) return &st->opts_state[i];
    return NULL;
}

amp_status amp_state_of(const char *who, const amp_optimizer *opt, amp_state **st_out,
                        amp_opt_state **os_out) {
    AMP_TRY(amp_optimizer_check_usable(who, opt));
    amp_state *st = opt->ctx ? opt->ctx->amp : NULL;
    amp_opt_state *os = amp_opt_state_find(st, opt);
    if (!os)
        return amp_fail(AMP_ERR_STATE, "%s: amp_initialize was not called for this optimizer (for "
                        "plain f32 training with the same loop, amp_initialize(model, opt, AMP_O0): "
                        "torch's GradScaler(enabled=False))", who);
    *st_out = st;
    if (os_out) *os_out = os;
    return AMP_OK;
}

void amp_opt_state_reset(amp_state *st, amp_opt_state *os) {
    os->unscaled = os->skip = os->reached = os->fresh = false;
    if (os->accum_has) memset(os->accum_has, 0, (size_t)os->opt->n_params * sizeof *os->accum_has);
    os->in = AMP_OPTIM_INPUTS_NONE;
    if (!st->at_each_backward) st->backward_seen[0] = false; /* one loss, one optimizer */
}

/* ---- the hooks through which optim/ and nn/ reach this layer (core/ctx.h) ---- */

static void amp_hook_zero_grad(void *amp, amp_optimizer *opt) {
    amp_state *st = amp;
    amp_opt_state *os = amp_opt_state_find(st, opt);
    if (!os) return;
    amp_opt_state_reset(st, os);
    /* A discarded backward's overflow must not skip the next clean step. */
    if (!st->at_each_backward)
        (void)st->ctx->backend->memset_zero(st->ctx->backend->dev, st->found_inf, sizeof(float));
}

static void amp_hook_forget(void *amp, const void *object) {
    amp_state *st = amp;
    for (int i = 0; i < st->n_models; i++)
        if (st->models[i] == object) {
            st->models[i] = st->models[--st->n_models];
            return;
        }
    amp_opt_state *os = amp_opt_state_find(st, object);
    if (!os) return;
    amp_opt_state_free(st, os);
    *os = st->opts_state[--st->n_opts];
    st->opts_state[st->n_opts] = (amp_opt_state){0};
}

static const amp_layer_hooks amp_hooks = {
    .optimizer_step = amp_step_hook,
    .optimizer_zero_grad = amp_hook_zero_grad,
    .forget = amp_hook_forget,
    .optimizer_settle = amp_optimizer_settle_hook,
    .free = amp_state_free,
};

/* ---- creation ---- */

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
    AMP_TRY(amp_ledger_alloc(st->ctx, AMP_MEM_OTHER, nbytes, (void **)&st->found_inf));
    return be->memset_zero(be->dev, st->found_inf, nbytes);
}

/* At each backward: the f32 sums of one optimizer's parameters (the master gradients when there
 * are masters, else one block of 64-byte aligned views, gradients in the memory ledger; sizes and
 * offsets in size_t). */
static amp_status amp_opt_state_create_accum(amp_state *st, amp_opt_state *os) {
    amp_optimizer *opt = os->opt;
    size_t n = (size_t)opt->n_params;
    os->accum = calloc(n, sizeof *os->accum);
    os->accum_has = calloc(n, sizeof *os->accum_has);
    if (!os->accum || !os->accum_has) return amp_fail(AMP_ERR_OOM, "amp_initialize: out of memory");
    if (st->masters) {
        for (size_t i = 0; i < n; i++) os->accum[i] = amp_optimizer_master_grad(opt, (int)i);
        return AMP_OK;
    }
    int64_t *numel = malloc(n * sizeof *numel);
    size_t *offsets = malloc(n * sizeof *offsets);
    amp_status s = numel && offsets ? AMP_OK : amp_fail(AMP_ERR_OOM, "amp_initialize: out of memory");
    for (size_t i = 0; s == AMP_OK && i < n; i++) numel[i] = opt->params[i]->numel;
    size_t total = s == AMP_OK ? amp_block_layout(numel, (int)n, sizeof(float), 64, offsets) : 0;
    if (s == AMP_OK)
        s = amp_ledger_alloc(st->ctx, AMP_MEM_GRADS, total ? total : 64, &os->accum_block);
    for (size_t i = 0; s == AMP_OK && i < n; i++)
        os->accum[i] = (float *)((char *)os->accum_block + offsets[i]);
    free(numel);
    free(offsets);
    return s;
}

static amp_status amp_check_model_fp32(const amp_model *m) {
    for (int i = 0; i < amp_model_n_params(m); i++)
        if (amp_model_param(m, i)->dtype != AMP_F32)
            return amp_fail(AMP_ERR_DTYPE, "amp_initialize: parameter '%s' is %s; amp_initialize "
                            "takes an f32 model (as Apex checks)", amp_model_param_name(m, i),
                            amp_dtype_name(amp_model_param(m, i)->dtype));
    return AMP_OK;
}

/* The lists Apex's amp.initialize takes: every model on one context, every optimizer over one of
 * the models, no duplicates. */
static amp_status amp_check_lists(amp_model *const *models, int n_models,
                                  amp_optimizer *const *opts, int n_opts) {
    const char *who = "amp_initialize";
    AMP_CHECK_ARG(models);
    AMP_CHECK_ARG(opts);
    if (n_models < 1 || n_models > AMP_MAX_MODELS)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: %d models, want 1..%d", who, n_models,
                        AMP_MAX_MODELS);
    if (n_opts < 1 || n_opts > AMP_MAX_OPTIMIZERS)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: %d optimizers, want 1..%d", who, n_opts,
                        AMP_MAX_OPTIMIZERS);
    for (int i = 0; i < n_models; i++) {
        if (!models[i]) return amp_fail(AMP_ERR_INVALID_ARG, "%s: model #%d is NULL", who, i);
        AMP_TRY(amp_model_check_root(who, models[i]));
        if (amp_model_ctx(models[i]) != amp_model_ctx(models[0]))
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: model #%d is on another context than model "
                            "#0; every model of one amp_initialize shares one context", who, i);
        for (int j = 0; j < i; j++)
            if (models[j] == models[i])
                return amp_fail(AMP_ERR_INVALID_ARG, "%s: model #%d is also #%d", who, i, j);
    }
    for (int i = 0; i < n_opts; i++) {
        if (!opts[i]) return amp_fail(AMP_ERR_INVALID_ARG, "%s: optimizer #%d is NULL", who, i);
        AMP_TRY(amp_optimizer_check_usable(who, opts[i]));
        bool found = false;
        for (int k = 0; k < n_models; k++) found |= opts[i]->model == models[k];
        if (!found)
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: optimizer #%d was not created for any of "
                            "the models given", who, i);
        for (int j = 0; j < i; j++)
            if (opts[j] == opts[i])
                return amp_fail(AMP_ERR_INVALID_ARG, "%s: optimizer #%d is also #%d", who, i, j);
    }
    return AMP_OK;
}

/* Everything that may fail before any model is touched. */
static amp_status amp_state_build(amp_state *st, amp_optimizer *const *opts, int n_opts,
                                  bool half_model) {
    st->masters = half_model && st->opts.master_weights == AMP_OPT_TRUE;
    for (int i = 0; i < n_opts; i++) {
        st->opts_state[i].opt = opts[i];
        st->opts_state[i].in = AMP_OPTIM_INPUTS_NONE;
        st->n_opts = i + 1;
        /* Masters first, from the f32 weights (Apex copies them from the already-cast model,
         * which rounds them to half once for nothing). */
        if (st->masters) AMP_TRY(amp_optimizer_make_masters(opts[i]));
    }
    AMP_TRY(amp_state_create_scalers(st));
    st->at_each_backward = st->opts.num_losses > 1 || n_opts > 1;
    st->device_scaler = !st->at_each_backward;
    if (st->device_scaler) AMP_TRY(amp_scalers_dev_create(st));
    for (int i = 0; st->at_each_backward && i < n_opts; i++)
        AMP_TRY(amp_opt_state_create_accum(st, &st->opts_state[i]));
    return AMP_OK;
}

/* Every model's new blocks are made before any model is rebound: a failure in the last one
 * leaves all of them as they were. */
static amp_status amp_models_cast(amp_state *st, amp_dtype to) {
    bool keep_bn = st->opts.keep_batchnorm_fp32 == AMP_OPT_TRUE;
    amp_model_cast_plan plans[AMP_MAX_MODELS];
    for (int k = 0; k < st->n_models; k++) {
        amp_status s = amp_model_cast_prepare(st->models[k], to, keep_bn, &plans[k]);
        if (s == AMP_OK) continue;
        for (int j = 0; j < k; j++) amp_model_cast_abort(st->models[j], &plans[j]);
        return s;
    }
    for (int k = 0; k < st->n_models; k++) amp_model_cast_commit(st->models[k], &plans[k]);
    return AMP_OK;
}

/* One line when the CPU has no arithmetic in the half type, so that nobody takes the speed of
 * bf16 storage for that of bf16 compute (torch's CPU autocast says nothing and runs bf16 GEMMs
 * at 0.9 GFLOP/s on an AVX2-only EPYC): bf16 computes natively with AVX512-BF16 or AMX (the
 * level's, capped by AMP_CPU_ISA), f16 never does on the CPU backend (DESIGN.md: storage). */
static void amp_log_half_arithmetic(const amp_ctx *ctx, amp_dtype half, const amp_options *o) {
    if (o->quiet || ctx->backend->device != AMP_DEVICE_CPU) return;
    if (half == AMP_BF16 && amp_cpu_level_get() >= AMP_CPU_AVX512_CORE_BF16) return;
    amp_log_msg(AMP_LOG_INFO, "%s has no arithmetic on this CPU (%s, [%s]): its GEMMs and "
                "convolutions widen to f32 tiles and round back, so it saves memory, not time%s",
                half == AMP_BF16 ? "bf16" : "f16", amp_cpu_model(), amp_cpu_isa(),
                half == AMP_BF16 ? " (bf16 computes with AVX512-BF16 or AMX)" : "");
}

amp_status amp_initialize_multi(amp_model *const *models, int n_models,
                                 amp_optimizer *const *opts, int n_opts,
                                 const amp_options *options) {
    AMP_CHECK_ARG(options);
    AMP_TRY(amp_check_lists(models, n_models, opts, n_opts));
    amp_ctx *ctx = amp_model_ctx(models[0]);
    if (ctx->amp)
        return amp_fail(AMP_ERR_STATE, "amp_initialize: called a second time for this context; "
                        "call it once, after building the models and the optimizers (or "
                        "amp_deinitialize first)");
    /* Apex: amp.initialize before DistributedDataParallel. A DDP made first has cut its buckets
     * over the f32 gradients that an O2/O3 cast would move, and saw no master weights. */
    if (ctx->bw_observer)
        return amp_fail(AMP_ERR_STATE, "amp_initialize: this context already has a DDP; call "
                        "amp_initialize first, then amp_ddp_create (Apex's order)");
    amp_options o;
    AMP_TRY(amp_options_resolve(options, &o));
    for (int i = 0; i < n_models; i++) {
        AMP_TRY(amp_model_build(models[i]));
        AMP_TRY(amp_check_model_fp32(models[i]));
    }
    amp_state *st = calloc(1, sizeof *st);
    if (!st) return amp_fail(AMP_ERR_OOM, "amp_initialize: out of memory");
    *st = (amp_state){.opts = o, .ctx = ctx, .n_models = n_models};
    for (int i = 0; i < n_models; i++) st->models[i] = models[i];
    amp_dtype cast_to = amp_cast_dtype(o.cast_model_type, o.half_type);
    bool half_model = cast_to == AMP_F16 || cast_to == AMP_BF16;
    amp_status s = amp_state_build(st, opts, n_opts, half_model);
    if (s == AMP_OK && half_model) s = amp_models_cast(st, cast_to);
    if (s != AMP_OK) { /* every model and optimizer as it was */
        for (int i = 0; st->masters && i < st->n_opts; i++)
            amp_optimizer_drop_masters(st->opts_state[i].opt);
        amp_state_free(st);
        return s;
    }
    /* Apex: a cast model takes its inputs in its own type; cast_model_outputs applies at any
     * level (its default is f32 for a cast model, none otherwise). */
    for (int i = 0; i < n_models; i++)
        amp_model_set_io_cast(models[i], half_model ? cast_to : AMP_I32,
                              amp_cast_dtype(o.cast_model_outputs, o.half_type));
    ctx->autocast.enabled = o.autocast == AMP_OPT_TRUE;
    ctx->autocast.half = amp_half_dtype(o.half_type);
    ctx->autocast.n_cache = 0;
    ctx->amp = st;
    ctx->amp_hooks = &amp_hooks;
    amp_options_log(&o);
    if (half_model || ctx->autocast.enabled) amp_log_half_arithmetic(ctx, ctx->autocast.half, &o);
    return AMP_OK;
}

amp_status amp_initialize_ex(amp_model *m, amp_optimizer *opt, const amp_options *opts) {
    AMP_CHECK_ARG(m);
    AMP_CHECK_ARG(opt);
    AMP_CHECK_ARG(opts);
    if (opt->model != m)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_initialize: the optimizer was not created for "
                        "this model");
    return amp_initialize_multi(&m, 1, &opt, 1, opts);
}

amp_status amp_initialize(amp_model *m, amp_optimizer *opt, amp_opt_level level) {
    amp_options o = {.opt_level = level};
    return amp_initialize_ex(m, opt, &o);
}

/* ---- teardown ---- */

/* The models back to f32, all or nothing (every new block is made before any model moves); then
 * each model with masters gets their exact values, and the masters go. */
static amp_status amp_models_uncast(amp_state *st) {
    amp_model_cast_plan plans[AMP_MAX_MODELS];
    for (int k = 0; k < st->n_models; k++) {
        amp_status s = amp_model_cast_prepare(st->models[k], AMP_F32, false, &plans[k]);
        if (s == AMP_OK) continue;
        for (int j = 0; j < k; j++) amp_model_cast_abort(st->models[j], &plans[j]);
        return amp_fail_context(s, "amp_deinitialize");
    }
    for (int k = 0; k < st->n_models; k++) amp_model_cast_commit(st->models[k], &plans[k]);
    for (int i = 0; i < st->n_opts; i++) {
        amp_optimizer *opt = st->opts_state[i].opt;
        if (!amp_optimizer_has_masters(opt)) continue;
        amp_status s = amp_optimizer_masters_to_params(opt); /* f32 parameters: plain copies */
        if (s != AMP_OK) return amp_fail_context(s, "amp_deinitialize");
        amp_optimizer_drop_masters(opt);
    }
    return AMP_OK;
}

amp_status amp_deinitialize(amp_ctx *ctx) {
    AMP_CHECK_ARG(ctx);
    amp_state *st = ctx->amp;
    if (!st) return amp_fail(AMP_ERR_STATE, "amp_deinitialize: amp_initialize was not called "
                             "for this context");
    /* The device mode left the step counts and the scaler's counters on the device (read when
     * asked): settle them first, while the hooks that read them are still here, or the steps
     * taken since the last read vanish from amp_optimizer_step_count (and their overflow lines
     * from the log). Nothing has moved yet if a read fails. */
    for (int i = 0; st->device_scaler && i < st->opts.num_losses; i++) {
        amp_status s = amp_scaler_dev_pull(st, i);
        if (s != AMP_OK) return amp_fail_context(s, "amp_deinitialize");
    }
    if (amp_cast_dtype(st->opts.cast_model_type, st->opts.half_type) != AMP_I32)
        AMP_TRY(amp_models_uncast(st));
    for (int i = 0; i < st->n_models; i++) amp_model_set_io_cast(st->models[i], AMP_I32, AMP_I32);
    ctx->autocast.enabled = false;
    ctx->autocast.n_cache = 0;
    amp_cast_shadows_release(ctx);
    ctx->amp = NULL;
    ctx->amp_hooks = NULL;
    amp_state_free(st);
    return AMP_OK;
}

amp_status amp_get_options(const amp_optimizer *opt, amp_options *out) {
    AMP_CHECK_ARG(out);
    amp_state *st;
    AMP_TRY(amp_state_of(__func__, opt, &st, NULL));
    *out = st->opts;
    return AMP_OK;
}
