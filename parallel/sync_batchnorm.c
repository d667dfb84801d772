/* SyncBatchNorm's side in parallel/: torch.nn.SyncBatchNorm.convert_sync_batchnorm for a model,
 * and the collective that nn/ops_sync_batchnorm.c calls through ctx->collective (nn/ does not know
 * parallel/).
 *
 * The all-reduce of the statistics gathers every rank's sums (MPI_Iallgather, waited on with the
 * communicator's deadline) and adds them in rank order in double on every rank, rounding to f32
 * once: MPI_Allreduce may add in an order that depends on the algorithm and the rank, and the
 * ranks must hold bit-identical statistics (else their running statistics, and through them the
 * replicas, drift apart). The vectors are per channel, so gathering them costs nothing that
 * matters. On a backend whose memory is not host memory (CUDA) the backend's collectives
 * (NCCL) sum the statistics on the device, every rank getting the same bits (a ring all-reduce
 * reduces each element once and hands the result to all), on the communicator's one backend
 * communicator, which DDP shares (PyTorch's SyncBatchNorm uses DDP's process group: one
 * communicator keeps every rank's collectives in one order); the counts, host integers, go to
 * MPI. A world of one needs none. */
#include <stdint.h>
#include <stdlib.h>

#include "core/ctx.h"
#include "core/error.h"
#include "nn/model_internal.h"
#include "parallel/comm_internal.h"

/* The collective's state: the communicator, and the backend's own when its memory is not host
 * memory. */
typedef struct sync_bn_comm {
    amp_comm *comm;
    const amp_backend *be;
    void *coll; /* NULL: MPI on host memory */
} sync_bn_comm;

static amp_status sync_bn_allreduce_f32(void *user, float *p, int64_t n) {
    sync_bn_comm *sc = user;
    amp_comm *c = sc->comm;
    if (sc->coll && n > 0) {
        AMP_TRY(sc->be->coll->allreduce(sc->coll, p, AMP_F32, n, AMP_COLL_SUM));
        return sc->be->coll->join(sc->coll);
    }
    if (c->size == 1 || n == 0) return AMP_OK;
    if (n > INT32_MAX / c->size)
        return amp_fail(AMP_ERR_INVALID_ARG, "sync batch norm: %lld values per rank are more than "
                        "an MPI count holds", (long long)n);
    float *all = malloc((size_t)n * (size_t)c->size * sizeof *all);
    if (!all) return amp_fail(AMP_ERR_OOM, "sync batch norm: out of memory gathering %lld values "
                              "from %d ranks", (long long)n, c->size);
    MPI_Request r;
    int rc = MPI_Iallgather(p, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, c->world, &r);
    amp_status s = rc == MPI_SUCCESS ? amp_comm_wait(c, 1, &r, "sync batch norm's all-reduce")
                                     : amp_mpi_fail(rc, "MPI_Iallgather(sync batch norm)");
    if (s == AMP_OK)
        for (int64_t i = 0; i < n; i++) {
            double acc = 0.0;
            for (int k = 0; k < c->size; k++) acc += (double)all[(size_t)k * (size_t)n + i];
            p[i] = (float)acc;
        }
    free(all);
    return s;
}

static amp_status sync_bn_allreduce_i64(void *user, int64_t *v, int n) {
    amp_comm *c = ((sync_bn_comm *)user)->comm;
    if (c->size == 1 || n == 0) return AMP_OK;
    MPI_Request r;
    AMP_MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_SUM, c->world, &r));
    return amp_comm_wait(c, 1, &r, "sync batch norm's count");
}

static void sync_bn_release(void *user) { free(user); } /* the communicators are comm's */

static const amp_collective sync_bn_collective = {
    .allreduce_sum_f32 = sync_bn_allreduce_f32,
    .allreduce_sum_i64 = sync_bn_allreduce_i64,
    .release = sync_bn_release,
};

/* torch.nn.SyncBatchNorm.convert_sync_batchnorm: every library batch norm of the tree. */
static void amp_sync_bn_mark(amp_model *node, void *unused) {
    (void)unused;
    if (node->kind == AMP_MODULE_BATCHNORM2D) node->cfg.sync = true;
}

amp_status amp_model_convert_sync_batchnorm(amp_model *m, amp_comm *comm) {
    AMP_CHECK_ARG(m);
    amp_ctx *ctx = m->ctx;
    bool distributed = comm && comm->size > 1;
    const amp_backend *be = ctx->backend;
    bool host = be->device == AMP_DEVICE_CPU;
    if (distributed && !host && !be->coll)
        return amp_fail(AMP_ERR_UNSUPPORTED, "%s: the %s backend's memory is not host memory and "
                        "it has no collectives", __func__, be->name);
    sync_bn_comm *sc = NULL;
    if (distributed) {
        sc = calloc(1, sizeof *sc);
        if (!sc) return amp_fail(AMP_ERR_OOM, "%s: out of memory", __func__);
        *sc = (sync_bn_comm){.comm = comm, .be = be};
        amp_status s = host ? AMP_OK : amp_comm_backend_coll(comm, be, &sc->coll);
        if (s != AMP_OK) {
            free(sc);
            return amp_fail_context(s, "%s", __func__);
        }
    }
    amp_model_walk(m, amp_sync_bn_mark, NULL);
    /* The context's collective serves every model of the context: the last conversion's
     * communicator is the one used. A world of one needs no collective at all. */
    if (ctx->collective && ctx->collective->release) ctx->collective->release(ctx->collective_user);
    ctx->collective = distributed ? &sync_bn_collective : NULL;
    ctx->collective_user = sc;
    return AMP_OK;
}
