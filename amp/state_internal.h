/* The amp layer's state, created by amp_initialize and hung on the context (ctx->amp, with the
 * hooks through which optim/ and nn/ reach it), where amp_backward finds it from the loss and
 * amp_step from the optimizer.
 *
 * Two ways to unscale, chosen once at amp_initialize:
 *  - deferred (one loss, one optimizer: torch.amp.GradScaler's order): backward leaves the
 *    gradients scaled; amp_unscale (or amp_clip_grad_norm, or amp_step) unscales them once, in one
 *    pass that also checks for inf/NaN; amp_step decides, steps, then moves the scale;
 *  - at each backward (several losses or several optimizers: Apex's order): every backward is
 *    unscaled at once with the scale it used and summed into f32 per-parameter sums, its loss's
 *    scaler is updated right away from its own overflow flag, and an overflow marks every
 *    optimizer whose gradients it reached to skip its next step (Apex's patched step). */
#ifndef AMP_AMP_STATE_INTERNAL_H
#define AMP_AMP_STATE_INTERNAL_H

#include "amp/mixed_precision.h"
#include "core/ctx.h"
#include "optim/optimizer_internal.h"
#include "amp/scaler_internal.h"

#define AMP_MAX_LOSSES 16
#define AMP_MAX_MODELS 8     /* Apex's lists are short: a GAN has two of each */
#define AMP_MAX_OPTIMIZERS 8

/* What the amp layer keeps per optimizer for the step in progress. */
typedef struct amp_opt_state {
    amp_optimizer *opt;
    bool unscaled;     /* deferred: this step's gradients are unscaled (or checked) already */
    bool skip;         /* at each backward: a backward of this step overflowed */
    bool reached;      /* at each backward: the backward being flushed wrote a gradient here */
    bool fresh;        /* a backward wrote a gradient here since the last amp_step or zero_grad:
                          amp_step refuses to step without one (torch's GradScaler: "No inf
                          checks were recorded for this optimizer") or twice on one */
    /* At each backward: per-parameter f32 sums of the unscaled gradients. With masters they are
     * the master gradients; without, views into accum_block. */
    void *accum_block;
    float **accum;
    bool *accum_has;   /* parameter i has a sum this step */
    amp_optim_inputs in; /* what this step hands the optimizer (amp_optimizer_apply) */
} amp_opt_state;

typedef struct amp_state {
    amp_options opts;
    amp_ctx *ctx;
    amp_model *models[AMP_MAX_MODELS];
    int n_models;
    amp_opt_state opts_state[AMP_MAX_OPTIMIZERS];
    int n_opts;
    bool at_each_backward;        /* the second way above */
    bool masters;                 /* O2: the optimizers keep f32 master weights */
    amp_scaler *scalers[AMP_MAX_LOSSES];
    float *found_inf;             /* backend scalars, one per loss: 1.0f after an inf/NaN */
    float used_scale[AMP_MAX_LOSSES]; /* the scale each loss's backward used this step (host
                                         mode) */
    /* The device mode (one loss, one optimizer): the scaler lives in backend memory and a step
     * never waits for the host (amp/scaler_sync.c). The host's amp_scaler is then a mirror
     * read when someone asks (stale until then), and the optimizer's step count is settled from
     * the device's count of taken steps. */
    bool device_scaler;
    amp_scaler_dev *scaler_dev;   /* backend memory, one per loss */
    bool scaler_dev_stale[AMP_MAX_LOSSES]; /* moved since the mirror was read */
    float seed_cap;               /* device mode: the cap of this step's first backward */
    int64_t taken_seen;           /* device mode: the device's taken_steps last settled */
    bool backward_seen[AMP_MAX_LOSSES];
    int64_t nonfinite_skips;      /* steps skipped by skip_nonfinite alone (log rate limit) */
} amp_state;

/* amp/options.c */
/* opt's state in st, or NULL (st NULL, or opt not under amp). */
amp_opt_state *amp_opt_state_find(amp_state *st, const struct amp_optimizer *opt);
/* Whether amp_scaler_set_state would take a state now (not between a backward and its step);
 * AMP_OK for an optimizer without amp. A checkpoint load asks before it changes anything. */
amp_status amp_scaler_state_settable(const char *who, const struct amp_optimizer *opt);
/* The options block amp_initialize logs (Apex's), into buf; returns the length it needed. */
size_t amp_options_describe(const amp_options *o, char *buf, size_t size);
void amp_options_log(const amp_options *o);

/* amp/initialize.c: the state of the optimizer's context and the optimizer's entry in it,
 * or AMP_ERR_STATE naming `who` when amp_initialize was not called for this optimizer. */
amp_status amp_state_of(const char *who, const amp_optimizer *opt, amp_state **st,
                        amp_opt_state **os);
/* Drops an optimizer's per-step state (amp_zero_grad, and after each amp_step). */
void amp_opt_state_reset(amp_state *st, amp_opt_state *os);

/* amp/unscaled_grad.c: where parameter i's unscaled gradient is after amp_unscale: f32
 * (writable: the master's, the at-each-backward sum's, or the model's own unscaled in place) or
 * a half gradient (O3) that still needs multiplying by `factor`, the step's half_grad_scale
 * (host mode; the device mode keeps it on the device). */
typedef struct amp_grad_view {
    void *data;   /* under ZeRO: the start of this rank's piece */
    amp_dtype dtype;
    float factor; /* what the stored values still need multiplying by */
    int64_t numel; /* the piece's elements (the parameter's, unless sharded) */
} amp_grad_view;
amp_grad_view amp_grad_view_of(amp_opt_state *os, int i);

/* amp/backward.c: the overflow flag of loss_id, read back (peek), or read and cleared. */
amp_status amp_found_inf_peek(const amp_state *st, int loss_id, bool *found);
amp_status amp_found_inf_take(amp_state *st, int loss_id, bool *found);
/* Makes loss_id's flag the same on every rank (the maximum) when a DDP watches the context. */
amp_status amp_found_inf_agree(amp_state *st, int loss_id);
/* hi[j] = the sum over the ranks of hi[j] + lo[j] (n backend f32 pairs: ZeRO's shards' sums of
 * squares and what their rounding dropped), added in f64 and rounded once, the same bits on
 * every rank, when a DDP watches the context; else nothing. */
amp_status amp_sum_over_ranks(amp_state *st, float *hi, const float *lo, int n);
/* Whether an inf/NaN skips the step for loss_id: its scaler checks overflow, or skip_nonfinite. */
bool amp_loss_checks(const amp_state *st, int loss_id);

/* amp/scaler_sync.c: the device scaler of the device mode. create allocates and fills it
 * from the host scalers; push writes a host scaler's state to it (a state restore); pull reads it
 * into the host mirror when it moved (logging what the device saw) and settles the optimizer's
 * step count. */
amp_status amp_scalers_dev_create(amp_state *st);
amp_status amp_scaler_dev_push(amp_state *st, int loss_id);
amp_status amp_scaler_dev_pull(amp_state *st, int loss_id);
amp_status amp_optimizer_settle_hook(void *amp, amp_optimizer *opt);

/* amp/step.c */
amp_status amp_step_hook(void *amp, amp_optimizer *opt, bool *handled);

#endif
