/* The update of every parameter at once: parameters are gathered into lists that one fused
 * multi-tensor call of the backend updates (Apex's FusedSGD/FusedAdam/FusedLAMB design), so a
 * step is a handful of kernel launches whatever the number of parameters.
 *
 * A call takes the parameters whose update differs in nothing but its tensors: the same gradient
 * dtype and scale and the same kind of target (an f32 parameter or master, with or without a half
 * copy, or a half parameter updated in place): one call, or two with batch norm kept in f32
 * under O3. Per-parameter step counts (torch's state['step']) stay on the device, where the
 * update reads and advances them, so a step the device skips needs no host decision.
 *
 * LAMB's gradient clipping takes the norm of all gradients of the step, which one call of the
 * backend computes over its list: with clipping on, the parameters must make one call, and a
 * step that would need two is refused before anything moves, saying how to go on. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "optim/optimizer_internal.h"

/* What makes two parameters' updates the same call. */
typedef struct amp_fused_key {
    amp_dtype grad_dtype;
    float grad_scale;
    bool in_place;        /* no f32 target: the half parameter itself */
    amp_dtype half_dtype; /* AMP_F32: no half copy */
    bool half_scaled;     /* a still-scaled half gradient */
} amp_fused_key;

static bool amp_fused_key_eq(const amp_fused_key *a, const amp_fused_key *b) {
    return a->grad_dtype == b->grad_dtype && a->grad_scale == b->grad_scale &&
           a->in_place == b->in_place && a->half_dtype == b->half_dtype &&
           a->half_scaled == b->half_scaled;
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

static amp_fused_key amp_fused_key_of(const amp_optim_target *t) {
    return (amp_fused_key){
        .grad_dtype = t->grad_dtype,
        .grad_scale = t->grad_scale,
        .in_place = t->param == NULL,
        .half_dtype = t->half_copy ? t->half_dtype : AMP_F32,
        .half_scaled = t->half_scaled,
    };
}

/* One backend call over the parameters whose key is k (the others at numel 0). */
static amp_status amp_fused_run(amp_optimizer *opt, const amp_fused_key *k,
                                const amp_fused_lists *l) {
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
        .found_inf = opt->dev_found_inf,
        .grad_scale = k->half_scaled ? opt->dev_half_grad_scale : NULL,
    };
    const amp_step_scalars *scalars = sc.found_inf || sc.grad_scale ? &sc : NULL;
    switch (opt->kind) {
    case AMP_OPTIM_SGD: {
        amp_sgd_desc d = amp_sgd_make_desc(opt, false);
        d.grad_scale = k->grad_scale;
        d.half_dtype = k->half_dtype;
        return be->sgd_multi(&d, &t, scalars);
    }
    case AMP_OPTIM_ADAM: {
        amp_adam_desc d = amp_adam_make_desc(opt, 0);
        d.grad_scale = k->grad_scale;
        d.half_dtype = k->half_dtype;
        return be->adam_multi(&d, &t, scalars);
    }
    case AMP_OPTIM_LAMB: {
        amp_lamb_desc d = amp_lamb_make_desc(opt, 0);
        d.grad_scale = k->grad_scale;
        return be->lamb_multi(&d, &t, scalars);
    }
    }
    return amp_fail(AMP_ERR_STATE, "amp_optimizer_step: unknown optimizer kind %d",
                    (int)opt->kind);
}

amp_status amp_optimizer_apply(amp_optimizer *opt) {
    AMP_CHECK_ARG(opt);
    int n = opt->n_params;
    for (int i = 0; i < n; i++)
        if (amp_optimizer_param_stepped(opt, i)) AMP_TRY(amp_optimizer_check_grad(opt, i));
    amp_optim_target *target = calloc(n > 0 ? (size_t)n : 1, sizeof *target);
    bool *done = calloc(n > 0 ? (size_t)n : 1, sizeof *done);
    amp_fused_lists l = {0};
    amp_status s = target && done ? amp_fused_lists_alloc(&l, n)
                                  : amp_fail(AMP_ERR_OOM, "amp_optimizer_step: out of host "
                                                          "memory for %d parameters", n);
    int stepped = 0;
    for (int i = 0; s == AMP_OK && i < n; i++) {
        done[i] = !amp_optimizer_param_stepped(opt, i);
        if (!done[i]) {
            s = amp_optimizer_update_begin(opt, i, &target[i]);
            stepped++;
        }
    }
    /* LAMB clips with the norm of all gradients, which one call measures over its list. */
    for (int i = 0, first = -1; s == AMP_OK && opt->kind == AMP_OPTIM_LAMB &&
                                opt->lamb.max_grad_norm > 0.0f && i < n; i++) {
        if (done[i]) continue;
        amp_fused_key a = amp_fused_key_of(&target[i]);
        if (first < 0) first = i;
        amp_fused_key b = amp_fused_key_of(&target[first]);
        if (!amp_fused_key_eq(&a, &b))
            s = amp_fail(AMP_ERR_UNSUPPORTED,
                         "amp_optimizer_step: LAMB's max_grad_norm clips the norm of all "
                         "gradients together, and this step's parameters differ in gradient "
                         "dtype (O3 with keep_batchnorm_fp32); set max_grad_norm = 0 and clip "
                         "with amp_clip_grad_norm instead");
    }
    /* One call per key, in the order keys first appear. */
    for (int lead = 0; s == AMP_OK && lead < n; lead++) {
        if (done[lead]) continue;
        amp_fused_key k = amp_fused_key_of(&target[lead]);
        for (int i = 0; i < n; i++) {
            amp_fused_key ki = amp_fused_key_of(&target[i]);
            bool member = !done[i] && amp_fused_key_eq(&k, &ki);
            const amp_optim_target *t = &target[i];
            l.numel[i] = member ? opt->params[i]->numel : 0;
            l.grad[i] = member ? (void *)t->grad : NULL;
            l.f32[i] = member ? t->param : NULL;
            l.half[i] = member ? t->half_copy : NULL;
            l.state1[i] = member && opt->n_state >= 1 ? opt->state[i * opt->n_state]->data : NULL;
            l.state2[i] = member && opt->n_state >= 2 ? opt->state[i * opt->n_state + 1]->data
                                                     : NULL;
        }
        s = amp_fused_run(opt, &k, &l);
        for (int i = 0; i < n; i++) {
            amp_fused_key ki = amp_fused_key_of(&target[i]);
            if (!done[i] && amp_fused_key_eq(&k, &ki)) done[i] = true;
        }
    }
    /* A backend error past the first call leaves the earlier calls' parameters updated: the
     * arguments were all checked above and the backends validate theirs before they launch, so
     * that is a device fault, reported as such. */
    if (stepped) opt->steps_stale = true;
    for (int i = 0; s == AMP_OK && i < n; i++)
        if (amp_optimizer_param_stepped(opt, i)) s = amp_optimizer_update_end(opt, i);
    amp_fused_lists_free(&l);
    free(target);
    free(done);
    if (s == AMP_OK && !opt->outcome_on_device) opt->n_steps++;
    return s;
}
