/* Opt levels as data (Apex's O0-O3 presets, property for property), the resolution of overrides,
 * the consistency checks Apex makes in its Properties setters, and the options log block. */
#include "amp/state_internal.h"

#include <math.h>
#include <stdio.h>

#include "core/error.h"
#include "core/log.h"

/* Apex apex/amp/frontend.py O0..O3. loss_scale 1.0 is static; master_weights/keep_batchnorm_fp32
 * "None" where Apex has None. */
static const amp_options amp_levels[4] = {
    [AMP_O0] = {.opt_level = AMP_O0, .cast_model_type = AMP_CAST_F32, .autocast = AMP_OPT_FALSE,
                .keep_batchnorm_fp32 = AMP_OPT_NONE, .master_weights = AMP_OPT_FALSE,
                .loss_scale = 1.0f},
    [AMP_O1] = {.opt_level = AMP_O1, .cast_model_type = AMP_CAST_NONE, .autocast = AMP_OPT_TRUE,
                .keep_batchnorm_fp32 = AMP_OPT_NONE, .master_weights = AMP_OPT_NONE,
                .loss_scale = AMP_LOSS_SCALE_DYNAMIC},
    [AMP_O2] = {.opt_level = AMP_O2, .cast_model_type = AMP_CAST_HALF, .autocast = AMP_OPT_FALSE,
                .keep_batchnorm_fp32 = AMP_OPT_TRUE, .master_weights = AMP_OPT_TRUE,
                .loss_scale = AMP_LOSS_SCALE_DYNAMIC},
    [AMP_O3] = {.opt_level = AMP_O3, .cast_model_type = AMP_CAST_HALF, .autocast = AMP_OPT_FALSE,
                .keep_batchnorm_fp32 = AMP_OPT_FALSE, .master_weights = AMP_OPT_FALSE,
                .loss_scale = 1.0f},
};

static const char *amp_level_briefs[4] = {
    "O0:  Pure FP32 training.",
    "O1:  Insert automatic casts around ops: GEMM and convolution in half, the rest in FP32.",
    "O2:  Half training with FP32 batchnorm and FP32 master weights.",
    "O3:  Pure half training.",
};

/* Scaler defaults: torch.amp.GradScaler's init/growth/backoff/interval, Apex's max 2^24. */
#define AMP_DEFAULT_INIT_SCALE 65536.0f
#define AMP_DEFAULT_GROWTH 2.0f
#define AMP_DEFAULT_BACKOFF 0.5f
#define AMP_DEFAULT_INTERVAL 2000
#define AMP_DEFAULT_MAX_SCALE 16777216.0f

/* The defaults that do not depend on the half type. */
static void amp_fill_scaler_defaults(amp_options *o) {
    if (o->cast_model_outputs == AMP_CAST_DEFAULT)
        o->cast_model_outputs = o->cast_model_type == AMP_CAST_HALF ? AMP_CAST_F32 : AMP_CAST_NONE;
    if (o->max_loss_scale == 0.0f) o->max_loss_scale = AMP_DEFAULT_MAX_SCALE;
    if (o->num_losses == 0) o->num_losses = 1;
    if (o->init_scale == 0.0f) o->init_scale = AMP_DEFAULT_INIT_SCALE;
    if (o->growth_factor == 0.0f) o->growth_factor = AMP_DEFAULT_GROWTH;
    if (o->backoff_factor == 0.0f) o->backoff_factor = AMP_DEFAULT_BACKOFF;
    if (o->growth_interval == 0) o->growth_interval = AMP_DEFAULT_INTERVAL;
    if (o->hysteresis == 0) o->hysteresis = 1;
    if (o->skip_nonfinite == AMP_OPT_DEFAULT || o->skip_nonfinite == AMP_OPT_NONE)
        o->skip_nonfinite = o->opt_level == AMP_O0 ? AMP_OPT_FALSE : AMP_OPT_TRUE;
}

/* The preset with its defaults filled, but for those that depend on the half type (half_type
 * itself and loss_scale, dynamic for f16 and 1 for bf16), which stay 0 for amp_options_resolve:
 * a caller who sets half_type = bf16 on it gets bf16's loss scale, as with a zeroed struct. */
amp_options amp_options_for_level(amp_opt_level level) {
    amp_options o = amp_levels[level >= AMP_O0 && level <= AMP_O3 ? level : AMP_O1];
    o.loss_scale = 0.0f;
    amp_fill_scaler_defaults(&o);
    return o;
}

/* Whether the options use a half type at all (O0 does not). */
static bool amp_options_use_half(const amp_options *o) {
    return o->cast_model_type == AMP_CAST_HALF || o->autocast == AMP_OPT_TRUE ||
           o->cast_model_outputs == AMP_CAST_HALF;
}

/* The checks of Apex's Properties.__setattr__ (which raise unless hard_override), plus ours for
 * values Apex cannot express (negative scales, bf16 with O-level-independent ranges). */
static amp_status amp_options_check(const amp_options *user, const amp_options *o) {
    const char *who = "amp_initialize";
    if (user->cast_model_type != AMP_CAST_DEFAULT && o->opt_level == AMP_O1 &&
        o->cast_model_type == AMP_CAST_HALF)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: O1 inserts casts around ops rather than casting "
                        "the model weights, so with O1 the weights should stay FP32; to cast the "
                        "model use O2 or O3 (cast_model_type was half)", who);
    if (user->autocast == AMP_OPT_TRUE && o->opt_level != AMP_O1)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: autocast (Apex's patch_torch_functions) should "
                        "only be set by selecting O1", who);
    if (o->opt_level == AMP_O1 && user->keep_batchnorm_fp32 != AMP_OPT_DEFAULT &&
        user->keep_batchnorm_fp32 != AMP_OPT_NONE)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: with O1, batch norm already runs its statistics "
                        "in FP32, so keep_batchnorm_fp32 should be left unset (None)", who);
    if (o->opt_level == AMP_O1 && user->master_weights != AMP_OPT_DEFAULT &&
        user->master_weights != AMP_OPT_NONE)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: master_weights make no sense with O1, whose model "
                        "weights stay FP32", who);
    if (o->master_weights == AMP_OPT_TRUE && o->cast_model_type != AMP_CAST_HALF)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: master_weights need a half model "
                        "(cast_model_type half, as in O2)", who);
    if (!(o->loss_scale == AMP_LOSS_SCALE_DYNAMIC || (o->loss_scale > 0 && isfinite(o->loss_scale))))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: loss_scale %g: want a finite number > 0 or "
                        "AMP_LOSS_SCALE_DYNAMIC", who, (double)o->loss_scale);
    if (o->min_loss_scale < 0 || !(o->max_loss_scale > 0) ||
        (o->min_loss_scale > 0 && o->min_loss_scale > o->max_loss_scale))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: min_loss_scale %g and max_loss_scale %g: want "
                        "0 <= min <= max", who, (double)o->min_loss_scale, (double)o->max_loss_scale);
    if (!(o->init_scale > 0 && isfinite(o->init_scale)) || !(o->growth_factor > 1) ||
        !(o->backoff_factor > 0 && o->backoff_factor < 1) || o->growth_interval < 1 ||
        o->hysteresis < 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: scaler settings init_scale %g, growth_factor %g, "
                        "backoff_factor %g, growth_interval %d, hysteresis %d: want init > 0, "
                        "growth > 1, 0 < backoff < 1, interval >= 1, hysteresis >= 1", who,
                        (double)o->init_scale, (double)o->growth_factor, (double)o->backoff_factor,
                        o->growth_interval, o->hysteresis);
    if (o->num_losses < 1 || o->num_losses > AMP_MAX_LOSSES)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: num_losses %d: want 1..%d", who, o->num_losses,
                        AMP_MAX_LOSSES);
    return AMP_OK;
}

amp_status amp_options_resolve(const amp_options *user, amp_options *out) {
    AMP_CHECK_ARG(user);
    AMP_CHECK_ARG(out);
    if (user->opt_level < AMP_O0 || user->opt_level > AMP_O3)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_initialize: unexpected optimization level %d; "
                        "options are O0, O1, O2, O3", (int)user->opt_level);
    const struct {
        const char *name;
        int value, max;
    } enums[] = {
        {"half_type", (int)user->half_type, AMP_HALF_BF16},
        {"cast_model_type", (int)user->cast_model_type, AMP_CAST_HALF},
        {"cast_model_outputs", (int)user->cast_model_outputs, AMP_CAST_HALF},
        {"autocast", (int)user->autocast, AMP_OPT_TRUE},
        {"keep_batchnorm_fp32", (int)user->keep_batchnorm_fp32, AMP_OPT_TRUE},
        {"master_weights", (int)user->master_weights, AMP_OPT_TRUE},
        {"skip_nonfinite", (int)user->skip_nonfinite, AMP_OPT_TRUE},
    };
    for (size_t i = 0; i < sizeof enums / sizeof enums[0]; i++)
        if (enums[i].value < 0 || enums[i].value > enums[i].max)
            return amp_fail(AMP_ERR_INVALID_ARG, "amp_initialize: %s = %d is not one of its enum "
                            "values (0..%d)", enums[i].name, enums[i].value, enums[i].max);
    amp_options o = amp_levels[user->opt_level];
    /* An override changes only what it names (Apex: every kwarg that is not None). */
    o.half_type = user->half_type;
    if (user->cast_model_type != AMP_CAST_DEFAULT) o.cast_model_type = user->cast_model_type;
    if (user->autocast != AMP_OPT_DEFAULT) o.autocast = user->autocast;
    if (user->keep_batchnorm_fp32 != AMP_OPT_DEFAULT) o.keep_batchnorm_fp32 = user->keep_batchnorm_fp32;
    if (user->master_weights != AMP_OPT_DEFAULT) o.master_weights = user->master_weights;
    o.cast_model_outputs = user->cast_model_outputs;
    o.min_loss_scale = user->min_loss_scale;
    o.max_loss_scale = user->max_loss_scale;
    o.num_losses = user->num_losses;
    o.init_scale = user->init_scale;
    o.growth_factor = user->growth_factor;
    o.backoff_factor = user->backoff_factor;
    o.growth_interval = user->growth_interval;
    o.hysteresis = user->hysteresis;
    o.quiet = user->quiet;
    o.skip_nonfinite = user->skip_nonfinite;
    /* The defaults that depend on the half type are settled here, whichever way the options were
     * made. bf16 has f32's exponent range: no scaling unless asked (torch.autocast bf16 needs no
     * scaler). */
    if (o.half_type == AMP_HALF_DEFAULT) o.half_type = AMP_HALF_F16;
    if (user->loss_scale != 0.0f) o.loss_scale = user->loss_scale;
    else if (o.half_type == AMP_HALF_BF16) o.loss_scale = 1.0f;
    amp_fill_scaler_defaults(&o);
    AMP_TRY(amp_options_check(user, &o));
    *out = o;
    return AMP_OK;
}

static const char *amp_flag_str(amp_opt_flag f) {
    return f == AMP_OPT_TRUE ? "True" : f == AMP_OPT_FALSE ? "False" : "None";
}

static const char *amp_cast_str(amp_cast_type c, amp_half_type h) {
    if (c == AMP_CAST_F32) return "f32";
    if (c == AMP_CAST_HALF) return h == AMP_HALF_BF16 ? "bf16" : "f16";
    return "None";
}

size_t amp_options_describe(const amp_options *o, char *buf, size_t size) {
    char scale[48];
    if (o->loss_scale == AMP_LOSS_SCALE_DYNAMIC) snprintf(scale, sizeof scale, "dynamic");
    else snprintf(scale, sizeof scale, "%g", (double)o->loss_scale);
    /* A level that uses no half type (O0) names none: its half_type changes nothing. */
    const char *half = !amp_options_use_half(o)            ? "None"
                       : o->half_type == AMP_HALF_BF16 ? "bf16"
                                                       : "f16";
    int n = snprintf(buf, size,
            "Selected optimization level %s\n"
            "  opt_level            : O%d\n"
            "  half_type            : %s\n"
            "  cast_model_type      : %s\n"
            "  autocast             : %s\n"
            "  keep_batchnorm_fp32  : %s (batch norms and norms marked by amp_model_set_norm;"
            " LayerNorm and RMSNorm stay f32 always)\n"
            "  master_weights       : %s\n"
            "  loss_scale           : %s\n"
            "  min/max_loss_scale   : %g / %g\n"
            "  num_losses           : %d\n"
            "  skip_nonfinite       : %s",
            amp_level_briefs[o->opt_level], (int)o->opt_level, half,
            amp_cast_str(o->cast_model_type, o->half_type), amp_flag_str(o->autocast),
            amp_flag_str(o->keep_batchnorm_fp32), amp_flag_str(o->master_weights), scale,
            (double)o->min_loss_scale, (double)o->max_loss_scale, o->num_losses,
            amp_flag_str(o->skip_nonfinite));
    return n < 0 ? 0 : (size_t)n;
}

void amp_options_log(const amp_options *o) {
    if (o->quiet) return;
    char text[1024];
    amp_options_describe(o, text, sizeof text);
    amp_log_msg(AMP_LOG_INFO, "%s", text);
}
