/* The op profile (amp/profile.h): counts, FLOPs and (optionally) times of the backend calls ops
 * make through AMP_BE. Each amp_prof_<entry> below names its category and the FLOPs of one
 * call, as amp/profile.h defines them, and runs the call inside PROF (timed when asked). */
#include <string.h>
#include <time.h>

#include "core/profile.h"
#include "core/tensor_internal.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A timed call starts and ends with the device idle, so that its time is its own: the host
 * waits before (for work queued by calls that are not counted, such as uploads) and after. */
static double prof_begin(const amp_backend *be) {
    if (!amp_profile_timed) return 0.0;
    uint64_t waits = amp_profile_counts.host_waits; /* the profiler's own waits are not the step's */
    if (be->device != AMP_DEVICE_CPU && be->sync) (void)be->sync();
    amp_profile_counts.host_waits = waits;
    return now_seconds();
}

static amp_status prof_end(const amp_backend *be, amp_status s, amp_op_category cat, double flops,
                           double t0) {
    if (amp_profile_timed) {
        uint64_t waits = amp_profile_counts.host_waits;
        if (be->device != AMP_DEVICE_CPU && be->sync && s == AMP_OK) s = be->sync();
        amp_profile_counts.host_waits = waits;
        amp_profile_counts.seconds[cat] += now_seconds() - t0;
    }
    if (s == AMP_OK) {
        amp_profile_counts.calls[cat]++;
        amp_profile_counts.flops[cat] += flops;
    }
    return s;
}

/* The body of every counting function: the entry's call and the FLOPs of a successful one. */
#define PROF(cat, flops, entry, ...)                                                               \
    do {                                                                                           \
        double t0_ = prof_begin(be);                                                               \
        amp_status s_ = be->entry ? be->entry(__VA_ARGS__) : amp_backend_missing(be, #entry);      \
        return prof_end(be, s_, (cat), (double)(flops), t0_);                                      \
    } while (0)

static double sum_numel(int64_t n, const int64_t *numel) {
    double total = 0.0;
    for (int64_t i = 0; numel && i < n; i++) total += (double)numel[i];
    return total;
}

static double conv_macs2(const amp_conv2d_desc *d) {
    return 2.0 * (double)d->n * (double)d->c_out * (double)d->h_out * (double)d->w_out *
           (double)d->c_in * (double)d->kh * (double)d->kw;
}

static double conv_out(const amp_conv2d_desc *d) {
    return (double)d->n * (double)d->c_out * (double)d->h_out * (double)d->w_out;
}

static double bn_elems(const amp_bn_desc *d) { return (double)d->n * (double)d->c * (double)d->hw; }

static double pool_out(const amp_pool_desc *d) {
    return (double)d->n * (double)d->c * (double)d->h_out * (double)d->w_out;
}

/* ---- GEMM and convolution ---- */

amp_status amp_prof_gemm(const amp_backend *be, const amp_gemm_desc *d) {
    double f = 2.0 * (double)d->m * (double)d->n * (double)d->k;
    if (d->bias) f += (double)d->m * (double)d->n;
    if (d->bias_grad) f += (double)d->m * (double)d->k;
    PROF(AMP_OPCAT_GEMM_CONV, f, gemm, d);
}

amp_status amp_prof_conv2d_fwd(const amp_backend *be, const amp_conv2d_desc *d, const void *x,
                               const void *w, const float *bias, void *y) {
    PROF(AMP_OPCAT_GEMM_CONV, conv_macs2(d) + (bias ? conv_out(d) : 0.0), conv2d_fwd, d, x, w,
         bias, y);
}

amp_status amp_prof_conv2d_bwd_data(const amp_backend *be, const amp_conv2d_desc *d,
                                    const void *dy, const void *w, void *dx) {
    PROF(AMP_OPCAT_GEMM_CONV, conv_macs2(d), conv2d_bwd_data, d, dy, w, dx);
}

amp_status amp_prof_conv2d_bwd_weight(const amp_backend *be, const amp_conv2d_desc *d,
                                      const void *x, const void *dy, void *dw, float *dbias) {
    PROF(AMP_OPCAT_GEMM_CONV, conv_macs2(d) + (dbias ? conv_out(d) : 0.0), conv2d_bwd_weight, d,
         x, dy, dw, dbias);
}

/* ---- Batch norm ---- */

amp_status amp_prof_bn_fwd_train(const amp_backend *be, const amp_bn_desc *d, const void *x,
                                 const float *gamma, const float *beta, void *y, float *save_mean,
                                 float *save_invstd, float *running_mean, float *running_var) {
    PROF(AMP_OPCAT_NORM, (8.0 + d->relu) * bn_elems(d), bn_fwd_train, d, x, gamma, beta, y, save_mean,
         save_invstd, running_mean, running_var);
}

amp_status amp_prof_bn_fwd_eval(const amp_backend *be, const amp_bn_desc *d, const void *x,
                                const float *gamma, const float *beta, const float *running_mean,
                                const float *running_var, void *y) {
    PROF(AMP_OPCAT_NORM, (4.0 + d->relu) * bn_elems(d), bn_fwd_eval, d, x, gamma, beta, running_mean,
         running_var, y);
}

amp_status amp_prof_bn_bwd(const amp_backend *be, const amp_bn_desc *d, const void *x,
                           const void *dy, const void *y, const float *gamma,
                           const float *save_mean, const float *save_invstd, void *dx,
                           float *dgamma, float *dbeta) {
    PROF(AMP_OPCAT_NORM, (10.0 + d->relu) * bn_elems(d), bn_bwd, d, x, dy, y, gamma, save_mean,
         save_invstd, dx, dgamma, dbeta);
}

amp_status amp_prof_bn_channel_sums(const amp_backend *be, const amp_bn_desc *d, const void *x,
                                    const float *center, const void *dy, float *out1,
                                    float *out2) {
    PROF(AMP_OPCAT_NORM, 4.0 * bn_elems(d), bn_channel_sums, d, x, center, dy, out1, out2);
}

amp_status amp_prof_bn_sync_stats(const amp_backend *be, const amp_bn_desc *d, int64_t count,
                                  const float *center, const float *s1, const float *s2,
                                  float *mean, float *var, float *invstd, float *running_mean,
                                  float *running_var) {
    PROF(AMP_OPCAT_NORM, 4.0 * (double)d->c, bn_sync_stats, d, count, center, s1, s2, mean, var,
         invstd, running_mean, running_var);
}

amp_status amp_prof_bn_bwd_elemt(const amp_backend *be, const amp_bn_desc *d, int64_t count,
                                 const void *x, const void *dy, const float *gamma,
                                 const float *mean, const float *invstd, const float *sum_dy,
                                 const float *sum_dy_xmu, void *dx) {
    PROF(AMP_OPCAT_NORM, 6.0 * bn_elems(d), bn_bwd_elemt, d, count, x, dy, gamma, mean, invstd,
         sum_dy, sum_dy_xmu, dx);
}

/* ---- Elementwise, pooling, losses, reductions ---- */

amp_status amp_prof_maxpool_fwd(const amp_backend *be, const amp_pool_desc *d, const void *x,
                                void *y) {
    PROF(AMP_OPCAT_ELEMENTWISE, pool_out(d) * (double)d->k * (double)d->k, maxpool_fwd, d, x, y);
}

/* The backward scans every window again (k * k comparisons) and adds one dy per output. */
amp_status amp_prof_maxpool_bwd(const amp_backend *be, const amp_pool_desc *d, const void *dy,
                                const void *x, void *dx) {
    PROF(AMP_OPCAT_ELEMENTWISE, pool_out(d) * ((double)d->k * (double)d->k + 1.0), maxpool_bwd, d,
         dy, x, dx);
}

amp_status amp_prof_unary(const amp_backend *be, amp_unary_op op, amp_dtype dt, int64_t n,
                          const void *x, float alpha, void *y) {
    PROF(AMP_OPCAT_ELEMENTWISE, op == AMP_UNARY_COPY ? 0.0 : (double)n, unary, op, dt, n, x,
         alpha, y);
}

amp_status amp_prof_binary(const amp_backend *be, amp_binary_op op, amp_dtype dt, int64_t n,
                           const void *a, const void *b, void *y) {
    PROF(AMP_OPCAT_ELEMENTWISE, (double)n, binary, op, dt, n, a, b, y);
}

amp_status amp_prof_axpy(const amp_backend *be, amp_dtype dt, int64_t n, float alpha,
                         const void *x, void *y) {
    PROF(AMP_OPCAT_ELEMENTWISE, 2.0 * (double)n, axpy, dt, n, alpha, x, y);
}

amp_status amp_prof_sum(const amp_backend *be, amp_dtype dt, int64_t n, const void *x,
                        float alpha, float *out) {
    PROF(AMP_OPCAT_ELEMENTWISE, (double)n, sum, dt, n, x, alpha, out);
}

amp_status amp_prof_sum_rows(const amp_backend *be, amp_dtype dt, int64_t rows, int64_t cols,
                             const void *x, float *out) {
    PROF(AMP_OPCAT_ELEMENTWISE, (double)rows * (double)cols, sum_rows, dt, rows, cols, x, out);
}

amp_status amp_prof_xent_fwd(const amp_backend *be, amp_dtype dt, int64_t rows, int64_t classes,
                             const void *logits, const int32_t *labels, float *loss,
                             float *logsoftmax) {
    PROF(AMP_OPCAT_ELEMENTWISE, 4.0 * (double)rows * (double)classes, xent_fwd, dt, rows, classes,
         logits, labels, loss, logsoftmax);
}

amp_status amp_prof_xent_bwd(const amp_backend *be, amp_dtype dt, int64_t rows, int64_t classes,
                             const float *logsoftmax, const int32_t *labels, const float *dloss,
                             void *dlogits) {
    PROF(AMP_OPCAT_ELEMENTWISE, 2.0 * (double)rows * (double)classes, xent_bwd, dt, rows, classes,
         logsoftmax, labels, dloss, dlogits);
}

amp_status amp_prof_mse_fwd(const amp_backend *be, amp_dtype dt, int64_t n, const void *a,
                            const void *b, float *loss) {
    PROF(AMP_OPCAT_ELEMENTWISE, 3.0 * (double)n, mse_fwd, dt, n, a, b, loss);
}

amp_status amp_prof_mse_bwd(const amp_backend *be, amp_dtype dt, int64_t n, const void *a,
                            const void *b, const float *dloss, void *da) {
    PROF(AMP_OPCAT_ELEMENTWISE, 2.0 * (double)n, mse_bwd, dt, n, a, b, dloss, da);
}

amp_status amp_prof_dropout_fwd(const amp_backend *be, amp_dtype dt, int64_t n, const void *x,
                                float p, uint64_t seed, uint64_t offset, void *y, uint8_t *mask) {
    PROF(AMP_OPCAT_ELEMENTWISE, (double)n, dropout_fwd, dt, n, x, p, seed, offset, y, mask);
}

amp_status amp_prof_dropout_bwd(const amp_backend *be, amp_dtype dt, int64_t n, const void *dy,
                                const uint8_t *mask, float p, void *dx) {
    PROF(AMP_OPCAT_ELEMENTWISE, (double)n, dropout_bwd, dt, n, dy, mask, p, dx);
}

amp_status amp_prof_fill(const amp_backend *be, void *dst, amp_dtype dt, int64_t n, float value) {
    PROF(AMP_OPCAT_ELEMENTWISE, 0.0, fill, dst, dt, n, value);
}

amp_status amp_prof_fill_scalar(const amp_backend *be, void *dst, amp_dtype dt, int64_t n,
                                const float *scalar, float scale) {
    PROF(AMP_OPCAT_ELEMENTWISE, (double)n, fill_scalar, dst, dt, n, scalar, scale);
}

amp_status amp_prof_copy(const amp_backend *be, void *dst, const void *src, size_t nbytes) {
    PROF(AMP_OPCAT_ELEMENTWISE, 0.0, copy, dst, src, nbytes);
}

/* ---- Casts ---- */

amp_status amp_prof_cast(const amp_backend *be, void *dst, amp_dtype dst_dt, const void *src,
                         amp_dtype src_dt, int64_t n) {
    PROF(AMP_OPCAT_CAST, 0.0, cast, dst, dst_dt, src, src_dt, n);
}

/* ---- Optimizers and the loss scaler ---- */

amp_status amp_prof_sgd_multi(const amp_backend *be, const amp_sgd_desc *d,
                              const amp_opt_tensors *t, const amp_step_scalars *scalars) {
    double per = 3.0 + (d->weight_decay != 0.0f ? 2.0 : 0.0) + (d->momentum != 0.0f ? 2.0 : 0.0);
    PROF(AMP_OPCAT_OPTIMIZER, per * sum_numel(t->n, t->numel), sgd_multi, d, t, scalars);
}

amp_status amp_prof_adam_multi(const amp_backend *be, const amp_adam_desc *d,
                               const amp_opt_tensors *t, const amp_step_scalars *scalars) {
    PROF(AMP_OPCAT_OPTIMIZER, 12.0 * sum_numel(t->n, t->numel), adam_multi, d, t, scalars);
}

amp_status amp_prof_lamb_multi(const amp_backend *be, const amp_lamb_desc *d,
                               const amp_opt_tensors *t, const amp_step_scalars *scalars) {
    PROF(AMP_OPCAT_OPTIMIZER, 16.0 * sum_numel(t->n, t->numel), lamb_multi, d, t, scalars);
}

amp_status amp_prof_unscale(const amp_backend *be, amp_dtype g_dt, int64_t n, const void *grad,
                            float inv_scale, float *out, float *found_inf) {
    PROF(AMP_OPCAT_OPTIMIZER, 2.0 * (double)n, unscale, g_dt, n, grad, inv_scale, out, found_inf);
}

amp_status amp_prof_unscale_multi(const amp_backend *be, amp_dtype g_dt, int64_t n,
                                  const int64_t *numel, const void *const *grad, float inv_scale,
                                  float *const *out, float *found_inf,
                                  const amp_step_scalars *scalars) {
    PROF(AMP_OPCAT_OPTIMIZER, 2.0 * sum_numel(n, numel), unscale_multi, g_dt, n, numel, grad,
         inv_scale, out, found_inf, scalars);
}

amp_status amp_prof_nonfinite_multi(const amp_backend *be, amp_dtype dt, int64_t n,
                                    const int64_t *numel, const void *const *x, float *found_inf) {
    PROF(AMP_OPCAT_OPTIMIZER, sum_numel(n, numel), nonfinite_multi, dt, n, numel, x, found_inf);
}

amp_status amp_prof_sum_squares_multi(const amp_backend *be, amp_dtype dt, int64_t n,
                                      const int64_t *numel, const void *const *x, float *out) {
    PROF(AMP_OPCAT_OPTIMIZER, 2.0 * sum_numel(n, numel), sum_squares_multi, dt, n, numel, x, out);
}

amp_status amp_prof_scaler_seed(const amp_backend *be, amp_scaler_dev *s, float cap) {
    PROF(AMP_OPCAT_OPTIMIZER, 0.0, scaler_seed, s, cap);
}

amp_status amp_prof_scaler_clip(const amp_backend *be, amp_scaler_dev *s, const float *sumsq_f32,
                                const float *sumsq_half, float max_norm) {
    PROF(AMP_OPCAT_OPTIMIZER, 0.0, scaler_clip, s, sumsq_f32, sumsq_half, max_norm);
}

amp_status amp_prof_scaler_update(const amp_backend *be, amp_scaler_dev *s,
                                  const amp_scaler_params *p, float *found_inf, bool checks,
                                  bool other_skip) {
    PROF(AMP_OPCAT_OPTIMIZER, 0.0, scaler_update, s, p, found_inf, checks, other_skip);
}

/* ---- Passed through ---- */

amp_status amp_prof_upload_async(const amp_backend *be, void *dst, const void *host,
                                 size_t nbytes, void *after) {
    return be->upload_async ? be->upload_async(dst, host, nbytes, after)
                            : amp_backend_missing(be, "upload_async");
}

amp_status amp_prof_mark(const amp_backend *be, void **event) {
    return be->mark ? be->mark(event) : amp_backend_missing(be, "mark");
}
