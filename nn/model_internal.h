/* A model is a tree of modules (PyTorch's nn.Module): each node has its own named parameters and
 * buffers, named children, and a forward. The root owns the storage: on build it walks the tree
 * (a node's own parameters, then its children in order: torch's named_parameters order), gives
 * every entry its dotted name ("layer1.0.conv1.weight"), and carves parameters, gradients and
 * buffers out of one block each, so multi-tensor kernels, gradient buckets and checkpoints see
 * one flat list. After the build every node's params/buffers are its slice of the root's lists:
 * its own entries first, then its children's. */
#ifndef AMP_NN_MODEL_INTERNAL_H
#define AMP_NN_MODEL_INTERNAL_H

#include "amp/nn.h"

#define AMP_NAME_MAX 64       /* a child's, parameter's or buffer's own name */
#define AMP_FULL_NAME_MAX 160 /* a dotted name from the root */

/* The library's own modules, which Sequential fuses with the ReLU that follows them and
 * SyncBatchNorm conversion finds; a hand-written module is AMP_MODULE_USER. */
typedef enum amp_module_kind {
    AMP_MODULE_USER, AMP_MODULE_SEQUENTIAL, AMP_MODULE_LINEAR, AMP_MODULE_CONV2D,
    AMP_MODULE_BATCHNORM2D, AMP_MODULE_RELU, AMP_MODULE_MAXPOOL2D, AMP_MODULE_FLATTEN,
    AMP_MODULE_DROPOUT, AMP_MODULE_LAYER_NORM, AMP_MODULE_RMS_NORM, AMP_MODULE_EMBEDDING,
    AMP_MODULE_GELU
} amp_module_kind;

/* The settings of a library module. */
typedef struct amp_module_cfg {
    int64_t in, out; /* features (linear) or channels (conv, batch norm) */
    int kernel, stride, padding;
    float p;         /* dropout */
    float eps;       /* LayerNorm, RMSNorm */
    bool tanh_approx; /* GELU: the tanh approximation */
    bool bias;
    bool sync;       /* batch norm: synchronised over the ranks (SyncBatchNorm) */
    int64_t num_batches_tracked; /* batch norm: training forwards so far (PyTorch's buffer of that
                                    name, an int64 scalar: checkpoints carry it) */
} amp_module_cfg;

/* What a cast to the half type (O2, O3) does with a module's parameters and buffers. */
typedef enum amp_norm_cast {
    AMP_NORM_NONE = 0, /* cast */
    AMP_NORM_KEEP = 1, /* kept f32 where keep_batchnorm_fp32 holds (batch norm, user norms) */
    AMP_NORM_F32 = 2,  /* always f32 (LayerNorm, RMSNorm: half parameters are the known
                        * transformer pitfall of Apex's O2, and their kernels take f32) */
} amp_norm_cast;

/* One registration: the node's own name for it, its shape and initialiser. */
typedef struct amp_decl {
    char name[AMP_NAME_MAX];
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    amp_init init;
} amp_decl;

/* An entry of the root's flat lists. */
typedef struct amp_named_tensor {
    char name[AMP_FULL_NAME_MAX];
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    amp_init init;
    amp_norm_cast norm; /* owned by a normalisation module: see amp_norm_cast */
    amp_tensor *t; /* NULL until built */
} amp_named_tensor;

/* An int64 counter a checkpoint carries beside the tensors (num_batches_tracked). */
typedef struct amp_named_counter {
    char name[AMP_FULL_NAME_MAX];
    int64_t *value;
} amp_named_counter;

struct amp_model {
    amp_ctx *ctx;
    amp_model *parent, *root; /* root == this for a model that is no one's child */
    char name[AMP_NAME_MAX];  /* under its parent */
    amp_forward_fn forward;
    void *user;
    void (*free_user)(void *user);
    amp_module_kind kind;
    amp_module_cfg cfg;
    amp_norm_cast norm;
    amp_decl *own_params, *own_buffers;
    int n_own_params, cap_own_params, n_own_buffers, cap_own_buffers;
    amp_model **children;
    int n_children, cap_children;
    /* Built: the slice of the root's lists this node's subtree has (the root owns them). */
    amp_named_tensor *params, *buffers;
    int n_params, n_buffers;
    amp_named_counter *counters; /* root only */
    int n_counters;
    void *param_block, *grad_block, *buffer_block; /* root only: backend memory */
    bool built, training;
    amp_recompute recompute; /* amp_model_set_recompute: a child's, run by nn/recompute.c */
    amp_recompute_memory recompute_memory; /* this step's (amp_model_recompute_memory) */
    uint32_t recompute_step;                /* the step it counts */
    /* Casts at the model boundary (Apex O2/O3): float inputs to in_dtype, the output to
     * out_dtype; AMP_I32 means none. Root only. */
    amp_dtype in_dtype, out_dtype;
};

/* A node of the given kind with no entries (the library modules' constructor). */
amp_status amp_module_new(amp_ctx *ctx, const char *who, amp_module_kind kind,
                          amp_forward_fn forward, amp_model **out);
/* A library batch norm's forward, with the ReLU after it fused in when `relu` (Sequential). */
/* modules.c: "who: n inputs, the module takes one" unless n is 1; a new module freed again when
 * registering its entries failed (s), else *out = m. */
amp_status amp_module_one_input(const char *who, int n_inputs);
amp_status amp_module_done(amp_model *m, amp_status s, amp_model **out);
amp_status amp_module_batchnorm_run(amp_model *m, bool relu, amp_tensor *x, amp_tensor **y);
/* AMP_ERR_INVALID_ARG naming `who` when m is a child of another model: optimizers, amp,
 * DDP and checkpoints take the root, which owns the storage. */
amp_status amp_model_check_root(const char *who, const amp_model *m);
/* Calls fn on every node of m's subtree, m first. */
void amp_model_walk(amp_model *m, void (*fn)(amp_model *node, void *arg), void *arg);
/* Lays the tree out into the root's flat lists (names, shapes, initialisers, norm flags,
 * counters) without storage (nn/model_build.c). */
amp_status amp_model_flatten(amp_model *root);
/* Draws every parameter's and buffer's initial value (nn/init.c). */
amp_status amp_model_init_params(amp_model *m);

/* The forward of a child set to recompute while gradients are recorded (nn/recompute.c): the
 * first run without its intermediates, and the tape node whose backward runs it again. */
amp_status amp_recompute_forward(amp_model *m, amp_tensor *const *inputs, int n_inputs,
                                 amp_tensor **out);

/* Converts parameters and buffers to `half` (f16/bf16), except normalisation modules' when
 * keep_norm_f32, re-carving the blocks (nn/model_cast.c). Gradients follow their parameters'
 * dtype. */
amp_status amp_model_cast(amp_model *m, amp_dtype half, bool keep_norm_f32);
/* The same in two halves: prepare allocates and fills the new blocks without touching the model
 * (on failure nothing stays allocated); then exactly one of commit (rebinds, frees the old
 * blocks; cannot fail) or abort (frees the new blocks). */
typedef struct amp_model_cast_plan {
    amp_dtype *dts; /* n_params then n_buffers */
    void *params, *grads, *buffers;
} amp_model_cast_plan;
amp_status amp_model_cast_prepare(amp_model *m, amp_dtype half, bool keep_norm_f32,
                                  amp_model_cast_plan *plan);
void amp_model_cast_commit(amp_model *m, amp_model_cast_plan *plan);
void amp_model_cast_abort(amp_model *m, amp_model_cast_plan *plan);
/* Sets the boundary casts (AMP_I32: none). */
void amp_model_set_io_cast(amp_model *m, amp_dtype in_dtype, amp_dtype out_dtype);

#endif
