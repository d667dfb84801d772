/* The CUDA backend's caching allocator: after the first training step has touched every size it
 * needs, alloc and free never reach cudaMalloc/cudaFree (DESIGN.md: no cudaMalloc in the
 * steady-state step), as PyTorch's CUDACachingAllocator does for the same reason: cudaMalloc and
 * cudaFree are slow and cudaFree synchronises the device.
 *
 * Sizes are rounded up to a block class and freed blocks wait in the free list of their class:
 *   - up to 1 MiB: multiples of 512 B (2048 classes);
 *   - above 1 MiB: quarter octaves, 1.25, 1.5, 1.75 and 2 x 2^e (at most 25% over the request).
 * A request takes a free block of exactly its class or a fresh cudaMalloc; blocks are never split
 * or merged, which keeps this short and is enough for a training loop that repeats the same sizes.
 * When cudaMalloc runs out of memory, every cached block is released and the call retried once.
 *
 * Safety of reuse: a block freed while queued work still reads it is only handed to work queued
 * later on the context's stream, which runs after it. A block that another stream used (a batch
 * copied in on the side copy stream) is marked with amp_cuda_record_stream, as PyTorch's
 * recordStream: when it is freed, an event is recorded on each such stream and the block waits
 * in a pending list until every event has completed (polled with cudaEventQuery at the next
 * allocation, never waited for), so no other stream can still be using it when it is reused.
 * Each device context (cuda_backend.h) has an allocator of its own, so two contexts share no
 * blocks; one mutex per allocator guards its tables: contexts of amp on different threads may
 * share one device context.
 *
 * AMP_CUDA_NO_CACHING=1 (PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING) turns the cache off: every
 * alloc is a cudaMalloc of exactly the request and every free waits for the device (no stream
 * can still be using the block) and calls cudaFree, so that compute-sanitizer's memcheck sees
 * each tensor's true bounds and every use after free; a cached block would hide both behind its
 * rounded class size and its next owner. scripts/gpu.sh runs memcheck so. Slow: for checking. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

#define SMALL_QUANTUM ((size_t)512)
#define SMALL_MAX ((size_t)1 << 20)
#define N_SMALL_CLASSES ((int)(SMALL_MAX / SMALL_QUANTUM))
/* Quarter-octave classes for 2^20 < size <= 2^63. */
#define N_LARGE_CLASSES (4 * 44)
#define N_CLASSES (N_SMALL_CLASSES + N_LARGE_CLASSES)
/* Buckets of the table of live blocks (pointer -> block); chains stay short for the few thousand
 * tensors a model holds. */
#define N_LIVE_BUCKETS 4096

/* Streams other than the backend's that may use one block: the copy stream, and a few more. */
#define MAX_BLOCK_STREAMS 4

typedef struct block {
    void *ptr;
    size_t size; /* the class size, what cudaMalloc was asked for */
    int cls;
    int n_streams;                           /* other streams that used it (record_stream) */
    cudaStream_t streams[MAX_BLOCK_STREAMS];
    cudaEvent_t events[MAX_BLOCK_STREAMS];   /* pending: recorded on them at free */
    struct block *next;
} block;

struct amp_cuda_alloc_state {
    pthread_mutex_t lock;
    block *free[N_CLASSES];
    block *live[N_LIVE_BUCKETS];
    block *pending; /* freed, waiting for their events */
    size_t in_use, cached, peak;
    uint64_t mallocs; /* cudaMalloc calls, for the steady-state check */
};

amp_status amp_cuda_alloc_state_create(amp_cuda_alloc_state **out) {
    amp_cuda_alloc_state *a = calloc(1, sizeof *a);
    if (!a) return amp_fail(AMP_ERR_OOM, "amp_cuda_alloc_state_create: out of host memory");
    pthread_mutex_init(&a->lock, NULL);
    *out = a;
    return AMP_OK;
}

/* AMP_CUDA_NO_CACHING set to anything but "" or "0"; read once (callers hold the lock). */
static bool no_caching_locked(void) {
    static int set = -1;
    if (set < 0) set = amp_env_flag("AMP_CUDA_NO_CACHING");
    return set;
}

/* The class of a request and its rounded size; false when the size cannot be rounded. */
static bool size_class(size_t nbytes, int *cls, size_t *rounded) {
    if (nbytes <= SMALL_MAX) {
        size_t q = nbytes == 0 ? 1 : (nbytes + SMALL_QUANTUM - 1) / SMALL_QUANTUM;
        *cls = (int)(q - 1);
        *rounded = q * SMALL_QUANTUM;
        return true;
    }
    if (nbytes > ((size_t)1 << 62)) return false;
    int e = 63 - __builtin_clzll((unsigned long long)(nbytes - 1)); /* 2^e < nbytes <= 2^(e+1) */
    size_t step = ((size_t)1 << e) / 4;
    size_t quarters = (nbytes + step - 1) / step; /* 5..8 */
    *cls = N_SMALL_CLASSES + (e - 20) * 4 + (int)(quarters - 5);
    *rounded = quarters * step;
    return true;
}

static size_t live_bucket(const void *p) {
    /* cudaMalloc returns 256-byte aligned pointers: the low bits carry nothing. */
    return (size_t)(((uintptr_t)p >> 8) % N_LIVE_BUCKETS);
}

static void to_free_list_locked(amp_cuda_alloc_state *a, block *b) {
    b->next = a->free[b->cls];
    a->free[b->cls] = b;
    a->cached += b->size;
}

/* Moves every pending block whose events have all completed to its free list; `wait` makes the
 * host wait for them instead (only when memory is released, which synchronises anyway). */
static amp_status sweep_pending_locked(amp_cuda_alloc_state *a, bool wait) {
    for (block **link = &a->pending; *link;) {
        block *b = *link;
        bool done = true;
        for (int i = 0; i < b->n_streams; i++) {
            cudaError_t e = wait ? cudaEventSynchronize(b->events[i]) : cudaEventQuery(b->events[i]);
            if (e == cudaErrorNotReady) {
                done = false;
                break;
            }
            if (e != cudaSuccess)
                return amp_fail(AMP_ERR_BACKEND, "amp_cuda_alloc: a freed block's stream event: "
                                "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        }
        if (!done) {
            link = &b->next;
            continue;
        }
        for (int i = 0; i < b->n_streams; i++) cudaEventDestroy(b->events[i]);
        b->n_streams = 0;
        *link = b->next;
        to_free_list_locked(a, b);
    }
    return AMP_OK;
}

/* Frees every cached block; the caller holds the lock. */
static amp_status release_cached_locked(amp_cuda_alloc_state *a) {
    AMP_TRY(sweep_pending_locked(a, true));
    for (int c = 0; c < N_CLASSES; c++) {
        while (a->free[c]) {
            block *b = a->free[c];
            a->free[c] = b->next;
            a->cached -= b->size;
            cudaError_t e = cudaFree(b->ptr);
            free(b);
            if (e != cudaSuccess)
                return amp_fail(AMP_ERR_BACKEND, "amp_cuda_alloc_release_cached: cudaFree: %s (%s)",
                                cudaGetErrorString(e), cudaGetErrorName(e));
        }
    }
    return AMP_OK;
}

static amp_status alloc_locked(amp_cuda_alloc_state *a, size_t nbytes, void **out) {
    int cls;
    size_t size;
    if (!size_class(nbytes, &cls, &size))
        return amp_fail(AMP_ERR_OOM, "amp_cuda_alloc: %zu bytes is beyond any device", nbytes);
    if (no_caching_locked()) {
        cls = -1;
        size = nbytes ? nbytes : 1;
    }
    if (a->pending) AMP_TRY(sweep_pending_locked(a, false));
    block *b = cls >= 0 ? a->free[cls] : NULL;
    if (b) {
        a->free[cls] = b->next;
        a->cached -= b->size;
    } else {
        b = malloc(sizeof *b);
        if (!b) return amp_fail(AMP_ERR_OOM, "amp_cuda_alloc: host malloc of a block record failed");
        b->size = size;
        b->cls = cls;
        b->n_streams = 0;
        a->mallocs++;
        cudaError_t e = cudaMalloc(&b->ptr, size);
        if (e == cudaErrorMemoryAllocation && a->cached > 0) {
            (void)cudaGetLastError(); /* the failed cudaMalloc is handled here, not by a later check */
            amp_status s = release_cached_locked(a);
            if (s != AMP_OK) {
                free(b);
                return s;
            }
            a->mallocs++;
            e = cudaMalloc(&b->ptr, size);
        }
        if (e != cudaSuccess) {
            free(b);
            if (e == cudaErrorMemoryAllocation) {
                (void)cudaGetLastError();
                return amp_fail(AMP_ERR_OOM,
                                "amp_cuda_alloc: out of device memory for %zu bytes (block of %zu; "
                                "%zu bytes in use): cudaMalloc: %s (%s)",
                                nbytes, size, a->in_use, cudaGetErrorString(e),
                                cudaGetErrorName(e));
            }
            return amp_fail(AMP_ERR_BACKEND, "amp_cuda_alloc: cudaMalloc(%zu): %s (%s)", size,
                            cudaGetErrorString(e), cudaGetErrorName(e));
        }
    }
    size_t h = live_bucket(b->ptr);
    b->next = a->live[h];
    a->live[h] = b;
    a->in_use += b->size;
    if (a->in_use > a->peak) a->peak = a->in_use;
    *out = b->ptr;
    return AMP_OK;
}

amp_status amp_cuda_alloc(amp_device_ctx *dev, size_t nbytes, void **out) {
    amp_cuda_alloc_state *a = dev->alloc;
    AMP_CHECK_ARG(out);
    *out = NULL;
    pthread_mutex_lock(&a->lock);
    amp_status s = alloc_locked(a, nbytes, out);
    pthread_mutex_unlock(&a->lock);
    return s;
}

void amp_cuda_free(amp_device_ctx *dev, void *p) {
    if (!p) return;
    amp_cuda_alloc_state *a = dev->alloc;
    pthread_mutex_lock(&a->lock);
    block **link = &a->live[live_bucket(p)];
    while (*link && (*link)->ptr != p) link = &(*link)->next;
    block *b = *link;
    bool event_failed = false;
    if (b && no_caching_locked()) {
        *link = b->next;
        a->in_use -= b->size;
        /* Explicitly: any stream's queued work may still use the block. */
        cudaError_t e = cudaDeviceSynchronize();
        if (e == cudaSuccess) e = cudaFree(b->ptr);
        free(b);
        pthread_mutex_unlock(&a->lock);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            amp_log_msg(AMP_LOG_ERROR, "amp_cuda_free: cudaFree(%p): %s (%s)", p,
                    cudaGetErrorString(e), cudaGetErrorName(e));
        }
        return;
    }
    if (b) {
        *link = b->next;
        a->in_use -= b->size;
        int recorded = 0;
        for (int i = 0; i < b->n_streams; i++) {
            if (cudaEventCreateWithFlags(&b->events[recorded], cudaEventDisableTiming) !=
                cudaSuccess) {
                event_failed = true;
                continue;
            }
            if (cudaEventRecord(b->events[recorded], b->streams[i]) != cudaSuccess) {
                cudaEventDestroy(b->events[recorded]);
                event_failed = true;
                continue;
            }
            recorded++;
        }
        b->n_streams = recorded;
        if (event_failed) {
            /* Without its events the block cannot be known free of the other streams: it is
             * kept out of reuse (leaked to the cache's accounting) rather than risk a race. */
            (void)cudaGetLastError();
            for (int i = 0; i < recorded; i++) cudaEventDestroy(b->events[i]);
            free(b);
            b = NULL;
        } else if (recorded) {
            b->next = a->pending;
            a->pending = b;
        } else {
            to_free_list_locked(a, b);
        }
    }
    pthread_mutex_unlock(&a->lock);
    if (event_failed)
        amp_log_msg(AMP_LOG_ERROR, "amp_cuda_free: could not record an event for a block used on "
                               "another stream; the block is not reused");
    else if (!b && !event_failed)
        amp_log_msg(AMP_LOG_ERROR, "amp_cuda_free: %p was not allocated by the CUDA backend", p);
}

amp_status amp_cuda_record_stream(amp_device_ctx *dev, void *p, cudaStream_t stream) {
    AMP_CHECK_ARG(p);
    amp_cuda_alloc_state *a = dev->alloc;
    pthread_mutex_lock(&a->lock);
    block *b = a->live[live_bucket(p)];
    while (b && b->ptr != p) b = b->next;
    amp_status s = AMP_OK;
    if (!b) {
        s = amp_fail(AMP_ERR_INVALID_ARG, "amp_cuda_record_stream: %p is not a live block of the "
                     "CUDA backend's allocator", p);
    } else {
        bool known = false;
        for (int i = 0; i < b->n_streams; i++) known |= b->streams[i] == stream;
        if (!known && b->n_streams == MAX_BLOCK_STREAMS)
            s = amp_fail(AMP_ERR_INVALID_ARG, "amp_cuda_record_stream: block %p is already used "
                         "on %d other streams", p, MAX_BLOCK_STREAMS);
        else if (!known)
            b->streams[b->n_streams++] = stream;
    }
    pthread_mutex_unlock(&a->lock);
    return s;
}

uint64_t amp_cuda_malloc_count(amp_device_ctx *dev) {
    amp_cuda_alloc_state *a = dev->alloc;
    pthread_mutex_lock(&a->lock);
    uint64_t n = a->mallocs;
    pthread_mutex_unlock(&a->lock);
    return n;
}

amp_status amp_cuda_alloc_release_cached(amp_device_ctx *dev) {
    amp_cuda_alloc_state *a = dev->alloc;
    pthread_mutex_lock(&a->lock);
    amp_status s = release_cached_locked(a);
    pthread_mutex_unlock(&a->lock);
    return s;
}

void amp_cuda_alloc_stats(amp_device_ctx *dev, size_t *in_use, size_t *cached) {
    amp_cuda_alloc_state *a = dev->alloc;
    pthread_mutex_lock(&a->lock);
    if (in_use) *in_use = a->in_use;
    if (cached) *cached = a->cached;
    pthread_mutex_unlock(&a->lock);
}

void amp_cuda_memory_stats(amp_device_ctx *dev, size_t *in_use, size_t *peak) {
    amp_cuda_alloc_state *a = dev->alloc;
    pthread_mutex_lock(&a->lock);
    if (in_use) *in_use = a->in_use;
    if (peak) *peak = a->peak;
    pthread_mutex_unlock(&a->lock);
}

void amp_cuda_memory_reset_peak(amp_device_ctx *dev) {
    amp_cuda_alloc_state *a = dev->alloc;
    pthread_mutex_lock(&a->lock);
    a->peak = a->in_use;
    pthread_mutex_unlock(&a->lock);
}

void amp_cuda_alloc_state_free(amp_cuda_alloc_state *a) {
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    amp_status s = release_cached_locked(a);
    size_t live = a->in_use;
    pthread_mutex_unlock(&a->lock);
    if (s != AMP_OK) amp_log_msg(AMP_LOG_ERROR, "amp_cuda_alloc_state_free: %s", amp_last_error());
    /* Blocks still handed out belong to tensors not freed: their memory goes with the process. */
    if (live)
        amp_log_msg(AMP_LOG_WARN,
                "amp_cuda_alloc_state_free: %zu bytes still allocated by the "
                "device context closed",
                live);
    for (int h = 0; h < N_LIVE_BUCKETS; h++)
        for (block *b = a->live[h], *next; b; b = next) {
            next = b->next;
            free(b);
        }
    pthread_mutex_destroy(&a->lock);
    free(a);
}
