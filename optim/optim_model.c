/* The public creators: an optimizer over a model's parameters, in registration order (the order
 * torch's model.parameters() gives, so state indices match a PyTorch state_dict). */
#include <stdlib.h>

#include "core/error.h"
#include "nn/model_internal.h"
#include "optim/optimizer_internal.h"
#include "core/tensor_internal.h"

/* A model's parameter tensors and names, as the *_create_params creators take them. */
typedef struct amp_model_params {
    amp_tensor **params;
    const char **names;
    int n;
} amp_model_params;

/* Checks a creator's arguments (who names it), then lists the model's parameters; builds the
 * model first if its parameters have no storage yet (a model allocates them on first forward or
 * amp_model_build). On success the caller passes p to amp_optim_model_attach. */
static amp_status amp_optim_model_params(const char *who, amp_model *m, amp_optimizer **out,
                                         amp_model_params *p) {
    if (!out) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'out' is NULL", who);
    *out = NULL;
    if (!m) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'm' is NULL", who);
    AMP_TRY(amp_model_check_root(who, m));
    bool built = amp_model_n_params(m) > 0;
    for (int i = 0; built && i < amp_model_n_params(m); i++)
        built = amp_model_param(m, i) && amp_model_param(m, i)->data;
    if (!built) {
        amp_status s = amp_model_build(m);
        if (s != AMP_OK) return amp_fail_context(s, "%s: building the model", who);
    }
    p->n = amp_model_n_params(m);
    if (p->n <= 0) return amp_fail(AMP_ERR_INVALID_ARG, "%s: the model has no parameters", who);
    p->params = malloc((size_t)p->n * sizeof *p->params);
    p->names = malloc((size_t)p->n * sizeof *p->names);
    if (!p->params || !p->names) {
        free(p->params);
        free(p->names);
        return amp_fail(AMP_ERR_OOM, "%s: out of memory", who);
    }
    for (int i = 0; i < p->n; i++) {
        p->params[i] = amp_model_param(m, i);
        p->names[i] = amp_model_param_name(m, i);
    }
    return AMP_OK;
}

/* Frees p's lists and, when the creator succeeded (created), ties *out to the model. */
static amp_status amp_optim_model_attach(amp_model *m, amp_model_params *p, amp_status created,
                                         amp_optimizer **out) {
    free(p->params);
    free(p->names);
    AMP_TRY(created);
    (*out)->model = m;
    (*out)->ctx = amp_model_ctx(m);
    return AMP_OK;
}

amp_status amp_sgd_create(amp_model *m, const amp_sgd_opts *opts, amp_optimizer **out) {
    amp_model_params p;
    AMP_TRY(amp_optim_model_params(__func__, m, out, &p));
    amp_status s = amp_sgd_create_params(p.params, p.names, p.n, opts, out);
    return amp_optim_model_attach(m, &p, s, out);
}

amp_status amp_adam_create(amp_model *m, const amp_adam_opts *opts, amp_optimizer **out) {
    amp_model_params p;
    AMP_TRY(amp_optim_model_params(__func__, m, out, &p));
    amp_status s = amp_adam_create_params(p.params, p.names, p.n, opts, out);
    return amp_optim_model_attach(m, &p, s, out);
}

amp_status amp_lamb_create(amp_model *m, const amp_lamb_opts *opts, amp_optimizer **out) {
    amp_model_params p;
    AMP_TRY(amp_optim_model_params(__func__, m, out, &p));
    amp_status s = amp_lamb_create_params(p.params, p.names, p.n, opts, out);
    return amp_optim_model_attach(m, &p, s, out);
}
