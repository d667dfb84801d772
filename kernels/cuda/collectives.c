/* Collectives over device memory through NCCL: the CUDA side of the table's coll_* entries
 * (core/backend.h states the contract). DDP's gradient buckets, the loss scaler's overflow flag
 * and SyncBatchNorm's statistics go through here; host memory goes to MPI in parallel/.
 *
 * Streams: NCCL runs on a communication stream of its own, so that a bucket's all-reduce
 * overlaps with the rest of backward on the compute stream (PyTorch's DDP does the same). Two
 * kinds of events order them, and the host waits on neither:
 *   - before each collective the communication stream waits for an event recorded on the
 *     compute stream: the gradients it reduces have been written;
 *   - coll_join makes the compute stream wait for an event recorded on the communication stream
 *     after the last collective: the unscale and the optimizer read reduced gradients.
 * Buffers handed to a collective are whole allocations or views into blocks that live as long as
 * the model (gradients, the scaler's flag), never freed while the collective may run.
 *
 * Failures: NCCL reports a lost peer asynchronously; coll_poll asks ncclCommGetAsyncError and
 * whether the last collective has completed, so that a caller with a deadline (parallel/) can
 * abort the communicator (ncclCommAbort) instead of waiting forever. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "core/error.h"
#include "kernels/cuda/collectives.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

/* An ncclResult_t call. */
#define AMP_NCCL_TRY(call)                                                                         \
    do {                                                                                           \
        ncclResult_t amp_nccl_r_ = (call);                                                         \
        if (amp_nccl_r_ != ncclSuccess)                                                            \
            return amp_fail(AMP_ERR_BACKEND, "%s: %s: %s", __func__, #call,                        \
                            ncclGetErrorString(amp_nccl_r_));                                      \
    } while (0)

typedef struct amp_cuda_comm {
    ncclComm_t nccl;
    cudaStream_t stream;      /* the communication stream */
    cudaStream_t compute;     /* the device context's stream, which the collectives follow */
    cudaEvent_t ready;        /* recorded on the compute stream before each collective */
    cudaEvent_t done;         /* recorded on the communication stream after each collective */
    bool any;                 /* a collective was queued since the communicator was made */
} amp_cuda_comm;

_Static_assert(sizeof(ncclUniqueId) <= AMP_COLL_ID_BYTES, "NCCL's unique id outgrew ours");

amp_status amp_cuda_coll_id(void *id) {
    if (!id) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'id' is NULL", __func__);
    ncclUniqueId u;
    AMP_NCCL_TRY(ncclGetUniqueId(&u));
    memset(id, 0, AMP_COLL_ID_BYTES);
    memcpy(id, &u, sizeof u);
    return AMP_OK;
}

void amp_cuda_coll_free(void *comm, bool abort) {
    amp_cuda_comm *c = comm;
    if (!c) return;
    if (c->nccl) {
        if (abort) ncclCommAbort(c->nccl);
        else ncclCommDestroy(c->nccl);
    }
    if (c->ready) cudaEventDestroy(c->ready);
    if (c->done) cudaEventDestroy(c->done);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

static amp_status amp_cuda_coll_init(amp_cuda_comm *c, const void *id, int rank, int size) {
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    AMP_CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    AMP_CUDA_TRY(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
    AMP_CUDA_TRY(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
    AMP_NCCL_TRY(ncclCommInitRank(&c->nccl, size, u, rank));
    return AMP_OK;
}

amp_status amp_cuda_coll_create(amp_device_ctx *dev, const void *id, int rank, int size,
                                void **out) {
    if (!id || !out) return amp_fail(AMP_ERR_INVALID_ARG, "%s: id or out is NULL", __func__);
    if (size < 1 || rank < 0 || rank >= size)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: rank %d of %d", __func__, rank, size);
    *out = NULL;
    amp_cuda_comm *c = calloc(1, sizeof *c);
    if (!c) return amp_fail(AMP_ERR_OOM, "%s: out of memory", __func__);
    c->compute = dev->stream;
    amp_status s = amp_cuda_coll_init(c, id, rank, size);
    if (s != AMP_OK) {
        amp_cuda_coll_free(c, true);
        return s;
    }
    *out = c;
    return AMP_OK;
}

static ncclDataType_t amp_nccl_type(amp_dtype dt) {
    return dt == AMP_F16 ? ncclFloat16 : dt == AMP_BF16 ? ncclBfloat16
           : dt == AMP_I32 ? ncclInt32 : ncclFloat32;
}

/* The communication stream waits for the compute work queued so far. */
static amp_status amp_cuda_coll_after_compute(amp_cuda_comm *c) {
    AMP_CUDA_TRY(cudaEventRecord(c->ready, c->compute));
    AMP_CUDA_TRY(cudaStreamWaitEvent(c->stream, c->ready, 0));
    return AMP_OK;
}

static amp_status amp_cuda_coll_queued(amp_cuda_comm *c) {
    AMP_CUDA_TRY(cudaEventRecord(c->done, c->stream));
    c->any = true;
    if (amp_cuda_sync_debug()) AMP_CUDA_TRY(cudaStreamSynchronize(c->stream));
    return AMP_OK;
}

amp_status amp_cuda_coll_allreduce(void *comm, void *buf, amp_dtype dt, int64_t n,
                                   amp_coll_op op) {
    amp_cuda_comm *c = comm;
    if (!c || (n > 0 && !buf) || n < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: comm %p, buf %p, n %lld", __func__, comm, buf,
                        (long long)n);
    if (op != AMP_COLL_SUM && op != AMP_COLL_MAX)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: unknown operation %d", __func__, (int)op);
    if (n == 0) return AMP_OK;
    AMP_TRY(amp_cuda_coll_after_compute(c));
    AMP_NCCL_TRY(ncclAllReduce(buf, buf, (size_t)n, amp_nccl_type(dt),
                               op == AMP_COLL_SUM ? ncclSum : ncclMax, c->nccl, c->stream));
    return amp_cuda_coll_queued(c);
}

amp_status amp_cuda_coll_broadcast(void *comm, void *buf, size_t nbytes, int root) {
    amp_cuda_comm *c = comm;
    if (!c || (nbytes && !buf))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: comm %p, buf %p", __func__, comm, buf);
    if (!nbytes) return AMP_OK;
    AMP_TRY(amp_cuda_coll_after_compute(c));
    AMP_NCCL_TRY(ncclBroadcast(buf, buf, nbytes, ncclUint8, root, c->nccl, c->stream));
    return amp_cuda_coll_queued(c);
}

amp_status amp_cuda_coll_join(void *comm) {
    amp_cuda_comm *c = comm;
    if (!c) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'comm' is NULL", __func__);
    if (c->any) AMP_CUDA_TRY(cudaStreamWaitEvent(c->compute, c->done, 0));
    return AMP_OK;
}

amp_status amp_cuda_coll_poll(void *comm, bool *pending) {
    amp_cuda_comm *c = comm;
    if (!c || !pending) return amp_fail(AMP_ERR_INVALID_ARG, "%s: comm or pending is NULL", __func__);
    ncclResult_t async = ncclSuccess;
    AMP_NCCL_TRY(ncclCommGetAsyncError(c->nccl, &async));
    if (async != ncclSuccess && async != ncclInProgress)
        return amp_fail(AMP_ERR_BACKEND, "NCCL: a collective failed: %s (a peer died or its "
                        "network broke)", ncclGetErrorString(async));
    *pending = false;
    if (!c->any) return AMP_OK;
    cudaError_t e = cudaEventQuery(c->done);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        *pending = true;
        return AMP_OK;
    }
    AMP_CUDA_TRY(e);
    return AMP_OK;
}
