/* The loss-scaled backward: seeds the backward with the loss's scale (no extra multiply) and,
 * when the state unscales at each backward (several losses or optimizers, Apex's order),
 * unscales that backward's gradients into per-parameter f32 sums and settles its loss's scaler
 * right away (amp/state_internal.h). */
#include "core/error.h"
#include "core/log.h"
#include "core/tensor_internal.h"
#include "kernels/math/scaler.h"
#include "nn/autograd.h"
#include "optim/optimizer_internal.h"
#include "amp/state_internal.h"

/* The largest power of two a loss of this dtype holds: its backward is seeded with at most this
 * scale. An f16 loss seeded with the default 65536 would hold inf (f16's largest finite value is
 * 65504) and every first step would be skipped; in PyTorch and Apex it is (their `loss.float() *
 * scale` still hands the f16 loss an f16 gradient, which overflows). The scale actually used is
 * recorded and the unscale divides by exactly it, so the gradients are right either way. */
static float amp_seed_cap(amp_dtype dt) {
    return dt == AMP_F16 ? 32768.0f : 0x1p127f; /* bf16 and f32 share f32's exponent range */
}

bool amp_loss_checks(const amp_state *st, int loss_id) {
    return amp_scaler_checks_overflow(st->scalers[loss_id]) ||
           st->opts.skip_nonfinite == AMP_OPT_TRUE;
}

amp_status amp_found_inf_peek(const amp_state *st, int loss_id, bool *found) {
    float f = 0.0f;
    AMP_TRY(st->ctx->backend->copy_to_host(st->ctx->backend->dev, &f, st->found_inf + loss_id,
                                           sizeof f));
    *found = f != 0.0f;
    return AMP_OK;
}

amp_status amp_found_inf_take(amp_state *st, int loss_id, bool *found) {
    AMP_TRY(amp_found_inf_peek(st, loss_id, found));
    if (*found)
        AMP_TRY(st->ctx->backend->memset_zero(st->ctx->backend->dev, st->found_inf + loss_id,
                                              sizeof(float)));
    return AMP_OK;
}

amp_status amp_found_inf_agree(amp_state *st, int loss_id) {
    const amp_backward_observer *obs = st->ctx->bw_observer;
    if (!obs || !obs->agree_found_inf) return AMP_OK;
    return obs->agree_found_inf(st->ctx->bw_observer_user, st->found_inf + loss_id, 1);
}

amp_status amp_sum_over_ranks(amp_state *st, float *hi, const float *lo, int n) {
    const amp_backward_observer *obs = st->ctx->bw_observer;
    if (!obs || !obs->sum_over_ranks) return AMP_OK;
    return obs->sum_over_ranks(st->ctx->bw_observer_user, hi, lo, n);
}

/* Parameter i's gradient, unscaled with 1/scale, into dst (f32), flagging inf/NaN. */
static amp_status amp_unscale_into(amp_state *st, const amp_tensor *p, float scale, float *dst,
                                   int loss_id) {
    float inv = (float)(1.0 / (double)scale); /* torch: _scale.double().reciprocal().float() */
    return AMP_BE(p->backend, unscale, p->dtype, p->numel, p->grad->data, inv, dst,
                  st->found_inf + loss_id);
}

/* One optimizer's share of a backward: each gradient written by it is unscaled and added to its
 * parameter's sum, and released for the next backward. */
static amp_status amp_flush_opt(amp_state *st, amp_opt_state *os, int loss_id) {
    amp_optimizer *opt = os->opt;
    float scale = st->used_scale[loss_id];
    os->reached = false;
    for (int i = 0; i < opt->n_params; i++) {
        amp_tensor *p = opt->params[i];
        if (!p->grad || !p->grad_written) continue;
        float *dst = os->accum[i];
        if (os->accum_has[i]) {
            amp_tensor *tmp;
            AMP_TRY(amp_tensor_step(st->ctx, AMP_F32, p->ndim, p->shape, &tmp));
            AMP_TRY(amp_unscale_into(st, p, scale, tmp->data, loss_id));
            AMP_TRY(AMP_BE(p->backend, axpy, AMP_F32, p->numel, 1.0f, tmp->data, dst));
        } else {
            AMP_TRY(amp_unscale_into(st, p, scale, dst, loss_id));
        }
        os->accum_has[i] = true;
        os->reached = os->fresh = true;
        p->grad_written = false;
    }
    return AMP_OK;
}

/* Apex's scale_loss exit: unscale, check, update this loss's scaler, and make every optimizer the
 * backward reached skip its next step on overflow. */
static amp_status amp_flush_backward(amp_state *st, int loss_id) {
    for (int k = 0; k < st->n_opts; k++) AMP_TRY(amp_flush_opt(st, &st->opts_state[k], loss_id));
    AMP_TRY(amp_found_inf_agree(st, loss_id));
    bool found;
    AMP_TRY(amp_found_inf_take(st, loss_id, &found));
    bool skip = found && amp_loss_checks(st, loss_id);
    amp_scaler_update(st->scalers[loss_id], found, skip);
    for (int k = 0; skip && k < st->n_opts; k++)
        if (st->opts_state[k].reached) st->opts_state[k].skip = true;
    return AMP_OK;
}

/* The device mode: the seed is the device scaler's scale (capped for the loss's dtype) and no
 * value comes back to the host. A second backward of the step whose dtype has another cap may
 * get another scale: that is checked on the host (one read), as the host mode checks it. */
static amp_status amp_backward_device(amp_state *st, amp_tensor *loss, float cap, bool retain) {
    const amp_backend *be = st->ctx->backend;
    amp_scaler_dev *dev = &st->scaler_dev[0];
    if (st->backward_seen[0] && cap != st->seed_cap) {
        AMP_TRY(amp_scaler_dev_pull(st, 0));
        float scale = amp_scaler_scale(st->scalers[0]);
        float now = scale < cap ? scale : cap, before = scale < st->seed_cap ? scale : st->seed_cap;
        if (now != before)
            return amp_fail(AMP_ERR_STATE, "amp_backward: this loss (%s) is seeded with scale %g, "
                            "an earlier backward of this step with %g; gradients summed in place "
                            "must share one scale (give each loss its own loss_id with "
                            "num_losses)", amp_dtype_name(loss->dtype), (double)now,
                            (double)before);
    }
    if (!st->backward_seen[0]) {
        AMP_TRY(AMP_BE(be, scaler_seed, dev, cap));
        st->seed_cap = cap;
    }
    AMP_TRY(amp_autograd_backward_seeded(loss, 0.0f, &dev->used_scale, retain));
    st->backward_seen[0] = true;
    return AMP_OK;
}

/* One loss, one optimizer: the backward just run gave the optimizer something to step on when it
 * wrote a gradient of one of its parameters. */
static void amp_mark_fresh(amp_state *st) {
    amp_opt_state *os = &st->opts_state[0];
    os->fresh = os->fresh || amp_optimizer_any_grad_written(os->opt);
}

amp_status amp_backward_with(amp_tensor *loss, const amp_backward_opts *opts) {
    AMP_CHECK_ARG(opts);
    AMP_TRY(amp_autograd_check_loss(loss));
    int loss_id = opts->loss_id;
    amp_state *st = loss->ctx->amp;
    if (!st) {
        if (loss_id != 0)
            return amp_fail(AMP_ERR_STATE, "amp_backward: loss_id %d without amp_initialize", loss_id);
        return amp_autograd_backward(loss, 1.0f, opts->retain_graph);
    }
    if (loss_id < 0 || loss_id >= st->opts.num_losses)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_backward: loss_id %d: want 0..%d (num_losses "
                        "%d)", loss_id, st->opts.num_losses - 1, st->opts.num_losses);
    if (!st->at_each_backward && st->opts_state[0].unscaled)
        return amp_fail(AMP_ERR_STATE, "amp_backward: the gradients were unscaled already this step "
                        "(amp_unscale or amp_clip_grad_norm); call amp_step or amp_zero_grad first");
    float cap = amp_seed_cap(loss->dtype);
    if (st->device_scaler) {
        AMP_TRY(amp_backward_device(st, loss, cap, opts->retain_graph));
        amp_mark_fresh(st);
        return AMP_OK;
    }
    float scale = amp_scaler_scale(st->scalers[loss_id]);
    if (scale > cap) scale = cap;
    if (!st->at_each_backward && st->backward_seen[0] && st->used_scale[0] != scale)
        return amp_fail(AMP_ERR_STATE, "amp_backward: this loss (%s) is seeded with scale %g, an "
                        "earlier backward of this step with %g; gradients summed in place must "
                        "share one scale (give each loss its own loss_id with num_losses)",
                        amp_dtype_name(loss->dtype), (double)scale, (double)st->used_scale[0]);
    AMP_TRY(amp_autograd_backward(loss, scale, opts->retain_graph));
    st->used_scale[loss_id] = scale;
    st->backward_seen[loss_id] = true;
    if (st->at_each_backward) AMP_TRY(amp_flush_backward(st, loss_id));
    else amp_mark_fresh(st);
    return AMP_OK;
}

amp_status amp_backward_ex(amp_tensor *loss, int loss_id) {
    return amp_backward_with(loss, &(amp_backward_opts){.loss_id = loss_id});
}

amp_status amp_backward(amp_tensor *loss) { return amp_backward_ex(loss, 0); }
