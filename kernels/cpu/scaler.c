/* The CPU backend's loss-scaler entries: kernels/math/scaler.h applied in place (backend memory
 * is host memory here). */
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/scaler.h"

amp_status amp_cpu_scaler_seed(amp_device_ctx *dev, amp_scaler_dev *s, float cap) {
    AMP_CHECK_ARG(s);
    if (!(cap > 0.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "scaler_seed: cap = %g, want > 0", (double)cap);
    amp_scaler_dev_seed(s, cap);
    return AMP_OK;
}

amp_status amp_cpu_scaler_clip(amp_device_ctx *dev, amp_scaler_dev *s, const float *sumsq_f32,
                               const float *sumsq_half, float max_norm) {
    AMP_CHECK_ARG(s);
    amp_scaler_dev_clip(s, sumsq_f32 ? *sumsq_f32 : 0.0f, sumsq_half ? *sumsq_half : 0.0f,
                        max_norm);
    return AMP_OK;
}

amp_status amp_cpu_scaler_update(amp_device_ctx *dev, amp_scaler_dev *s, const amp_scaler_params *p,
                                 float *found_inf, bool checks, bool other_skip) {
    AMP_CHECK_ARG(s);
    AMP_CHECK_ARG(p);
    int found = found_inf && *found_inf != 0.0f;
    amp_scaler_dev_update(s, p, found, checks, other_skip);
    if (found_inf) *found_inf = 0.0f;
    return AMP_OK;
}
