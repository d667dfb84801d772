/* The loss scaler's state machine (amp/scaler_internal.h states the algorithm and its sources). */
#include "amp/scaler_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "kernels/math/scaler.h"

/* torch.amp.GradScaler's defaults; Apex's ceiling. */
#define DEFAULT_DYNAMIC_SCALE 65536.0f
#define DEFAULT_STATIC_SCALE 1.0f
#define DEFAULT_GROWTH 2.0f
#define DEFAULT_BACKOFF 0.5f
#define DEFAULT_INTERVAL 2000
#define DEFAULT_MAX_SCALE 16777216.0f
/* The floor when no min_scale is set: the smallest normal f32, so 1/scale stays finite. */
#define SCALE_FLOOR FLT_MIN
/* Overflow lines: every one of the first LOG_FIRST, then every LOG_EVERY-th. */
#define LOG_FIRST 10
#define LOG_EVERY 100

struct amp_scaler {
    amp_scaler_config cfg; /* resolved: no zero defaults left */
    amp_scaler_state st;
    int64_t n_overflows; /* overflows seen by this scaler in this process: the log's rate limit */
};

static amp_status resolve_config(const amp_scaler_config *in, amp_scaler_config *c) {
    const char *who = "amp_scaler_create";
    *c = *in;
    if (c->scale == 0.0f) c->scale = c->dynamic ? DEFAULT_DYNAMIC_SCALE : DEFAULT_STATIC_SCALE;
    if (c->growth_factor == 0.0f) c->growth_factor = DEFAULT_GROWTH;
    if (c->backoff_factor == 0.0f) c->backoff_factor = DEFAULT_BACKOFF;
    if (c->growth_interval == 0) c->growth_interval = DEFAULT_INTERVAL;
    if (c->max_scale == 0.0f) c->max_scale = DEFAULT_MAX_SCALE;
    if (c->hysteresis == 0) c->hysteresis = 1;
    if (c->dynamic) c->check_overflow = true;
    if (!(c->scale >= SCALE_FLOOR) || isinf(c->scale))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: scale = %g, want a finite value >= 2^-126 "
                        "(so that 1/scale is finite)", who, (double)c->scale);
    if (!(c->growth_factor > 1.0f) || isinf(c->growth_factor))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: growth_factor = %g, want a finite value > 1",
                        who, (double)c->growth_factor);
    if (!(c->backoff_factor > 0.0f && c->backoff_factor < 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: backoff_factor = %g, want 0 < backoff < 1", who,
                        (double)c->backoff_factor);
    if (c->growth_interval < 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: growth_interval = %d, want >= 1", who,
                        c->growth_interval);
    if (!(c->min_scale >= 0.0f) || isinf(c->min_scale))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: min_scale = %g, want a finite value >= 0", who,
                        (double)c->min_scale);
    if (!(c->max_scale > 0.0f) || c->max_scale < c->min_scale)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: max_scale = %g, want > 0 and >= min_scale %g",
                        who, (double)c->max_scale, (double)c->min_scale);
    if (c->hysteresis < 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: hysteresis = %d, want >= 1", who,
                        c->hysteresis);
    if (c->dynamic) { /* Apex: min(max_loss_scale, init_scale); our floor likewise */
        if (c->scale > c->max_scale) c->scale = c->max_scale;
        if (c->scale < c->min_scale) c->scale = c->min_scale;
    }
    return AMP_OK;
}

amp_status amp_scaler_create(const amp_scaler_config *c, amp_scaler **out) {
    AMP_CHECK_ARG(c);
    AMP_CHECK_ARG(out);
    *out = NULL;
    amp_scaler_config r;
    AMP_TRY(resolve_config(c, &r));
    amp_scaler *s = calloc(1, sizeof *s);
    if (!s) return amp_fail(AMP_ERR_OOM, "amp_scaler_create: out of memory");
    s->cfg = r;
    s->st.scale = r.scale;
    s->st.hysteresis_left = r.hysteresis;
    s->st.dynamic = r.dynamic;
    s->st.check_overflow = r.check_overflow;
    *out = s;
    return AMP_OK;
}

void amp_scaler_free(amp_scaler *s) { free(s); }

float amp_scaler_scale(const amp_scaler *s) { return s->st.scale; }

float amp_scaler_inv_scale(const amp_scaler *s) { return (float)(1.0 / (double)s->st.scale); }

bool amp_scaler_checks_overflow(const amp_scaler *s) { return s->st.check_overflow; }

bool amp_scaler_is_dynamic(const amp_scaler *s) { return s->st.dynamic; }

/* Writes the scale as Python prints a float (Apex's line shows "32768.0"). */
static void format_scale(char *buf, size_t size, float scale) {
    if (scale == floorf(scale) && scale < 1e16f) snprintf(buf, size, "%.1f", (double)scale);
    else snprintf(buf, size, "%.9g", (double)scale);
}

/* One overflow line, "Gradient overflow.  Skipping step, loss scaler N <what> <scale><note>",
 * subject to the rate limit. */
static void log_overflow(amp_scaler *s, const char *what, float scale, const char *note) {
    int64_t k = ++s->n_overflows;
    if (s->cfg.quiet || (k > LOG_FIRST && k % LOG_EVERY != 0)) return;
    char num[48];
    format_scale(num, sizeof num, scale);
    char count[64] = "";
    if (k == LOG_FIRST) snprintf(count, sizeof count, " (further overflows: every %dth)", LOG_EVERY);
    if (k > LOG_FIRST) snprintf(count, sizeof count, " (overflow %lld)", (long long)k);
    amp_log_msg(AMP_LOG_INFO, "Gradient overflow.  Skipping step, loss scaler %d %s %s%s%s",
            s->cfg.loss_id, what, num, note, count);
}

amp_scaler_params amp_scaler_params_of(const amp_scaler *s) {
    const amp_scaler_config *c = &s->cfg;
    return (amp_scaler_params){
        .growth_factor = c->growth_factor,
        .backoff_factor = c->backoff_factor,
        .floor = c->min_scale > SCALE_FLOOR ? c->min_scale : SCALE_FLOOR,
        .max_scale = c->max_scale,
        .growth_interval = c->growth_interval,
        .hysteresis = c->hysteresis,
        .dynamic = s->st.dynamic,
        .check_overflow = s->st.check_overflow,
    };
}

void amp_scaler_to_dev(const amp_scaler *s, amp_scaler_dev *d) {
    *d = (amp_scaler_dev){
        .scale = s->st.scale,
        .used_scale = s->st.scale,
        .inv_used_scale = amp_scaler_inv_scale(s),
        .half_grad_scale = amp_scaler_inv_scale(s),
        .clip_coef = 1.0f,
        .hysteresis_left = s->st.hysteresis_left,
        .growth_tracker = s->st.growth_tracker,
        .total_steps = s->st.total_steps,
        .skipped_steps = s->st.skipped_steps,
        .overflows = s->n_overflows,
        .taken_steps = s->st.total_steps - s->st.skipped_steps,
    };
}

/* The overflow lines of what happened between the host's state and the device's: one line per
 * overflow when there is one (the same words the update itself would have logged), else one
 * line for the lot. The single overflow's line states what that overflow did, recorded by the
 * update (overflow_scale, overflow_hysteresis), not the state now: clean steps after it may have grown
 * the scale and refilled the hysteresis; a scale that moved since is said after it. */
static void log_overflows_since(amp_scaler *s, const amp_scaler_dev *d) {
    int64_t k = d->overflows - s->n_overflows;
    if (k <= 0) return;
    if (k > 1) {
        s->n_overflows += k;
        char num[48];
        format_scale(num, sizeof num, d->scale);
        if (!s->cfg.quiet)
            amp_log_msg(AMP_LOG_INFO, "Gradient overflow.  Skipped %lld steps since the last report, "
                    "loss scaler %d's scale is now %s", (long long)k, s->cfg.loss_id, num);
        return;
    }
    char note[96] = "", now[48];
    bool kept = d->overflow_hysteresis > 0;
    if (s->st.dynamic && kept)
        snprintf(note, sizeof note, " (hysteresis reduced to %d)", d->overflow_hysteresis);
    if (d->scale != d->overflow_scale) {
        format_scale(now, sizeof now, d->scale);
        size_t used = strlen(note);
        snprintf(note + used, sizeof note - used, "; the scale has grown to %s since", now);
    }
    if (!s->st.dynamic) log_overflow(s, "keeping static loss scale", d->overflow_scale, note);
    else if (kept) log_overflow(s, "keeping loss scale at", d->overflow_scale, note);
    else log_overflow(s, "reducing loss scale to", d->overflow_scale, note);
}

void amp_scaler_from_dev(amp_scaler *s, const amp_scaler_dev *d) {
    log_overflows_since(s, d);
    s->st.scale = d->scale;
    s->st.growth_tracker = d->growth_tracker;
    s->st.hysteresis_left = d->hysteresis_left;
    s->st.total_steps = d->total_steps;
    s->st.skipped_steps = d->skipped_steps;
}

/* The host's update is the device's arithmetic (kernels/math/scaler.h) on a copy. */
bool amp_scaler_update(amp_scaler *s, bool found_inf, bool step_skipped) {
    amp_scaler_params p = amp_scaler_params_of(s);
    amp_scaler_dev d;
    amp_scaler_to_dev(s, &d);
    int skipped = amp_scaler_dev_update(&d, &p, found_inf, found_inf && s->st.check_overflow,
                                        step_skipped);
    amp_scaler_from_dev(s, &d);
    return skipped && found_inf && s->st.check_overflow;
}

void amp_scaler_get(const amp_scaler *s, amp_scaler_state *out) { *out = s->st; }

amp_status amp_scaler_set(amp_scaler *s, const amp_scaler_state *state) {
    AMP_CHECK_ARG(s);
    AMP_CHECK_ARG(state);
    const char *who = "amp_scaler_set_state";
    const amp_scaler_state *n = state;
    const amp_scaler_config *c = &s->cfg;
    if (!(n->scale >= SCALE_FLOOR) || isinf(n->scale))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: scale = %g, want a finite value >= 2^-126 "
                        "(so that 1/scale is finite)", who, (double)n->scale);
    if (n->dynamic && (n->scale > c->max_scale || n->scale < c->min_scale))
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: scale = %g is outside this scaler's [min_scale, max_scale] = [%g, %g]",
                        who, (double)n->scale, (double)c->min_scale, (double)c->max_scale);
    if (n->growth_tracker < 0 || (n->dynamic && n->growth_tracker >= c->growth_interval))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: growth_tracker = %lld, want 0 <= tracker < "
                        "growth_interval %d", who, (long long)n->growth_tracker,
                        c->growth_interval);
    if (n->hysteresis_left < 1 || n->hysteresis_left > c->hysteresis)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: hysteresis_left = %d, want 1 <= left <= "
                        "hysteresis %d", who, n->hysteresis_left, c->hysteresis);
    if (n->skipped_steps < 0 || n->total_steps < n->skipped_steps)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: skipped_steps = %lld, total_steps = %lld, want "
                        "0 <= skipped <= total", who, (long long)n->skipped_steps,
                        (long long)n->total_steps);
    if (n->dynamic && !n->check_overflow)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: dynamic = true with check_overflow = false: a "
                        "dynamic scale is driven by the overflow check", who);
    s->st = *n;
    return AMP_OK;
}
