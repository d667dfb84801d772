/* The counting point behind amp/profile.h: AMP_BE (core/tensor_internal.h) calls the entry's
 * amp_prof_<entry> while a profile runs, which times the call (when asked), calls the backend
 * and adds the call's FLOPs to its category (core/profile.c says how each is counted). An
 * entry called through AMP_BE without a counting function here does not compile. */
#ifndef AMP_CORE_PROFILE_H
#define AMP_CORE_PROFILE_H

#include "amp/profile.h"
#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern bool amp_profile_on; /* read by AMP_BE on every call: one predictable branch */
extern bool amp_profile_timed;
extern amp_op_profile amp_profile_counts;

/* A device backend calls it wherever the host waits for the device (a blocking copy, a stream
 * synchronisation): amp_op_profile.host_waits. */
void amp_profile_host_wait(void);

amp_status amp_prof_cast(const amp_backend *be, void *dst, amp_dtype dst_dt, const void *src,
                         amp_dtype src_dt, int64_t n);
amp_status amp_prof_fill(const amp_backend *be, void *dst, amp_dtype dt, int64_t n, float value);
amp_status amp_prof_fill_scalar(const amp_backend *be, void *dst, amp_dtype dt, int64_t n,
                                const float *scalar, float scale);
amp_status amp_prof_copy(const amp_backend *be, void *dst, const void *src, size_t nbytes);
amp_status amp_prof_gemm(const amp_backend *be, const amp_gemm_desc *d);
amp_status amp_prof_conv2d_fwd(const amp_backend *be, const amp_conv2d_desc *d, const void *x,
                               const void *w, const float *bias, void *y);
amp_status amp_prof_conv2d_bwd_data(const amp_backend *be, const amp_conv2d_desc *d,
                                    const void *dy, const void *w, void *dx);
amp_status amp_prof_conv2d_bwd_weight(const amp_backend *be, const amp_conv2d_desc *d,
                                      const void *x, const void *dy, void *dw, float *dbias);
amp_status amp_prof_bn_fwd_train(const amp_backend *be, const amp_bn_desc *d, const void *x,
                                 const float *gamma, const float *beta, void *y, float *save_mean,
                                 float *save_invstd, float *running_mean, float *running_var);
amp_status amp_prof_bn_fwd_eval(const amp_backend *be, const amp_bn_desc *d, const void *x,
                                const float *gamma, const float *beta, const float *running_mean,
                                const float *running_var, void *y);
amp_status amp_prof_bn_bwd(const amp_backend *be, const amp_bn_desc *d, const void *x,
                           const void *dy, const void *y, const float *gamma,
                           const float *save_mean, const float *save_invstd, void *dx,
                           float *dgamma, float *dbeta);
amp_status amp_prof_bn_channel_sums(const amp_backend *be, const amp_bn_desc *d, const void *x,
                                    const float *center, const void *dy, float *out1, float *out2);
amp_status amp_prof_bn_sync_stats(const amp_backend *be, const amp_bn_desc *d, int64_t count,
                                  const float *center, const float *s1, const float *s2,
                                  float *mean, float *var, float *invstd, float *running_mean,
                                  float *running_var);
amp_status amp_prof_bn_bwd_elemt(const amp_backend *be, const amp_bn_desc *d, int64_t count,
                                 const void *x, const void *dy, const float *gamma,
                                 const float *mean, const float *invstd, const float *sum_dy,
                                 const float *sum_dy_xmu, void *dx);
amp_status amp_prof_maxpool_fwd(const amp_backend *be, const amp_pool_desc *d, const void *x,
                                void *y);
amp_status amp_prof_maxpool_bwd(const amp_backend *be, const amp_pool_desc *d, const void *dy,
                                const void *x, void *dx);
amp_status amp_prof_unary(const amp_backend *be, amp_unary_op op, amp_dtype dt, int64_t n,
                          const void *x, float alpha, void *y);
amp_status amp_prof_binary(const amp_backend *be, amp_binary_op op, amp_dtype dt, int64_t n,
                           const void *a, const void *b, void *y);
amp_status amp_prof_axpy(const amp_backend *be, amp_dtype dt, int64_t n, float alpha,
                         const void *x, void *y);
amp_status amp_prof_sum(const amp_backend *be, amp_dtype dt, int64_t n, const void *x,
                        float alpha, float *out);
amp_status amp_prof_sum_rows(const amp_backend *be, amp_dtype dt, int64_t rows, int64_t cols,
                             const void *x, float *out);
amp_status amp_prof_xent_fwd(const amp_backend *be, amp_dtype dt, int64_t rows, int64_t classes,
                             const void *logits, const int32_t *labels, float *loss,
                             float *logsoftmax);
amp_status amp_prof_xent_bwd(const amp_backend *be, amp_dtype dt, int64_t rows, int64_t classes,
                             const float *logsoftmax, const int32_t *labels, const float *dloss,
                             void *dlogits);
amp_status amp_prof_mse_fwd(const amp_backend *be, amp_dtype dt, int64_t n, const void *a,
                            const void *b, float *loss);
amp_status amp_prof_mse_bwd(const amp_backend *be, amp_dtype dt, int64_t n, const void *a,
                            const void *b, const float *dloss, void *da);
amp_status amp_prof_dropout_fwd(const amp_backend *be, amp_dtype dt, int64_t n, const void *x,
                                float p, uint64_t seed, uint64_t offset, void *y, uint8_t *mask);
amp_status amp_prof_dropout_bwd(const amp_backend *be, amp_dtype dt, int64_t n, const void *dy,
                                const uint8_t *mask, float p, void *dx);
amp_status amp_prof_unscale(const amp_backend *be, amp_dtype g_dt, int64_t n, const void *grad,
                            float inv_scale, float *out, float *found_inf);
amp_status amp_prof_sgd_multi(const amp_backend *be, const amp_sgd_desc *d,
                              const amp_opt_tensors *t, const amp_step_scalars *scalars);
amp_status amp_prof_adam_multi(const amp_backend *be, const amp_adam_desc *d,
                               const amp_opt_tensors *t, const amp_step_scalars *scalars);
amp_status amp_prof_lamb_multi(const amp_backend *be, const amp_lamb_desc *d,
                               const amp_opt_tensors *t, const amp_step_scalars *scalars);
amp_status amp_prof_unscale_multi(const amp_backend *be, amp_dtype g_dt, int64_t n,
                                  const int64_t *numel, const void *const *grad, float inv_scale,
                                  float *const *out, float *found_inf,
                                  const amp_step_scalars *scalars);
amp_status amp_prof_nonfinite_multi(const amp_backend *be, amp_dtype dt, int64_t n,
                                    const int64_t *numel, const void *const *x, float *found_inf);
amp_status amp_prof_sum_squares_multi(const amp_backend *be, amp_dtype dt, int64_t n,
                                      const int64_t *numel, const void *const *x, float *out);
amp_status amp_prof_scaler_seed(const amp_backend *be, amp_scaler_dev *s, float cap);
amp_status amp_prof_scaler_clip(const amp_backend *be, amp_scaler_dev *s, const float *sumsq_f32,
                                const float *sumsq_half, float max_norm);
amp_status amp_prof_scaler_update(const amp_backend *be, amp_scaler_dev *s,
                                  const amp_scaler_params *p, float *found_inf, bool checks,
                                  bool other_skip);
/* Not ops (an upload's queueing and a stream marker): passed through, not counted. */
amp_status amp_prof_upload_async(const amp_backend *be, void *dst, const void *host,
                                 size_t nbytes, void *after);
amp_status amp_prof_mark(const amp_backend *be, void **event);

#ifdef __cplusplus
}
#endif
#endif
