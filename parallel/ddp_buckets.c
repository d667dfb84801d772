/* Gradient buckets all-reduced while backward runs (PyTorch's DDP reducer, Li et al., "PyTorch
 * Distributed", VLDB 2020): buckets of consecutive parameters in reverse registration order, the
 * first small so that communication starts early; a bucket is launched once backward has written
 * all of its gradients, and buckets are launched strictly in order, so every rank issues the same
 * sequence of collectives whatever order its gradients complete in.
 *
 * When is a gradient complete? The tape lists every op that read a parameter; backward walks it
 * in reverse, and a parameter's gradient is final once the last of its readers (the first in the
 * tape) has run. The observer counts each parameter's readers when backward begins and counts
 * them down as nodes finish. A parameter that nothing read this step (or that the loss did not
 * reach) is ready at once with a zero gradient, on every rank, so that ranks agree on what they
 * reduce (PyTorch's find_unused_parameters marks such parameters ready the same way).
 *
 * On the CPU backend gradients are host memory and go to MPI_Iallreduce directly; MPI progresses
 * inside MPI_Testall, which the observer calls after every node, so the reduction overlaps with
 * the rest of backward. Half gradients are reduced in their dtype with an MPI operation that
 * widens each pair to f32, adds and rounds once (MPI has no half types), or in f32 with
 * allreduce_always_fp32.
 *
 * On a backend whose memory is not host memory (CUDA) the backend's collectives (NCCL) reduce a
 * bucket on their own stream after the compute work queued so far, and the end of backward only
 * makes later compute wait for them: nothing in backward or the step waits on the host. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/half.h"
#include "parallel/ddp_internal.h"

static void amp_f16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = amp_f32_to_f16_bits(amp_f16_bits_to_f32(a[i]) + amp_f16_bits_to_f32(b[i]));
}

static void amp_bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = amp_f32_to_bf16_bits(amp_bf16_bits_to_f32(a[i]) + amp_bf16_bits_to_f32(b[i]));
}

static int amp_ddp_cmp_ptr(const void *a, const void *b) {
    const amp_tensor *x = *(const amp_tensor *const *)a, *y = *(const amp_tensor *const *)b;
    return x < y ? -1 : x > y;
}

/* The index of parameter t, or -1 when t is not one of the model's parameters. */
static int amp_ddp_param_index(const amp_ddp *d, const amp_tensor *t) {
    int lo = 0, hi = d->n_params - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (d->sorted[mid] == t) return d->sorted_index[mid];
        if (d->sorted[mid] < t) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* Cuts the buckets: from the last parameter backwards, a new bucket when the dtype changes or
 * the bucket would exceed its cap (a single larger gradient gets a bucket of its own). */
amp_status amp_ddp_buckets_create(amp_ddp *d) {
    amp_model *m = d->model;
    int n = d->n_params;
    d->sorted = calloc((size_t)n, sizeof *d->sorted);
    d->sorted_index = calloc((size_t)n, sizeof *d->sorted_index);
    d->uses = calloc((size_t)n, sizeof *d->uses);
    d->bucket_of = calloc((size_t)n, sizeof *d->bucket_of);
    d->buckets = calloc((size_t)n, sizeof *d->buckets);
    if (!d->sorted || !d->sorted_index || !d->uses || !d->bucket_of || !d->buckets)
        return amp_fail(AMP_ERR_OOM, "amp_ddp_create: out of memory");
    for (int i = 0; i < n; i++) d->sorted[i] = m->params[i].t;
    qsort(d->sorted, (size_t)n, sizeof *d->sorted, amp_ddp_cmp_ptr);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (d->sorted[i] == m->params[j].t) d->sorted_index[i] = j;
    size_t cap = d->opts.first_bucket_bytes, used = 0;
    amp_ddp_bucket *b = NULL;
    for (int i = n - 1; i >= 0; i--) {
        amp_tensor *p = m->params[i].t;
        if (!p->grad)
            return amp_fail(AMP_ERR_STATE, "amp_ddp_create: parameter '%s' has no gradient "
                            "buffer (build the model first)", m->params[i].name);
        size_t nb = amp_tensor_nbytes(p);
        if (!b || p->grad->dtype != b->dtype || used + nb > cap) {
            if (b) cap = d->opts.bucket_bytes;
            b = &d->buckets[d->n_buckets++];
            *b = (amp_ddp_bucket){.first = i, .last = i, .dtype = p->grad->dtype,
                                  .req = MPI_REQUEST_NULL};
            used = 0;
        }
        b->first = i;
        used += nb;
        d->bucket_of[i] = (int)(b - d->buckets);
    }
    for (int k = 0; k < d->n_buckets; k++) {
        b = &d->buckets[k];
        const amp_tensor *lo = m->params[b->first].t->grad, *hi = m->params[b->last].t->grad;
        char *start = lo->data, *end = (char *)hi->data + amp_tensor_nbytes(hi);
        size_t es = amp_dtype_size(b->dtype);
        if (end <= start || (size_t)(end - start) % es)
            return amp_fail(AMP_ERR_STATE, "amp_ddp_create: the gradients of '%s'..'%s' are not "
                            "one block in parameter order", m->params[b->first].name,
                            m->params[b->last].name);
        b->data = start;
        b->numel = (int64_t)((size_t)(end - start) / es);
        if (b->numel > INT32_MAX)
            return amp_fail(AMP_ERR_UNSUPPORTED, "amp_ddp_create: parameter '%s' has %lld "
                            "elements; MPI counts stop at 2^31 - 1", m->params[b->first].name,
                            (long long)b->numel);
        if (d->opts.allreduce_always_fp32 && b->dtype != AMP_F32)
            AMP_TRY(amp_ledger_alloc(d->ctx, AMP_MEM_WORKSPACE, (size_t)b->numel * sizeof(float),
                                     (void **)&b->f32));
    }
    AMP_MPI_TRY(MPI_Op_create(amp_f16_sum, 1, &d->op_f16_sum));
    AMP_MPI_TRY(MPI_Op_create(amp_bf16_sum, 1, &d->op_bf16_sum));
    return AMP_OK;
}

void amp_ddp_buckets_free(amp_ddp *d) {
    for (int k = 0; k < d->n_buckets; k++) {
        if (d->buckets[k].req != MPI_REQUEST_NULL) MPI_Request_free(&d->buckets[k].req);
        amp_ledger_free(d->ctx, d->buckets[k].f32);
        free(d->buckets[k].rs_counts);
    }
    if (d->op_f16_sum != MPI_OP_NULL) MPI_Op_free(&d->op_f16_sum);
    if (d->op_bf16_sum != MPI_OP_NULL) MPI_Op_free(&d->op_bf16_sum);
    free(d->sorted);
    free(d->sorted_index);
    free(d->uses);
    free(d->bucket_of);
    free(d->buckets);
}

/* Starts bucket b's all-reduce: unread gradients become zeros, the predivide factor is applied
 * and, with allreduce_always_fp32, a half bucket is widened into its f32 copy first. */
static amp_status amp_ddp_launch(amp_ddp *d, amp_ddp_bucket *b) {
    const amp_backend *be = d->ctx->backend;
    for (int i = b->first; i <= b->last; i++) {
        amp_tensor *p = d->model->params[i].t;
        if (p->grad_written) continue;
        AMP_TRY(be->memset_zero(be->dev, p->grad->data, amp_tensor_nbytes(p)));
        p->grad_written = true;
    }
    void *buf = b->data;
    amp_dtype dt = b->dtype;
    if (b->f32) {
        AMP_TRY(AMP_BE(be, cast, b->f32, AMP_F32, b->data, b->dtype, b->numel));
        buf = b->f32;
        dt = AMP_F32;
    }
    float pre = d->opts.gradient_predivide_factor;
    if (pre != 1.0f)
        AMP_TRY(AMP_BE(be, unary, AMP_UNARY_SCALE, dt, b->numel, buf, 1.0f / pre, buf));
    if (d->launched_in_walk == 0) d->t_first_launch = amp_comm_now();
    if (d->coll) {
        AMP_TRY(be->coll->allreduce(d->coll, buf, dt, b->numel, AMP_COLL_SUM));
        d->t_last_coll = amp_comm_now();
    } else {
        MPI_Datatype type = dt == AMP_F32 ? MPI_FLOAT : MPI_UINT16_T;
        MPI_Op op = dt == AMP_F32 ? MPI_SUM : dt == AMP_F16 ? d->op_f16_sum : d->op_bf16_sum;
        if (b->rs_counts) /* ZeRO-1: this rank's part lands at the bucket's start */
            AMP_MPI_TRY(MPI_Ireduce_scatter(MPI_IN_PLACE, buf, b->rs_counts, type, op,
                                            d->comm->world, &b->req));
        else
            AMP_MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)b->numel, type, op,
                                       d->comm->world, &b->req));
    }
    b->launched = true;
    d->launched_in_walk++;
    d->launched_early += d->nodes_left > 0;
    return AMP_OK;
}

/* Launches the ready buckets that are next in order. */
static amp_status amp_ddp_launch_ready(amp_ddp *d) {
    while (d->next_launch < d->n_buckets && d->buckets[d->next_launch].pending == 0)
        AMP_TRY(amp_ddp_launch(d, &d->buckets[d->next_launch++]));
    return AMP_OK;
}

/* Divides by world / predivide (the average) and narrows an f32 copy back into the bucket. */
static amp_status amp_ddp_finish_bucket(amp_ddp *d, amp_ddp_bucket *b) {
    const amp_backend *be = d->ctx->backend;
    float post = d->opts.gradient_predivide_factor / (float)d->comm->size;
    void *buf = b->f32 ? (void *)b->f32 : b->data;
    amp_dtype dt = b->f32 ? AMP_F32 : b->dtype;
    int64_t numel = b->numel;
    if (b->rs_counts) { /* the reduce-scatter left this rank's part at the start: move it home */
        size_t es = amp_dtype_size(dt), off = 0;
        for (int r = 0; r < d->comm->rank; r++) off += (size_t)b->rs_counts[r];
        numel = b->rs_counts[d->comm->rank];
        if (off && numel) memmove((char *)buf + off * es, buf, (size_t)numel * es);
        buf = (char *)buf + off * es;
    }
    if (post != 1.0f && numel)
        AMP_TRY(AMP_BE(be, unary, AMP_UNARY_SCALE, dt, numel, buf, post, buf));
    if (b->f32) AMP_TRY(AMP_BE(be, cast, b->data, b->dtype, b->f32, AMP_F32, b->numel));
    return AMP_OK;
}

static amp_status amp_ddp_begin(void *user, struct amp_tape_node *const *tape, int n) {
    amp_ddp *d = user;
    d->active = d->sync && d->comm->size > 1;
    if (!d->active) return AMP_OK;
    AMP_TRY(amp_ddp_coll_watchdog(d));
    if (d->model->grad_block != d->grad_block)
        return amp_fail(AMP_ERR_STATE, "DDP: the model's gradients moved since amp_ddp_create "
                        "(amp_initialize or amp_deinitialize re-cast it); call amp_initialize "
                        "before amp_ddp_create, and make a new DDP after amp_deinitialize");
    memset(d->uses, 0, (size_t)d->n_params * sizeof *d->uses);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < tape[i]->n_in; j++) {
            int k = tape[i]->in[j] ? amp_ddp_param_index(d, tape[i]->in[j]) : -1;
            if (k >= 0) d->uses[k]++;
        }
        for (int j = 0; j < tape[i]->n_params; j++) { /* a recomputed child's */
            int k = amp_ddp_param_index(d, tape[i]->params[j]);
            if (k >= 0) d->uses[k]++;
        }
    }
    for (int k = 0; k < d->n_buckets; k++) {
        amp_ddp_bucket *b = &d->buckets[k];
        b->pending = 0;
        b->launched = false;
        for (int i = b->first; i <= b->last; i++) b->pending += d->uses[i] > 0;
    }
    d->next_launch = 0;
    d->launched_in_walk = 0;
    d->launched_early = 0;
    d->nodes_left = n;
    return amp_ddp_launch_ready(d);
}

static amp_status amp_ddp_node_done(void *user, const struct amp_tape_node *node) {
    amp_ddp *d = user;
    if (!d->active) return AMP_OK;
    d->nodes_left--;
    bool any = false;
    for (int j = 0; j < node->n_in + node->n_params; j++) {
        amp_tensor *t = j < node->n_in ? node->in[j] : node->params[j - node->n_in];
        int k = t ? amp_ddp_param_index(d, t) : -1;
        if (k < 0 || --d->uses[k] > 0) continue;
        d->buckets[d->bucket_of[k]].pending--;
        any = true;
    }
    if (any) AMP_TRY(amp_ddp_launch_ready(d));
    /* MPI moves non-blocking collectives forward only inside MPI calls: test the oldest one in
     * flight after every node, which keeps the reduction going while backward computes. */
    for (int k = 0; k < d->next_launch; k++) {
        if (d->buckets[k].req == MPI_REQUEST_NULL) continue;
        bool done;
        AMP_TRY(amp_comm_test(d->comm, 1, &d->buckets[k].req, &done));
        break;
    }
    return AMP_OK;
}

static amp_status amp_ddp_end(void *user, amp_status walk) {
    amp_ddp *d = user;
    if (!d->active) return AMP_OK;
    d->active = false;
    d->t_walk_end = amp_comm_now();
    d->nodes_left = 0;
    /* After a failed walk the remaining buckets still go out (with whatever they hold), so the
     * other ranks are not left waiting for collectives this rank never issues; the walk's error
     * is what the caller gets. */
    for (int k = 0; k < d->n_buckets; k++) d->buckets[k].pending = 0;
    amp_status s = amp_ddp_launch_ready(d);
    if (s == AMP_OK && d->coll) s = d->ctx->backend->coll->join(d->coll);
    for (int k = 0; s == AMP_OK && k < d->n_buckets; k++) {
        amp_ddp_bucket *b = &d->buckets[k];
        if (!d->coll) s = amp_comm_wait(d->comm, 1, &b->req, "the all-reduce of a gradient bucket");
        if (s == AMP_OK && walk == AMP_OK) s = amp_ddp_finish_bucket(d, b);
    }
    double t_done = amp_comm_now();
    d->stats = (amp_ddp_stats){.comm_seconds = t_done - d->t_first_launch,
                               .exposed_seconds = t_done - d->t_walk_end,
                               .buckets_launched_early = d->launched_early};
    return s == AMP_OK ? AMP_OK : amp_fail_context(s, "DDP backward");
}

/* The loss scaler's inf/NaN flags, made the maximum over the ranks (host memory on the CPU
 * backend). Reduced gradients are normally the same bits everywhere, so the flags would agree by
 * themselves; MPI does not promise every rank the same bits of a sum, and a skip decision that
 * differs would make the replicas drift apart for good, so it is agreed explicitly. */
static amp_status amp_ddp_agree_found_inf(void *user, float *found_inf, int n) {
    amp_ddp *d = user;
    if (d->comm->size == 1) return AMP_OK;
    if (d->coll) {
        const amp_backend *be = d->ctx->backend;
        AMP_TRY(be->coll->allreduce(d->coll, found_inf, AMP_F32, n, AMP_COLL_MAX));
        d->t_last_coll = amp_comm_now();
        return be->coll->join(d->coll);
    }
    MPI_Request r;
    AMP_MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, found_inf, n, MPI_FLOAT, MPI_MAX, d->comm->world, &r));
    return amp_comm_wait(d->comm, 1, &r, "agreeing on the loss scaler's overflow flag");
}

/* The sum over the ranks of n f32 pairs (ZeRO's shards' sums of squares and their rounding's
 * remainder), added in f64 in rank order on every rank from the gathered pairs and rounded
 * once: every rank gets the same bits (a clip coefficient that differed would part the replicas
 * for good), and nearly always those of the whole gradient's sum, which is also f64 rounded
 * once: each pair carries its shard's f64 total to 2^-48. */
static amp_status amp_ddp_sum_over_ranks(void *user, float *hi, const float *lo, int n) {
    amp_ddp *d = user;
    int size = d->comm->size;
    if (size == 1) return AMP_OK;
    if (d->coll)
        return amp_fail(AMP_ERR_UNSUPPORTED, "DDP: summing over the ranks on the %s backend is "
                        "not built", d->ctx->backend->name);
    size_t m = 2 * (size_t)n;
    float *mine = malloc(m * sizeof *mine), *parts = malloc((size_t)size * m * sizeof *parts);
    amp_status s = mine && parts ? AMP_OK
                                 : amp_fail(AMP_ERR_OOM, "DDP: out of memory summing over the "
                                            "ranks");
    MPI_Request r;
    if (s == AMP_OK) {
        memcpy(mine, hi, (size_t)n * sizeof *mine);
        memcpy(mine + n, lo, (size_t)n * sizeof *mine);
        int rc = MPI_Iallgather(mine, (int)m, MPI_FLOAT, parts, (int)m, MPI_FLOAT, d->comm->world,
                                &r);
        s = rc == MPI_SUCCESS ? amp_comm_wait(d->comm, 1, &r, "summing the ranks' gradient norms")
                              : amp_mpi_fail(rc, "MPI_Iallgather");
    }
    for (int j = 0; s == AMP_OK && j < n; j++) {
        double sum = 0;
        for (int k = 0; k < size; k++) {
            const float *pair = parts + (size_t)k * m;
            sum += (double)pair[j] + (double)pair[n + j];
        }
        hi[j] = (float)sum;
    }
    free(mine);
    free(parts);
    return s;
}

const amp_backward_observer amp_ddp_observer = {
    .sum_over_ranks = amp_ddp_sum_over_ranks,
    .begin = amp_ddp_begin,
    .node_done = amp_ddp_node_done,
    .end = amp_ddp_end,
    .agree_found_inf = amp_ddp_agree_found_inf,
};
