/* The loss scaler's state machine: one per loss, plain C on the host, no tensors. amp/step.c
 * feeds it the step's overflow flag (from the backend's unscale pass) and asks it for the scale
 * of the next backward.
 *
 * Dynamic scale: torch.amp.GradScaler's update (ATen _amp_update_scale_) with Apex's bounds and
 * DeepSpeed's hysteresis:
 *   - overflow (inf/NaN in a gradient): the step is skipped; growth_tracker = 0; then, when
 *     hysteresis_left > 1, hysteresis_left -= 1 and the scale is KEPT (DeepSpeed's delayed
 *     shift), else scale = max(scale * backoff_factor, min_scale) (Apex's floor);
 *   - clean step: growth_tracker += 1; when it reaches growth_interval, growth_tracker = 0,
 *     hysteresis_left = hysteresis (DeepSpeed refills it at a growth, not at every clean step)
 *     and scale = min(scale * growth_factor, max_scale) (Apex's ceiling), except that a product
 *     that rounds to inf keeps the old scale (torch);
 *   - the products are formed in double and rounded to f32 once, as ATen does with its double
 *     factors, so non-power-of-two factors give torch's bits.
 *   With hysteresis 1 this is exactly torch's algorithm. Growth counts torch's way (the scale
 *   grows on the growth_interval-th clean step); DeepSpeed's own counter grows one step later.
 *   Without a min_scale the scale still never goes below 2^-126 (FLT_MIN): torch would reach 0
 *   after ~280 overflows in a row and stay there forever (0 * growth = 0, 1/0 = inf).
 * Static scale: never changes. It skips a step on overflow only when check_overflow is set;
 * Apex's static loss scale checks nothing (its update_scale skips only when dynamic), which is
 * check_overflow = false. A dynamic scaler always checks.
 *
 * Log: an overflow that skips writes one INFO line through core/log.h, in Apex's wording:
 *   "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0"
 * With hysteresis left the line reads "... keeping loss scale at X (hysteresis reduced to N)";
 * a static scale, "... keeping static loss scale X". Read lazily from the device (the sync-free
 * step), a line names the scale that overflow left, adding "; the scale has grown to Y since"
 * when clean steps have grown it before the read. Rate limit: the first 10 overflows of a
 * scaler, then every 100th (the 100th, 200th, ...; the line says which), so a diverged run
 * cannot flood the log. quiet silences it (Apex's verbosity=0).
 *
 * Not thread-safe: one scaler belongs to one training loop. */
#ifndef AMP_AMP_SCALER_INTERNAL_H
#define AMP_AMP_SCALER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/mixed_precision.h"

typedef struct amp_scaler amp_scaler;

/* Mirrors amp_options' scaler fields once resolved. A zero numeric field takes the default of
 * torch/Apex: scale 65536 (dynamic) or 1 (static), growth_factor 2, backoff_factor 0.5,
 * growth_interval 2000, min_scale none, max_scale 2^24 (Apex; INFINITY for none, as torch),
 * hysteresis 1. The dynamic fields are validated for a static scaler too: amp_scaler_set may
 * turn it dynamic. */
typedef struct amp_scaler_config {
    bool dynamic;
    float scale; /* finite, >= 2^-126. Dynamic: the initial scale, clamped into [min, max]
                    (Apex clamps it to max); static: the scale */
    float growth_factor;  /* > 1 (torch) */
    float backoff_factor; /* in (0, 1) (torch) */
    int growth_interval;  /* >= 1 */
    float min_scale;      /* >= 0, 0: no floor but 2^-126 */
    float max_scale;      /* >= min_scale */
    int hysteresis;       /* >= 1 */
    bool check_overflow;  /* static only; a dynamic scaler always checks */
    bool quiet;           /* no overflow lines */
    int loss_id;          /* named in the overflow line (Apex's "loss scaler N") */
} amp_scaler_config;

/* Validates c (AMP_ERR_INVALID_ARG naming the field) and allocates the scaler. */
amp_status amp_scaler_create(const amp_scaler_config *c, amp_scaler **out);
void amp_scaler_free(amp_scaler *s); /* NULL: no-op */

/* The scale of the next backward. */
float amp_scaler_scale(const amp_scaler *s);
/* 1 / scale in double, rounded to f32 once: torch's _scale.double().reciprocal().float(). */
float amp_scaler_inv_scale(const amp_scaler *s);
/* Whether an inf/NaN makes this scaler skip the step (dynamic, or static with check_overflow). */
bool amp_scaler_checks_overflow(const amp_scaler *s);
/* Whether the scale moves (a static scale is known on the host at all times). */
bool amp_scaler_is_dynamic(const amp_scaler *s);

/* Ends a step. found_inf: this scaler's loss had an inf/NaN gradient. step_skipped: the step was
 * skipped for another reason too (another loss's scaler overflowed; false with one loss).
 * Returns whether THIS scaler skips the step (found_inf and it checks overflow); counts the step
 * in total_steps, and in skipped_steps when it is skipped for either reason; moves the scale as
 * described above on its own found_inf only (Apex: each loss's scaler sees its own overflow). */
bool amp_scaler_update(amp_scaler *s, bool found_inf, bool step_skipped);

void amp_scaler_get(const amp_scaler *s, amp_scaler_state *out);

/* The same state machine on the device (kernels/math/scaler.h; the host's update above is that
 * arithmetic on a copy): the configuration it reads, the host state as a device struct, and the
 * device struct back into the host state, logging the overflows it saw since (each in the words
 * amp_scaler_update uses, or one line for several). */
struct amp_scaler_dev;
struct amp_scaler_params;
struct amp_scaler_params amp_scaler_params_of(const amp_scaler *s);
void amp_scaler_to_dev(const amp_scaler *s, struct amp_scaler_dev *d);
void amp_scaler_from_dev(amp_scaler *s, const struct amp_scaler_dev *d);
/* Replaces the whole state (checkpoint resume, schedules), including dynamic/check_overflow.
 * Rejects, with AMP_ERR_INVALID_ARG naming the field and leaving s unchanged: a scale that is
 * not finite and >= 2^-126 (1/scale must be finite), or outside [min_scale, max_scale] when dynamic; growth_tracker < 0 or, when
 * dynamic, >= growth_interval; hysteresis_left outside [1, hysteresis] when dynamic; negative
 * counters or skipped_steps > total_steps; dynamic without check_overflow. */
amp_status amp_scaler_set(amp_scaler *s, const amp_scaler_state *state);

#endif
