/* The batch loader: every sample once per epoch, seeded orders that depend only on (seed, epoch),
 * resume from a saved state, drop_last, DistributedSampler-style shards, and a prefetch thread
 * that gives the same batches as gathering on the caller's thread and never writes into the batch
 * the caller holds. Samples carry their own index in their pixels so each row can be traced. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "amp/data.h"
#include "core/ctx.h"
#include "data/sampler.h"
#include "tests/flaky_backend.h"
#include "tests/test_util.h"

enum { C = 1, H = 2, W = 3, NUMEL = C * H * W, N_CLASSES = 10 };

/* Sample i: pixel k = i * 1000 + k, label i % 10. */
static amp_dataset *make_dataset(int64_t n) {
    float *x = malloc((size_t)(n * NUMEL) * sizeof *x);
    int32_t *y = malloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++) {
        for (int k = 0; k < NUMEL; k++) x[i * NUMEL + k] = (float)(i * 1000 + k);
        y[i] = (int32_t)(i % N_CLASSES);
    }
    amp_dataset *ds = NULL;
    CHECK_OK(amp_dataset_create(n, (const int64_t[3]){C, H, W}, x, y, N_CLASSES, &ds));
    free(x);
    free(y);
    return ds;
}

/* The sample indices of a batch, checking every pixel, the label and the shape; -1 on a bad row. */
static void batch_indices(const amp_batch *b, int64_t *idx) {
    if (b->n == 0) {
        CHECK(b->x == NULL && b->y == NULL);
        return;
    }
    CHECK(b->shape[0] == b->n && b->shape[1] == C && b->shape[2] == H && b->shape[3] == W);
    for (int64_t r = 0; r < b->n; r++) {
        int64_t i = (int64_t)(b->x[r * NUMEL] / 1000.0f);
        int ok = b->y[r] == (int32_t)(i % N_CLASSES);
        for (int k = 0; k < NUMEL; k++) ok &= b->x[r * NUMEL + k] == (float)(i * 1000 + k);
        CHECK_MSG(ok, "row %lld of batch (%lld, %lld) is not a whole sample", (long long)r,
                  (long long)b->epoch, (long long)b->index);
        idx[r] = ok ? i : -1;
    }
}

/* Runs one epoch: writes the order of sample indices, returns how many (-1 on a protocol error).
 * Checks batch sizes, indices and the end-of-epoch mark. */
static int64_t run_epoch(amp_loader *ld, int64_t batch_size, int64_t *order) {
    int64_t count = 0, nb = amp_loader_n_batches(ld);
    amp_loader_state st;
    CHECK_OK(amp_loader_get_state(ld, &st));
    for (int64_t k = 0;; k++) {
        amp_batch b;
        CHECK_OK(amp_loader_next(ld, &b));
        CHECK(b.epoch == st.epoch && b.index == k);
        if (b.n == 0) {
            CHECK(k == nb && b.x == NULL && b.y == NULL);
            break;
        }
        if (k >= nb) return -1;
        CHECK(b.n <= batch_size && (b.n == batch_size || k == nb - 1));
        batch_indices(&b, order + count);
        count += b.n;
    }
    return count;
}

/* counts[i] = occurrences of sample i in order[0..len). */
static void histogram(const int64_t *order, int64_t len, int64_t n, int64_t *counts) {
    memset(counts, 0, (size_t)n * sizeof *counts);
    for (int64_t k = 0; k < len; k++)
        if (order[k] >= 0 && order[k] < n) counts[order[k]]++;
}

static void test_epochs(void) {
    const int64_t n = 103, bs = 10;
    amp_dataset *ds = make_dataset(n);
    int64_t orders[3][103], counts[103];
    for (int prefetch = 0; prefetch < 2; prefetch++) {
        amp_loader *ld = NULL;
        CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = bs, .shuffle = true,
                                                          .seed = 7, .no_prefetch = !prefetch},
                                   &ld));
        CHECK(amp_loader_n_batches(ld) == 11 && amp_loader_n_samples(ld) == n);
        for (int e = 0; e < 3; e++) {
            int64_t order[103];
            CHECK(run_epoch(ld, bs, order) == n);
            histogram(order, n, n, counts);
            int once = 1;
            for (int64_t i = 0; i < n; i++) once &= counts[i] == 1;
            CHECK_MSG(once, "epoch %d: not every sample exactly once", e);
            /* With and without the prefetch thread, the same batches. */
            if (prefetch) CHECK(memcmp(order, orders[e], sizeof order) == 0);
            else memcpy(orders[e], order, sizeof order);
        }
        amp_loader_free(ld);
    }
    CHECK(memcmp(orders[0], orders[1], sizeof orders[0]) != 0);
    CHECK(memcmp(orders[1], orders[2], sizeof orders[0]) != 0);

    /* Same seed, same order (a fresh loader); another seed, another order. */
    int64_t again[103], other[103];
    amp_loader *ld = NULL;
    CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 32, .shuffle = true, .seed = 7},
                               &ld));
    CHECK(run_epoch(ld, 32, again) == n);
    CHECK(memcmp(again, orders[0], sizeof again) == 0);
    amp_loader_free(ld);
    CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 32, .shuffle = true, .seed = 8},
                               &ld));
    CHECK(run_epoch(ld, 32, other) == n);
    CHECK(memcmp(other, orders[0], sizeof other) != 0);
    amp_loader_free(ld);

    /* No shuffle: 0, 1, ..., n - 1 every epoch. */
    CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 50}, &ld));
    for (int e = 0; e < 2; e++) {
        int64_t order[103], in_order = 1;
        CHECK(run_epoch(ld, 50, order) == n);
        for (int64_t i = 0; i < n; i++) in_order &= order[i] == i;
        CHECK(in_order);
    }
    amp_loader_free(ld);
    amp_dataset_free(ds);
}

static void test_drop_last(void) {
    const int64_t n = 103, bs = 10;
    amp_dataset *ds = make_dataset(n);
    amp_loader *ld = NULL;
    CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = bs, .shuffle = true,
                                                      .seed = 3, .drop_last = true}, &ld));
    CHECK(amp_loader_n_batches(ld) == 10);
    int64_t order[103], counts[103], seen[103] = {0};
    for (int e = 0; e < 20; e++) {
        CHECK(run_epoch(ld, bs, order) == 100);
        histogram(order, 100, n, counts);
        int at_most_once = 1;
        for (int64_t i = 0; i < n; i++) {
            at_most_once &= counts[i] <= 1;
            seen[i] += counts[i];
        }
        CHECK(at_most_once);
    }
    /* The dropped tail changes with the epoch: over 20 epochs every sample shows up. */
    int all_seen = 1;
    for (int64_t i = 0; i < n; i++) all_seen &= seen[i] > 0;
    CHECK(all_seen);
    amp_loader_free(ld);
    amp_dataset_free(ds);
}

/* Stops after `stop` batches of epoch 1 (13 batches per epoch: 13 leaves only the end mark), saves
 * the state, reads 40 more batches (several epochs) from there; a fresh loader restored to the
 * state must give the same ones. */
static void test_resume(void) {
    const int64_t n = 103, bs = 8;
    amp_dataset *ds = make_dataset(n);
    amp_loader_opts opts = {.batch_size = bs, .shuffle = true, .seed = 11};
    for (int stop = 0; stop <= 13; stop += stop == 7 ? 6 : 7) {
        amp_loader *a = NULL, *b = NULL;
        CHECK_OK(amp_loader_create(ds, &opts, &a));
        int64_t scratch[103];
        CHECK(run_epoch(a, bs, scratch) == n);
        amp_batch bt;
        for (int k = 0; k < stop; k++) CHECK_OK(amp_loader_next(a, &bt));
        amp_loader_state st;
        CHECK_OK(amp_loader_get_state(a, &st));
        CHECK(st.epoch == 1 && st.batch == stop);
        int64_t want[40][8], got[40][8], want_n[40], got_n[40];
        for (int k = 0; k < 40; k++) {
            CHECK_OK(amp_loader_next(a, &bt));
            want_n[k] = bt.n;
            batch_indices(&bt, want[k]);
        }
        CHECK_OK(amp_loader_create(ds, &opts, &b));
        CHECK_OK(amp_loader_set_state(b, &st));
        int same = 1;
        for (int k = 0; k < 40; k++) {
            CHECK_OK(amp_loader_next(b, &bt));
            got_n[k] = bt.n;
            batch_indices(&bt, got[k]);
            same &= got_n[k] == want_n[k] && memcmp(got[k], want[k], sizeof(int64_t) * bt.n) == 0;
        }
        CHECK_MSG(same, "resume at epoch 1 batch %d differs", stop);
        /* Rewinding the first loader mid-stream gives them once more. */
        CHECK_OK(amp_loader_set_state(a, &st));
        same = 1;
        for (int k = 0; k < 40; k++) {
            CHECK_OK(amp_loader_next(a, &bt));
            batch_indices(&bt, got[k]);
            same &= bt.n == want_n[k] && memcmp(got[k], want[k], sizeof(int64_t) * bt.n) == 0;
        }
        CHECK_MSG(same, "rewind to epoch 1 batch %d differs", stop);
        amp_loader_free(a);
        amp_loader_free(b);
    }
    /* Restoring the end-of-epoch position gives the end mark, then the next epoch. */
    amp_loader *ld = NULL;
    CHECK_OK(amp_loader_create(ds, &opts, &ld));
    amp_batch bt;
    CHECK_OK(amp_loader_set_state(ld, &(amp_loader_state){.epoch = 5, .batch = 13}));
    CHECK_OK(amp_loader_next(ld, &bt));
    CHECK(bt.n == 0 && bt.epoch == 5 && bt.index == 13);
    CHECK_OK(amp_loader_next(ld, &bt));
    CHECK(bt.n == bs && bt.epoch == 6 && bt.index == 0);
    CHECK_FAILS(amp_loader_set_state(ld, &(amp_loader_state){.epoch = 0, .batch = 14}),
                AMP_ERR_INVALID_ARG, "batch 14");
    CHECK_FAILS(amp_loader_set_state(ld, &(amp_loader_state){.epoch = -1, .batch = 0}),
                AMP_ERR_INVALID_ARG, "epoch -1");
    amp_loader_free(ld);
    amp_dataset_free(ds);
}

/* Shards follow DistributedSampler: rank r's i-th sample is entry (r + i * world) mod n of the
 * unsharded order (padding wraps to its start). n = 100 over 4 ranks partitions the data; 103
 * over 4 gives 26 each, the order's first sample twice. */
static void test_shards(void) {
    const int world = 4, bs = 5;
    for (int64_t n = 100; n <= 103; n += 3) {
        amp_dataset *ds = make_dataset(n);
        int64_t full[103], counts[103], all[4 * 26];
        amp_loader *ld = NULL;
        CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = bs, .shuffle = true,
                                                          .seed = 5}, &ld));
        CHECK_OK(amp_loader_set_state(ld, &(amp_loader_state){.epoch = 2}));
        CHECK(run_epoch(ld, bs, full) == n);
        amp_loader_free(ld);
        int64_t per_rank = (n + world - 1) / world, total = 0;
        for (int r = 0; r < world; r++) {
            CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = bs, .shuffle = true,
                                                              .seed = 5, .rank = r,
                                                              .world_size = world}, &ld));
            CHECK(amp_loader_n_samples(ld) == per_rank);
            CHECK_OK(amp_loader_set_state(ld, &(amp_loader_state){.epoch = 2}));
            int64_t *mine = all + total;
            CHECK(run_epoch(ld, bs, mine) == per_rank);
            int rule = 1;
            for (int64_t i = 0; i < per_rank; i++) rule &= mine[i] == full[(r + i * world) % n];
            CHECK_MSG(rule, "n %lld rank %d: not DistributedSampler's order", (long long)n, r);
            total += per_rank;
            amp_loader_free(ld);
        }
        histogram(all, total, n, counts);
        int64_t ones = 0, twos = 0;
        for (int64_t i = 0; i < n; i++) {
            ones += counts[i] == 1;
            twos += counts[i] == 2;
        }
        CHECK(ones + twos == n && twos == world * per_rank - n);
        if (twos == 1) CHECK(counts[full[0]] == 2);
        amp_dataset_free(ds);
    }
}

/* The prefetch thread fills the other buffer: the batch the caller holds stays intact while the
 * thread has time to prepare the next one. */
static void test_buffer_held(void) {
    amp_dataset *ds = make_dataset(64);
    amp_loader *ld = NULL;
    CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 16, .shuffle = true,
                                                      .seed = 1}, &ld));
    int64_t before[16], after[16];
    for (int k = 0; k < 10; k++) {
        amp_batch b;
        CHECK_OK(amp_loader_next(ld, &b));
        if (b.n == 0) continue;
        batch_indices(&b, before);
        nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
        batch_indices(&b, after);
        CHECK(memcmp(before, after, sizeof(int64_t) * b.n) == 0);
    }
    amp_loader_free(ld);
    amp_dataset_free(ds);
}

static void test_bad_opts(void) {
    amp_dataset *ds = make_dataset(10);
    amp_loader *ld = (amp_loader *)&ld;
    CHECK_FAILS(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 0}, &ld),
                AMP_ERR_INVALID_ARG, "batch_size 0");
    CHECK(ld == NULL);
    CHECK_FAILS(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 2, .rank = 2,
                                                         .world_size = 2}, &ld),
                AMP_ERR_INVALID_ARG, "rank 2");
    CHECK_FAILS(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 11, .drop_last = true},
                                  &ld), AMP_ERR_INVALID_ARG, "drop_last");
    CHECK_FAILS(amp_loader_create(NULL, &(amp_loader_opts){.batch_size = 1}, &ld),
                AMP_ERR_INVALID_ARG, "ds");
    /* A batch larger than the data: one batch of everything. */
    CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = INT64_MAX}, &ld));
    CHECK(amp_loader_n_batches(ld) == 1);
    amp_batch b;
    CHECK_OK(amp_loader_next(ld, &b));
    CHECK(b.n == 10);
    amp_loader_free(ld);
    amp_loader_free(NULL);
    amp_dataset_free(ds);
}

/* The permutation itself: a permutation, reproducible, and uniform enough that a plain
 * Fisher-Yates slip (Sattolo's j < i, which never leaves a fixed point, or a j drawn from [0, n))
 * shows: over 4000 epochs of n = 8, each (position 0, value) pair about 500 times, fixed points
 * present. */
static void test_permutation(void) {
    enum { N = 8, EPOCHS = 4000 };
    int64_t perm[N], again[N];
    long first[N] = {0}, last[N] = {0}, fixed = 0;
    for (int e = 0; e < EPOCHS; e++) {
        amp_sampler_permutation(99, e, N, perm);
        int seen[N] = {0};
        for (int i = 0; i < N; i++) {
            if (perm[i] >= 0 && perm[i] < N) seen[perm[i]]++;
            fixed += perm[i] == i;
        }
        int is_perm = 1;
        for (int i = 0; i < N; i++) is_perm &= seen[i] == 1;
        CHECK(is_perm);
        first[perm[0]]++;
        last[perm[N - 1]]++;
    }
    amp_sampler_permutation(99, 17, N, perm);
    amp_sampler_permutation(99, 17, N, again);
    CHECK(memcmp(perm, again, sizeof perm) == 0);
    /* chi-square with 7 degrees of freedom: 24.3 is its 0.001 quantile's complement. */
    double chi_first = 0, chi_last = 0, expect = (double)EPOCHS / N;
    for (int v = 0; v < N; v++) {
        chi_first += (first[v] - expect) * (first[v] - expect) / expect;
        chi_last += (last[v] - expect) * (last[v] - expect) / expect;
    }
    CHECK_MSG(chi_first < 24.3 && chi_last < 24.3, "chi2 first %g last %g", chi_first, chi_last);
    /* Expected fixed points per permutation: 1, so about 4000 in total. */
    CHECK_MSG(fixed > 3600 && fixed < 4400, "fixed points %ld", fixed);
}

/* The stager on the CPU (plain copies): when the labels' block cannot be made after the pixels'
 * was, the put fails, keeps no half-made pair and leaks nothing; the next put makes the pair
 * again and copies the batch (it used to find x in place and write through the missing y). */
static void test_stager_alloc_failure(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &ctx));
    if (!ctx) return;
    amp_backend flaky = flaky_backend();
    const amp_backend *cpu = ctx->backend;
    ctx->backend = &flaky;
    g_flaky = (flaky_state){0};
    amp_stager *st = NULL;
    CHECK_OK(amp_stager_create(ctx, &st));
    enum { N = 4 };
    float hx[N * NUMEL];
    int32_t hy[N];
    for (int i = 0; i < N * NUMEL; i++) hx[i] = (float)i;
    for (int i = 0; i < N; i++) hy[i] = 7 - i;
    amp_batch b = {.x = hx, .y = hy, .n = N, .shape = {N, C, H, W}};
    amp_tensor *x = NULL, *y = NULL;
    for (int fail_at = 1; st && fail_at <= 2; fail_at++) { /* x out of memory, then y */
        g_flaky = (flaky_state){.fail_alloc_at = fail_at};
        CHECK_FAILS(amp_stager_put(st, &b, &x, &y), AMP_ERR_OOM, "amp_stager_put");
        CHECK(x == NULL && y == NULL);
        CHECK_MSG(g_flaky.n_alloc == g_flaky.n_free, "failing alloc %d: %d blocks made, %d freed",
                  fail_at, g_flaky.n_alloc, g_flaky.n_free);
    }
    g_flaky = (flaky_state){0};
    CHECK_OK(amp_stager_put(st, &b, &x, &y));
    if (x && y) {
        float gx[N * NUMEL];
        int32_t gy[N];
        CHECK_OK(amp_tensor_to_host(x, gx, sizeof gx));
        CHECK_OK(amp_tensor_to_host(y, gy, sizeof gy));
        CHECK(memcmp(gx, hx, sizeof gx) == 0 && memcmp(gy, hy, sizeof gy) == 0);
    }
    amp_stager_free(st);
    CHECK_MSG(g_flaky.n_alloc == g_flaky.n_free, "after free: %d blocks made, %d freed",
              g_flaky.n_alloc, g_flaky.n_free);
    ctx->backend = cpu;
    amp_ctx_free(ctx);
}

int main(void) {
    test_permutation();
    test_epochs();
    test_drop_last();
    test_resume();
    test_shards();
    test_buffer_held();
    test_bad_opts();
    test_stager_alloc_failure();
    return test_summary("test_data_loader");
}
