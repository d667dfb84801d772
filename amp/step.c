/* The step: amp_unscale makes one pass over the gradients that unscales them (into the f32
 * master gradients when there are masters) and flags inf/NaN, amp_clip_grad_norm clips the
 * unscaled gradients, amp_step decides, steps the optimizer, and only then moves the scale:
 * torch.amp.GradScaler's order, so a failing optimizer leaves the scaler as it was.
 *
 * Without masters an f32 gradient is unscaled in place; an f16/bf16 one (O3) stays scaled in the
 * model, where rounding the unscaled value to half would lose it, and the optimizer unscales it
 * as it loads it (half_grad_scale, Apex's fused-optimizer `scale`). When no pass would run (a
 * scale of 1 without masters), skip_nonfinite adds a read-only check (the backend's nonfinite_multi). */
#include <math.h>

#include "core/error.h"
#include "core/log.h"
#include "core/tensor_internal.h"
#include "kernels/math/scaler.h"
#include "optim/optimizer_internal.h"
#include "amp/state_internal.h"
#include "amp/grad_lists_internal.h"

static bool amp_is_half(amp_dtype dt) { return dt == AMP_F16 || dt == AMP_BF16; }

/* One loss, one optimizer: the pass over the gradients of the step's backwards, one fused call
 * per gradient dtype and kind of pass. */
static amp_status amp_unscale_deferred(amp_state *st, amp_opt_state *os) {
    amp_optimizer *opt = os->opt;
    /* The device mode multiplies by the device's reciprocal; the host knows it only for a static
     * scale (1 needs no pass at all). */
    const amp_scaler *sc = st->scalers[0];
    bool dev = st->device_scaler;
    bool scale_one = dev ? !amp_scaler_is_dynamic(sc) && amp_scaler_scale(sc) == 1.0f
                         : st->used_scale[0] == 1.0f;
    float inv = dev ? amp_scaler_inv_scale(sc) : (float)(1.0 / (double)st->used_scale[0]);
    amp_step_scalars inv_dev = {.grad_scale = dev ? &st->scaler_dev[0].inv_used_scale : NULL};
    bool check = amp_loss_checks(st, 0);
    float *found = st->found_inf;
    const amp_backend *be = st->ctx->backend;
    amp_grad_lists unscale, nonfinite;
    AMP_TRY(amp_grad_lists_init(&unscale, opt->n_params));
    amp_status s = amp_grad_lists_init(&nonfinite, opt->n_params);
    if (s != AMP_OK) {
        amp_grad_lists_free(&unscale);
        return s;
    }
    for (int i = 0; s == AMP_OK && i < opt->n_params; i++) {
        amp_tensor *p = opt->params[i];
        if (!p->grad || !p->grad_written) continue;
        amp_dtype g_dt = p->grad->dtype;
        /* Under ZeRO only this rank's piece: the ranks' flags are agreed after the pass. */
        int64_t n = amp_optimizer_piece_numel(opt, i);
        void *g = amp_optimizer_piece_ptr(opt, i, p->grad->data, g_dt);
        if (!st->masters && amp_is_half(g_dt)) os->in.half_grad_scale = inv;
        if (n == 0) continue;
        if (st->masters)
            s = amp_grad_lists_add(&unscale, g_dt, n, g, amp_optimizer_master_grad(opt, i));
        else if (g_dt == AMP_F32 && !scale_one)
            s = amp_grad_lists_add(&unscale, g_dt, n, g, g);
        else if (check)
            s = amp_grad_lists_add(&nonfinite, g_dt, n, g, NULL);
    }
    for (int k = 0; s == AMP_OK && k < 3; k++) {
        const amp_grad_list *u = &unscale.list[k], *c = &nonfinite.list[k];
        if (u->n)
            s = AMP_BE(be, unscale_multi, u->dtype, u->n, u->numel, u->src, inv, u->dst, found,
                       dev ? &inv_dev : NULL);
        if (s == AMP_OK && c->n)
            s = AMP_BE(be, nonfinite_multi, c->dtype, c->n, c->numel, c->src, found);
    }
    amp_grad_lists_free(&unscale);
    amp_grad_lists_free(&nonfinite);
    return s;
}

amp_status amp_unscale(amp_optimizer *opt) {
    amp_state *st;
    amp_opt_state *os;
    AMP_TRY(amp_state_of(__func__, opt, &st, &os));
    if (os->unscaled) return AMP_OK;
    if (st->at_each_backward) { /* every backward was unscaled at once: hand the sums over */
        for (int i = 0; i < opt->n_params; i++) opt->params[i]->grad_written = os->accum_has[i];
        if (!st->masters) os->in.grad_source = os->accum;
    } else if (st->backward_seen[0]) {
        AMP_TRY(amp_unscale_deferred(st, os));
        AMP_TRY(amp_found_inf_agree(st, 0));
    }
    os->unscaled = true;
    return AMP_OK;
}

/* The device mode's clip: the sums of squares, the norm and the coefficient stay on the device
 * (scaler_clip); the f32 gradients are multiplied by the coefficient in one fused pass (by 1
 * when it does not clip: the same bits, and no host decision); the half ones get it through the
 * factor the optimizer applies. norm_out costs one 4-byte read. */
static amp_status amp_clip_device(amp_state *st, amp_opt_state *os, float max_norm,
                                  float *norm_out) {
    amp_optimizer *opt = os->opt;
    const amp_backend *be = st->ctx->backend;
    amp_scaler_dev *dev = &st->scaler_dev[0];
    amp_tensor *sq;
    int64_t five = 5;
    AMP_TRY(amp_tensor_step(st->ctx, AMP_F32, 1, &five, &sq));
    /* [0] f32 sum of squares, [1] half, [2] scratch overflow flag, [3] and [4] what the
     * roundings of [0] and [1] to f32 dropped (ZeRO's sum over the ranks adds it back) */
    float *parts = sq->data;
    amp_grad_lists lists;
    AMP_TRY(amp_grad_lists_init(&lists, opt->n_params));
    amp_status s = AMP_OK;
    for (int i = 0; s == AMP_OK && i < opt->n_params; i++) {
        if (!amp_optimizer_param_stepped(opt, &os->in, i)) continue;
        amp_grad_view g = amp_grad_view_of(os, i);
        if (g.numel) s = amp_grad_lists_add(&lists, g.dtype, g.numel, g.data, (float *)g.data);
    }
    const amp_grad_list *f32 = &lists.list[0], *f16 = &lists.list[1], *bf16 = &lists.list[2];
    if (s == AMP_OK && f16->n && bf16->n)
        s = amp_fail(AMP_ERR_UNSUPPORTED, "amp_clip_grad_norm: f16 and bf16 gradients in one step "
                     "(amp casts a model to one half type)");
    const amp_grad_list *half = f16->n ? f16 : bf16;
    /* Under ZeRO each rank sums the squares of its pieces, and the norm is taken of the sum
     * over the ranks (never of one shard's): both sums always exist then, as zeros where a rank
     * holds no gradient of that dtype, so every rank makes the same call below. */
    bool sharded = amp_optimizer_sharded(opt);
    if (s == AMP_OK && sharded) s = be->memset_zero(be->dev, parts, 5 * sizeof(float));
    if (s == AMP_OK && f32->n)
        s = AMP_BE(be, sum_squares_multi, AMP_F32, f32->n, f32->numel, f32->src, parts,
                   sharded ? parts + 3 : NULL);
    if (s == AMP_OK && half->n)
        s = AMP_BE(be, sum_squares_multi, half->dtype, half->n, half->numel, half->src, parts + 1,
                   sharded ? parts + 4 : NULL);
    if (s == AMP_OK && sharded) s = amp_sum_over_ranks(st, parts, parts + 3, 2);
    if (s == AMP_OK)
        s = AMP_BE(be, scaler_clip, dev, f32->n || sharded ? parts : NULL,
                   half->n || sharded ? parts + 1 : NULL, max_norm);
    amp_step_scalars coef = {.grad_scale = &dev->clip_coef};
    if (s == AMP_OK && f32->n) {
        s = be->memset_zero(be->dev, parts + 2, sizeof(float));
        if (s == AMP_OK)
            s = AMP_BE(be, unscale_multi, AMP_F32, f32->n, f32->numel, f32->src, 1.0f, f32->dst,
                       parts + 2, &coef);
    }
    amp_grad_lists_free(&lists);
    AMP_TRY(s);
    if (norm_out) AMP_TRY(be->copy_to_host(be->dev, norm_out, &dev->grad_norm, sizeof *norm_out));
    return AMP_OK;
}

amp_status amp_clip_grad_norm(amp_optimizer *opt, float max_norm, float *norm_out) {
    amp_state *st;
    amp_opt_state *os;
    AMP_TRY(amp_state_of(__func__, opt, &st, &os));
    if (!(max_norm > 0) || !isfinite(max_norm))
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_clip_grad_norm: max_norm %g must be finite and "
                        "> 0", (double)max_norm);
    AMP_TRY(amp_unscale(opt));
    if (st->device_scaler) return amp_clip_device(st, os, max_norm, norm_out);
    AMP_TRY(amp_optimizer_check_unsharded(__func__, opt, "the host's clip (several losses or "
                                          "optimizers)"));
    const amp_backend *be = st->ctx->backend;
    amp_tensor *sq;
    int64_t one = 1;
    AMP_TRY(amp_tensor_step(st->ctx, AMP_F32, 1, &one, &sq));
    /* One sum of squares per dtype; the half gradients of O3 are still scaled by the factor the
     * optimizer will apply, the same for all of them. */
    amp_grad_lists lists;
    AMP_TRY(amp_grad_lists_init(&lists, opt->n_params));
    amp_status s = AMP_OK;
    float half_factor = 1.0f;
    for (int i = 0; s == AMP_OK && i < opt->n_params; i++) {
        if (!amp_optimizer_param_stepped(opt, &os->in, i)) continue;
        amp_grad_view g = amp_grad_view_of(os, i);
        if (g.dtype != AMP_F32) half_factor = g.factor;
        s = amp_grad_lists_add(&lists, g.dtype, opt->params[i]->numel, g.data, NULL);
    }
    double total = 0;
    for (int k = 0; s == AMP_OK && k < 3; k++) {
        const amp_grad_list *l = &lists.list[k];
        if (!l->n) continue;
        float part;
        s = AMP_BE(be, sum_squares_multi, l->dtype, l->n, l->numel, l->src, sq->data, NULL);
        if (s == AMP_OK) s = be->copy_to_host(be->dev, &part, sq->data, sizeof part);
        double f = l->dtype == AMP_F32 ? 1.0 : (double)half_factor;
        total += (double)part * f * f;
    }
    amp_grad_lists_free(&lists);
    AMP_TRY(s);
    float norm = (float)sqrt(total);
    if (norm_out) *norm_out = norm;
    float coef = max_norm / (norm + 1e-6f); /* torch.nn.utils.clip_grad_norm_ */
    if (!(coef < 1.0f)) return AMP_OK;      /* also leaves inf/NaN alone: that step is skipped */
    /* The f32 gradients scaled in place in one fused pass per list (unscale_multi with the
     * coefficient; its inf/NaN flag goes to a scratch scalar: the scalers have seen these
     * gradients already). The half ones are scaled by the optimizer as it loads them. */
    AMP_TRY(amp_grad_lists_init(&lists, opt->n_params));
    bool half_scaled = false;
    for (int i = 0; s == AMP_OK && i < opt->n_params; i++) {
        if (!amp_optimizer_param_stepped(opt, &os->in, i)) continue;
        amp_grad_view g = amp_grad_view_of(os, i);
        if (g.dtype != AMP_F32) half_scaled = true;
        else s = amp_grad_lists_add(&lists, AMP_F32, opt->params[i]->numel, g.data, g.data);
    }
    const amp_grad_list *f = &lists.list[0];
    if (s == AMP_OK && f->n) {
        s = be->memset_zero(be->dev, sq->data, sizeof(float));
        if (s == AMP_OK)
            s = AMP_BE(be, unscale_multi, AMP_F32, f->n, f->numel, f->src, coef, f->dst,
                       sq->data, NULL);
    }
    amp_grad_lists_free(&lists);
    AMP_TRY(s);
    if (half_scaled) os->in.half_grad_scale *= coef;
    return AMP_OK;
}

/* skip_nonfinite skipped a step its scaler would not have: one line, rate-limited as the
 * scaler's overflow lines are (the first 10, then every 100th). */
static void amp_log_nonfinite_skip(amp_state *st) {
    int64_t n = ++st->nonfinite_skips;
    if (st->opts.quiet || (n > 10 && n % 100)) return;
    amp_log_msg(AMP_LOG_INFO, "Non-finite gradient.  Skipping step (skip_nonfinite; %lld so far)",
            (long long)n);
}

/* The device mode's step: the fused optimizer reads the overflow flag and the half gradients'
 * factor on the device and writes nothing when the flag is set; the scaler's update follows on
 * the device. Nothing comes back unless asked: `stepped` costs one 4-byte read. The CPU backend
 * reads the scaler back every step (free there), so its overflow lines come as they happen. */
static amp_status amp_step_device(amp_state *st, amp_opt_state *os) {
    amp_optimizer *opt = os->opt;
    const amp_backend *be = st->ctx->backend;
    amp_scaler_dev *dev = &st->scaler_dev[0];
    bool checks = amp_loss_checks(st, 0); /* a backward was seen: amp_step checked */
    amp_optim_inputs in = os->in;
    in.dev_found_inf = checks ? st->found_inf : NULL;
    in.dev_half_grad_scale = &dev->half_grad_scale;
    in.outcome_on_device = true;
    /* The optimizer first: if it fails, nothing has moved (it validates every parameter before
     * touching one), and the scaler, the flag and the unscaled gradients wait for a retry. */
    AMP_TRY(amp_optimizer_apply(opt, &in));
    amp_scaler_params p = amp_scaler_params_of(st->scalers[0]);
    AMP_TRY(AMP_BE(be, scaler_update, dev, &p, st->found_inf, checks, false));
    st->scaler_dev_stale[0] = true;
    if (be->device == AMP_DEVICE_CPU) AMP_TRY(amp_scaler_dev_pull(st, 0));
    return AMP_OK;
}

/* The device step's outcome, read once the step is queued and the state reset: a read that
 * fails (a bad index an op of this step met, kernels/cuda/bad_index.h) leaves the step taken
 * or skipped as the device decided, and the next step free to run. */
static amp_status amp_step_device_outcome(const amp_state *st, bool *stepped) {
    const amp_backend *be = st->ctx->backend;
    int32_t skipped;
    AMP_TRY(be->copy_to_host(be->dev, &skipped, &st->scaler_dev[0].last_skipped, sizeof skipped));
    *stepped = !skipped;
    return AMP_OK;
}

/* Nothing to step on: no backward since the last step reached this optimizer. */
static amp_status amp_step_refuse(const amp_optimizer *opt) {
    if (amp_optimizer_any_grad_written(opt))
        return amp_fail(AMP_ERR_STATE, "amp_step: the optimizer has stepped on these gradients "
                        "already (no amp_backward since its last amp_step): a second step would "
                        "apply them twice. Call amp_zero_grad, then a forward and amp_backward");
    return amp_fail(AMP_ERR_STATE, "amp_step: no gradient to step on: no amp_backward reached this "
                    "optimizer's parameters since its last amp_step or amp_zero_grad (torch's "
                    "GradScaler: \"No inf checks were recorded for this optimizer\")");
}

amp_status amp_step(amp_optimizer *opt, bool *stepped) {
    amp_state *st;
    amp_opt_state *os;
    AMP_TRY(amp_state_of(__func__, opt, &st, &os));
    if (stepped) *stepped = false;
    if (!os->fresh) return amp_step_refuse(opt);
    AMP_TRY(amp_unscale(opt));
    if (st->device_scaler) {
        AMP_TRY(amp_step_device(st, os));
        amp_opt_state_reset(st, os);
        st->ctx->autocast.n_cache = 0; /* weight casts of this step go stale once weights move */
        return stepped ? amp_step_device_outcome(st, stepped) : AMP_OK;
    }
    bool deferred = !st->at_each_backward, seen = st->backward_seen[0];
    bool found = false, skip = os->skip;
    if (deferred && seen && amp_loss_checks(st, 0)) {
        AMP_TRY(amp_found_inf_peek(st, 0, &found)); /* not cleared: a failing step keeps it */
        skip = found;
    }
    /* The optimizer first: if it fails, nothing has moved (it validates every parameter before
     * touching one), and the scaler, the flags and the unscaled gradients wait for a retry. */
    if (!skip) AMP_TRY(amp_optimizer_apply(opt, &os->in));
    if (deferred && seen) {
        amp_scaler_update(st->scalers[0], found, skip);
        if (found)
            AMP_TRY(st->ctx->backend->memset_zero(st->ctx->backend->dev, st->found_inf,
                                                  sizeof(float)));
    }
    if (skip && deferred && !amp_scaler_checks_overflow(st->scalers[0])) amp_log_nonfinite_skip(st);
    amp_opt_state_reset(st, os);
    st->ctx->autocast.n_cache = 0; /* weight casts of this step go stale once weights move */
    if (stepped) *stepped = !skip;
    return AMP_OK;
}

amp_status amp_step_hook(void *amp, amp_optimizer *opt, bool *handled) {
    amp_state *st = amp;
    *handled = false;
    for (int i = 0; i < st->n_opts; i++)
        if (st->opts_state[i].opt == opt) {
            *handled = true;
            return amp_step(opt, NULL);
        }
    return AMP_OK;
}

static amp_status amp_loss_id_check(const char *who, const amp_state *st, int loss_id) {
    if (loss_id < 0 || loss_id >= st->opts.num_losses)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: loss_id %d: want 0..%d (num_losses %d)", who,
                        loss_id, st->opts.num_losses - 1, st->opts.num_losses);
    return AMP_OK;
}

amp_status amp_scaler_get_state(const amp_optimizer *opt, int loss_id, amp_scaler_state *out) {
    AMP_CHECK_ARG(out);
    amp_state *st;
    AMP_TRY(amp_state_of(__func__, opt, &st, NULL));
    AMP_TRY(amp_loss_id_check(__func__, st, loss_id));
    AMP_TRY(amp_scaler_dev_pull(st, loss_id));
    amp_scaler_get(st->scalers[loss_id], out);
    return AMP_OK;
}

/* Whether a scaler state may be set now (amp_scaler_set_state's rule, for the checkpoint load to
 * ask before it changes anything); AMP_OK without amp_initialize (nothing to set). */
amp_status amp_scaler_state_settable(const char *who, const amp_optimizer *opt) {
    amp_state *st = opt && opt->ctx ? opt->ctx->amp : NULL;
    if (!st || !amp_opt_state_find(st, opt)) return AMP_OK;
    if (!st->at_each_backward && st->backward_seen[0])
        return amp_fail(AMP_ERR_STATE, "%s: called between amp_backward and its amp_step; the "
                        "step would unscale with the new scale instead of the one its backward "
                        "used. Call it outside a step: before amp_backward, or after amp_step "
                        "or amp_zero_grad", who);
    return AMP_OK;
}

amp_status amp_scaler_set_state(amp_optimizer *opt, int loss_id, const amp_scaler_state *state) {
    AMP_CHECK_ARG(state);
    amp_state *st;
    AMP_TRY(amp_state_of(__func__, opt, &st, NULL));
    AMP_TRY(amp_loss_id_check(__func__, st, loss_id));
    /* Refused inside a step, as torch defines a GradScaler's state only between iterations (its
     * state_dict is to be taken after update(), and it warns that a scaler "may only be pickled
     * at the beginning of an iteration, or at the end after scaler.update()"). Its
     * load_state_dict fills the one scale that both seeded the backward and unscales, so a load
     * between backward and step unscales by the wrong scale there; here a push would overwrite
     * the step's used scale alike. Pushing only the persistent fields would keep this step's
     * unscale right, but its update would then move the state just set, so what the caller
     * restored would not be what the next step sees. With Apex's order (several losses or
     * optimizers) each backward has already unscaled and moved its scaler: nothing is in flight. */
    AMP_TRY(amp_scaler_state_settable(__func__, opt));
    AMP_TRY(amp_scaler_dev_pull(st, loss_id)); /* what the device did counts before it goes */
    AMP_TRY(amp_scaler_set(st->scalers[loss_id], state));
    return st->device_scaler ? amp_scaler_dev_push(st, loss_id) : AMP_OK;
}
