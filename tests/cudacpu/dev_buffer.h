/* Device buffers for the cudacpu tests, used as a test on a GPU must use them: host code never
 * dereferences device memory (cudacpu's guard aborts when it does, a GPU would fault or read
 * garbage), and data moves with cudaMemcpy only.
 *
 * A dev_buf owns cudaMalloc'd memory of nbytes plus DEV_GUARD guard bytes after it, and a host
 * mirror of the nbytes: fill the mirror and upload() before a launch, synchronise (dev_sync) and
 * download() after it, then check the mirror. The guard bytes are written once at allocation from
 * a host pattern and read back by guard_intact(): a kernel that writes past its n elements
 * changes them. cudaMemcpy runs on the legacy default stream, so it is ordered after kernels on
 * stream 0 and on blocking streams; work on a non-blocking stream needs that stream synchronised
 * first (dev_sync, or the backend's copy_to_host).
 *
 * A failed runtime call ends the test (exit 1) with the call and the CUDA error: the checks after
 * it would compare a stale mirror. */
#ifndef AMP_TESTS_CUDACPU_DEV_BUFFER_H
#define AMP_TESTS_CUDACPU_DEV_BUFFER_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

constexpr size_t DEV_GUARD = 64;
constexpr uint8_t DEV_GUARD_BYTE = 0xa5;

static inline void dev_check(cudaError_t e, const char *call, size_t nbytes) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "FATAL %s (%zu bytes): %s (%s)\n", call, nbytes, cudaGetErrorString(e),
            cudaGetErrorName(e));
    exit(1);
}

/* Waits for all queued device work; false (with the error printed) when some of it failed: a
 * kernel's fault is reported by the next synchronising call, not by its launch. */
static inline bool dev_sync(void) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess)
        fprintf(stderr, "cudaDeviceSynchronize: %s (%s)\n", cudaGetErrorString(e),
                cudaGetErrorName(e));
    return e == cudaSuccess;
}

struct dev_buf {
    void *ptr = nullptr;       /* device memory: passed to kernels, never dereferenced here */
    size_t nbytes = 0;         /* usable bytes; the guard follows them */
    std::vector<uint8_t> host; /* the mirror, nbytes long, zeroed at allocation */

    explicit dev_buf(size_t n) : nbytes(n), host(n) {
        dev_check(cudaMalloc(&ptr, nbytes + DEV_GUARD), "cudaMalloc", nbytes + DEV_GUARD);
        uint8_t guard[DEV_GUARD];
        memset(guard, DEV_GUARD_BYTE, DEV_GUARD);
        dev_check(cudaMemcpy((uint8_t *)ptr + nbytes, guard, DEV_GUARD, cudaMemcpyHostToDevice),
                  "cudaMemcpy guard H2D", DEV_GUARD);
    }
    dev_buf(dev_buf &&o) noexcept : ptr(o.ptr), nbytes(o.nbytes), host(std::move(o.host)) {
        o.ptr = nullptr;
        o.nbytes = 0;
    }
    dev_buf(const dev_buf &) = delete;
    dev_buf &operator=(const dev_buf &) = delete;
    dev_buf &operator=(dev_buf &&) = delete;
    /* cudaFree waits for the device first, so a buffer still read by queued work is not freed
     * under it. */
    ~dev_buf() {
        if (ptr) dev_check(cudaFree(ptr), "cudaFree", nbytes + DEV_GUARD);
    }

    /* The device pointer and the mirror, typed. */
    template <typename T> T *dev() const { return (T *)ptr; }
    template <typename T> T *h() { return (T *)host.data(); }

    /* Mirror -> device, all nbytes. */
    void upload() {
        if (nbytes)
            dev_check(cudaMemcpy(ptr, host.data(), nbytes, cudaMemcpyHostToDevice),
                      "cudaMemcpy H2D", nbytes);
    }
    /* Copies nbytes of src into the mirror, then uploads. */
    void upload(const void *src) {
        if (nbytes) memcpy(host.data(), src, nbytes);
        upload();
    }
    /* Device -> mirror, all nbytes. */
    void download() {
        if (nbytes)
            dev_check(cudaMemcpy(host.data(), ptr, nbytes, cudaMemcpyDeviceToHost),
                      "cudaMemcpy D2H", nbytes);
    }
    /* The guard bytes, copied back, still hold the pattern. */
    bool guard_intact() const {
        uint8_t guard[DEV_GUARD];
        dev_check(cudaMemcpy(guard, (const uint8_t *)ptr + nbytes, DEV_GUARD,
                             cudaMemcpyDeviceToHost),
                  "cudaMemcpy guard D2H", DEV_GUARD);
        for (size_t i = 0; i < DEV_GUARD; i++)
            if (guard[i] != DEV_GUARD_BYTE) return false;
        return true;
    }
};

#endif
