/* libamp optimizers: SGD, Adam/AdamW and LAMB, the first two with exactly PyTorch's update formulas (core/backend.h
 * spells them out). An optimizer holds its model's parameter list and its own state (momentum
 * buffers, Adam moments: f32, one allocation); it does not own the model. */
#ifndef AMP_OPTIM_H
#define AMP_OPTIM_H

#include "amp/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_optimizer amp_optimizer;

/* Options, with torch.optim's ranges: lr >= 0, momentum >= 0, dampening any value (torch checks
 * none), weight_decay >= 0, beta1 and beta2 in [0, 1), eps >= 0; every value must also be finite.
 * A value out of range makes amp_*_create fail with AMP_ERR_INVALID_ARG and a message naming the
 * field and its value ("opts.beta1 = 1 must be in [0, 1)").
 *
 * Two ways to fill them:
 *   - exact (start from amp_sgd_defaults() / amp_adam_defaults(), which set .exact = true, then
 *     change fields): every field is taken as written, zeros included, as torch.optim takes its
 *     arguments. Adam betas = (0, 0.99), eps = 0, a learning rate of 0 are expressed this way.
 *   - shorthand (.exact false, as in a compound literal that leaves it out):
 *       Adam: a 0 in lr, beta1, beta2 or eps means PyTorch's default for that field (1e-3, 0.9,
 *             0.999, 1e-8); weight_decay is taken as written.
 *       SGD:  every field is taken as written, but lr = 0 is refused (a zero-initialised lr
 *             would silently train nothing); the message says to set .exact = true or start
 *             from amp_sgd_defaults().
 * The optimizer keeps the resolved values with .exact = true, so options read back from it
 * create the same optimizer again. amp_optimizer_set_lr takes any lr >= 0 whatever .exact was.
 *
 * Numerics with zeros, as torch's: lr = 0 leaves parameters bit for bit as they were (AdamW's
 * decay factor is 1 - 0 * weight_decay = 1), except that adding a zero update may turn a -0
 * into +0 and a NaN update stays NaN; the step still runs and advances momentum buffers, Adam's
 * moments and step counts. beta1 = 0 makes exp_avg the gradient (bias correction 1 - 0^t = 1).
 * eps = 0 where the second moment is 0 gives 0 / 0 = NaN in that element, as torch does. */
typedef struct amp_sgd_opts {
    float lr;                                /* >= 0; 0 needs .exact (see above) */
    float momentum, dampening, weight_decay; /* torch.optim.SGD defaults are 0 */
    bool nesterov;                           /* needs momentum > 0 and dampening == 0 */
    bool exact;                              /* fields taken as written (see above) */
} amp_sgd_opts;

typedef struct amp_adam_opts {
    float lr;           /* >= 0; without .exact, 0 means PyTorch's default 1e-3 */
    float beta1, beta2; /* in [0, 1); without .exact, 0 means 0.9 and 0.999 */
    float eps;          /* >= 0; without .exact, 0 means 1e-8 */
    float weight_decay; /* L2 added to the gradient (Adam) or decoupled (AdamW); 0 is none */
    bool decoupled;     /* AdamW (torch.optim.AdamW; its default weight_decay 1e-2 is not applied
                           here: say it) */
    bool exact;         /* fields taken as written (see above) */
} amp_adam_opts;

/* LAMB (You et al. 2019) as NVIDIA Apex's FusedLAMB: Adam's direction plus decoupled weight decay,
 * scaled per tensor by the trust ratio ||w|| / ||update|| (1 where either norm is 0), after an
 * optional clip of the global gradient norm. The ranges of Adam's fields hold; max_grad_norm >= 0
 * (0: no clipping). Without .exact, zeros mean Apex's defaults (lr 1e-3, betas (0.9, 0.999),
 * eps 1e-6, max_grad_norm 1.0) and the flags are taken as written, so start from
 * amp_lamb_defaults() to get Apex's flags (bias correction and gradient averaging on, AdamW-style
 * decay). */
typedef struct amp_lamb_opts {
    float lr, beta1, beta2, eps;
    float weight_decay;     /* Apex's default 0.01 */
    float max_grad_norm;    /* global gradient clipping before the moments; 0: off */
    bool decoupled;         /* Apex adam_w_mode: decay inside the update (true) or L2 in the grad */
    bool bias_correction;   /* Apex default true */
    bool grad_averaging;    /* Apex default true: (1 - beta1) weighs the gradient in exp_avg */
    bool adapt_all;         /* Apex use_nvlamb: the trust ratio also where weight_decay is 0 */
    bool exact;
} amp_lamb_opts;

/* torch.optim.SGD's defaults (torch 2.x: lr 1e-3, momentum, dampening and weight_decay 0, no
 * nesterov) with .exact = true. */
amp_sgd_opts amp_sgd_defaults(void);
/* torch.optim.Adam's defaults (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0) with
 * .exact = true. For AdamW set .decoupled and .weight_decay (torch.optim.AdamW's is 1e-2). */
amp_adam_opts amp_adam_defaults(void);
/* Apex FusedLAMB's defaults (lr 1e-3, betas (0.9, 0.999), eps 1e-6, weight_decay 0.01,
 * max_grad_norm 1.0, adam_w_mode, bias_correction, grad_averaging, no use_nvlamb), .exact = true. */
amp_lamb_opts amp_lamb_defaults(void);

amp_status amp_sgd_create(amp_model *m, const amp_sgd_opts *opts, amp_optimizer **out);
amp_status amp_adam_create(amp_model *m, const amp_adam_opts *opts, amp_optimizer **out);
amp_status amp_lamb_create(amp_model *m, const amp_lamb_opts *opts, amp_optimizer **out);
void amp_optimizer_free(amp_optimizer *opt); /* NULL is a no-op */

/* One update of every parameter from its .grad (a parameter whose grad was not written since the
 * last zero_grad is skipped, as PyTorch skips a None grad). An f16/bf16 parameter is updated in
 * f32 and rounded back in the same pass. After amp_initialize it is amp_step(opt, NULL): unscale,
 * inf/NaN check, step or skip, new loss scale (Apex patches optimizer.step the same way). */
amp_status amp_optimizer_step(amp_optimizer *opt);
/* Marks every gradient empty (the next backward overwrites it) and releases the step's tensors
 * (amp_ctx_reset_step): tensors returned by ops are invalid afterwards. After amp_initialize it
 * also drops the amp layer's per-step state of this optimizer (sums of earlier backwards, an
 * overflow seen in them), so a discarded batch leaves no trace in the next step. */
amp_status amp_zero_grad(amp_optimizer *opt);
/* PyTorch's optimizer.zero_grad(): the gradients (and the amp state above) only; the step's
 * tensors and the autograd graph stay. For several optimizers over one graph (a GAN: clear the
 * discriminator's gradients between two backwards of the same forward). */
amp_status amp_optimizer_zero_grad(amp_optimizer *opt);

float amp_optimizer_lr(const amp_optimizer *opt);
/* Sets the learning rate of the next steps (a scheduler's job): any finite lr >= 0, 0 included
 * (a warm-up that starts at 0, a cosine schedule that ends at 0); a negative, NaN or infinite lr
 * is AMP_ERR_INVALID_ARG and leaves the rate as it was. */
amp_status amp_optimizer_set_lr(amp_optimizer *opt, float lr);
int64_t amp_optimizer_step_count(const amp_optimizer *opt);

/* ---- parameter groups (torch.optim's param_groups) ----
 * Every parameter starts in group 0, whose lr and weight decay are the options'. A group added
 * takes the parameters its match function accepts (or those it names) out of whatever group held
 * them, with its own lr and weight_decay; the rest of the update (momentum, betas, eps,
 * decoupling) is the optimizer's. nanoGPT's AdamW decays only the 2-D tensors: add a group of
 * those with fewer dimensions and weight_decay 0. Groups are added before the first step, at most
 * AMP_OPTIM_MAX_GROUPS in all; a group that would be empty, a name the optimizer does not have, an
 * lr or weight_decay below 0 or not finite is refused with nothing changed. Checkpoints carry each
 * group's lr and check that the groups hold the same parameters. amp_optimizer_lr reads group 0's
 * rate, amp_optimizer_set_lr sets every group's (a schedule over one base rate, as nanoGPT's);
 * amp_optimizer_set_group_lr sets one. LAMB's max_grad_norm clips within one fused call, so LAMB
 * with clipping takes one group (else the step says to clip with amp_clip_grad_norm). */
#define AMP_OPTIM_MAX_GROUPS 16
typedef struct amp_param_group_opts {
    float lr, weight_decay;
} amp_param_group_opts;
typedef bool (*amp_param_match_fn)(const char *name, const amp_tensor *param, void *user);
amp_status amp_optimizer_add_group(amp_optimizer *opt, amp_param_match_fn match, void *user,
                                   const amp_param_group_opts *g, int *group);
amp_status amp_optimizer_add_group_named(amp_optimizer *opt, const char *const *names, int n_names,
                                         const amp_param_group_opts *g, int *group);
int amp_optimizer_n_groups(const amp_optimizer *opt);
/* -1, and 0 for a group's lr and weight decay, when i or group is out of range (or opt NULL),
 * with the reason in amp_last_error. */
int amp_optimizer_param_group(const amp_optimizer *opt, int i);
float amp_optimizer_group_lr(const amp_optimizer *opt, int group);
float amp_optimizer_group_weight_decay(const amp_optimizer *opt, int group);
amp_status amp_optimizer_set_group_lr(amp_optimizer *opt, int group, float lr);
amp_model *amp_optimizer_model(const amp_optimizer *opt);

/* ---- learning-rate schedules (nanoGPT's get_lr) ----
 * The rate of step s = 0, 1, 2, ... (the step about to run):
 *   s <  warmup_steps:  max_lr (s + 1) / (warmup_steps + 1)   (a linear warm-up, never 0)
 *   s >= decay_steps:   min_lr                                (decay_steps: where decay ends)
 *   otherwise, with t = (s - warmup_steps) / (decay_steps - warmup_steps) in [0, 1):
 *     AMP_LR_COSINE     min_lr + (max_lr - min_lr) (1 + cos(pi t)) / 2
 *     AMP_LR_LINEAR     max_lr + (min_lr - max_lr) t
 *     AMP_LR_CONSTANT   max_lr (min_lr and decay_steps unused; warm-up still applies)
 * computed in double and rounded to f32 once. Valid schedules: 0 <= min_lr <= max_lr, both
 * finite; 0 <= warmup_steps <= decay_steps (decay_steps unused by CONSTANT); a known decay.
 * amp_lr_at checks the schedule and step >= 0 (AMP_ERR_INVALID_ARG naming the field, *lr
 * untouched); amp_optimizer_schedule sets every group's rate to amp_lr_at(s, step) (as nanoGPT
 * sets each param_group's lr), which amp-train calls before each step; a C user calls it the
 * same way for any model. */
typedef enum amp_lr_decay {
    AMP_LR_CONSTANT = 0,
    AMP_LR_COSINE = 1,
    AMP_LR_LINEAR = 2,
} amp_lr_decay;
typedef struct amp_lr_schedule {
    float max_lr, min_lr;
    int64_t warmup_steps, decay_steps;
    amp_lr_decay decay;
} amp_lr_schedule;
amp_status amp_lr_at(const amp_lr_schedule *s, int64_t step, float *lr);
amp_status amp_optimizer_schedule(amp_optimizer *opt, const amp_lr_schedule *s, int64_t step);

#ifdef __cplusplus
}
#endif
#endif
