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

amp_status amp_backend_check_nonfinite(const char *fn, amp_dtype dt, int64_t n, const void *x,
                                       const float *found_inf) {
    if (dt != AMP_F32 && dt != AMP_F16 && dt != AMP_BF16)
        return amp_fail(AMP_ERR_DTYPE, "%s: dtype %s, want f32, f16 or bf16", fn,
                        amp_dtype_name(dt));
    if (n < 0) return amp_fail(AMP_ERR_INVALID_ARG, "%s: n = %lld < 0", fn, (long long)n);
    if (!found_inf) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'found_inf' is NULL", fn);
    if (n > 0 && !x) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'x' is NULL", fn);
    return AMP_OK;
}

amp_status amp_backend_check_float(const char *fn, amp_dtype dt) {
    if (dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16) return AMP_OK;
    return amp_fail(AMP_ERR_DTYPE, "%s: dtype %s is not a float type", fn, amp_dtype_name(dt));
}

amp_status amp_backend_check_xent(const char *fn, amp_dtype dt, int64_t rows, int64_t classes,
                                  const int32_t *labels) {
    AMP_TRY(amp_backend_check_float(fn, dt));
    if (rows < 0 || classes < 1)
        return amp_fail(AMP_ERR_SHAPE, "%s: logits [%lld, %lld] need rows >= 0 and classes >= 1",
                        fn, (long long)rows, (long long)classes);
    if (rows > 0 && !labels)
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
