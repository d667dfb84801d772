/* amp_ddp_create: the parameter check across ranks, the broadcast of rank 0's state, and the
 * observer that all-reduces gradient buckets during backward (parallel/ddp_buckets.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "core/error.h"
#include "optim/optimizer_internal.h"
#include "parallel/ddp_internal.h"

#define AMP_DDP_BUCKET_BYTES ((size_t)25 << 20)      /* PyTorch's bucket_cap_mb = 25 */
#define AMP_DDP_FIRST_BUCKET_BYTES ((size_t)1 << 20) /* PyTorch's first bucket: 1 MiB */

/* One line per parameter and buffer: "name dtype d0xd1x...". */
static amp_status amp_ddp_describe(const amp_model *m, char **out, size_t *len) {
    size_t cap = 256, n = 0;
    char *s = malloc(cap);
    if (!s) return amp_fail(AMP_ERR_OOM, "amp_ddp_create: out of memory");
    int total = m->n_params + m->n_buffers;
    for (int i = 0; i < total; i++) {
        const amp_named_tensor *t = i < m->n_params ? &m->params[i] : &m->buffers[i - m->n_params];
        char line[AMP_FULL_NAME_MAX + 128];
        int k = snprintf(line, sizeof line, "%s %s ", t->name, amp_dtype_name(t->t->dtype));
        for (int d = 0; d < t->t->ndim; d++)
            k += snprintf(line + k, sizeof line - (size_t)k, d ? "x%lld" : "%lld",
                          (long long)t->t->shape[d]);
        k += snprintf(line + k, sizeof line - (size_t)k, "\n");
        if (n + (size_t)k + 1 > cap) {
            cap = 2 * (n + (size_t)k + 1);
            char *g = realloc(s, cap);
            if (!g) {
                free(s);
                return amp_fail(AMP_ERR_OOM, "amp_ddp_create: out of memory");
            }
            s = g;
        }
        memcpy(s + n, line, (size_t)k + 1);
        n += (size_t)k;
    }
    *out = s;
    *len = n;
    return AMP_OK;
}

/* The first line where mine differs from rank 0's, in an error naming it; AMP_OK when equal. */
static amp_status amp_ddp_compare(int rank, const char *mine, const char *theirs) {
    for (int line = 0;; line++) {
        const char *a = strchr(mine, '\n'), *b = strchr(theirs, '\n');
        size_t la = a ? (size_t)(a - mine) : strlen(mine), lb = b ? (size_t)(b - theirs) : strlen(theirs);
        if (la == 0 && lb == 0) return AMP_OK;
        if (la != lb || memcmp(mine, theirs, la) != 0)
            return amp_fail(AMP_ERR_SHAPE, "amp_ddp_create: rank %d's model differs from rank 0's "
                            "at parameter/buffer %d: rank 0 has '%.*s', rank %d has '%.*s' (every "
                            "rank must build the same model)", rank, line,
                            lb ? (int)lb : 6, lb ? theirs : "(none)", rank,
                            la ? (int)la : 6, la ? mine : "(none)");
        mine += la + (a != NULL);
        theirs += lb + (b != NULL);
    }
}

static amp_status amp_ddp_check_models(amp_ddp *d) {
    char *mine = NULL, *theirs = NULL;
    size_t len = 0;
    AMP_TRY(amp_ddp_describe(d->model, &mine, &len));
    uint64_t n0 = len;
    amp_status s = amp_comm_bcast_bytes(d->comm, &n0, sizeof n0, "amp_ddp_create's model check");
    if (s == AMP_OK && !(theirs = malloc(n0 + 1))) s = amp_fail(AMP_ERR_OOM, "amp_ddp_create: out of memory");
    if (s == AMP_OK) {
        if (d->comm->rank == 0) memcpy(theirs, mine, len);
        theirs[n0] = 0;
        s = amp_comm_bcast_bytes(d->comm, theirs, n0, "amp_ddp_create's model check");
    }
    amp_status local = s == AMP_OK ? amp_ddp_compare(d->comm->rank, mine, theirs) : AMP_OK;
    free(mine);
    free(theirs);
    AMP_TRY(s);
    bool any;
    AMP_TRY(amp_comm_agree_failure(d->comm, local != AMP_OK, &any));
    if (local != AMP_OK) return local;
    if (any)
        return amp_fail(AMP_ERR_SHAPE, "amp_ddp_create: another rank's model differs from rank "
                        "0's (its error names the first difference)");
    return AMP_OK;
}

/* Rank 0's tensor values to every rank: MPI on host memory, else the backend's broadcast. */
static amp_status amp_ddp_bcast_tensor(amp_ddp *d, amp_tensor *t, const char *what) {
    amp_tensor_mark_written(t);
    if (!d->coll) return amp_comm_bcast_bytes(d->comm, t->data, amp_tensor_nbytes(t), what);
    const amp_backend *be = d->ctx->backend;
    AMP_TRY(be->coll->broadcast(d->coll, t->data, amp_tensor_nbytes(t), 0));
    return be->coll->join(d->coll);
}

amp_status amp_ddp_coll_create(amp_ddp *d) {
    amp_status s = amp_comm_backend_coll(d->comm, d->ctx->backend, &d->coll);
    return s == AMP_OK ? AMP_OK : amp_fail_context(s, "amp_ddp_create");
}

amp_status amp_ddp_coll_watchdog(amp_ddp *d) {
    if (!d->coll) return AMP_OK;
    bool pending = false;
    amp_status s = d->ctx->backend->coll->poll(d->coll, &pending);
    if (s != AMP_OK) {
        d->comm->broken = true;
        return amp_fail_context(s, "rank %d of %d", d->comm->rank, d->comm->size);
    }
    double waited = amp_comm_now() - d->t_last_coll;
    if (pending && waited > d->comm->timeout_s) {
        d->comm->broken = true;
        return amp_fail(AMP_ERR_BACKEND, "rank %d of %d: the %s collectives of the last step have "
                        "not completed after %.0f s: another rank died or hangs (AMP_COMM_TIMEOUT "
                        "sets the limit)", d->comm->rank, d->comm->size, d->ctx->backend->name,
                        waited);
    }
    return AMP_OK;
}

static amp_status amp_ddp_broadcast_state(amp_ddp *d) {
    amp_model *m = d->model;
    for (int i = 0; i < m->n_params; i++)
        AMP_TRY(amp_ddp_bcast_tensor(d, m->params[i].t, "amp_ddp_create's parameter broadcast"));
    for (int i = 0; i < m->n_buffers; i++)
        AMP_TRY(amp_ddp_bcast_tensor(d, m->buffers[i].t, "amp_ddp_create's buffer broadcast"));
    /* O2's f32 masters are the weights the optimizer updates: they must agree too (Apex copies
     * them from the model before its DDP broadcasts, which leaves other ranks' masters stale). */
    amp_optimizer *opt = d->opt;
    if (opt && opt->master_views)
        for (int i = 0; i < opt->n_params; i++)
            if (opt->master_views[i])
                AMP_TRY(amp_ddp_bcast_tensor(d, opt->master_views[i],
                                             "amp_ddp_create's master-weight broadcast"));
    return AMP_OK;
}

static amp_status amp_ddp_check_opts(const amp_ddp_opts *o) {
    if (o->gradient_predivide_factor < 0 || o->gradient_predivide_factor != o->gradient_predivide_factor)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_ddp_create: gradient_predivide_factor %g: want "
                        "> 0 (0: 1)", (double)o->gradient_predivide_factor);
    if (o->zero_stage < 0 || o->zero_stage > 1)
        return amp_fail(o->zero_stage == 2 ? AMP_ERR_UNSUPPORTED : AMP_ERR_INVALID_ARG,
                        "amp_ddp_create: zero_stage %d: want 0 (DDP) or 1 (sharded optimizer "
                        "state)%s", o->zero_stage,
                        o->zero_stage == 2 ? "; stage 2 (sharded gradients) is not built yet" : "");
    if (o->zero_reduce_scatter && (o->zero_stage != 1 || o->allreduce_always_fp32))
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_ddp_create: zero_reduce_scatter is for "
                        "zero_stage 1 without allreduce_always_fp32 (zero_stage %d%s)",
                        o->zero_stage, o->allreduce_always_fp32 ? ", allreduce_always_fp32" : "");
    if (o->first_bucket_bytes > o->bucket_bytes && o->bucket_bytes)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_ddp_create: first_bucket_bytes %zu > "
                        "bucket_bytes %zu", o->first_bucket_bytes, o->bucket_bytes);
    return AMP_OK;
}

static amp_status amp_ddp_init(amp_ddp *d, const amp_ddp_opts *o) {
    amp_model *m = d->model;
    d->opts = *o;
    if (!d->opts.bucket_bytes) d->opts.bucket_bytes = AMP_DDP_BUCKET_BYTES;
    if (!d->opts.first_bucket_bytes)
        d->opts.first_bucket_bytes = d->opts.bucket_bytes < AMP_DDP_FIRST_BUCKET_BYTES
                                         ? d->opts.bucket_bytes : AMP_DDP_FIRST_BUCKET_BYTES;
    if (!(d->opts.gradient_predivide_factor > 0)) d->opts.gradient_predivide_factor = 1.0f;
    if (o->comm) {
        d->comm = o->comm;
    } else {
        AMP_TRY(amp_comm_create(&d->comm));
        d->owns_comm = true;
    }
    const amp_backend *be = d->ctx->backend;
    bool host = be->device == AMP_DEVICE_CPU;
    if (!host && amp_comm_is_distributed(d->comm) && !be->coll)
        return amp_fail(AMP_ERR_UNSUPPORTED, "amp_ddp_create: the %s backend's memory is not host "
                        "memory and it has no collectives; use a CPU context", be->name);
    d->n_params = m->n_params;
    d->grad_block = m->grad_block;
    d->op_f16_sum = d->op_bf16_sum = MPI_OP_NULL;
    d->sync = true;
    AMP_TRY(amp_ddp_check_models(d));
    if (!host && amp_comm_is_distributed(d->comm)) AMP_TRY(amp_ddp_coll_create(d));
    AMP_TRY(amp_ddp_broadcast_state(d));
    if (d->comm->size > 1) AMP_TRY(amp_ddp_buckets_create(d));
    if (d->comm->size > 1 && o->zero_stage) AMP_TRY(amp_zero_create(d));
    d->ctx->bw_observer = &amp_ddp_observer;
    d->ctx->bw_observer_user = d;
    return AMP_OK;
}

/* Stops watching backward for the context: the observer's place is freed. */
static void amp_ddp_detach(amp_ddp *d) {
    if (d->ctx->bw_observer_user == d) {
        d->ctx->bw_observer = NULL;
        d->ctx->bw_observer_user = NULL;
    }
}

/* Hears of frees on the context (core/ctx_lifetime.c): its model or optimizer. */
static void amp_ddp_hear(void *who, const void *freed) {
    amp_ddp *d = who;
    if (d->opt && freed == (const void *)d->opt) d->opt_gone = true;
    if (d->lost) return;
    if (freed == (const void *)d->model) d->lost = "model";
    else if (d->opt && freed == (const void *)d->opt) d->lost = "optimizer";
    if (d->lost) amp_ddp_detach(d);
}

amp_status amp_ddp_check_usable(const char *who, const amp_ddp *d) {
    if (!d) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'd' is NULL", who);
    if (d->lost)
        return amp_fail(AMP_ERR_STATE, "%s: the DDP's %s was freed; free the DDP first "
                        "(amp_ddp_free, then the optimizer, then the model)", who, d->lost);
    return AMP_OK;
}

amp_status amp_ddp_create(amp_model *m, amp_optimizer *opt, const amp_ddp_opts *opts,
                          amp_ddp **out) {
    AMP_CHECK_ARG(m);
    AMP_CHECK_ARG(out);
    *out = NULL;
    amp_ddp_opts o = opts ? *opts : (amp_ddp_opts){0};
    AMP_TRY(amp_model_check_root("amp_ddp_create", m));
    AMP_TRY(amp_ddp_check_opts(&o));
    if (!m->built)
        return amp_fail(AMP_ERR_STATE, "amp_ddp_create: the model is not built (amp_model_build "
                        "or a first forward)");
    if (m->ctx->bw_observer)
        return amp_fail(AMP_ERR_STATE, "amp_ddp_create: this context already has a DDP (one "
                        "DDP per context)");
    if (opt && opt->ctx != m->ctx)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_ddp_create: the optimizer belongs to another "
                        "context than the model");
    if (opt) AMP_TRY(amp_optimizer_check_usable("amp_ddp_create", opt));
    amp_ddp *d = calloc(1, sizeof *d);
    if (!d) return amp_fail(AMP_ERR_OOM, "amp_ddp_create: out of memory");
    d->model = m;
    d->opt = opt;
    d->ctx = m->ctx;
    amp_ctx_hold(d->ctx);
    amp_status s = amp_ctx_listen(d->ctx, d, amp_ddp_hear);
    if (s == AMP_OK) s = amp_ddp_init(d, &o);
    if (s != AMP_OK) {
        amp_ddp_free(d);
        return s;
    }
    *out = d;
    return AMP_OK;
}

void amp_ddp_free(amp_ddp *d) {
    if (!d) return;
    amp_ctx *ctx = d->ctx;
    amp_ctx_unlisten(ctx, d);
    amp_ddp_detach(d);
    if (d->buckets || d->sorted) amp_ddp_buckets_free(d);
    amp_zero_free(d);
    if (d->owns_comm) amp_comm_free(d->comm);
    free(d);
    amp_ctx_drop(ctx);
}

amp_status amp_ddp_set_sync(amp_ddp *d, bool sync) {
    AMP_CHECK_ARG(d);
    d->sync = sync;
    return AMP_OK;
}

amp_comm *amp_ddp_comm(const amp_ddp *d) { return d ? d->comm : NULL; }
int amp_ddp_n_buckets(const amp_ddp *d) { return d ? d->n_buckets : 0; }
int amp_ddp_zero_stage(const amp_ddp *d) { return d ? d->zero_stage : 0; }

amp_status amp_ddp_get_stats(const amp_ddp *d, amp_ddp_stats *out) {
    AMP_CHECK_ARG(d);
    AMP_CHECK_ARG(out);
    *out = d->stats;
    return AMP_OK;
}
