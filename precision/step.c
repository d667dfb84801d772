/* The step: amp_unscale makes one pass over the gradients that unscales them (into the f32
 * master gradients when there are masters) and flags inf/NaN, amp_clip_grad_norm clips the
 * unscaled gradients, amp_step decides, steps the optimizer, and only then moves the scale:
 * torch.amp.GradScaler's order, so a failing optimizer leaves the scaler as it was.
 *
 * Without masters an f32 gradient is unscaled in place; an f16/bf16 one (O3) stays scaled in the
 * model, where rounding the unscaled value to half would lose it, and the optimizer unscales it
 * as it loads it (half_grad_scale, Apex's fused-optimizer `scale`). When no pass would run (a
 * scale of 1 without masters), skip_nonfinite adds a read-only check (the backend's nonfinite). */
#include <math.h>

#include "core/error.h"
#include "core/log.h"
#include "core/tensor_internal.h"
#include "optim/optimizer_internal.h"
#include "precision/amp_state.h"

static bool amp_is_half(amp_dtype dt) { return dt == AMP_F16 || dt == AMP_BF16; }

/* One loss, one optimizer: the pass over the gradients of the step's backwards. */
static amp_status amp_unscale_deferred(amp_state *st, amp_opt_state *os) {
    amp_optimizer *opt = os->opt;
    float inv = (float)(1.0 / (double)st->used_scale[0]); /* torch: double reciprocal */
    bool check = amp_loss_checks(st, 0);
    float *found = st->found_inf;
    for (int i = 0; i < opt->n_params; i++) {
        amp_tensor *p = opt->params[i];
        if (!p->grad || !p->grad_written) continue;
        const amp_backend *be = p->backend;
        amp_dtype g_dt = p->grad->dtype;
        if (st->masters)
            AMP_TRY(AMP_BE(be, unscale, g_dt, p->numel, p->grad->data, inv,
                           amp_optimizer_master_grad(opt, i), found));
        else if (g_dt == AMP_F32 && inv != 1.0f)
            AMP_TRY(AMP_BE(be, unscale, g_dt, p->numel, p->grad->data, inv, p->grad->data, found));
        else if (check)
            AMP_TRY(AMP_BE(be, nonfinite, g_dt, p->numel, p->grad->data, found));
        if (!st->masters && amp_is_half(g_dt)) opt->half_grad_scale = inv;
    }
    return AMP_OK;
}

amp_status amp_unscale(amp_optimizer *opt) {
    amp_state *st;
    amp_opt_state *os;
    AMP_TRY(amp_state_of(__func__, opt, &st, &os));
    if (os->unscaled) return AMP_OK;
    if (st->at_each_backward) { /* every backward was unscaled at once: hand the sums over */
        for (int i = 0; i < opt->n_params; i++) opt->params[i]->grad_written = os->accum_has[i];
        if (!st->masters) opt->grad_source = os->accum;
    } else if (st->backward_seen[0]) {
        AMP_TRY(amp_unscale_deferred(st, os));
    }
    os->unscaled = true;
    return AMP_OK;
}

/* Where parameter i's unscaled gradient is after amp_unscale: f32 (writable) or a half gradient
 * that the optimizer will multiply by half_grad_scale. */
typedef struct amp_grad_view {
    void *data;
    amp_dtype dtype;
    float factor; /* what the stored values still need multiplying by */
} amp_grad_view;

static amp_grad_view amp_grad_view_of(amp_optimizer *opt, int i) {
    amp_tensor *p = opt->params[i];
    if (amp_optimizer_has_masters(opt))
        return (amp_grad_view){amp_optimizer_master_grad(opt, i), AMP_F32, 1.0f};
    if (opt->grad_source && opt->grad_source[i])
        return (amp_grad_view){opt->grad_source[i], AMP_F32, 1.0f};
    amp_dtype dt = p->grad->dtype;
    return (amp_grad_view){p->grad->data, dt, amp_is_half(dt) ? opt->half_grad_scale : 1.0f};
}

amp_status amp_clip_grad_norm(amp_optimizer *opt, float max_norm, float *norm_out) {
    amp_state *st;
    AMP_TRY(amp_state_of(__func__, opt, &st, NULL));
    if (!(max_norm > 0) || !isfinite(max_norm))
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_clip_grad_norm: max_norm %g must be finite and "
                        "> 0", (double)max_norm);
    AMP_TRY(amp_unscale(opt));
    const amp_backend *be = st->ctx->backend;
    amp_tensor *sq;
    int64_t one = 1;
    AMP_TRY(amp_tensor_step(st->ctx, AMP_F32, 1, &one, &sq));
    double total = 0;
    for (int i = 0; i < opt->n_params; i++) {
        if (!amp_optimizer_param_stepped(opt, i)) continue;
        amp_grad_view g = amp_grad_view_of(opt, i);
        float part;
        AMP_TRY(AMP_BE(be, sum_squares, g.dtype, opt->params[i]->numel, g.data, sq->data));
        AMP_TRY(be->copy_to_host(&part, sq->data, sizeof part));
        total += (double)part * g.factor * g.factor;
    }
    float norm = (float)sqrt(total);
    if (norm_out) *norm_out = norm;
    float coef = max_norm / (norm + 1e-6f); /* torch.nn.utils.clip_grad_norm_ */
    if (!(coef < 1.0f)) return AMP_OK;      /* also leaves inf/NaN alone: that step is skipped */
    bool half_scaled = false;
    for (int i = 0; i < opt->n_params; i++) {
        if (!amp_optimizer_param_stepped(opt, i)) continue;
        amp_grad_view g = amp_grad_view_of(opt, i);
        if (g.dtype != AMP_F32) {
            half_scaled = true;
            continue;
        }
        AMP_TRY(AMP_BE(be, unary, AMP_UNARY_SCALE, AMP_F32, opt->params[i]->numel, g.data, coef,
                       g.data));
    }
    if (half_scaled) opt->half_grad_scale *= coef;
    return AMP_OK;
}

/* skip_nonfinite skipped a step its scaler would not have: one line, rate-limited as the
 * scaler's overflow lines are (the first 10, then every 100th). */
static void amp_log_nonfinite_skip(amp_state *st) {
    int64_t n = ++st->nonfinite_skips;
    if (st->opts.quiet || (n > 10 && n % 100)) return;
    amp_log(AMP_LOG_INFO, "Non-finite gradient.  Skipping step (skip_nonfinite; %lld so far)",
            (long long)n);
}

amp_status amp_step(amp_optimizer *opt, bool *stepped) {
    amp_state *st;
    amp_opt_state *os;
    AMP_TRY(amp_state_of(__func__, opt, &st, &os));
    if (stepped) *stepped = false;
    AMP_TRY(amp_unscale(opt));
    bool deferred = !st->at_each_backward, seen = st->backward_seen[0];
    bool found = false, skip = os->skip;
    if (deferred && seen && amp_loss_checks(st, 0)) {
        AMP_TRY(amp_found_inf_peek(st, 0, &found)); /* not cleared: a failing step keeps it */
        skip = found;
    }
    /* The optimizer first: if it fails, nothing has moved (it validates every parameter before
     * touching one), and the scaler, the flags and the unscaled gradients wait for a retry. */
    if (!skip) AMP_TRY(amp_optimizer_apply(opt));
    if (deferred && seen) {
        amp_scaler_update(st->scalers[0], found, skip);
        if (found) AMP_TRY(st->ctx->backend->memset_zero(st->found_inf, sizeof(float)));
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
    amp_scaler_get(st->scalers[loss_id], out);
    return AMP_OK;
}

amp_status amp_scaler_set_state(amp_optimizer *opt, int loss_id, const amp_scaler_state *state) {
    AMP_CHECK_ARG(state);
    amp_state *st;
    AMP_TRY(amp_state_of(__func__, opt, &st, NULL));
    AMP_TRY(amp_loss_id_check(__func__, st, loss_id));
    return amp_scaler_set(st->scalers[loss_id], state);
}
