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
    amp_opt_flag keep_batchnorm_fp32; /* every norm's: batch norms and amp_model_set_norm's;
                                         the LayerNorm and RMSNorm modules stay f32 always */
    amp_opt_flag master_weights;
    float loss_scale;                 /* 0: the level's; AMP_LOSS_SCALE_DYNAMIC; or > 0: static */
    float min_loss_scale;             /* dynamic only; 0: no floor */
    float max_loss_scale;             /* dynamic only; 0: 2^24 (Apex) */
    amp_cast_type cast_model_outputs; /* 0: f32 when the model is cast (Apex) */
    int num_losses;                   /* 0: 1 (at most 16) */
    /* Dynamic scaler (0: PyTorch/Apex defaults 65536, 2.0, 0.5, 2000, 1). */
    float init_scale, growth_factor, backoff_factor;
    int growth_interval;
    int hysteresis; /* overflows tolerated (each skips its step, keeping the scale) before the
                       scale backs off; refilled when the scale grows (DeepSpeed's) */
    bool quiet;     /* no options block, no overflow lines (Apex's verbosity=0) */
    amp_opt_flag skip_nonfinite; /* see above; AMP_OPT_DEFAULT: the level's */
} amp_options;

/* A level's preset, to change fields of before amp_initialize_ex (an unknown level gives O1's,
 * Apex's default; amp_initialize rejects it). The defaults that depend on the half type stay 0
 * here, half_type and loss_scale, and are settled when the options are applied: setting
 * half_type = AMP_HALF_BF16 on it gives bf16's loss scale of 1, exactly as
 * (amp_options){.opt_level = AMP_O1, .half_type = AMP_HALF_BF16} does. */
amp_options amp_options_for_level(amp_opt_level level);
/* What amp_initialize_ex would make of opts: every default settled (half_type f16 unless set,
 * the loss scale for the half type) and Apex's consistency checks made (an error says why).
 * amp_get_options gives the same after amp_initialize. */
amp_status amp_options_resolve(const amp_options *opts, amp_options *out);

amp_status amp_initialize(amp_model *m, amp_optimizer *opt, amp_opt_level level);
amp_status amp_initialize_ex(amp_model *m, amp_optimizer *opt, const amp_options *opts);
/* Apex's amp.initialize([G, D], [optG, optD], num_losses=3): several models (all on one context)
 * and optimizers (each over one of the models) under one set of options. With several losses or
 * several optimizers each backward is unscaled right after it runs, with its own loss's scale,
 * into f32 sums per parameter (Apex's order): its loss's scaler moves at once, and an overflow
 * makes every optimizer the backward reached skip its next amp_step. On failure every model and
 * optimizer is left as it was. */
amp_status amp_initialize_multi(amp_model *const *models, int n_models,
                                amp_optimizer *const *opts, int n_opts, const amp_options *options);
/* Undoes amp_initialize for the context: cast models go back to f32 (from the masters where there
 * are masters, so an O2 model gets its exact f32 weights back; else widened), the masters are
 * released, autocast is off, the scalers are gone; optimizer state (momentum, Adam moments) stays.
 * Models and optimizers may then be freed in any order, or amp_initialize called again. Freeing a
 * model or optimizer under amp is also safe: the amp layer forgets it. */
amp_status amp_deinitialize(amp_ctx *ctx);
/* The options in force after amp_initialize (AMP_ERR_STATE before). */
amp_status amp_get_options(const amp_optimizer *opt, amp_options *out);

/* Backward of loss * (loss scale of loss_id); amp_backward uses loss 0. Without amp_initialize it
 * is plain backward. The seed is formed in f32; a half loss is seeded with at most the largest
 * power of two its dtype holds (2^15 for f16), and its gradients are unscaled by exactly the scale
 * used. The graph is released afterwards unless retain_graph (PyTorch's), which lets a second loss
 * of the same forward (a shared trunk, a GAN's generator loss through the discriminator) be
 * back-propagated; gradients of parameters add up over backwards, as in PyTorch.
 * Saved tensors (PyTorch's "modified by an inplace operation"): each op records the write version
 * of every tensor its backward will read (its inputs, its output, what it saved; not those it
 * never reads: an add's operands, a cast's input, embedding's weight, relu's input). A write
 * after the forward (amp_tensor_copy_from_host, amp_accumulate, a checkpoint load, amp_step on
 * the weights a retained graph read) makes amp_backward of a loss that reaches that op fail with
 * AMP_ERR_STATE naming the op, the input and both versions, before anything is written: no
 * gradient changes, no amp state moves, and the graph stays as it was until amp_zero_grad or
 * amp_ctx_reset_step (another loss that does not reach the op still back-propagates). Run the
 * forward again after such a write. Under O1 a GEMM reads autocast's half copy of a weight, which
 * a step leaves as it was while a graph holds it, so that graph's backward is its own gradient
 * and is not refused. */
typedef struct amp_backward_opts {
    int loss_id;
    bool retain_graph;
} amp_backward_opts;
amp_status amp_backward(amp_tensor *loss);
amp_status amp_backward_ex(amp_tensor *loss, int loss_id);
amp_status amp_backward_with(amp_tensor *loss, const amp_backward_opts *opts);
/* Unscales every gradient in one pass and records whether one is inf/NaN; the next amp_step does
 * not unscale again. Call it before clipping. */
amp_status amp_unscale(amp_optimizer *opt);
/* Scales the (unscaled) gradients so that their global L2 norm is at most max_norm (torch's
 * clip_grad_norm_: factor min(1, max_norm / (norm + 1e-6))); *norm_out (may be NULL) gets the
 * norm before clipping (inf/NaN when the step will be skipped). Unscales first if needed. */
amp_status amp_clip_grad_norm(amp_optimizer *opt, float max_norm, float *norm_out);
/* The gradient the optimizer will step param with, unscaled (and clipped, after
 * amp_clip_grad_norm), as numel floats into host (nbytes = numel * 4): torch.amp's p.grad after
 * scaler.unscale_(opt), Apex O2's master .grad. amp_tensor_get_grad instead gives the model's
 * gradient as backward wrote it: times the loss scale until the step, and at O2 in the half
 * type. Valid between amp_unscale (or amp_clip_grad_norm) and amp_step; before amp_unscale it is
 * AMP_ERR_STATE (the values are still scaled), as it is for a parameter without a gradient. At
 * O3 it is the half gradient times the factor the optimizer applies, in f32. */
amp_status amp_unscaled_grad_to_host(amp_optimizer *opt, const amp_tensor *param, float *host,
                                     size_t nbytes);
/* Unscale (unless done) + inf check; on overflow skips the step (parameters and optimizer state
 * untouched, step count not advanced) and backs the scale off, else steps the optimizer (masters
 * and half copies) and grows the scale after growth_interval clean steps. *stepped (may be NULL)
 * says which. The optimizer steps before the scaler moves: a failing step leaves parameters,
 * optimizer state and scaler as they were. With several losses or optimizers each scaler moved
 * at its backward already, and the step is skipped when a backward that reached this optimizer
 * overflowed. amp_optimizer_step(opt) is the same call. A step needs a backward that wrote a
 * gradient of the optimizer's parameters since its last amp_step or amp_zero_grad: without one it
 * is refused (AMP_ERR_STATE, nothing changed), where torch's GradScaler raises "No inf checks
 * were recorded for this optimizer", and so is a second step on the same gradients, which would
 * apply them twice. */
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
/* Between steps only (torch's GradScaler state is defined between iterations): with one loss and
 * one optimizer, a call after amp_backward and before amp_step or amp_zero_grad is AMP_ERR_STATE
 * and changes nothing (the step would unscale with the new scale). */
amp_status amp_scaler_set_state(amp_optimizer *opt, int loss_id, const amp_scaler_state *state);

#ifdef __cplusplus
}
#endif
#endif
