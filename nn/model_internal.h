/* A model: layers in order, and the named parameters and buffers they own. Parameters live in
 * one allocation (and their gradients in another), carved into views: multi-tensor kernels,
 * gradient buckets and checkpoints see one flat block. */
#ifndef AMP_NN_MODEL_INTERNAL_H
#define AMP_NN_MODEL_INTERNAL_H

#include "amp/nn.h"

#define AMP_NAME_MAX 64

typedef enum amp_layer_kind {
    AMP_LAYER_LINEAR, AMP_LAYER_CONV2D, AMP_LAYER_BATCHNORM2D, AMP_LAYER_RELU, AMP_LAYER_MAXPOOL2D,
    AMP_LAYER_FLATTEN, AMP_LAYER_DROPOUT
} amp_layer_kind;

typedef struct amp_layer {
    amp_layer_kind kind;
    char name[AMP_NAME_MAX];
    int64_t in, out;          /* features (linear) or channels (conv, batch norm) */
    int kernel, stride, padding;
    float p;                  /* dropout */
    bool bias;
    int weight, bias_param;   /* parameter indices, -1 when absent */
    int running_mean, running_var; /* buffer indices */
    int64_t num_batches_tracked;   /* batch norm: training forwards so far (PyTorch's buffer of
                                      that name, an int64 scalar: checkpoints carry it) */
    bool sync;                     /* batch norm: synchronised over the ranks (SyncBatchNorm) */
} amp_layer;

typedef struct amp_named_tensor {
    char name[AMP_NAME_MAX + 16];
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    amp_tensor *t; /* NULL until built */
} amp_named_tensor;

struct amp_model {
    amp_ctx *ctx;
    amp_layer *layers;
    int n_layers, cap_layers;
    amp_named_tensor *params, *buffers;
    int n_params, cap_params, n_buffers, cap_buffers;
    void *param_block, *grad_block, *buffer_block; /* backend memory */
    bool built, training;
    /* Casts at the model boundary (Apex O2/O3): float inputs to in_dtype, the output to
     * out_dtype; AMP_I32 means none. */
    amp_dtype in_dtype, out_dtype;
};

/* Registers a parameter or buffer of the layer being added; returns its index. */
amp_status amp_model_add_param(amp_model *m, const char *layer, const char *what, int ndim,
                               const int64_t *shape, int *index);
amp_status amp_model_add_buffer(amp_model *m, const char *layer, const char *what, int ndim,
                                const int64_t *shape, int *index);
/* Converts parameters and buffers to `half` (f16/bf16), except batch norm's when keep_norm_f32,
 * re-carving the blocks (nn/model_cast.c). Gradients follow their parameters' dtype. */
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
/* Whether parameter i belongs to a normalisation layer. */
bool amp_model_param_is_norm(const amp_model *m, int i);

/* PyTorch's default initialisation of every layer (nn/init.c). */
amp_status amp_model_init_params(amp_model *m);

#endif
