/* The public creators: an optimizer over a model's parameters, in registration order (the order
 * torch's model.parameters() gives, so state indices match a PyTorch state_dict). */
#include <stdlib.h>

#include "core/error.h"
#include "optim/optimizer_internal.h"

/* The model's parameter tensors and names; builds the model first if its parameters have no
 * storage yet (a model allocates them on first forward or amp_model_build). */
static amp_status amp_optim_model_params(const char *who, amp_model *m, amp_tensor ***params,
                                         const char ***names, int *n) {
    *params = NULL;
    *names = NULL;
    bool built = amp_model_n_params(m) > 0;
    for (int i = 0; built && i < amp_model_n_params(m); i++)
        built = amp_model_param(m, i) && amp_model_param(m, i)->data;
    if (!built) {
        amp_status s = amp_model_build(m);
        if (s != AMP_OK) return amp_fail_context(s, "%s: building the model", who);
    }
    *n = amp_model_n_params(m);
    if (*n <= 0) return amp_fail(AMP_ERR_INVALID_ARG, "%s: the model has no parameters", who);
    *params = malloc((size_t)*n * sizeof **params);
    *names = malloc((size_t)*n * sizeof **names);
    if (!*params || !*names) {
        free(*params);
        free(*names);
        return amp_fail(AMP_ERR_OOM, "%s: out of memory", who);
    }
    for (int i = 0; i < *n; i++) {
        (*params)[i] = amp_model_param(m, i);
        (*names)[i] = amp_model_param_name(m, i);
    }
    return AMP_OK;
}

amp_status amp_sgd_create(amp_model *m, const amp_sgd_opts *opts, amp_optimizer **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    AMP_CHECK_ARG(m);
    amp_tensor **params;
    const char **names;
    int n;
    AMP_TRY(amp_optim_model_params(__func__, m, &params, &names, &n));
    amp_status s = amp_sgd_create_params(params, names, n, opts, out);
    free(params);
    free(names);
    AMP_TRY(s);
    (*out)->model = m;
    (*out)->ctx = amp_model_ctx(m);
    return AMP_OK;
}

amp_status amp_adam_create(amp_model *m, const amp_adam_opts *opts, amp_optimizer **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    AMP_CHECK_ARG(m);
    amp_tensor **params;
    const char **names;
    int n;
    AMP_TRY(amp_optim_model_params(__func__, m, &params, &names, &n));
    amp_status s = amp_adam_create_params(params, names, n, opts, out);
    free(params);
    free(names);
    AMP_TRY(s);
    (*out)->model = m;
    (*out)->ctx = amp_model_ctx(m);
    return AMP_OK;
}
