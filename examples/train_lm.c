/* amp-train --model gpt and --model llama: the GPT of models/gpt.c or the Llama of
 * models/llama.c (train_lm_models.c) trained on token files (llm.c's
 * format: DIR/train.bin and DIR/val.bin, amp-text-tokens makes byte-level ones) as nanoGPT and
 * llm.c train it: AdamW (betas 0.9 and 0.95, weight decay on the 2-D tensors only), a linear
 * warm-up then cosine decay to --min-lr (amp_optimizer_schedule), the gradient norm clipped on
 * unscaled gradients, --accumulate micro-batches per step, the validation loss every
 * --eval-every steps over --eval-batches batches, and a sample printed at the end.
 *
 * A step line as llm.c's: step, loss, learning rate, gradient norm, loss scale, ms, tokens/s and
 * MFU: the GEMM FLOPs the ops counted in the step (amp/profile.h) over its time, against the
 * peak of this machine's GEMMs in the compute dtype, measured at the start (1024^3 products,
 * the best of 3) and raised to any step's GEMM rate above it (the start met a busy machine). Batches are a function of (seed, step), so a resumed run reads the batches
 * of a run that never stopped; the checkpoint keeps the step. Under mpirun each of the N
 * processes takes its 1/N of every global batch's rows (DDP averages the gradients), so N
 * processes train as one does; rank 0 prints, the losses averaged over the ranks. SIGTERM or
 * SIGINT (examples/stop_signal.h) ends the run after its step with a checkpoint (with
 * --checkpoint-dir) and exit 0, every rank at the same step; resumed, it ends as a run that
 * never stopped. Each checkpoint carries the model's shape (the GPT's nanoGPT model_args, the
 * Llama's config.json, also written beside its model.safetensors), which a resume builds: the
 * shape options not given come from it, one given with another value is refused. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "amp/amp.h"
#include "stop_signal.h"
#include "train_args.h"
#include "train_lm_models.h"

#define TRY(call)                                                                                  \
    do {                                                                                           \
        amp_status s_ = (call);                                                                    \
        if (s_ != AMP_OK) {                                                                        \
            fprintf(stderr, "amp-train: %s: %s\n", amp_status_str(s_), amp_last_error());         \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The best GFLOP/s of three 1024^3 products in dt through amp_matmul. */
static amp_status measure_peak(amp_ctx *ctx, amp_dtype dt, double *gflops) {
    enum { N = 1024 };
    amp_tensor *a = NULL, *b = NULL, *c = NULL, *m = NULL;
    bool grad = amp_set_grad_enabled(ctx, false);
    amp_status s = amp_tensor_create(ctx, dt, 2, (const int64_t[]){N, N}, &a);
    if (s == AMP_OK) s = amp_tensor_create(ctx, dt, 2, (const int64_t[]){N, N}, &b);
    *gflops = 0;
    for (int r = 0; r < 4 && s == AMP_OK; r++) {
        double t0 = seconds_now();
        float v;
        s = amp_matmul(a, b, &c);
        if (s == AMP_OK) s = amp_mean(c, &m);
        if (s == AMP_OK) s = amp_tensor_item(m, &v);
        double g = 2.0 * N * N * N / (seconds_now() - t0) / 1e9;
        if (r > 0 && g > *gflops) *gflops = g; /* the first call makes the plan */
        amp_ctx_reset_step(ctx);
    }
    amp_set_grad_enabled(ctx, grad);
    amp_tensor_free(a);
    amp_tensor_free(b);
    return s;
}

/* The mean loss over n global batches of val (sequential windows from its start), in eval mode:
 * this rank's rows (b of B, from row `first`) and the ranks' means averaged. */
static amp_status evaluate(const lm_shape *sh, amp_model *m, amp_comm *comm,
                           const amp_tokens *val, int64_t B,
                           int64_t b, int64_t first, int64_t seq, int64_t n, amp_tensor *x,
                           amp_tensor *y, int32_t *hx, int32_t *hy, double *out) {
    amp_ctx *ctx = amp_model_ctx(m);
    bool grad = amp_set_grad_enabled(ctx, false);
    amp_model_train(m, false);
    double sum = 0;
    amp_status s = AMP_OK;
    size_t bytes = (size_t)(b * seq) * sizeof *hx, at = (size_t)(first * seq);
    for (int64_t i = 0; i < n && s == AMP_OK; i++) {
        amp_tensor *loss;
        float v = 0;
        s = amp_tokens_batch(val, AMP_TOKENS_SEQUENTIAL, 0, i, B, seq, hx, hy);
        if (s == AMP_OK) s = amp_tensor_copy_from_host(x, hx + at, bytes);
        if (s == AMP_OK) s = amp_tensor_copy_from_host(y, hy + at, bytes);
        if (s == AMP_OK) s = lm_model_loss(sh, m, x, y, &loss);
        if (s == AMP_OK) s = amp_tensor_item(loss, &v);
        sum += v;
        amp_ctx_reset_step(ctx);
    }
    if (s == AMP_OK) s = amp_comm_allreduce_sum_f64(comm, &sum, 1);
    amp_model_train(m, true);
    amp_set_grad_enabled(ctx, grad);
    *out = sum / (double)n / (double)amp_comm_size(comm);
    return s;
}

/* Token id as text: its bytes through the tokenizer, the id itself as a byte for a vocabulary of
 * 256 without one, else its number. Control bytes other than whitespace are left out, as llm.c's
 * sampler leaves them (a byte-level model may draw any byte); bytes of 0x80 and up are kept, as
 * they are parts of UTF-8 characters. */
static void print_token(const amp_tokenizer *tok, int64_t vocab, int32_t id, FILE *to) {
    const char *bytes = NULL;
    size_t len = 0;
    char byte = (char)id;
    if (tok && amp_tokenizer_decode(tok, id, &bytes, &len) != AMP_OK) len = 0;
    if (!tok && vocab <= 256) bytes = &byte, len = 1;
    if (!tok && vocab > 256) {
        fprintf(to, "%d ", id);
        return;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)bytes[i];
        if (c >= 0x20 && c != 0x7f) fputc(c, to);
        else if (c == '\n' || c == '\t' || c == '\r') fputc(c, to);
    }
}

/* The sample's prompt: --start's bytes (a byte-level model), --start-ids' ids, or else the
 * tokenizer's end-of-text token (without one, a newline), as nanoGPT's sample.py starts. Checked
 * before training, each a clear error: both given, text for a model whose ids are not bytes, an
 * id outside the vocabulary, a prompt without --sample. */
static amp_status prompt_tokens(const train_args *a, int32_t vocab, const amp_tokenizer *tok,
                                int32_t **ids, int64_t *n) {
    if (a->start && a->start_ids)
        return amp_error(AMP_ERR_INVALID_ARG, "give --start or --start-ids, not both");
    if ((a->start || a->start_ids) && a->sample <= 0)
        return amp_error(AMP_ERR_INVALID_ARG, "--start%s is the sample's prompt: give --sample N "
                         "too", a->start ? "" : "-ids");
    if (a->start && (tok || vocab > 256))
        return amp_error(AMP_ERR_INVALID_ARG, "--start reads its text as bytes, the tokens of a "
                         "byte-level model (vocabulary 256, no --tokenizer); a tokenizer file "
                         "holds no merges to encode with: give the prompt's ids with --start-ids");
    size_t cap = a->start ? strlen(a->start) + 1 : a->start_ids ? strlen(a->start_ids) / 2 + 2 : 1;
    *n = 0;
    if (!(*ids = malloc(cap * sizeof **ids)))
        return amp_error(AMP_ERR_OOM, "out of host memory for the prompt");
    if (a->start) {
        for (const unsigned char *c = (const unsigned char *)a->start; *c; c++) {
            if (*c >= vocab)
                return amp_error(AMP_ERR_INVALID_ARG, "--start: byte %d (at %lld) is outside the "
                                 "vocabulary of %d", *c, (long long)*n, vocab);
            (*ids)[(*n)++] = *c;
        }
    } else if (a->start_ids) {
        for (const char *c = a->start_ids; *c;) {
            char *end;
            errno = 0;
            long v = strtol(c, &end, 10);
            if (end == c || errno || v < 0 || v >= vocab || (*end && *end != ','))
                return amp_error(AMP_ERR_INVALID_ARG, "--start-ids '%s': want ids in [0, %d) "
                                 "separated by commas", a->start_ids, vocab);
            (*ids)[(*n)++] = (int32_t)v;
            c = *end ? end + 1 : end;
        }
    }
    if (*n == 0) (*ids)[(*n)++] = tok ? amp_tokenizer_eot(tok) : vocab > '\n' ? '\n' : 0;
    return AMP_OK;
}

/* n tokens drawn after the prompt's (prompt_tokens; printed first when given) by the library's
 * generation (lm_model_generate: each from the last position's logits / temperature over the
 * real vocabulary, the padding never drawn, the top_k most likely kept, 0: all), with the
 * key/value cache when prompt and sample fit in the model's positions (one position's forward a
 * token), else by full forwards of the last window; printed as text (print_token). */
static amp_status sample(const lm_shape *sh, amp_model *m, const amp_tokenizer *tok,
                         const int32_t *prompt, int64_t n_prompt, bool show_prompt, int64_t n,
                         float temperature, int top_k, uint64_t seed, FILE *to) {
    int32_t *toks = malloc((size_t)(n > 0 ? n : 1) * sizeof *toks);
    if (!toks) return amp_error(AMP_ERR_OOM, "sample: out of memory");
    for (int64_t i = 0; show_prompt && i < n_prompt; i++)
        print_token(tok, sh->vocab, prompt[i], to);
    amp_lm_sample_opts o = {.temperature = temperature, .top_k = top_k, .seed = seed};
    amp_status s = lm_model_generate(sh, m, prompt, n_prompt, n, &o, toks);
    for (int64_t t = 0; s == AMP_OK && t < n; t++) print_token(tok, sh->vocab, toks[t], to);
    fputc('\n', to);
    free(toks);
    return s;
}

/* A checkpoint of step into --checkpoint-dir (every rank's part under DDP), its folder into
 * path, and the model's files beside it (lm_model_saved; rank 0). */
static amp_status save(const train_args *a, amp_ddp *ddp, amp_model *m, amp_optimizer *opt,
                       const amp_checkpoint_opts *ckpt, const lm_shape *sh, int rank, int64_t step,
                       char *path, size_t size) {
    amp_status s = ddp ? amp_ddp_checkpoint_save(ddp, a->checkpoint_dir, step, ckpt, path, size)
                       : amp_checkpoint_save(a->checkpoint_dir, step, m, opt, ckpt, path, size);
    return s == AMP_OK && rank == 0 ? lm_model_saved(sh, path) : s;
}

int amp_train_lm(const train_args *a) {
    FILE *text = a->json ? stderr : stdout;
    amp_ctx *ctx = NULL;
    amp_model *model = NULL;
    amp_optimizer *opt = NULL;
    amp_tokens *train = NULL, *val = NULL;
    amp_tokenizer *tokenizer = NULL;
    int32_t *prompt = NULL;
    int64_t n_prompt = 0;
    amp_tensor *x = NULL, *y = NULL, *loss_sum = NULL; /* the step's micro-batch losses */
    int32_t *hx = NULL, *hy = NULL;
    amp_comm *comm = NULL;
    amp_ddp *ddp = NULL;
    int exit_code = 1, world = 1, rank = 0;
    lm_shape *sh = calloc(1, sizeof *sh);
    int64_t B = a->batch_size, T;
    char path[4096], from[4096], describe[512];
    bool resume = false;
    static const amp_device devices[] = {AMP_DEVICE_AUTO, AMP_DEVICE_CPU, AMP_DEVICE_CUDA};
    TRY(amp_comm_create(&comm));
    world = amp_comm_size(comm), rank = amp_comm_rank(comm);
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) goto fail; /* rank 0 prints */
    if (rank != 0) text = stdout;
    if (a->batch_per_process) B *= world; /* --batch-size is each process's */
    if (B % world)
        TRY(amp_error(AMP_ERR_INVALID_ARG, "--batch-size %lld does not split over %d processes",
                      (long long)B, world));
    int64_t b = B / world; /* this rank's rows of each global batch */
    if (!sh) TRY(amp_error(AMP_ERR_OOM, "out of host memory"));
    TRY(train_resume_source(a, rank == 0, from, sizeof from, &resume));
    if (!resume && a->resume && a->eval_only)
        TRY(amp_error(AMP_ERR_IO, "--eval-only --resume latest: %s holds no completed checkpoint "
                      "to evaluate", a->checkpoint_dir));
    TRY(lm_shape_resolve(a, resume ? from : NULL, rank == 0, text, sh));
    T = sh->window;
    int threads = a->threads;
    if (!threads && world > 1) { /* the machine's cores shared by its processes */
        int share = omp_get_num_procs() / amp_comm_local_size(comm);
        threads = share > 0 ? share : 1;
    }
    if (world > 1) TRY(amp_comm_select_device(comm));
    TRY(amp_ctx_create(&(amp_ctx_opts){.device = devices[a->device], .seed = a->seed,
                                       .n_threads = threads, .allow_tf32 = a->allow_tf32,
                                       .allow_nondeterministic = a->nondeterministic},
                       &ctx));
    snprintf(path, sizeof path, "%s/train.bin", a->data_dir);
    TRY(amp_tokens_open(path, sh->vocab, &train));
    snprintf(path, sizeof path, "%s/val.bin", a->data_dir);
    TRY(amp_tokens_open(path, sh->vocab, &val));
    if (a->tokenizer) {
        TRY(amp_tokenizer_open(a->tokenizer, &tokenizer));
        if (amp_tokenizer_vocab_size(tokenizer) != sh->vocab)
            TRY(amp_error(AMP_ERR_INVALID_ARG, "--tokenizer '%s' has a vocabulary of %d tokens, "
                          "the model's vocab_size is %lld", a->tokenizer,
                          amp_tokenizer_vocab_size(tokenizer), (long long)sh->vocab));
    }
    TRY(prompt_tokens(a, (int32_t)sh->vocab, tokenizer, &prompt, &n_prompt));
    TRY(lm_model_create(sh, ctx, &model));
    TRY(amp_model_build(model));
    TRY(lm_model_set_recompute(sh, model, (amp_recompute)a->recompute));
    TRY(amp_lm_adamw_create(model, a->lr, a->weight_decay, &opt));
    amp_options amp_opts = {.opt_level = (amp_opt_level)a->opt_level,
                            .half_type = a->bf16 ? AMP_HALF_BF16 : AMP_HALF_F16,
                            .loss_scale = a->loss_scale, .init_scale = a->init_scale,
                            .skip_nonfinite = a->skip_nonfinite > 0   ? AMP_OPT_TRUE
                                              : a->skip_nonfinite < 0 ? AMP_OPT_FALSE
                                                                      : AMP_OPT_DEFAULT};
    TRY(amp_initialize_ex(model, opt, &amp_opts));
    amp_ctx_memory_reset_peak(ctx); /* peak_backend_mb: what training holds, not the cast */
    if (a->init_weights) TRY(lm_model_init_weights(sh, a->init_weights, model, opt));
    if (world > 1)
        TRY(amp_ddp_create(model, opt, &(amp_ddp_opts){.comm = comm,
                                                       .allreduce_always_fp32 = a->allreduce_fp32,
                                                       .zero_stage = a->zero_stage},
                           &ddp));
    int64_t step = 0;
    const char *model_args_key = LM_MODEL_ARGS_KEY, *model_args_value = sh->model_args;
    amp_checkpoint_opts ckpt = {.keep = a->keep, .user_keys = &model_args_key,
                                .user_values = &model_args_value, .n_user = 1};
    if (resume) {
        if (ddp) TRY(amp_ddp_checkpoint_load(ddp, from, &ckpt, &step));
        else TRY(amp_checkpoint_load(from, model, opt, &ckpt, &step));
        fprintf(text, "amp-train: resumed from %s at step %lld\n", from, (long long)step);
    }
    TRY(amp_tensor_create(ctx, AMP_I32, 2, (const int64_t[]){b, T}, &x));
    TRY(amp_tensor_create(ctx, AMP_I32, 2, (const int64_t[]){b, T}, &y));
    TRY(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){1}, &loss_sum));
    hx = malloc((size_t)(B * T) * sizeof *hx);
    hy = malloc((size_t)(B * T) * sizeof *hy);
    if (!hx || !hy) TRY(amp_error(AMP_ERR_OOM, "out of host memory for a batch"));
    amp_dtype compute = a->opt_level == 0 ? AMP_F32 : a->bf16 ? AMP_BF16 : AMP_F16;
    double peak = 0;
    TRY(measure_peak(ctx, compute, &peak));
    int64_t max_steps = a->max_steps ? a->max_steps : 2000;
    int64_t decay_steps = a->lr_decay_steps ? a->lr_decay_steps : max_steps;
    amp_lr_schedule sched = {.max_lr = a->lr, .min_lr = a->min_lr, .warmup_steps = a->warmup_steps,
                             .decay_steps = decay_steps, .decay = AMP_LR_COSINE};
    if (sched.warmup_steps > decay_steps) sched.warmup_steps = decay_steps;
    lm_model_describe(sh, model, describe, sizeof describe);
    fprintf(text, "amp-train: %s; %lld + %lld tokens from %s; batch %lld x %lld x %lld "
            "accumulated; O%d%s%s; backend %s%s%s%s; %s GEMM peak %.1f GFLOP/s\n", describe,
            (long long)amp_tokens_count(train),
            (long long)amp_tokens_count(val), a->data_dir, (long long)B, (long long)T,
            (long long)a->accumulate, a->opt_level, a->opt_level ? (a->bf16 ? " bf16" : " fp16") : "",
            a->recompute == AMP_RECOMPUTE_FULL        ? ", every block recomputed"
            : a->recompute == AMP_RECOMPUTE_SELECTIVE ? ", the norms' outputs recomputed"
                                                      : "",
            amp_ctx_backend_name(ctx), world > 1 ? ", DDP over the processes" : "",
            world > 1 && a->allreduce_fp32 ? ", f32 all-reduce" : "",
            amp_ddp_zero_stage(ddp) ? ", ZeRO-1" : "", amp_dtype_name(compute),
            peak);
    size_t bytes = (size_t)(b * T) * sizeof *hx, offset = (size_t)(rank * b * T);
    double loss_avg = NAN, val_loss = NAN, total_s = 0, total_tok = 0;
    amp_token_order order = a->data_order_sequential ? AMP_TOKENS_SEQUENTIAL : AMP_TOKENS_RANDOM;
    bool stop = false;
    stop_signal_install();
    if (a->eval_only) { /* nanoGPT's eval_only: the loaded weights' validation loss and sample */
        TRY(evaluate(sh, model, comm, val, B, b, rank * b, T, a->eval_batches, x, y, hx, hy,
                     &val_loss));
        if (a->json) printf("{\"step\": %lld, \"val_loss\": %.17g}\n", (long long)step, val_loss);
        else printf("step %5lld | val loss %.4f\n", (long long)step, val_loss);
        max_steps = step;
    }
    for (; step < max_steps && !stop; step++) {
        double t0 = seconds_now();
        TRY(amp_optimizer_schedule(opt, &sched, step));
        amp_profile_begin(false);
        const float zero = 0.0f;
        TRY(amp_tensor_copy_from_host(loss_sum, &zero, sizeof zero));
        for (int64_t k = 0; k < a->accumulate; k++) {
            amp_tensor *loss;
            TRY(amp_tokens_batch(train, order, a->seed, step * a->accumulate + k, B, T, hx, hy));
            if (ddp) TRY(amp_ddp_set_sync(ddp, k + 1 == a->accumulate));
            TRY(amp_tensor_copy_from_host(x, hx + offset, bytes));
            TRY(amp_tensor_copy_from_host(y, hy + offset, bytes));
            TRY(lm_model_loss(sh, model, x, y, &loss));
            if (a->accumulate > 1) TRY(amp_div_scalar(loss, (float)a->accumulate, &loss));
            TRY(amp_backward(loss));
            TRY(amp_accumulate(loss_sum, loss));
        }
        float norm = 0, loss_v = 0;
        if (a->grad_clip > 0) TRY(amp_clip_grad_norm(opt, a->grad_clip, &norm));
        bool stepped = true;
        TRY(amp_step(opt, &stepped));
        TRY(amp_tensor_item(loss_sum, &loss_v)); /* waits for the step: its time is whole */
        double ranks_loss = loss_v;
        TRY(amp_comm_allreduce_sum_f64(comm, &ranks_loss, 1));
        loss_v = (float)(ranks_loss / world);
        amp_op_profile prof;
        amp_profile_end(&prof);
        TRY(amp_zero_grad(opt));
        double dt = seconds_now() - t0, tokens = (double)(B * T * a->accumulate);
        double achieved = prof.flops[AMP_OPCAT_GEMM_CONV] / dt / 1e9;
        if (step > 0 && achieved > peak) { /* a peak is at least any rate reached: the start's
                                              measure met a busy machine */
            fprintf(text, "amp-train: the steps' GEMMs ran at %.1f GFLOP/s, above the peak "
                    "measured at start (%.1f): MFU is taken against the former from now on\n",
                    achieved, peak);
            peak = achieved;
        }
        double mfu = peak > 0 ? achieved / peak : 0;
        if (step > 0) total_s += dt, total_tok += tokens; /* the first step makes the plans */
        loss_avg = loss_v;
        amp_scaler_state sc;
        TRY(amp_scaler_get_state(opt, 0, &sc));
        float lr = amp_optimizer_lr(opt);
        bool log = a->log_every && ((step + 1) % a->log_every == 0 || step + 1 == max_steps);
        /* f32 values as %.9g (doubles as %.17g): each reads back to the same bits, so two
         * runs compare exactly from their logs. */
        if (log && a->json)
            printf("{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"norm\": %.9g, \"loss_scale\": "
                   "%.9g, \"skipped\": %s, \"ms\": %.2f, \"tokens_per_s\": %.1f, \"mfu\": %.4f}\n",
                   (long long)step + 1, (double)loss_v, (double)lr, (double)norm,
                   (double)sc.scale, stepped ? "false" : "true", dt * 1e3, tokens / dt, mfu);
        else if (log)
            printf("step %5lld/%lld | loss %.4f | lr %.2e | norm %.4f | scale %g%s | %.1f ms | "
                   "%.0f tok/s | MFU %.1f %%\n", (long long)step + 1, (long long)max_steps,
                   (double)loss_v, (double)lr, (double)norm, (double)sc.scale,
                   stepped ? "" : " (skipped)", dt * 1e3, tokens / dt, 100 * mfu);
        TRY(stop_signal_agree(comm, &stop, NULL)); /* SIGTERM: save after this step, exit 0 */
        bool eval_now = a->eval_every && (step + 1) % a->eval_every == 0;
        if (!stop && a->eval_batches > 0 && (eval_now || step + 1 == max_steps)) {
            TRY(evaluate(sh, model, comm, val, B, b, rank * b, T, a->eval_batches, x, y, hx, hy,
                         &val_loss));
            if (a->json) printf("{\"step\": %lld, \"val_loss\": %.17g}\n", (long long)step + 1, val_loss);
            else printf("step %5lld | val loss %.4f\n", (long long)step + 1, val_loss);
        }
        if (a->checkpoint_dir && a->save_every && (step + 1) % a->save_every == 0 && !stop)
            TRY(save(a, ddp, model, opt, &ckpt, sh, rank, step + 1, path, sizeof path));
        fflush(stdout);
    }
    if (a->checkpoint_dir && !a->eval_only) {
        TRY(save(a, ddp, model, opt, &ckpt, sh, rank, step, path, sizeof path));
        fprintf(text, "amp-train: saved %s%s\n", path, stop ? " (stopped by a signal)" : "");
    }
    if (stop) fprintf(text, "amp-train: stopped by a signal at step %lld\n", (long long)step);
    if (a->sample > 0 && rank == 0 && !stop) {
        fprintf(text, "amp-train: a sample of %lld tokens (temperature %g, top-k %d, seed %llu%s%s):"
                "\n", (long long)a->sample, (double)a->temperature, a->top_k,
                (unsigned long long)a->seed, a->tokenizer ? ", decoded by " : "",
                a->tokenizer ? a->tokenizer : "");
        TRY(sample(sh, model, tokenizer, prompt, n_prompt, a->start || a->start_ids, a->sample,
                   a->temperature, a->top_k, a->seed, text));
    }
    char val_json[32] = "null", train_json[32] = "null"; /* JSON has no NaN: a run stopped
                                                             before its evaluation, or no step */
    if (!isnan(val_loss)) snprintf(val_json, sizeof val_json, "%.17g", val_loss);
    if (!isnan(loss_avg)) snprintf(train_json, sizeof train_json, "%.9g", loss_avg);
    size_t peak_backend = 0;
    (void)amp_ctx_memory(ctx, NULL, &peak_backend);
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage); /* ru_maxrss: KiB on Linux */
    if (a->json)
        printf("{\"model\": \"%s\", \"steps\": %lld, \"train_loss\": %s, \"val_loss\": %s, "
               "\"tokens_per_sec\": %.1f, \"opt_level\": \"O%d\", \"half_type\": \"%s\", "
               "\"parameters\": %lld, \"peak_backend_mb\": %.1f, \"peak_rss_mb\": %.1f, "
               "\"world_size\": %d, \"batch_size\": %lld, \"accumulate\": %lld, "
               "\"recompute\": \"%s\", \"zero_stage\": %d, \"backend\": \"%s\", \"stopped\": %s}\n",
               a->model,
               (long long)step, train_json, val_json,
               total_s > 0 ? total_tok / total_s : 0.0, a->opt_level,
               a->opt_level ? (a->bf16 ? "bf16" : "fp16") : "none",
               (long long)lm_model_n_params(sh, model), (double)peak_backend / 1048576.0,
               (double)usage.ru_maxrss / 1024.0, world, (long long)B, (long long)a->accumulate,
               a->recompute == AMP_RECOMPUTE_FULL        ? "full"
               : a->recompute == AMP_RECOMPUTE_SELECTIVE ? "selective"
                                                         : "none",
               amp_ddp_zero_stage(ddp), amp_ctx_backend_name(ctx), stop ? "true" : "false");
    exit_code = 0;
fail:
    if (exit_code && amp_comm_is_distributed(comm)) amp_comm_abort(comm, exit_code); /* peers wait */
    amp_ddp_free(ddp);
    free(hx);
    free(hy);
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_tensor_free(loss_sum);
    amp_optimizer_free(opt);
    amp_model_free(model);
    amp_tokens_free(train);
    amp_tokens_free(val);
    amp_tokenizer_free(tokenizer);
    free(prompt);
    amp_ctx_free(ctx);
    amp_comm_free(comm);
    free(sh);
    return exit_code;
}
