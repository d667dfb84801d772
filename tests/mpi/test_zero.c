/* ZeRO stage 1 against DDP, run under `mpirun -np N` (N = 2, 3; 3 gives uneven shards): the
 * same training twice on every rank, once under DDP (zero_stage 0) and once with the optimizer
 * sharded (zero_stage 1), from the same seeds on the same per-rank batches. After the steps:
 *  - every weight, every loss, every clipping norm, every step's taken-or-skipped and the loss
 *    scaler's state are the same bits as DDP's, and each rank's master and state pieces equal
 *    those elements of DDP's whole ones. The gradients are all-reduced as DDP's are and SGD and
 *    Adam update each element from that element alone, so the step is the same computation,
 *    element for element. The clipping norm is the one sum in another order (each rank's
 *    pieces, then the ranks): both are f64 sums rounded once to f32 (the shards' carried to
 *    2^-48 by sum_squares_multi's remainder), which differ only where an f64 total falls within
 *    about 2^-48 of an f32 rounding boundary; a ConvNet's 20 steps magnify one such ulp of the
 *    coefficient to 1e-4 of the weights, so no looser bound than bits would mean anything;
 *  - every rank holds the same weights, and the state bytes over all ranks are DDP's one copy
 *    (plus at most a padding unit per piece).
 * The same with the gradients reduce-scattered (zero_reduce_scatter): bits at 2 ranks, where
 * the sum of two has one order; at 3 the difference from DDP is printed (MPI fixes no order of
 * a reduce-scatter's additions against its all-reduce's), and the rest is asserted as above.
 * Models: the MLP, the ConvNet with SyncBatchNorm and a GPT whose parameter count divides by
 * neither 2 nor 3; O0, O1-bf16 and O2-fp16 with an overflow forced on one rank (that step is
 * skipped everywhere). Misuse is refused with the reason. ZERO_STEPS sets the steps (20).
 * `test_zero kill|hang`: a rank lost before the all-gather (tests/mpi/fault_test.sh). */
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp/models/gpt.h"
#include "mpi_test_util.h"
#include "optim/optimizer_internal.h"

#define MAX_STEPS 40
#define GPT_T 16
#define GPT_B 4

static int g_steps = 20;

typedef enum { MODEL_MLP, MODEL_CONVNET, MODEL_GPT } model_kind;

typedef struct cfg {
    const char *name;
    model_kind model;
    amp_opt_level level;
    amp_half_type half;
    bool adam;
    float clip;     /* > 0: amp_clip_grad_norm every step */
    int overflow;   /* > 0: the last rank's loss times 1e30 at this step (f16: inf gradients) */
    bool rs;        /* ZeRO's gradients reduce-scattered (zero_reduce_scatter) */
} cfg;

typedef struct run {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_ddp *ddp;
    amp_comm *comm;
    amp_tensor *x, *y;
    float loss[MAX_STEPS], norm[MAX_STEPS];
    bool stepped[MAX_STEPS];
} run;

static bool run_make(run *r, const cfg *c, int zero_stage) {
    *r = (run){0};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = g_device, .seed = 11u + (uint64_t)g_rank,
                                            .n_threads = 1}, &r->ctx));
    if (!r->ctx) return false;
    if (c->model == MODEL_MLP) CHECK_OK(amp_model_mlp_mnist(r->ctx, &r->m));
    if (c->model == MODEL_CONVNET) CHECK_OK(amp_model_convnet_mnist(r->ctx, &r->m));
    if (c->model == MODEL_GPT)
        CHECK_OK(amp_gpt_create(r->ctx, &(amp_gpt_config){.n_layer = 3, .n_head = 5, .n_embd = 35,
                                                          .block_size = GPT_T, .vocab_size = 61,
                                                          .dropout = 0.1f}, &r->m));
    if (!r->m) return false;
    if (c->adam)
        CHECK_OK(amp_adam_create(r->m, &(amp_adam_opts){.lr = 3e-3f, .weight_decay = 0.1f,
                                                        .decoupled = true}, &r->opt));
    else CHECK_OK(amp_sgd_create(r->m, &(amp_sgd_opts){.lr = 0.01f, .momentum = 0.9f}, &r->opt));
    if (!r->opt) return false;
    amp_options o = {.opt_level = c->level, .half_type = c->half, .quiet = true};
    CHECK_OK(amp_initialize_ex(r->m, r->opt, &o));
    CHECK_OK(amp_comm_create(&r->comm));
    if (c->model == MODEL_CONVNET) CHECK_OK(amp_model_convert_sync_batchnorm(r->m, r->comm));
    amp_status s = amp_ddp_create(r->m, r->opt, &(amp_ddp_opts){
                                      .comm = r->comm, .zero_stage = zero_stage,
                                      .zero_reduce_scatter = zero_stage && c->rs}, &r->ddp);
    CHECK_MSG(s == AMP_OK, "amp_ddp_create: %s", amp_last_error());
    if (s != AMP_OK) return false;
    if (c->model == MODEL_GPT) {
        CHECK_OK(amp_tensor_create(r->ctx, AMP_I32, 2, (int64_t[]){GPT_B, GPT_T}, &r->x));
        CHECK_OK(amp_tensor_create(r->ctx, AMP_I32, 2, (int64_t[]){GPT_B, GPT_T}, &r->y));
    } else {
        CHECK_OK(amp_tensor_create(r->ctx, AMP_F32, 4, (int64_t[]){PER_RANK, 1, 28, 28}, &r->x));
        CHECK_OK(amp_tensor_create(r->ctx, AMP_I32, 1, (int64_t[]){PER_RANK}, &r->y));
    }
    return r->x && r->y;
}

static void run_free(run *r) {
    amp_tensor_free(r->x);
    amp_tensor_free(r->y);
    amp_ddp_free(r->ddp);
    amp_optimizer_free(r->opt);
    amp_model_free(r->m);
    amp_ctx_free(r->ctx);
    amp_comm_free(r->comm);
}

/* This rank's batch of step `step`: its slice of an MNIST-shaped global batch, or tokens. */
static bool load_batch(run *r, const cfg *c, int step) {
    if (c->model == MODEL_GPT) {
        int32_t idx[GPT_B * (GPT_T + 1)];
        uint32_t s = 977u * (uint32_t)step + 131u * (uint32_t)g_rank + 5u;
        for (int i = 0; i < GPT_B * (GPT_T + 1); i++) {
            s = s * 1664525u + 1013904223u;
            idx[i] = (int32_t)((s >> 16) % 61);
        }
        int32_t in[GPT_B * GPT_T], tg[GPT_B * GPT_T];
        for (int b = 0; b < GPT_B; b++)
            for (int t = 0; t < GPT_T; t++) {
                in[b * GPT_T + t] = idx[b * (GPT_T + 1) + t];
                tg[b * GPT_T + t] = idx[b * (GPT_T + 1) + t + 1];
            }
        CHECK_OK(amp_tensor_copy_from_host(r->x, in, sizeof in));
        CHECK_OK(amp_tensor_copy_from_host(r->y, tg, sizeof tg));
        return true;
    }
    int g = PER_RANK * g_size;
    float *x = malloc((size_t)g * IMG * sizeof *x);
    int32_t *y = malloc((size_t)g * sizeof *y);
    if (!x || !y) return false;
    make_batch_seeded(2718u, step, g, x, y);
    CHECK_OK(amp_tensor_copy_from_host(r->x, x + (size_t)g_rank * PER_RANK * IMG,
                                       (size_t)PER_RANK * IMG * sizeof(float)));
    CHECK_OK(amp_tensor_copy_from_host(r->y, y + g_rank * PER_RANK, PER_RANK * sizeof(int32_t)));
    free(x);
    free(y);
    return true;
}

static bool train(run *r, const cfg *c) {
    for (int step = 0; step < g_steps; step++) {
        if (!load_batch(r, c, step)) return false;
        amp_tensor *out = NULL, *loss = NULL;
        if (c->model == MODEL_GPT) {
            CHECK_OK(amp_gpt_loss(r->m, r->x, r->y, &loss));
        } else {
            CHECK_OK(amp_model_forward(r->m, r->x, &out));
            if (out) CHECK_OK(amp_cross_entropy(out, r->y, &loss));
        }
        if (!loss) return false;
        CHECK_OK(amp_tensor_to_host(loss, &r->loss[step], sizeof(float)));
        if (step == c->overflow && g_rank == g_size - 1) {
            amp_tensor *big = NULL;
            CHECK_OK(amp_mul_scalar(loss, 1e30f, &big));
            loss = big;
        }
        amp_status s = amp_backward(loss);
        CHECK_MSG(s == AMP_OK, "%s: amp_backward: %s", c->name, amp_last_error());
        if (s == AMP_OK && c->clip > 0) {
            s = amp_clip_grad_norm(r->opt, c->clip, &r->norm[step]);
            CHECK_MSG(s == AMP_OK, "%s: amp_clip_grad_norm: %s", c->name, amp_last_error());
        }
        if (s == AMP_OK) {
            s = amp_step(r->opt, &r->stepped[step]);
            CHECK_MSG(s == AMP_OK, "%s: amp_step: %s", c->name, amp_last_error());
        }
        CHECK_OK(amp_zero_grad(r->opt));
        if (s != AMP_OK) return false;
    }
    return true;
}

/* A tensor's f32 values on the host (f32 only: masters and state). */
static float *host_f32(const amp_tensor *t) {
    float *v = malloc(amp_tensor_nbytes(t));
    if (v) CHECK_OK(amp_tensor_to_host(t, v, amp_tensor_nbytes(t)));
    return v;
}

/* ||a - b|| / ||b|| over n values, 0 for equal bits. */
static double rel_err(const float *a, const float *b, int64_t n) {
    if (!memcmp(a, b, (size_t)n * sizeof *a)) return 0;
    double d2 = 0, b2 = 0;
    for (int64_t i = 0; i < n; i++) {
        d2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        b2 += (double)b[i] * b[i];
    }
    return b2 > 0 ? sqrt(d2 / b2) : INFINITY;
}

/* The worst relative error of zero's pieces of the masters and of the state against the same
 * elements of ddp's whole ones (0: the same bits). */
static double pieces_err(const run *ddp, const run *zero) {
    const amp_optimizer *a = ddp->opt, *z = zero->opt;
    double worst = 0;
    for (int i = 0; i < a->n_params; i++) {
        int64_t lo = amp_optimizer_piece_lo(z, i), n = amp_optimizer_piece_numel(z, i);
        if (!n) continue;
        for (int j = -1; j < a->n_state; j++) {
            const amp_tensor *whole = j < 0 ? amp_optimizer_master(a, i)
                                            : a->state[i * a->n_state + j];
            const amp_tensor *piece = j < 0 ? amp_optimizer_master(z, i)
                                            : z->state[i * z->n_state + j];
            if (!whole) continue; /* no masters below O2 */
            CHECK_MSG(piece && piece->numel == n, "parameter %d's piece has %lld elements, want "
                      "%lld", i, piece ? (long long)piece->numel : -1LL, (long long)n);
            if (!piece || piece->numel != n) return INFINITY;
            float *w = host_f32(whole), *p = host_f32(piece);
            double e = w && p ? rel_err(p, w + lo, n) : INFINITY;
            worst = fmax(worst, e);
            free(w);
            free(p);
        }
    }
    return worst;
}

/* The worst relative error over the parameters, tensor by tensor (0: the same bits). */
static double params_err(const run *a, const run *b) {
    double worst = 0;
    for (int i = 0; i < amp_model_n_params(a->m); i++) {
        const amp_tensor *pa = amp_model_param(a->m, i), *pb = amp_model_param(b->m, i);
        size_t nb = amp_tensor_nbytes(pa);
        void *ha = malloc(nb), *hb = malloc(nb);
        CHECK_OK(amp_tensor_to_host(pa, ha, nb));
        CHECK_OK(amp_tensor_to_host(pb, hb, nb));
        if (memcmp(ha, hb, nb)) {
            float *fa = malloc((size_t)pa->numel * sizeof *fa);
            float *fb = malloc((size_t)pa->numel * sizeof *fb);
            for (int64_t k = 0; k < pa->numel; k++) {
                uint16_t x = ((uint16_t *)ha)[k], y = ((uint16_t *)hb)[k];
                fa[k] = pa->dtype == AMP_F32 ? ((float *)ha)[k]
                        : pa->dtype == AMP_F16 ? amp_f16_bits_to_f32(x) : amp_bf16_bits_to_f32(x);
                fb[k] = pa->dtype == AMP_F32 ? ((float *)hb)[k]
                        : pa->dtype == AMP_F16 ? amp_f16_bits_to_f32(y) : amp_bf16_bits_to_f32(y);
            }
            worst = fmax(worst, fmax(rel_err(fa, fb, pa->numel), 1e-300));
            free(fa);
            free(fb);
        }
        free(ha);
        free(hb);
    }
    return worst;
}

/* Optimizer state and master bytes in the ledger, now. */
static double state_bytes(const run *r) {
    amp_mem_usage now;
    CHECK_OK(amp_ctx_memory_usage(r->ctx, &now, NULL));
    return (double)now.bytes[AMP_MEM_MASTERS] + (double)now.bytes[AMP_MEM_OPTIM_STATE];
}

static void check_config(const cfg *c) {
    run d, z;
    bool ok = run_make(&d, c, 0) && train(&d, c);
    ok = run_make(&z, c, 1) && train(&z, c) && ok;
    CHECK_MSG(ok, "%s: the runs did not complete", c->name);
    if (ok) {
        CHECK_MSG(amp_ddp_zero_stage(z.ddp) == (g_size > 1), "%s: zero stage %d", c->name,
                  amp_ddp_zero_stage(z.ddp));
        int loss_diff = 0, norm_diff = 0, skip_diff = 0, skipped = 0;
        for (int s = 0; s < g_steps; s++) {
            loss_diff += memcmp(&d.loss[s], &z.loss[s], sizeof(float)) != 0;
            norm_diff += memcmp(&d.norm[s], &z.norm[s], sizeof(float)) != 0;
            skip_diff += d.stepped[s] != z.stepped[s];
            skipped += !z.stepped[s];
        }
        /* A reduce-scatter adds two ranks' values as the all-reduce does (a + b = b + a), but
         * from three on MPI promises no order, so DDP's bits there are a figure. */
        bool bits = !(c->rs && g_size > 2);
        CHECK_MSG(!bits || (loss_diff == 0 && norm_diff == 0), "%s: %d losses and %d clipping "
                  "norms of %d differ from DDP's", c->name, loss_diff, norm_diff, g_steps);
        CHECK_MSG(!bits || skip_diff == 0, "%s: %d steps skipped where DDP's were not, or the "
                  "reverse", c->name, skip_diff);
        /* f16's first scales overflow by themselves too (2^16 to start): DDP's skips are the
         * reference, and the forced one must be among them. */
        if (c->overflow > 0)
            CHECK_MSG(!z.stepped[c->overflow], "%s: the overflowing step %d was taken (%d "
                      "skipped)", c->name, c->overflow, skipped);
        amp_scaler_state sd, sz;
        CHECK_OK(amp_scaler_get_state(d.opt, 0, &sd));
        CHECK_OK(amp_scaler_get_state(z.opt, 0, &sz));
        CHECK_MSG(!bits || (sd.scale == sz.scale && sd.growth_tracker == sz.growth_tracker),
                  "%s: scaler %g/%d, DDP's %g/%d", c->name, (double)sz.scale,
                  (int)sz.growth_tracker, (double)sd.scale, (int)sd.growth_tracker);
        double pe = params_err(&z, &d), se = pieces_err(&d, &z);
        CHECK_MSG(!bits || pe == 0, "%s: weights %.3g relative from DDP's", c->name, pe);
        CHECK_MSG(!bits || se == 0, "%s: masters/state pieces %.3g relative from DDP's", c->name,
                  se);
        check_same_on_all_ranks(z.m, false, c->name);
        int64_t total = 0;
        for (int i = 0; i < amp_model_n_params(z.m); i++) total += amp_model_param(z.m, i)->numel;
        if (c->model == MODEL_GPT) /* the model whose shards cannot be equal */
            CHECK_MSG(total % 2 && total % 3, "the GPT has %lld parameters", (long long)total);
        double mine = state_bytes(&z), all = 0, whole = state_bytes(&d);
        MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        /* Each piece pads to 16 floats, and every rank keeps the step counts of all parameters. */
        double slack = (double)g_size * amp_model_n_params(z.m) * (64.0 * (z.opt->n_state + 2) + 8);
        CHECK_MSG(g_size == 1 || (all <= whole + slack && mine < whole),
                  "%s: state and masters %.0f bytes here, %.0f over the ranks, DDP's %.0f",
                  c->name, mine, all, whole);
        char match[64] = "bit-exact";
        if (pe != 0 || se != 0 || loss_diff)
            snprintf(match, sizeof match, "weights %.2g from DDP's", pe);
        if (g_rank == 0)
            printf("  %-30s %s; masters and state %.0f -> %.0f bytes on rank 0\n", c->name,
                   match, whole, mine);
    }
    run_free(&d);
    run_free(&z);
}

/* Steps [first, last) of c, saving after step save_at - 1 into dir (save_at < 0: no save). */
static bool train_range(run *r, const cfg *c, int first, int last, int save_at, const char *dir,
                        char *saved, size_t saved_size) {
    for (int step = first; step <= last; step++) {
        if (step == save_at) {
            amp_status s = amp_ddp_checkpoint_save(r->ddp, dir, step, NULL, saved, saved_size);
            CHECK_MSG(s == AMP_OK, "%s: amp_ddp_checkpoint_save: %s", c->name, amp_last_error());
            if (s != AMP_OK) return false;
        }
        if (step == last) break;
        bool ok = load_batch(r, c, step);
        amp_tensor *out = NULL, *loss = NULL;
        if (ok) CHECK_OK(amp_model_forward(r->m, r->x, &out));
        if (out) CHECK_OK(amp_cross_entropy(out, r->y, &loss));
        if (loss) CHECK_OK(amp_backward(loss));
        if (loss) CHECK_OK(amp_step(r->opt, &r->stepped[step]));
        CHECK_OK(amp_zero_grad(r->opt));
        if (!loss || !ok) return false;
    }
    return true;
}

/* Whether two files hold the same bytes. */
static bool same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        same = x == y;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* Checkpoints under ZeRO hold what DDP's hold: the same files, byte for byte, after the same 3
 * steps; either resumes under the other, and 3 more steps give the uninterrupted ZeRO run's
 * weights and pieces bit for bit. */
static void resume(void) {
    cfg c = {.name = "resume", .model = MODEL_MLP, .level = AMP_O2, .half = AMP_HALF_BF16,
             .adam = true};
    char dir[600] = "";
    if (g_rank == 0) {
        const char *tmp = getenv("AMP_TEST_TMP");
        snprintf(dir, sizeof dir, "%s/zero_resume.%d", tmp ? tmp : "/tmp", (int)getpid());
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    char ddp_dir[640], zero_dir[640], ddp_ckpt[1024] = "", zero_ckpt[1024] = "";
    snprintf(ddp_dir, sizeof ddp_dir, "%s/ddp", dir);
    snprintf(zero_dir, sizeof zero_dir, "%s/zero", dir);
    run ddp, zero, back_zero, back_ddp;
    /* The uninterrupted ZeRO run saves after 3 steps; so does the DDP run. */
    bool ok = run_make(&zero, &c, 1) && train_range(&zero, &c, 0, 6, 3, zero_dir, zero_ckpt,
                                                     sizeof zero_ckpt);
    ok = run_make(&ddp, &c, 0) && train_range(&ddp, &c, 0, 3, 3, ddp_dir, ddp_ckpt,
                                              sizeof ddp_ckpt) && ok;
    if (ok && g_rank == 0) {
        const char *files[] = {"model.safetensors", "state.safetensors"};
        for (int f = 0; f < 2; f++) {
            char a[1200], b[1200];
            snprintf(a, sizeof a, "%s/%s", ddp_ckpt, files[f]);
            snprintf(b, sizeof b, "%s/%s", zero_ckpt, files[f]);
            CHECK_MSG(same_file(a, b), "ZeRO's %s differs from DDP's (%s, %s)", files[f], b, a);
        }
    }
    /* ZeRO's checkpoint resumed under DDP, and DDP's under ZeRO. */
    ok = run_make(&back_ddp, &c, 0) && ok;
    ok = run_make(&back_zero, &c, 1) && ok;
    if (ok) {
        amp_status s = amp_ddp_checkpoint_load(back_ddp.ddp, zero_ckpt, NULL, NULL);
        CHECK_MSG(s == AMP_OK, "DDP loading ZeRO's checkpoint: %s", amp_last_error());
        s = amp_ddp_checkpoint_load(back_zero.ddp, ddp_ckpt, NULL, NULL);
        CHECK_MSG(s == AMP_OK, "ZeRO loading DDP's checkpoint: %s", amp_last_error());
        ok = train_range(&back_ddp, &c, 3, 6, -1, NULL, NULL, 0) &&
             train_range(&back_zero, &c, 3, 6, -1, NULL, NULL, 0);
    }
    if (ok) {
        CHECK_MSG(params_err(&back_ddp, &zero) == 0, "DDP resumed from ZeRO's checkpoint: "
                  "weights differ from the uninterrupted run's");
        CHECK_MSG(params_err(&back_zero, &zero) == 0, "ZeRO resumed from DDP's checkpoint: "
                  "weights differ from the uninterrupted run's");
        CHECK_MSG(pieces_err(&back_ddp, &zero) == 0 && pieces_err(&back_ddp, &back_zero) == 0,
                  "the resumed runs' masters and state differ from the uninterrupted run's");
    }
    run_free(&zero);
    run_free(&ddp);
    run_free(&back_zero);
    run_free(&back_ddp);
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0);
    }
}

/* What ZeRO refuses, each with the reason, and nothing changed. */
static void misuse(void) {
    cfg c = {.name = "misuse", .model = MODEL_MLP, .level = AMP_O2, .half = AMP_HALF_BF16,
             .adam = true};
    run r;
    if (!run_make(&r, &c, 1)) return;
    amp_ddp *other = NULL;
    amp_ddp_free(r.ddp);
    r.ddp = NULL;
    /* Once its DDP is gone, a sharded optimizer's step is refused. */
    if (g_size > 1) {
        CHECK(load_batch(&r, &c, 0));
        amp_tensor *out = NULL, *loss = NULL;
        CHECK_OK(amp_model_forward(r.m, r.x, &out));
        CHECK_OK(amp_cross_entropy(out, r.y, &loss));
        CHECK_OK(amp_backward(loss));
        amp_status s = amp_step(r.opt, NULL);
        CHECK_MSG(s == AMP_ERR_STATE && strstr(amp_last_error(), "DDP that gathers"),
                  "step after the DDP was freed: %d %s", (int)s, amp_last_error());
        CHECK_OK(amp_zero_grad(r.opt));
    }
    amp_status s = amp_ddp_create(r.m, r.opt, &(amp_ddp_opts){.comm = r.comm, .zero_stage = 2},
                                  &other);
    CHECK_MSG(s == AMP_ERR_UNSUPPORTED && strstr(amp_last_error(), "stage 2") && !other,
              "zero_stage 2: %d %s", (int)s, amp_last_error());
    s = amp_ddp_create(r.m, r.opt, &(amp_ddp_opts){.comm = r.comm, .zero_stage = 1,
                                                   .zero_reduce_scatter = true,
                                                   .allreduce_always_fp32 = true}, &other);
    CHECK_MSG(s == AMP_ERR_INVALID_ARG && strstr(amp_last_error(), "zero_reduce_scatter") &&
              !other, "zero_reduce_scatter with f32 buckets: %d %s", (int)s, amp_last_error());
    s = amp_ddp_create(r.m, r.opt, &(amp_ddp_opts){.comm = r.comm, .zero_stage = 7}, &other);
    CHECK_MSG(s == AMP_ERR_INVALID_ARG && strstr(amp_last_error(), "zero_stage 7"),
              "zero_stage 7: %d %s", (int)s, amp_last_error());
    run_free(&r);
    if (g_size == 1) return;
    /* A sharded optimizer saved without its DDP (which gathers it) is refused, naming why. */
    c.level = AMP_O0;
    if (!run_make(&r, &c, 1)) return;
    s = amp_checkpoint_save(getenv("AMP_TEST_TMP") ? getenv("AMP_TEST_TMP") : "/tmp", 1, r.m,
                            r.opt, NULL, NULL, 0);
    CHECK_MSG(s == AMP_ERR_UNSUPPORTED && strstr(amp_last_error(), "amp_ddp_checkpoint_save") &&
              strstr(amp_last_error(), "sharded"), "save: %d %s", (int)s, amp_last_error());
    run_free(&r);
    /* LAMB: its trust ratio needs whole tensors. */
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    amp_comm *comm = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = g_device, .seed = 1, .n_threads = 1}, &ctx));
    CHECK_OK(amp_model_mlp_mnist(ctx, &m));
    amp_lamb_opts lamb = amp_lamb_defaults();
    CHECK_OK(amp_lamb_create(m, &lamb, &opt));
    CHECK_OK(amp_comm_create(&comm));
    s = amp_ddp_create(m, opt, &(amp_ddp_opts){.comm = comm, .zero_stage = 1}, &other);
    CHECK_MSG(s == AMP_ERR_UNSUPPORTED && strstr(amp_last_error(), "LAMB") && !other &&
              !amp_optimizer_sharded(opt), "LAMB: %d %s", (int)s, amp_last_error());
    amp_optimizer_free(opt);
    /* An optimizer over some of the model's parameters: the shards are the model's. */
    amp_tensor *two[2] = {amp_model_param(m, 0), amp_model_param(m, 1)};
    CHECK_OK(amp_sgd_create_params(two, NULL, 2, &(amp_sgd_opts){.lr = 0.1f}, &opt));
    s = amp_ddp_create(m, opt, &(amp_ddp_opts){.comm = comm, .zero_stage = 1}, &other);
    CHECK_MSG(s == AMP_ERR_INVALID_ARG && strstr(amp_last_error(), "steps 2 of its") && !other,
              "an optimizer of 2 parameters: %d %s", (int)s, amp_last_error());
    amp_optimizer_free(opt);
    /* A piece that starts off the 32-element grid, or runs past its parameter. */
    CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.1f, .momentum = 0.9f}, &opt));
    int n = amp_optimizer_n_params(opt);
    int64_t *lo = calloc((size_t)n, sizeof *lo), *hi = calloc((size_t)n, sizeof *hi);
    lo[0] = 16;
    hi[0] = 64;
    s = amp_optimizer_shard(opt, lo, hi, NULL, NULL);
    CHECK_MSG(s == AMP_ERR_INVALID_ARG && strstr(amp_last_error(), "multiple of 32") &&
              !amp_optimizer_sharded(opt), "piece off the grid: %d %s", (int)s, amp_last_error());
    lo[0] = 0;
    hi[0] = amp_optimizer_param(opt, 0)->numel + 1;
    s = amp_optimizer_shard(opt, lo, hi, NULL, NULL);
    CHECK_MSG(s == AMP_ERR_INVALID_ARG && !amp_optimizer_sharded(opt), "piece past the end: %d",
              (int)s);
    free(lo);
    free(hi);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
    amp_comm_free(comm);
}

/* Fault modes for tests/mpi/fault_test.sh: the last rank kills itself (SIGKILL) or hangs after
 * its third backward, so the others wait in the all-gather of the updated weights: they must
 * fail with an error naming the silent rank (a hang), or the launcher ends the job (a death). */
static int fault_mode(const char *mode) {
    /* Without amp, so that no overflow flag is agreed between the backward and the gather. */
    cfg c = {.name = mode, .model = MODEL_MLP};
    run r = {0};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = g_device, .seed = 1, .n_threads = 1},
                            &r.ctx));
    CHECK_OK(amp_model_mlp_mnist(r.ctx, &r.m));
    CHECK_OK(amp_sgd_create(r.m, &(amp_sgd_opts){.lr = 0.01f, .momentum = 0.9f}, &r.opt));
    CHECK_OK(amp_comm_create(&r.comm));
    CHECK_OK(amp_ddp_create(r.m, r.opt, &(amp_ddp_opts){.comm = r.comm, .zero_stage = 1},
                            &r.ddp));
    CHECK_OK(amp_tensor_create(r.ctx, AMP_F32, 4, (int64_t[]){PER_RANK, 1, 28, 28}, &r.x));
    CHECK_OK(amp_tensor_create(r.ctx, AMP_I32, 1, (int64_t[]){PER_RANK}, &r.y));
    if (!r.ddp || !r.x || !r.y) return 1;
    for (int step = 0; step < 6; step++) {
        amp_tensor *out = NULL, *loss = NULL;
        CHECK(load_batch(&r, &c, step));
        CHECK_OK(amp_model_forward(r.m, r.x, &out));
        CHECK_OK(amp_cross_entropy(out, r.y, &loss));
        CHECK_OK(amp_backward(loss));
        if (step == 3 && g_rank == g_size - 1) {
            fprintf(stderr, "rank %d: %s now, before the all-gather\n", g_rank, mode);
            if (!strcmp(mode, "kill")) raise(SIGKILL);
            for (;;) sleep(1000);
        }
        amp_status st = amp_optimizer_step(r.opt);
        if (st != AMP_OK) {
            fprintf(stderr, "rank %d: step %d: %s\n", g_rank, step, amp_last_error());
            amp_comm_abort(r.comm, 3); /* what a training program does */
        }
        CHECK_OK(amp_optimizer_zero_grad(r.opt));
    }
    fprintf(stderr, "rank %d: finished all steps: the fault went unnoticed\n", g_rank);
    return 1;
}

int main(int argc, char **argv) {
    mpi_test_init(&argc, &argv);
    const char *steps = getenv("ZERO_STEPS");
    if (steps && atoi(steps) > 0 && atoi(steps) <= MAX_STEPS) g_steps = atoi(steps);
    static const cfg cfgs[] = {
        {"mlp O0 sgd", MODEL_MLP, AMP_O0, AMP_HALF_F16, false, 0, -1, false},
        {"mlp O2-fp16 adamw overflow", MODEL_MLP, AMP_O2, AMP_HALF_F16, true, 0, 3, false},
        {"mlp O1-bf16 adamw clip", MODEL_MLP, AMP_O1, AMP_HALF_BF16, true, 0.5f, -1, false},
        {"convnet O0 sgd (syncbn)", MODEL_CONVNET, AMP_O0, AMP_HALF_F16, false, 0, -1, false},
        {"convnet O2-fp16 clip overflow", MODEL_CONVNET, AMP_O2, AMP_HALF_F16, false, 1.0f, 3, false},
        {"gpt O1-bf16 adamw", MODEL_GPT, AMP_O1, AMP_HALF_BF16, true, 0, -1, false},
        {"gpt O2-fp16 adamw overflow", MODEL_GPT, AMP_O2, AMP_HALF_F16, true, 0, 4, false},
        {"gpt O2-fp16 adamw clip", MODEL_GPT, AMP_O2, AMP_HALF_F16, true, 1.0f, -1, false},
        {"mlp O2-fp16 adamw overflow rs", MODEL_MLP, AMP_O2, AMP_HALF_F16, true, 0, 3, true},
        {"convnet O0 sgd clip rs", MODEL_CONVNET, AMP_O0, AMP_HALF_F16, false, 1.0f, -1, true},
        {"gpt O1-bf16 adamw clip rs", MODEL_GPT, AMP_O1, AMP_HALF_BF16, true, 1.0f, -1, true},
    };
    const char *only = argc > 1 ? argv[1] : NULL;
    if (only && (!strcmp(only, "kill") || !strcmp(only, "hang"))) return fault_mode(only);
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
        if (!only || strstr(cfgs[i].name, only)) check_config(&cfgs[i]);
    if (!only || !strcmp(only, "misuse")) misuse();
    if (!only || !strcmp(only, "resume")) resume();
    return mpi_test_finish("test_zero");
}
