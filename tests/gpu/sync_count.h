/* Counts the CUDA runtime calls that make the host wait, by wrapping them at link time
 * (-Wl,--wrap=..., tests/gpu/CMakeLists.txt: AMP_SYNC_WRAP_OPTIONS): cudaStreamSynchronize,
 * cudaDeviceSynchronize, cudaEventSynchronize, cudaMemcpy (every kind waits) and cudaFree (it
 * synchronises the device) count as waits; cudaMemcpy and cudaMemcpyAsync into host memory as
 * device reads (the backend's copy_to_host waits right after its cudaMemcpyAsync); cudaMalloc
 * calls apart. The library is linked statically, so its own calls go through the wrappers.
 * Included by exactly one translation unit of a program (it defines the wrappers). */
#ifndef AMP_TESTS_GPU_SYNC_COUNT_H
#define AMP_TESTS_GPU_SYNC_COUNT_H

#include <cuda_runtime_api.h>

long g_syncs, g_mallocs, g_d2h;

cudaError_t __real_cudaStreamSynchronize(cudaStream_t s);
cudaError_t __real_cudaDeviceSynchronize(void);
cudaError_t __real_cudaEventSynchronize(cudaEvent_t e);
cudaError_t __real_cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k);
cudaError_t __real_cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                                   cudaStream_t st);
cudaError_t __real_cudaMalloc(void **p, size_t n);
cudaError_t __real_cudaFree(void *p);
cudaError_t __wrap_cudaStreamSynchronize(cudaStream_t s);
cudaError_t __wrap_cudaDeviceSynchronize(void);
cudaError_t __wrap_cudaEventSynchronize(cudaEvent_t e);
cudaError_t __wrap_cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k);
cudaError_t __wrap_cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                                   cudaStream_t st);
cudaError_t __wrap_cudaMalloc(void **p, size_t n);
cudaError_t __wrap_cudaFree(void *p);

cudaError_t __wrap_cudaStreamSynchronize(cudaStream_t s) {
    g_syncs++;
    return __real_cudaStreamSynchronize(s);
}
cudaError_t __wrap_cudaDeviceSynchronize(void) {
    g_syncs++;
    return __real_cudaDeviceSynchronize();
}
cudaError_t __wrap_cudaEventSynchronize(cudaEvent_t e) {
    g_syncs++;
    return __real_cudaEventSynchronize(e);
}
cudaError_t __wrap_cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) {
    g_syncs++;
    if (k == cudaMemcpyDeviceToHost || k == cudaMemcpyDefault) g_d2h++;
    return __real_cudaMemcpy(d, s, n, k);
}
cudaError_t __wrap_cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                                   cudaStream_t st) {
    if (k == cudaMemcpyDeviceToHost) g_d2h++;
    return __real_cudaMemcpyAsync(d, s, n, k, st);
}
cudaError_t __wrap_cudaMalloc(void **p, size_t n) {
    g_mallocs++;
    return __real_cudaMalloc(p, n);
}
cudaError_t __wrap_cudaFree(void *p) {
    g_syncs++;
    return __real_cudaFree(p);
}

#endif
