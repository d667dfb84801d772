/* Parameter groups (torch.optim's param_groups): per-group learning rate and weight decay. The
 * fused step makes one backend call per group (optim/fused_step.c), each with its group's
 * values in the descriptor, so the update formulas stay those of one group. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "optim/optimizer_internal.h"

amp_param_group_opts amp_optimizer_group_hparams(const amp_optimizer *opt, int g) {
    if (g > 0) return opt->groups[g];
    switch (opt->kind) {
    case AMP_OPTIM_SGD: return (amp_param_group_opts){opt->sgd.lr, opt->sgd.weight_decay};
    case AMP_OPTIM_LAMB: return (amp_param_group_opts){opt->lamb.lr, opt->lamb.weight_decay};
    case AMP_OPTIM_ADAM: break;
    }
    return (amp_param_group_opts){opt->adam.lr, opt->adam.weight_decay};
}

static amp_status amp_group_check_value(const char *who, const char *what, float v) {
    if (!(v >= 0.0f) || !isfinite(v))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: %s = %g must be >= 0 and finite", who, what,
                        (double)v);
    return AMP_OK;
}

/* Moves the parameters marked in `take` into a new group: every check first. */
static amp_status amp_group_add(const char *who, amp_optimizer *opt, const bool *take,
                                const amp_param_group_opts *g, int *group) {
    AMP_TRY(amp_group_check_value(who, "g->lr", g->lr));
    AMP_TRY(amp_group_check_value(who, "g->weight_decay", g->weight_decay));
    if (opt->n_steps > 0 || opt->masters != AMP_OPTIM_MASTERS_NONE)
        return amp_fail(AMP_ERR_STATE, "%s: add groups before the first step and before "
                        "amp_initialize", who);
    if (opt->n_groups >= AMP_OPTIM_MAX_GROUPS)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the optimizer has %d groups already, the most "
                        "it takes", who, opt->n_groups);
    int n = 0;
    for (int i = 0; i < opt->n_params; i++) n += take[i];
    if (n == 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the group would hold no parameter", who);
    int id = opt->n_groups++;
    opt->groups[id] = *g;
    for (int i = 0; i < opt->n_params; i++)
        if (take[i]) opt->group_of[i] = id;
    if (group) *group = id;
    return AMP_OK;
}

amp_status amp_optimizer_add_group(amp_optimizer *opt, amp_param_match_fn match, void *user,
                                   const amp_param_group_opts *g, int *group) {
    AMP_TRY(amp_optimizer_check_usable(__func__, opt));
    AMP_CHECK_ARG(match);
    AMP_CHECK_ARG(g);
    bool *t = calloc((size_t)opt->n_params, sizeof *t);
    if (!t) return amp_fail(AMP_ERR_OOM, "%s: out of memory", __func__);
    for (int i = 0; i < opt->n_params; i++)
        t[i] = match(opt->names[i] ? opt->names[i] : "", opt->params[i], user);
    amp_status s = amp_group_add(__func__, opt, t, g, group);
    free(t);
    return s;
}

amp_status amp_optimizer_add_group_named(amp_optimizer *opt, const char *const *names, int n_names,
                                         const amp_param_group_opts *g, int *group) {
    AMP_TRY(amp_optimizer_check_usable(__func__, opt));
    AMP_CHECK_ARG(names);
    AMP_CHECK_ARG(g);
    if (n_names < 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: n_names = %d, want >= 1", __func__, n_names);
    bool *t = calloc((size_t)opt->n_params, sizeof *t);
    if (!t) return amp_fail(AMP_ERR_OOM, "%s: out of memory", __func__);
    amp_status s = AMP_OK;
    for (int k = 0; s == AMP_OK && k < n_names; k++) {
        int found = -1;
        for (int i = 0; names[k] && found < 0 && i < opt->n_params; i++)
            if (opt->names[i] && !strcmp(opt->names[i], names[k])) found = i;
        if (found < 0)
            s = amp_fail(AMP_ERR_INVALID_ARG, "%s: the optimizer has no parameter named '%s'",
                         __func__, names[k] ? names[k] : "(null)");
        else t[found] = true;
    }
    if (s == AMP_OK) s = amp_group_add(__func__, opt, t, g, group);
    free(t);
    return s;
}

int amp_optimizer_n_groups(const amp_optimizer *opt) {
    AMP_CHECK_ARG_OR(opt, 0);
    return opt->n_groups;
}

int amp_optimizer_param_group(const amp_optimizer *opt, int i) {
    AMP_CHECK_ARG_OR(opt, -1);
    if (i < 0 || i >= opt->n_params) {
        (void)amp_fail(AMP_ERR_INVALID_ARG, "amp_optimizer_param_group: parameter %d is out of "
                       "range: the optimizer has %d", i, opt->n_params);
        return -1;
    }
    return opt->group_of[i];
}

/* The accessors below answer 0 for a group that does not exist, a value a group may hold too:
 * the reason is left in amp_last_error so that a caller can tell. */
static bool amp_group_exists(const char *who, const amp_optimizer *opt, int group) {
    if (group >= 0 && group < opt->n_groups) return true;
    (void)amp_fail(AMP_ERR_INVALID_ARG, "%s: group %d does not exist: the optimizer has %d "
                   "(0..%d)", who, group, opt->n_groups, opt->n_groups - 1);
    return false;
}

float amp_optimizer_group_lr(const amp_optimizer *opt, int group) {
    AMP_CHECK_ARG_OR(opt, 0.0f);
    if (!amp_group_exists(__func__, opt, group)) return 0.0f;
    return amp_optimizer_group_hparams(opt, group).lr;
}

float amp_optimizer_group_weight_decay(const amp_optimizer *opt, int group) {
    AMP_CHECK_ARG_OR(opt, 0.0f);
    if (!amp_group_exists(__func__, opt, group)) return 0.0f;
    return amp_optimizer_group_hparams(opt, group).weight_decay;
}

float amp_optimizer_lr(const amp_optimizer *opt) {
    AMP_CHECK_ARG_OR(opt, 0.0f);
    return amp_optimizer_group_hparams(opt, 0).lr;
}

amp_status amp_optimizer_set_group_lr(amp_optimizer *opt, int group, float lr) {
    AMP_CHECK_ARG(opt);
    /* torch takes lr >= 0 (schedules start or end at 0); finite, as at creation. */
    AMP_TRY(amp_group_check_value(__func__, "lr", lr));
    if (group < 0 || group >= opt->n_groups)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: group %d, the optimizer has %d", __func__,
                        group, opt->n_groups);
    if (group > 0) opt->groups[group].lr = lr;
    else if (opt->kind == AMP_OPTIM_SGD) opt->sgd.lr = lr;
    else if (opt->kind == AMP_OPTIM_LAMB) opt->lamb.lr = lr;
    else opt->adam.lr = lr;
    return AMP_OK;
}

amp_status amp_optimizer_set_lr(amp_optimizer *opt, float lr) {
    AMP_CHECK_ARG(opt);
    if (!(lr >= 0.0f) || !isfinite(lr))
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "amp_optimizer_set_lr: lr = %g must be >= 0 and finite", (double)lr);
    for (int g = 0; g < opt->n_groups; g++) AMP_TRY(amp_optimizer_set_group_lr(opt, g, lr));
    return AMP_OK;
}
