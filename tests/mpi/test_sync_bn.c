/* SyncBatchNorm under DDP against one process, run under `mpirun -np N` (N = 2, 3): the Apex
 * tutorial ConvNet with every BatchNorm2d converted to SyncBatchNorm, wrapped in DDP, each rank
 * training on its 64 samples of a global batch of 64 * N, must end where one process that trains
 * on the whole batch with plain batch norm ends (rank 0 trains that reference itself, in a second
 * context without DDP): weights and running statistics, SGD at O0, within 1e-5 relative after 2
 * steps at lr 0.002, where a planted 10 % gradient error must show above that bound; after 40
 * steps at lr 0.001, weights within 1e-4 and running statistics within 1e-3 (main() says why:
 * ReLU kinks make the runs part by more than rounding). The ranks must also hold bit-identical weights and
 * running statistics. A run with uneven batches (rank r takes 64 + 8 r samples) checks that the
 * count is all-reduced; and why the runs part faster than other last-bit changes (drift_rates:
 * one process started one ulp apart drifts as far). Without mpirun: a world of one.
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
            if (grad_error == 1.0f)
                CHECK_MSG(dw <= tol && db <= tol_stats, "%s: SyncBN + DDP differs from one "
                          "process: weights %g, running stats %g", name, dw, db);
            else
                CHECK_MSG(dw > tol, "%s: a planted gradient error of %g went unseen: weights "
                          "%g is within %g", name, grad_error - 1.0f, dw, tol);
        }
    }
    run_free(&d);
    if (g_rank == 0) run_free(&ref);
    free(x);
    free(y);
}

/* Moves every parameter of m by one ulp, up or down at random (a fixed LCG): the smallest
 * perturbation there is, what a last-bit difference of the global statistics becomes. */
static void nudge_one_ulp(amp_model *m, uint32_t seed) {
    uint32_t lcg = seed;
    for (int i = 0; i < amp_model_n_params(m); i++) {
        amp_tensor *p = amp_model_param(m, i);
        float *v = malloc((size_t)p->numel * sizeof *v);
        if (!v) return;
        CHECK_OK(amp_tensor_to_host(p, v, (size_t)p->numel * sizeof *v));
        for (int64_t k = 0; k < p->numel; k++) {
            lcg = lcg * 1664525u + 1013904223u;
            v[k] = nextafterf(v[k], lcg >> 31 ? INFINITY : -INFINITY);
        }
        CHECK_OK(amp_tensor_copy_from_host(p, v, (size_t)p->numel * sizeof *v));
        free(v);
    }
}

/* Why SyncBN + DDP drifts from one process faster than other last-bit changes (amp-train's
 * ConvNet at lr 0.01 was 2.4e-7 apart after 2 steps, 1.45e-4 after 10 and 5.3e-3 after 40,
 * where 1 against 2 threads stayed at 5e-8 after 10): it is the training, not the reduction.
 * Three runs against one process on the same batches, at lr 0.01: SyncBN + DDP over the ranks;
 * one process started from weights one ulp apart; one process nudged by one ulp before every
 * step. A one-ulp difference stays at an ulp (1e-7) until a ReLU input or a max-pool window's
 * runner-up sits within it of the kink and the step takes the other side; from then on the runs
 * part at the rate of the training itself, whatever started them. Measured on an AMD EPYC with
 * AVX-512, 2 and 3 ranks: the one-ulp runs stay at 1e-7 to 3e-7 until their first flip (between
 * steps 10 and 20 with 2 ranks' batches, 2 and 5 with 3), DDP flips earlier (its every step
 * differs from one process's by a few ulps, 5e-7 after one step: its statistics and averaged
 * gradients are summed in other orders, more chances at a kink), and at step 40 the three lie
 * within a factor of 2.3 of each other: DDP 3.1e-3 and 3.6e-3, one ulp apart 1.9e-3 and 2.6e-3,
 * one ulp every step 1.9e-3 and 1.6e-3. The test keeps that answer: after 40 steps the one-ulp
 * runs drift as far as DDP, within a factor of 8 either way, and far beyond rounding. */
static void drift_rates(int steps, float lr) {
    enum { N_MARKS = 6 };
    const int marks[N_MARKS] = {1, 2, 5, 10, 20, 40};
    float saved = g_lr;
    g_lr = lr;
    int g = PER_RANK * g_size;
    float *x = malloc((size_t)g * IMG * sizeof *x);
    int32_t *y = malloc((size_t)g * sizeof *y);
    run d, ref = {0}, ulp = {0}, each = {0};
    bool ok = run_make(&d, true, 100 + (uint64_t)g_rank, PER_RANK);
    if (ok && g_rank == 0)
        ok = run_make(&ref, false, 100, g) && run_make(&ulp, false, 100, g) &&
             run_make(&each, false, 100, g);
    if (ok && g_rank == 0) nudge_one_ulp(ulp.m, 12345);
    double ddp_at[N_MARKS] = {0}, ulp_at[N_MARKS] = {0}, each_at[N_MARKS] = {0}, mx;
    for (int s = 1, k = 0; ok && s <= steps; s++) {
        make_batch(s, g, x, y);
        ok = run_step(&d, x, y, PER_RANK * g_rank, 1.0f);
        if (ok && g_rank == 0) {
            nudge_one_ulp(each.m, 777u + (uint32_t)s);
            ok = run_step(&ref, x, y, 0, 1.0f) && run_step(&ulp, x, y, 0, 1.0f) &&
                 run_step(&each, x, y, 0, 1.0f);
        }
        if (ok && g_rank == 0 && k < N_MARKS && s == marks[k]) {
            ddp_at[k] = rel_diff(d.m, ref.m, false, &mx);
            ulp_at[k] = rel_diff(ulp.m, ref.m, false, &mx);
            each_at[k] = rel_diff(each.m, ref.m, false, &mx);
            printf("drift at step %2d, lr %g: SyncBN + DDP over %d ranks %.3g, one ulp apart %.3g, "
                   "one ulp every step %.3g\n", s, (double)lr, g_size, ddp_at[k], ulp_at[k],
                   each_at[k]);
            k++;
        }
    }
    CHECK_MSG(ok, "drift: training failed on rank %d: %s", g_rank, amp_last_error());
    if (ok && g_rank == 0 && steps >= marks[N_MARKS - 1]) {
        double dd = ddp_at[N_MARKS - 1], du = ulp_at[N_MARKS - 1], de = each_at[N_MARKS - 1];
        CHECK_MSG(ulp_at[0] < 3e-7, "drift: one ulp apart is %g after a step, not an ulp", ulp_at[0]);
        CHECK_MSG(dd > 1e-4 && du > 1e-4 && de > 1e-4, "drift: after %d steps DDP %g, one ulp "
                  "%g, every step %g: not the amplified drift the test is about", steps, dd, du, de);
        CHECK_MSG(du < 8 * dd && dd < 8 * du && de < 8 * dd && dd < 8 * de,
                  "drift: after %d steps DDP is %g from one process, one ulp apart %g, one ulp "
                  "every step %g: not one rate", steps, dd, du, de);
    }
    run_free(&d);
    if (g_rank == 0) {
        run_free(&ref);
        run_free(&ulp);
        run_free(&each);
    }
    free(x);
    free(y);
    g_lr = saved;
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
    /* 40 steps at lr 0.001: flips accumulate, and training carries them on (measured: weights
     * 5e-6 to 7.1e-5 and running statistics, which take each batch's statistics with momentum
     * 0.1 and carry a flip further, 2.6e-5 to 2.8e-4, over 2 and 3 ranks on AMD EPYC and Intel
     * Xeon CPUs), bounded at 1e-4 and 1e-3. */
    int steps = getenv("SYNCBN_STEPS") ? atoi(getenv("SYNCBN_STEPS")) : 40;
    if (!getenv("SYNCBN_LR")) g_lr = 0.001f;
    syncbn_vs_single("ConvNet SyncBN O0, 40 steps", steps, false, 1.0f, 1e-4, 1e-3);
    /* Over several ranks on the CPU: the drift against one process is the training's (the
     * short runs of the CUDA build leave it out). */
    if (g_size > 1 && g_device == AMP_DEVICE_CPU && !getenv("SYNCBN_STEPS")) drift_rates(40, 0.01f);
    return mpi_test_finish("test_sync_bn");
}
