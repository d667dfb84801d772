/* The Fashion-MNIST training loop the hand-written-model examples share, written against the
 * public headers only: amp_initialize, DDP when started under mpirun, checkpoint and resume,
 * and a test-set evaluation. A program supplies its model and optimizer (example_make_fn) and
 * calls example_main.
 *   --data DIR (/usr/share/datasets/fashion-mnist)  --epochs N (2)  --steps N (0: the epochs)
 *   --stop-at N (end early, at step N of the run --steps or --epochs plan)  --batch N (64)  --level O0..O3 (O1)  --half bf16|fp16 (bf16)  --ckpt DIR  --resume
 *   --threads N  --no-eval  --print-logits N (the eval-mode logits of the first N test images)
 * The learning rate decays from the optimizer's own to 0 along a cosine over the run. The
 * checkpoint is saved once, after the last step, under --ckpt; --resume starts from its
 * latest step. Under mpirun each rank takes its share of every batch (DistributedSampler's
 * split) and DDP averages the gradients. */
#ifndef EXAMPLE_LOOP_H
#define EXAMPLE_LOOP_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"

typedef amp_status (*example_make_fn)(amp_ctx *ctx, amp_model **m, amp_optimizer **opt);

typedef struct example_opts {
    const char *data, *ckpt;
    int epochs, threads, print_logits;
    int64_t steps, stop_at, batch;
    amp_options amp;
    bool resume, eval;
} example_opts;

#define EX_TRY(call)                                                                               \
    do {                                                                                           \
        if ((call) != AMP_OK) {                                                                    \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, amp_last_error());                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void example_usage(const char *arg) {
    fprintf(stderr, "unknown or incomplete option '%s' (see examples/example_loop.h)\n", arg);
    exit(2);
}

static void example_args(int argc, char **argv, example_opts *o) {
    *o = (example_opts){.data = "/usr/share/datasets/fashion-mnist", .epochs = 2, .batch = 64,
                        .eval = true,
                        .amp = {.opt_level = AMP_O1, .half_type = AMP_HALF_BF16, .quiet = true}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--resume")) o->resume = true;
        else if (!strcmp(a, "--no-eval")) o->eval = false;
        else if (i + 1 >= argc) example_usage(a);
        else {
            const char *v = argv[++i];
            if (!strcmp(a, "--data")) o->data = v;
            else if (!strcmp(a, "--ckpt")) o->ckpt = v;
            else if (!strcmp(a, "--epochs")) o->epochs = atoi(v);
            else if (!strcmp(a, "--steps")) o->steps = atoll(v);
            else if (!strcmp(a, "--stop-at")) o->stop_at = atoll(v);
            else if (!strcmp(a, "--batch")) o->batch = atoll(v);
            else if (!strcmp(a, "--threads")) o->threads = atoi(v);
            else if (!strcmp(a, "--print-logits")) o->print_logits = atoi(v);
            else if (!strcmp(a, "--level") && strlen(v) == 2 && v[0] == 'O' && v[1] >= '0' && v[1] <= '3')
                o->amp.opt_level = (amp_opt_level)(v[1] - '0');
            else if (!strcmp(a, "--half") && (!strcmp(v, "bf16") || !strcmp(v, "fp16")))
                o->amp.half_type = v[0] == 'b' ? AMP_HALF_BF16 : AMP_HALF_F16;
            else example_usage(a);
        }
    }
}

/* Test-set loss and accuracy of every rank's full pass (the ranks agree: same weights). */
static void example_evaluate(amp_ctx *ctx, amp_model *m, amp_stager *st, const example_opts *o,
                             int rank) {
    amp_dataset *test;
    amp_mnist_opts mo = {AMP_FASHION_MNIST_MEAN, AMP_FASHION_MNIST_STD, 10};
    EX_TRY(amp_mnist_load_ex(o->data, false, &mo, &test));
    amp_loader *ld;
    EX_TRY(amp_loader_create(test, &(amp_loader_opts){.batch_size = 500, .no_prefetch = true}, &ld));
    EX_TRY(amp_model_train(m, false));
    bool was = amp_set_grad_enabled(ctx, false);
    int64_t right = 0, n = 0;
    int32_t idx[500];
    static float probe[500 * 10];
    for (int64_t b = 0; b < amp_loader_n_batches(ld); b++) {
        amp_batch batch;
        amp_tensor *x, *y, *logits;
        EX_TRY(amp_loader_next(ld, &batch));
        EX_TRY(amp_stager_put(st, &batch, &x, &y));
        EX_TRY(amp_model_forward(m, x, &logits));
        EX_TRY(amp_tensor_argmax_rows(logits, idx, batch.n));
        if (b == 0 && rank == 0 && o->print_logits > 0) {
            EX_TRY(amp_tensor_to_host_f32(logits, probe, (size_t)batch.n * 10 * sizeof *probe));
            for (int i = 0; i < o->print_logits && i < batch.n; i++) {
                printf("logits");
                for (int c = 0; c < 10; c++) printf(" %.9g", probe[10 * i + c]);
                printf("\n");
            }
        }
        for (int64_t i = 0; i < batch.n; i++) right += idx[i] == batch.y[i];
        n += batch.n;
    }
    amp_set_grad_enabled(ctx, was);
    EX_TRY(amp_model_train(m, true));
    if (rank == 0 && o->eval) printf("test accuracy: %.2f %% (%lld images)\n", 100.0 * (double)right / (double)n, (long long)n);
    amp_loader_free(ld);
    amp_dataset_free(test);
}

static int example_main(int argc, char **argv, const char *name, example_make_fn make) {
    example_opts o;
    example_args(argc, argv, &o);
    amp_comm *comm;
    EX_TRY(amp_comm_create(&comm));
    int rank = amp_comm_rank(comm), world = amp_comm_size(comm);
    amp_ctx *ctx;
    EX_TRY(amp_ctx_create(&(amp_ctx_opts){.seed = 1, .n_threads = o.threads}, &ctx));
    amp_model *m;
    amp_optimizer *opt;
    EX_TRY(make(ctx, &m, &opt));
    EX_TRY(amp_initialize_ex(m, opt, &o.amp));
    amp_ddp *ddp = NULL;
    if (world > 1) EX_TRY(amp_ddp_create(m, opt, &(amp_ddp_opts){.comm = comm}, &ddp));
    amp_dataset *train;
    amp_mnist_opts mo = {AMP_FASHION_MNIST_MEAN, AMP_FASHION_MNIST_STD, 10};
    EX_TRY(amp_mnist_load_ex(o.data, true, &mo, &train));
    amp_loader *ld;
    amp_loader_opts lo = {.batch_size = o.batch, .shuffle = true, .seed = 1, .drop_last = true,
                          .rank = rank, .world_size = world};
    EX_TRY(amp_loader_create(train, &lo, &ld));
    amp_stager *st;
    EX_TRY(amp_stager_create(ctx, &st));
    int64_t step = 0, total = o.steps ? o.steps : o.epochs * amp_loader_n_batches(ld);
    amp_checkpoint_opts co = {.loader = ld};
    float base_lr = amp_optimizer_lr(opt); /* the rate at step 0, whatever a resume restores */
    if (o.resume && o.ckpt) {
        EX_TRY(ddp ? amp_ddp_checkpoint_load(ddp, o.ckpt, &co, &step)
                   : amp_checkpoint_load(o.ckpt, m, opt, &co, &step));
        if (rank == 0) printf("%s: resumed at step %lld\n", name, (long long)step);
    }
    int64_t end = o.stop_at > 0 && o.stop_at < total ? o.stop_at : total;
    for (; step < end; step++) {
        /* Cosine decay from the optimizer's rate to 0 over the run (every group alike). */
        EX_TRY(amp_optimizer_set_lr(opt, base_lr * 0.5f * (1.0f + cosf(3.14159265f * (float)step / (float)total))));
        amp_batch b;
        amp_tensor *x, *y, *logits, *loss;
        EX_TRY(amp_loader_next(ld, &b));
        if (b.n == 0) EX_TRY(amp_loader_next(ld, &b)); /* the end-of-epoch mark */
        EX_TRY(amp_stager_put(st, &b, &x, &y));
        EX_TRY(amp_model_forward(m, x, &logits));
        EX_TRY(amp_cross_entropy(logits, y, &loss));
        EX_TRY(amp_backward(loss));
        if (rank == 0 && (step % 200 == 0 || step + 1 == total)) {
            float l;
            EX_TRY(amp_tensor_item(loss, &l));
            printf("%s: step %lld/%lld loss %.4f\n", name, (long long)step, (long long)total, l);
        }
        EX_TRY(amp_step(opt, NULL));
        EX_TRY(amp_zero_grad(opt));
    }
    if (o.ckpt)
        EX_TRY(ddp ? amp_ddp_checkpoint_save(ddp, o.ckpt, step, &co, NULL, 0)
                   : amp_checkpoint_save(o.ckpt, step, m, opt, &co, NULL, 0));
    if (o.eval || o.print_logits > 0) example_evaluate(ctx, m, st, &o, rank);
    amp_stager_free(st);
    amp_loader_free(ld);
    amp_dataset_free(train);
    amp_ddp_free(ddp);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
    amp_comm_free(comm);
    return 0;
}

#endif
