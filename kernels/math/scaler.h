/* The dynamic loss scaler's state and update rule in backend memory, shared by the host's
 * scaler (amp/scaler.c), the CPU backend's scaler entries and the CUDA backend's one-thread
 * kernels, so that a step needs no host synchronisation and both paths move the scale alike.
 * amp/scaler_internal.h states the algorithm and its sources (torch.amp.GradScaler's update with
 * Apex's bounds and DeepSpeed's hysteresis); these functions are its arithmetic. */
#ifndef AMP_KERNELS_MATH_SCALER_H
#define AMP_KERNELS_MATH_SCALER_H

#include <math.h>
#include <stdint.h>

#include "core/hd.h"

/* One loss's scaler as the device sees it. Written by the scaler entries only (seed, clip,
 * update); the host reads it back when asked (lazily) and writes it on a state restore. */
typedef struct amp_scaler_dev {
    float scale;           /* the scale of the next backward */
    float used_scale;      /* this step's seed: min(scale, the loss dtype's cap) */
    float inv_used_scale;  /* (float)(1.0 / used_scale), torch's double reciprocal: unscale's */
    float half_grad_scale; /* what the optimizer multiplies a still-scaled half gradient by:
                              inv_used_scale times the clip coefficient (O3) */
    float clip_coef;       /* the last clip's coefficient, 1 when it did not clip */
    float grad_norm;       /* the norm amp_clip_grad_norm measured this step */
    int32_t hysteresis_left;
    int32_t last_skipped;  /* 1 when the last update skipped its step */
    /* What the last overflow did, for its log line when the host reads this later (clean steps
     * may have grown the scale and refilled the hysteresis since): the scale it left, and the
     * hysteresis it left when it kept the scale (DeepSpeed's delayed shift), 0 when it cut it. */
    float overflow_scale;
    int32_t overflow_hysteresis;
    int64_t growth_tracker;
    int64_t total_steps, skipped_steps;
    int64_t overflows;     /* overflows this scaler skipped (the host's log lines count them) */
    int64_t taken_steps;   /* steps the optimizer took through this scaler */
} amp_scaler_dev;

/* The resolved configuration the update reads (amp/scaler.c fills it). */
typedef struct amp_scaler_params {
    float growth_factor, backoff_factor;
    float floor;     /* max(min_scale, 2^-126) */
    float max_scale;
    int64_t growth_interval;
    int32_t hysteresis;
    int32_t dynamic, check_overflow;
} amp_scaler_params;

/* scale * factor in double, rounded to f32 once (ATen multiplies its f32 scale by a double). */
AMP_HD static inline float amp_scaler_times(float scale, float factor) {
    return (float)((double)scale * (double)factor);
}

/* Seeds a step's backward: the scale used, its reciprocal, and no clipping yet. */
AMP_HD static inline void amp_scaler_dev_seed(amp_scaler_dev *s, float cap) {
    float used = s->scale < cap ? s->scale : cap;
    s->used_scale = used;
    s->inv_used_scale = (float)(1.0 / (double)used);
    s->half_grad_scale = s->inv_used_scale;
    s->clip_coef = 1.0f;
}

/* torch.nn.utils.clip_grad_norm_'s coefficient from the sums of squares of the f32 gradients and
 * of the still-scaled half ones (each part's exact f32 sum times the factor it still needs,
 * squared), added in double: norm = sqrt(total) in f32, coef = max_norm / (norm + 1e-6), applied
 * only when < 1. A NaN norm is left alone; an infinite one gives 0 (torch's too): either way the
 * step is skipped. clip_coef is this call's own coefficient (the f32 gradients are multiplied by
 * it in place, so a second clip in the step must not apply the first one's again); the half
 * gradients' factor takes the product of all clips of the step. */
AMP_HD static inline void amp_scaler_dev_clip(amp_scaler_dev *s, float sumsq_f32,
                                              float sumsq_half, float max_norm) {
    double f = (double)s->half_grad_scale;
    double total = (double)sumsq_f32 + (double)sumsq_half * f * f;
    float norm = (float)sqrt(total);
    float coef = max_norm / (norm + 1e-6f);
    s->grad_norm = norm;
    s->clip_coef = 1.0f;
    if (coef < 1.0f) {
        s->clip_coef = coef;
        s->half_grad_scale = s->half_grad_scale * coef;
    }
}

/* Ends a step: found (this loss had an inf/NaN gradient), checks (the step is skipped on one:
 * the scaler checks overflow, or skip_nonfinite), other_skip (skipped for another loss's
 * overflow). Returns whether the step was skipped; moves the scale on its own overflow only. */
AMP_HD static inline int amp_scaler_dev_update(amp_scaler_dev *s, const amp_scaler_params *p,
                                               int found, int checks, int other_skip) {
    int own = found && p->check_overflow;
    int skipped = (found && checks) || own || other_skip;
    s->total_steps++;
    if (skipped) s->skipped_steps++;
    else s->taken_steps++;
    s->last_skipped = skipped;
    if (own) s->overflows++;
    if (!p->dynamic) {
        if (own) s->overflow_scale = s->scale;
        return skipped;
    }
    if (own) {
        s->growth_tracker = 0;
        if (s->hysteresis_left > 1) { /* DeepSpeed's delayed shift: skip, keep the scale */
            s->hysteresis_left--;
            s->overflow_hysteresis = s->hysteresis_left;
        } else {
            float next = amp_scaler_times(s->scale, p->backoff_factor);
            s->scale = next < p->floor ? p->floor : next;
            s->overflow_hysteresis = 0;
        }
        s->overflow_scale = s->scale;
    } else if (++s->growth_tracker >= p->growth_interval) {
        s->growth_tracker = 0;
        s->hysteresis_left = p->hysteresis;
        float next = amp_scaler_times(s->scale, p->growth_factor);
        if (next > p->max_scale) next = p->max_scale;
        if (!isinf(next)) s->scale = next; /* torch: do not grow past f32 to inf */
    }
    return skipped;
}

#endif
