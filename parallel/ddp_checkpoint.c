/* Checkpoints under DDP: rank 0 writes, every rank loads, and every rank returns the same
 * outcome, so that no rank trains on while another stopped. The replicas' weights, masters,
 * optimizer and scaler are the same bits on every rank, so rank 0's copy is everyone's; the
 * random number generators are not (ranks may seed them apart, for dropout masks of their own),
 * so every rank's state goes into the metadata and each rank gets its own back. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/rng.h"
#include "core/error.h"
#include "parallel/ddp_internal.h"

#define AMP_DDP_WORLD_KEY "ddp.world_size"
#define AMP_DDP_RNG_KEY "ddp.rng" /* per rank, in rank order: seed and counter, 16 hex digits each */
#define AMP_DDP_RNG_CHARS 32

/* Every rank's generator state, gathered on every rank (u64 pairs, rank order). */
static amp_status amp_ddp_gather_rng(amp_ddp *d, uint64_t *all) {
    amp_rng_state st;
    AMP_TRY(amp_rng_get_state(d->ctx, &st));
    uint64_t mine[2] = {st.seed, st.counter};
    if (d->comm->size == 1) {
        memcpy(all, mine, sizeof mine);
        return AMP_OK;
    }
    MPI_Request r;
    AMP_MPI_TRY(MPI_Iallgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, d->comm->world, &r));
    return amp_comm_wait(d->comm, 1, &r, "amp_ddp_checkpoint_save (the generators' states)");
}

/* This rank's entry of the saved states, set on its context. */
static amp_status amp_ddp_restore_rng(amp_ddp *d, const char *folder) {
    size_t size = (size_t)d->comm->size * AMP_DDP_RNG_CHARS + 1;
    char *text = malloc(size);
    if (!text) return amp_fail(AMP_ERR_OOM, "amp_ddp_checkpoint_load: out of memory");
    amp_status s = amp_checkpoint_user_meta(folder, AMP_DDP_RNG_KEY, text, size);
    if (s != AMP_OK) {
        free(text);
        return amp_fail(AMP_ERR_STATE, "amp_ddp_checkpoint_load: %s has no per-rank generator "
                        "states (\"user.%s\"): it was not written by amp_ddp_checkpoint_save",
                        folder, AMP_DDP_RNG_KEY);
    }
    amp_rng_state st;
    const char *mine = text + (size_t)d->comm->rank * AMP_DDP_RNG_CHARS;
    char seed[17], counter[17], *end_seed, *end_counter;
    bool ok = strlen(text) == size - 1;
    if (ok) {
        memcpy(seed, mine, 16);
        memcpy(counter, mine + 16, 16);
        seed[16] = counter[16] = '\0';
        st.seed = strtoull(seed, &end_seed, 16);
        st.counter = strtoull(counter, &end_counter, 16);
        ok = *end_seed == '\0' && *end_counter == '\0';
    }
    free(text);
    if (!ok)
        return amp_fail(AMP_ERR_FORMAT, "amp_ddp_checkpoint_load: %s: \"user.%s\" does not hold "
                        "%d generator states of %d hex digits (the file is damaged)", folder,
                        AMP_DDP_RNG_KEY, d->comm->size, AMP_DDP_RNG_CHARS);
    return amp_rng_set_state(d->ctx, &st);
}

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
    AMP_TRY(amp_ddp_check_usable(__func__, d));
    amp_checkpoint_opts o = opts ? *opts : (amp_checkpoint_opts){0};
    AMP_TRY(amp_ddp_check_loaders(d, o.loader));
    /* The world size and the generators go with the user metadata: a copy of the caller's
     * list plus two entries. */
    int n = o.n_user, size = d->comm->size;
    const char **keys = calloc((size_t)n + 2, sizeof *keys), **vals = calloc((size_t)n + 2, sizeof *vals);
    uint64_t *rng = malloc((size_t)size * 2 * sizeof *rng);
    char *rng_text = malloc((size_t)size * AMP_DDP_RNG_CHARS + 1), world[16];
    amp_status s = keys && vals && rng && rng_text
                       ? AMP_OK : amp_fail(AMP_ERR_OOM, "amp_ddp_checkpoint_save: out of memory");
    bool failed_here = s != AMP_OK, any_failed = false; /* no rank may skip the gather alone */
    amp_status agreed = amp_comm_agree_failure(d->comm, failed_here, &any_failed);
    if (agreed != AMP_OK) s = agreed, any_failed = true;
    else if (any_failed && !failed_here)
        s = amp_fail(AMP_ERR_OOM, "amp_ddp_checkpoint_save: another rank ran out of memory");
    if (s == AMP_OK) s = amp_ddp_gather_rng(d, rng);
    amp_optimizer_pieces kept = {0}; /* ZeRO: rank 0's pieces while it holds the whole state */
    if (s == AMP_OK && d->zero_stage) s = amp_zero_save_begin(d, &kept);
    if (s == AMP_OK && d->comm->rank == 0) {
        for (int r = 0; r < size; r++)
            snprintf(rng_text + (size_t)r * AMP_DDP_RNG_CHARS, AMP_DDP_RNG_CHARS + 1,
                     "%016" PRIx64 "%016" PRIx64, rng[2 * r], rng[2 * r + 1]);
        for (int i = 0; i < n; i++) {
            keys[i] = o.user_keys[i];
            vals[i] = o.user_values[i];
        }
        snprintf(world, sizeof world, "%d", d->comm->size);
        keys[n] = AMP_DDP_WORLD_KEY;
        vals[n] = world;
        keys[n + 1] = AMP_DDP_RNG_KEY;
        vals[n + 1] = rng_text;
        o.user_keys = keys;
        o.user_values = vals;
        o.n_user = n + 2;
        s = amp_checkpoint_save(dir, step, d->model, d->opt, &o, path_out, path_size);
    }
    if (d->zero_stage) {
        amp_status e = amp_zero_save_end(d, &kept);
        if (s == AMP_OK) s = e;
    }
    free(keys);
    free(vals);
    free(rng);
    free(rng_text);
    if (any_failed) return s;
    AMP_TRY(amp_ddp_share_outcome(d, s, "amp_ddp_checkpoint_save"));
    if (path_out && path_size) /* the other ranks learn the folder's name from rank 0 */
        AMP_TRY(amp_comm_bcast_bytes(d->comm, path_out, path_size, "amp_ddp_checkpoint_save"));
    return AMP_OK;
}

amp_status amp_ddp_checkpoint_load(amp_ddp *d, const char *path, const amp_checkpoint_opts *opts,
                                   int64_t *step_out) {
    AMP_TRY(amp_ddp_check_usable(__func__, d));
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
    amp_optimizer_pieces kept = {0}; /* ZeRO: the pieces while the whole state is loaded */
    bool unsharded = false;
    if (s == AMP_OK && d->zero_stage) {
        s = amp_zero_load_begin(d, &kept);
        unsharded = s == AMP_OK;
    }
    if (s == AMP_OK) s = amp_checkpoint_load(folder, d->model, d->opt, opts, step_out);
    if (unsharded) {
        amp_status e = amp_zero_load_end(d, &kept, s == AMP_OK);
        if (s == AMP_OK) s = e;
    }
    if (s == AMP_OK && d->comm->size > 1) s = amp_ddp_restore_rng(d, folder);
    bool any;
    AMP_TRY(amp_comm_agree_failure(d->comm, s != AMP_OK, &any));
    if (s != AMP_OK) return s;
    if (any)
        return amp_fail(AMP_ERR_STATE, "amp_ddp_checkpoint_load: another rank could not load %s "
                        "(its error says why): this rank loaded it, but the ranks now disagree; "
                        "do not train on", folder);
    return AMP_OK;
}
