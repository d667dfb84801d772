/* The Llama of models/llama.c against Hugging Face transformers' LlamaForCausalLM
 * (tests/ref/gen_llama_ref.py's oracle in tests/data/llama_tiny_<variant>/: the folder
 * save_pretrained wrote, loaded as it is, and ref.safetensors), for the three variants (base;
 * Llama 3.1 rope scaling with a tied head; attention_bias), on every device that answers:
 *  - O0: logits within 1e-5 of the largest, the loss within 1e-5 relative, every gradient
 *    within 1e-4 (norm-wise), 10 AdamW steps' losses within 1e-4 relative;
 *  - O1 bf16: the 10 losses within 2e-3 relative of torch.autocast(bfloat16)'s (the GPT's bound,
 *    test_gpt.c derives it: half a bf16 rounding of the loss; measured 5e-5 to 1.1e-4 here,
 *    bench/results), where an lr 10 % off moves the O0 losses by over 1e-2: the control, which
 *    must fall outside 2e-3;
 *  - O1 fp16 (the dynamic scaler) within 1e-3 of the float32 losses (two f16 roundings of the
 *    loss, u = 2^-11) and O2 bf16 (f32 masters, the RMSNorms f32, every other op in bf16)
 *    within 2e-3 of them: transformers has no O2 and CPU autocast has no fp16 lists matching
 *    O1's, so both are held to float32 training, the model being smooth (SiLU, RMSNorm,
 *    softmax: no kink for a rounding to flip), as test_gpt.c argues for the GPT;
 *  - bad configs refused, naming the field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/backend.h"
#include "lm_parity.h"

#define NAME "test_llama"
enum { B = 4, T = 32, V = 256, STEPS = 10 };

typedef struct variant {
    const char *name;
    amp_llama_config cfg;
} variant;

#define TINY                                                                                   \
    .vocab_size = 256, .hidden_size = 64, .intermediate_size = 176, .num_hidden_layers = 2,   \
    .num_attention_heads = 4, .num_key_value_heads = 2, .max_position_embeddings = 64,        \
    .rms_norm_eps = 1e-5f, .rope_theta = 10000.0f
static const variant VARIANTS[] = {
    {"base", {TINY}},
    {"llama3", {TINY, .rope_type = AMP_ROPE_LLAMA3, .rope_factor = 8.0f,
                .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f,
                .rope_original_max_position_embeddings = 16, .tie_word_embeddings = true}},
    {"bias", {TINY, .attention_bias = true}},
};

static char g_dir[512];
static amp_st_reader *g_ref;
static const variant *g_v;

static const char *data_path(const char *file) {
    static char path[700];
    snprintf(path, sizeof path, "%s/llama_tiny_%s/%s", g_dir, g_v->name, file);
    return path;
}

static void *ref_copy(const char *name, int64_t n) { return lm_ref_copy(g_ref, name, n); }

typedef struct run {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_tensor *idx, *targets;
} run;

/* The variant's Llama with Hugging Face's weights (its model.safetensors as it is) and the
 * reference batch; with opt the LM AdamW groups, and amp_initialize at o unless NULL. */
static bool run_make(run *r, amp_device dev, bool with_opt, const amp_options *o) {
    memset(r, 0, sizeof *r);
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = dev, .seed = 5}, &r->ctx));
    if (!r->ctx) return false;
    CHECK_OK(amp_llama_create(r->ctx, &g_v->cfg, &r->m));
    if (!r->m) return false;
    CHECK_OK(amp_model_build(r->m));
    if (with_opt) {
        CHECK_OK(amp_lm_adamw_create(r->m, 1e-3f, 0.1f, &r->opt));
        if (r->opt && o) CHECK_OK(amp_initialize_ex(r->m, r->opt, o));
    }
    CHECK_OK(amp_model_load_weights(r->m, r->opt, data_path("model.safetensors")));
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
        CHECK_MSG(worst <= 1e-5 * top, "%s %s: logits off by %.3g (largest %.3g)", dn, g_v->name,
                  worst, top);
    }
    free(want);
    free(got);
    amp_ctx_reset_step(r.ctx);
    CHECK_OK(amp_llama_loss(r.m, r.idx, r.targets, &loss));
    float *ref_loss = ref_copy("loss", 1);
    if (loss && ref_loss) {
        float l = lm_scalar(loss);
        CHECK_MSG(fabs(l - ref_loss[0]) <= 1e-5 * fabs(ref_loss[0]), "%s %s: loss %.9g, "
                  "transformers %.9g", dn, g_v->name, (double)l, (double)ref_loss[0]);
        printf("%s %s O0: loss %.7f, transformers %.7f\n", dn, g_v->name, (double)l,
               (double)ref_loss[0]);
    }
    free(ref_loss);
    if (loss) CHECK_OK(amp_backward(loss));
    char label[64];
    snprintf(label, sizeof label, "%s %s O0", dn, g_v->name);
    lm_check_grads(r.m, g_ref, 1e-4, label);
    run_free(&r);
}

/* The 10 AdamW steps at o (NULL: O0) against the reference's losses `ref` within tol; with
 * lr_factor != 1 the losses must fall FURTHER than tol from them (the control). */
static void test_steps(amp_device dev, const char *dn, const char *label, const amp_options *o,
                       const char *ref, double tol, float lr_factor) {
    run r;
    if (!run_make(&r, dev, true, o)) return run_free(&r);
    if (lr_factor != 1.0f) CHECK_OK(amp_optimizer_set_lr(r.opt, 1e-3f * lr_factor));
    float *want = ref_copy(ref, STEPS), got[STEPS] = {0};
    lm_train_steps(r.m, r.opt, o != NULL, amp_llama_loss, r.idx, r.targets, STEPS, got);
    double worst = 0;
    for (int s = 0; want && s < STEPS; s++) worst = fmax(worst, fabs(got[s] - want[s]) / want[s]);
    if (lr_factor != 1.0f)
        CHECK_MSG(want && worst > tol, "%s %s %s: a planted lr error went unseen (%.3g <= %.3g)",
                  dn, g_v->name, label, worst, tol);
    else
        CHECK_MSG(worst <= tol, "%s %s %s: the losses differ from transformers' %s by %.3g "
                  "relative (> %.3g)", dn, g_v->name, label, ref, worst, tol);
    printf("%s %s %-9s losses %.7f ... %.7f, transformers %.7f ... %.7f: worst %.3g relative\n",
           dn, g_v->name, label, (double)got[0], (double)got[STEPS - 1],
           want ? (double)want[0] : 0.0, want ? (double)want[STEPS - 1] : 0.0, worst);
    free(want);
    run_free(&r);
}

static void run_device(amp_device dev, const char *dn) {
    test_o0_parity(dev, dn);
    test_steps(dev, dn, "O0", NULL, "losses_f32", 1e-4, 1.0f);
    test_steps(dev, dn, "O0 lr+10%", NULL, "losses_f32", 2e-3, 1.1f);
    const amp_options o1 = {.opt_level = AMP_O1, .half_type = AMP_HALF_BF16, .quiet = true};
    test_steps(dev, dn, "O1 bf16", &o1, "losses_bf16", 2e-3, 1.0f);
    const amp_options o1h = {.opt_level = AMP_O1, .half_type = AMP_HALF_F16, .quiet = true};
    test_steps(dev, dn, "O1 fp16", &o1h, "losses_f32", 1e-3, 1.0f);
    const amp_options o2 = {.opt_level = AMP_O2, .half_type = AMP_HALF_BF16, .quiet = true};
    test_steps(dev, dn, "O2 bf16", &o2, "losses_f32", 2e-3, 1.0f);
}

/* The model's own draws, Hugging Face's init: every 2-D tensor N(0, 0.02) (its mean within 4
 * standard errors of 0, its standard deviation within 5 % of 0.02: 10^4 draws and more), the
 * norms' weights 1. */
static void test_init(void) {
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 17}, &ctx));
    CHECK_OK(amp_llama_create(ctx, &VARIANTS[0].cfg, &m));
    if (m) CHECK_OK(amp_model_build(m));
    for (int i = 0; m && i < amp_model_n_params(m); i++) {
        amp_tensor *p = amp_model_param(m, i);
        int64_t n = amp_tensor_numel(p);
        float *v = malloc((size_t)n * sizeof *v);
        CHECK_OK(amp_tensor_to_host(p, v, (size_t)n * sizeof *v));
        double sum = 0, sq = 0;
        for (int64_t j = 0; j < n; j++) sum += v[j], sq += (double)v[j] * v[j];
        double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
        if (amp_tensor_ndim(p) == 2)
            CHECK_MSG(fabs(mean) < 4 * 0.02 / sqrt((double)n) && fabs(sd - 0.02) < 1e-3,
                      "%s: mean %.3g, sd %.4g, want N(0, 0.02)", amp_model_param_name(m, i),
                      mean, sd);
        else
            CHECK_MSG(mean == 1.0 && sd == 0.0, "%s: want ones", amp_model_param_name(m, i));
        free(v);
    }
    CHECK(m && amp_llama_n_params(m) == amp_model_numel(m));
    amp_model_free(m);
    amp_ctx_free(ctx);
}

static void test_errors(void) {
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx));
    amp_llama_config c = VARIANTS[0].cfg;
    c.num_key_value_heads = 3;
    CHECK_FAILS(amp_llama_create(ctx, &c, &m), AMP_ERR_INVALID_ARG,
                "amp_llama_create: num_attention_heads = 4 is not a multiple of "
                "num_key_value_heads = 3");
    c = VARIANTS[0].cfg;
    c.intermediate_size = 0;
    CHECK_FAILS(amp_llama_create(ctx, &c, &m), AMP_ERR_INVALID_ARG, "intermediate_size = 0");
    c = VARIANTS[0].cfg;
    c.head_dim = 15;
    CHECK_FAILS(amp_llama_create(ctx, &c, &m), AMP_ERR_INVALID_ARG, "head_dim = 15");
    c = VARIANTS[1].cfg;
    c.rope_high_freq_factor = 0.5f;
    CHECK_FAILS(amp_llama_create(ctx, &c, &m), AMP_ERR_INVALID_ARG, "Llama 3 scaling");
    c = VARIANTS[0].cfg;
    c.rope_type = 7;
    CHECK_FAILS(amp_llama_create(ctx, &c, &m), AMP_ERR_INVALID_ARG, "type = 7");
    CHECK(m == NULL);
    /* a position past max_position_embeddings */
    CHECK_OK(amp_llama_create(ctx, &VARIANTS[0].cfg, &m));
    amp_tensor *idx = NULL, *y = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 2, (const int64_t[]){1, 65}, &idx));
    CHECK_FAILS(amp_model_forward(m, idx, &y), AMP_ERR_SHAPE,
                "sequence length 65 is outside [1, max_position_embeddings = 64]");
    CHECK_FAILS(amp_llama_loss(NULL, idx, idx, &y), AMP_ERR_INVALID_ARG, "not a Llama");
    amp_tensor_free(idx);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

/* Writes text to AMP_TEST_TMP/<name>/config.json (with the base variant's weights beside it
 * when weights) and returns the folder. */
static const char *tmp_folder(const char *name, const char *text, bool weights) {
    static char dir[600];
    const char *tmp = getenv("AMP_TEST_TMP");
    snprintf(dir, sizeof dir, "%s/test_llama_%s", tmp ? tmp : "/tmp", name);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    if (weights) {
        snprintf(cmd, sizeof cmd, "cp '%s/llama_tiny_base/model.safetensors' '%s/'", g_dir, dir);
        CHECK(system(cmd) == 0);
    }
    return dir;
}

static bool same_config(const amp_llama_config *a, const amp_llama_config *b) {
    return a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
           a->intermediate_size == b->intermediate_size &&
           a->num_hidden_layers == b->num_hidden_layers &&
           a->num_attention_heads == b->num_attention_heads &&
           a->num_key_value_heads == b->num_key_value_heads && a->head_dim == b->head_dim &&
           a->max_position_embeddings == b->max_position_embeddings &&
           a->rms_norm_eps == b->rms_norm_eps && a->rope_theta == b->rope_theta &&
           a->rope_type == b->rope_type && a->rope_factor == b->rope_factor &&
           a->rope_low_freq_factor == b->rope_low_freq_factor &&
           a->rope_high_freq_factor == b->rope_high_freq_factor &&
           a->rope_original_max_position_embeddings == b->rope_original_max_position_embeddings &&
           a->tie_word_embeddings == b->tie_word_embeddings &&
           a->attention_bias == b->attention_bias && a->attention_dropout == b->attention_dropout &&
           a->initializer_range == b->initializer_range;
}

/* config.json in both spellings: the folders transformers 5 wrote, and a 4.x config by hand
 * (rope_theta and rope_scaling at the top level, the older "type" key); then bad configs. */
static void test_config_json(void) {
    for (size_t v = 0; v < sizeof VARIANTS / sizeof VARIANTS[0]; v++) {
        amp_llama_config got, want = VARIANTS[v].cfg;
        char path[700];
        snprintf(path, sizeof path, "%s/llama_tiny_%s/config.json", g_dir, VARIANTS[v].name);
        CHECK_OK(amp_llama_config_load(path, &got));
        want.initializer_range = 0.02f; /* what the files carry besides the variants' fields */
        want.head_dim = 16;
        CHECK_MSG(same_config(&got, &want), "%s: config.json read as another config",
                  VARIANTS[v].name);
    }
    const char *v4 = "{\"model_type\": \"llama\", \"vocab_size\": 256, \"hidden_size\": 64,"
                     " \"intermediate_size\": 176, \"num_hidden_layers\": 2,"
                     " \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                     " \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-05,"
                     " \"rope_theta\": 10000, \"tie_word_embeddings\": true,"
                     " \"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8.0,"
                     " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
                     " \"original_max_position_embeddings\": 16}, \"torch_dtype\": \"float32\"}";
    amp_llama_config got, want = VARIANTS[1].cfg;
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", tmp_folder("v4", v4, false));
    CHECK_OK(amp_llama_config_load(path, &got));
    CHECK_MSG(same_config(&got, &want), "a transformers 4.x config.json read as another");
    /* refused, naming the field, and the config unchanged */
    const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"hidden_size\": \"64\"}", "'hidden_size' is a string, want an integer"},
        {"{\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}",
         "rope_parameters type 'yarn' is not supported"},
        {"{\"rope_scaling\": {\"type\": \"dynamic\"}}", "rope_scaling type 'dynamic'"},
        {"{\"model_type\": \"qwen2\"}", "model_type \"qwen2\" is not \"llama\""},
        {"{\"tie_word_embeddings\": 1}", "'tie_word_embeddings' is an integer, want true or false"},
        {"{\"rms_norm_eps\": null, \"rope_theta\": [1]}", "'rope_theta' is an array"},
        {"{\"hidden_size\": 64,", "config.json"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, "bad%zu", i);
        snprintf(path, sizeof path, "%s/config.json", tmp_folder(name, bad[i].text, false));
        amp_llama_config keep = VARIANTS[2].cfg;
        amp_status st = amp_llama_config_load(path, &keep);
        CHECK_MSG(st != AMP_OK && strstr(amp_last_error(), bad[i].want) &&
                      strstr(amp_last_error(), "amp_llama_config_load"),
                  "bad config %zu: status %d, '%s', want '%s'", i, (int)st, amp_last_error(),
                  bad[i].want);
        CHECK_MSG(same_config(&keep, &VARIANTS[2].cfg), "bad config %zu changed cfg", i);
    }
}

/* A Hugging Face folder as it is, one whose weights do not fit its config, a sharded one, and one
 * missing a shard. */
static void test_from_pretrained(void) {
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &ctx));
    char dir[600];
    snprintf(dir, sizeof dir, "%s/llama_tiny_bias", g_dir);
    CHECK_OK(amp_llama_from_pretrained(ctx, dir, &m));
    amp_tensor *b = NULL;
    CHECK_OK(amp_model_find(m, "model.layers.1.self_attn.v_proj.bias", &b));
    amp_model_free(m);
    m = NULL;
    char text[700];
    snprintf(text, sizeof text, "{\"vocab_size\": 256, \"hidden_size\": 64, \"intermediate_size\": "
             "160, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": "
             "2, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-05}");
    CHECK_FAILS(amp_llama_from_pretrained(ctx, tmp_folder("shape", text, true), &m),
                AMP_ERR_SHAPE, "model.layers.0.mlp.down_proj.weight (file [64, 176], model [64, 160])");
    CHECK(m == NULL);
    CHECK_FAILS(amp_llama_from_pretrained(ctx, "/nonexistent", &m), AMP_ERR_IO, "/nonexistent/config.json");
    /* the sharded folder (4 shards and the index) loads to the single file's bits */
    amp_model *one = NULL, *four = NULL;
    snprintf(dir, sizeof dir, "%s/llama_tiny_base", g_dir);
    CHECK_OK(amp_llama_from_pretrained(ctx, dir, &one));
    snprintf(dir, sizeof dir, "%s/llama_tiny_sharded", g_dir);
    CHECK_OK(amp_llama_from_pretrained(ctx, dir, &four));
    for (int i = 0; one && four && i < amp_model_n_params(one); i++) {
        amp_tensor *a = amp_model_param(one, i), *b = amp_model_param(four, i);
        size_t nb = (size_t)amp_tensor_numel(a) * sizeof(float);
        float *ha = malloc(nb), *hb = malloc(nb);
        CHECK_OK(amp_tensor_to_host(a, ha, nb));
        CHECK_OK(amp_tensor_to_host(b, hb, nb));
        CHECK_MSG(!memcmp(ha, hb, nb), "sharded: %s differs", amp_model_param_name(one, i));
        free(ha);
        free(hb);
    }
    /* a tensor in two files, or a file short of tensors: refused, the model unchanged */
    char base[700];
    snprintf(base, sizeof base, "%s/llama_tiny_base/model.safetensors", g_dir);
    const char *twice[2] = {base, base};
    CHECK_FAILS(amp_model_load_weights_files(four, NULL, twice, 2), AMP_ERR_SHAPE,
                "model.embed_tokens.weight (in 2 of the files)");
    char shard[700];
    snprintf(shard, sizeof shard, "%s/model-00001-of-00004.safetensors", dir);
    const char *part[1] = {shard};
    CHECK_FAILS(amp_model_load_weights_files(four, NULL, part, 1), AMP_ERR_SHAPE, "missing");
    amp_model_free(one);
    amp_model_free(four);
    /* a shard missing: refused, naming it */
    const char *tmp = getenv("AMP_TEST_TMP");
    char cmd[4096], gone[700];
    snprintf(gone, sizeof gone, "%s/test_llama_missing_shard", tmp ? tmp : "/tmp");
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s' && rm '%s/model-00003-of-00004.safetensors'",
             gone, dir, gone, gone);
    CHECK(system(cmd) == 0);
    CHECK_FAILS(amp_llama_from_pretrained(ctx, gone, &m), AMP_ERR_IO,
                "model-00003-of-00004.safetensors, a shard");
    CHECK(m == NULL);
    amp_ctx_free(ctx);
}

/* Generation: the cached forward's last logits against a full forward's (prompt, then token by
 * token), the same tokens drawn with and without the cache for a seed, and misuse refused. */
static void test_generate(amp_device dev, const char *dn) {
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = dev, .seed = 2}, &ctx));
    if (!ctx) return;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/llama_tiny_%s", g_dir, g_v->name);
    CHECK_OK(amp_llama_from_pretrained(ctx, dir, &m));
    int32_t *idx = ref_copy("idx", B * T);
    if (!m || !idx) goto done;
    /* logits: 12 tokens as a prompt of 9 then 3 single steps, against the full forwards */
    amp_lm_cache *c = NULL;
    CHECK_OK(amp_lm_cache_create(ctx, 2, 64, &c));
    amp_tensor *x = NULL, *logits = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 2, (const int64_t[]){1, 9}, idx, &x));
    CHECK_FAILS(amp_llama_forward_cached(m, c, x, &logits), AMP_ERR_STATE, "without gradients");
    bool grad = amp_set_grad_enabled(ctx, false);
    double worst = 0;
    for (int64_t len = 9; len <= 12 && c; len++) {
        float got[V], want[V];
        amp_tensor *xn = NULL, *full = NULL, *xf = NULL;
        int64_t from = len == 9 ? 0 : len - 1;
        CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 2, (const int64_t[]){1, len - from},
                                      idx + from, &xn));
        CHECK_OK(amp_llama_forward_cached(m, c, xn, &logits));
        if (logits) CHECK_OK(amp_tensor_to_host_f32(logits, got, sizeof got));
        CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 2, (const int64_t[]){1, len}, idx, &xf));
        CHECK_OK(amp_llama_forward_last(m, xf, &full));
        if (full) CHECK_OK(amp_tensor_to_host_f32(full, want, sizeof want));
        double top = 0, d = 0;
        for (int i = 0; i < V; i++) top = fmax(top, fabs(want[i])), d = fmax(d, fabs(got[i] - want[i]));
        worst = fmax(worst, d / top);
        amp_tensor_free(xn);
        amp_tensor_free(xf);
        amp_ctx_reset_step(ctx);
    }
    CHECK_MSG(worst <= 1e-5, "%s %s: the cached forward's logits are %.3g off the full forward's",
              dn, g_v->name, worst);
    CHECK(amp_lm_cache_len(c) == 12);
    amp_set_grad_enabled(ctx, grad);
    amp_lm_cache_free(c);
    amp_tensor_free(x);
    /* the same tokens, with and without the cache */
    int32_t a[24], b[24];
    amp_lm_sample_opts so = {.temperature = 1.0f, .seed = 7};
    CHECK_OK(amp_llama_generate(m, idx, 8, 24, &so, true, a));
    CHECK_OK(amp_llama_generate(m, idx, 8, 24, &so, false, b));
    CHECK_MSG(!memcmp(a, b, sizeof a), "%s %s: the cached sampler drew other tokens", dn,
              g_v->name);
    CHECK_FAILS(amp_llama_generate(m, idx, 60, 5, &so, true, a), AMP_ERR_INVALID_ARG,
                "past max_position_embeddings = 64");
    int32_t bad = 300;
    CHECK_FAILS(amp_llama_generate(m, &bad, 1, 1, &so, true, a), AMP_ERR_INVALID_ARG,
                "prompt[0] = 300 is outside the vocabulary");
done:
    free(idx);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

int main(void) {
    const char *dir = getenv("AMP_TEST_DATA");
    snprintf(g_dir, sizeof g_dir, "%s", dir ? dir : "tests/data");
    test_init();
    test_errors();
    test_config_json();
    test_from_pretrained();
    for (size_t v = 0; v < sizeof VARIANTS / sizeof VARIANTS[0]; v++) {
        g_v = &VARIANTS[v];
        if (amp_st_reader_open(data_path("ref.safetensors"), &g_ref) != AMP_OK) {
            CHECK_MSG(false, "cannot read the reference: %s", amp_last_error());
            continue;
        }
        run_device(AMP_DEVICE_CPU, "cpu");
        test_generate(AMP_DEVICE_CPU, "cpu");
        if (amp_backend_cuda()) {
            run_device(AMP_DEVICE_CUDA, "cuda");
            test_generate(AMP_DEVICE_CUDA, "cuda");
        }
        amp_st_reader_free(g_ref);
    }
    return test_summary(NAME);
}
