/* Hugging Face folders out of the Llama (models/llama_hf.c), and back in:
 *  - amp_llama_config_to_json read back by amp_llama_config_parse is the same config, for the
 *    three test variants (base; Llama 3.1 rope scaling with a tied head; attention_bias), and
 *    its reals are the shortest decimals of their f32 values;
 *  - amp_llama_save_pretrained then amp_llama_from_pretrained: the same weights, bit for bit, the
 *    tied head stored once (transformers' own save_pretrained stores it once too);
 *  - amp_llama_load_pretrained into a model of the caller's: the folder's weights; a folder of
 *    another config refused, naming every field that differs, the model unchanged;
 *  - amp_llama_config_differences: the fields named, the Llama 3 numbers only between two
 *    llama3 configs, defaults filled in before comparing;
 *  - bad calls (a buffer too small, a text that is not JSON, NULLs) refused, naming the call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "test_util.h"

#define NAME "test_llama_save"

#define SHAPE                                                                                  \
    .vocab_size = 256, .hidden_size = 64, .intermediate_size = 176, .num_hidden_layers = 2,   \
    .num_attention_heads = 4, .num_key_value_heads = 2, .max_position_embeddings = 64,        \
    .rms_norm_eps = 1e-5f
#define TINY SHAPE, .rope_theta = 10000.0f
static const amp_llama_config VARIANTS[] = {
    {TINY},
    {SHAPE, .rope_type = AMP_ROPE_LLAMA3, .rope_factor = 8.0f, .rope_low_freq_factor = 1.0f,
     .rope_high_freq_factor = 4.0f, .rope_original_max_position_embeddings = 16,
     .tie_word_embeddings = true, .rope_theta = 500000.0f},
    {TINY, .attention_bias = true, .attention_dropout = 0.1f, .initializer_range = 0.01f},
};
enum { N_VARIANTS = sizeof VARIANTS / sizeof VARIANTS[0] };

static const char *tmp_dir(const char *name) {
    static char dir[600];
    const char *tmp = getenv("AMP_TEST_TMP");
    snprintf(dir, sizeof dir, "%s/test_llama_save_%s", tmp ? tmp : "/tmp", name);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return dir;
}

/* Every parameter of m as f32, one after the other (malloc'd). */
static float *snapshot(amp_model *m, size_t *bytes) {
    size_t total = 0;
    for (int i = 0; i < amp_model_n_params(m); i++)
        total += (size_t)amp_tensor_numel(amp_model_param(m, i)) * sizeof(float);
    float *all = malloc(total ? total : 1), *at = all;
    for (int i = 0; all && i < amp_model_n_params(m); i++) {
        size_t nb = (size_t)amp_tensor_numel(amp_model_param(m, i)) * sizeof(float);
        CHECK_OK(amp_tensor_to_host_f32(amp_model_param(m, i), at, nb));
        at += nb / sizeof(float);
    }
    *bytes = total;
    return all;
}

/* Every parameter of a and b the same bits (and the same names). */
static bool same_weights(amp_model *a, amp_model *b) {
    if (amp_model_n_params(a) != amp_model_n_params(b)) return false;
    bool same = true;
    for (int i = 0; i < amp_model_n_params(a) && same; i++) {
        amp_tensor *x = amp_model_param(a, i), *y = amp_model_param(b, i);
        size_t nb = (size_t)amp_tensor_numel(x) * sizeof(float);
        float *hx = malloc(nb), *hy = malloc(nb);
        same = hx && hy && amp_tensor_numel(x) == amp_tensor_numel(y) &&
               !strcmp(amp_model_param_name(a, i), amp_model_param_name(b, i)) &&
               amp_tensor_to_host_f32(x, hx, nb) == AMP_OK &&
               amp_tensor_to_host_f32(y, hy, nb) == AMP_OK && !memcmp(hx, hy, nb);
        free(hx);
        free(hy);
    }
    return same;
}

static void test_json_round_trip(void) {
    for (int v = 0; v < N_VARIANTS; v++) {
        char text[AMP_LLAMA_CONFIG_JSON_MAX], differ[512];
        amp_llama_config back;
        CHECK_OK(amp_llama_config_to_json(&VARIANTS[v], text, sizeof text));
        CHECK_OK(amp_llama_config_parse(text, "round trip", &back));
        int n = amp_llama_config_differences(&VARIANTS[v], &back, differ, sizeof differ);
        CHECK_MSG(n == 0, "variant %d: the JSON read back differs: %s", v, differ);
        CHECK_MSG(back.attention_dropout == VARIANTS[v].attention_dropout &&
                      back.initializer_range == (VARIANTS[v].initializer_range ? VARIANTS[v].initializer_range : 0.02f),
                  "variant %d: dropout or initializer_range read back as %g, %g", v,
                  (double)back.attention_dropout, (double)back.initializer_range);
        CHECK_MSG(strstr(text, "\"rms_norm_eps\": 1e-05") || strstr(text, "\"rms_norm_eps\": 1e-5"),
                  "variant %d: rms_norm_eps not the shortest decimal: %s", v, text);
        bool llama3 = VARIANTS[v].rope_type == AMP_ROPE_LLAMA3;
        CHECK_MSG(strstr(text, llama3 ? "\"rope_type\": \"llama3\"" : "\"rope_scaling\": null"),
                  "variant %d: the rope in config.json: %s", v, text);
    }
    char small[64];
    CHECK_FAILS(amp_llama_config_to_json(&VARIANTS[0], small, sizeof small), AMP_ERR_INVALID_ARG,
                "do not fit in 64");
    amp_llama_config keep = VARIANTS[2];
    CHECK_FAILS(amp_llama_config_parse("{\"hidden_size\": 64,", "metadata", &keep), AMP_ERR_FORMAT,
                "amp_llama_config_load: metadata");
    CHECK_FAILS(amp_llama_config_parse("{\"num_hidden_layers\": 2.5}", "metadata", &keep),
                AMP_ERR_INVALID_ARG, "'num_hidden_layers' is a real number, want an integer");
    CHECK_MSG(amp_llama_config_differences(&keep, &VARIANTS[2], NULL, 0) == 0,
              "a refused parse changed cfg");
    CHECK_FAILS(amp_llama_config_parse(NULL, "x", &keep), AMP_ERR_INVALID_ARG, "must not be NULL");
}

static void test_differences(void) {
    char differ[512];
    amp_llama_config a = VARIANTS[0], b = VARIANTS[0];
    b.num_attention_heads = 8;
    b.head_dim = 16;
    b.rope_theta = 500000.0f;
    int n = amp_llama_config_differences(&a, &b, differ, sizeof differ);
    CHECK_MSG(n == 2 && !strcmp(differ, "num_attention_heads 4 vs 8, rope_theta 10000 vs 500000"),
              "differences: %d, '%s'", n, differ);
    /* defaults filled in: 0 key/value heads are as many as the heads */
    a = b = VARIANTS[0];
    a.num_key_value_heads = 0;
    b.num_key_value_heads = 4;
    CHECK_MSG(amp_llama_config_differences(&a, &b, differ, sizeof differ) == 0,
              "num_key_value_heads 0 is not the heads' count: %s", differ);
    /* the Llama 3 numbers count between two llama3 configs only */
    a = VARIANTS[0];
    a.rope_factor = 4.0f;
    CHECK(amp_llama_config_differences(&a, &VARIANTS[0], NULL, 0) == 0);
    b = VARIANTS[1];
    b.rope_factor = 4.0f;
    n = amp_llama_config_differences(&VARIANTS[1], &b, differ, sizeof differ);
    CHECK_MSG(n == 1 && !strcmp(differ, "rope factor 8 vs 4"), "llama3 factor: %d, '%s'", n, differ);
    n = amp_llama_config_differences(&VARIANTS[0], &VARIANTS[1], differ, 20);
    CHECK_MSG(n == 3 && strlen(differ) < 20, "a short buffer: %d, '%s'", n, differ);
}

static void test_save_pretrained(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 5}, &ctx));
    for (int v = 0; ctx && v < N_VARIANTS; v++) {
        char name[16];
        snprintf(name, sizeof name, "v%d", v);
        const char *dir = tmp_dir(name);
        amp_model *m = NULL, *back = NULL, *mine = NULL;
        CHECK_OK(amp_llama_create(ctx, &VARIANTS[v], &m));
        CHECK_OK(amp_model_build(m));
        CHECK_OK(amp_llama_save_pretrained(m, dir));
        CHECK_OK(amp_llama_from_pretrained(ctx, dir, &back));
        CHECK_MSG(m && back && same_weights(m, back), "variant %d: other weights read back", v);
        amp_llama_config got;
        char differ[512];
        if (back) CHECK_OK(amp_llama_config_of(back, &got));
        CHECK_MSG(back && amp_llama_config_differences(&got, &VARIANTS[v], differ, sizeof differ) == 0,
                  "variant %d: another config read back: %s", v, differ);
        amp_tensor *head = NULL;
        bool has_head = back && amp_model_find(back, "lm_head.weight", &head) == AMP_OK;
        CHECK_MSG(has_head != VARIANTS[v].tie_word_embeddings, "variant %d: lm_head %s", v,
                  has_head ? "stored though tied" : "missing");
        /* into a model of the caller's, drawn from another seed: the folder's weights */
        CHECK_OK(amp_llama_create(ctx, &VARIANTS[v], &mine));
        CHECK_OK(amp_model_build(mine));
        CHECK_MSG(mine && m && !same_weights(mine, m), "variant %d: two inits drew the same", v);
        CHECK_OK(amp_llama_load_pretrained(mine, NULL, dir));
        CHECK_MSG(mine && m && same_weights(mine, m), "variant %d: load_pretrained's weights", v);
        amp_model_free(back);
        amp_model_free(mine);
        amp_model_free(m);
    }
    /* a folder of another config: refused, naming the fields, the model unchanged */
    amp_llama_config other = VARIANTS[0];
    other.num_attention_heads = 2, other.num_key_value_heads = 1, other.head_dim = 32;
    amp_model *m = NULL, *keep = NULL;
    const char *dir = tmp_dir("other");
    CHECK_OK(amp_llama_create(ctx, &other, &m));
    CHECK_OK(amp_llama_save_pretrained(m, dir)); /* builds it: the weights are drawn */
    CHECK_OK(amp_llama_create(ctx, &VARIANTS[0], &keep));
    CHECK_OK(amp_model_build(keep));
    size_t nb = 0, nb2 = 0;
    float *before = keep ? snapshot(keep, &nb) : NULL;
    CHECK_FAILS(amp_llama_load_pretrained(keep, NULL, dir), AMP_ERR_INVALID_ARG,
                "num_attention_heads 2 vs 4, num_key_value_heads 1 vs 2, head_dim 32 vs 16");
    float *after = keep ? snapshot(keep, &nb2) : NULL;
    CHECK_MSG(before && after && nb == nb2 && !memcmp(before, after, nb),
              "a refused load changed the model");
    free(before);
    free(after);
    CHECK_FAILS(amp_llama_load_pretrained(keep, NULL, "/nonexistent"), AMP_ERR_IO,
                "/nonexistent/config.json");
    CHECK_FAILS(amp_llama_save_pretrained(NULL, dir), AMP_ERR_INVALID_ARG,
                "amp_llama_save_pretrained: the model is not a Llama");
    CHECK_FAILS(amp_llama_save_pretrained(keep, "/nonexistent/a/b"), AMP_ERR_IO,
                "amp_llama_save_pretrained: cannot make /nonexistent/a/b");
    amp_model_free(m);
    amp_model_free(keep);
    amp_ctx_free(ctx);
}

int main(void) {
    test_json_round_trip();
    test_differences();
    test_save_pretrained();
    return test_summary(NAME);
}
