/* The optimizer's internals: creation from a plain list of parameter tensors (what
 * amp_sgd_create/amp_adam_create call with the model's list, and what tests use without a model)
 * and the per-parameter state that checkpoints save and restore.
 *
 * State follows torch.optim's state_dict: per parameter index, SGD with momentum holds
 * "momentum_buffer"; Adam/AdamW hold "exp_avg", "exp_avg_sq" and "step" (the parameter's own
 * step count: a parameter without a gradient on some step lags behind, as in PyTorch). A
 * parameter has state once it has been stepped with a gradient (torch creates it lazily then);
 * before that its buffers read as zeros. All state tensors are f32 views, shaped like their
 * parameter, into one backend allocation owned by the optimizer. */
#ifndef AMP_OPTIM_OPTIMIZER_INTERNAL_H
#define AMP_OPTIM_OPTIMIZER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/optim.h"
#include "core/backend.h"

typedef enum amp_optim_kind { AMP_OPTIM_SGD = 0, AMP_OPTIM_ADAM = 1 } amp_optim_kind;

/* Fields are for the files of optim/; other modules use the functions below. */
struct amp_optimizer {
    amp_optim_kind kind;
    amp_sgd_opts sgd;   /* kind SGD */
    amp_adam_opts adam; /* kind ADAM, PyTorch defaults filled in */
    amp_model *model;   /* NULL when created from a tensor list */
    amp_ctx *ctx;       /* amp_zero_grad resets its step */
    const amp_backend *backend;
    int n_params;
    amp_tensor **params;  /* borrowed */
    const char **names;   /* borrowed; an entry may be NULL */
    int n_state;          /* state tensors per parameter: 0 (plain SGD), 1 (SGD) or 2 (Adam) */
    void *state_data;     /* the one allocation behind every state view */
    amp_tensor **state;   /* n_params * n_state views; parameter i, tensor j at [i * n_state + j] */
    bool *has_state;
    int64_t *param_steps; /* Adam's per-parameter step */
    int64_t n_steps;      /* amp_optimizer_step calls that succeeded */
};

/* An optimizer over n f32 parameters (borrowed; they must outlive it), all on one backend.
 * names[i] (or names NULL) labels parameter i in messages. The model-based creators of
 * include/amp/optim.h call these with the model's list. */
amp_status amp_sgd_create_params(amp_tensor *const *params, const char *const *names, int n,
                                 const amp_sgd_opts *opts, amp_optimizer **out);
amp_status amp_adam_create_params(amp_tensor *const *params, const char *const *names, int n,
                                  const amp_adam_opts *opts, amp_optimizer **out);

/* Shared by sgd.c and adam.c: validates the list, allocates n_state zeroed state tensors per
 * parameter. `who` prefixes messages. */
amp_status amp_optimizer_create_common(const char *who, amp_optim_kind kind,
                                       amp_tensor *const *params, const char *const *names, int n,
                                       int n_state, amp_optimizer **out);
/* "'fc.weight'" or "#3": how messages name parameter i. */
const char *amp_optimizer_param_label(const amp_optimizer *opt, int i, char *buf, size_t size);
/* One parameter's update (its gradient checked by the caller). */
amp_status amp_sgd_step_param(amp_optimizer *opt, int i);
amp_status amp_adam_step_param(amp_optimizer *opt, int i);

/* ---- accessors for checkpoints ---- */
amp_optim_kind amp_optimizer_kind(const amp_optimizer *opt);
int amp_optimizer_n_params(const amp_optimizer *opt);
amp_tensor *amp_optimizer_param(const amp_optimizer *opt, int i);
/* NULL when the optimizer is not of that kind. */
const amp_sgd_opts *amp_optimizer_sgd_opts(const amp_optimizer *opt);
const amp_adam_opts *amp_optimizer_adam_opts(const amp_optimizer *opt);
/* Names of the state tensors each parameter has (j < amp_optimizer_n_state). */
int amp_optimizer_n_state(const amp_optimizer *opt);
const char *amp_optimizer_state_name(const amp_optimizer *opt, int j);
/* Parameter i's state tensor by name ("momentum_buffer", "exp_avg", "exp_avg_sq"): an f32 view
 * owned by the optimizer, writable (a checkpoint load copies into it). A name this optimizer
 * does not hold is AMP_ERR_INVALID_ARG. */
amp_status amp_optimizer_state_tensor(const amp_optimizer *opt, int i, const char *name,
                                      amp_tensor **out);
/* Whether parameter i has state yet (torch: it appears in state_dict()["state"]). */
bool amp_optimizer_has_state(const amp_optimizer *opt, int i);
/* Adam's "step" of parameter i (0 before its first update); SGD has none: AMP_ERR_INVALID_ARG. */
amp_status amp_optimizer_state_step(const amp_optimizer *opt, int i, int64_t *step);
/* After copying state tensors in: marks parameter i as having state (or not) and, for Adam,
 * sets its step (>= 1 with state, 0 without). */
amp_status amp_optimizer_state_restore(amp_optimizer *opt, int i, bool has_state, int64_t step);
amp_status amp_optimizer_set_step_count(amp_optimizer *opt, int64_t n_steps);

#endif
