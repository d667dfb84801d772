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
 * Safety of reuse comes from the backend's single stream (cuda_backend.h): a block freed while
 * queued work still reads it is only handed to work queued later on the same stream.
 * One mutex guards the tables: contexts on different threads may share the backend. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

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

typedef struct block {
    void *ptr;
    size_t size; /* the class size, what cudaMalloc was asked for */
    int cls;
    struct block *next;
} block;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static block *g_free[N_CLASSES];
static block *g_live[N_LIVE_BUCKETS];
static size_t g_in_use, g_cached, g_peak;

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

/* Frees every cached block; the caller holds g_lock. */
static amp_status release_cached_locked(void) {
    for (int c = 0; c < N_CLASSES; c++) {
        while (g_free[c]) {
            block *b = g_free[c];
            g_free[c] = b->next;
            g_cached -= b->size;
            cudaError_t e = cudaFree(b->ptr);
            free(b);
            if (e != cudaSuccess)
                return amp_fail(AMP_ERR_BACKEND, "amp_cuda_alloc_release_cached: cudaFree: %s (%s)",
                                cudaGetErrorString(e), cudaGetErrorName(e));
        }
    }
    return AMP_OK;
}

static amp_status alloc_locked(size_t nbytes, void **out) {
    int cls;
    size_t size;
    if (!size_class(nbytes, &cls, &size))
        return amp_fail(AMP_ERR_OOM, "amp_cuda_alloc: %zu bytes is beyond any device", nbytes);
    block *b = g_free[cls];
    if (b) {
        g_free[cls] = b->next;
        g_cached -= b->size;
    } else {
        b = malloc(sizeof *b);
        if (!b) return amp_fail(AMP_ERR_OOM, "amp_cuda_alloc: host malloc of a block record failed");
        b->size = size;
        b->cls = cls;
        cudaError_t e = cudaMalloc(&b->ptr, size);
        if (e == cudaErrorMemoryAllocation && g_cached > 0) {
            (void)cudaGetLastError(); /* the failed cudaMalloc is handled here, not by a later check */
            amp_status s = release_cached_locked();
            if (s != AMP_OK) {
                free(b);
                return s;
            }
            e = cudaMalloc(&b->ptr, size);
        }
        if (e != cudaSuccess) {
            free(b);
            if (e == cudaErrorMemoryAllocation) {
                (void)cudaGetLastError();
                return amp_fail(AMP_ERR_OOM,
                                "amp_cuda_alloc: out of device memory for %zu bytes (block of %zu; "
                                "%zu bytes in use): cudaMalloc: %s (%s)",
                                nbytes, size, g_in_use, cudaGetErrorString(e), cudaGetErrorName(e));
            }
            return amp_fail(AMP_ERR_BACKEND, "amp_cuda_alloc: cudaMalloc(%zu): %s (%s)", size,
                            cudaGetErrorString(e), cudaGetErrorName(e));
        }
    }
    size_t h = live_bucket(b->ptr);
    b->next = g_live[h];
    g_live[h] = b;
    g_in_use += b->size;
    if (g_in_use > g_peak) g_peak = g_in_use;
    *out = b->ptr;
    return AMP_OK;
}

amp_status amp_cuda_alloc(size_t nbytes, void **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    pthread_mutex_lock(&g_lock);
    amp_status s = alloc_locked(nbytes, out);
    pthread_mutex_unlock(&g_lock);
    return s;
}

void amp_cuda_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_lock);
    block **link = &g_live[live_bucket(p)];
    while (*link && (*link)->ptr != p) link = &(*link)->next;
    block *b = *link;
    if (b) {
        *link = b->next;
        g_in_use -= b->size;
        b->next = g_free[b->cls];
        g_free[b->cls] = b;
        g_cached += b->size;
    }
    pthread_mutex_unlock(&g_lock);
    if (!b) amp_log(AMP_LOG_ERROR, "amp_cuda_free: %p was not allocated by the CUDA backend", p);
}

amp_status amp_cuda_alloc_release_cached(void) {
    pthread_mutex_lock(&g_lock);
    amp_status s = release_cached_locked();
    pthread_mutex_unlock(&g_lock);
    return s;
}

void amp_cuda_alloc_stats(size_t *in_use, size_t *cached) {
    pthread_mutex_lock(&g_lock);
    if (in_use) *in_use = g_in_use;
    if (cached) *cached = g_cached;
    pthread_mutex_unlock(&g_lock);
}

void amp_cuda_memory_stats(size_t *in_use, size_t *peak) {
    pthread_mutex_lock(&g_lock);
    if (in_use) *in_use = g_in_use;
    if (peak) *peak = g_peak;
    pthread_mutex_unlock(&g_lock);
}

void amp_cuda_memory_reset_peak(void) {
    pthread_mutex_lock(&g_lock);
    g_peak = g_in_use;
    pthread_mutex_unlock(&g_lock);
}
