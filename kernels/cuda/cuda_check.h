/* One checking macro per foreign library family (STYLE.md rule 7): each turns the library's code
 * into AMP_ERR_BACKEND with a message naming the function, the call's text and the library's own
 * name and description of the code, e.g.
 *   "amp_cuda_copy: cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, s):
 *    invalid argument (cudaErrorInvalidValue)".
 * Usable from C (.c) and C++ (.cu); the caller includes the library header (cuda_runtime_api.h,
 * cublasLt.h) and core/error.h. */
#ifndef AMP_KERNELS_CUDA_CHECK_H
#define AMP_KERNELS_CUDA_CHECK_H

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
