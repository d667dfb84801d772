/* The CPU backend: its device entries, its kernels (core/backend_kernels.def) and the helpers its
 * files share. cpu_backend.c gathers them into the table. Files: memory.c (memory, cast, fill),
 * gemm.c and conv.c (oneDNN), elementwise.c, reduce.c, batchnorm.c,
 * pool.c, loss.c, dropout.c, optim.c (SGD, Adam), optim_lamb.c, unscale.c and
 * unscale_multi.c (loss scaler); multi_tensor_apply.c runs core/multi_tensor.h's plans. */
#ifndef AMP_KERNELS_CPU_BACKEND_H
#define AMP_KERNELS_CPU_BACKEND_H

#include "core/backend.h"

/* Elementwise loops shorter than this stay on one thread: the fork costs more than it saves. */
#define AMP_CPU_PARALLEL_MIN 32768
/* Reductions sum chunks of this many elements, then the chunk sums in order: the result does
 * not depend on the thread count. */
#define AMP_CPU_REDUCE_CHUNK 4096

/* The kernels, one per line of core/backend_kernels.def (whose comments state what each
 * computes): amp_cpu_<entry>, gathered into the table by cpu_backend.c. */
#define AMP_KERNEL(name, category, flops, check, params, args)                                     \
    amp_status amp_cpu_##name AMP_PREPEND_DEV params;
#include "core/backend_kernels.def"
#undef AMP_KERNEL

/* The CPU's device context (cpu_backend.c): the `dev` its table passes, for direct callers. */
amp_device_ctx *amp_cpu_device(void);

/* The cast entry's body (memory.c), for the kernels' own widening and narrowing of host tiles. */
amp_status amp_cpu_convert(void *dst, amp_dtype dst_dt, const void *src, amp_dtype src_dt,
                           int64_t n);
/* Its widening (f16 or bf16 to f32) and rounding (f32 to f16 or bf16) of one tile, with the same
 * bits, serial and without the entry's checks: cpu_tile.h's, called once per row or tile, where
 * the entry's checks cost more than a short row's conversion (bench/RESULTS.md, "bias
 * gradients in registers"). */
void amp_cpu_widen_tile(float *dst, const uint16_t *src, amp_dtype half_dt, int64_t n);
void amp_cpu_round_tile(uint16_t *dst, amp_dtype half_dt, const float *src, int64_t n);
/* Host memory and copies (memory.c), the device entries' bodies (cpu_backend.c adapts them). */
amp_status amp_cpu_alloc(size_t nbytes, void **out);
void amp_cpu_free(void *p);
void amp_cpu_memory_stats(size_t *in_use, size_t *peak);
/* Counts host memory the CPU kernels hold for themselves (oneDNN's scratch and widening arenas,
 * dnnl_util.h) as backend memory in use: no ledger records it, so amp/memory.h reports it as
 * WORKSPACE, as it does cuBLASLt's workspace on CUDA. add: bytes taken, sub: bytes given back. */
void amp_cpu_memory_count(size_t add, size_t sub);
void amp_cpu_memory_reset_peak(void);
uint64_t amp_cpu_system_allocs(void);
/* Batch uploads (upload.c): a copy at the call, no events. */
amp_status amp_cpu_upload_async(void *dst, const void *host, size_t nbytes, void *after);
amp_status amp_cpu_mark(void **event);
void amp_cpu_event_free(void *event);
amp_status amp_cpu_memset_zero(void *p, size_t nbytes);
amp_status amp_cpu_copy(void *dst, const void *src, size_t nbytes);
amp_status amp_cpu_sync(void);

/* rows.c: row(ctx, r, buf) for every r < rows, in parallel, buf `floats` f32 of the running
 * thread's arena; AMP_ERR_OOM naming fn when one cannot be had (the rows it skipped unwritten). */
amp_status amp_cpu_each_row(const char *fn, int64_t rows, int64_t floats,
                            void (*row)(void *ctx, int64_t r, float *buf), void *ctx);
/* rows.c: a row's max (a NaN goes through), its exps e[j] = e^(v[j] - max) (kernels/math/
 * softmax.h's amp_softmax_exp: 0 in a row of -inf) and their sum, and a row's sum, each in a
 * CUDA warp's order (kernels/math/lanes.h), in vector loops. */
void amp_cpu_row_max_sumexp(const float *v, int64_t n, float *e, float *m_out, float *s_out);
float amp_cpu_row_sum(const float *v, int64_t n);
/* reduce.c: the fold of chunked column sums (sum_rows', LayerNorm's dgamma and dbeta):
 * out[j0 + j] = the doubles partial[c * stride + j0 + j] added over c = 0, 1, ... in that order
 * from 0, rounded to f32 once, for j < w <= AMP_CPU_FOLD_BLOCK; the columns in vector lanes. */
#define AMP_CPU_FOLD_BLOCK 256
void amp_cpu_fold_chunks(const double *partial, int64_t n_chunks, int64_t stride, int64_t j0,
                         int64_t w, float *out);

/* cpu_avx512.c: whether the hand-vectorised AVX-512 kernels run (AVX-512 F, BW and VL, and
 * AMP_CPU_GENERIC unset). */
bool amp_cpu_avx512_kernels(void);
/* The same with AVX512-BF16 too: the attention's bf16 tile products (attention_bf16.c). */
bool amp_cpu_avx512_bf16_kernels(void);
/* pool_2x2_avx512.c: whether d (checked) is a 2x2 stride-2 unpadded pooling and those kernels
 * run; then one (n, c) plane at a time, same values and bits as the scalar scan. */
bool amp_cpu_pool2x2_vectorised(const amp_pool_desc *d);
void amp_cpu_pool2x2_fwd_plane(const amp_pool_desc *d, const void *x, void *y);
void amp_cpu_pool2x2_bwd_plane(const amp_pool_desc *d, const void *x, const void *dy, void *dx);

/* channel_blocks_avx512.c: half NCHW activations to and from an f32 layout that keeps each 16
 * channels of a position together (nChw16c; channels-last with 16 channels). Element (i, c, p)
 * of an n x c x hw tensor sits at i * n + (c / 16) * block + p * hw + c % 16 in it. */
typedef struct amp_c16_layout {
    int64_t n, block, hw;
} amp_c16_layout;
/* Whether these run for dt (f16, bf16) and c channels (a multiple of 16) on this CPU. */
bool amp_cpu_c16_vectorised(amp_dtype dt, int64_t c);
void amp_cpu_widen_to_c16(float *dst, const amp_c16_layout *l, const void *src, amp_dtype dt,
                          int64_t n, int64_t c, int64_t hw);
/* Rounded as amp_cpu_cast rounds. */
void amp_cpu_narrow_from_c16(void *dst, amp_dtype dt, const float *src, const amp_c16_layout *l,
                             int64_t n, int64_t c, int64_t hw);

/* One piece of len elements of unscale and nonfinite (unscale.c): the per-tensor unscale entry's
 * and the multi-tensor entries' (unscale_multi.c), so both give the same bits. The return is 1
 * when an input was inf/NaN; unscale widens a half piece into out first. */
uint32_t amp_cpu_unscale_piece(amp_dtype g_dt, const void *grad, float inv_scale, float *out,
                               int64_t len);
uint32_t amp_cpu_nonfinite_piece(amp_dtype dt, const void *x, int64_t len);

#endif
