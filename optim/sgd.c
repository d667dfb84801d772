/* torch.optim.SGD: options (checked as torch checks them, plus the header's rule for a zero lr
 * without .exact) and the update's descriptor (optim/fused_step.c runs it over every parameter at once). The
 * momentum buffer is created from the gradient on the first step the parameter has one, as torch
 * does (buf = grad.clone()), hence the per-parameter has_state. */
#include <math.h>

#include "core/error.h"
#include "optim/optimizer_internal.h"

/* torch.optim.SGD's defaults; lr=1e-3 since torch 2.x (it was required before). */
#define AMP_SGD_DEFAULT_LR 1e-3f

amp_sgd_opts amp_sgd_defaults(void) {
    return (amp_sgd_opts){.lr = AMP_SGD_DEFAULT_LR, .exact = true};
}

/* torch.optim.SGD checks lr >= 0, momentum >= 0 and weight_decay >= 0 and leaves dampening
 * free (a negative one weighs the new gradient above 1); every value must also be finite here:
 * torch lets a NaN through its comparisons, which would only poison every parameter. */
static amp_status amp_sgd_check_opts(const amp_sgd_opts *o) {
    const char *who = "amp_sgd_create";
    if (!(o->lr >= 0.0f) || !isfinite(o->lr))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.lr = %g must be >= 0 and finite", who,
                        (double)o->lr);
    /* A struct that never set lr reads 0: training nothing without a word is worse than an
     * error, so a zero rate must be asked for. */
    if (o->lr == 0.0f && !o->exact)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: opts.lr = 0 without opts.exact; for a learning rate of zero set "
                        ".exact = true or start from amp_sgd_defaults()",
                        who);
    if (!(o->momentum >= 0.0f) || !isfinite(o->momentum))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.momentum = %g must be >= 0 and finite",
                        who, (double)o->momentum);
    if (!isfinite(o->dampening))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.dampening = %g must be finite", who,
                        (double)o->dampening);
    if (!(o->weight_decay >= 0.0f) || !isfinite(o->weight_decay))
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: opts.weight_decay = %g must be >= 0 and finite", who,
                        (double)o->weight_decay);
    /* torch: "Nesterov momentum requires a momentum and zero dampening". */
    if (o->nesterov && (o->momentum <= 0.0f || o->dampening != 0.0f))
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: opts.nesterov needs momentum > 0 and dampening == 0 "
                        "(momentum = %g, dampening = %g)",
                        who, (double)o->momentum, (double)o->dampening);
    return AMP_OK;
}

amp_status amp_sgd_create_params(amp_tensor *const *params, const char *const *names, int n,
                                 const amp_sgd_opts *opts, amp_optimizer **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    AMP_CHECK_ARG(opts);
    AMP_TRY(amp_sgd_check_opts(opts));
    /* torch keeps no momentum_buffer at all when momentum is 0. */
    int n_state = opts->momentum != 0.0f ? 1 : 0;
    AMP_TRY(amp_optimizer_create_common("amp_sgd_create", AMP_OPTIM_SGD, params, names, n,
                                        n_state, out));
    (*out)->sgd = *opts;
    (*out)->sgd.exact = true; /* checked: every field now means what it says */
    return AMP_OK;
}

amp_sgd_desc amp_sgd_make_desc(const amp_optimizer *opt, bool first_step) {
    const amp_sgd_opts *o = &opt->sgd;
    return (amp_sgd_desc){
        .lr = o->lr,
        .momentum = o->momentum,
        .dampening = o->dampening,
        .weight_decay = o->weight_decay,
        .nesterov = o->nesterov,
        .first_step = first_step,
        .half_dtype = AMP_F32,
    };
}
