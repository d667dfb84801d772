/* torch.optim.Adam and AdamW: options (the header's shorthand resolved, then checked as torch
 * checks them) and the update's descriptor (optim/fused_step.c runs it over every parameter at
 * once). Each
 * parameter counts its own steps (torch's state['step']): one without a gradient on some step
 * does not advance, and its bias corrections use its own count. */
#include <math.h>

#include "core/error.h"
#include "core/log.h"
#include "optim/optimizer_internal.h"

/* torch.optim.Adam's defaults: lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0. */
#define AMP_ADAM_DEFAULT_LR 1e-3f
#define AMP_ADAM_DEFAULT_BETA1 0.9f
#define AMP_ADAM_DEFAULT_BETA2 0.999f
#define AMP_ADAM_DEFAULT_EPS 1e-8f

amp_adam_opts amp_adam_defaults(void) {
    return (amp_adam_opts){.lr = AMP_ADAM_DEFAULT_LR,
                           .beta1 = AMP_ADAM_DEFAULT_BETA1,
                           .beta2 = AMP_ADAM_DEFAULT_BETA2,
                           .eps = AMP_ADAM_DEFAULT_EPS,
                           .exact = true};
}

/* The shorthand of a zero-initialised struct: its zeros are the defaults. The result is exact,
 * so that options read back from the optimizer mean what it runs with. */
static amp_adam_opts amp_adam_resolve(const amp_adam_opts *in) {
    amp_adam_opts o = *in;
    if (!o.exact) {
        if (o.lr == 0.0f) o.lr = AMP_ADAM_DEFAULT_LR;
        if (o.beta1 == 0.0f) o.beta1 = AMP_ADAM_DEFAULT_BETA1;
        if (o.beta2 == 0.0f) o.beta2 = AMP_ADAM_DEFAULT_BETA2;
        if (o.eps == 0.0f) o.eps = AMP_ADAM_DEFAULT_EPS;
        o.exact = true;
    }
    return o;
}

/* torch.optim.Adam's checks (lr >= 0, eps >= 0, 0 <= beta < 1, weight_decay >= 0), and finite:
 * torch lets a NaN through its comparisons, which would only poison every parameter. */
static amp_status amp_adam_check_opts(const amp_adam_opts *o) {
    const char *who = "amp_adam_create";
    if (!(o->lr >= 0.0f) || !isfinite(o->lr))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.lr = %g must be >= 0 and finite", who,
                        (double)o->lr);
    if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.beta1 = %g must be in [0, 1)", who,
                        (double)o->beta1);
    if (!(o->beta2 >= 0.0f && o->beta2 < 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.beta2 = %g must be in [0, 1)", who,
                        (double)o->beta2);
    if (!(o->eps >= 0.0f) || !isfinite(o->eps))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.eps = %g must be >= 0 and finite", who,
                        (double)o->eps);
    if (!(o->weight_decay >= 0.0f) || !isfinite(o->weight_decay))
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: opts.weight_decay = %g must be >= 0 and finite", who,
                        (double)o->weight_decay);
    return AMP_OK;
}

amp_status amp_adam_create_params(amp_tensor *const *params, const char *const *names, int n,
                                  const amp_adam_opts *opts, amp_optimizer **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    AMP_CHECK_ARG(opts);
    amp_adam_opts o = amp_adam_resolve(opts);
    AMP_TRY(amp_adam_check_opts(&o));
    AMP_TRY(amp_optimizer_create_common("amp_adam_create", AMP_OPTIM_ADAM, params, names, n, 2,
                                        out));
    (*out)->adam = o;
    if (o.decoupled && o.weight_decay == 0.0f)
        amp_log_msg(AMP_LOG_INFO, "AdamW with weight_decay 0 (torch.optim.AdamW's default is 1e-2; "
                              "libamp applies no default)");
    return AMP_OK;
}

amp_adam_desc amp_adam_make_desc(const amp_optimizer *opt, int64_t step) {
    const amp_adam_opts *o = &opt->adam;
    return (amp_adam_desc){
        .lr = o->lr,
        .beta1 = o->beta1,
        .beta2 = o->beta2,
        .eps = o->eps,
        .weight_decay = o->weight_decay,
        .decoupled = o->decoupled,
        .step = step,
        .half_dtype = AMP_F32,
    };
}
