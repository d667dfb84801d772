/* Batches copied in without making the host wait: the CUDA side of the table's upload_async,
 * mark and event_free (core/backend.h states the contract).
 *
 * A batch goes host -> pinned staging (a memcpy at the call, so the caller's buffer is free at
 * once) -> device on the copy stream, a second non-blocking stream, so that the copy of batch
 * k+1 runs while the compute stream still works on batch k. Two events order it:
 *   - the copy stream waits for `after` (recorded on the compute stream by the caller when the
 *     destination's previous contents were last needed: a double-buffered loader passes the
 *     mark it took one batch earlier);
 *   - the compute stream waits for the copy's own event, so the step that reads the batch starts
 *     after it has landed. No host wait in either.
 * Staging is a ring of AMP_UPLOAD_SLOTS pinned buffers (cudaHostAlloc, grown to the largest
 * batch). Reusing a slot needs its previous copy done: its event is polled, and only when that
 * copy of AMP_UPLOAD_SLOTS batches ago is still running does the host wait for it.
 * The destination block is marked used by the copy stream (amp_cuda_record_stream), so freeing
 * it while the copy is queued cannot hand it out too early. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

#define AMP_UPLOAD_SLOTS 4

typedef struct upload_slot {
    void *pinned;
    size_t size;
    cudaEvent_t done; /* recorded on the copy stream after this slot's copy */
    bool used;
} upload_slot;

/* A device context's uploads: its copy stream (made at the first upload) and staging ring. */
struct amp_cuda_upload_state {
    pthread_mutex_t lock;
    upload_slot slots[AMP_UPLOAD_SLOTS];
    int next;
    cudaStream_t copy_stream;
};

amp_status amp_cuda_upload_state_create(amp_cuda_upload_state **out) {
    amp_cuda_upload_state *u = calloc(1, sizeof *u);
    if (!u) return amp_fail(AMP_ERR_OOM, "amp_cuda_upload_state_create: out of host memory");
    pthread_mutex_init(&u->lock, NULL);
    *out = u;
    return AMP_OK;
}

static amp_status upload_init_locked(amp_cuda_upload_state *u) {
    if (u->copy_stream) return AMP_OK;
    AMP_CUDA_TRY(cudaStreamCreateWithFlags(&u->copy_stream, cudaStreamNonBlocking));
    return AMP_OK;
}

/* The slot for the next copy, ready for nbytes: its previous copy finished, its buffer big
 * enough. */
static amp_status upload_take_slot_locked(amp_cuda_upload_state *u, size_t nbytes,
                                          upload_slot **out) {
    upload_slot *s = &u->slots[u->next];
    u->next = (u->next + 1) % AMP_UPLOAD_SLOTS;
    if (s->used) {
        cudaError_t e = cudaEventQuery(s->done);
        if (e == cudaErrorNotReady) e = cudaEventSynchronize(s->done);
        AMP_CUDA_TRY(e);
    } else {
        AMP_CUDA_TRY(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming));
        s->used = true;
    }
    if (s->size < nbytes) {
        if (s->pinned) AMP_CUDA_TRY(cudaFreeHost(s->pinned));
        s->pinned = NULL;
        s->size = 0;
        AMP_CUDA_TRY(cudaHostAlloc(&s->pinned, nbytes, cudaHostAllocDefault));
        s->size = nbytes;
    }
    *out = s;
    return AMP_OK;
}

static amp_status upload_locked(amp_device_ctx *dev, void *dst, const void *host, size_t nbytes,
                                void *after) {
    amp_cuda_upload_state *u = dev->upload;
    AMP_TRY(upload_init_locked(u));
    upload_slot *s = NULL;
    AMP_TRY(upload_take_slot_locked(u, nbytes, &s));
    memcpy(s->pinned, host, nbytes);
    if (after) AMP_CUDA_TRY(cudaStreamWaitEvent(u->copy_stream, (cudaEvent_t)after, 0));
    AMP_TRY(amp_cuda_record_stream(dev, dst, u->copy_stream));
    AMP_CUDA_TRY(cudaMemcpyAsync(dst, s->pinned, nbytes, cudaMemcpyHostToDevice, u->copy_stream));
    AMP_CUDA_TRY(cudaEventRecord(s->done, u->copy_stream));
    AMP_CUDA_TRY(cudaStreamWaitEvent(dev->stream, s->done, 0));
    return AMP_OK;
}

amp_status amp_cuda_upload_async(amp_device_ctx *dev, void *dst, const void *host, size_t nbytes,
                                 void *after) {
    if (nbytes == 0) return AMP_OK;
    AMP_CHECK_ARG(dst);
    AMP_CHECK_ARG(host);
    pthread_mutex_lock(&dev->upload->lock);
    amp_status s = upload_locked(dev, dst, host, nbytes, after);
    pthread_mutex_unlock(&dev->upload->lock);
    return s;
}

amp_status amp_cuda_mark(amp_device_ctx *dev, void **event) {
    AMP_CHECK_ARG(event);
    if (!*event) {
        cudaEvent_t e;
        AMP_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        *event = e;
    }
    AMP_CUDA_TRY(cudaEventRecord((cudaEvent_t)*event, dev->stream));
    return AMP_OK;
}

void amp_cuda_event_free(amp_device_ctx *dev, void *event) {
    if (event) cudaEventDestroy((cudaEvent_t)event);
}

/* After the context's stream has been synchronised (amp_cuda_device_close): nothing is queued. */
void amp_cuda_upload_state_free(amp_cuda_upload_state *u) {
    if (!u) return;
    if (u->copy_stream) {
        cudaStreamSynchronize(u->copy_stream);
        cudaStreamDestroy(u->copy_stream);
    }
    for (int i = 0; i < AMP_UPLOAD_SLOTS; i++) {
        if (u->slots[i].pinned) cudaFreeHost(u->slots[i].pinned);
        if (u->slots[i].used) cudaEventDestroy(u->slots[i].done);
    }
    pthread_mutex_destroy(&u->lock);
    free(u);
}
