/* The CUDA backend's table: device probe, device contexts (a stream and each file's state),
 * copies between host and device.
 *
 * amp_backend_cuda() probes once per process (pthread_once). With no usable device it returns
 * NULL and sets amp_last_error to one line naming the CUDA error, e.g. "no CUDA device:
 * cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version
 * (cudaErrorInsufficientDriver)"; the context then falls back to the CPU. The backend runs on the
 * calling thread's current device at the first call (a DDP rank calls cudaSetDevice before).
 *
 * Every entry of core/backend.h is filled, the collectives (NCCL) included. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "core/log.h"
#include "core/profile.h"
#include "kernels/cuda/collectives.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const amp_collectives amp_cuda_collectives = {
    .id = amp_cuda_coll_id,
    .create = amp_cuda_coll_create,
    .free = amp_cuda_coll_free,
    .allreduce = amp_cuda_coll_allreduce,
    .broadcast = amp_cuda_coll_broadcast,
    .join = amp_cuda_coll_join,
    .poll = amp_cuda_coll_poll,
};

static amp_backend *g_backend; /* the default table; NULL when no device answered */
static char g_why[512];        /* why g_backend is NULL */

amp_status amp_cuda_memset_zero(amp_device_ctx *dev, void *p, size_t nbytes) {
    if (nbytes == 0) return AMP_OK;
    AMP_CHECK_ARG(p);
    AMP_CUDA_TRY(cudaMemsetAsync(p, 0, nbytes, dev->stream));
    return AMP_OK;
}

amp_status amp_cuda_copy(amp_device_ctx *dev, void *dst, const void *src, size_t nbytes) {
    if (nbytes == 0) return AMP_OK;
    AMP_CHECK_ARG(dst);
    AMP_CHECK_ARG(src);
    AMP_CUDA_TRY(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, dev->stream));
    return AMP_OK;
}

/* Waits for the stream with the bad-index record's copy queued last, so it comes back in the
 * same wait, and reports what an op noted there (bad_index.h). */
static amp_status wait_reporting(amp_device_ctx *dev, const char *found_at) {
    AMP_CUDA_TRY(amp_cuda_bad_index_fetch(&dev->bad_index, dev->stream));
    amp_profile_host_wait();
    AMP_CUDA_TRY(cudaStreamSynchronize(dev->stream));
    return amp_cuda_bad_index_report(&dev->bad_index, dev->stream, found_at);
}

/* Waits for the stream: the host buffer is complete on return, as the contract requires. An op
 * that met a bad index fails the read, with the values copied. */
amp_status amp_cuda_copy_to_host(amp_device_ctx *dev, void *host, const void *src, size_t nbytes) {
    if (nbytes == 0) return AMP_OK;
    AMP_CHECK_ARG(host);
    AMP_CHECK_ARG(src);
    AMP_CUDA_TRY(cudaMemcpyAsync(host, src, nbytes, cudaMemcpyDeviceToHost, dev->stream));
    return wait_reporting(dev, "a read back to the host");
}

/* Waits for the stream as well: from pinned memory cudaMemcpyAsync returns before the data has
 * been read, and the caller may reuse or free its buffer as soon as this returns (PyTorch's
 * non_blocking=False). */
amp_status amp_cuda_copy_from_host(amp_device_ctx *dev, void *dst, const void *host,
                                   size_t nbytes) {
    if (nbytes == 0) return AMP_OK;
    AMP_CHECK_ARG(dst);
    AMP_CHECK_ARG(host);
    AMP_CUDA_TRY(cudaMemcpyAsync(dst, host, nbytes, cudaMemcpyHostToDevice, dev->stream));
    amp_profile_host_wait();
    AMP_CUDA_TRY(cudaStreamSynchronize(dev->stream));
    return AMP_OK;
}

amp_status amp_cuda_sync(amp_device_ctx *dev) {
    return wait_reporting(dev, "a device synchronisation");
}

/* The table every device context copies; `dev` is set per context. */
static const amp_backend amp_cuda_table = {
        .name = "cuda",
        .device = AMP_DEVICE_CUDA,
        .alloc = amp_cuda_alloc,
        .free = amp_cuda_free,
        .memory_stats = amp_cuda_memory_stats,
        .memory_reset_peak = amp_cuda_memory_reset_peak,
        .system_allocs = amp_cuda_malloc_count,
        .memset_zero = amp_cuda_memset_zero,
        .copy = amp_cuda_copy,
        .copy_to_host = amp_cuda_copy_to_host,
        .copy_from_host = amp_cuda_copy_from_host,
        .sync = amp_cuda_sync,
        .upload_async = amp_cuda_upload_async,
        .mark = amp_cuda_mark,
        .event_free = amp_cuda_event_free,
        .k =
                {
#define AMP_KERNEL(name, category, flops, check, params, args) .name = amp_cuda_##name,
#include "core/backend_kernels.def"
#undef AMP_KERNEL
                },
        .coll = &amp_cuda_collectives,
};

static void device_ctx_free(amp_device_ctx *dev) {
    if (!dev) return;
    if (dev->stream) (void)cudaStreamSynchronize(dev->stream);
    amp_cuda_upload_state_free(dev->upload);
    amp_cuda_conv_state_free(dev, dev->conv);
    amp_cuda_gemm_state_free(dev, dev->gemm); /* gives its workspace back to the allocator */
    amp_cuda_alloc_state_free(dev->alloc);
    amp_cuda_bad_index_free(&dev->bad_index);
    if (dev->stream) cudaStreamDestroy(dev->stream);
    free(dev);
}

amp_status amp_cuda_device_open(int ordinal, amp_backend **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    amp_backend *be = malloc(sizeof *be);
    amp_device_ctx *dev = calloc(1, sizeof *dev);
    if (!be || !dev) {
        free(be);
        free(dev);
        return amp_fail(AMP_ERR_OOM, "amp_cuda_device_open: out of host memory");
    }
    *be = amp_cuda_table;
    be->dev = dev;
    dev->device = ordinal;
    amp_status s = AMP_OK;
    cudaError_t e = cudaSetDevice(ordinal);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&dev->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = amp_cuda_bad_index_create(&dev->bad_index, dev->stream);
    if (e != cudaSuccess) {
        s = amp_fail(AMP_ERR_BACKEND, "amp_cuda_device_open(%d): %s (%s)", ordinal,
                     cudaGetErrorString(e), cudaGetErrorName(e));
        (void)cudaGetLastError();
    }
    if (s == AMP_OK) s = amp_cuda_alloc_state_create(&dev->alloc);
    if (s == AMP_OK) s = amp_cuda_gemm_state_create(&dev->gemm);
    if (s == AMP_OK) s = amp_cuda_conv_state_create(&dev->conv);
    if (s == AMP_OK) s = amp_cuda_upload_state_create(&dev->upload);
    if (s != AMP_OK) {
        device_ctx_free(dev);
        free(be);
        return s;
    }
    *out = be;
    return AMP_OK;
}

void amp_cuda_device_close(amp_backend *be) {
    if (!be) return;
    if (be == g_backend) {
        amp_log_msg(AMP_LOG_ERROR, "amp_cuda_device_close: the default table is the process's; it "
                               "is not closed");
        return;
    }
    device_ctx_free(be->dev);
    free(be);
}

static void amp_cuda_probe(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(g_why, sizeof g_why, "no CUDA device: cudaGetDeviceCount: %s (%s)",
                 cudaGetErrorString(e), cudaGetErrorName(e));
        (void)cudaGetLastError();
        return;
    }
    if (n == 0) {
        snprintf(g_why, sizeof g_why, "no CUDA device: cudaGetDeviceCount found 0 devices");
        return;
    }
    int ordinal = 0;
    struct cudaDeviceProp prop;
    if ((e = cudaGetDevice(&ordinal)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess) {
        snprintf(g_why, sizeof g_why, "no usable CUDA device: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        (void)cudaGetLastError();
        return;
    }
    amp_backend *be = NULL;
    if (amp_cuda_device_open(ordinal, &be) != AMP_OK) {
        snprintf(g_why, sizeof g_why, "no usable CUDA device: %s", amp_last_error());
        return;
    }
    amp_log_msg(AMP_LOG_DEBUG, "CUDA backend on device %d: %s (sm_%d%d, %d SMs, %zu MiB)", ordinal,
            prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.totalGlobalMem >> 20);
    g_backend = be;
}

amp_device_ctx *amp_cuda_device(void) {
    const amp_backend *be = amp_backend_cuda();
    return be ? be->dev : NULL;
}

static bool g_probed; /* set by the probe: the device is fixed from then on */

amp_status amp_backend_select_device(int local_rank) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return AMP_OK; /* no device: the context will use the CPU and say why */
    }
    int want = local_rank % n, now = -1;
    AMP_CUDA_TRY(cudaGetDevice(&now));
    if (g_probed && now != want)
        return amp_fail(AMP_ERR_STATE, "amp_comm_select_device: the CUDA backend already runs on "
                        "device %d; select the device before the first context", now);
    AMP_CUDA_TRY(cudaSetDevice(want));
    return AMP_OK;
}

const amp_backend *amp_backend_cuda(void) {
    pthread_once(&g_once, amp_cuda_probe);
    g_probed = true;
    if (!g_backend) amp_fail(AMP_ERR_NO_DEVICE, "%s", g_why);
    return g_backend;
}
