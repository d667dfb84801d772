/* The GPT of models/gpt.c against PyTorch (tests/ref/gen_gpt_ref.py's oracle in
 * tests/data, read without torch: a tiny GPT-2, 2 layers, 2 heads, 64 wide, T 32, vocab 256,
 * batch 4), on the CPU and, when one answers (the cudacpu build, a GPU), on CUDA:
 *  - the initial weights load with amp_model_load_weights, which is strict: the model's names and
 *    shapes are nanoGPT's state_dict's (lm_head.weight tied, not stored);
 *  - O0: logits within 1e-5 of |logits|max, the loss within 1e-5 relative, every parameter's
 *    gradient within 1e-4 relative in norm (||g - g_ref|| / ||g_ref||), the tied wte.weight
 *    gathering the head's and the embedding's parts;
 *  - 10 AdamW steps on the batch (nanoGPT's groups: decay 0.1 on 2-D tensors only, betas (0.9,
 *    0.95)): O0 losses within 1e-4 relative of torch's float32 losses; O1-bf16 within 2e-3 of
 *    torch.autocast(bfloat16)'s, O1-fp16 (the dynamic scaler) within 1e-3 and O2-bf16 (f32
 *    masters, the norms f32) within 2e-3 of the float32 losses, each falling by more than 10 %
 *    over the 10 steps as torch's do. The bounds are in units of the half type's rounding, as
 *    the two sides round other tensors to half (CPU autocast casts other ops than CUDA's lists,
 *    which O1 follows; O2 runs every op in half): a loss within half a bf16 rounding (u = 2^-8,
 *    so 2e-3) or two f16 roundings (u = 2^-11, so 1e-3) of the reference is rounding, and the
 *    model is smooth (GELU, LayerNorm, softmax: no kink for a rounding to flip), so training
 *    carries such differences at its own rate whatever the CPU; at O0 both sides are f32 with
 *    other summation orders, far under 1e-4. A planted 10 % error in the learning rate at O0
 *    moves the losses by more than every bound (a control: the comparison can fail). The
 *    distances are printed (what one CPU gave belongs in bench/results/, not here);
 *  - CUDA's 10 losses at each level against the CPU's, step by step: 1e-4 relative at O0, 2e-3
 *    in half precision;
 *  - GPT-2's initialisation drawn by the model itself: N(0, 0.02) weights, the residual
 *    projections N(0, 0.02 / sqrt(2 n_layer)), zero biases, LayerNorms 1 and 0;
 *  - a vocabulary padded for the GEMMs: the loss over the real columns only, the padded rows of
 *    wte.weight without gradient; sampling's forward (the last position's logits only) gives
 *    the whole forward's last row;
 *  - the sampler's draws: every seed's first well spread, top-k and temperature's frequencies;
 *  - bad input: a configuration, ids of another dtype, a sequence longer than block_size: errors
 *    naming GPT and the culprit. */
#include <math.h>
#include <string.h>

#include "amp/amp.h"
#include "core/backend.h"
#include "lm_parity.h"

#define NAME "test_gpt"
enum { B = 4, T = 32, V = 256, STEPS = 10 };

static const amp_gpt_config TINY = {.n_layer = 2, .n_head = 2, .n_embd = 64, .block_size = 32,
                                .vocab_size = 256};

static char g_dir[512];
static amp_st_reader *g_ref;

static const char *data_path(const char *file) {
    static char path[640];
    snprintf(path, sizeof path, "%s/%s", g_dir, file);
    return path;
}

static void *ref_copy(const char *name, int64_t n) { return lm_ref_copy(g_ref, name, n); }

typedef struct run {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_tensor *idx, *targets;
} run;

/* The tiny GPT with the reference's initial weights and batch on `dev`; with opt, nanoGPT's
 * AdamW groups, and amp_initialize at `o` unless it is NULL. */
static bool run_make(run *r, amp_device dev, bool with_opt, const amp_options *o) {
    memset(r, 0, sizeof *r);
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = dev, .seed = 5}, &r->ctx));
    if (!r->ctx) return false;
    CHECK_OK(amp_gpt_create(r->ctx, &TINY, &r->m));
    if (!r->m) return false;
    CHECK_OK(amp_model_build(r->m));
    if (with_opt) {
        CHECK_OK(amp_lm_adamw_create(r->m, 1e-3f, 0.1f, &r->opt));
        if (r->opt && o) CHECK_OK(amp_initialize_ex(r->m, r->opt, o));
    }
    CHECK_OK(amp_model_load_weights(r->m, r->opt, data_path("gpt_tiny_weights.safetensors")));
    int32_t *idx = ref_copy("idx", B * T), *tg = ref_copy("targets", B * T);
    if (idx && tg) {
        CHECK_OK(amp_tensor_from_host(r->ctx, AMP_I32, 2, (const int64_t[]){B, T}, idx, &r->idx));
        CHECK_OK(amp_tensor_from_host(r->ctx, AMP_I32, 2, (const int64_t[]){B, T}, tg, &r->targets));
    }
    free(idx);
    free(tg);
    return r->idx && r->targets && (!with_opt || r->opt);
}

static void run_free(run *r) {
    amp_tensor_free(r->idx);
    amp_tensor_free(r->targets);
    amp_optimizer_free(r->opt);
    amp_model_free(r->m);
    amp_ctx_free(r->ctx);
}

/* O0 forward and backward against torch's logits, loss and gradients. */
static void test_o0_parity(amp_device dev, const char *dn) {
    run r;
    if (!run_make(&r, dev, false, NULL)) return run_free(&r);
    amp_tensor *logits = NULL, *loss = NULL;
    CHECK_OK(amp_model_forward(r.m, r.idx, &logits));
    float *want = ref_copy("logits", B * T * V), *got = malloc(sizeof(float) * B * T * V);
    if (logits && want && got) {
        CHECK(amp_tensor_ndim(logits) == 3 && amp_tensor_dim(logits, 2) == V);
        CHECK_OK(amp_tensor_to_host(logits, got, sizeof(float) * B * T * V));
        double worst = 0, top = 0;
        for (int i = 0; i < B * T * V; i++) {
            worst = fmax(worst, fabs((double)got[i] - want[i]));
            top = fmax(top, fabs((double)want[i]));
        }
        CHECK_MSG(worst <= 1e-5 * top, "%s: logits off by %.3g (largest %.3g)", dn, worst, top);
    }
    free(want);
    free(got);
    amp_ctx_reset_step(r.ctx);
    CHECK_OK(amp_gpt_loss(r.m, r.idx, r.targets, &loss));
    float *ref_loss = ref_copy("loss", 1);
    if (loss && ref_loss) {
        float l = lm_scalar(loss);
        CHECK_MSG(fabs(l - ref_loss[0]) <= 1e-5 * fabs(ref_loss[0]), "%s: loss %.9g, torch %.9g",
                  dn, (double)l, (double)ref_loss[0]);
        printf("%s O0: loss %.7f, torch %.7f\n", dn, (double)l, (double)ref_loss[0]);
    }
    free(ref_loss);
    if (loss) CHECK_OK(amp_backward(loss));
    char label[48];
    snprintf(label, sizeof label, "%s O0", dn);
    lm_check_grads(r.m, g_ref, 1e-4, label);
    run_free(&r);
}

/* Runs the 10 AdamW steps on the batch at `o` (NULL: O0), holds their losses to torch's `ref`
 * within tol, and returns them in out. lr_factor != 1 plants an error in the learning rate and
 * wants the losses FURTHER than tol from torch's (a control). */
static void test_steps(amp_device dev, const char *dn, const char *label, const amp_options *o,
                       const char *ref, double tol, float lr_factor, float *out) {
    run r;
    if (!run_make(&r, dev, true, o)) return run_free(&r);
    if (lr_factor != 1.0f) CHECK_OK(amp_optimizer_set_lr(r.opt, 1e-3f * lr_factor));
    float *want = ref_copy(ref, STEPS), got[STEPS] = {0};
    lm_train_steps(r.m, r.opt, o != NULL, amp_gpt_loss, r.idx, r.targets, STEPS, got);
    double worst = 0;
    for (int s = 0; want && s < STEPS; s++) worst = fmax(worst, fabs(got[s] - want[s]) / want[s]);
    if (lr_factor != 1.0f) {
        CHECK_MSG(want && worst > tol, "%s %s: a planted lr error of %g went unseen: the losses "
                  "are within %.3g of torch's %s (%.3g)", dn, label, (double)(lr_factor - 1.0f),
                  tol, ref, worst);
    } else {
        CHECK_MSG(worst <= tol, "%s %s: the losses differ from torch's %s by %.3g relative "
                  "(> %.3g)", dn, label, ref, worst, tol);
    }
    CHECK_MSG(got[STEPS - 1] < 0.9f * got[0], "%s %s: the loss went %.4f -> %.4f", dn, label,
              (double)got[0], (double)got[STEPS - 1]);
    printf("%s %-9s losses %.7f ... %.7f, torch %s %.7f ... %.7f: worst %.3g relative\n", dn,
           label, (double)got[0], (double)got[STEPS - 1], ref, want ? (double)want[0] : 0.0,
           want ? (double)want[STEPS - 1] : 0.0, worst);
    memcpy(out, got, sizeof got);
    free(want);
    run_free(&r);
}

/* The model's own draws: GPT-2's init, measured over each tensor. */
static void test_init(void) {
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 17}, &ctx));
    amp_gpt_config cfg = {.n_layer = 4, .n_head = 4, .n_embd = 128, .block_size = 64, .vocab_size = 300};
    CHECK_OK(amp_gpt_create(ctx, &cfg, &m));
    if (!m) return amp_ctx_free(ctx);
    CHECK_OK(amp_model_build(m));
    amp_tensor *wte = NULL;
    CHECK_OK(amp_model_find(m, "transformer.wte.weight", &wte));
    CHECK(wte && amp_tensor_dim(wte, 0) == 320); /* 300 padded to a multiple of 64 */
    for (int i = 0; i < amp_model_n_params(m); i++) {
        amp_tensor *p = amp_model_param(m, i);
        const char *name = amp_model_param_name(m, i);
        int64_t n = amp_tensor_numel(p);
        float *v = malloc((size_t)n * sizeof *v);
        CHECK_OK(amp_tensor_to_host(p, v, (size_t)n * sizeof *v));
        double s = 0, s2 = 0;
        for (int64_t j = 0; j < n; j++) s += v[j], s2 += (double)v[j] * v[j];
        double mean = s / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
        bool ln = strstr(name, "ln_") != NULL, bias = strstr(name, ".bias") != NULL;
        double want_sd = strstr(name, "c_proj.weight") ? 0.02 / sqrt(8.0) : 0.02;
        if (ln && !bias) CHECK_MSG(mean == 1.0 && sd == 0.0, "%s: mean %g sd %g", name, mean, sd);
        else if (bias) CHECK_MSG(mean == 0.0 && sd == 0.0, "%s: mean %g sd %g", name, mean, sd);
        else CHECK_MSG(fabs(sd - want_sd) < 0.05 * want_sd && fabs(mean) < 4 * want_sd / sqrt((double)n),
                       "%s: mean %g sd %g, want N(0, %g)", name, mean, sd, want_sd);
        free(v);
    }
    CHECK(amp_gpt_n_params(m) == amp_model_numel(m) - 64 * 128);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

/* A vocabulary padded for the GEMMs (200 -> 256): the loss is the cross-entropy over the 200
 * real columns of the logits (to 1e-5 relative of a float64 one over them), and the padded rows
 * of wte.weight get exactly no gradient (no padded id is embedded, no padded logit scored). */
static void test_padded_vocab(void) {
    enum { PB = 2, PT = 16, PV = 200, PVP = 256 };
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 5}, &ctx));
    amp_gpt_config cfg = {.n_layer = 1, .n_head = 2, .n_embd = 32, .block_size = PT, .vocab_size = PV};
    CHECK_OK(amp_gpt_create(ctx, &cfg, &m));
    if (!m) return amp_ctx_free(ctx);
    CHECK_OK(amp_model_build(m));
    int32_t ids[PB * PT], next[PB * PT];
    for (int i = 0; i < PB * PT; i++) ids[i] = (i * 37 + 11) % PV, next[i] = (i * 53 + 199) % PV;
    /* generation reads the padded logits' rows and draws from the real vocabulary, either way */
    int32_t drawn[2][8];
    amp_lm_sample_opts so = {.temperature = 1.0f, .seed = 3};
    for (int cached = 0; cached < 2; cached++) {
        CHECK_OK(amp_gpt_generate(m, ids, 4, 8, &so, cached, drawn[cached]));
        for (int i = 0; i < 8; i++) CHECK(drawn[cached][i] >= 0 && drawn[cached][i] < PV);
    }
    CHECK_MSG(!memcmp(drawn[0], drawn[1], sizeof drawn[0]), "padded vocabulary: the cached "
              "sampler drew other tokens");
    amp_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL, *wte = NULL, *g = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 2, (const int64_t[]){PB, PT}, ids, &x));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 2, (const int64_t[]){PB, PT}, next, &y));
    static float z[PB * PT * PVP], dw[PVP * 32];
    CHECK_OK(amp_model_forward(m, x, &logits));
    CHECK(logits && amp_tensor_dim(logits, 2) == PVP);
    CHECK_OK(amp_tensor_to_host(logits, z, sizeof z));
    amp_ctx_reset_step(ctx);
    /* Sampling's forward: the last position's logits only, those of the whole forward's last
     * row (to the rounding of a GEMM of other rows), then the whole forward again. */
    static float last[PB * PVP];
    CHECK_OK(amp_gpt_forward_last(m, x, &logits));
    CHECK(logits && amp_tensor_dim(logits, 0) == PB && amp_tensor_dim(logits, 1) == 1 &&
          amp_tensor_dim(logits, 2) == PVP);
    CHECK_OK(amp_tensor_to_host(logits, last, sizeof last));
    amp_ctx_reset_step(ctx);
    double worst = 0, top = 0;
    for (int b = 0; b < PB; b++)
        for (int j = 0; j < PVP; j++) {
            float full = z[((size_t)b * PT + PT - 1) * PVP + j];
            worst = fmax(worst, fabs(last[b * PVP + j] - full));
            top = fmax(top, fabs(full));
        }
    CHECK_MSG(worst <= 1e-5 * top, "gpt_forward_last: %.3g off the whole forward's last row "
              "(max %.3g)", worst, top);
    CHECK_OK(amp_model_forward(m, x, &logits));
    CHECK(logits && amp_tensor_dim(logits, 1) == PT);
    amp_ctx_reset_step(ctx);
    double total = 0;
    for (int r = 0; r < PB * PT; r++) {
        const float *row = z + (size_t)r * PVP;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < PV; j++) mx = fmax(mx, row[j]);
        for (int j = 0; j < PV; j++) sum += exp(row[j] - mx);
        total += mx + log(sum) - row[next[r]];
    }
    double want = total / (PB * PT);
    CHECK_OK(amp_gpt_loss(m, x, y, &loss));
    float got = lm_scalar(loss);
    CHECK_MSG(fabs(got - want) <= 1e-5 * want, "padded vocabulary: loss %.7f, want %.7f over "
              "the %d real columns", (double)got, want, PV);
    CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_model_find(m, "transformer.wte.weight", &wte));
    CHECK_OK(amp_tensor_get_grad(wte, &g));
    CHECK_OK(amp_tensor_to_host(g, dw, sizeof dw));
    int nonzero_pad = 0, nonzero_real = 0;
    for (int i = 0; i < PVP * 32; i++)
        if (dw[i] != 0.0f) i >= PV * 32 ? nonzero_pad++ : nonzero_real++;
    CHECK_MSG(nonzero_pad == 0 && nonzero_real > 0, "padded vocabulary: %d gradients of padded "
              "wte rows are not 0 (%d of real rows are)", nonzero_pad, nonzero_real);
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

/* amp_lm_draw's token (the test fails where it fails). */
static int32_t draw(const float *logits, int64_t vocab, float temperature, int top_k,
                    uint64_t *state) {
    int32_t id = -1;
    CHECK_OK(amp_lm_draw(logits, vocab, temperature, top_k, state, &id));
    return id;
}

/* The sampler's draw (amp_lm_draw): the first draw of every seed, the default 0 included, spread
 * over flat logits (chi-square over 4096 seeds; 0 once drew the first class every time), never a
 * padded id, top-k keeping only the k largest, the frequencies softmax(logits / temperature). */
static void test_draw(void) {
    enum { NV = 256, NPAD = 8, SEEDS = 4096 };
    float flat[NV + NPAD];
    for (int i = 0; i < NV + NPAD; i++) flat[i] = i < NV ? 0.0f : 100.0f; /* padding: never */
    int count[NV] = {0}, beyond = 0;
    for (uint64_t seed = 0; seed < SEEDS; seed++) {
        uint64_t st = seed;
        int32_t id = draw(flat, NV, 1.0f, 0, &st);
        if (id < 0 || id >= NV) beyond++;
        else count[id]++;
    }
    double chi2 = 0, expect = (double)SEEDS / NV;
    for (int i = 0; i < NV; i++) chi2 += (count[i] - expect) * (count[i] - expect) / expect;
    CHECK_MSG(beyond == 0 && chi2 < 350.0, "first draws over %d seeds: chi-square %.1f over %d "
              "classes (want < 350), %d outside", SEEDS, chi2, NV, beyond);
    uint64_t st0 = 0;
    CHECK_MSG(draw(flat, NV, 1.0f, 0, &st0) != 0, "seed 0 draws the first class first");
    /* top-k and temperature: logits 0, ln 3, -1, -2: top 2 keeps ids 0 and 1 in 1 : 3 at T = 1,
     * 1 : 9 at T = 0.5; top 1 is the argmax */
    const float l4[4] = {0.0f, logf(3.0f), -1.0f, -2.0f};
    uint64_t st = 42;
    int ones = 0, others = 0, argmax_miss = 0;
    for (int i = 0; i < 20000; i++) {
        int32_t id = draw(l4, 4, 1.0f, 2, &st);
        ones += id == 1, others += id > 1;
        argmax_miss += draw(l4, 4, 1.0f, 1, &st) != 1;
    }
    double f = ones / 20000.0, sd = sqrt(0.75 * 0.25 / 20000.0);
    CHECK_MSG(others == 0 && argmax_miss == 0 && fabs(f - 0.75) < 4 * sd,
              "top-2 at T 1: id 1 drawn %.4f of the time (want 0.75), %d outside the top 2, "
              "top-1 missed the argmax %d times", f, others, argmax_miss);
    ones = 0;
    for (int i = 0; i < 20000; i++) ones += draw(l4, 4, 0.5f, 2, &st) == 1;
    f = ones / 20000.0, sd = sqrt(0.9 * 0.1 / 20000.0);
    CHECK_MSG(fabs(f - 0.9) < 4 * sd, "top-2 at T 0.5: id 1 drawn %.4f of the time (want 0.9)", f);
    /* nothing to draw from, or no temperature: refused, the state and token untouched */
    const float bad[3] = {0.0f, NAN, 1.0f}, none[2] = {-INFINITY, -INFINITY};
    uint64_t before = st;
    int32_t id = 7;
    CHECK_FAILS(amp_lm_draw(bad, 3, 1.0f, 0, &st, &id), AMP_ERR_INVALID_ARG, "hold a NaN");
    CHECK_FAILS(amp_lm_draw(none, 2, 1.0f, 0, &st, &id), AMP_ERR_INVALID_ARG, "none of the logits is above -inf");
    CHECK_FAILS(amp_lm_draw(l4, 4, 0.0f, 0, &st, &id), AMP_ERR_INVALID_ARG, "temperature 0");
    CHECK_FAILS(amp_lm_draw(l4, 4, 1.0f, -1, &st, &id), AMP_ERR_INVALID_ARG, "top_k -1");
    CHECK_MSG(st == before && id == 7, "a refused draw changed the state or the token");
}

static void test_errors(void) {
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &ctx));
    amp_gpt_config bad = TINY;
    bad.n_head = 3;
    CHECK_FAILS(amp_gpt_create(ctx, &bad, &m), AMP_ERR_INVALID_ARG, "amp_gpt_create: n_embd 64 is not a positive multiple of n_head 3");
    bad = TINY, bad.dropout = 1.0f;
    CHECK_FAILS(amp_gpt_create(ctx, &bad, &m), AMP_ERR_INVALID_ARG, "amp_gpt_create: dropout 1 is outside [0, 1)");
    bad = TINY, bad.n_layer = 0;
    CHECK_FAILS(amp_gpt_create(ctx, &bad, &m), AMP_ERR_INVALID_ARG, "amp_gpt_create: n_layer 0");
    CHECK_OK(amp_gpt_create(ctx, &TINY, &m));
    if (m) CHECK_OK(amp_model_build(m));
    amp_tensor *f = NULL, *longer = NULL, *y = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){2, 8}, &f));
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 2, (const int64_t[]){1, 33}, &longer));
    if (m && f && longer) {
        CHECK_FAILS(amp_model_forward(m, f, &y), AMP_ERR_SHAPE, "GPT forward (amp_model_forward): the input must be one i32 tensor");
        CHECK_FAILS(amp_model_forward(m, longer, &y), AMP_ERR_SHAPE,
                    "GPT forward (amp_model_forward): sequence length 33 is outside [1, block_size = 32]");
    }
    amp_tensor_free(f);
    amp_tensor_free(longer);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

/* Each level's 10 losses on the CPU, which CUDA's are held to step by step. */
/* Generation: the cached forward's last logits against full forwards' (a prompt of 9, then 3
 * single steps), and the same tokens drawn with and without the cache for a seed. */
static void test_generate(amp_device dev, const char *dn) {
    run r;
    if (!run_make(&r, dev, false, NULL)) return run_free(&r);
    int32_t *idx = ref_copy("idx", B * T);
    amp_lm_cache *c = NULL;
    CHECK_OK(amp_lm_cache_create(r.ctx, TINY.n_layer, TINY.block_size, &c));
    bool grad = amp_set_grad_enabled(r.ctx, false);
    amp_model_train(r.m, false);
    double worst = 0;
    for (int64_t len = 9; idx && c && len <= 12; len++) {
        float got[V], want[V];
        amp_tensor *xn = NULL, *xf = NULL, *lc = NULL, *lf = NULL;
        int64_t from = len == 9 ? 0 : len - 1;
        CHECK_OK(amp_tensor_from_host(r.ctx, AMP_I32, 2, (const int64_t[]){1, len - from},
                                      idx + from, &xn));
        CHECK_OK(amp_gpt_forward_cached(r.m, c, xn, &lc));
        if (lc) CHECK_OK(amp_tensor_to_host_f32(lc, got, sizeof got));
        CHECK_OK(amp_tensor_from_host(r.ctx, AMP_I32, 2, (const int64_t[]){1, len}, idx, &xf));
        CHECK_OK(amp_gpt_forward_last(r.m, xf, &lf));
        if (lf) CHECK_OK(amp_tensor_to_host_f32(lf, want, sizeof want));
        double top = 0, d = 0;
        for (int i = 0; i < V; i++) top = fmax(top, fabs(want[i])), d = fmax(d, fabs(got[i] - want[i]));
        worst = fmax(worst, d / top);
        amp_tensor_free(xn);
        amp_tensor_free(xf);
        amp_ctx_reset_step(r.ctx);
    }
    CHECK_MSG(worst <= 1e-5, "%s: the cached forward's logits are %.3g off the full forward's",
              dn, worst);
    amp_set_grad_enabled(r.ctx, grad);
    amp_lm_cache_free(c);
    int32_t a[20], b[20];
    amp_lm_sample_opts so = {.temperature = 1.0f, .top_k = 40, .seed = 11};
    if (idx) {
        CHECK_OK(amp_gpt_generate(r.m, idx, 8, 20, &so, true, a));
        CHECK_OK(amp_gpt_generate(r.m, idx, 8, 20, &so, false, b));
        CHECK_MSG(!memcmp(a, b, sizeof a), "%s: the cached sampler drew other tokens", dn);
        CHECK_FAILS(amp_gpt_generate(r.m, idx, 30, 5, &so, true, a), AMP_ERR_INVALID_ARG,
                    "past block_size = 32");
    }
    free(idx);
    run_free(&r);
}

static float g_cpu_losses[4][STEPS];

static void run_device(amp_device dev, const char *dn) {
    static const char *labels[4] = {"O0", "O1-bf16", "O1-fp16", "O2-bf16"};
    static const char *refs[4] = {"losses_f32", "losses_bf16", "losses_f32", "losses_f32"};
    /* torch's bounds (the header); CUDA against the CPU: 1e-4 at O0, 2e-3 in half precision */
    static const double tol[4] = {1e-4, 2e-3, 1e-3, 2e-3}, cpu_tol[4] = {1e-4, 2e-3, 2e-3, 2e-3};
    const amp_options opts[4] = {
        {0},
        {.opt_level = AMP_O1, .half_type = AMP_HALF_BF16, .quiet = true},
        {.opt_level = AMP_O1, .half_type = AMP_HALF_F16, .quiet = true},
        {.opt_level = AMP_O2, .half_type = AMP_HALF_BF16, .quiet = true},
    };
    test_o0_parity(dev, dn);
    test_generate(dev, dn);
    /* the control: O0 at 1.1 times the learning rate, against the largest bound */
    float control[STEPS];
    test_steps(dev, dn, "control: O0, lr x 1.1", NULL, "losses_f32", 2e-3, 1.1f, control);
    for (int l = 0; l < 4; l++) {
        float got[STEPS] = {0};
        test_steps(dev, dn, labels[l], l ? &opts[l] : NULL, refs[l], tol[l], 1.0f, got);
        if (dev == AMP_DEVICE_CPU) {
            memcpy(g_cpu_losses[l], got, sizeof got);
            continue;
        }
        double worst = 0;
        for (int s = 0; s < STEPS; s++)
            worst = fmax(worst, fabs(got[s] - g_cpu_losses[l][s]) / g_cpu_losses[l][s]);
        CHECK_MSG(worst <= cpu_tol[l], "%s %s: the losses differ from the CPU's by %.3g relative "
                  "(> %.3g)", dn, labels[l], worst, cpu_tol[l]);
        printf("%s %-9s against the CPU's losses step by step: worst %.3g relative\n", dn,
               labels[l], worst);
    }
}

int main(void) {
    const char *dir = getenv("AMP_TEST_DATA");
    snprintf(g_dir, sizeof g_dir, "%s", dir ? dir : "tests/data");
    if (amp_st_reader_open(data_path("gpt_tiny_ref.safetensors"), &g_ref) != AMP_OK) {
        CHECK_MSG(false, "cannot read the reference: %s", amp_last_error());
        return test_summary(NAME);
    }
    test_init();
    test_errors();
    test_padded_vocab();
    test_draw();
    run_device(AMP_DEVICE_CPU, "cpu");
    if (amp_backend_cuda()) run_device(AMP_DEVICE_CUDA, "cuda");
    else printf(NAME ": no CUDA backend (%s): the CPU only\n", amp_last_error());
    amp_st_reader_free(g_ref);
    return test_summary(NAME);
}
