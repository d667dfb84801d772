/* The op profile (amp/profile.h) while two threads, each with its own context, make backend calls
 * at the same time. The profile counts the process's calls (the counting point has the backend
 * table, shared by every context on it, and no context), so the totals must be exactly the sum of
 * what each thread's work counts alone: calls, and FLOPs, which are whole numbers that f64 adds
 * exactly in any order. The work is public ops on small tensors (one thread, no OpenMP region)
 * and a tight loop of direct calls, so that the threads' counts interleave often: before the
 * counters were atomic, increments made at the same time were lost (each a load, an add and a
 * store) and the totals came out short. A timed profile's seconds grow, its calls stay exact. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "amp/amp.h"
#include "core/ctx.h"
#include "core/error.h"
#include "core/tensor_internal.h"
#include "test_util.h"

#define N_OPS 2000      /* public ops per thread */
#define N_CALLS 1000000 /* direct calls per thread */
#define N_ELEMS 16

typedef struct worker {
    pthread_barrier_t *start; /* NULL: run alone */
    amp_status status;
    char error[256];
} worker;

static amp_status work_ops(amp_ctx *ctx) {
    float host[N_ELEMS];
    for (int i = 0; i < N_ELEMS; i++) host[i] = (float)(i - N_ELEMS / 2);
    const int64_t shape[1] = {N_ELEMS};
    amp_tensor *x = NULL;
    AMP_TRY(amp_tensor_from_host(ctx, AMP_F32, 1, shape, host, &x));
    amp_status s = AMP_OK;
    for (int i = 0; i < N_OPS && s == AMP_OK; i++) {
        amp_tensor *r = NULL, *y = NULL;
        s = amp_relu(x, &r);
        if (s == AMP_OK) s = amp_add(r, x, &y);
        if (i % 64 == 63) amp_ctx_reset_step(ctx);
    }
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x);
    if (s != AMP_OK) return s;
    /* Direct calls through the context's table: elementwise (axpy, 2 FLOPs per element) and
     * cast (no FLOPs), two categories. */
    const amp_backend *be = ctx->backend;
    float a[N_ELEMS] = {0}, b[N_ELEMS] = {0};
    uint16_t h[N_ELEMS];
    for (int i = 0; i < N_CALLS && s == AMP_OK; i++) {
        s = AMP_BE(be, axpy, AMP_F32, N_ELEMS, 0.5f, a, b);
        if (s == AMP_OK) s = AMP_BE(be, cast, h, AMP_BF16, b, AMP_F32, N_ELEMS);
    }
    return s;
}

static void *work(void *p) {
    worker *w = p;
    amp_ctx *ctx = NULL;
    w->status = amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx);
    if (w->start) pthread_barrier_wait(w->start); /* both contexts made, then both work */
    if (w->status == AMP_OK) w->status = work_ops(ctx);
    if (w->status != AMP_OK) snprintf(w->error, sizeof w->error, "%s", amp_last_error());
    amp_ctx_free(ctx);
    return NULL;
}

static void check_worker(const char *what, const worker *w) {
    CHECK_MSG(w->status == AMP_OK, "%s: %s", what, w->error);
}

/* Two workers at once, under one profile (timed or not). */
static void run_two(bool timed, amp_op_profile *out) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    worker w[2] = {{.start = &start}, {.start = &start}};
    pthread_t t[2];
    amp_profile_begin(timed);
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, work, &w[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    amp_profile_end(out);
    pthread_barrier_destroy(&start);
    check_worker("thread 0", &w[0]);
    check_worker("thread 1", &w[1]);
}

int main(void) {
    /* What one worker counts alone (on this thread). */
    worker solo = {0};
    amp_op_profile one;
    amp_profile_begin(false);
    work(&solo);
    amp_profile_end(&one);
    check_worker("alone", &solo);
    CHECK(one.calls[AMP_OPCAT_ELEMENTWISE] >= N_CALLS && one.calls[AMP_OPCAT_CAST] >= N_CALLS);

    for (int timed = 0; timed < 2; timed++) {
        amp_op_profile two;
        run_two(timed, &two);
        for (int c = 0; c < AMP_OPCAT_N; c++) {
            const char *name = amp_op_category_name((amp_op_category)c);
            CHECK_MSG(two.calls[c] == 2 * one.calls[c],
                      "%s %s: %llu calls from two threads, want 2 x %llu",
                      timed ? "timed" : "untimed", name, (unsigned long long)two.calls[c],
                      (unsigned long long)one.calls[c]);
            CHECK_MSG(two.flops[c] == 2.0 * one.flops[c],
                      "%s %s: %.0f FLOPs from two threads, want 2 x %.0f",
                      timed ? "timed" : "untimed", name, two.flops[c], one.flops[c]);
            CHECK(timed ? two.seconds[c] >= 0.0 : two.seconds[c] == 0.0);
        }
        CHECK(!timed || two.seconds[AMP_OPCAT_ELEMENTWISE] > 0.0);
        CHECK(two.host_waits == 0); /* the CPU backend never waits */
    }
    return test_summary("test_profile_threads");
}
