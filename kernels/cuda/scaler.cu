/* The loss scaler on the device: the CUDA side of the table's scaler_seed, scaler_clip and
 * scaler_update. Each is one thread applying kernels/math/scaler.h (the arithmetic the host's
 * scaler and the CPU backend run) to the amp_scaler_dev in device memory, queued on the backend's
 * stream after the kernels that produced its inputs: the scale, the overflow flag and the clip
 * coefficient never travel to the host within a step. A one-thread launch costs a few
 * microseconds of latency and no bandwidth; the step issues three. */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/scaler.h"

static __global__ void scaler_seed_kernel(amp_scaler_dev *s, float cap) {
    amp_scaler_dev_seed(s, cap);
}

static __global__ void scaler_clip_kernel(amp_scaler_dev *s, const float *sumsq_f32,
                                          const float *sumsq_half, float max_norm) {
    amp_scaler_dev_clip(s, sumsq_f32 ? *sumsq_f32 : 0.0f, sumsq_half ? *sumsq_half : 0.0f,
                        max_norm);
}

/* The configuration by value: the host's struct may be gone when the kernel runs. */
static __global__ void scaler_update_kernel(amp_scaler_dev *s, amp_scaler_params p,
                                            float *found_inf, int checks, int other_skip) {
    int found = found_inf && *found_inf != 0.0f;
    amp_scaler_dev_update(s, &p, found, checks, other_skip);
    if (found_inf) *found_inf = 0.0f;
}

amp_status amp_cuda_scaler_seed(amp_device_ctx *dev, amp_scaler_dev *s, float cap) {
    AMP_CHECK_ARG(s);
    if (!(cap > 0.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "scaler_seed: cap = %g, want > 0", (double)cap);
    cudaStream_t stream = dev->stream;
    scaler_seed_kernel<<<1, 1, 0, stream>>>(s, cap);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

amp_status amp_cuda_scaler_clip(amp_device_ctx *dev, amp_scaler_dev *s, const float *sumsq_f32,
                                const float *sumsq_half, float max_norm) {
    AMP_CHECK_ARG(s);
    cudaStream_t stream = dev->stream;
    scaler_clip_kernel<<<1, 1, 0, stream>>>(s, sumsq_f32, sumsq_half, max_norm);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

amp_status amp_cuda_scaler_update(amp_device_ctx *dev, amp_scaler_dev *s,
                                  const amp_scaler_params *p, float *found_inf, bool checks,
                                  bool other_skip) {
    AMP_CHECK_ARG(s);
    AMP_CHECK_ARG(p);
    cudaStream_t stream = dev->stream;
    scaler_update_kernel<<<1, 1, 0, stream>>>(s, *p, found_inf, checks, other_skip);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}
