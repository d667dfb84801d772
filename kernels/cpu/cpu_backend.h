/* The CPU backend's kernels, one per entry of amp_backend (core/backend.h states each contract).
 * cpu_backend.c gathers them into the table. Files: memory.c (memory, cast, fill),
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
/* The loss scaler's entries (scaler.c): kernels/math/scaler.h in place. */
amp_status amp_cpu_scaler_seed(amp_scaler_dev *s, float cap);
amp_status amp_cpu_scaler_clip(amp_scaler_dev *s, const float *sumsq_f32,
                               const float *sumsq_half, float max_norm);
amp_status amp_cpu_scaler_update(amp_scaler_dev *s, const amp_scaler_params *p,
                                 float *found_inf, bool checks, bool other_skip);
amp_status amp_cpu_memset_zero(void *p, size_t nbytes);
amp_status amp_cpu_copy(void *dst, const void *src, size_t nbytes);
amp_status amp_cpu_sync(void);
amp_status amp_cpu_cast(void *dst, amp_dtype dst_dt, const void *src, amp_dtype src_dt, int64_t n);
amp_status amp_cpu_fill(void *dst, amp_dtype dt, int64_t n, float value);
amp_status amp_cpu_fill_scalar(void *dst, amp_dtype dt, int64_t n, const float *scalar, float scale);

amp_status amp_cpu_gemm(const amp_gemm_desc *d);

amp_status amp_cpu_conv2d_fwd(const amp_conv2d_desc *d, const void *x, const void *w,
                              const float *bias, void *y);
amp_status amp_cpu_conv2d_bwd_data(const amp_conv2d_desc *d, const void *dy, const void *w,
                                   void *dx);
amp_status amp_cpu_conv2d_bwd_weight(const amp_conv2d_desc *d, const void *x, const void *dy,
                                     void *dw, float *dbias);

amp_status amp_cpu_bn_fwd_train(const amp_bn_desc *d, const void *x, const float *gamma,
                                const float *beta, void *y, float *save_mean, float *save_invstd,
                                float *running_mean, float *running_var);
amp_status amp_cpu_bn_fwd_eval(const amp_bn_desc *d, const void *x, const float *gamma,
                               const float *beta, const float *running_mean,
                               const float *running_var, void *y);
amp_status amp_cpu_bn_bwd(const amp_bn_desc *d, const void *x, const void *dy, const void *y,
                          const float *gamma, const float *save_mean, const float *save_invstd,
                          void *dx, float *dgamma, float *dbeta);
amp_status amp_cpu_bn_channel_sums(const amp_bn_desc *d, const void *x, const float *center,
                                   const void *dy, float *out1, float *out2);
amp_status amp_cpu_bn_sync_stats(const amp_bn_desc *d, int64_t count, const float *center,
                                 const float *s1, const float *s2, float *mean, float *var,
                                 float *invstd, float *running_mean, float *running_var);
amp_status amp_cpu_bn_bwd_elemt(const amp_bn_desc *d, int64_t count, const void *x, const void *dy,
                                const float *gamma, const float *mean, const float *invstd,
                                const float *sum_dy, const float *sum_dy_xmu, void *dx);

amp_status amp_cpu_maxpool_fwd(const amp_pool_desc *d, const void *x, void *y);
amp_status amp_cpu_maxpool_bwd(const amp_pool_desc *d, const void *dy, const void *x,
                               void *dx);
/* cpu_avx512.c: whether the hand-vectorised AVX-512 kernels run (AVX-512 F, BW and VL, and
 * AMP_CPU_GENERIC unset). */
bool amp_cpu_avx512_kernels(void);
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

amp_status amp_cpu_unary(amp_unary_op op, amp_dtype dt, int64_t n, const void *x, float alpha,
                         void *y);
amp_status amp_cpu_binary(amp_binary_op op, amp_dtype dt, int64_t n, const void *a,
                          const void *b, void *y);
amp_status amp_cpu_axpy(amp_dtype dt, int64_t n, float alpha, const void *x, void *y);
amp_status amp_cpu_sum(amp_dtype dt, int64_t n, const void *x, float alpha, float *out);
amp_status amp_cpu_sum_rows(amp_dtype dt, int64_t rows, int64_t cols, const void *x, float *out);

amp_status amp_cpu_xent_fwd(amp_dtype dt, int64_t rows, int64_t classes, const void *logits,
                            const int32_t *labels, float *loss, float *logsoftmax);
amp_status amp_cpu_xent_bwd(amp_dtype dt, int64_t rows, int64_t classes, const float *logsoftmax,
                            const int32_t *labels, const float *dloss, void *dlogits);
amp_status amp_cpu_mse_fwd(amp_dtype dt, int64_t n, const void *a, const void *b, float *loss);
amp_status amp_cpu_mse_bwd(amp_dtype dt, int64_t n, const void *a, const void *b,
                           const float *dloss, void *da);

amp_status amp_cpu_dropout_fwd(amp_dtype dt, int64_t n, const void *x, float p, uint64_t seed,
                               uint64_t offset, void *y, uint8_t *mask);
amp_status amp_cpu_dropout_bwd(amp_dtype dt, int64_t n, const void *dy, const uint8_t *mask,
                               float p, void *dx);

amp_status amp_cpu_sgd_update(const amp_sgd_desc *d, int64_t n, float *param, const void *grad,
                              amp_dtype g_dt, float *momentum_buf);
amp_status amp_cpu_adam_update(const amp_adam_desc *d, int64_t n, float *param, const void *grad,
                               amp_dtype g_dt, float *exp_avg, float *exp_avg_sq);
/* Multi-tensor optimizer passes (optim.c, optim_lamb.c). Each validates the whole list before
 * it writes anything; a set scalars->found_inf makes it write nothing. */
amp_status amp_cpu_sgd_multi(const amp_sgd_desc *d, const amp_opt_tensors *t,
                             const amp_step_scalars *scalars);
amp_status amp_cpu_adam_multi(const amp_adam_desc *d, const amp_opt_tensors *t,
                              const amp_step_scalars *scalars);
amp_status amp_cpu_lamb_multi(const amp_lamb_desc *d, const amp_opt_tensors *t,
                              const amp_step_scalars *scalars);

/* Loss scaler (unscale.c: unscale; reduce.c: sum_squares). */
amp_status amp_cpu_unscale(amp_dtype g_dt, int64_t n, const void *grad, float inv_scale,
                           float *out, float *found_inf);
amp_status amp_cpu_sum_squares(amp_dtype dt, int64_t n, const void *x, float *out);
amp_status amp_cpu_nonfinite(amp_dtype dt, int64_t n, const void *x, float *found_inf);
/* One piece of len elements of the two passes above (unscale.c), shared with their multi-tensor
 * entries (unscale_multi.c) so both give the same bits: the return is 1 when an input was
 * inf/NaN; unscale widens a half piece into out first. */
uint32_t amp_cpu_unscale_piece(amp_dtype g_dt, const void *grad, float inv_scale, float *out,
                               int64_t len);
uint32_t amp_cpu_nonfinite_piece(amp_dtype dt, const void *x, int64_t len);
/* The same over a list of tensors (unscale_multi.c). */
amp_status amp_cpu_unscale_multi(amp_dtype g_dt, int64_t n, const int64_t *numel,
                                 const void *const *grad, float inv_scale, float *const *out,
                                 float *found_inf, const amp_step_scalars *scalars);
amp_status amp_cpu_nonfinite_multi(amp_dtype dt, int64_t n, const int64_t *numel,
                                   const void *const *x, float *found_inf);
amp_status amp_cpu_sum_squares_multi(amp_dtype dt, int64_t n, const int64_t *numel,
                                     const void *const *x, float *out);

#endif
