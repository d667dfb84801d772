/* amp-train: the Apex MNIST tutorial in C. Trains the tutorial ConvNet (or an MLP) on
 * Fashion-MNIST and reports per-epoch train loss, test accuracy and throughput.
 *
 * The training loop does not make the host wait for the device (PyTorch's advice: no
 * loss.item() in the loop): the epoch's losses are summed on the device (amp_accumulate) and
 * read at the epoch's end, and a step's own loss is read only when it is printed: a --log-every
 * line, or the progress bar, redrawn at most every PROGRESS_SECONDS. On CUDA the one wait left
 * in a step is cross-entropy's label check (core/backend.h: xent_fwd). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "amp/amp.h"
#include "stop_signal.h"
#include "train_args.h"

#define EVAL_BATCH 1000
/* The progress bar's redraws, each one read of the step's loss: a few a second look live. */
#define PROGRESS_SECONDS 0.25

/* This process's rank under mpirun/srun (0 alone), for error lines. */
static int g_rank;

/* Prints the failing call and the library's message, then leaves main through `fail`. */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        amp_status s_ = (call);                                                                    \
        if (s_ != AMP_OK) {                                                                        \
            fprintf(stderr, "amp-train (rank %d): %s: %s\n", g_rank, amp_status_str(s_),          \
                    amp_last_error());                                                             \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Where the text goes: stdout, or stderr under --json, whose stdout holds JSON lines only (so
 * that `amp-train --json | jq` works). */
static FILE *g_text;

static void progress(int epoch, int64_t batch, int64_t n_batches, float loss) {
    int width = 30, filled = (int)(width * (batch + 1) / n_batches);
    fprintf(g_text, "\repoch %d [%.*s%*s] %lld/%lld loss %.4f", epoch, filled,
            "==============================", width - filled, "", (long long)(batch + 1),
            (long long)n_batches, (double)loss);
    fflush(g_text);
}

/* Copies a host batch into device tensors, re-made only when the batch size changes. */
static amp_status upload_batch(amp_ctx *ctx, const amp_batch *b, amp_tensor **x, amp_tensor **y) {
    if (!*x || amp_tensor_dim(*x, 0) != b->n) {
        amp_tensor_free(*x);
        amp_tensor_free(*y);
        *x = *y = NULL;
        amp_status s = amp_tensor_create(ctx, AMP_F32, 4, b->shape, x);
        if (s == AMP_OK) s = amp_tensor_create(ctx, AMP_I32, 1, &b->n, y);
        if (s != AMP_OK) return s;
    }
    amp_status s = amp_tensor_copy_from_host(*x, b->x, (size_t)amp_tensor_nbytes(*x));
    return s == AMP_OK ? amp_tensor_copy_from_host(*y, b->y, (size_t)amp_tensor_nbytes(*y)) : s;
}

/* Fraction of the test set classified correctly, in eval mode without gradients. */
static amp_status evaluate(amp_model *m, const amp_dataset *test, double *accuracy) {
    amp_ctx *ctx = amp_model_ctx(m);
    amp_loader *ld = NULL;
    amp_tensor *x = NULL, *y = NULL;
    int32_t pred[EVAL_BATCH];
    int64_t correct = 0, seen = 0;
    bool grad = amp_set_grad_enabled(ctx, false);
    amp_model_train(m, false);
    amp_status s = amp_loader_create(test, &(amp_loader_opts){.batch_size = EVAL_BATCH}, &ld);
    amp_batch b;
    while (s == AMP_OK && (s = amp_loader_next(ld, &b)) == AMP_OK && b.n > 0) {
        amp_tensor *out;
        s = upload_batch(ctx, &b, &x, &y);
        if (s == AMP_OK) s = amp_model_forward(m, x, &out);
        if (s == AMP_OK) s = amp_tensor_argmax_rows(out, pred, b.n);
        for (int64_t i = 0; s == AMP_OK && i < b.n; i++) correct += pred[i] == b.y[i];
        seen += b.n; /* the next no-grad forward frees this batch's tensors */
    }
    amp_model_train(m, true);
    amp_set_grad_enabled(ctx, grad);
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_loader_free(ld);
    *accuracy = seen ? (double)correct / (double)seen : 0.0;
    return s;
}

/* A process of several that fails must take the others down, which would otherwise wait for it
 * in their next collective until the deadline. */
static bool world_failed(const amp_comm *comm) { return amp_comm_is_distributed(comm); }

/* One --log-every line: the step (1-based), its loss, the loss scale the next step will use
 * (torch's scaler.get_scale() after update()) and whether this step was skipped. */
static amp_status log_step_line(amp_optimizer *opt, int64_t step, float loss, bool skipped,
                                bool json, bool tty) {
    amp_scaler_state sc;
    amp_status s = amp_scaler_get_state(opt, 0, &sc);
    if (s != AMP_OK) return s;
    if (tty) fprintf(g_text, "\n");
    if (json)
        printf("{\"step\": %lld, \"loss\": %.9g, \"loss_scale\": %.9g, \"skipped\": %s}\n",
               (long long)step, (double)loss, (double)sc.scale, skipped ? "true" : "false");
    else
        printf("step %lld: loss %.9g, loss scale %g%s\n", (long long)step, (double)loss,
               (double)sc.scale, skipped ? ", skipped" : "");
    return AMP_OK;
}

int main(int argc, char **argv) {
    train_args a;
    int rc = train_args_parse(argc, argv, &a);
    if (rc) return rc > 0 ? 0 : 2;
    if (!strcmp(a.model, "gpt") || !strcmp(a.model, "llama")) return amp_train_lm(&a);

    amp_ctx *ctx = NULL;
    amp_dataset *train = NULL, *test = NULL;
    amp_loader *loader = NULL;
    amp_model *model = NULL;
    amp_optimizer *opt = NULL;
    amp_stager *stager = NULL; /* training batches: copied in while the previous step computes */
    amp_tensor *loss_sum = NULL; /* the epoch's losses, summed on the device */
    amp_comm *comm = NULL;       /* the world of mpirun/srun; alone, a world of one */
    amp_ddp *ddp = NULL;
    int exit_code = 1;
    g_text = a.json ? stderr : stdout;
    bool tty = isatty(fileno(g_text));
    amp_mnist_opts norm = {.mean = AMP_FASHION_MNIST_MEAN, .std = AMP_FASHION_MNIST_STD};

    TRY(amp_comm_create(&comm));
    int world = amp_comm_size(comm);
    g_rank = amp_comm_rank(comm);
    /* Only rank 0 prints: what it prints is made global below (the loss averaged over the ranks,
     * the samples/s of all). The others keep stderr for their errors. */
    if (g_rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    if (g_rank != 0) g_text = stdout;
    if (g_rank != 0) tty = false;
    /* The cores of a machine are shared by the processes on it (else each would take them all). */
    int threads = a.threads;
    if (!threads && world > 1) {
        int share = omp_get_num_procs() / amp_comm_local_size(comm);
        threads = share > 0 ? share : 1;
    }
    if (world > 1) TRY(amp_comm_select_device(comm)); /* GPU local_rank, where there are GPUs */
    static const amp_device devices[] = {AMP_DEVICE_AUTO, AMP_DEVICE_CPU, AMP_DEVICE_CUDA};
    TRY(amp_ctx_create(&(amp_ctx_opts){.device = devices[a.device], .seed = a.seed,
                                       .n_threads = threads, .allow_tf32 = a.allow_tf32,
                                       .allow_nondeterministic = a.nondeterministic},
                       &ctx));
    TRY(amp_mnist_load_ex(a.data_dir, true, &norm, &train));
    TRY(amp_mnist_load_ex(a.data_dir, false, &norm, &test));
    /* --batch-size is the global batch: N processes train as one does (the same batches, the
     * same batch-norm statistics with --sync-bn, the same learning rate), only faster. */
    int64_t batch = a.batch_size;
    if (world > 1 && !a.batch_per_process) {
        if (a.batch_size % world) {
            fprintf(stderr, "amp-train: --batch-size %lld does not split over %d processes (use "
                    "a multiple of %d, or --batch-per-process)\n", (long long)a.batch_size, world,
                    world);
            goto fail;
        }
        batch = a.batch_size / world;
    }
    TRY(amp_loader_create(train, &(amp_loader_opts){.batch_size = batch, .shuffle = true,
                                                    .seed = a.seed, .rank = g_rank,
                                                    .world_size = world}, &loader));
    TRY(amp_stager_create(ctx, &stager));
    TRY(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){1}, &loss_sum));
    TRY(strcmp(a.model, "mlp") == 0 ? amp_model_mlp_mnist(ctx, &model)
                                    : amp_model_convnet_mnist(ctx, &model));
    if (strcmp(a.optimizer, "sgd") == 0) {
        amp_sgd_opts so = amp_sgd_defaults(); /* exact: --lr 0 means 0 */
        so.lr = a.lr;
        so.momentum = a.momentum;
        TRY(amp_sgd_create(model, &so, &opt));
    } else {
        amp_adam_opts ao = amp_adam_defaults();
        ao.lr = a.lr;
        TRY(amp_adam_create(model, &ao, &opt));
    }
    amp_options amp_opts = {.opt_level = (amp_opt_level)a.opt_level,
                            .half_type = a.bf16 ? AMP_HALF_BF16 : AMP_HALF_F16,
                            .loss_scale = a.loss_scale,
                            .init_scale = a.init_scale,
                            .skip_nonfinite = a.skip_nonfinite > 0   ? AMP_OPT_TRUE
                                              : a.skip_nonfinite < 0 ? AMP_OPT_FALSE
                                                                     : AMP_OPT_DEFAULT};
    if (a.sync_bn) TRY(amp_model_convert_sync_batchnorm(model, comm));
    TRY(amp_initialize_ex(model, opt, &amp_opts));
    amp_ctx_memory_reset_peak(ctx); /* peak_backend_mb: what training holds, not the cast */
    if (a.init_weights) TRY(amp_model_load_weights(model, opt, a.init_weights));
    /* After amp_initialize (Apex's order); a world of one needs no DDP. */
    if (world > 1)
        TRY(amp_ddp_create(model, opt, &(amp_ddp_opts){.comm = comm,
                                                       .allreduce_always_fp32 = a.allreduce_fp32,
                                                       .zero_stage = a.zero_stage},
                           &ddp));
    TRY(amp_get_options(opt, &amp_opts));
    /* A level that uses no half type (O0) names none, as amp_initialize's options block. */
    bool uses_half = amp_opts.cast_model_type == AMP_CAST_HALF || amp_opts.autocast == AMP_OPT_TRUE ||
                     amp_opts.cast_model_outputs == AMP_CAST_HALF;
    const char *half = !uses_half ? NULL : amp_opts.half_type == AMP_HALF_BF16 ? "bf16" : "fp16";
    fprintf(g_text, "amp-train: %s, %lld parameters, %s optimizer, lr %g, batch %lld, O%d%s%s, "
           "backend %s\n", a.model, (long long)amp_model_numel(model), a.optimizer, (double)a.lr,
           (long long)a.batch_size, a.opt_level, half ? " " : "", half ? half : "",
           amp_ctx_backend_name(ctx));
    if (world > 1)
        fprintf(g_text, "amp-train: %d processes (DDP, %d bucket(s)%s%s%s), %d thread(s) each, a "
               "global batch of %lld (%lld each)\n", world, amp_ddp_n_buckets(ddp),
               a.sync_bn ? ", SyncBatchNorm" : "", a.allreduce_fp32 ? ", f32 all-reduce" : "",
               amp_ddp_zero_stage(ddp) ? ", ZeRO-1: the optimizer sharded" : "", threads,
               (long long)(batch * world * a.accumulate), (long long)batch);

    int64_t steps = 0, samples = 0, saved_at = -1;
    uint64_t allocs_warm = 0, allocs_end = 0; /* system allocations after the first 3 steps, end */
    double train_seconds = 0, accuracy = 0, epoch_loss = 0, global_samples = 0;
    bool accuracy_known = false; /* the last epoch was evaluated (not --no-eval, not stopped) */
    int epochs_run = 0, first_epoch = 1;
    amp_checkpoint_opts ckpt = {.loader = loader, .keep = a.keep};
    char ckpt_path[4096], from[4096];
    bool resume = false;
    TRY(train_resume_source(&a, g_rank == 0, from, sizeof from, &resume));
    if (resume) {
        if (ddp) TRY(amp_ddp_checkpoint_load(ddp, from, &ckpt, &steps));
        else TRY(amp_checkpoint_load(from, model, opt, &ckpt, &steps));
        amp_loader_state ls;
        TRY(amp_loader_get_state(loader, &ls));
        first_epoch = (int)ls.epoch + 1;
        saved_at = steps;
        fprintf(g_text, "amp-train: resumed from %s at step %lld (epoch %d)\n", from,
                (long long)steps, first_epoch);
    }
    stop_signal_install();
    for (int epoch = first_epoch; epoch <= a.epochs && !(a.max_steps && steps >= a.max_steps) &&
                                  !g_stop;
         epoch++) {
        double t0 = now_seconds(), drawn_at = -PROGRESS_SECONDS;
        int64_t n_loss = 0, n_batches = amp_loader_n_batches(loader);
        const float zero = 0.0f;
        TRY(amp_tensor_copy_from_host(loss_sum, &zero, sizeof zero));
        amp_batch b;
        bool epoch_end = false;
        bool stop = false;
        while (!(a.max_steps && steps >= a.max_steps) && !stop && !epoch_end) {
            amp_tensor *loss = NULL;
            float loss_value = 0.0f;
            /* --accumulate K: K micro-batches, each loss divided by K, their gradients summed
             * locally (no_sync) and all-reduced with the last; an epoch's end cuts it short. */
            for (int64_t k = 0; k < a.accumulate; k++) {
                TRY(amp_loader_next(loader, &b));
                if (b.n == 0) {
                    epoch_end = true;
                    break;
                }
                bool last = k + 1 == a.accumulate || b.index + 1 == n_batches;
                if (ddp) TRY(amp_ddp_set_sync(ddp, last));
                amp_tensor *logits, *bx, *by;
                TRY(amp_stager_put(stager, &b, &bx, &by));
                TRY(amp_model_forward(model, bx, &logits));
                TRY(amp_cross_entropy(logits, by, &loss));
                if (a.accumulate > 1) TRY(amp_div_scalar(loss, (float)a.accumulate, &loss));
                TRY(amp_backward(loss));
                TRY(amp_accumulate(loss_sum, loss));
                samples += b.n;
                if (last) break;
            }
            if (!loss) break; /* the epoch ended before this step's first micro-batch */
            /* Whether the step was taken costs one 4-byte read: asked only when it is logged. */
            bool log_step = a.log_every && (steps + 1) % a.log_every == 0, stepped = true;
            TRY(amp_step(opt, log_step ? &stepped : NULL));
            /* The step's loss is read (the host waits for the step) only to print it, and
             * printed as the average of the ranks' losses. */
            double now = tty ? now_seconds() : 0.0;
            bool draw = tty && (now - drawn_at >= PROGRESS_SECONDS || b.index + 1 == n_batches);
            /* and whether to read the loss for rank 0's bar: on every rank (the bar shows their
             * average, and no rank waits for its device while the others wait in MPI) */
            TRY(stop_signal_agree(comm, &stop, &draw));
            if (log_step || draw) {
                TRY(amp_tensor_item(loss, &loss_value));
                double v = loss_value;
                TRY(amp_comm_allreduce_sum_f64(comm, &v, 1));
                loss_value = (float)(v / world);
            }
            TRY(amp_zero_grad(opt));
            n_loss++;
            steps++;
            if (log_step) TRY(log_step_line(opt, steps, loss_value, !stepped, a.json, tty));
            if (steps == 3) TRY(amp_ctx_system_allocs(ctx, &allocs_warm));
            if (draw && tty) progress(epoch, b.index, n_batches, loss_value);
            if (draw) drawn_at = now;
            if (a.checkpoint_dir && a.save_every && steps % a.save_every == 0) {
                TRY(ddp ? amp_ddp_checkpoint_save(ddp, a.checkpoint_dir, steps, &ckpt, NULL, 0)
                        : amp_checkpoint_save(a.checkpoint_dir, steps, model, opt, &ckpt, NULL, 0));
                saved_at = steps;
            }
        }
        /* A step cut short by the epoch's end still ran its backwards: the loader's end mark was
         * read by the inner loop, so the epoch is over either way. A stopped epoch (a signal) is
         * summed as far as it went, and not evaluated; it is saved below. */
        float sum = 0.0f; /* the read waits for the epoch's last step: timed with it */
        TRY(amp_tensor_item(loss_sum, &sum));
        /* Global figures: the loss summed over every rank's steps, and every rank's samples. */
        double totals[3] = {sum, (double)n_loss, (double)samples};
        TRY(amp_comm_allreduce_sum_f64(comm, totals, 3));
        train_seconds += now_seconds() - t0;
        if (tty) fprintf(g_text, "\n");
        bool evaluated = !a.no_eval && !g_stop;
        if (evaluated) TRY(evaluate(model, test, &accuracy));
        accuracy_known = evaluated;
        epoch_loss = totals[1] > 0 ? totals[0] / totals[1] : 0; /* a step: its micro-batches */
        global_samples = totals[2];
        epochs_run = epoch;
        char acc[64];
        if (evaluated) snprintf(acc, sizeof acc, "test accuracy %.2f %%", 100.0 * accuracy);
        else snprintf(acc, sizeof acc, "test accuracy skipped (%s)", g_stop ? "stopped" : "--no-eval");
        fprintf(g_text, "epoch %d%s: train loss %.9g, %s, %.1f samples/s\n", epoch,
                g_stop ? " (stopped by a signal)" : "", epoch_loss, acc,
                global_samples / train_seconds);
        fflush(g_text);
        if (g_stop) break;
    }
    if (a.checkpoint_dir && saved_at != steps) {
        TRY(ddp ? amp_ddp_checkpoint_save(ddp, a.checkpoint_dir, steps, &ckpt, ckpt_path,
                                          sizeof ckpt_path)
                : amp_checkpoint_save(a.checkpoint_dir, steps, model, opt, &ckpt, ckpt_path,
                                      sizeof ckpt_path));
        fprintf(g_text, "amp-train: saved %s%s\n", ckpt_path, g_stop ? " (stopped by a signal)" : "");
    }
    amp_scaler_state sc;
    TRY(amp_scaler_get_state(opt, 0, &sc));
    TRY(amp_ctx_system_allocs(ctx, &allocs_end));
    size_t peak_arena = 0, peak_backend = 0;
    amp_ctx_arena_bytes(ctx, &peak_arena);
    (void)amp_ctx_memory(ctx, NULL, &peak_backend);
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage); /* ru_maxrss: KiB on Linux */
    if (a.json) { /* f32 values as %.9g, doubles as %.17g: they read back to the same bits */
        char scale[32];
        if (amp_opts.loss_scale == AMP_LOSS_SCALE_DYNAMIC) snprintf(scale, sizeof scale, "\"dynamic\"");
        else snprintf(scale, sizeof scale, "%.9g", (double)amp_opts.loss_scale);
        char acc[32];
        if (accuracy_known) snprintf(acc, sizeof acc, "%.17g", accuracy);
        else snprintf(acc, sizeof acc, "null");
        printf("{\"model\": \"%s\", \"optimizer\": \"%s\", \"epochs\": %d, \"steps\": %lld, "
               "\"batch_size\": %lld, \"lr\": %.9g, \"seed\": %llu, \"train_loss\": %.17g, "
               "\"test_accuracy\": %s, \"samples_per_sec\": %.2f, \"opt_level\": \"O%d\", "
               "\"half_type\": \"%s\", \"loss_scale\": %s, \"final_loss_scale\": %.9g, "
               "\"skipped_steps\": %lld, \"peak_step_bytes\": %zu, \"peak_rss_mb\": %.1f, "
               "\"peak_backend_mb\": %.1f, \"skip_nonfinite\": %s, \"backend\": \"%s\", "
               "\"system_allocs_steady\": %lld, \"world_size\": %d, \"accumulate\": %lld, "
               "\"sync_bn\": %s, \"zero_stage\": %d, \"stopped\": %s}\n",
               a.model, a.optimizer, epochs_run, (long long)steps, (long long)a.batch_size,
               (double)a.lr, (unsigned long long)a.seed, epoch_loss, acc,
               train_seconds > 0 ? global_samples / train_seconds : 0.0, a.opt_level,
               half ? half : "none", scale, (double)sc.scale, (long long)sc.skipped_steps,
               peak_arena, (double)usage.ru_maxrss / 1024.0, (double)peak_backend / 1048576.0,
               amp_opts.skip_nonfinite == AMP_OPT_TRUE ? "true" : "false",
               amp_ctx_backend_name(ctx),
               steps > 3 ? (long long)(allocs_end - allocs_warm) : -1LL, world,
               (long long)a.accumulate, a.sync_bn ? "true" : "false", amp_ddp_zero_stage(ddp),
               g_stop ? "true" : "false");
    }
    exit_code = 0;
fail:
    if (exit_code && world_failed(comm)) amp_comm_abort(comm, exit_code); /* peers would wait */
    amp_ddp_free(ddp);
    amp_tensor_free(loss_sum);
    amp_stager_free(stager);
    amp_optimizer_free(opt);
    amp_model_free(model);
    amp_loader_free(loader);
    amp_dataset_free(train);
    amp_dataset_free(test);
    amp_ctx_free(ctx);
    amp_comm_free(comm);
    return exit_code;
}
