/* The update of every parameter at once: parameters are gathered into lists that one fused
 * multi-tensor call of the backend updates (Apex's FusedSGD/FusedAdam/FusedLAMB design), so a
 * step is a handful of kernel launches whatever the number of parameters.
 *
 * A call takes the parameters whose update differs in nothing but its tensors: the same gradient
 * dtype and scale and the same kind of target (an f32 parameter or master, with or without a half
 * copy, or a half parameter updated in place): one call, or two with batch norm kept in f32
 * under O3. Per-parameter step counts (torch's state['step']) stay on the device, where the
 * update reads and advances them, so a step the device skips needs no host decision. Every
 * call's arguments are checked before the first call runs, so a refused call changes nothing.
 *
 * LAMB's gradient clipping takes the norm of all gradients of the step, which one call of the
 * backend computes over its list: with clipping on, the parameters must make one call, and a
 * step that would need two is refused before anything moves, saying how to go on. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tensor_internal.h"
#include "optim/optimizer_internal.h"

/* What makes two parameters' updates the same call. */
typedef struct amp_fused_key {
    amp_dtype grad_dtype;
    float grad_scale;
    bool in_place;        /* no f32 target: the half parameter itself */
    amp_dtype half_dtype; /* AMP_F32: no half copy */
    bool half_scaled;     /* a still-scaled half gradient */
    int group;            /* the parameter group: its lr and weight decay */
} amp_fused_key;

static bool amp_fused_key_eq(const amp_fused_key *a, const amp_fused_key *b) {
    return a->grad_dtype == b->grad_dtype && a->grad_scale == b->grad_scale &&
           a->in_place == b->in_place && a->half_dtype == b->half_dtype &&
           a->half_scaled == b->half_scaled && a->group == b->group;
}

/* One call's arrays, as long as the parameter list: a parameter outside the call has numel 0,
 * so that list position = parameter index, which is how the backends find its step count. */
typedef struct amp_fused_lists {
    int64_t *numel;
    void **grad;
    float **f32;
    void **half;
    float **state1, **state2;
} amp_fused_lists;

static void amp_fused_lists_free(amp_fused_lists *l) {
    free(l->numel);
    free(l->grad);
    free(l->f32);
    free(l->half);
    free(l->state1);
    free(l->state2);
}

static amp_status amp_fused_lists_alloc(amp_fused_lists *l, int n) {
    size_t m = n > 0 ? (size_t)n : 1;
    l->numel = calloc(m, sizeof *l->numel);
    l->grad = calloc(m, sizeof *l->grad);
    l->f32 = calloc(m, sizeof *l->f32);
    l->half = calloc(m, sizeof *l->half);
    l->state1 = calloc(m, sizeof *l->state1);
    l->state2 = calloc(m, sizeof *l->state2);
    if (l->numel && l->grad && l->f32 && l->half && l->state1 && l->state2) return AMP_OK;
    amp_fused_lists_free(l);
    return amp_fail(AMP_ERR_OOM, "amp_optimizer_step: out of host memory for %d parameters", n);
}

static amp_fused_key amp_fused_key_of(const amp_optimizer *opt, int i,
                                      const amp_optim_target *t) {
    return (amp_fused_key){
        .group = opt->group_of[i],
        .grad_dtype = t->grad_dtype,
        .grad_scale = t->grad_scale,
        .in_place = t->param == NULL,
        .half_dtype = t->half_copy ? t->half_dtype : AMP_F32,
        .half_scaled = t->half_scaled,
    };
}

/* One backend call over the parameters whose key is k (the others at numel 0). */
static amp_status amp_fused_run(amp_optimizer *opt, const amp_optim_inputs *in,
                                const amp_fused_key *k, const amp_fused_lists *l) {
    amp_opt_tensors t = {
        .n = opt->n_params,
        .numel = l->numel,
        .grad = l->grad,
        .grad_dtype = k->grad_dtype,
        .param = k->in_place ? NULL : l->f32,
        .half = k->half_dtype != AMP_F32 ? l->half : NULL,
        .half_dtype = k->half_dtype,
        .state1 = opt->n_state >= 1 ? l->state1 : NULL,
        .state2 = opt->n_state >= 2 ? l->state2 : NULL,
        .steps = opt->dev_steps,
    };
    const amp_backend *be = opt->backend;
    amp_step_scalars sc = {
        .found_inf = in->dev_found_inf,
        .grad_scale = k->half_scaled ? in->dev_half_grad_scale : NULL,
    };
    const amp_step_scalars *scalars = sc.found_inf || sc.grad_scale ? &sc : NULL;
    amp_param_group_opts g = amp_optimizer_group_hparams(opt, k->group);
    switch (opt->kind) {
    case AMP_OPTIM_SGD: {
        amp_sgd_desc d = amp_sgd_make_desc(opt, false);
        d.lr = g.lr;
        d.weight_decay = g.weight_decay;
        d.grad_scale = k->grad_scale;
        d.half_dtype = k->half_dtype;
        return AMP_BE(be, sgd_multi, &d, &t, scalars);
    }
    case AMP_OPTIM_ADAM: {
        amp_adam_desc d = amp_adam_make_desc(opt, 0);
        d.lr = g.lr;
        d.weight_decay = g.weight_decay;
        d.grad_scale = k->grad_scale;
        d.half_dtype = k->half_dtype;
        return AMP_BE(be, adam_multi, &d, &t, scalars);
    }
    case AMP_OPTIM_LAMB: {
        amp_lamb_desc d = amp_lamb_make_desc(opt, 0);
        d.lr = g.lr;
        d.weight_decay = g.weight_decay;
        d.grad_scale = k->grad_scale;
        return AMP_BE(be, lamb_multi, &d, &t, scalars);
    }
    }
    return amp_fail(AMP_ERR_STATE, "amp_optimizer_step: unknown optimizer kind %d",
                    (int)opt->kind);
}

/* Fills l with the call of key k: the parameters of that key, the others at numel 0. */
static void amp_fused_fill(const amp_optimizer *opt, const amp_fused_key *k,
                           const amp_optim_target *target, const bool *skip, amp_fused_lists *l) {
    for (int i = 0; i < opt->n_params; i++) {
        amp_fused_key ki = amp_fused_key_of(opt, i, &target[i]);
        bool member = !skip[i] && amp_fused_key_eq(k, &ki);
        const amp_optim_target *t = &target[i];
        l->numel[i] = member ? amp_optimizer_piece_numel(opt, i) : 0;
        l->grad[i] = member ? (void *)t->grad : NULL;
        l->f32[i] = member ? t->param : NULL;
        l->half[i] = member ? t->half_copy : NULL;
        l->state1[i] = member && opt->n_state >= 1 ? opt->state[i * opt->n_state]->data : NULL;
        l->state2[i] = member && opt->n_state >= 2 ? opt->state[i * opt->n_state + 1]->data : NULL;
    }
}

/* What every backend refuses in a fused call's arguments (core/backend.h's contract of the
 * multi-tensor optimizers), checked here for every call before the first one runs: a call
 * refused after an earlier one had updated its parameters would leave the step half done.
 * `lead` is the call's first parameter, which messages name. */
static amp_status amp_fused_check(const amp_optimizer *opt, const amp_fused_key *k,
                                  const amp_fused_lists *l, int lead) {
    char label[160];
    amp_optimizer_param_label(opt, lead, label, sizeof label);
    const char *who = "amp_optimizer_step";
    bool float_grad = k->grad_dtype == AMP_F32 || k->grad_dtype == AMP_F16 ||
                      k->grad_dtype == AMP_BF16;
    if (!float_grad)
        return amp_fail(AMP_ERR_DTYPE, "%s: %s gradients (parameter %s and the others of its "
                        "call), want f32, f16 or bf16", who, amp_dtype_name(k->grad_dtype), label);
    if (!(k->grad_scale == 0.0f || (k->grad_scale > 0.0f && isfinite(k->grad_scale))))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the %s gradients' scale is %g (parameter %s "
                        "and the others of its call), want a finite value > 0", who,
                        amp_dtype_name(k->grad_dtype), (double)k->grad_scale, label);
    bool half = k->half_dtype != AMP_F32;
    if ((half || k->in_place) && k->half_dtype != AMP_F16 && k->half_dtype != AMP_BF16)
        return amp_fail(AMP_ERR_DTYPE, "%s: parameter %s's half copy is %s, want f16 or bf16",
                        who, label, amp_dtype_name(k->half_dtype));
    if (!opt->dev_steps)
        return amp_fail(AMP_ERR_STATE, "%s: the optimizer has no step counts", who);
    for (int i = 0; i < opt->n_params; i++) {
        if (l->numel[i] <= 0) continue;
        bool param = k->in_place ? l->half[i] != NULL : l->f32[i] != NULL;
        bool state = (opt->n_state < 1 || l->state1[i]) && (opt->n_state < 2 || l->state2[i]);
        if (!l->grad[i] || !param || (half && !l->half[i]) || !state)
            return amp_fail(AMP_ERR_STATE, "%s: parameter %s has no %s", who,
                            amp_optimizer_param_label(opt, i, label, sizeof label),
                            !l->grad[i] ? "gradient storage" : !param ? "storage"
                            : !state ? "state storage" : "half copy");
    }
    return AMP_OK;
}

amp_status amp_optimizer_apply(amp_optimizer *opt, const amp_optim_inputs *in) {
    AMP_CHECK_ARG(opt);
    AMP_CHECK_ARG(in);
    if (amp_optimizer_sharded(opt) && !opt->shard_gather)
        return amp_fail(AMP_ERR_STATE, "amp_optimizer_step: the optimizer is sharded (ZeRO) and "
                        "the DDP that gathers its ranks' updates was freed; free the optimizer "
                        "too, or make it anew");
    int n = opt->n_params;
    for (int i = 0; i < n; i++)
        if (amp_optimizer_param_stepped(opt, in, i)) AMP_TRY(amp_optimizer_check_grad(opt, in, i));
    size_t m = n > 0 ? (size_t)n : 1;
    amp_optim_target *target = calloc(m, sizeof *target);
    bool *skip = calloc(m, sizeof *skip);
    int *lead = calloc(m, sizeof *lead); /* each call's first parameter, in order of appearance */
    amp_fused_lists l = {0};
    amp_status s = target && skip && lead ? amp_fused_lists_alloc(&l, n)
                                          : amp_fail(AMP_ERR_OOM, "amp_optimizer_step: out of "
                                                     "host memory for %d parameters", n);
    int stepped = 0, n_calls = 0;
    for (int i = 0; s == AMP_OK && i < n; i++) {
        /* Under ZeRO a parameter none of whose elements are this rank's is not stepped here. */
        skip[i] = !amp_optimizer_param_stepped(opt, in, i) ||
                  amp_optimizer_piece_numel(opt, i) == 0;
        if (skip[i]) continue;
        s = amp_optimizer_update_begin(opt, in, i, &target[i]);
        stepped++;
        amp_fused_key ki = amp_fused_key_of(opt, i, &target[i]);
        bool seen = false;
        for (int c = 0; c < n_calls && !seen; c++) {
            amp_fused_key kc = amp_fused_key_of(opt, lead[c], &target[lead[c]]);
            seen = amp_fused_key_eq(&ki, &kc);
        }
        if (!seen) lead[n_calls++] = i;
    }
    /* LAMB clips with the norm of all gradients, which one call measures over its list. */
    if (s == AMP_OK && opt->kind == AMP_OPTIM_LAMB && opt->lamb.max_grad_norm > 0.0f &&
        n_calls > 1)
        s = amp_fail(AMP_ERR_UNSUPPORTED,
                     "amp_optimizer_step: LAMB's max_grad_norm clips the norm of all "
                     "gradients together in one call, and this step's parameters need %d "
                     "(parameter groups, or gradient dtypes that differ: O3 with "
                     "keep_batchnorm_fp32); set max_grad_norm = 0 and clip with "
                     "amp_clip_grad_norm instead", n_calls);
    /* Every call checked before any runs; then one call per key. */
    for (int c = 0; s == AMP_OK && c < n_calls; c++) {
        amp_fused_key k = amp_fused_key_of(opt, lead[c], &target[lead[c]]);
        amp_fused_fill(opt, &k, target, skip, &l);
        s = amp_fused_check(opt, &k, &l, lead[c]);
    }
    bool ran = s == AMP_OK && n_calls > 0;
    for (int c = 0; s == AMP_OK && c < n_calls; c++) {
        amp_fused_key k = amp_fused_key_of(opt, lead[c], &target[lead[c]]);
        amp_fused_fill(opt, &k, target, skip, &l);
        s = amp_fused_run(opt, in, &k, &l);
    }
    /* A backend error past the first call leaves the earlier calls' parameters updated: every
     * call's arguments were checked above, so that is a device fault (or the device out of
     * memory for a launch's workspace), reported as such. */
    if (stepped) opt->steps_stale = true;
    /* Every parameter the calls wrote (all of them were given to one, failed or not) has a
     * new version; then, after calls that succeeded, the copies they wrote too. */
    for (int i = 0; ran && i < n; i++)
        if (!skip[i]) amp_tensor_mark_written(opt->params[i]);
    for (int i = 0; s == AMP_OK && i < n; i++)
        if (!skip[i]) s = amp_optimizer_update_end(opt, i, &target[i]);
    amp_fused_lists_free(&l);
    free(target);
    free(skip);
    free(lead);
    /* ZeRO: every rank gathers the others' pieces, also where this rank stepped none (the
     * gather is collective). */
    if (s == AMP_OK && opt->shard_gather) s = opt->shard_gather(opt->shard_gather_user, opt);
    if (s == AMP_OK && !in->outcome_on_device) opt->n_steps++;
    return s;
}
