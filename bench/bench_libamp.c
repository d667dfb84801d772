/* amp-bench's libamp side (bench_libamp.h): one configuration's training steps, measured, and
 * the backend's GEMM peaks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench/bench_libamp.h"
#include "bench/bench_stats.h"
#include "core/ctx.h"

#define BENCH_TRY(call)                                                                            \
    do {                                                                                           \
        amp_status s_ = (call);                                                                    \
        if (s_ != AMP_OK) return bench_fail(s_, "%s: %s", #call, amp_last_error());              \
    } while (0)

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A fixed pseudo-random batch: pixels in [-1, 1), labels cycling through the 10 classes. */
static void synthetic_batch(float *x, int32_t *y, int n) {
    uint32_t state = 12345u;
    for (int64_t i = 0; i < (int64_t)n * 784; i++) {
        state = state * 1664525u + 1013904223u;
        x[i] = (float)(state >> 8) / 8388608.0f - 1.0f;
    }
    for (int i = 0; i < n; i++) y[i] = i % 10;
}

typedef struct bench_state {
    amp_ctx *ctx;
    amp_model *model;
    amp_optimizer *opt;
    amp_ddp *ddp;
    amp_tensor *x, *y, *loss;
    bool lm; /* a language model: token sequences, AdamW, clipping (else images, SGD) */
} bench_state;

static int world_of(const bench_cfg *c) { return c->comm ? amp_comm_size(c->comm) : 1; }

static bool is_lm(const bench_cfg *c) {
    return !strcmp(c->model, "gpt") || !strcmp(c->model, "llama");
}

static void state_free(bench_state *b) {
    amp_ddp_free(b->ddp);
    amp_tensor_free(b->x);
    amp_tensor_free(b->y);
    amp_optimizer_free(b->opt);
    amp_model_free(b->model);
    amp_ctx_free(b->ctx);
}

/* c's model and amp-train's optimizer for it: SGD with momentum for the image models (a smaller
 * step keeps the repeated batch from diverging), nanoGPT's AdamW for the language models at its
 * small models' lr. */
static amp_status model_make(const bench_cfg *c, bench_state *b) {
    const bench_lm_shape *l = &c->lm;
    if (!strcmp(c->model, "llama")) {
        amp_llama_config g = {.vocab_size = l->vocab_size, .hidden_size = l->n_embd,
                              .intermediate_size = l->intermediate,
                              .num_hidden_layers = l->n_layer, .num_attention_heads = l->n_head,
                              .num_key_value_heads = l->kv_heads,
                              .max_position_embeddings = l->block_size, .rms_norm_eps = 1e-5f,
                              .rope_theta = 10000.0f};
        BENCH_TRY(amp_llama_create(b->ctx, &g, &b->model));
        BENCH_TRY(amp_model_build(b->model));
        BENCH_TRY(amp_lm_adamw_create(b->model, 6e-4f, 0.1f, &b->opt));
        return AMP_OK;
    }
    if (b->lm) {
        amp_gpt_config g = {.n_layer = l->n_layer, .n_head = l->n_head, .n_embd = l->n_embd,
                            .block_size = l->block_size, .vocab_size = l->vocab_size};
        BENCH_TRY(amp_gpt_create(b->ctx, &g, &b->model));
        BENCH_TRY(amp_model_build(b->model));
        BENCH_TRY(amp_lm_adamw_create(b->model, 6e-4f, 0.1f, &b->opt));
        return AMP_OK;
    }
    if (!strcmp(c->model, "mlp")) BENCH_TRY(amp_model_mlp_mnist(b->ctx, &b->model));
    else if (!strcmp(c->model, "convnet")) BENCH_TRY(amp_model_convnet_mnist(b->ctx, &b->model));
    else if (!strcmp(c->model, "resnet")) BENCH_TRY(amp_model_resnet_mnist(b->ctx, &b->model));
    else return bench_fail(AMP_ERR_INVALID_ARG, "unknown model '%s' (want mlp, convnet, resnet, gpt or llama)",
                           c->model);
    BENCH_TRY(amp_sgd_create(b->model, &(amp_sgd_opts){.lr = 0.01f, .momentum = 0.9f}, &b->opt));
    return AMP_OK;
}

/* A language model's batch: c->batch fixed random sequences, the next tokens as targets. */
static amp_status token_batch(const bench_cfg *c, bench_state *b) {
    int64_t n = (int64_t)c->batch * c->lm.block_size;
    int32_t *tok = malloc((size_t)(n + 1) * sizeof *tok);
    if (!tok) return bench_fail(AMP_ERR_OOM, "out of memory for a batch of %d", c->batch);
    uint32_t state = 12345u;
    for (int64_t i = 0; i <= n; i++) {
        state = state * 1664525u + 1013904223u;
        tok[i] = (int32_t)((state >> 8) % (uint32_t)c->lm.vocab_size);
    }
    const int64_t shape[2] = {c->batch, c->lm.block_size};
    amp_status s = amp_tensor_from_host(b->ctx, AMP_I32, 2, shape, tok, &b->x);
    if (s == AMP_OK) s = amp_tensor_from_host(b->ctx, AMP_I32, 2, shape, tok + 1, &b->y);
    free(tok);
    return s == AMP_OK ? AMP_OK : bench_fail(s, "the batch: %s", amp_last_error());
}

/* The image models' batch (synthetic_batch). */
static amp_status image_batch(const bench_cfg *c, bench_state *b) {
    float *x = malloc((size_t)c->batch * 784 * sizeof *x);
    int32_t *y = malloc((size_t)c->batch * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        return bench_fail(AMP_ERR_OOM, "out of memory for a batch of %d", c->batch);
    }
    synthetic_batch(x, y, c->batch);
    amp_status s = amp_tensor_from_host(b->ctx, AMP_F32, 4, (int64_t[]){c->batch, 1, 28, 28}, x,
                                        &b->x);
    if (s == AMP_OK) s = amp_tensor_from_host(b->ctx, AMP_I32, 1, (int64_t[]){c->batch}, y, &b->y);
    free(x);
    free(y);
    return s == AMP_OK ? AMP_OK : bench_fail(s, "the batch: %s", amp_last_error());
}

static amp_status set_recompute(const bench_cfg *c, bench_state *b, amp_recompute mode) {
    if (!is_lm(c)) return AMP_OK;
    BENCH_TRY(!strcmp(c->model, "llama") ? amp_llama_set_recompute(b->model, mode)
                                         : amp_gpt_set_recompute(b->model, mode));
    return AMP_OK;
}

static amp_status state_make(const bench_cfg *c, bench_state *b) {
    *b = (bench_state){.lm = is_lm(c)};
    BENCH_TRY(amp_ctx_create(&(amp_ctx_opts){.device = c->device, .seed = 0,
                                             .n_threads = c->threads}, &b->ctx));
    amp_status s = model_make(c, b);
    if (s == AMP_OK) s = set_recompute(c, b, c->recompute);
    if (s != AMP_OK) return s;
    BENCH_TRY(amp_initialize_ex(b->model, b->opt, &(amp_options){.opt_level = c->level,
                                                                 .half_type = c->half,
                                                                 .quiet = true}));
    if (world_of(c) > 1)
        BENCH_TRY(amp_ddp_create(b->model, b->opt, &(amp_ddp_opts){.comm = c->comm,
                                                                   .zero_stage = c->zero_stage},
                                 &b->ddp));
    return b->lm ? token_batch(c, b) : image_batch(c, b);
}

/* Forward, loss, backward and the optimizer's step; b->loss stays valid until end_step. A
 * language model's step clips the gradient norm at 1.0 as amp-train's does. */
static amp_status train_step(const bench_cfg *c, bench_state *b) {
    amp_tensor *logits;
    if (b->lm) {
        float norm;
        if (!strcmp(c->model, "llama")) BENCH_TRY(amp_llama_loss(b->model, b->x, b->y, &b->loss));
        else BENCH_TRY(amp_gpt_loss(b->model, b->x, b->y, &b->loss));
        BENCH_TRY(amp_backward(b->loss));
        BENCH_TRY(amp_clip_grad_norm(b->opt, 1.0f, &norm));
        BENCH_TRY(amp_step(b->opt, NULL));
        return AMP_OK;
    }
    BENCH_TRY(amp_model_forward(b->model, b->x, &logits));
    BENCH_TRY(amp_cross_entropy(logits, b->y, &b->loss));
    BENCH_TRY(amp_backward(b->loss));
    BENCH_TRY(amp_step(b->opt, NULL));
    return AMP_OK;
}

/* Waits for the step (the loss's read is the host's one wait) and starts the next. */
static amp_status end_step(bench_state *b) {
    float loss = 0.0f;
    BENCH_TRY(amp_tensor_item(b->loss, &loss));
    BENCH_TRY(amp_zero_grad(b->opt));
    return AMP_OK;
}

const char *bench_recompute_name(amp_recompute mode) {
    return mode == AMP_RECOMPUTE_FULL ? "full" : mode == AMP_RECOMPUTE_SELECTIVE ? "selective"
                                                                                : "none";
}

static void fill_config(const bench_cfg *c, bench_row *row) {
    snprintf(row->impl, sizeof row->impl, "libamp");
    snprintf(row->model, sizeof row->model, "%s", c->model);
    snprintf(row->opt_level, sizeof row->opt_level, "O%d", (int)c->level);
    snprintf(row->half, sizeof row->half, "%s", c->level == AMP_O0 ? "-"
                                                : c->half == AMP_HALF_BF16 ? "bf16" : "fp16");
    row->batch = c->batch;
    snprintf(row->device, sizeof row->device, "%s", c->device == AMP_DEVICE_CUDA ? "cuda" : "cpu");
    row->threads = c->threads;
    row->world_size = world_of(c);
    row->zero_stage = world_of(c) > 1 ? c->zero_stage : 0;
    row->seq_len = is_lm(c) ? c->lm.block_size : 0;
    if (is_lm(c))
        snprintf(row->recompute, sizeof row->recompute, "%s", bench_recompute_name(c->recompute));
}

static amp_status measure(const bench_cfg *c, bench_state *b, bench_row *row) {
    for (int i = 0; i < c->warmup; i++) {
        BENCH_TRY(train_step(c, b));
        BENCH_TRY(end_step(b));
    }
    amp_ctx_memory_reset_peak(b->ctx);
    double *ms = calloc((size_t)c->steps, sizeof *ms);
    if (!ms) return bench_fail(AMP_ERR_OOM, "out of memory");
    amp_status s = AMP_OK;
    for (int i = 0; s == AMP_OK && i < c->steps; i++) {
        double t0 = now_seconds();
        s = train_step(c, b);
        if (s == AMP_OK) s = end_step(b);
        ms[i] = 1e3 * (now_seconds() - t0);
    }
    bench_summary sum;
    if (s == AMP_OK) s = bench_summarize(ms, c->steps, &sum);
    free(ms);
    if (s != AMP_OK) return s;
    row->n_steps = c->steps;
    row->step_ms_median = sum.median;
    row->step_ms_p10 = sum.p10;
    row->step_ms_p90 = sum.p90;
    double world_rate = (double)c->batch / (sum.median * 1e-3); /* summed over the ranks below */
    if (world_of(c) > 1) BENCH_TRY(amp_comm_allreduce_sum_f64(c->comm, &world_rate, 1));
    row->samples_per_s = world_rate;

    amp_mem_usage peak;
    BENCH_TRY(amp_ctx_memory_usage(b->ctx, NULL, &peak));
    for (int k = 0; k < AMP_MEM_N_KINDS && k < BENCH_MEM_N_KINDS; k++)
        row->mem_peak_nbytes[k] = (int64_t)peak.bytes[k];
    row->mem_peak_total_nbytes = (int64_t)peak.total;
    /* The host's peak so far, before the counted step below, which runs without recomputation
     * and would otherwise give a recomputed row the peak of a row without it. */
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) row->host_peak_rss_nbytes = (int64_t)ru.ru_maxrss * 1024;

    /* One step counted: its FLOPs and how often the host waited (the loss's read after the
     * count is amp-bench's, not the step's). The model's FLOPs, PaLM's MFU: a recomputation's
     * second forward is work the model does not need, so that step runs without it. */
    amp_op_profile p;
    if (c->recompute) BENCH_TRY(set_recompute(c, b, AMP_RECOMPUTE_NONE));
    amp_profile_begin(false);
    s = train_step(c, b);
    amp_profile_end(&p);
    if (s == AMP_OK) s = end_step(b);
    if (s == AMP_OK && c->recompute) s = set_recompute(c, b, c->recompute);
    if (s != AMP_OK) return s;
    row->gflop_per_step = p.flops[AMP_OPCAT_GEMM_CONV] * 1e-9 * world_of(c); /* every rank's */
    row->gflop_per_s = row->gflop_per_step * row->samples_per_s / ((double)c->batch * world_of(c));
    row->host_syncs_per_step = c->device == AMP_DEVICE_CUDA ? (double)p.host_waits : NAN;

    if (c->profile) {
        double t0 = now_seconds();
        amp_profile_begin(true);
        for (int i = 0; s == AMP_OK && i < c->steps; i++) {
            s = train_step(c, b);
            if (s == AMP_OK) s = end_step(b);
        }
        amp_profile_end(&p);
        double wall = (now_seconds() - t0) / c->steps;
        if (s != AMP_OK) return s;
        double in_ops = 0.0;
        for (int k = 0; k < AMP_OPCAT_N; k++) {
            row->prof_s_per_step[k] = p.seconds[k] / c->steps;
            in_ops += row->prof_s_per_step[k];
        }
        /* What the ops do not account for in the same steps: the framework (autocast, the
         * tape, the amp layer, allocation) and, on a device, launch latency. */
        row->prof_s_per_step[BENCH_PROF_OVERHEAD] = wall > in_ops ? wall - in_ops : 0.0;
    }
    amp_scaler_state st;
    row->skipped_steps = amp_scaler_get_state(b->opt, 0, &st) == AMP_OK ? st.skipped_steps : 0;
    return AMP_OK;
}

amp_status bench_libamp_run(const bench_cfg *c, bench_row *row) {
    bench_row_init(row);
    fill_config(c, row);
    if (c->steps < 1 || c->warmup < 0 || c->batch < 1)
        return bench_fail(AMP_ERR_INVALID_ARG, "steps %d, warm-up %d, batch %d: want steps >= 1, "
                          "warm-up >= 0, batch >= 1", c->steps, c->warmup, c->batch);
    bench_state b;
    amp_status s = state_make(c, &b);
    if (s == AMP_OK) s = measure(c, &b, row);
    state_free(&b);
    return s;
}

/* GFLOP/s of an n x n x n GEMM of dt inputs into a c_dt output: the best of `reps` calls after
 * one warm-up. */
static double gemm_gflops(const amp_backend *be, amp_dtype dt, amp_dtype c_dt, int64_t n, int reps) {
    size_t bytes = (size_t)(n * n) * amp_dtype_size(dt), c_bytes = (size_t)(n * n) * amp_dtype_size(c_dt);
    void *a = NULL, *b = NULL, *c = NULL;
    double best = NAN;
    if (be->alloc(be->dev, bytes, &a) != AMP_OK || be->alloc(be->dev, bytes, &b) != AMP_OK ||
        be->alloc(be->dev, c_bytes, &c) != AMP_OK)
        goto out;
    if (be->k.fill(be->dev, a, dt, n * n, 0.5f) != AMP_OK ||
        be->k.fill(be->dev, b, dt, n * n, 0.25f) != AMP_OK)
        goto out;
    amp_gemm_desc d = {.m = n, .n = n, .k = n, .alpha = 1.0f, .a = a, .a_dtype = dt, .lda = n,
                       .b = b, .b_dtype = dt, .ldb = n, .c = c, .c_dtype = c_dt, .ldc = n};
    for (int r = 0; r <= reps; r++) {
        double t0 = now_seconds();
        if (be->k.gemm(be->dev, &d) != AMP_OK || be->sync(be->dev) != AMP_OK) {
            best = NAN;
            break;
        }
        double gflops = 2.0 * (double)n * (double)n * (double)n / (now_seconds() - t0) * 1e-9;
        if (r > 0 && !(gflops <= best)) best = gflops; /* r == 0: the warm-up */
    }
out:
    if (a) be->free(be->dev, a);
    if (b) be->free(be->dev, b);
    if (c) be->free(be->dev, c);
    return best;
}

/* The best over two sizes and over both outputs a model's GEMMs write (the input's dtype, f32:
 * a weight gradient at O2 and O3's masters' side), so that no GEMM of a model outruns "the peak"
 * for want of a shape. */
static double best_gflops(const amp_backend *be, amp_dtype dt, const int64_t *sizes, int reps) {
    double best = NAN;
    for (int i = 0; i < 2; i++)
        for (int out = 0; out < (dt == AMP_F32 ? 1 : 2); out++) {
            double g = gemm_gflops(be, dt, out ? AMP_F32 : dt, sizes[i], reps);
            if (!(g <= best)) best = g;
        }
    return best;
}

amp_status bench_measure_peaks(amp_device device, int threads, bool quick, double *f32,
                               double *bf16, double *f16) {
    amp_ctx *ctx;
    BENCH_TRY(amp_ctx_create(&(amp_ctx_opts){.device = device, .n_threads = threads}, &ctx));
    const amp_backend *be = ctx->backend;
    /* Large enough to reach the plateau, small enough to take seconds: 2 and 17 GFLOP per CPU
     * call, 1 and 2.2 TFLOP per GPU call. */
    const int64_t cpu[2] = {1024, 2048}, gpu[2] = {8192, 10240};
    const int64_t quick_cpu[2] = {512, 1024}, quick_gpu[2] = {2048, 4096};
    const int64_t *sizes = device == AMP_DEVICE_CUDA ? (quick ? quick_gpu : gpu)
                                                     : (quick ? quick_cpu : cpu);
    /* The best of several calls, so that a busy moment on a shared CPU does not lower the peak
     * (with 2 calls one run measured 94 GFLOP/s and reported an MFU of 132 %). */
    int reps = quick ? 2 : device == AMP_DEVICE_CUDA ? 10 : 5;
    *f32 = best_gflops(be, AMP_F32, sizes, reps);
    *bf16 = best_gflops(be, AMP_BF16, sizes, reps);
    *f16 = best_gflops(be, AMP_F16, sizes, reps);
    amp_ctx_free(ctx);
    return AMP_OK;
}
