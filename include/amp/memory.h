/* Memory by what holds it: the context's memory ledger.
 *
 *     amp_ctx_memory_reset_peak(ctx);
 *     ... one training step ...
 *     amp_mem_usage at_peak;
 *     amp_ctx_memory_usage(ctx, NULL, &at_peak);   // at_peak.bytes[AMP_MEM_ACTIVATIONS], ...
 *
 * Every block of backend memory the library allocates for a context is recorded in the context's
 * ledger with the kind of thing it holds, and forgotten when it is freed, so the split always
 * sums to what the context holds (PyTorch's memory snapshot answers the same question by stack
 * trace; here the owner is known at each allocation). What each kind holds:
 *  - AMP_MEM_PARAMS: the model's parameter block and buffer block (batch-norm running
 *    statistics), in the model's own dtypes: f32 blocks before amp_initialize and at O0/O1, the
 *    half blocks that replace them at O2/O3 (each tensor 64-byte aligned; f32 batch-norm
 *    parameters and buffers under keep_batchnorm_fp32). During amp_initialize's cast the f32 and
 *    the half blocks are briefly held together. A model without buffers holds a 4-byte block.
 *    Under O1 (autocast) also the half copies of the f32 weights autocast casts, kept from step
 *    to step and written by the optimizer in its update's pass (2 bytes per element of each
 *    weight that runs in half: linear and convolution weights, not their biases or batch norm's),
 *    where torch.autocast casts them into step memory at every step.
 *  - AMP_MEM_GRADS: the model's gradient block (the parameters' dtypes, laid out as the parameter
 *    block) and the amp layer's f32 gradient sums (several losses or optimizers without master
 *    weights: one f32 block per optimizer).
 *  - AMP_MEM_MASTERS: the optimizer's f32 master weights and the f32 master gradients beside them
 *    (O2, or master_weights on with a cast model): one block each, 4 bytes per parameter element
 *    each, every tensor padded to 16 floats; O0, O1 and O3 hold none.
 *  - AMP_MEM_OPTIM_STATE: optimizer state in f32 (SGD's momentum buffer: 4 bytes per parameter
 *    element; Adam's and LAMB's two moments: 8; every tensor padded to 16 floats) and the
 *    per-parameter step counts in backend memory (8 bytes per parameter tensor).
 *  - AMP_MEM_ACTIVATIONS: the step arena's chunks: activations, their gradients and the
 *    temporaries of a step (a backward that releases its graph reuses a gradient's memory once
 *    its node is done, so this holds the forward's activations plus what the backward needs at
 *    once, as PyTorch's freed gradients do). The arena keeps its chunks from step to step (one chunk of the last
 *    step's peak use after a step that needed several), so between steps this is the high-water
 *    mark of a step, not 0; amp_ctx_memory_trim returns it to the backend.
 *  - AMP_MEM_WORKSPACE: DDP's f32 bucket buffers (allreduce_always_fp32 with a half model), and
 *    backend memory outside every ledger (see below).
 *  - AMP_MEM_RECOMPUTE: the arena a child set to recompute (amp_model_set_recompute) runs its
 *    forward in, the first time and again in backward: the intermediates of one block at a time,
 *    given back as the run ends (kept from step to step as the step arena's chunks are).
 *    amp_model_recompute_memory gives each child's share. What a recomputed child keeps for its
 *    backward, its output, is ACTIVATIONS.
 *  - AMP_MEM_OTHER: tensors the caller creates (amp_tensor_create, amp_tensor_from_host, a data
 *    stager's batches) with the gradients autograd gives such leaves, and the amp layer's device
 *    scalars (found-inf flags, the device scaler's state).
 *
 * Bytes are those the library asked the backend for, not what the allocator rounded them up to
 * (64 bytes on the CPU, 512-byte classes and quarter octaves on CUDA). What the backend counts in
 * use (amp_ctx_memory) beyond every live context's ledger, that rounding and the backend's own
 * scratch (cuBLASLt's workspace, reduction partials; on the CPU oneDNN's scratchpads and reorder
 * buffers and the f32 copies of operands it has no half kernel for, kept per thread from call to
 * call), is added to WORKSPACE, so that with one
 * context `total` is what amp_ctx_memory reports in use. The backend counts every context of the
 * process together: with several contexts on one backend, each one's WORKSPACE shows all of that
 * memory. */
#ifndef AMP_MEMORY_H
#define AMP_MEMORY_H

#include <stddef.h>

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amp_mem_kind {
    AMP_MEM_PARAMS = 0,
    AMP_MEM_GRADS = 1,
    AMP_MEM_MASTERS = 2,
    AMP_MEM_OPTIM_STATE = 3,
    AMP_MEM_ACTIVATIONS = 4,
    AMP_MEM_WORKSPACE = 5,
    AMP_MEM_OTHER = 6,
    AMP_MEM_RECOMPUTE = 7,
    AMP_MEM_N_KINDS = 8
} amp_mem_kind;

typedef struct amp_mem_usage {
    size_t bytes[AMP_MEM_N_KINDS];
    size_t total; /* the sum of bytes[] */
} amp_mem_usage;

/* "params", "grads", "masters", "optimizer", "activations", "workspace", "other", "recompute";
 * "unknown" for a value out of range. */
const char *amp_mem_kind_name(amp_mem_kind k);

/* now: what the context holds at this moment. at_peak: the split at the moment the ledger's
 * total was highest since the context was made or the last amp_ctx_memory_reset_peak (which
 * resets it to the split of that moment); its WORKSPACE holds the backend memory outside every
 * ledger as it was at that moment. Either pointer may be NULL. AMP_ERR_INVALID_ARG for a NULL
 * ctx. */
amp_status amp_ctx_memory_usage(const amp_ctx *ctx, amp_mem_usage *now, amp_mem_usage *at_peak);

/* Ends the step (amp_ctx_reset_step: every step tensor becomes invalid) and returns the step
 * arena's chunks to the backend, so AMP_MEM_ACTIVATIONS is 0 until the next step grows the arena
 * again (which allocates anew: on the CPU from the system), and the backend's scratch kept for
 * the calling thread (on the CPU oneDNN's arenas, part of WORKSPACE) to the system. For measurements between runs of
 * different sizes on one context, and for a balance check after freeing everything. */
amp_status amp_ctx_memory_trim(amp_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
