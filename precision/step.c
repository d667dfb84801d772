/* The loss-scaled step: amp_backward scales the loss, amp_unscale makes one pass over the
 * gradients that unscales them (into f32 master gradients when there are masters) and flags
 * inf/NaN, amp_step skips or steps and updates the scale. torch.amp.GradScaler's order of
 * operations; Apex's handling of several losses (each backward unscaled at once). */
#include <math.h>

#include "amp/amp_state.h"
#include "core/error.h"
#include "nn/autograd.h"
#include "optim/optimizer_internal.h"

static amp_status amp_loss_id_check(const amp_state *st, int loss_id) {
    if (loss_id < 0 || loss_id >= st->opts.num_losses)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_backward_ex: loss_id %d: want 0..%d (num_losses "
                        "%d)", loss_id, st->opts.num_losses - 1, st->opts.num_losses);
    return AMP_OK;
}

/* Unscales parameter i's gradient with 1/scale into dst (f32), flagging inf/NaN in *found. */
static amp_status amp_unscale_param(amp_state *st, int i, float scale, float *dst, float *found) {
    amp_tensor *p = st->opt->params[i];
    float inv = (float)(1.0 / (double)scale); /* torch: _scale.double().reciprocal().float() */
    return AMP_BE(p->backend, unscale, p->dtype, p->numel, p->grad->data, inv, dst, found);
}

/* Where parameter i's unscaled f32 gradient goes: its master gradient, or in place. */
static float *amp_unscale_target(amp_state *st, int i) {
    return st->masters ? amp_optimizer_master_grad(st->opt, i) : (float *)st->opt->params[i]->grad->data;
}

/* num_losses > 1: after each backward, its gradients are unscaled with that loss's scale and
 * added to the per-parameter sums, and the parameters' gradients are released for the next. */
static amp_status amp_flush_loss(amp_state *st, int loss_id) {
    amp_optimizer *opt = st->opt;
    const amp_backend *be = st->ctx->backend;
    for (int i = 0; i < opt->n_params; i++) {
        amp_tensor *p = opt->params[i];
        if (!p->grad || !p->grad_written) continue;
        float *dst = st->accum[i];
        if (st->accum_has[i]) {
            amp_tensor *tmp;
            AMP_TRY(amp_tensor_step(st->ctx, AMP_F32, p->ndim, p->shape, &tmp));
            AMP_TRY(amp_unscale_param(st, i, st->used_scale[loss_id], tmp->data, &st->found_inf[loss_id]));
            AMP_TRY(AMP_BE(be, axpy, AMP_F32, p->numel, 1.0f, tmp->data, dst));
        } else {
            AMP_TRY(amp_unscale_param(st, i, st->used_scale[loss_id], dst, &st->found_inf[loss_id]));
        }
        st->accum_has[i] = true;
        p->grad_written = false;
    }
    return AMP_OK;
}

amp_status amp_backward_ex(amp_tensor *loss, int loss_id) {
    AMP_CHECK_ARG(loss);
    amp_state *st = loss->ctx->amp;
    if (!st) {
        if (loss_id != 0)
            return amp_fail(AMP_ERR_STATE, "amp_backward_ex: loss_id %d without amp_initialize", loss_id);
        return amp_autograd_backward(loss, 1.0f);
    }
    AMP_TRY(amp_loss_id_check(st, loss_id));
    if (st->unscaled)
        return amp_fail(AMP_ERR_STATE, "amp_backward: the gradients were unscaled already this step "
                        "(amp_unscale or amp_clip_grad_norm); call amp_step first");
    float scale = amp_scaler_scale(st->scalers[loss_id]);
    AMP_TRY(amp_autograd_backward(loss, scale));
    st->used_scale[loss_id] = scale;
    st->backward_seen[loss_id] = true;
    if (st->opts.num_losses > 1) AMP_TRY(amp_flush_loss(st, loss_id));
    return AMP_OK;
}

amp_status amp_backward(amp_tensor *loss) { return amp_backward_ex(loss, 0); }

static bool amp_needs_unscale_pass(const amp_state *st) {
    return st->masters || st->used_scale[0] != 1.0f || amp_scaler_checks_overflow(st->scalers[0]);
}

amp_status amp_unscale(amp_optimizer *opt) {
    amp_state *st;
    AMP_TRY(amp_state_of(__func__, opt, &st));
    if (st->unscaled) return AMP_OK;
    if (st->opts.num_losses > 1) { /* already unscaled loss by loss: hand the sums over */
        for (int i = 0; i < opt->n_params; i++) {
            amp_tensor *p = opt->params[i];
            if (!st->accum_has[i]) continue;
            if (!st->masters)
                AMP_TRY(AMP_BE(p->backend, copy, p->grad->data, st->accum[i], (size_t)p->numel * 4));
            p->grad_written = true;
        }
    } else if (st->backward_seen[0] && amp_needs_unscale_pass(st)) {
        for (int i = 0; i < opt->n_params; i++) {
            amp_tensor *p = opt->params[i];
            if (!p->grad || !p->grad_written) continue;
            AMP_TRY(amp_unscale_param(st, i, st->used_scale[0], amp_unscale_target(st, i), &st->found_inf[0]));
        }
    }
    st->unscaled = true;
    return AMP_OK;
}

amp_status amp_clip_grad_norm(amp_optimizer *opt, float max_norm, float *norm_out) {
    amp_state *st;
    AMP_TRY(amp_state_of(__func__, opt, &st));
    if (!(max_norm > 0))
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_clip_grad_norm: max_norm %g must be > 0", (double)max_norm);
    AMP_TRY(amp_unscale(opt));
    const amp_backend *be = st->ctx->backend;
    amp_tensor *sq;
    int64_t one = 1;
    AMP_TRY(amp_tensor_step(st->ctx, AMP_F32, 1, &one, &sq));
    double total = 0;
    for (int i = 0; i < opt->n_params; i++) {
        amp_tensor *p = opt->params[i];
        if (!p->grad || !p->grad_written) continue;
        float part;
        AMP_TRY(AMP_BE(be, sum_squares, AMP_F32, p->numel, amp_unscale_target(st, i), sq->data));
        AMP_TRY(be->copy_to_host(&part, sq->data, sizeof part));
        total += part;
    }
    float norm = (float)sqrt(total);
    if (norm_out) *norm_out = norm;
    float coef = max_norm / (norm + 1e-6f); /* torch.nn.utils.clip_grad_norm_ */
    if (!(coef < 1.0f)) return AMP_OK;      /* also leaves inf/NaN alone: that step is skipped */
    for (int i = 0; i < opt->n_params; i++) {
        amp_tensor *p = opt->params[i];
        if (!p->grad || !p->grad_written) continue;
        float *g = amp_unscale_target(st, i);
        AMP_TRY(AMP_BE(be, unary, AMP_UNARY_SCALE, AMP_F32, p->numel, g, coef, g));
    }
    return AMP_OK;
}

/* Ends the step's scaler bookkeeping: every loss's scaler sees its own overflow flag. */
static amp_status amp_scalers_update(amp_state *st, bool *skip) {
    const amp_backend *be = st->ctx->backend;
    float found[AMP_MAX_LOSSES] = {0};
    int n = st->opts.num_losses;
    AMP_TRY(be->copy_to_host(found, st->found_inf, sizeof(float) * (size_t)n));
    *skip = false;
    for (int i = 0; i < n; i++)
        if (amp_scaler_checks_overflow(st->scalers[i]) && found[i] != 0.0f) *skip = true;
    for (int i = 0; i < n; i++)
        if (st->backward_seen[i]) amp_scaler_update(st->scalers[i], found[i] != 0.0f, *skip);
    AMP_TRY(be->memset_zero(st->found_inf, sizeof(float) * (size_t)n));
    for (int i = 0; i < n; i++) st->backward_seen[i] = false;
    for (int i = 0; st->accum_has && i < st->opt->n_params; i++) st->accum_has[i] = false;
    st->unscaled = false;
    return AMP_OK;
}

amp_status amp_step(amp_optimizer *opt, bool *stepped) {
    amp_state *st;
    AMP_TRY(amp_state_of(__func__, opt, &st));
    if (stepped) *stepped = false;
    AMP_TRY(amp_unscale(opt));
    bool skip;
    AMP_TRY(amp_scalers_update(st, &skip));
    st->ctx->autocast.n_cache = 0; /* weight casts of this step go stale once weights move */
    if (skip) return AMP_OK; /* parameters, optimizer state and step count untouched */
    AMP_TRY(amp_optimizer_step(opt));
    if (stepped) *stepped = true;
    return AMP_OK;
}

amp_status amp_scaler_get_state(const amp_optimizer *opt, int loss_id, amp_scaler_state *out) {
    AMP_CHECK_ARG(out);
    amp_state *st;
    AMP_TRY(amp_state_of(__func__, opt, &st));
    AMP_TRY(amp_loss_id_check(st, loss_id));
    amp_scaler_get(st->scalers[loss_id], out);
    return AMP_OK;
}

amp_status amp_scaler_set_state(amp_optimizer *opt, int loss_id, const amp_scaler_state *state) {
    AMP_CHECK_ARG(state);
    amp_state *st;
    AMP_TRY(amp_state_of(__func__, opt, &st));
    AMP_TRY(amp_loss_id_check(st, loss_id));
    return amp_scaler_set(st->scalers[loss_id], state);
}
