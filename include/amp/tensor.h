/* libamp tensors and the execution context.
 *
 * A tensor is a contiguous row-major array of up to AMP_MAX_DIMS dimensions, in one dtype, living
 * on one backend (CPU or CUDA). Tensors made with amp_tensor_create are owned by the caller and
 * freed with amp_tensor_free. Tensors returned by ops are step tensors: they live in the context's
 * step arena until the step's next release point (amp_backward; amp_tensor_keep keeps one to the
 * step's end) or amp_ctx_reset_step (which amp_zero_grad calls); never free them: amp_tensor_drop
 * gives one back early, as Python's `del`.
 *
 * The context owns the backend, the step arena, the autograd tape, the RNG and the autocast state.
 * A context is used by one thread at a time. */
#ifndef AMP_TENSOR_H
#define AMP_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_MAX_DIMS 8

typedef enum amp_dtype { AMP_F32 = 0, AMP_F16 = 1, AMP_BF16 = 2, AMP_I32 = 3 } amp_dtype;

typedef enum amp_device {
    AMP_DEVICE_AUTO = 0, /* CUDA when a device answers, else the CPU (one log line says why) */
    AMP_DEVICE_CPU = 1,
    AMP_DEVICE_CUDA = 2,
} amp_device;

typedef struct amp_ctx amp_ctx;

/* Opaque: read a tensor through the accessors below, change it only through the API. */
typedef struct amp_tensor amp_tensor;

typedef struct amp_ctx_opts {
    amp_device device; /* AMP_DEVICE_AUTO by default (zero) */
    uint64_t seed;     /* RNG seed: initialisation, dropout, shuffling */
    int n_threads;     /* CPU threads; 0 = all cores */
    /* TF32 for f32 GEMMs and convolutions, PyTorch's torch.backends.cuda.matmul.allow_tf32 and
     * torch.backends.cudnn.allow_tf32 in one switch; false by default (both PyTorch defaults for
     * matmul, and what keeps the CUDA backend's f32 results matching the CPU's). When set, the
     * CUDA backend may round the f32 inputs of a GEMM (cuBLASLt CUBLAS_COMPUTE_32F_FAST_TF32) or
     * of a convolution (cuDNN tensor-op math) to TF32, 10 explicit mantissa bits (relative error
     * up to 2^-11 per input, so about 2^-10 per product), keeping f32's exponent range and
     * accumulating in f32: up to 8x the f32 throughput on A100/H100 tensor cores. Half-precision
     * ops are not affected, nor are the bias gradients (true f32 sums). The CPU backend ignores
     * it: the CPU computes true f32. */
    bool allow_tf32;
    /* Nondeterministic algorithms allowed (the reverse of torch.use_deterministic_algorithms;
     * like torch.backends.cudnn.deterministic = False). false by default: every backend entry
     * then gives the same bits for the same inputs (core/backend.h), which resume, DDP and the
     * overflow-skip tests rely on. When set, the CUDA backend's convolutions take cuDNN's fastest
     * algorithm as its heuristics rank them, also the backward ones that accumulate with atomics
     * (a few ulps that change from run to run); the CPU backend is deterministic either way. */
    bool allow_nondeterministic;
} amp_ctx_opts;

amp_status amp_ctx_create(const amp_ctx_opts *opts, amp_ctx **out);
/* NULL is a no-op. The usual order frees the context last (DDP, optimizers, models, tensors,
 * then the context); any order is safe: the tensors, models, optimizers, stagers and DDP made on
 * a context hold it, and it goes with the last of them (until then they work as before). */
void amp_ctx_free(amp_ctx *ctx);
amp_device amp_ctx_device(const amp_ctx *ctx);
const char *amp_ctx_backend_name(const amp_ctx *ctx);
/* Releases every step tensor and the autograd tape. Tensors returned by ops become invalid: an
 * op, amp_backward or a copy given one of them fails with AMP_ERR_STATE (at least until the step
 * after the next; older ones may be overwritten by then, like any freed memory). */
void amp_ctx_reset_step(amp_ctx *ctx);
/* Bytes the step arena holds now and at most since creation. */
size_t amp_ctx_arena_bytes(const amp_ctx *ctx, size_t *peak);
/* Bytes of backend memory (parameters, gradients, master weights, optimizer state, step arenas,
 * scratch) held now and at most since the last amp_ctx_memory_reset_peak, for the context's
 * backend in this process (every context on it together; on CUDA the caching allocator's blocks
 * in use, cached free blocks not counted). Either pointer may be NULL. */
amp_status amp_ctx_memory(const amp_ctx *ctx, size_t *in_use, size_t *peak);
void amp_ctx_memory_reset_peak(amp_ctx *ctx);
/* Allocations the context's backend has made from the system (cudaMalloc on CUDA, aligned_alloc
 * on the CPU) since the process started, all contexts together: a training loop makes none after
 * its first steps, which this shows (amp-train --json: system_allocs_steady). */
amp_status amp_ctx_system_allocs(const amp_ctx *ctx, uint64_t *n);

/* Logs every op with its input and output dtypes and shapes, one line each, so a user can see
 * what ran in half; AMP_TRACE=1 in the environment turns it on for every new context. */
void amp_trace_enable(amp_ctx *ctx, bool enabled);

size_t amp_dtype_size(amp_dtype dt);
const char *amp_dtype_name(amp_dtype dt);

/* A caller-owned tensor, zero-filled. shape has ndim entries, each >= 1. */
amp_status amp_tensor_create(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape,
                             amp_tensor **out);
/* A caller-owned tensor with a copy of host data (n elements of dt must match the shape). */
amp_status amp_tensor_from_host(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape,
                                const void *host, amp_tensor **out);
/* NULL is a no-op; step tensors are ignored (their step releases them; amp_tensor_drop gives one
 * back early). An optimizer made over the tensor refuses every later call (the context's memory
 * ledger, amp/memory.h, records the release). A tensor an op of the live graph read (a batch, a
 * mask, token ids) is needed by its backward: freed before amp_backward, the backward refuses
 * with AMP_ERR_STATE (free it after amp_backward or amp_ctx_reset_step). */
void amp_tensor_free(amp_tensor *t);
/* Copies the tensor into host memory of nbytes (must equal numel * dtype size), as stored. */
amp_status amp_tensor_to_host(const amp_tensor *t, void *host, size_t nbytes);
/* Copies the tensor into numel floats (nbytes must be numel * 4) whatever its dtype: f16 and bf16
 * widened exactly, i32 converted. What a loss, logits or a half model's weights are read with. */
amp_status amp_tensor_to_host_f32(const amp_tensor *t, float *host, size_t nbytes);
amp_status amp_tensor_copy_from_host(amp_tensor *t, const void *host, size_t nbytes);
/* For a tensor of [rows, ...] of any dtype (logits): idx[r] = the position of the largest element
 * of row r, its trailing dimensions flattened, the first on ties, a NaN counting as the largest
 * (torch.argmax(x, 1)); n_rows must be the first dimension. The accuracy of a batch is the share of
 * idx that equals its labels. Reads the tensor to the host (one wait for the device). */
amp_status amp_tensor_argmax_rows(const amp_tensor *t, int32_t *idx, int64_t n_rows);
/* Keeps a step tensor (an op's result) readable until the step ends (amp_zero_grad or
 * amp_ctx_reset_step), past the release points that free the step's memory earlier:
 * amp_backward frees everything made since the last release point but its loss (logits kept for
 * an accuracy after backward need this), and amp_model_forward with gradients disabled frees
 * what was made before it but its output, which lasts until the next one. A released tensor is
 * refused with an error naming this call. Caller-owned tensors need no keeping. */
amp_status amp_tensor_keep(amp_tensor *t);
/* Says the caller will not use a step tensor again, as Python's `del`: its memory goes back to
 * the step at once for the next ops to reuse, unless the backward still reads it (the input a
 * linear layer saved, an attention's output) or a view of it exists, in which case it goes at the
 * next release point as before; the gradient flows through it either way. Any later use of t is
 * refused with an error naming this call. Dropping the branch outputs a residual add consumed
 * (x = x + f(x)) is what lowers a transformer's step memory (models/gpt.c). Errors:
 * caller-owned tensors (amp_tensor_free them), kept ones (amp_tensor_keep), released ones. */
amp_status amp_tensor_drop(amp_tensor *t);
/* Reads element 0 as float (any dtype): the usual way to print a loss. */
amp_status amp_tensor_item(const amp_tensor *t, float *out);
size_t amp_tensor_nbytes(const amp_tensor *t);
/* What a tensor is (NULL answers 0, AMP_F32 or NULL with the message in amp_last_error). */
amp_dtype amp_tensor_dtype(const amp_tensor *t);
int amp_tensor_ndim(const amp_tensor *t);
int64_t amp_tensor_dim(const amp_tensor *t, int d); /* extent of dimension d; -1 when out of range */
const int64_t *amp_tensor_shape(const amp_tensor *t); /* amp_tensor_ndim(t) extents */
int64_t amp_tensor_numel(const amp_tensor *t);
amp_ctx *amp_tensor_ctx(const amp_tensor *t);
bool amp_tensor_requires_grad(const amp_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
