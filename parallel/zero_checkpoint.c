/* Checkpoints under ZeRO: what is written is what DDP writes. Before a save every rank's pieces
 * of the masters and of the optimizer state go to rank 0, into whole views the optimizer reads as
 * if it were not sharded (optim/shard.c's unshard), and rank 0 writes the usual checkpoint; a
 * load fills whole views on every rank and each keeps its pieces. So a checkpoint of a ZeRO run
 * resumes under DDP and the reverse, and nothing in the files says how the state was cut.
 *
 * The step counts (torch's state['step'], per parameter) are advanced only by the ranks that own
 * elements of a parameter; the others' stay 0. Every owner counts alike, so the maximum over the
 * ranks is the count, and every rank gets it before a save. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tensor_internal.h"
#include "optim/optimizer_internal.h"
#include "parallel/ddp_internal.h"

/* Every rank's step counts made the maximum over the ranks (the owners' count). */
static amp_status amp_zero_agree_steps(amp_ddp *d) {
    amp_optimizer *opt = d->opt;
    const amp_backend *be = opt->backend;
    size_t nbytes = (size_t)opt->n_params * sizeof(int64_t);
    int64_t *steps = malloc(nbytes ? nbytes : 1);
    if (!steps) return amp_fail(AMP_ERR_OOM, "out of host memory for the step counts");
    amp_status s = be->copy_to_host(be->dev, steps, opt->dev_steps, nbytes);
    MPI_Request r;
    if (s == AMP_OK) {
        int rc = MPI_Iallreduce(MPI_IN_PLACE, steps, opt->n_params, MPI_INT64_T, MPI_MAX,
                                d->comm->world, &r);
        s = rc == MPI_SUCCESS ? amp_comm_wait(d->comm, 1, &r, "agreeing on the step counts")
                              : amp_mpi_fail(rc, "MPI_Iallreduce");
    }
    if (s == AMP_OK) s = be->copy_from_host(be->dev, opt->dev_steps, steps, nbytes);
    free(steps);
    if (s == AMP_OK) opt->steps_stale = true; /* the host mirror is read again */
    return s;
}

/* One kind of f32 view (a state tensor, j of stride per parameter, or the masters): every rank's
 * pieces, packed in parameter order, are its run [zero_cuts[r], zero_cuts[r + 1]) of the
 * flattened parameters, so a gather in rank order lays them end to end; rank 0 copies each
 * parameter's run into its whole view. */
static amp_status amp_zero_gather_kind(amp_ddp *d, const int64_t *lo, const int64_t *hi,
                                       amp_tensor *const *pieces, amp_tensor *const *whole,
                                       int stride, int j) {
    amp_optimizer *opt = d->opt;
    const amp_backend *be = opt->backend;
    int size = d->comm->size, rank = d->comm->rank;
    const int64_t *cut = d->zero_cuts;
    int64_t mine = cut[rank + 1] - cut[rank], total = cut[size];
    if (total > INT32_MAX)
        return amp_fail(AMP_ERR_UNSUPPORTED, "the model has %lld parameters; the gather of ZeRO's "
                        "state counts in MPI ints (2^31 - 1)", (long long)total);
    float *buf = malloc((size_t)(mine ? mine : 1) * sizeof *buf);
    float *flat = rank == 0 ? malloc((size_t)(total ? total : 1) * sizeof *flat) : NULL;
    int *counts = calloc((size_t)size, sizeof *counts);
    int *displs = calloc((size_t)size, sizeof *displs);
    amp_status s = buf && counts && displs && (rank != 0 || flat)
                       ? AMP_OK
                       : amp_fail(AMP_ERR_OOM, "out of host memory gathering ZeRO's state");
    int64_t off = 0;
    for (int i = 0; s == AMP_OK && i < opt->n_params; i++) {
        int64_t n = hi[i] - lo[i];
        if (n) s = be->copy_to_host(be->dev, buf + off, pieces[i * stride + j]->data,
                                    (size_t)n * sizeof *buf);
        off += n;
    }
    for (int k = 0; s == AMP_OK && k < size; k++) {
        counts[k] = (int)(cut[k + 1] - cut[k]);
        displs[k] = (int)cut[k];
    }
    MPI_Request r;
    if (s == AMP_OK) {
        int rc = MPI_Igatherv(buf, (int)mine, MPI_FLOAT, flat, counts, displs, MPI_FLOAT, 0,
                              d->comm->world, &r);
        s = rc == MPI_SUCCESS ? amp_comm_wait(d->comm, 1, &r, "gathering ZeRO's state")
                              : amp_mpi_fail(rc, "MPI_Igatherv");
    }
    off = 0;
    for (int i = 0; s == AMP_OK && rank == 0 && i < opt->n_params; i++) {
        int64_t n = opt->params[i]->numel;
        s = be->copy_from_host(be->dev, whole[i * stride + j]->data, flat + off,
                               (size_t)n * sizeof *flat);
        off += n;
    }
    free(buf);
    free(flat);
    free(counts);
    free(displs);
    return s;
}

amp_status amp_zero_save_begin(amp_ddp *d, amp_optimizer_pieces *kept) {
    amp_optimizer *opt = d->opt;
    *kept = (amp_optimizer_pieces){0};
    /* Every rank learns whether rank 0 could make its whole views, so none waits in a gather
     * that rank 0 will not join. */
    amp_status s = amp_zero_agree_steps(d);
    if (s == AMP_OK && d->comm->rank == 0) s = amp_optimizer_unshard_begin(opt, kept);
    bool any = false;
    amp_status agreed = amp_comm_agree_failure(d->comm, s != AMP_OK, &any);
    if (s == AMP_OK && agreed != AMP_OK) s = agreed;
    if (s == AMP_OK && any)
        s = amp_fail(AMP_ERR_OOM, "rank 0 could not make room for the whole optimizer state");
    bool masters = opt->masters == AMP_OPTIM_MASTERS_PERSISTENT;
    /* Rank 0's pieces and bounds are set aside in kept; the others' are still the optimizer's. */
    bool r0 = d->comm->rank == 0;
    const int64_t *lo = r0 ? kept->shard_lo : opt->shard_lo;
    const int64_t *hi = r0 ? kept->shard_hi : opt->shard_hi;
    amp_tensor *const *p_state = r0 ? kept->state : opt->state;
    amp_tensor *const *p_master = r0 ? kept->master_views : opt->master_views;
    for (int j = 0; s == AMP_OK && j < opt->n_state; j++)
        s = amp_zero_gather_kind(d, lo, hi, p_state, opt->state, opt->n_state, j);
    if (s == AMP_OK && masters)
        s = amp_zero_gather_kind(d, lo, hi, p_master, opt->master_views, 1, 0);
    if (s != AMP_OK && kept->shard_lo) (void)amp_optimizer_unshard_end(opt, kept, false);
    return s == AMP_OK ? AMP_OK : amp_fail_context(s, "amp_ddp_checkpoint_save (ZeRO, rank %d)",
                                                   d->comm->rank);
}

amp_status amp_zero_save_end(amp_ddp *d, amp_optimizer_pieces *kept) {
    if (!kept->shard_lo) return AMP_OK; /* the ranks other than 0 set nothing aside */
    return amp_optimizer_unshard_end(d->opt, kept, false);
}

amp_status amp_zero_load_begin(amp_ddp *d, amp_optimizer_pieces *kept) {
    amp_status s = amp_optimizer_unshard_begin(d->opt, kept);
    return s == AMP_OK ? AMP_OK : amp_fail_context(s, "amp_ddp_checkpoint_load (ZeRO)");
}

amp_status amp_zero_load_end(amp_ddp *d, amp_optimizer_pieces *kept, bool loaded) {
    amp_status s = amp_optimizer_unshard_end(d->opt, kept, loaded);
    return s == AMP_OK ? AMP_OK : amp_fail_context(s, "amp_ddp_checkpoint_load (ZeRO)");
}
