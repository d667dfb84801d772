/* ZeRO stage 1 (Rajbhandari et al., SC 2020; DeepSpeed's stage 1, llm.c's -z 1): the optimizer
 * state is sharded over the ranks. The parameters, flattened in their registration order, are
 * cut into one contiguous run per rank, of equal length to within 32 elements (a cut inside a
 * parameter lands on a multiple of 32 of its elements, so every piece starts 64-byte aligned).
 * Each rank keeps the f32 masters, master gradients and optimizer state of its run only
 * (optim/shard.c), steps it, and the step ends with an all-gather of the updated weights.
 *
 * The gradients are all-reduced as under DDP (parallel/ddp_buckets.c), so each element's
 * reduced gradient has the bits DDP gives it, and its update those of DDP's step: SGD and Adam
 * read nothing across elements. Only the norm for clipping is summed in another order (each
 * rank's pieces, then the ranks in order), so a clipped step agrees with DDP's to rounding.
 *
 * The all-gather moves the weights in the model's own dtype (half at O2) over the parameter
 * block in bytes, padding included (zeros on every rank), in windows of at most 1 GiB because
 * MPI counts and displacements are ints. */
#include <stdlib.h>
#include <string.h>

#include "amp/state_internal.h"
#include "core/error.h"
#include "core/tensor_internal.h"
#include "optim/optimizer_internal.h"
#include "parallel/ddp_internal.h"

#define AMP_ZERO_ALIGN 32                         /* elements: a cut's offset in its parameter */
#define AMP_ZERO_WINDOW_BYTES ((size_t)1 << 30)   /* one all-gather's span */

/* The byte offset in the parameter block of flat element e (e = total: the end). */
static size_t amp_zero_byte_of(const amp_model *m, const int64_t *first, int64_t e) {
    int n = m->n_params;
    for (int i = 0; i < n; i++) {
        const amp_tensor *p = m->params[i].t;
        if (e < first[i] + p->numel)
            return (size_t)((char *)p->data - (char *)m->param_block) +
                   (size_t)(e - first[i]) * amp_dtype_size(p->dtype);
    }
    const amp_tensor *last = m->params[n - 1].t;
    return (size_t)((char *)last->data - (char *)m->param_block) + amp_tensor_nbytes(last);
}

/* Rank r's first flat element: r / size of the way, moved back to a multiple of 32 within the
 * parameter it falls in. */
static int64_t amp_zero_cut(const amp_model *m, const int64_t *first, int64_t total, int r,
                            int size) {
    if (r >= size) return total;
    int64_t target = (int64_t)((__int128)total * r / size);
    for (int i = 0; i < m->n_params; i++) {
        int64_t n = m->params[i].t->numel;
        if (target < first[i] + n)
            return first[i] + (target - first[i]) / AMP_ZERO_ALIGN * AMP_ZERO_ALIGN;
    }
    return total;
}

/* After each update: every rank's run of the parameter block to every rank. */
static amp_status amp_zero_gather(void *user, amp_optimizer *opt) {
    amp_ddp *d = user;
    amp_model *m = d->model;
    (void)opt;
    if (m->param_block != d->zero_param_block)
        return amp_fail(AMP_ERR_STATE, "the optimizer's step (ZeRO): the model's parameters "
                        "moved since amp_ddp_create cut them into shards (amp_initialize or "
                        "amp_deinitialize re-cast them); make a new DDP after that");
    int size = d->comm->size;
    size_t end = d->zero_bytes[size];
    int *counts = malloc((size_t)size * sizeof *counts);
    int *displs = malloc((size_t)size * sizeof *displs);
    amp_status s = counts && displs ? AMP_OK
                                    : amp_fail(AMP_ERR_OOM, "the optimizer's step (ZeRO): out "
                                               "of host memory");
    for (size_t w0 = 0; s == AMP_OK && w0 < end; w0 += AMP_ZERO_WINDOW_BYTES) {
        size_t w1 = end - w0 < AMP_ZERO_WINDOW_BYTES ? end : w0 + AMP_ZERO_WINDOW_BYTES;
        for (int r = 0; r < size; r++) {
            size_t a = d->zero_bytes[r], b = d->zero_bytes[r + 1];
            a = a < w0 ? w0 : a > w1 ? w1 : a;
            b = b < w0 ? w0 : b > w1 ? w1 : b;
            counts[r] = (int)(b - a);
            displs[r] = (int)(a - w0);
        }
        MPI_Request req;
        int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, (char *)m->param_block + w0,
                                 counts, displs, MPI_BYTE, d->comm->world, &req);
        s = rc == MPI_SUCCESS ? amp_comm_wait(d->comm, 1, &req, "the all-gather of ZeRO's updated "
                                              "weights")
                              : amp_mpi_fail(rc, "MPI_Iallgatherv");
    }
    free(counts);
    free(displs);
    for (int i = 0; s == AMP_OK && i < m->n_params; i++) amp_tensor_mark_written(m->params[i].t);
    /* amp_comm_wait's message names this rank and the silent ones. */
    return s == AMP_OK ? AMP_OK : amp_fail_context(s, "the optimizer's step (ZeRO)");
}

static amp_status amp_zero_check(const amp_ddp *d) {
    const char *who = "amp_ddp_create";
    if (!d->opt)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: zero_stage %d shards the optimizer: pass it",
                        who, d->opts.zero_stage);
    if (d->ctx->backend->device != AMP_DEVICE_CPU)
        return amp_fail(AMP_ERR_UNSUPPORTED, "%s: zero_stage %d on the %s backend is not built "
                        "yet; use the CPU backend, or zero_stage 0", who, d->opts.zero_stage,
                        d->ctx->backend->name);
    const amp_state *st = d->ctx->amp;
    if (st && st->at_each_backward)
        return amp_fail(AMP_ERR_UNSUPPORTED, "%s: zero_stage %d with several losses or "
                        "optimizers (amp's unscale at each backward keeps whole f32 sums) is not "
                        "built; use one loss and one optimizer, or zero_stage 0", who,
                        d->opts.zero_stage);
    if (d->model->n_params == 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the model has no parameters to shard", who);
    /* The shards are cut over the model's parameters: the optimizer must step exactly those,
     * in that order (one made for the model does). */
    bool same = d->opt->n_params == d->model->n_params;
    for (int i = 0; same && i < d->model->n_params; i++)
        same = d->opt->params[i] == d->model->params[i].t;
    if (!same)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: zero_stage %d needs an optimizer over all of "
                        "the model's parameters in its order (amp_sgd_create / amp_adam_create "
                        "of the model); this one steps %d of its %d", who, d->opts.zero_stage,
                        d->opt->n_params, d->model->n_params);
    return AMP_OK;
}

/* zero_reduce_scatter: each bucket's elements per rank, the overlap of its range of the
 * gradient block (laid out as the parameter block) with each rank's run. */
static amp_status amp_zero_rs_counts(amp_ddp *d) {
    int size = d->comm->size;
    for (int k = 0; k < d->n_buckets; k++) {
        amp_ddp_bucket *b = &d->buckets[k];
        size_t es = amp_dtype_size(b->dtype);
        size_t b0 = (size_t)((char *)b->data - (char *)d->model->grad_block);
        size_t b1 = b0 + (size_t)b->numel * es;
        b->rs_counts = calloc((size_t)size, sizeof *b->rs_counts);
        if (!b->rs_counts) return amp_fail(AMP_ERR_OOM, "amp_ddp_create: out of memory");
        for (int r = 0; r < size; r++) {
            size_t a = d->zero_bytes[r], e = d->zero_bytes[r + 1];
            a = a < b0 ? b0 : a > b1 ? b1 : a;
            e = e < b0 ? b0 : e > b1 ? b1 : e;
            b->rs_counts[r] = (int)((e - a) / es);
        }
    }
    return AMP_OK;
}

amp_status amp_zero_create(amp_ddp *d) {
    AMP_TRY(amp_zero_check(d));
    amp_model *m = d->model;
    int n = m->n_params, size = d->comm->size, rank = d->comm->rank;
    int64_t *first = malloc((size_t)n * sizeof *first);
    int64_t *lo = malloc((size_t)n * sizeof *lo), *hi = malloc((size_t)n * sizeof *hi);
    int64_t *cut = malloc(((size_t)size + 1) * sizeof *cut);
    d->zero_bytes = malloc(((size_t)size + 1) * sizeof *d->zero_bytes);
    amp_status s = first && lo && hi && cut && d->zero_bytes
                       ? AMP_OK : amp_fail(AMP_ERR_OOM, "amp_ddp_create: out of memory");
    int64_t total = 0;
    for (int i = 0; s == AMP_OK && i < n; i++) {
        first[i] = total;
        total += m->params[i].t->numel;
    }
    for (int r = 0; s == AMP_OK && r <= size; r++) {
        cut[r] = amp_zero_cut(m, first, total, r, size);
        d->zero_bytes[r] = amp_zero_byte_of(m, first, cut[r]);
    }
    for (int i = 0; s == AMP_OK && i < n; i++) {
        int64_t a = cut[rank] - first[i], b = cut[rank + 1] - first[i];
        int64_t numel = m->params[i].t->numel;
        a = a < 0 ? 0 : a > numel ? numel : a;
        b = b < 0 ? 0 : b > numel ? numel : b;
        lo[i] = a;
        hi[i] = b < a ? a : b;
    }
    if (s == AMP_OK) s = amp_optimizer_shard(d->opt, lo, hi, amp_zero_gather, d);
    free(first);
    free(lo);
    free(hi);
    d->zero_cuts = cut;
    if (s != AMP_OK)
        return amp_fail_context(s, "amp_ddp_create (zero_stage %d)", d->opts.zero_stage);
    d->zero_stage = d->opts.zero_stage;
    d->zero_param_block = m->param_block;
    return d->opts.zero_reduce_scatter ? amp_zero_rs_counts(d) : AMP_OK;
}

void amp_zero_free(amp_ddp *d) {
    /* The optimizer stays sharded: its next step is refused (optim/fused_step.c), since no one
     * would gather the other ranks' elements. */
    if (d->zero_stage && d->opt && !d->opt_gone) {
        d->opt->shard_gather = NULL;
        d->opt->shard_gather_user = NULL;
    }
    free(d->zero_bytes);
    free(d->zero_cuts);
    d->zero_bytes = NULL;
    d->zero_cuts = NULL;
}
