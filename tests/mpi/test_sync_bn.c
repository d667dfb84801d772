/* SyncBatchNorm under DDP against one process, run under `mpirun -np N` (N = 2, 3): the Apex
 * tutorial ConvNet with every BatchNorm2d converted to SyncBatchNorm, wrapped in DDP, each rank
 * training on its 64 samples of a global batch of 64 * N, must end where one process that trains
 * on the whole batch with plain batch norm ends (rank 0 trains that reference itself, in a second
 * context without DDP): weights and running statistics, SGD at O0, within 1e-5 relative after 2
 * steps at lr 0.002, where a planted 10 % gradient error must show above that bound. After 40
 * steps the distance is a figure, not a bound (main() says why: ReLU kinks make the runs part by
 * more than rounding, how soon depends on the CPU). The ranks must hold bit-identical weights
 * and running statistics after either. A run with uneven batches (rank r takes 64 + 8 r samples)
 * checks that the count is all-reduced. Without mpirun: a world of one.
 *
 * The data are random (a fixed LCG), so the test needs no data set. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test_util.h"

static float g_lr;

static void make_batch(int step, int g, float *x, int32_t *y) { make_batch_seeded(4242u, step, g, x, y); }

typedef struct run {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_ddp *ddp;
    amp_comm *comm;
    amp_tensor *x, *y, *w;
    int batch;
} run;

/* ddp: SyncBN + DDP over the world; else plain batch norm in one process. */
static bool run_make(run *r, bool ddp, uint64_t seed, int batch) {
    *r = (run){.batch = batch};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = g_device, .seed = seed, .n_threads = 1},
                            &r->ctx));
    if (!r->ctx) return false;
    CHECK_OK(amp_model_convnet_mnist(r->ctx, &r->m));
    CHECK_OK(amp_sgd_create(r->m, &(amp_sgd_opts){.lr = g_lr, .momentum = 0.9f}, &r->opt));
    if (!r->opt) return false;
    amp_options o = {.opt_level = AMP_O0, .quiet = true};
    CHECK_OK(amp_initialize_ex(r->m, r->opt, &o));
    if (ddp) {
        CHECK_OK(amp_comm_create(&r->comm));
        CHECK_OK(amp_model_convert_sync_batchnorm(r->m, r->comm));
        amp_status s = amp_ddp_create(r->m, r->opt, &(amp_ddp_opts){.comm = r->comm}, &r->ddp);
        CHECK_MSG(s == AMP_OK, "amp_ddp_create: %s", amp_last_error());
        if (s != AMP_OK) return false;
    }
    CHECK_OK(amp_tensor_create(r->ctx, AMP_F32, 4, (int64_t[]){batch, 1, 28, 28}, &r->x));
    CHECK_OK(amp_tensor_create(r->ctx, AMP_I32, 1, (int64_t[]){batch}, &r->y));
    return r->x && r->y;
}

static void run_free(run *r) {
    amp_tensor_free(r->x);
    amp_tensor_free(r->y);
    amp_tensor_free(r->w);
    amp_ddp_free(r->ddp);
    amp_optimizer_free(r->opt);
    amp_model_free(r->m);
    amp_ctx_free(r->ctx);
    amp_comm_free(r->comm);
}

/* Forward, backward and SGD step on samples [first, first + batch) of the global batch. The
 * loss is the mean over this rank's samples; weight_loss scales it so that the ranks' losses add
 * up to the global batch's mean when the batches are uneven (DDP averages over the ranks). */
static bool run_step(run *r, const float *x, const int32_t *y, int first, float weight_loss) {
    CHECK_OK(amp_tensor_copy_from_host(r->x, x + (size_t)first * IMG,
                                       (size_t)r->batch * IMG * sizeof(float)));
    CHECK_OK(amp_tensor_copy_from_host(r->y, y + first, (size_t)r->batch * sizeof(int32_t)));
    amp_tensor *logits = NULL, *loss = NULL;
    CHECK_OK(amp_model_forward(r->m, r->x, &logits));
    if (logits) CHECK_OK(amp_cross_entropy(logits, r->y, &loss));
    if (loss && weight_loss != 1.0f) { /* w lives until the backward has run (mul saves it) */
        if (!r->w) CHECK_OK(amp_tensor_create(r->ctx, AMP_F32, 1, (int64_t[]){1}, &r->w));
        if (r->w) CHECK_OK(amp_tensor_copy_from_host(r->w, &weight_loss, sizeof weight_loss));
        amp_tensor *scaled = NULL;
        if (r->w) CHECK_OK(amp_mul(loss, r->w, &scaled));
        loss = scaled;
    }
    if (!loss) return false;
    amp_status s = amp_backward(loss);
    CHECK_MSG(s == AMP_OK, "amp_backward: %s", amp_last_error());
    if (s != AMP_OK) return false;
    s = amp_step(r->opt, NULL);
    CHECK_MSG(s == AMP_OK, "amp_step: %s", amp_last_error());
    CHECK_OK(amp_zero_grad(r->opt));
    return s == AMP_OK;
}

/* uneven: rank r takes 64 + 8 r samples (the global batch is their sum). grad_error scales the
 * DDP run's loss (1: none): a control that plants a gradient error and wants the difference
 * ABOVE the tolerances, so the check is shown able to fail at the learning rate it runs at. */
static void syncbn_vs_single(const char *name, int steps, bool uneven, float grad_error,
                             double tol, double tol_stats) {
    int first = 0, g = 0;
    for (int r = 0; r < g_size; r++) {
        int b = PER_RANK + (uneven ? 8 * r : 0);
        if (r < g_rank) first += b;
        g += b;
    }
    int mine = PER_RANK + (uneven ? 8 * g_rank : 0);
    /* DDP averages the ranks' gradients; each rank's loss is its mean, so weight it by
     * world * mine / g to make the average the global batch's mean gradient. */
    float weight = (uneven ? (float)g_size * (float)mine / (float)g : 1.0f) * grad_error;
    float *x = malloc((size_t)g * IMG * sizeof *x);
    int32_t *y = malloc((size_t)g * sizeof *y);
    run d, ref = {0};
    bool ok = run_make(&d, true, 100 + (uint64_t)g_rank, mine);
    if (ok && g_rank == 0) ok = run_make(&ref, false, 100, g);
    for (int s = 0; ok && s < steps; s++) {
        make_batch(s, g, x, y);
        ok = run_step(&d, x, y, first, weight);
        if (ok && g_rank == 0) ok = run_step(&ref, x, y, 0, 1.0f);
    }
    CHECK_MSG(ok, "%s: training failed on rank %d: %s", name, g_rank, amp_last_error());
    if (ok) {
        check_same_on_all_ranks(d.m, false, name);
        check_same_on_all_ranks(d.m, true, name);
        if (g_rank == 0) {
            double mw, mb, dw = rel_diff(d.m, ref.m, false, &mw), db = rel_diff(d.m, ref.m, true, &mb);
            printf("%s: %d ranks, %d steps: weights ||w - w_single|| / ||w_single|| = %.3g "
                   "(largest element difference %.3g of the largest), running stats %.3g (%.3g); "
                   "tolerances %.0e, %.0e\n", name, g_size, steps, dw, mw, db, mb, tol, tol_stats);
            if (grad_error == 1.0f && tol > 0)
                CHECK_MSG(dw <= tol && db <= tol_stats, "%s: SyncBN + DDP differs from one "
                          "process: weights %g, running stats %g", name, dw, db);
            else if (grad_error != 1.0f)
                CHECK_MSG(dw > tol, "%s: a planted gradient error of %g went unseen: weights "
                          "%g is within %g", name, grad_error - 1.0f, dw, tol);
        }
    }
    run_free(&d);
    if (g_rank == 0) run_free(&ref);
    free(x);
    free(y);
}

int main(int argc, char **argv) {
    mpi_test_init(&argc, &argv);

    /* A ReLU input within rounding of 0 inside a 2x2 max-pool window of zeros routes its
     * gradient or not depending on the last bit, and DDP's statistics and averaged gradients
     * differ from one process's in the last bits (the division by 3 is not exact in f32; each
     * rank's sums are shorter). With a batch norm's outputs around N(0, 1) at initialisation, a
     * few of the millions of ReLU inputs per step lie within rounding of 0, so such flips come
     * even in the first step, and each moves the weights by an amount proportional to the
     * learning rate (measured, Intel Xeon with AVX-512 and AMX: 1.9e-5 after one step at lr 0.05
     * with 3 ranks, 8.5e-6 after two at lr 0.01, 3.7e-6 at lr 0.005; without a flip the runs
     * agree to 2e-8). The short runs therefore train at lr 0.002, where flips stay near 1e-6
     * and a planted 10 % gradient error must still show above the 1e-5 bound. */
    g_lr = getenv("SYNCBN_LR") ? (float)atof(getenv("SYNCBN_LR")) : 0.002f;
    syncbn_vs_single("ConvNet SyncBN O0, 2 steps", 2, false, 1.0f, 1e-5, 1e-5);
    syncbn_vs_single("ConvNet SyncBN O0, uneven batches, 2 steps", 2, true, 1.0f, 1e-5, 1e-5);
    syncbn_vs_single("control: a 10 % gradient error, 2 steps", 2, true, 1.1f, 1e-5, 1e-5);
    /* 40 steps at lr 0.001: flips accumulate, and training carries them on, at a rate that is
     * the CPU's and the data's, not the code's (bench/results/2026-12-02.md, "SyncBN against one
     * process": an AVX2-only EPYC flips at step 1 where AVX-512 CPUs flip between steps 2 and
     * 20). So the long run asserts what DDP guarantees at any length, bit-identical ranks, and
     * prints its distance from one process as a figure (tol 0: not compared). */
    int steps = getenv("SYNCBN_STEPS") ? atoi(getenv("SYNCBN_STEPS")) : 40;
    if (!getenv("SYNCBN_LR")) g_lr = 0.001f;
    syncbn_vs_single("ConvNet SyncBN O0, 40 steps", steps, false, 1.0f, 0, 0);
    return mpi_test_finish("test_sync_bn");
}
