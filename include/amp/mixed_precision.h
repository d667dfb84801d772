/* libamp mixed precision: Apex's opt levels, autocast, fp32 master weights and a dynamic loss
 * scaler (torch.amp.GradScaler's algorithm with Apex's bounds).
 *
 *     amp_initialize(model, opt, AMP_O1);          // once, after building model and optimizer
 *     for (...) {
 *         amp_model_forward(model, x, &logits); amp_cross_entropy(logits, y, &loss);
 *         amp_backward(loss);                      // backward of loss * scale
 *         bool stepped; amp_step(opt, &stepped);   // unscale + inf check; step or skip; new scale
 *         amp_zero_grad(opt);
 *     }
 *
 * The opt levels are Apex's, property for property:
 *   level  cast_model_type  autocast  keep_batchnorm_fp32  master_weights  loss_scale
 *   O0     f32              no        (none)               no              1.0
 *   O1     (none)           yes       (none)               (none)          dynamic
 *   O2     half             no        yes                  yes             dynamic
 *   O3     half             no        no                   no              1.0
 * "half" is half_type: f16 (default) or bf16. bf16 has f32's range, so with bf16 the default loss
 * scale is 1.0 with no overflow checks (an explicit AMP_LOSS_SCALE_DYNAMIC turns scaling and its
 * checks on). A static scale other than 1 with f16 also checks (and skips), where Apex checks
 * nothing: a skipped step beats a model full of NaN. */
#ifndef AMP_MIXED_PRECISION_H
#define AMP_MIXED_PRECISION_H

#include "amp/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amp_opt_level { AMP_O0 = 0, AMP_O1 = 1, AMP_O2 = 2, AMP_O3 = 3 } amp_opt_level;

/* An overridable property: AMP_OPT_DEFAULT keeps the level's value (Apex's "None" kwarg);
 * AMP_OPT_NONE is Apex's None value itself (the property does not apply). */
typedef enum amp_opt_flag {
    AMP_OPT_DEFAULT = 0, AMP_OPT_NONE = 1, AMP_OPT_FALSE = 2, AMP_OPT_TRUE = 3
} amp_opt_flag;

typedef enum amp_cast_type {
    AMP_CAST_DEFAULT = 0, /* the level's */
    AMP_CAST_NONE = 1,    /* leave the model's types alone (O1) */
    AMP_CAST_F32 = 2,
    AMP_CAST_HALF = 3,    /* half_type */
} amp_cast_type;

typedef enum amp_half_type { AMP_HALF_DEFAULT = 0, AMP_HALF_F16 = 1, AMP_HALF_BF16 = 2 } amp_half_type;

#define AMP_LOSS_SCALE_DYNAMIC (-1.0f)

/* Zero-initialised fields keep the level's defaults. */
typedef struct amp_options {
    amp_opt_level opt_level;
    amp_half_type half_type;
    amp_cast_type cast_model_type;
    amp_opt_flag autocast;            /* Apex's patch_torch_functions */
    amp_opt_flag keep_batchnorm_fp32;
    amp_opt_flag master_weights;
    float loss_scale;                 /* 0: the level's; AMP_LOSS_SCALE_DYNAMIC; or > 0: static */
    float min_loss_scale;             /* dynamic only; 0: no floor */
    float max_loss_scale;             /* dynamic only; 0: 2^24 (Apex) */
    amp_cast_type cast_model_outputs; /* 0: f32 when the model is cast (Apex) */
    int num_losses;                   /* 0: 1 */
    /* Dynamic scaler (0: PyTorch/Apex defaults 65536, 2.0, 0.5, 2000, 1). */
    float init_scale, growth_factor, backoff_factor;
    int growth_interval;
    int hysteresis; /* overflows in a row before backing off (DeepSpeed's); each skips its step */
    bool quiet;     /* no options block, no overflow lines (Apex's verbosity=0) */
} amp_options;

/* The resolved options of a level with no overrides (an unknown level gives O1's, Apex's default;
 * amp_initialize rejects it). */
amp_options amp_options_for_level(amp_opt_level level);

amp_status amp_initialize(amp_model *m, amp_optimizer *opt, amp_opt_level level);
amp_status amp_initialize_ex(amp_model *m, amp_optimizer *opt, const amp_options *opts);
/* The options in force after amp_initialize (AMP_ERR_STATE before). */
amp_status amp_get_options(const amp_optimizer *opt, amp_options *out);

/* Backward of loss * (loss scale of loss_id); amp_backward uses loss 0. Without amp_initialize it
 * is plain backward. */
amp_status amp_backward(amp_tensor *loss);
amp_status amp_backward_ex(amp_tensor *loss, int loss_id);
/* Unscales every gradient in one pass and records whether one is inf/NaN; the next amp_step does
 * not unscale again. Call it before clipping. */
amp_status amp_unscale(amp_optimizer *opt);
/* Scales the (unscaled) gradients so that their global L2 norm is at most max_norm (torch's
 * clip_grad_norm_: factor min(1, max_norm / (norm + 1e-6))); *norm_out (may be NULL) gets the
 * norm before clipping (inf/NaN when the step will be skipped). Unscales first if needed. */
amp_status amp_clip_grad_norm(amp_optimizer *opt, float max_norm, float *norm_out);
/* Unscale (unless done) + inf check; on overflow skips the step (parameters and optimizer state
 * untouched, step count not advanced) and backs the scale off, else steps the optimizer (masters
 * and half copies) and grows the scale after growth_interval clean steps. *stepped (may be NULL)
 * says which. amp_step_ex takes the loss_id whose scaler decides (every loss's gradients are
 * unscaled by the scale their backward used). */
amp_status amp_step(amp_optimizer *opt, bool *stepped);

/* The loss scaler's whole state, for checkpoints and schedules. */
typedef struct amp_scaler_state {
    float scale;
    int64_t growth_tracker; /* clean steps since the last change */
    int hysteresis_left;
    int64_t skipped_steps, total_steps;
    bool dynamic, check_overflow;
} amp_scaler_state;

amp_status amp_scaler_get_state(const amp_optimizer *opt, int loss_id, amp_scaler_state *out);
amp_status amp_scaler_set_state(amp_optimizer *opt, int loss_id, const amp_scaler_state *state);

#ifdef __cplusplus
}
#endif
#endif
