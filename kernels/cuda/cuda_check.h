/* One checking macro per foreign library family (STYLE.md rule 7): each turns the library's code
 * into AMP_ERR_BACKEND with a message naming the function, the call's text and the library's own
 * name and description of the code, e.g.
 *   "amp_cuda_copy: cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, s):
 *    invalid argument (cudaErrorInvalidValue)".
 * Usable from C (.c) and C++ (.cu); the caller includes the library header (cuda_runtime_api.h,
 * cublasLt.h) and core/error.h. */
#ifndef AMP_KERNELS_CUDA_CHECK_H
#define AMP_KERNELS_CUDA_CHECK_H

#include "core/env.h"
#include "core/error.h"

/* A cudaError_t call; also the launch check (AMP_CUDA_TRY(cudaGetLastError())), which clears the
 * launch error so that it is reported once. */
#define AMP_CUDA_TRY(call)                                                                         \
    do {                                                                                           \
        cudaError_t amp_cuda_e_ = (call);                                                          \
        if (amp_cuda_e_ != cudaSuccess)                                                            \
            return amp_fail(AMP_ERR_BACKEND, "%s: %s: %s (%s)", __func__, #call,                   \
                            cudaGetErrorString(amp_cuda_e_), cudaGetErrorName(amp_cuda_e_));       \
    } while (0)

/* After a kernel launch on `stream`: the launch's own error (cleared, reported once) and, when
 * the environment has AMP_CUDA_SYNC_DEBUG=1, a wait for the stream, so that a fault of the kernel
 * on the device is reported by the op that launched it instead of by a later, unrelated call
 * (PyTorch's CUDA_LAUNCH_BLOCKING=1). Read once per translation unit. Needs cuda_runtime_api.h. */
static inline int amp_cuda_sync_debug(void) {
    static int on = -1;
    if (on < 0) on = amp_env_flag("AMP_CUDA_SYNC_DEBUG");
    return on;
}
#define AMP_CUDA_LAUNCHED(stream)                                                                  \
    do {                                                                                           \
        AMP_CUDA_TRY(cudaGetLastError());                                                          \
        if (amp_cuda_sync_debug()) {                                                               \
            cudaError_t amp_cuda_d_ = cudaStreamSynchronize(stream);                               \
            if (amp_cuda_d_ != cudaSuccess)                                                        \
                return amp_fail(AMP_ERR_BACKEND,                                                   \
                                "%s: the kernel failed on the device (AMP_CUDA_SYNC_DEBUG=1): "    \
                                "%s (%s)",                                                         \
                                __func__, cudaGetErrorString(amp_cuda_d_),                         \
                                cudaGetErrorName(amp_cuda_d_));                                    \
        }                                                                                          \
    } while (0)

/* A cublasStatus_t call of cuBLASLt. */
#define AMP_CUBLAS_TRY(call)                                                                       \
    do {                                                                                           \
        cublasStatus_t amp_cublas_s_ = (call);                                                     \
        if (amp_cublas_s_ != CUBLAS_STATUS_SUCCESS)                                                \
            return amp_fail(AMP_ERR_BACKEND, "%s: %s: %s (%s)", __func__, #call,                   \
                            cublasLtGetStatusString(amp_cublas_s_),                                \
                            cublasLtGetStatusName(amp_cublas_s_));                                 \
    } while (0)

#endif
