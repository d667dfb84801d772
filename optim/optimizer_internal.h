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

#include "amp/memory.h"
#include "amp/optim.h"
#include "core/backend.h"

typedef enum amp_optim_kind {
    AMP_OPTIM_SGD = 0,
    AMP_OPTIM_ADAM = 1,
    AMP_OPTIM_LAMB = 2,
} amp_optim_kind;

/* Adam and LAMB count steps per parameter and hold exp_avg and exp_avg_sq. */
static inline bool amp_optim_kind_has_steps(amp_optim_kind k) {
    return k == AMP_OPTIM_ADAM || k == AMP_OPTIM_LAMB;
}

/* Where the step's f32 values live (optim/masters.c says why each exists). */
typedef enum amp_optim_masters {
    AMP_OPTIM_MASTERS_NONE = 0,       /* parameters updated in place (an f16/bf16 one through f32
                                         chunks: O3, or no amp at all) */
    AMP_OPTIM_MASTERS_PERSISTENT = 1, /* O2: f32 masters are the weights; the model holds copies */
} amp_optim_masters;

/* What one update reads besides the parameters' own gradients: the amp layer's inputs of the
 * step, passed to amp_optimizer_apply (AMP_OPTIM_INPUTS_NONE: a plain step). */
typedef struct amp_optim_inputs {
    float *const *grad_source;  /* NULL, or n_params f32 gradients read instead of .grad (the
                                   sums of several backwards, each unscaled at once); an entry
                                   may be NULL */
    float half_grad_scale;      /* multiplies an f16/bf16 gradient read without masters (O3:
                                   unscaled by the update as it loads it; 1 = as is) */
    /* A sync-free step (backend scalars, NULL: not used): the overflow flag the fused kernels
     * read (set: they write nothing), and the factor a still-scaled half gradient is multiplied
     * by (replaces half_grad_scale). */
    const float *dev_found_inf;
    const float *dev_half_grad_scale;
    bool outcome_on_device;     /* found_inf decides on the device: apply does not count it */
} amp_optim_inputs;
#define AMP_OPTIM_INPUTS_NONE ((amp_optim_inputs){.half_grad_scale = 1.0f})

/* Fields are for the files of optim/; other modules use the functions below. */
struct amp_optimizer {
    amp_optim_kind kind;
    amp_sgd_opts sgd;   /* kind SGD */
    amp_adam_opts adam; /* kind ADAM, PyTorch defaults filled in */
    amp_lamb_opts lamb; /* kind LAMB, Apex defaults filled in */
    amp_model *model;   /* NULL when created from a tensor list */
    amp_ctx *ctx;       /* amp_zero_grad resets its step */
    const amp_backend *backend;
    int n_params;
    amp_tensor **params;  /* borrowed */
    const char **names;   /* borrowed; an entry may be NULL */
    int n_state;          /* state tensors per parameter: 0 (plain SGD), 1 (SGD) or 2 (Adam) */
    void *state_data;     /* the one allocation behind every state view */
    amp_tensor **state;   /* n_params * n_state views; parameter i, tensor j at [i * n_state + j] */
    bool *has_state;      /* host mirror: steps[i] > 0 (as of the last refresh) */
    int64_t *param_steps; /* host mirror of dev_steps (as of the last refresh) */
    int64_t *dev_steps;   /* backend memory, n_params: each parameter's step count (torch's
                             state['step'], kept for SGD too: its first step makes the momentum
                             buffer); the fused updates read and advance it on the device */
    bool steps_stale;     /* dev_steps moved since the mirror was read */
    int64_t n_steps;      /* amp_optimizer_step calls that succeeded (settled by the amp layer
                             where the device decided) */
    amp_optim_masters masters;  /* NONE until amp_optimizer_make_masters */
    void *master_data;          /* one block behind every master view */
    void *master_grad_data;     /* one block behind every master-gradient view */
    amp_tensor **master_views;  /* n_params f32 views shaped like the parameters */
    amp_tensor **master_grads;  /* n_params f32 views */
    /* Parameter groups (optim/param_groups.c): groups[g] for g >= 1, group 0 being the
     * options' own lr and weight decay; group_of[i] is parameter i's group. */
    int n_groups;
    amp_param_group_opts groups[AMP_OPTIM_MAX_GROUPS];
    int *group_of;
    /* ZeRO (optim/shard.c): this rank steps elements [shard_lo[i], shard_hi[i]) of parameter
     * i, and its state, masters and master gradients hold only those (NULL: every parameter
     * whole). After each update, shard_gather (set by the sharding layer) gives every rank the
     * others' updated elements. */
    int64_t *shard_lo, *shard_hi;
    amp_status (*shard_gather)(void *user, amp_optimizer *opt);
    void *shard_gather_user;
    /* What it held was freed under it ("its model", "a parameter tensor"): every later call is
     * refused (amp_optimizer_check_usable), nothing reads the freed memory. */
    const char *lost;
};

/* The elements of parameter i this rank steps: [lo, lo + numel) of it (all of it unless
 * sharded). */
int64_t amp_optimizer_piece_lo(const amp_optimizer *opt, int i);
int64_t amp_optimizer_piece_numel(const amp_optimizer *opt, int i);
bool amp_optimizer_sharded(const amp_optimizer *opt);
/* data (parameter i's values or gradient, elements of dt) moved on to this rank's piece. */
void *amp_optimizer_piece_ptr(const amp_optimizer *opt, int i, void *data, amp_dtype dt);

/* ZeRO (optim/shard.c): from now on this rank steps only elements [lo[i], hi[i]) of each
 * parameter i (lo[i] == hi[i]: none), and keeps only those of the optimizer state, the masters
 * and the master gradients, copied from the whole ones; gather (user) runs after each update.
 * Piece starts are multiples of 32 elements (an empty piece's may be anything), so every pointer
 * into a piece stays 64-byte aligned. Refused for LAMB (its trust ratios need whole-tensor
 * norms), for an optimizer that is sharded already, and for bounds outside a parameter; on
 * failure nothing changed. */
amp_status amp_optimizer_shard(amp_optimizer *opt, const int64_t *lo, const int64_t *hi,
                               amp_status (*gather)(void *user, amp_optimizer *opt), void *user);
/* For a checkpoint of a sharded optimizer: unshard_begin sets the pieces aside and gives the
 * optimizer whole state and master views (zeros; the master gradients stay pieces), so that it
 * reads as unsharded (a save fills them first, a load fills them); unshard_end puts the pieces
 * back, after copying this rank's elements out of the whole views when take_whole (a load), and
 * frees the whole views; it puts them back also when that copy fails (a device fault), and says
 * so. Between the two no step may run. */
typedef struct amp_optimizer_pieces {
    int64_t *shard_lo, *shard_hi;
    void *state_data, *master_data;
    amp_tensor **state, **master_views;
} amp_optimizer_pieces;
amp_status amp_optimizer_unshard_begin(amp_optimizer *opt, amp_optimizer_pieces *kept);
amp_status amp_optimizer_unshard_end(amp_optimizer *opt, amp_optimizer_pieces *kept,
                                     bool take_whole);
/* What a message says of a sharded optimizer that a call cannot serve: AMP_OK when not sharded,
 * else AMP_ERR_UNSUPPORTED naming `who` and `what` cannot be done on one rank's shard. */
amp_status amp_optimizer_check_unsharded(const char *who, const amp_optimizer *opt,
                                         const char *what);

/* AMP_OK when opt is there and holds nothing that was freed; else the error for `who`. */
amp_status amp_optimizer_check_usable(const char *who, const amp_optimizer *opt);

/* An optimizer over n f32 parameters (borrowed; they must outlive it), all on one backend.
 * names[i] (or names NULL) labels parameter i in messages. The model-based creators of
 * include/amp/optim.h call these with the model's list. */
amp_status amp_sgd_create_params(amp_tensor *const *params, const char *const *names, int n,
                                 const amp_sgd_opts *opts, amp_optimizer **out);
amp_status amp_adam_create_params(amp_tensor *const *params, const char *const *names, int n,
                                  const amp_adam_opts *opts, amp_optimizer **out);
amp_status amp_lamb_create_params(amp_tensor *const *params, const char *const *names, int n,
                                  const amp_lamb_opts *opts, amp_optimizer **out);

/* Shared by sgd.c and adam.c: validates the list, allocates n_state zeroed state tensors per
 * parameter. `who` prefixes messages. */
amp_status amp_optimizer_create_common(const char *who, amp_optim_kind kind,
                                       amp_tensor *const *params, const char *const *names, int n,
                                       int n_state, amp_optimizer **out);
/* Group g's learning rate and weight decay (group 0: the options'). */
amp_param_group_opts amp_optimizer_group_hparams(const amp_optimizer *opt, int g);
/* "'fc.weight'" or "#3": how messages name parameter i. */
const char *amp_optimizer_param_label(const amp_optimizer *opt, int i, char *buf, size_t size);
/* The descriptors of one fused update (optim/fused_step.c fills in the per-list fields). */
amp_sgd_desc amp_sgd_make_desc(const amp_optimizer *opt, bool first_step);
amp_adam_desc amp_adam_make_desc(const amp_optimizer *opt, int64_t step);
amp_lamb_desc amp_lamb_make_desc(const amp_optimizer *opt, int64_t step);

/* One zeroed backend block with per_param f32 views per parameter, each shaped like its
 * parameter and starting on a 64-byte boundary; views[i * per_param + j]. per_param 0 gives NULLs.
 * On failure nothing stays allocated. amp_optimizer_free_views releases both (NULLs are fine).
 * The block is recorded in the context's memory ledger as `kind` (amp/memory.h). */
amp_status amp_optimizer_alloc_views(const amp_optimizer *opt, int per_param, amp_mem_kind kind,
                                     void **block, amp_tensor ***views);
void amp_optimizer_free_views(const amp_optimizer *opt, int per_param, void *block,
                              amp_tensor **views);

/* ---- master weights (optim/masters.c), called by the amp layer ----
 *
 * amp_optimizer_make_masters: once, while every parameter is still f32 and before the amp layer
 * casts any of them to half (Apex O2's master weights). Allocates one f32 master block holding a
 * copy of every parameter's current values (full precision) and one zeroed f32 master-gradient
 * block, each carved into per-parameter views. From then on a step updates parameter i only when
 * its grad_written is set, and reads its gradient from amp_optimizer_master_grad(opt, i) (f32,
 * written by the amp layer's unscale pass), never from its .grad. The amp layer may then change
 * a parameter's dtype to f16/bf16 (its data pointing into a half block of the same shape); one
 * left f32 (batch norm under keep_batchnorm_fp32) keeps working. The masters are the weights: a
 * step updates the master and the f32 optimizer state and writes round-to-nearest-even of the
 * new master into a half parameter in the same kernel pass; an f32 parameter gets a copy of its
 * master. (O3 has no masters: its half parameters are updated in place, see amp_optim_masters.)
 * AMP_ERR_STATE when masters exist already, AMP_ERR_DTYPE naming a parameter that is not f32. */
amp_status amp_optimizer_make_masters(amp_optimizer *opt);
/* Releases the masters and master gradients: the optimizer is back to stepping f32 parameters
 * from their .grad (a failed amp_initialize undoes make_masters with it). No-op without masters. */
void amp_optimizer_drop_masters(amp_optimizer *opt);
/* True once masters exist (they belong in checkpoints). */
bool amp_optimizer_has_masters(const amp_optimizer *opt);
/* Parameter i's f32 master: a writable view owned by the optimizer (a checkpoint load copies
 * into it, then calls amp_optimizer_masters_to_params). NULL without persistent masters or for
 * an index out of range. */
amp_tensor *amp_optimizer_master(const amp_optimizer *opt, int i);
/* Parameter i's f32 master gradient, numel of the parameter (of its piece under ZeRO), 64-byte
 * aligned, backend memory: what the step reads. NULL without masters, out of range, or for an
 * empty piece. */
float *amp_optimizer_master_grad(amp_optimizer *opt, int i);
/* Writes every parameter's data from its master: rounded to nearest even into a half parameter,
 * copied into an f32 one (after a checkpoint load into the masters, or to fill a freshly cast
 * model). AMP_ERR_STATE without persistent masters. */
amp_status amp_optimizer_masters_to_params(amp_optimizer *opt);

/* ---- inside a step (optimizer.c, sgd.c, adam.c) ---- */

/* The update of every parameter with a gradient (optim/fused_step.c), validated first (a bad parameter leaves every
 * parameter and the state as they were). amp_optimizer_step calls it, or amp_step for an
 * optimizer the amp layer manages. */
amp_status amp_optimizer_apply(amp_optimizer *opt, const amp_optim_inputs *in);
/* Reads the device's step counts into the host mirror (param_steps, has_state) when they moved,
 * and lets the amp layer settle n_steps: before anything reports or saves them. */
amp_status amp_optimizer_refresh(amp_optimizer *opt);

/* What one parameter's update kernel reads and writes. */
typedef struct amp_optim_target {
    float *param;       /* the f32 values updated in place; NULL: half_copy is the parameter */
    const void *grad;
    amp_dtype grad_dtype;
    float grad_scale;   /* the desc's grad_scale */
    bool half_scaled;   /* a half gradient still scaled by the loss scale (grad_scale is
                           half_grad_scale) */
    void *half_copy;    /* NULL, or the half parameter written in the same pass */
    amp_dtype half_dtype;
} amp_optim_target;

/* Everything that could make parameter i's update fail (optimizer.c), checked for all before any
 * is touched. */
amp_status amp_optimizer_check_grad(const amp_optimizer *opt, const amp_optim_inputs *in, int i);
/* Whether parameter i takes part in this step (PyTorch: its .grad is not None). */
bool amp_optimizer_param_stepped(const amp_optimizer *opt, const amp_optim_inputs *in, int i);
/* Whether a backward wrote a gradient of any of its parameters since they were last consumed
 * (its own .grad, written and not yet read by a step or cleared by zero_grad). */
bool amp_optimizer_any_grad_written(const amp_optimizer *opt);
/* Checks, before anything moves, what the master-weight path needs of parameter i (dtype,
 * shape, storage, backend entries); `label` names it. */
amp_status amp_optimizer_masters_check(const amp_optimizer *opt, int i, const char *label);
/* Sets up parameter i's target. */
amp_status amp_optimizer_update_begin(amp_optimizer *opt, const amp_optim_inputs *in, int i,
                                      amp_optim_target *t);
/* After the kernels succeeded (the parameter's version already moved): copies an f32
 * parameter's new master into it (O2), or marks the O1 kept copy the update wrote in its pass
 * as holding the new version. */
amp_status amp_optimizer_update_end(amp_optimizer *opt, int i, const amp_optim_target *t);

/* ---- accessors for checkpoints ---- */
amp_optim_kind amp_optimizer_kind(const amp_optimizer *opt);
int amp_optimizer_n_params(const amp_optimizer *opt);
amp_tensor *amp_optimizer_param(const amp_optimizer *opt, int i);
/* NULL when the optimizer is not of that kind. */
const amp_sgd_opts *amp_optimizer_sgd_opts(const amp_optimizer *opt);
const amp_adam_opts *amp_optimizer_adam_opts(const amp_optimizer *opt);
const amp_lamb_opts *amp_optimizer_lamb_opts(const amp_optimizer *opt);
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
