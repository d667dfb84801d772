/* The amp layer's state, created by amp_initialize and hung on the context (ctx->amp), where
 * amp_backward finds it from the loss and amp_step from the optimizer's model. */
#ifndef AMP_AMP_STATE_H
#define AMP_AMP_STATE_H

#include "amp/mixed_precision.h"
#include "amp/scaler.h"
#include "core/ctx.h"

#define AMP_MAX_LOSSES 16

typedef struct amp_state {
    amp_options opts;
    amp_model *model;
    amp_optimizer *opt;
    amp_ctx *ctx;
    bool masters;                 /* the optimizer reads f32 master gradients (O2, O3) */
    amp_scaler *scalers[AMP_MAX_LOSSES];
    float *found_inf;             /* backend scalars, one per loss: 1.0f after an inf/NaN */
    float used_scale[AMP_MAX_LOSSES]; /* the scale each loss's backward used this step */
    bool backward_seen[AMP_MAX_LOSSES];
    bool unscaled;                /* this step's gradients are unscaled already */
    /* num_losses > 1: each backward is unscaled at once (Apex) and summed here, per parameter.
     * With masters the sum is the master gradients; without, this f32 block. */
    void *accum_block;
    float **accum;                /* n_params views (f32) */
    bool *accum_has;              /* parameter i received a gradient this step */
} amp_state;

/* amp/options.c */
amp_status amp_options_resolve(const amp_options *user, amp_options *out);
void amp_options_log(const amp_options *o);

/* The state of the optimizer's context, or AMP_ERR_STATE naming `who` when amp_initialize was not
 * called for it. */
amp_status amp_state_of(const char *who, const amp_optimizer *opt, amp_state **out);
void amp_state_free(void *state);

#endif
