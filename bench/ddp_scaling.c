/* DDP throughput on this machine: the same global batch trained by one process with T threads or
 * by N ranks (mpirun -np N) with T / N threads each, and how much of the all-reduce backward
 * hides. Random data (no data set needed), SGD with momentum.
 *
 *   ddp_scaling [--model mlp|convnet] [--global-batch B] [--steps S] [--warmup W] [--threads T]
 *               [--opt-level O0|O1|O2|O3] [--half fp16|bf16]
 *
 * Prints one line per run (rank 0): ranks, threads per rank, samples/s, median step time, and
 * per step the all-reduce time (first bucket launched to last one reduced) and the part of it
 * that backward did not hide (the wait at the end of backward). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amp/amp.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        amp_status s_ = (call);                                                                    \
        if (s_ != AMP_OK) {                                                                        \
            fprintf(stderr, "ddp_scaling: %s: %s\n", #call, amp_last_error());                     \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    const char *model = "mlp", *half = "bf16";
    int global = 128, steps = 30, warmup = 5, threads = 0;
    const char *level_name = "O0";
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 == argc) {
            fprintf(stderr, "ddp_scaling: %s takes a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--global-batch")) global = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--opt-level")) level_name = argv[i + 1];
        else if (!strcmp(argv[i], "--half")) half = argv[i + 1];
        else {
            fprintf(stderr, "ddp_scaling: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    static const char *levels[] = {"O0", "O1", "O2", "O3"};
    int level = -1;
    for (int l = 0; l < 4; l++)
        if (!strcmp(level_name, levels[l])) level = l;
    if (level < 0 || threads < 0 || (strcmp(model, "mlp") && strcmp(model, "convnet")) ||
        (strcmp(half, "fp16") && strcmp(half, "bf16"))) {
        fprintf(stderr,
                "ddp_scaling: --model mlp|convnet, --opt-level O0|O1|O2|O3, --half fp16|bf16, "
                "--threads at least 0 (got %s, %s, %s, %d)\n",
                model, level_name, half, threads);
        return 2;
    }
    amp_comm *comm;
    TRY(amp_comm_create(&comm));
    int rank = amp_comm_rank(comm), size = amp_comm_size(comm);
    if (global % size || steps < 1 || warmup < 0) {
        fprintf(stderr, "ddp_scaling: global batch %d over %d ranks, %d steps\n", global, size, steps);
        return 2;
    }
    int batch = global / size;
    amp_ctx *ctx;
    TRY(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1, .n_threads = threads}, &ctx));
    amp_model *m;
    if (!strcmp(model, "convnet")) TRY(amp_model_convnet_mnist(ctx, &m));
    else TRY(amp_model_mlp_mnist(ctx, &m));
    amp_optimizer *opt;
    TRY(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.01f, .momentum = 0.9f}, &opt));
    amp_options o = {.opt_level = (amp_opt_level)level, .quiet = true,
                     .half_type = !strcmp(half, "fp16") ? AMP_HALF_F16 : AMP_HALF_BF16};
    TRY(amp_initialize_ex(m, opt, &o));
    amp_ddp *ddp;
    TRY(amp_ddp_create(m, opt, &(amp_ddp_opts){.comm = comm}, &ddp));
    size_t img = 28 * 28;
    float *xh = malloc((size_t)batch * img * sizeof *xh);
    int32_t *yh = malloc((size_t)batch * sizeof *yh);
    uint32_t s = 1u + (uint32_t)rank;
    for (size_t i = 0; i < (size_t)batch * img; i++) {
        s = s * 1664525u + 1013904223u;
        xh[i] = (float)(s >> 8) / 16777216.0f;
    }
    for (int i = 0; i < batch; i++) yh[i] = i % 10;
    amp_tensor *x, *y;
    TRY(amp_tensor_from_host(ctx, AMP_F32, 4, (int64_t[]){batch, 1, 28, 28}, xh, &x));
    TRY(amp_tensor_from_host(ctx, AMP_I32, 1, (int64_t[]){batch}, yh, &y));
    double *t = malloc((size_t)steps * sizeof *t), comm_s = 0, exposed_s = 0;
    for (int k = -warmup; k < steps; k++) {
        double t0 = now_s();
        amp_tensor *logits, *loss;
        TRY(amp_model_forward(m, x, &logits));
        TRY(amp_cross_entropy(logits, y, &loss));
        TRY(amp_backward(loss));
        TRY(amp_step(opt, NULL));
        TRY(amp_zero_grad(opt));
        double t1 = now_s();
        if (k < 0) continue;
        t[k] = t1 - t0;
        amp_ddp_stats st;
        TRY(amp_ddp_get_stats(ddp, &st));
        comm_s += st.comm_seconds;
        exposed_s += st.exposed_seconds;
    }
    /* A step ends when the slowest rank's does: the median of the per-step maximum. */
    for (int k = 0; k < steps; k++) TRY(amp_comm_allreduce_max_f64(comm, &t[k], 1));
    qsort(t, (size_t)steps, sizeof *t, cmp_double);
    double med = t[steps / 2];
    char threads_text[32] = "all cores"; /* --threads 0, the default */
    if (threads) snprintf(threads_text, sizeof threads_text, "%d thread(s)", threads);
    if (rank == 0)
        printf("%s %s: %d rank(s) x %s, global batch %d: %.1f samples/s, step %.1f ms "
               "(median), all-reduce %.1f ms/step of which %.1f ms not hidden by backward, "
               "%d bucket(s)\n", model, level == AMP_O0 ? "O0" : half, size,
               threads_text, global, global / med, 1e3 * med,
               size > 1 ? 1e3 * comm_s / steps : 0.0, size > 1 ? 1e3 * exposed_s / steps : 0.0,
               amp_ddp_n_buckets(ddp));
    free(t);
    free(xh);
    free(yh);
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_ddp_free(ddp);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
    amp_comm_free(comm);
    return 0;
}
