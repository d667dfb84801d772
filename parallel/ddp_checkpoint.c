/* Checkpoints under DDP: rank 0 writes, every rank loads, and every rank returns the same
 * outcome, so that no rank trains on while another stopped. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "parallel/ddp_internal.h"

#define AMP_DDP_WORLD_KEY "ddp.world_size"

/* What rank 0 reports to the others: its status and its error message. */
typedef struct amp_ddp_outcome {
    int32_t status;
    char message[480];
} amp_ddp_outcome;

static amp_status amp_ddp_share_outcome(amp_ddp *d, amp_status mine, const char *who) {
    amp_ddp_outcome o = {.status = mine};
    if (mine != AMP_OK) snprintf(o.message, sizeof o.message, "%s", amp_last_error());
    AMP_TRY(amp_comm_bcast_bytes(d->comm, &o, sizeof o, who));
    if (o.status == AMP_OK) return AMP_OK;
    if (d->comm->rank == 0) return (amp_status)o.status; /* its own message is still set */
    return amp_fail((amp_status)o.status, "%s: rank 0 failed: %s", who, o.message);
}

/* The loader positions of all ranks must be one: the saved position is rank 0's. */
static amp_status amp_ddp_check_loaders(amp_ddp *d, amp_loader *ld) {
    double pos[2] = {0, 0}, lo[2], hi[2];
    if (ld) {
        amp_loader_state st;
        AMP_TRY(amp_loader_get_state(ld, &st));
        pos[0] = (double)st.epoch;
        pos[1] = (double)st.batch;
    }
    memcpy(hi, pos, sizeof pos);
    lo[0] = -pos[0];
    lo[1] = -pos[1];
    AMP_TRY(amp_comm_allreduce_max_f64(d->comm, hi, 2));
    AMP_TRY(amp_comm_allreduce_max_f64(d->comm, lo, 2));
    if (hi[0] != -lo[0] || hi[1] != -lo[1])
        return amp_fail(AMP_ERR_STATE, "amp_ddp_checkpoint_save: the ranks' loaders are at "
                        "different positions (epochs %.0f..%.0f, batches %.0f..%.0f): every rank "
                        "must call it after the same step, with loaders made with the same options "
                        "and its rank/world_size", -lo[0], hi[0], -lo[1], hi[1]);
    return AMP_OK;
}

amp_status amp_ddp_checkpoint_save(amp_ddp *d, const char *dir, int64_t step,
                                   const amp_checkpoint_opts *opts, char *path_out,
                                   size_t path_size) {
    AMP_CHECK_ARG(d);
    amp_checkpoint_opts o = opts ? *opts : (amp_checkpoint_opts){0};
    AMP_TRY(amp_ddp_check_loaders(d, o.loader));
    /* The world size goes with the user metadata: a copy of the caller's list plus one entry. */
    int n = o.n_user;
    const char **keys = calloc((size_t)n + 1, sizeof *keys), **vals = calloc((size_t)n + 1, sizeof *vals);
    char world[16];
    amp_status s = keys && vals ? AMP_OK : amp_fail(AMP_ERR_OOM, "amp_ddp_checkpoint_save: out of memory");
    if (s == AMP_OK && d->comm->rank == 0) {
        for (int i = 0; i < n; i++) {
            keys[i] = o.user_keys[i];
            vals[i] = o.user_values[i];
        }
        snprintf(world, sizeof world, "%d", d->comm->size);
        keys[n] = AMP_DDP_WORLD_KEY;
        vals[n] = world;
        o.user_keys = keys;
        o.user_values = vals;
        o.n_user = n + 1;
        s = amp_checkpoint_save(dir, step, d->model, d->opt, &o, path_out, path_size);
    }
    free(keys);
    free(vals);
    AMP_TRY(amp_ddp_share_outcome(d, s, "amp_ddp_checkpoint_save"));
    if (path_out && path_size) /* the other ranks learn the folder's name from rank 0 */
        AMP_TRY(amp_comm_bcast_bytes(d->comm, path_out, path_size, "amp_ddp_checkpoint_save"));
    return AMP_OK;
}

amp_status amp_ddp_checkpoint_load(amp_ddp *d, const char *path, const amp_checkpoint_opts *opts,
                                   int64_t *step_out) {
    AMP_CHECK_ARG(d);
    AMP_CHECK_ARG(path);
    char folder[4096], world[32] = "";
    amp_status s = amp_checkpoint_latest(path, folder, sizeof folder);
    if (s != AMP_OK) { /* not a checkpoint directory: a step folder itself */
        snprintf(folder, sizeof folder, "%s", path);
        s = AMP_OK;
    }
    s = amp_checkpoint_user_meta(folder, AMP_DDP_WORLD_KEY, world, sizeof world);
    if (s == AMP_OK && atoi(world) != d->comm->size)
        s = amp_fail(AMP_ERR_STATE, "amp_ddp_checkpoint_load: %s was saved by %s ranks, this run "
                     "has %d (resume with the same world size)", folder, world, d->comm->size);
    else if (s != AMP_OK && d->comm->size == 1)
        s = AMP_OK; /* a single-process checkpoint resumes in a world of one */
    if (s == AMP_OK) s = amp_checkpoint_load(folder, d->model, d->opt, opts, step_out);
    bool any;
    AMP_TRY(amp_comm_agree_failure(d->comm, s != AMP_OK, &any));
    if (s != AMP_OK) return s;
    if (any)
        return amp_fail(AMP_ERR_STATE, "amp_ddp_checkpoint_load: another rank could not load %s "
                        "(its error says why): this rank loaded it, but the ranks now disagree; "
                        "do not train on", folder);
    return AMP_OK;
}
