/* Argument checks of backend contracts that every backend makes the same way. */
#include <math.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/error.h"

amp_status amp_backend_check_unscale(const char *fn, amp_dtype g_dt, int64_t n, const void *grad,
                                     float inv_scale, const float *out, const float *found_inf) {
    if (g_dt != AMP_F32 && g_dt != AMP_F16 && g_dt != AMP_BF16)
        return amp_fail(AMP_ERR_DTYPE, "%s: gradient dtype %s, want f32, f16 or bf16", fn,
                        amp_dtype_name(g_dt));
    if (n < 0) return amp_fail(AMP_ERR_INVALID_ARG, "%s: n = %lld < 0", fn, (long long)n);
    if (!(inv_scale > 0.0f) || inv_scale == (float)INFINITY)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: inv_scale = %g, want a finite value > 0", fn,
                        (double)inv_scale);
    if (!found_inf) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'found_inf' is NULL", fn);
    if (n == 0) return AMP_OK;
    if (!grad) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'grad' is NULL", fn);
    if (!out) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'out' is NULL", fn);
    /* out may be grad itself (f32 in place); any other overlap would read unscaled values back
     * as gradients. */
    uintptr_t g0 = (uintptr_t)grad, g1 = g0 + (uintptr_t)n * amp_dtype_size(g_dt);
    uintptr_t o0 = (uintptr_t)out, o1 = o0 + (uintptr_t)n * sizeof(float);
    bool same = g_dt == AMP_F32 && g0 == o0;
    if (!same && o0 < g1 && g0 < o1)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: out overlaps grad (%s) without being the same f32 buffer", fn,
                        amp_dtype_name(g_dt));
    return AMP_OK;
}

amp_status amp_backend_check_float(const char *fn, amp_dtype dt) {
    if (dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16) return AMP_OK;
    return amp_fail(AMP_ERR_DTYPE, "%s: dtype %s is not a float type", fn, amp_dtype_name(dt));
}

amp_status amp_backend_check_xent(const char *fn, const amp_xent_desc *d, const int32_t *labels) {
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    AMP_TRY(amp_backend_check_float(fn, d->dt));
    if (d->rows < 0 || d->classes < 1 || d->padding < 0)
        return amp_fail(AMP_ERR_SHAPE, "%s: logits [%lld, %lld + %lld padding] need rows >= 0, "
                        "classes >= 1 and padding >= 0", fn, (long long)d->rows,
                        (long long)d->classes, (long long)d->padding);
    if (!(d->label_smoothing >= 0.0f && d->label_smoothing <= 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: label_smoothing = %g is outside [0, 1]", fn,
                        (double)d->label_smoothing);
    if (d->rows > 0 && !labels)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'labels' is NULL", fn);
    return AMP_OK;
}

amp_status amp_backend_check_dropout(const char *fn, amp_dtype dt, int64_t n, float p) {
    AMP_TRY(amp_backend_check_float(fn, dt));
    if (n < 0) return amp_fail(AMP_ERR_INVALID_ARG, "%s: n = %lld < 0", fn, (long long)n);
    if (!(p >= 0.0f && p < 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: p = %g is outside [0, 1)", fn, (double)p);
    return AMP_OK;
}

amp_status amp_backend_check_n(const char *fn, int64_t n) {
    if (n >= 0) return AMP_OK;
    return amp_fail(AMP_ERR_INVALID_ARG, "%s: n = %lld < 0", fn, (long long)n);
}

amp_status amp_backend_check_mse(const char *fn, amp_dtype dt, int64_t n, const void *a,
                                 const void *b) {
    AMP_TRY(amp_backend_check_float(fn, dt));
    AMP_TRY(amp_backend_check_n(fn, n));
    if (n > 0 && (!a || !b))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument '%s' is NULL", fn, a ? "b" : "a");
    return AMP_OK;
}

amp_status amp_backend_check_bn(const char *fn, const amp_bn_desc *d, amp_bn_pass pass) {
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    AMP_TRY(amp_backend_check_float(fn, d->dtype));
    if (d->n < 1 || d->c < 1 || d->hw < 1)
        return amp_fail(AMP_ERR_SHAPE, "%s: shape [n %lld, c %lld, hw %lld] has an empty dimension",
                        fn, (long long)d->n, (long long)d->c, (long long)d->hw);
    /* The unbiased variance needs two values; PyTorch refuses the same batch ("Expected more
     * than 1 value per channel when training"). */
    if (pass == AMP_BN_PASS_TRAIN && d->n * d->hw < 2)
        return amp_fail(AMP_ERR_SHAPE,
                        "%s: 1 value per channel (n %lld x hw %lld); training needs more than 1",
                        fn, (long long)d->n, (long long)d->hw);
    if (pass == AMP_BN_PASS_SYNC && d->relu)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: d->relu is set; SyncBatchNorm's entries do not "
                        "take it (mask dy with AMP_BINARY_RELU_BWD on the forward's y and clear it)",
                        fn);
    return AMP_OK;
}

amp_status amp_backend_check_bn_bwd_y(const char *fn, const amp_bn_desc *d, const void *y) {
    if (d->relu && !y)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'y' is NULL; d->relu is set, and the "
                        "backward masks dy by the forward's output y", fn);
    if (!d->relu && y)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'y' is given but d->relu is not set "
                        "(y is read only to mask dy after a fused ReLU)", fn);
    return AMP_OK;
}

amp_status amp_backend_check_bn_count(const char *fn, int64_t count, bool unbiased) {
    if (count < (unbiased ? 2 : 1))
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: count %lld values per channel over all ranks; want >= %d%s", fn,
                        (long long)count, unbiased ? 2 : 1,
                        unbiased ? " (the unbiased running variance divides by count - 1)" : "");
    return AMP_OK;
}

amp_status amp_backend_check_bn_bwd_elemt(const char *fn, const amp_bn_desc *d, int64_t count,
                                          const void *x, const void *dy, const float *mean,
                                          const float *invstd, const float *sum_dy,
                                          const float *sum_dy_xmu, const void *dx) {
    AMP_TRY(amp_backend_check_bn(fn, d, AMP_BN_PASS_SYNC));
    AMP_TRY(amp_backend_check_bn_count(fn, count, false));
    const struct {
        const char *name;
        const void *p;
    } args[] = {{"x", x}, {"dy", dy}, {"mean", mean}, {"invstd", invstd}, {"sum_dy", sum_dy},
                {"sum_dy_xmu", sum_dy_xmu}, {"dx", dx}};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        if (!args[i].p)
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument '%s' is NULL", fn, args[i].name);
    return AMP_OK;
}

amp_status amp_backend_check_pool(const char *fn, const amp_pool_desc *d) {
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    AMP_TRY(amp_backend_check_float(fn, d->dtype));
    if (d->n < 1 || d->c < 1 || d->h_in < 1 || d->w_in < 1)
        return amp_fail(AMP_ERR_SHAPE, "%s: input [%lld, %lld, %lld, %lld] has an empty dimension",
                        fn, (long long)d->n, (long long)d->c, (long long)d->h_in,
                        (long long)d->w_in);
    if (d->k < 1 || d->stride < 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: kernel %lld and stride %lld must be >= 1", fn,
                        (long long)d->k, (long long)d->stride);
    /* PyTorch: "pad should be at most half of effective kernel size"; it keeps every window
     * non-empty. */
    if (d->pad < 0 || d->pad > d->k / 2)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: pad %lld is outside [0, kernel/2 = %lld]", fn,
                        (long long)d->pad, (long long)(d->k / 2));
    int64_t h_out = (d->h_in + 2 * d->pad - d->k) / d->stride + 1;
    int64_t w_out = (d->w_in + 2 * d->pad - d->k) / d->stride + 1;
    if (d->h_in + 2 * d->pad < d->k || d->w_in + 2 * d->pad < d->k || d->h_out != h_out ||
        d->w_out != w_out)
        return amp_fail(AMP_ERR_SHAPE,
                        "%s: output %lld x %lld does not match input %lld x %lld, kernel %lld, "
                        "stride %lld, pad %lld",
                        fn, (long long)d->h_out, (long long)d->w_out, (long long)d->h_in,
                        (long long)d->w_in, (long long)d->k, (long long)d->stride,
                        (long long)d->pad);
    if (d->h_in * d->w_in > INT32_MAX)
        return amp_fail(AMP_ERR_SHAPE, "%s: input plane %lld x %lld does not fit an i32 plane index", fn,
                        (long long)d->h_in, (long long)d->w_in);
    return AMP_OK;
}

amp_status amp_backend_check_conv2d(const char *fn, const amp_conv2d_desc *d) {
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", fn);
    if (d->n < 1 || d->c_in < 1 || d->h_in < 1 || d->w_in < 1 || d->c_out < 1 || d->kh < 1 ||
        d->kw < 1)
        return amp_fail(AMP_ERR_SHAPE,
                        "%s: x [%lld, %lld, %lld, %lld], w [%lld, %lld, %lld, %lld]: every size "
                        "must be >= 1",
                        fn, (long long)d->n, (long long)d->c_in, (long long)d->h_in,
                        (long long)d->w_in, (long long)d->c_out, (long long)d->c_in,
                        (long long)d->kh, (long long)d->kw);
    if (d->stride_h < 1 || d->stride_w < 1 || d->pad_h < 0 || d->pad_w < 0)
        return amp_fail(AMP_ERR_SHAPE,
                        "%s: stride (%lld, %lld) must be >= 1, pad (%lld, %lld) >= 0", fn,
                        (long long)d->stride_h, (long long)d->stride_w, (long long)d->pad_h,
                        (long long)d->pad_w);
    /* Bounds far beyond any real image that keep `in + 2 pad - k` below int64 overflow. */
    const int64_t limit = (int64_t)1 << 60;
    if (d->h_in > limit || d->w_in > limit || d->pad_h > limit || d->pad_w > limit)
        return amp_fail(AMP_ERR_SHAPE, "%s: input %lldx%lld with pad (%lld, %lld) is too large",
                        fn, (long long)d->h_in, (long long)d->w_in, (long long)d->pad_h,
                        (long long)d->pad_w);
    /* PyTorch's output size: floor((in + 2 pad - k) / stride) + 1, and the window must fit. */
    int64_t span_h = d->h_in + 2 * d->pad_h - d->kh, span_w = d->w_in + 2 * d->pad_w - d->kw;
    int64_t want_h = span_h < 0 ? 0 : span_h / d->stride_h + 1;
    int64_t want_w = span_w < 0 ? 0 : span_w / d->stride_w + 1;
    if (span_h < 0 || span_w < 0 || d->h_out != want_h || d->w_out != want_w)
        return amp_fail(AMP_ERR_SHAPE,
                        "%s: output %lldx%lld, but input %lldx%lld, kernel %lldx%lld, stride "
                        "(%lld, %lld), pad (%lld, %lld) give %lldx%lld",
                        fn, (long long)d->h_out, (long long)d->w_out, (long long)d->h_in,
                        (long long)d->w_in, (long long)d->kh, (long long)d->kw,
                        (long long)d->stride_h, (long long)d->stride_w, (long long)d->pad_h,
                        (long long)d->pad_w, (long long)want_h, (long long)want_w);
    /* UNSUPPORTED rather than DTYPE: what both backends' GEMMs answer for a dtype they do not
     * take. */
    if (d->dtype != AMP_F32 && d->dtype != AMP_F16 && d->dtype != AMP_BF16)
        return amp_fail(AMP_ERR_UNSUPPORTED, "%s: dtype %s: the convolution takes f32, f16 or bf16",
                        fn, amp_dtype_name(d->dtype));
    return AMP_OK;
}

amp_status amp_backend_check_gemm_fused(const char *fn, const amp_gemm_desc *d) {
    if (d->epilogue < AMP_GEMM_EPILOGUE_NONE || d->epilogue > AMP_GEMM_EPILOGUE_GELU_ERF)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: unknown epilogue %d", fn, (int)d->epilogue);
    if (amp_gemm_epilogue_is_gelu(d->epilogue)) {
        if (d->beta != 0.0f)
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: a GELU epilogue with beta %g (it writes the "
                            "pre-activation to aux, not C: beta must be 0)", fn, (double)d->beta);
        if (d->m > 0 && d->n > 0 && (!d->aux || d->aux == d->c))
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: a GELU epilogue needs aux, a buffer of C's "
                            "shape other than C, for the pre-activation", fn);
    }
    if (d->batch < 0 || d->stride_a < 0 || d->stride_b < 0 || d->stride_c < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: batch %lld, strides %lld, %lld, %lld: none may "
                        "be negative", fn, (long long)d->batch, (long long)d->stride_a,
                        (long long)d->stride_b, (long long)d->stride_c);
    if (d->batch > 1 && d->bias_grad)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: bias_grad with a batch of %lld products (sum "
                        "the bias gradient over them in one GEMM)", fn, (long long)d->batch);
    if (d->batch > 1 && d->m > 0 && d->n > 0 && d->stride_c < (d->m - 1) * d->ldc + d->n)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: stride_c %lld makes the products' C overlap "
                        "(m %lld, ldc %lld, n %lld)", fn, (long long)d->stride_c,
                        (long long)d->m, (long long)d->ldc, (long long)d->n);
    if (!d->bias_grad) return AMP_OK;
    if (!d->trans_a)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: bias_grad needs trans_a (the weight gradient dY^T X, A = dY)", fn);
    if (d->bias || d->epilogue != AMP_GEMM_EPILOGUE_NONE)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: bias_grad cannot be combined with a bias or an epilogue", fn);
    return AMP_OK;
}

amp_status amp_backend_check_bn_bwd(const char *fn, const amp_bn_desc *d, const void *y) {
    AMP_TRY(amp_backend_check_bn(fn, d, AMP_BN_PASS_BWD));
    return amp_backend_check_bn_bwd_y(fn, d, y);
}

amp_status amp_backend_check_bn_sync_stats(const char *fn, const amp_bn_desc *d, int64_t count,
                                           const float *s2) {
    AMP_TRY(amp_backend_check_bn(fn, d, AMP_BN_PASS_SYNC));
    return amp_backend_check_bn_count(fn, count, s2 != NULL);
}
