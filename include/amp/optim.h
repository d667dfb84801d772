/* libamp optimizers: SGD and Adam/AdamW with exactly PyTorch's update formulas (core/backend.h
 * spells them out). An optimizer holds its model's parameter list and its own state (momentum
 * buffers, Adam moments: f32, one allocation); it does not own the model. */
#ifndef AMP_OPTIM_H
#define AMP_OPTIM_H

#include "amp/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_optimizer amp_optimizer;

typedef struct amp_sgd_opts {
    float lr; /* > 0 */
    float momentum, dampening, weight_decay; /* >= 0; torch.optim.SGD defaults are 0 */
    bool nesterov;                           /* needs momentum > 0 and dampening == 0 */
} amp_sgd_opts;

typedef struct amp_adam_opts {
    float lr;           /* 0 means PyTorch's default 1e-3 */
    float beta1, beta2; /* 0 means 0.9 and 0.999; each must be in [0, 1) */
    float eps;          /* 0 means 1e-8 */
    float weight_decay; /* L2 added to the gradient (Adam) or decoupled (AdamW) */
    bool decoupled;     /* AdamW (torch.optim.AdamW; its default weight_decay 1e-2 is not applied
                           here: say it) */
} amp_adam_opts;

amp_status amp_sgd_create(amp_model *m, const amp_sgd_opts *opts, amp_optimizer **out);
amp_status amp_adam_create(amp_model *m, const amp_adam_opts *opts, amp_optimizer **out);
void amp_optimizer_free(amp_optimizer *opt); /* NULL is a no-op */

/* One update of every parameter from its .grad (or, after amp_initialize with a half model, from
 * its f32 master gradient) (a parameter whose grad was not written since the
 * last zero_grad is skipped, as PyTorch skips a None grad). */
amp_status amp_optimizer_step(amp_optimizer *opt);
/* Marks every gradient empty (the next backward overwrites it) and releases the step's tensors
 * (amp_ctx_reset_step). */
amp_status amp_zero_grad(amp_optimizer *opt);

float amp_optimizer_lr(const amp_optimizer *opt);
amp_status amp_optimizer_set_lr(amp_optimizer *opt, float lr);
int64_t amp_optimizer_step_count(const amp_optimizer *opt);
amp_model *amp_optimizer_model(const amp_optimizer *opt);

#ifdef __cplusplus
}
#endif
#endif
