/* The CUDA backend's internals: the entries of its amp_backend table (core/backend.h states each
 * contract) and the launchers they share. cuda_backend.c gathers the table.
 * Files: cuda_backend.c (device probe, stream, copies, table), cuda_alloc.c (caching allocator),
 * cast.cu (cast, fill, strided cast with bias), gemm.c (GEMM through cuBLASLt),
 * elementwise.cu, reduce.cu, loss.cu, dropout.cu (their entries below), block_reduce.cuh (the
 * deterministic block reductions of reduce.cu and loss.cu).
 *
 * Streams: every entry enqueues on its device context's one stream (dev->stream) and returns
 * without waiting, except copy_to_host, copy_from_host and sync, which return when the host
 * buffer is complete (or may be reused). One stream also makes the caching allocator safe: a
 * block freed while a queued kernel still uses it can only be handed to work queued after it.
 *
 * Declared extern "C": the .cu files are C++, the rest C. */
#ifndef AMP_KERNELS_CUDA_BACKEND_H
#define AMP_KERNELS_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/cuda/bad_index.h"

/* core/backend.h has no extern "C" guards of its own yet: included here inside one, so that the
 * C++ (.cu) side sees amp_backend_cpu/amp_backend_cuda with C linkage. */
#ifdef __cplusplus
extern "C" {
#endif
#include "core/backend.h"
#ifdef __cplusplus
}
#endif

/* Threads per block of the elementwise kernels: 8 warps, enough to keep a memory-bound loop's
 * loads in flight while 8 blocks share an SM (2048 resident threads on sm_80 and sm_90). */
#define AMP_CUDA_BLOCK 256
/* Upper bound on the grid of grid-stride kernels: 4096 x 256 = 1M threads, several times what an
 * H100 holds resident (132 SMs x 2048), so every SM stays busy and larger n loop instead of
 * launching more blocks. */
#define AMP_CUDA_MAX_BLOCKS 4096

#ifdef __cplusplus
extern "C" {
#endif

/* The kernels, one per line of core/backend_kernels.def (whose comments state what each
 * computes): amp_cuda_<entry>, gathered into the table by cuda_backend.c. */
#define AMP_KERNEL(name, category, flops, check, params, args)                                     \
    amp_status amp_cuda_##name AMP_PREPEND_DEV params;
#include "core/backend_kernels.def"
#undef AMP_KERNEL

/* The CUDA backend's device context (core/backend.h's amp_device_ctx): everything its entries
 * use from call to call, so two contexts (two devices, or two streams of one) share nothing.
 * Made by amp_cuda_device_open; amp_backend_cuda's default table holds one for the device the
 * process selected. The entries run on the calling thread's current device, which must be the
 * context's (one device per process, amp_backend_select_device). */
typedef struct amp_cuda_alloc_state amp_cuda_alloc_state;
typedef struct amp_cuda_gemm_state amp_cuda_gemm_state;
typedef struct amp_cuda_conv_state amp_cuda_conv_state;
typedef struct amp_cuda_upload_state amp_cuda_upload_state;
struct amp_device_ctx {
    int device;                       /* the CUDA ordinal */
    cudaStream_t stream;              /* every entry queues its work here */
    amp_cuda_alloc_state *alloc;      /* the caching allocator (cuda_alloc.c) */
    amp_cuda_gemm_state *gemm;        /* cuBLASLt handle, workspace, plan cache (gemm.c) */
    amp_cuda_conv_state *conv;        /* cuDNN handle, plan cache (conv.c) */
    amp_cuda_upload_state *upload;    /* copy stream and pinned staging ring (upload.c) */
    amp_cuda_bad_index bad_index;     /* what ops met and could not use (bad_index.h) */
};

/* A table of the CUDA backend over a fresh device context on device `ordinal` (made the calling
 * thread's current device): its own stream, allocator, handles and caches. Closed with
 * amp_cuda_device_close, which waits for its stream and releases them all; memory still
 * allocated from it is then lost (its tensors must be freed first). */
amp_status amp_cuda_device_open(int ordinal, amp_backend **out);
void amp_cuda_device_close(amp_backend *be);
/* The default table's context (amp_backend_cuda()->dev), for the backend's direct tests. */
amp_device_ctx *amp_cuda_device(void);

/* Each file's share of a context (made and freed by amp_cuda_device_open and _close). */
amp_status amp_cuda_alloc_state_create(amp_cuda_alloc_state **out);
void amp_cuda_alloc_state_free(amp_cuda_alloc_state *a);
amp_status amp_cuda_gemm_state_create(amp_cuda_gemm_state **out);
void amp_cuda_gemm_state_free(amp_device_ctx *dev, amp_cuda_gemm_state *g);
amp_status amp_cuda_conv_state_create(amp_cuda_conv_state **out);
void amp_cuda_conv_state_free(amp_device_ctx *dev, amp_cuda_conv_state *c);
amp_status amp_cuda_upload_state_create(amp_cuda_upload_state **out);
void amp_cuda_upload_state_free(amp_cuda_upload_state *u);

/* The context's caching allocator (cuda_alloc.c). */
amp_status amp_cuda_alloc(amp_device_ctx *dev, size_t nbytes, void **out);
void amp_cuda_free(amp_device_ctx *dev, void *p);
/* Marks block p (from amp_cuda_alloc) as used by `stream` too (PyTorch's recordStream): when it
 * is freed it is not handed out again before the work queued on that stream so far has run.
 * Only for streams other than the context's own (work there is ordered with any reuse already;
 * recording it would only delay the reuse). */
amp_status amp_cuda_record_stream(amp_device_ctx *dev, void *p, cudaStream_t stream);
/* cudaMalloc calls made by the context's allocator (no cudaMalloc in the steady state: amp-train
 * --json reports the count after the first step and at the end). */
uint64_t amp_cuda_malloc_count(amp_device_ctx *dev);
/* Returns every cached (free) block to the driver. */
amp_status amp_cuda_alloc_release_cached(amp_device_ctx *dev);
/* Bytes handed out and bytes held in free lists (sizes after rounding to the block class). */
void amp_cuda_alloc_stats(amp_device_ctx *dev, size_t *in_use, size_t *cached);
/* The table's memory_stats: bytes handed out (cached free blocks not counted) and their peak. */
void amp_cuda_memory_stats(amp_device_ctx *dev, size_t *in_use, size_t *peak);
void amp_cuda_memory_reset_peak(amp_device_ctx *dev);

/* Memory entries (cuda_backend.c). */
amp_status amp_cuda_memset_zero(amp_device_ctx *dev, void *p, size_t nbytes);
amp_status amp_cuda_copy(amp_device_ctx *dev, void *dst, const void *src, size_t nbytes);
amp_status amp_cuda_copy_to_host(amp_device_ctx *dev, void *host, const void *src, size_t nbytes);
amp_status amp_cuda_copy_from_host(amp_device_ctx *dev, void *dst, const void *host, size_t nbytes);
amp_status amp_cuda_sync(amp_device_ctx *dev);
/* Uploads on the copy stream and compute-stream marks (upload.c); the table's contracts. */
amp_status amp_cuda_upload_async(amp_device_ctx *dev, void *dst, const void *host, size_t nbytes,
                                 void *after);
amp_status amp_cuda_mark(amp_device_ctx *dev, void **event);
void amp_cuda_event_free(amp_device_ctx *dev, void *event);

/* Cast and fill entries (cast.cu); same contracts as the table's cast, fill and fill_scalar. */

/* dst[i * ldd + j] = (dst_dt)(scale * src[i * lds + j] + bias[j]) for i < rows, j < cols, in f32
 * with one fma and one rounding; with relu, the GEMM's ReLU epilogue (amp_relu_epilogue) before
 * the rounding; a NULL src reads as 0 (never touched), a NULL bias as 0; dst may equal src (same
 * ld and dtype). Used by the GEMM around cuBLASLt: widening operands, the ReLU (never cuBLASLt's,
 * which loses NaN), and finishing a result computed in f32 when no algorithm takes the bias
 * epilogue or the output dtype. */
amp_status amp_cuda_cast_rows_launch(void *dst, amp_dtype dst_dt, int64_t ldd, const void *src,
                                     amp_dtype src_dt, int64_t lds, int64_t rows, int64_t cols,
                                     float scale, const float *bias, bool relu,
                                     cudaStream_t stream);

/* GEMM (gemm.c): the context's cuBLASLt handle; its first GEMM takes the workspace from the
 * context's allocator. */
/* What the latest amp_cuda_gemm that reached cuBLASLt ran (tests check what was fused): its
 * cublasLtEpilogue_t (CUBLASLT_EPILOGUE_DEFAULT: nothing fused), whether cuBLASLt wrote C itself
 * (else an f32 scratch rounded into C) and its cublasComputeType_t; -1 before the first. */
typedef struct amp_cuda_gemm_stats {
    int epilogue;
    bool direct;
    int compute;
} amp_cuda_gemm_stats;
void amp_cuda_gemm_stats_get(amp_device_ctx *dev, amp_cuda_gemm_stats *out);

/* The loss scaler's unscale over one tensor (unscale.cu): the table's unscale's launcher, on an
 * explicit stream. */
amp_status amp_cuda_unscale_launch(amp_dtype g_dt, int64_t n, const void *grad, float inv_scale,
                                   float *out, float *found_inf, cudaStream_t stream);

/* Elementwise entries (elementwise.cu); same contracts as the table's unary, binary and axpy. The
 * launchers take float dtypes, n >= 1 and ops other than copy. */
amp_status amp_cuda_unary_launch(amp_unary_op op, amp_dtype dt, int64_t n, const void *x,
                                 float alpha, void *y, cudaStream_t stream);
amp_status amp_cuda_binary_launch(amp_binary_op op, amp_dtype dt, int64_t n, const void *a,
                                  const void *b, void *y, cudaStream_t stream);
amp_status amp_cuda_axpy_launch(amp_dtype dt, int64_t n, float alpha, const void *x, void *y,
                                cudaStream_t stream);

/* Sums (reduce.cu); same contracts as the table's sum and sum_rows, deterministic without float
 * atomics. sum's launcher needs amp_cuda_sum_blocks(n) doubles of device workspace; sum_rows'
 * needs n_chunks * cols doubles, n_chunks from amp_cuda_sum_rows_plan (0 when rows = 0). */
int amp_cuda_sum_blocks(int64_t n);
void amp_cuda_sum_rows_plan(int64_t rows, int64_t cols, int64_t *chunk_rows, int64_t *n_chunks);
amp_status amp_cuda_sum_launch(amp_dtype dt, int64_t n, const void *x, float alpha, float *out,
                               double *partials, cudaStream_t stream);
amp_status amp_cuda_sum_rows_launch(amp_dtype dt, int64_t rows, int64_t cols, const void *x,
                                    float *out, double *partials, cudaStream_t stream);

/* MSE (loss.cu); the same contract as the table's mse_fwd: the launcher needs
 * amp_cuda_sum_blocks(n) doubles. */
amp_status amp_cuda_mse_fwd_launch(amp_dtype dt, int64_t n, const void *a, const void *b,
                                   float *loss, double *partials, cudaStream_t stream);

/* Dropout (dropout.cu); same contracts as the table's dropout_fwd/bwd, masks bit-identical to the
 * CPU backend's. The launchers take p in (0, 1) and n >= 1. */
amp_status amp_cuda_dropout_fwd_launch(amp_dtype dt, int64_t n, const void *x, float p,
                                       uint64_t seed, uint64_t offset, void *y, uint8_t *mask,
                                       cudaStream_t stream);
amp_status amp_cuda_dropout_bwd_launch(amp_dtype dt, int64_t n, const void *dy,
                                       const uint8_t *mask, float p, void *dx,
                                       cudaStream_t stream);

/* Convolution (conv.c over cuDNN's convolution API; conv_bias.cu for the f32 bias and its
 * gradient, our own deterministic kernels): releases the context's cuDNN handle and cached
 * algorithm choices (tests: the next convolution starts afresh). */
void amp_cuda_conv_shutdown(amp_device_ctx *dev);

#ifdef __cplusplus
}
#endif

#endif
