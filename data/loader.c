/* The batch loader: a position (epoch, batch), a gather step that copies the batch's samples
 * into a contiguous buffer, and one background thread that gathers the next batch into the
 * second of two buffers while the caller trains on the first (the prefetching PyTorch's
 * DataLoader gets from its worker processes, without processes).
 *
 * Hand-off protocol (all under `mu`): the caller posts a job {position, buffer} and marks it
 * PENDING; the worker takes it (RUNNING), gathers without the lock, marks it DONE. The caller
 * touches the perm and the job's buffer only while no job is PENDING or RUNNING, and never posts
 * a job into the buffer it last handed out, so the two threads never share memory unlocked. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "amp/data.h"
#include "core/error.h"
#include "data/sampler.h"

typedef enum job_state { JOB_IDLE, JOB_PENDING, JOB_RUNNING, JOB_DONE } job_state;

struct amp_loader {
    const amp_dataset *ds;
    amp_loader_opts opts; /* world_size >= 1 */
    int64_t n;            /* dataset samples */
    int64_t sample_numel;
    int sample_ndim;
    int64_t sample_shape[3];
    int64_t target_numel; /* f32 targets per sample, 0 for class ids */
    int target_ndim;
    int64_t target_shape[3];
    int64_t n_samples; /* per epoch for this rank */
    int64_t n_batches;
    int64_t buf_rows; /* rows each buffer holds: min(batch_size, n_samples) */

    /* Owned by whoever gathers (see the protocol above). */
    int64_t *perm;
    int64_t perm_epoch; /* epoch perm holds, -1 for none */
    float *x[2];
    int32_t *y[2]; /* class ids, or NULL */
    float *t[2];   /* f32 targets, or NULL */

    /* The caller's side. */
    int64_t epoch, batch; /* next batch to return */
    int cur_buf;          /* buffer last handed out */

    /* The prefetch thread. */
    bool threaded;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    job_state job;
    int64_t job_epoch, job_batch, job_n;
    int job_buf;
    bool stop;
};

/* Copies batch (epoch, batch) into buffer `buf`; returns its row count. */
static int64_t gather(amp_loader *ld, int64_t epoch, int64_t batch, int buf) {
    if (ld->perm_epoch != epoch) {
        if (ld->opts.shuffle) amp_sampler_permutation(ld->opts.seed, epoch, ld->n, ld->perm);
        else if (ld->perm_epoch < 0)
            for (int64_t i = 0; i < ld->n; i++) ld->perm[i] = i;
        ld->perm_epoch = epoch;
    }
    int64_t start = batch * ld->opts.batch_size;
    int64_t rows = ld->n_samples - start < ld->opts.batch_size ? ld->n_samples - start
                                                                 : ld->opts.batch_size;
    const float *images = amp_dataset_images(ld->ds), *targets = amp_dataset_targets(ld->ds);
    const int32_t *labels = amp_dataset_labels(ld->ds);
    size_t row_bytes = (size_t)ld->sample_numel * sizeof(float);
    size_t target_bytes = (size_t)ld->target_numel * sizeof(float);
    for (int64_t r = 0; r < rows; r++) {
        int64_t pos = amp_sampler_shard_pos(ld->n, ld->opts.rank, ld->opts.world_size, start + r);
        int64_t idx = ld->perm[pos];
        memcpy(ld->x[buf] + r * ld->sample_numel, images + idx * ld->sample_numel, row_bytes);
        if (labels) ld->y[buf][r] = labels[idx];
        else memcpy(ld->t[buf] + r * ld->target_numel, targets + idx * ld->target_numel, target_bytes);
    }
    return rows;
}

static void *worker_main(void *arg) {
    amp_loader *ld = arg;
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        while (!ld->stop && ld->job != JOB_PENDING) pthread_cond_wait(&ld->cv_work, &ld->mu);
        if (ld->stop) break;
        ld->job = JOB_RUNNING;
        int64_t epoch = ld->job_epoch, batch = ld->job_batch;
        int buf = ld->job_buf;
        pthread_mutex_unlock(&ld->mu);
        int64_t rows = gather(ld, epoch, batch, buf);
        pthread_mutex_lock(&ld->mu);
        ld->job_n = rows;
        ld->job = JOB_DONE;
        pthread_cond_signal(&ld->cv_done);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

/* Caller side, `mu` held: waits until the worker is idle. */
static void wait_idle(amp_loader *ld) {
    while (ld->job == JOB_PENDING || ld->job == JOB_RUNNING)
        pthread_cond_wait(&ld->cv_done, &ld->mu);
}

/* Caller side, `mu` held, worker idle: posts the first real batch at or after the position
 * (epoch, batch) into the buffer the caller does not hold. */
static void post_prefetch(amp_loader *ld, int64_t epoch, int64_t batch) {
    if (batch >= ld->n_batches) {
        epoch++;
        batch = 0;
    }
    ld->job_epoch = epoch;
    ld->job_batch = batch;
    ld->job_buf = 1 - ld->cur_buf;
    ld->job = JOB_PENDING;
    pthread_cond_signal(&ld->cv_work);
}

amp_status amp_loader_create(const amp_dataset *ds, const amp_loader_opts *opts, amp_loader **out) {
    AMP_CHECK_ARG(ds);
    AMP_CHECK_ARG(opts);
    AMP_CHECK_ARG(out);
    *out = NULL;
    amp_loader_opts o = *opts;
    if (o.world_size == 0) o.world_size = 1;
    if (o.batch_size < 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_loader_create: batch_size %lld < 1",
                        (long long)o.batch_size);
    if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "amp_loader_create: rank %d, world_size %d: want 0 <= rank < world_size",
                        o.rank, o.world_size);
    int64_t n = amp_dataset_n(ds);
    if (n < 1 || n > (int64_t)UINT32_MAX)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_loader_create: dataset of %lld samples (want "
                        "1 .. 2^32 - 1)", (long long)n);
    int64_t n_samples = amp_sampler_shard_size(n, o.world_size);
    int64_t n_batches = n_samples / o.batch_size + (!o.drop_last && n_samples % o.batch_size);
    if (n_batches == 0)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "amp_loader_create: drop_last with batch_size %lld > %lld samples per "
                        "rank leaves no batch", (long long)o.batch_size, (long long)n_samples);

    amp_loader *ld = calloc(1, sizeof *ld);
    if (!ld) return amp_fail(AMP_ERR_OOM, "amp_loader_create: cannot allocate the handle");
    ld->ds = ds;
    ld->opts = o;
    ld->n = n;
    ld->sample_numel = amp_dataset_sample_numel(ds);
    ld->sample_ndim = amp_dataset_sample_ndim(ds);
    amp_dataset_sample_shape(ds, ld->sample_shape);
    ld->target_numel = amp_dataset_target_numel(ds);
    ld->target_ndim = amp_dataset_target_shape(ds, ld->target_shape);
    ld->n_samples = n_samples;
    ld->n_batches = n_batches;
    ld->buf_rows = o.batch_size < n_samples ? o.batch_size : n_samples;
    ld->perm_epoch = -1;
    ld->cur_buf = 1;
    ld->perm = malloc((size_t)n * sizeof *ld->perm);
    bool ok = ld->perm != NULL;
    for (int b = 0; b < 2; b++) {
        ld->x[b] = malloc((size_t)(ld->buf_rows * ld->sample_numel) * sizeof(float));
        if (ld->target_numel)
            ld->t[b] = malloc((size_t)(ld->buf_rows * ld->target_numel) * sizeof(float));
        else
            ld->y[b] = malloc((size_t)ld->buf_rows * sizeof(int32_t));
        ok = ok && ld->x[b] && (ld->y[b] || ld->t[b]);
    }
    if (!ok) {
        amp_loader_free(ld);
        return amp_fail(AMP_ERR_OOM, "amp_loader_create: cannot allocate two batches of %lld "
                        "samples", (long long)ld->buf_rows);
    }
    if (!o.no_prefetch) {
        if (pthread_mutex_init(&ld->mu, NULL) != 0) {
            amp_loader_free(ld);
            return amp_fail(AMP_ERR_OOM, "amp_loader_create: pthread_mutex_init failed");
        }
        if (pthread_cond_init(&ld->cv_work, NULL) != 0 ||
            pthread_cond_init(&ld->cv_done, NULL) != 0) {
            pthread_mutex_destroy(&ld->mu);
            amp_loader_free(ld);
            return amp_fail(AMP_ERR_OOM, "amp_loader_create: pthread_cond_init failed");
        }
        int err = pthread_create(&ld->thread, NULL, worker_main, ld);
        if (err != 0) {
            pthread_cond_destroy(&ld->cv_work);
            pthread_cond_destroy(&ld->cv_done);
            pthread_mutex_destroy(&ld->mu);
            amp_loader_free(ld);
            return amp_fail(AMP_ERR_OOM, "amp_loader_create: cannot start the prefetch thread: %s",
                            strerror(err));
        }
        ld->threaded = true;
        pthread_mutex_lock(&ld->mu);
        post_prefetch(ld, 0, 0);
        pthread_mutex_unlock(&ld->mu);
    }
    *out = ld;
    return AMP_OK;
}

void amp_loader_free(amp_loader *ld) {
    if (!ld) return;
    if (ld->threaded) {
        pthread_mutex_lock(&ld->mu);
        ld->stop = true;
        pthread_cond_signal(&ld->cv_work);
        pthread_mutex_unlock(&ld->mu);
        pthread_join(ld->thread, NULL);
        pthread_cond_destroy(&ld->cv_work);
        pthread_cond_destroy(&ld->cv_done);
        pthread_mutex_destroy(&ld->mu);
    }
    for (int b = 0; b < 2; b++) {
        free(ld->x[b]);
        free(ld->y[b]);
        free(ld->t[b]);
    }
    free(ld->perm);
    free(ld);
}

amp_status amp_loader_next(amp_loader *ld, amp_batch *b) {
    AMP_CHECK_ARG(ld);
    AMP_CHECK_ARG(b);
    memset(b, 0, sizeof *b);
    b->epoch = ld->epoch;
    b->index = ld->batch;
    if (ld->batch >= ld->n_batches) {
        /* The end-of-epoch mark; the prefetch already holds the next epoch's first batch. */
        ld->epoch++;
        ld->batch = 0;
        return AMP_OK;
    }
    int buf;
    int64_t rows;
    if (ld->threaded) {
        pthread_mutex_lock(&ld->mu);
        wait_idle(ld);
        if (ld->job == JOB_DONE && ld->job_epoch == ld->epoch && ld->job_batch == ld->batch) {
            buf = ld->job_buf;
            rows = ld->job_n;
        } else {
            /* Only reached if the posted job no longer matches; the worker is idle, gather here. */
            buf = 1 - ld->cur_buf;
            rows = gather(ld, ld->epoch, ld->batch, buf);
        }
        ld->cur_buf = buf;
        post_prefetch(ld, ld->epoch, ld->batch + 1);
        pthread_mutex_unlock(&ld->mu);
    } else {
        buf = 0;
        rows = gather(ld, ld->epoch, ld->batch, buf);
    }
    b->x = ld->x[buf];
    b->y = ld->y[buf];
    b->targets = ld->t[buf];
    b->n = rows;
    b->ndim = 1 + ld->sample_ndim;
    b->shape[0] = rows;
    for (int d = 0; d < 3; d++) b->shape[1 + d] = ld->sample_shape[d];
    if (b->targets) {
        b->target_ndim = 1 + ld->target_ndim;
        b->target_shape[0] = rows;
        for (int d = 0; d < 3; d++) b->target_shape[1 + d] = ld->target_shape[d];
    }
    ld->batch++;
    return AMP_OK;
}

amp_status amp_loader_get_state(const amp_loader *ld, amp_loader_state *st) {
    AMP_CHECK_ARG(ld);
    AMP_CHECK_ARG(st);
    st->epoch = ld->epoch;
    st->batch = ld->batch;
    return AMP_OK;
}

amp_status amp_loader_set_state(amp_loader *ld, const amp_loader_state *st) {
    AMP_CHECK_ARG(ld);
    AMP_CHECK_ARG(st);
    if (st->epoch < 0 || st->epoch > (int64_t)UINT32_MAX || st->batch < 0 ||
        st->batch > ld->n_batches)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "amp_loader_set_state: epoch %lld, batch %lld: want 0 <= epoch < 2^32 "
                        "and 0 <= batch <= %lld (batches per epoch)",
                        (long long)st->epoch, (long long)st->batch, (long long)ld->n_batches);
    ld->epoch = st->epoch;
    ld->batch = st->batch;
    if (ld->threaded) {
        pthread_mutex_lock(&ld->mu);
        if (ld->job == JOB_PENDING) ld->job = JOB_IDLE;
        wait_idle(ld);
        post_prefetch(ld, ld->epoch, ld->batch);
        pthread_mutex_unlock(&ld->mu);
    }
    return AMP_OK;
}

int64_t amp_loader_n_batches(const amp_loader *ld) { return ld ? ld->n_batches : 0; }

amp_status amp_loader_get_opts(const amp_loader *ld, amp_loader_opts *out) {
    AMP_CHECK_ARG(ld);
    AMP_CHECK_ARG(out);
    *out = ld->opts;
    return AMP_OK;
}
int64_t amp_loader_n_samples(const amp_loader *ld) { return ld ? ld->n_samples : 0; }
