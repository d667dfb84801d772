/* What SGD and Adam share: the parameter list, the state allocation (one block carved into
 * per-parameter views), the step loop that skips parameters without a gradient, zero_grad, and
 * the accessors. The update formulas live in kernels/math/{sgd,adam}.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tensor_internal.h"
#include "optim/optimizer_internal.h"

/* Each state view starts on a 64-byte boundary (16 floats), like every backend allocation, so
 * vector loads and coalesced device accesses see the same alignment per tensor. */
#define AMP_OPTIM_STATE_ALIGN_FLOATS 16

static const char *const amp_sgd_state_names[] = {"momentum_buffer"};
static const char *const amp_adam_state_names[] = {"exp_avg", "exp_avg_sq"};

const char *amp_optimizer_param_label(const amp_optimizer *opt, int i, char *buf, size_t size) {
    if (opt->names && opt->names[i]) snprintf(buf, size, "'%s'", opt->names[i]);
    else snprintf(buf, size, "#%d", i);
    return buf;
}

static int64_t amp_optim_padded(int64_t numel) {
    return (numel + AMP_OPTIM_STATE_ALIGN_FLOATS - 1) / AMP_OPTIM_STATE_ALIGN_FLOATS *
           AMP_OPTIM_STATE_ALIGN_FLOATS;
}

static amp_status amp_optim_check_params(const char *who, amp_tensor *const *params,
                                         const char *const *names, int n) {
    if (n <= 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: empty parameter list (%d parameters)", who, n);
    for (int i = 0; i < n; i++) {
        const amp_tensor *p = params[i];
        const char *name = names && names[i] ? names[i] : "";
        if (!p) return amp_fail(AMP_ERR_INVALID_ARG, "%s: parameter #%d %s is NULL", who, i, name);
        if (!p->data || !p->backend || !p->ctx)
            return amp_fail(AMP_ERR_STATE, "%s: parameter #%d %s has no storage yet", who, i,
                            name);
        if (p->dtype != AMP_F32)
            return amp_fail(AMP_ERR_DTYPE,
                            "%s: parameter #%d %s is %s; the optimizer updates f32 parameters "
                            "(half models step their f32 master weights)",
                            who, i, name, amp_dtype_name(p->dtype));
        if (p->backend != params[0]->backend)
            return amp_fail(AMP_ERR_INVALID_ARG,
                            "%s: parameter #%d %s is on backend %s, parameter #0 on %s", who, i,
                            name, p->backend->name, params[0]->backend->name);
        for (int j = 0; j < i; j++)
            if (params[j] == p)
                return amp_fail(AMP_ERR_INVALID_ARG,
                                "%s: parameter #%d %s appears twice (also #%d)", who, i, name, j);
    }
    return AMP_OK;
}

static amp_status amp_optim_alloc_state(amp_optimizer *opt) {
    int64_t total = 0;
    for (int i = 0; i < opt->n_params; i++) total += amp_optim_padded(opt->params[i]->numel);
    total *= opt->n_state;
    if (total == 0) return AMP_OK;
    size_t nbytes = (size_t)total * sizeof(float);
    AMP_TRY(opt->backend->alloc(nbytes, &opt->state_data));
    AMP_TRY(opt->backend->memset_zero(opt->state_data, nbytes));
    opt->state = calloc((size_t)opt->n_params * (size_t)opt->n_state, sizeof *opt->state);
    if (!opt->state) return amp_fail(AMP_ERR_OOM, "optimizer: out of memory for state views");
    float *base = opt->state_data;
    int64_t offset = 0;
    for (int i = 0; i < opt->n_params; i++) {
        const amp_tensor *p = opt->params[i];
        for (int j = 0; j < opt->n_state; j++) {
            amp_tensor **view = &opt->state[i * opt->n_state + j];
            AMP_TRY(amp_tensor_view(p->ctx, AMP_F32, p->ndim, p->shape, base + offset, view));
            (*view)->backend = opt->backend;
            offset += amp_optim_padded(p->numel);
        }
    }
    return AMP_OK;
}

amp_status amp_optimizer_create_common(const char *who, amp_optim_kind kind,
                                       amp_tensor *const *params, const char *const *names, int n,
                                       int n_state, amp_optimizer **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    AMP_CHECK_ARG(params);
    AMP_TRY(amp_optim_check_params(who, params, names, n));
    amp_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return amp_fail(AMP_ERR_OOM, "%s: out of memory", who);
    opt->kind = kind;
    opt->ctx = params[0]->ctx;
    opt->backend = params[0]->backend;
    opt->n_params = n;
    opt->n_state = n_state;
    opt->params = malloc((size_t)n * sizeof *opt->params);
    opt->names = calloc((size_t)n, sizeof *opt->names);
    opt->has_state = calloc((size_t)n, sizeof *opt->has_state);
    opt->param_steps = calloc((size_t)n, sizeof *opt->param_steps);
    amp_status s = AMP_OK;
    if (!opt->params || !opt->names || !opt->has_state || !opt->param_steps)
        s = amp_fail(AMP_ERR_OOM, "%s: out of memory", who);
    if (s == AMP_OK) {
        for (int i = 0; i < n; i++) {
            opt->params[i] = params[i];
            opt->names[i] = names ? names[i] : NULL;
        }
        s = amp_optim_alloc_state(opt);
        if (s != AMP_OK) s = amp_fail_context(s, "%s: optimizer state", who);
    }
    if (s != AMP_OK) {
        amp_optimizer_free(opt);
        return s;
    }
    *out = opt;
    return AMP_OK;
}

void amp_optimizer_free(amp_optimizer *opt) {
    if (!opt) return;
    if (opt->state) {
        for (int k = 0; k < opt->n_params * opt->n_state; k++) amp_tensor_free(opt->state[k]);
        free(opt->state);
    }
    if (opt->state_data) opt->backend->free(opt->state_data);
    free(opt->params);
    free(opt->names);
    free(opt->has_state);
    free(opt->param_steps);
    free(opt);
}

/* PyTorch steps a parameter only when its .grad is not None; here that is a gradient written
 * since the last amp_zero_grad. */
static bool amp_optim_param_has_grad(const amp_tensor *p) { return p->grad && p->grad_written; }

/* Everything that could make a parameter's update fail, checked for all parameters before any
 * is touched: a bad gradient leaves parameters and state as they were. */
static amp_status amp_optim_check_grad(const amp_optimizer *opt, int i) {
    char label[160];
    const amp_tensor *p = opt->params[i], *g = p->grad;
    amp_optimizer_param_label(opt, i, label, sizeof label);
    if (g->numel != p->numel || !amp_same_shape(g, p)) {
        char ps[64], gs[64];
        return amp_fail(AMP_ERR_SHAPE, "amp_optimizer_step: parameter %s is %s, its grad %s",
                        label, amp_shape_str(p, ps, sizeof ps), amp_shape_str(g, gs, sizeof gs));
    }
    if (g->dtype != AMP_F32 && g->dtype != AMP_F16 && g->dtype != AMP_BF16)
        return amp_fail(AMP_ERR_DTYPE, "amp_optimizer_step: parameter %s has a %s gradient",
                        label, amp_dtype_name(g->dtype));
    if (!g->data)
        return amp_fail(AMP_ERR_STATE, "amp_optimizer_step: parameter %s's grad has no storage",
                        label);
    if (p->backend != opt->backend || g->backend != opt->backend)
        return amp_fail(AMP_ERR_STATE,
                        "amp_optimizer_step: parameter %s or its grad left backend %s", label,
                        opt->backend->name);
    bool sgd = opt->kind == AMP_OPTIM_SGD;
    const char *entry = sgd ? "sgd_update" : "adam_update";
    if (sgd ? !opt->backend->sgd_update : !opt->backend->adam_update)
        return amp_fail(AMP_ERR_UNSUPPORTED,
                        "amp_optimizer_step: backend %s has no '%s' kernel (parameter %s)",
                        opt->backend->name, entry, label);
    if (opt->backend->supports &&
        !opt->backend->supports(sgd ? AMP_BE_SGD : AMP_BE_ADAM, g->dtype))
        return amp_fail(AMP_ERR_UNSUPPORTED,
                        "amp_optimizer_step: backend %s's '%s' does not take %s gradients "
                        "(parameter %s)",
                        opt->backend->name, entry, amp_dtype_name(g->dtype), label);
    return AMP_OK;
}

amp_status amp_optimizer_step(amp_optimizer *opt) {
    AMP_CHECK_ARG(opt);
    for (int i = 0; i < opt->n_params; i++)
        if (amp_optim_param_has_grad(opt->params[i])) AMP_TRY(amp_optim_check_grad(opt, i));
    for (int i = 0; i < opt->n_params; i++) {
        if (!amp_optim_param_has_grad(opt->params[i])) continue;
        amp_status s = opt->kind == AMP_OPTIM_SGD ? amp_sgd_step_param(opt, i)
                                                  : amp_adam_step_param(opt, i);
        if (s != AMP_OK) {
            char label[160];
            return amp_fail_context(s, "amp_optimizer_step: parameter %s",
                                    amp_optimizer_param_label(opt, i, label, sizeof label));
        }
    }
    opt->n_steps++;
    return AMP_OK;
}

amp_status amp_zero_grad(amp_optimizer *opt) {
    AMP_CHECK_ARG(opt);
    /* No memset: the next backward overwrites a gradient whose grad_written is false. */
    for (int i = 0; i < opt->n_params; i++) opt->params[i]->grad_written = false;
    amp_ctx_reset_step(opt->ctx);
    return AMP_OK;
}

float amp_optimizer_lr(const amp_optimizer *opt) {
    if (!opt) return 0.0f;
    return opt->kind == AMP_OPTIM_SGD ? opt->sgd.lr : opt->adam.lr;
}

amp_status amp_optimizer_set_lr(amp_optimizer *opt, float lr) {
    AMP_CHECK_ARG(opt);
    if (!(lr > 0.0f) || !isfinite(lr))
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "amp_optimizer_set_lr: lr = %g must be > 0 and finite", (double)lr);
    if (opt->kind == AMP_OPTIM_SGD) opt->sgd.lr = lr;
    else opt->adam.lr = lr;
    return AMP_OK;
}

int64_t amp_optimizer_step_count(const amp_optimizer *opt) { return opt ? opt->n_steps : 0; }
amp_model *amp_optimizer_model(const amp_optimizer *opt) { return opt ? opt->model : NULL; }

/* ---- accessors for checkpoints ---- */

amp_optim_kind amp_optimizer_kind(const amp_optimizer *opt) { return opt->kind; }
int amp_optimizer_n_params(const amp_optimizer *opt) { return opt ? opt->n_params : 0; }

amp_tensor *amp_optimizer_param(const amp_optimizer *opt, int i) {
    return opt && i >= 0 && i < opt->n_params ? opt->params[i] : NULL;
}

const amp_sgd_opts *amp_optimizer_sgd_opts(const amp_optimizer *opt) {
    return opt && opt->kind == AMP_OPTIM_SGD ? &opt->sgd : NULL;
}

const amp_adam_opts *amp_optimizer_adam_opts(const amp_optimizer *opt) {
    return opt && opt->kind == AMP_OPTIM_ADAM ? &opt->adam : NULL;
}

int amp_optimizer_n_state(const amp_optimizer *opt) { return opt ? opt->n_state : 0; }

const char *amp_optimizer_state_name(const amp_optimizer *opt, int j) {
    if (!opt || j < 0 || j >= opt->n_state) return NULL;
    return opt->kind == AMP_OPTIM_SGD ? amp_sgd_state_names[j] : amp_adam_state_names[j];
}

static amp_status amp_optim_check_index(const char *who, const amp_optimizer *opt, int i) {
    AMP_CHECK_ARG(opt);
    if (i < 0 || i >= opt->n_params)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: parameter index %d, have %d parameters", who,
                        i, opt->n_params);
    return AMP_OK;
}

amp_status amp_optimizer_state_tensor(const amp_optimizer *opt, int i, const char *name,
                                      amp_tensor **out) {
    AMP_TRY(amp_optim_check_index(__func__, opt, i));
    AMP_CHECK_ARG(name);
    AMP_CHECK_ARG(out);
    *out = NULL;
    for (int j = 0; j < opt->n_state; j++) {
        if (strcmp(name, amp_optimizer_state_name(opt, j)) == 0) {
            *out = opt->state[i * opt->n_state + j];
            return AMP_OK;
        }
    }
    return amp_fail(AMP_ERR_INVALID_ARG, "%s: this %s optimizer holds no state tensor '%s'",
                    __func__, opt->kind == AMP_OPTIM_SGD ? "SGD" : "Adam", name);
}

bool amp_optimizer_has_state(const amp_optimizer *opt, int i) {
    return opt && i >= 0 && i < opt->n_params && opt->has_state[i];
}

amp_status amp_optimizer_state_step(const amp_optimizer *opt, int i, int64_t *step) {
    AMP_TRY(amp_optim_check_index(__func__, opt, i));
    AMP_CHECK_ARG(step);
    if (opt->kind != AMP_OPTIM_ADAM)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: SGD keeps no per-parameter 'step'", __func__);
    *step = opt->param_steps[i];
    return AMP_OK;
}

amp_status amp_optimizer_state_restore(amp_optimizer *opt, int i, bool has_state, int64_t step) {
    AMP_TRY(amp_optim_check_index(__func__, opt, i));
    if (opt->kind == AMP_OPTIM_ADAM && (has_state ? step < 1 : step != 0))
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: parameter %d step = %lld does not fit has_state = %d", __func__, i,
                        (long long)step, (int)has_state);
    if (opt->kind == AMP_OPTIM_SGD && has_state && opt->n_state == 0)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: SGD without momentum holds no state (parameter %d)", __func__, i);
    opt->has_state[i] = has_state;
    if (opt->kind == AMP_OPTIM_ADAM) opt->param_steps[i] = step;
    return AMP_OK;
}

amp_status amp_optimizer_set_step_count(amp_optimizer *opt, int64_t n_steps) {
    AMP_CHECK_ARG(opt);
    if (n_steps < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: n_steps = %lld must be >= 0", __func__,
                        (long long)n_steps);
    opt->n_steps = n_steps;
    return AMP_OK;
}
