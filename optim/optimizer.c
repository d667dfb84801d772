/* What the optimizers share: the parameter list, the state allocation (one block carved into
 * per-parameter views), the checks of each parameter before a step, zero_grad, and the
 * accessors. The update formulas live in kernels/math/{sgd,adam}.h; master weights in
 * masters.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
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
                            "%s: parameter #%d %s is %s; create the optimizer over the f32 model, "
                            "before amp_initialize casts it (the optimizer then keeps f32 master "
                            "weights)",
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

void amp_optimizer_free_views(const amp_optimizer *opt, int per_param, void *block,
                              amp_tensor **views) {
    if (views) {
        for (int k = 0; k < opt->n_params * per_param; k++) amp_tensor_free(views[k]);
        free(views);
    }
    amp_ledger_free(opt->ctx, block);
}

/* The block is recorded in the context's memory ledger as `kind`: AMP_MEM_OPTIM_STATE for the
 * optimizer's state here, AMP_MEM_MASTERS for optim/masters.c's master weights and gradients. */
amp_status amp_optimizer_alloc_views(const amp_optimizer *opt, int per_param, amp_mem_kind kind,
                                     void **block, amp_tensor ***views) {
    *block = NULL;
    *views = NULL;
    int64_t total = 0;
    for (int i = 0; i < opt->n_params; i++)
        total += amp_optim_padded(amp_optimizer_piece_numel(opt, i));
    total *= per_param;
    if (total == 0) return AMP_OK;
    size_t nbytes = (size_t)total * sizeof(float);
    void *data = NULL;
    AMP_TRY(amp_ledger_alloc(opt->ctx, kind, nbytes, &data));
    amp_tensor **v = calloc((size_t)opt->n_params * (size_t)per_param, sizeof *v);
    amp_status s = v ? opt->backend->memset_zero(opt->backend->dev, data, nbytes)
                     : amp_fail(AMP_ERR_OOM, "optimizer: out of memory for %d views",
                                opt->n_params * per_param);
    float *base = data;
    int64_t offset = 0;
    for (int i = 0; s == AMP_OK && i < opt->n_params; i++) {
        const amp_tensor *p = opt->params[i];
        int64_t piece = amp_optimizer_piece_numel(opt, i);
        for (int j = 0; s == AMP_OK && j < per_param; j++) {
            amp_tensor **view = &v[i * per_param + j];
            /* A shard's piece is a flat run of the parameter's elements; an empty one has no
             * view. */
            if (amp_optimizer_sharded(opt) && piece == 0) continue;
            s = amp_optimizer_sharded(opt)
                    ? amp_tensor_view(p->ctx, AMP_F32, 1, &piece, base + offset, view)
                    : amp_tensor_view(p->ctx, AMP_F32, p->ndim, p->shape, base + offset, view);
            if (s == AMP_OK) (*view)->backend = opt->backend;
            offset += amp_optim_padded(piece);
        }
    }
    if (s != AMP_OK) {
        amp_optimizer_free_views(opt, per_param, data, v);
        return s;
    }
    *block = data;
    *views = v;
    return AMP_OK;
}

/* Hears of frees on the context (core/ctx_lifetime.c): its model, or a parameter that a caller
 * owned (an optimizer made from a tensor list). */
static void amp_optimizer_hear(void *who, const void *freed) {
    amp_optimizer *opt = who;
    if (opt->lost) return;
    if (opt->model && freed == (const void *)opt->model) {
        opt->lost = "model";
        return;
    }
    for (int i = 0; i < opt->n_params; i++)
        if (freed == (const void *)opt->params[i]) {
            opt->lost = "parameter tensor";
            return;
        }
}

amp_status amp_optimizer_check_usable(const char *who, const amp_optimizer *opt) {
    if (!opt) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'opt' is NULL", who);
    if (opt->lost)
        return amp_fail(AMP_ERR_STATE, "%s: the optimizer's %s was freed; free the optimizer too "
                        "(amp_optimizer_free: free an optimizer before its model), or make a new "
                        "one over a live model", who, opt->lost);
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
    amp_ctx_hold(opt->ctx);
    amp_status listening = amp_ctx_listen(opt->ctx, opt, amp_optimizer_hear);
    if (listening != AMP_OK) {
        amp_ctx_drop(opt->ctx);
        free(opt);
        return listening;
    }
    opt->n_params = n;
    opt->n_state = n_state;
    opt->params = malloc((size_t)n * sizeof *opt->params);
    opt->names = calloc((size_t)n, sizeof *opt->names);
    opt->has_state = calloc((size_t)n, sizeof *opt->has_state);
    opt->param_steps = calloc((size_t)n, sizeof *opt->param_steps);
    opt->group_of = calloc((size_t)n, sizeof *opt->group_of);
    opt->n_groups = 1;
    amp_status s = AMP_OK;
    if (!opt->params || !opt->names || !opt->has_state || !opt->param_steps || !opt->group_of)
        s = amp_fail(AMP_ERR_OOM, "%s: out of memory", who);
    if (s == AMP_OK) {
        for (int i = 0; i < n; i++) {
            opt->params[i] = params[i];
            opt->names[i] = names ? names[i] : NULL;
        }
        s = amp_optimizer_alloc_views(opt, n_state, AMP_MEM_OPTIM_STATE, &opt->state_data,
                                     &opt->state);
        if (s != AMP_OK) s = amp_fail_context(s, "%s: optimizer state", who);
    }
    if (s == AMP_OK) {
        size_t bytes = (size_t)n * sizeof *opt->dev_steps;
        s = amp_ledger_alloc(opt->ctx, AMP_MEM_OPTIM_STATE, bytes, (void **)&opt->dev_steps);
        if (s == AMP_OK) s = opt->backend->memset_zero(opt->backend->dev, opt->dev_steps, bytes);
        if (s != AMP_OK) s = amp_fail_context(s, "%s: step counts", who);
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
    amp_ctx *ctx = opt->ctx;
    amp_ctx_unlisten(ctx, opt);
    amp_ctx_forget(ctx, opt);
    if (ctx->amp_hooks) ctx->amp_hooks->forget(ctx->amp, opt);
    amp_optimizer_free_views(opt, opt->n_state, opt->state_data, opt->state);
    amp_optimizer_free_views(opt, 1, opt->master_data, opt->master_views);
    amp_optimizer_free_views(opt, 1, opt->master_grad_data, opt->master_grads);
    free(opt->params);
    free(opt->names);
    free(opt->has_state);
    free(opt->param_steps);
    free(opt->group_of);
    free(opt->shard_lo);
    free(opt->shard_hi);
    amp_ledger_free(ctx, opt->dev_steps);
    free(opt);
    amp_ctx_drop(ctx);
}

amp_status amp_optimizer_refresh(amp_optimizer *opt) {
    AMP_CHECK_ARG(opt);
    if (opt->steps_stale) {
        AMP_TRY(opt->backend->copy_to_host(opt->backend->dev, opt->param_steps, opt->dev_steps,
                                           (size_t)opt->n_params * sizeof *opt->param_steps));
        for (int i = 0; i < opt->n_params; i++)
            opt->has_state[i] = opt->n_state > 0 && opt->param_steps[i] > 0;
        opt->steps_stale = false;
    }
    if (opt->ctx && opt->ctx->amp_hooks) AMP_TRY(opt->ctx->amp_hooks->optimizer_settle(opt->ctx->amp, opt));
    return AMP_OK;
}

/* PyTorch steps a parameter only when its .grad is not None; here that is a gradient written
 * since the last amp_zero_grad. With master weights (or an input's grad_source) the gradient read is the
 * amp layer's f32 one, which it fills for every parameter whose grad_written is set. */
static bool amp_optim_has_source(const amp_optim_inputs *in, int i) {
    return in->grad_source && in->grad_source[i];
}

bool amp_optimizer_param_stepped(const amp_optimizer *opt, const amp_optim_inputs *in, int i) {
    const amp_tensor *p = opt->params[i];
    if (opt->masters != AMP_OPTIM_MASTERS_NONE || amp_optim_has_source(in, i))
        return p->grad_written;
    return p->grad && p->grad_written;
}

bool amp_optimizer_any_grad_written(const amp_optimizer *opt) {
    for (int i = 0; i < opt->n_params; i++)
        if (opt->params[i]->grad && opt->params[i]->grad_written) return true;
    return false;
}

static bool amp_optim_is_float(amp_dtype dt) {
    return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16;
}

/* Parameter i's own .grad, read when there are no master weights. An f16/bf16 parameter is
 * updated in place through f32 (O3, or a half model without amp). */
static amp_status amp_optim_check_param_grad(const amp_optimizer *opt, const amp_optim_inputs *in,
                                             int i, const char *label) {
    const amp_tensor *p = opt->params[i], *g = p->grad;
    if (!amp_optim_is_float(p->dtype))
        return amp_fail(AMP_ERR_DTYPE, "amp_optimizer_step: parameter %s is %s, want f32, f16 or "
                        "bf16", label, amp_dtype_name(p->dtype));
    if (!p->data)
        return amp_fail(AMP_ERR_STATE, "amp_optimizer_step: parameter %s has no storage", label);
    if (p->backend != opt->backend)
        return amp_fail(AMP_ERR_STATE, "amp_optimizer_step: parameter %s left backend %s", label,
                        opt->backend->name);
    if (amp_optim_has_source(in, i)) return AMP_OK; /* the amp layer's f32 sums */
    if (g->numel != p->numel || !amp_same_shape(g, p)) {
        char ps[64], gs[64];
        return amp_fail(AMP_ERR_SHAPE, "amp_optimizer_step: parameter %s is %s, its grad %s",
                        label, amp_shape_str(p, ps, sizeof ps), amp_shape_str(g, gs, sizeof gs));
    }
    if (!amp_optim_is_float(g->dtype))
        return amp_fail(AMP_ERR_DTYPE, "amp_optimizer_step: parameter %s has a %s gradient",
                        label, amp_dtype_name(g->dtype));
    if (!g->data)
        return amp_fail(AMP_ERR_STATE, "amp_optimizer_step: parameter %s's grad has no storage",
                        label);
    if (g->backend != opt->backend)
        return amp_fail(AMP_ERR_STATE,
                        "amp_optimizer_step: parameter %s's grad left backend %s", label,
                        opt->backend->name);
    return AMP_OK;
}

/* Everything that could make a parameter's update fail, checked for all parameters before any
 * is touched: a bad gradient leaves parameters and state as they were. */
amp_status amp_optimizer_check_grad(const amp_optimizer *opt, const amp_optim_inputs *in, int i) {
    char label[160];
    amp_optimizer_param_label(opt, i, label, sizeof label);
    bool masters = opt->masters != AMP_OPTIM_MASTERS_NONE;
    if (masters) {
        amp_status s = amp_optimizer_masters_check(opt, i, label);
        if (s != AMP_OK) return amp_fail_context(s, "amp_optimizer_step");
    } else {
        AMP_TRY(amp_optim_check_param_grad(opt, in, i, label));
    }
    /* The gradient's dtype was checked above: every backend's optimizer kernels take f32, f16
     * and bf16. */
    const char *entry = opt->kind == AMP_OPTIM_SGD    ? "sgd_multi"
                        : opt->kind == AMP_OPTIM_LAMB ? "lamb_multi"
                                                      : "adam_multi";
    bool have = opt->kind == AMP_OPTIM_SGD    ? opt->backend->k.sgd_multi != NULL
                : opt->kind == AMP_OPTIM_LAMB ? opt->backend->k.lamb_multi != NULL
                                              : opt->backend->k.adam_multi != NULL;
    if (!have)
        return amp_fail(AMP_ERR_UNSUPPORTED,
                        "amp_optimizer_step: backend %s has no '%s' kernel (parameter %s)",
                        opt->backend->name, entry, label);
    return AMP_OK;
}

amp_status amp_optimizer_step(amp_optimizer *opt) {
    AMP_TRY(amp_optimizer_check_usable(__func__, opt));
    /* After amp_initialize the gradients are scaled (or their unscaled copies are the master
     * gradients): Apex patches optimizer.step so that the plain call does amp's step; so do we. */
    if (opt->ctx->amp_hooks) {
        bool handled = false;
        amp_status s = opt->ctx->amp_hooks->optimizer_step(opt->ctx->amp, opt, &handled);
        if (handled) return s;
    }
    return amp_optimizer_apply(opt, &AMP_OPTIM_INPUTS_NONE);
}

amp_status amp_optimizer_zero_grad(amp_optimizer *opt) {
    AMP_TRY(amp_optimizer_check_usable(__func__, opt));
    /* No memset: the next backward overwrites a gradient whose grad_written is false. */
    for (int i = 0; i < opt->n_params; i++) opt->params[i]->grad_written = false;
    if (opt->ctx->amp_hooks) opt->ctx->amp_hooks->optimizer_zero_grad(opt->ctx->amp, opt);
    return AMP_OK;
}

amp_status amp_zero_grad(amp_optimizer *opt) {
    AMP_TRY(amp_optimizer_check_usable(__func__, opt));
    AMP_TRY(amp_optimizer_zero_grad(opt));
    amp_ctx_reset_step(opt->ctx);
    return AMP_OK;
}

/* The count where the amp layer left it to the device is settled first (one read); on failure
 * the last settled count is returned and the error stays in amp_last_error. */
int64_t amp_optimizer_step_count(const amp_optimizer *opt) {
    if (!opt) return 0;
    (void)amp_optimizer_refresh((amp_optimizer *)opt);
    return opt->n_steps;
}
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

const amp_lamb_opts *amp_optimizer_lamb_opts(const amp_optimizer *opt) {
    return opt && opt->kind == AMP_OPTIM_LAMB ? &opt->lamb : NULL;
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
                    __func__, opt->kind == AMP_OPTIM_SGD ? "SGD" : opt->kind == AMP_OPTIM_LAMB ? "LAMB" : "Adam", name);
}

/* The host mirror, read from the device first when the steps moved (one read; on failure the
 * mirror as it was, the error in amp_last_error). */
static void amp_optim_mirror(const amp_optimizer *opt) {
    if (opt->steps_stale) (void)amp_optimizer_refresh((amp_optimizer *)opt);
}

bool amp_optimizer_has_state(const amp_optimizer *opt, int i) {
    if (!opt || i < 0 || i >= opt->n_params) return false;
    amp_optim_mirror(opt);
    return opt->has_state[i];
}

amp_status amp_optimizer_state_step(const amp_optimizer *opt, int i, int64_t *step) {
    AMP_TRY(amp_optim_check_index(__func__, opt, i));
    AMP_CHECK_ARG(step);
    if (!amp_optim_kind_has_steps(opt->kind))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: SGD keeps no per-parameter 'step'", __func__);
    amp_optim_mirror(opt);
    *step = opt->param_steps[i];
    return AMP_OK;
}

amp_status amp_optimizer_state_restore(amp_optimizer *opt, int i, bool has_state, int64_t step) {
    AMP_TRY(amp_optim_check_index(__func__, opt, i));
    if (amp_optim_kind_has_steps(opt->kind) && (has_state ? step < 1 : step != 0))
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: parameter %d step = %lld does not fit has_state = %d", __func__, i,
                        (long long)step, (int)has_state);
    if (opt->kind == AMP_OPTIM_SGD && has_state && opt->n_state == 0)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: SGD without momentum holds no state (parameter %d)", __func__, i);
    /* SGD counts no step in torch's state: its momentum buffer exists from its first step on. */
    int64_t count = amp_optim_kind_has_steps(opt->kind) ? step : has_state ? 1 : 0;
    AMP_TRY(opt->backend->copy_from_host(opt->backend->dev, opt->dev_steps + i, &count,
                                         sizeof count));
    opt->has_state[i] = has_state;
    opt->param_steps[i] = count;
    return AMP_OK;
}

amp_status amp_optimizer_set_step_count(amp_optimizer *opt, int64_t n_steps) {
    AMP_CHECK_ARG(opt);
    if (n_steps < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: n_steps = %lld must be >= 0", __func__,
                        (long long)n_steps);
    AMP_TRY(amp_optimizer_refresh(opt)); /* steps the device took count before they go */
    opt->n_steps = n_steps;
    return AMP_OK;
}
