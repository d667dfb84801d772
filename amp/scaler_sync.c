/* The device mode's scaler (amp/state_internal.h): its state lives in backend memory, where the
 * backward's seed, the unscale, the clip, the optimizer and the scale update read and write it,
 * so that amp_step(opt, NULL) issues no host synchronisation. The host reads it back only when
 * asked: the scaler's state or counters, whether a step was taken, the optimizer's step count, a
 * checkpoint. On the CPU backend reading is free, and the step reads it every time, so the
 * overflow lines come when they happen, as Apex prints them. */
#include "core/error.h"
#include "core/log.h"
#include "kernels/math/scaler.h"
#include "optim/optimizer_internal.h"
#include "amp/state_internal.h"

amp_status amp_scalers_dev_create(amp_state *st) {
    size_t nbytes = sizeof(amp_scaler_dev) * (size_t)st->opts.num_losses;
    AMP_TRY(amp_ledger_alloc(st->ctx, AMP_MEM_OTHER, nbytes, (void **)&st->scaler_dev));
    for (int i = 0; i < st->opts.num_losses; i++) AMP_TRY(amp_scaler_dev_push(st, i));
    return AMP_OK;
}

amp_status amp_scaler_dev_push(amp_state *st, int loss_id) {
    amp_scaler_dev d;
    amp_scaler_to_dev(st->scalers[loss_id], &d);
    AMP_TRY(st->ctx->backend->copy_from_host(st->ctx->backend->dev, st->scaler_dev + loss_id, &d,
                                             sizeof d));
    st->scaler_dev_stale[loss_id] = false;
    if (loss_id == 0) st->taken_seen = d.taken_steps;
    return AMP_OK;
}

/* skip_nonfinite skipped steps its scaler would not have (a scale that does not check for
 * overflow): one line per such report, rate-limited as the overflow lines are. */
static void amp_log_nonfinite_skips(amp_state *st, int64_t n) {
    if (n <= 0) return;
    int64_t before = st->nonfinite_skips;
    st->nonfinite_skips += n;
    if (st->opts.quiet) return;
    bool due = before < 10 || st->nonfinite_skips / 100 != before / 100;
    if (!due) return;
    if (n == 1)
        amp_log_msg(AMP_LOG_INFO, "Non-finite gradient.  Skipping step (skip_nonfinite; %lld so far)",
                (long long)st->nonfinite_skips);
    else
        amp_log_msg(AMP_LOG_INFO, "Non-finite gradients.  Skipped %lld steps since the last report "
                "(skip_nonfinite; %lld so far)", (long long)n, (long long)st->nonfinite_skips);
}

amp_status amp_scaler_dev_pull(amp_state *st, int loss_id) {
    if (!st->device_scaler || !st->scaler_dev_stale[loss_id]) return AMP_OK;
    amp_scaler_dev d;
    AMP_TRY(st->ctx->backend->copy_to_host(st->ctx->backend->dev, &d, st->scaler_dev + loss_id,
                                           sizeof d));
    amp_scaler_state before;
    amp_scaler_get(st->scalers[loss_id], &before);
    amp_scaler_from_dev(st->scalers[loss_id], &d);
    amp_scaler_state after;
    amp_scaler_get(st->scalers[loss_id], &after);
    st->scaler_dev_stale[loss_id] = false;
    if (loss_id == 0) {
        /* Steps the optimizer took on the device since the last settle; a skip that the scaler
         * did not make itself (skip_nonfinite on a scale that does not check) is logged here. */
        amp_optimizer *opt = st->opts_state[0].opt;
        int64_t taken = d.taken_steps - st->taken_seen;
        if (opt && taken > 0) opt->n_steps += taken;
        st->taken_seen = d.taken_steps;
        if (!amp_scaler_checks_overflow(st->scalers[0]))
            amp_log_nonfinite_skips(st, after.skipped_steps - before.skipped_steps);
    }
    return AMP_OK;
}

amp_status amp_optimizer_settle_hook(void *amp, amp_optimizer *opt) {
    amp_state *st = amp;
    if (!st->device_scaler || st->n_opts < 1 || st->opts_state[0].opt != opt) return AMP_OK;
    return amp_scaler_dev_pull(st, 0);
}
