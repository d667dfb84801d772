/* LAMB as NVIDIA Apex's FusedLAMB: options (Apex's defaults, then the checks Adam's fields get)
 * and creation. The update itself is the backends' lamb_multi entry (kernels/math/lamb.h holds
 * the math and where each convention comes from); optim/fused_step.c calls it. */
#include <math.h>

#include "core/error.h"
#include "optim/optimizer_internal.h"

/* apex.optimizers.FusedLAMB's defaults. */
#define AMP_LAMB_DEFAULT_LR 1e-3f
#define AMP_LAMB_DEFAULT_BETA1 0.9f
#define AMP_LAMB_DEFAULT_BETA2 0.999f
#define AMP_LAMB_DEFAULT_EPS 1e-6f
#define AMP_LAMB_DEFAULT_WEIGHT_DECAY 0.01f
#define AMP_LAMB_DEFAULT_MAX_GRAD_NORM 1.0f

amp_lamb_opts amp_lamb_defaults(void) {
    return (amp_lamb_opts){.lr = AMP_LAMB_DEFAULT_LR,
                           .beta1 = AMP_LAMB_DEFAULT_BETA1,
                           .beta2 = AMP_LAMB_DEFAULT_BETA2,
                           .eps = AMP_LAMB_DEFAULT_EPS,
                           .weight_decay = AMP_LAMB_DEFAULT_WEIGHT_DECAY,
                           .max_grad_norm = AMP_LAMB_DEFAULT_MAX_GRAD_NORM,
                           .decoupled = true,
                           .bias_correction = true,
                           .grad_averaging = true,
                           .exact = true};
}

static amp_lamb_opts amp_lamb_resolve(const amp_lamb_opts *in) {
    amp_lamb_opts o = *in;
    if (!o.exact) {
        if (o.lr == 0.0f) o.lr = AMP_LAMB_DEFAULT_LR;
        if (o.beta1 == 0.0f) o.beta1 = AMP_LAMB_DEFAULT_BETA1;
        if (o.beta2 == 0.0f) o.beta2 = AMP_LAMB_DEFAULT_BETA2;
        if (o.eps == 0.0f) o.eps = AMP_LAMB_DEFAULT_EPS;
        if (o.max_grad_norm == 0.0f) o.max_grad_norm = AMP_LAMB_DEFAULT_MAX_GRAD_NORM;
        o.exact = true;
    }
    return o;
}

static amp_status amp_lamb_check_range(const char *field, float v, float lo, bool lo_open_hi1) {
    bool ok = lo_open_hi1 ? (v >= lo && v < 1.0f) : (v >= lo && isfinite(v));
    if (ok) return AMP_OK;
    return amp_fail(AMP_ERR_INVALID_ARG, "amp_lamb_create: opts.%s = %g must be %s", field,
                    (double)v, lo_open_hi1 ? "in [0, 1)" : ">= 0 and finite");
}

static amp_status amp_lamb_check_opts(const amp_lamb_opts *o) {
    AMP_TRY(amp_lamb_check_range("lr", o->lr, 0.0f, false));
    AMP_TRY(amp_lamb_check_range("beta1", o->beta1, 0.0f, true));
    AMP_TRY(amp_lamb_check_range("beta2", o->beta2, 0.0f, true));
    AMP_TRY(amp_lamb_check_range("eps", o->eps, 0.0f, false));
    AMP_TRY(amp_lamb_check_range("weight_decay", o->weight_decay, 0.0f, false));
    AMP_TRY(amp_lamb_check_range("max_grad_norm", o->max_grad_norm, 0.0f, false));
    return AMP_OK;
}

amp_status amp_lamb_create_params(amp_tensor *const *params, const char *const *names, int n,
                                  const amp_lamb_opts *opts, amp_optimizer **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    AMP_CHECK_ARG(opts);
    amp_lamb_opts o = amp_lamb_resolve(opts);
    AMP_TRY(amp_lamb_check_opts(&o));
    AMP_TRY(amp_optimizer_create_common("amp_lamb_create", AMP_OPTIM_LAMB, params, names, n, 2,
                                        out));
    (*out)->lamb = o;
    return AMP_OK;
}

amp_lamb_desc amp_lamb_make_desc(const amp_optimizer *opt, int64_t step) {
    const amp_lamb_opts *o = &opt->lamb;
    return (amp_lamb_desc){
        .lr = o->lr,
        .beta1 = o->beta1,
        .beta2 = o->beta2,
        .eps = o->eps,
        .weight_decay = o->weight_decay,
        .decoupled = o->decoupled,
        .bias_correction = o->bias_correction,
        .grad_averaging = o->grad_averaging,
        .adapt_all = o->adapt_all,
        .max_grad_norm = o->max_grad_norm,
        .step = step,
    };
}
