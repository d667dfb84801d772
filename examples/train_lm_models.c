#include "train_lm_models.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- the GPT ---- */

/* nanoGPT's model_args: the shape of the GPT, saved with every checkpoint as the user metadata
 * "model_args" (a JSON object, as nanoGPT's checkpoint['model_args'], bias always true here;
 * vocab_size is the tokens', before padding), so that a resume builds the model it saved. */

static void model_args_format(const amp_gpt_config *c, char *out, size_t size) {
    snprintf(out, size, "{\"n_layer\": %d, \"n_head\": %d, \"n_embd\": %d, \"block_size\": %d, "
             "\"bias\": true, \"vocab_size\": %d, \"dropout\": %.9g}", c->n_layer, c->n_head,
             c->n_embd, c->block_size, c->vocab_size, (double)c->dropout);
}

/* The integer after "key": in a flat JSON object (what model_args_format writes, or json.dumps). */
static bool model_arg(const char *json, const char *key, long *v) {
    char quoted[32];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = strstr(json, quoted);
    if (!p) return false;
    p += strlen(quoted);
    while (*p == ' ') p++;
    if (*p++ != ':') return false;
    char *end;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (end == p || errno || (*end != ',' && *end != '}' && *end != ' ')) return false;
    *v = x;
    return true;
}

/* The checkpoint's shape into cfg, as nanoGPT's resume forces its model_args: an option not
 * given takes the checkpoint's value; one given that differs is refused, every such option
 * named with both values (a model with other heads or another vocabulary can have the same
 * tensor shapes, and would load and train on as a different model). Dropout is not part of
 * the shape and stays the command line's, as in nanoGPT. A checkpoint without model_args
 * (written before they were kept) leaves cfg as given, said in one line: its load still
 * refuses other tensor shapes. */
static amp_status gpt_resume(const train_args *a, const char *from, const char *json,
                             amp_gpt_config *cfg) {
    struct {
        const char *option, *key;
        int *value;
        bool given;
    } f[] = {{"n-layer", "n_layer", &cfg->n_layer, a->given.n_layer},
             {"n-head", "n_head", &cfg->n_head, a->given.n_head},
             {"n-embd", "n_embd", &cfg->n_embd, a->given.n_embd},
             {"block-size", "block_size", &cfg->block_size, a->given.block_size},
             {"vocab-size", "vocab_size", &cfg->vocab_size, a->given.vocab_size}};
    enum { N = sizeof f / sizeof f[0] };
    long saved[N];
    char differ[512] = "";
    size_t len = 0;
    for (int i = 0; i < N; i++) {
        if (!model_arg(json, f[i].key, &saved[i]) || saved[i] < 1 || saved[i] > INT32_MAX)
            return amp_error(AMP_ERR_FORMAT, "%s: model_args '%s' has no valid %s", from, json,
                             f[i].key);
        if (f[i].given && saved[i] != *f[i].value && len < sizeof differ)
            len += (size_t)snprintf(differ + len, sizeof differ - len, "%s--%s %d (the "
                                    "checkpoint's %s is %ld)", len ? ", " : "", f[i].option,
                                    *f[i].value, f[i].key, saved[i]);
    }
    if (len)
        return amp_error(AMP_ERR_INVALID_ARG, "%s was saved by another model: %s; resume with the "
                         "checkpoint's values, or without those options to take them from it",
                         from, differ);
    for (int i = 0; i < N; i++) *f[i].value = (int)saved[i];
    return AMP_OK;
}

/* The checkpoint's model_args into json, *found false (and one line when `say`) for a
 * checkpoint written before they were kept. */
static amp_status saved_model_args(const char *from, bool say, FILE *text, char *json,
                                   size_t size, bool *found) {
    amp_status s = amp_checkpoint_user_meta(from, LM_MODEL_ARGS_KEY, json, size);
    *found = s == AMP_OK;
    if (s == AMP_ERR_INVALID_ARG && strstr(amp_last_error(), "no user metadata")) {
        if (say)
            fprintf(text, "amp-train: %s holds no model_args (an older checkpoint): the model is "
                    "the command line's\n", from);
        return AMP_OK;
    }
    return s;
}

/* ---- the Llama ---- */

/* The command line's Llama: --config FILE, else --init-weights DIR's config.json, else
 * amp-bench's default Llama (4 layers, 256 wide, 8 heads, 2 key/value heads, intermediate 704,
 * 1024 positions, a byte vocabulary); then the field options given over it. --config with
 * --init-weights: the folder's config must be the same model (amp_llama_load_pretrained checks
 * it when it loads). */
static amp_status llama_from_command_line(const train_args *a, amp_llama_config *c) {
    *c = (amp_llama_config){.vocab_size = 256, .hidden_size = 256, .intermediate_size = 704,
                            .num_hidden_layers = 4, .num_attention_heads = 8,
                            .num_key_value_heads = 2, .max_position_embeddings = 1024,
                            .rms_norm_eps = 1e-5f, .rope_theta = 10000.0f};
    char path[4096];
    amp_status s = AMP_OK;
    if (a->llama_config) {
        s = amp_llama_config_load(a->llama_config, c);
    } else if (a->init_weights) {
        snprintf(path, sizeof path, "%s/config.json", a->init_weights);
        s = amp_llama_config_load(path, c);
    }
    if (s != AMP_OK) return s;
    const amp_llama_config *o = &a->llama;
    if (a->llama_given.hidden_size) c->hidden_size = o->hidden_size;
    if (a->llama_given.intermediate_size) c->intermediate_size = o->intermediate_size;
    if (a->llama_given.num_hidden_layers) c->num_hidden_layers = o->num_hidden_layers;
    if (a->llama_given.num_attention_heads) c->num_attention_heads = o->num_attention_heads;
    if (a->llama_given.num_key_value_heads) c->num_key_value_heads = o->num_key_value_heads;
    if (a->llama_given.head_dim) c->head_dim = o->head_dim;
    if (a->llama_given.max_position_embeddings)
        c->max_position_embeddings = o->max_position_embeddings;
    if (a->llama_given.rope_theta) c->rope_theta = o->rope_theta;
    if (a->llama_given.rms_norm_eps) c->rms_norm_eps = o->rms_norm_eps;
    if (a->llama_given.tie_word_embeddings) c->tie_word_embeddings = true;
    if (a->given.vocab_size) c->vocab_size = a->vocab_size;
    /* a head count given alone: the head size follows it, as LlamaConfig's default does */
    if ((a->llama_given.num_attention_heads || a->llama_given.hidden_size) &&
        !a->llama_given.head_dim)
        c->head_dim = 0;
    if (a->llama_given.num_attention_heads && !a->llama_given.num_key_value_heads &&
        c->num_key_value_heads && c->num_attention_heads % c->num_key_value_heads)
        c->num_key_value_heads = 0; /* then as many as the heads, LlamaConfig's default */
    return AMP_OK;
}

/* Whether anything of the Llama's shape was given on the command line. */
static bool llama_shape_given(const train_args *a) {
    struct llama_given g = a->llama_given;
    return g.hidden_size || g.intermediate_size || g.num_hidden_layers || g.num_attention_heads ||
           g.num_key_value_heads || g.head_dim || g.max_position_embeddings || g.rope_theta ||
           g.rms_norm_eps || g.tie_word_embeddings || a->given.vocab_size || a->llama_config ||
           a->init_weights;
}

static amp_status llama_resolve(const train_args *a, const char *from, bool say, FILE *text,
                                lm_shape *sh) {
    amp_status s = llama_from_command_line(a, &sh->llama_cfg);
    char json[AMP_LLAMA_CONFIG_JSON_MAX];
    bool found = false;
    if (s == AMP_OK && from) s = saved_model_args(from, say, text, json, sizeof json, &found);
    if (s == AMP_OK && found) {
        amp_llama_config saved;
        char differ[1024];
        s = amp_llama_config_parse(json, from, &saved);
        if (s == AMP_OK && llama_shape_given(a) &&
            amp_llama_config_differences(&sh->llama_cfg, &saved, differ, sizeof differ))
            s = amp_error(AMP_ERR_INVALID_ARG, "%s was saved by another model: %s (the command "
                          "line's against the checkpoint's); resume without the shape options "
                          "to take them from it", from, differ);
        if (s == AMP_OK) sh->llama_cfg = saved;
    }
    amp_llama_config *c = &sh->llama_cfg;
    if (s == AMP_OK) amp_llama_config_defaults(c);
    if (s == AMP_OK) s = amp_llama_config_to_json(c, sh->model_args, sizeof sh->model_args);
    if (s != AMP_OK) return s;
    sh->vocab = c->vocab_size;
    sh->window = a->given.block_size ? a->block_size
                 : c->max_position_embeddings < 256 ? c->max_position_embeddings : 256;
    if (sh->window > c->max_position_embeddings)
        return amp_error(AMP_ERR_INVALID_ARG, "--block-size %lld is past the model's "
                         "max_position_embeddings %lld", (long long)sh->window,
                         (long long)c->max_position_embeddings);
    return AMP_OK;
}

/* ---- either ---- */

amp_status lm_shape_resolve(const train_args *a, const char *from, bool say, FILE *text,
                            lm_shape *sh) {
    memset(sh, 0, sizeof *sh);
    sh->llama = strcmp(a->model, "llama") == 0;
    if (sh->llama) return llama_resolve(a, from, say, text, sh);
    sh->gpt = (amp_gpt_config){.n_layer = a->n_layer, .n_head = a->n_head, .n_embd = a->n_embd,
                               .block_size = a->block_size, .vocab_size = a->vocab_size,
                               .dropout = a->dropout};
    char json[512];
    bool found = false;
    amp_status s = from ? saved_model_args(from, say, text, json, sizeof json, &found) : AMP_OK;
    if (s == AMP_OK && found) s = gpt_resume(a, from, json, &sh->gpt);
    if (s != AMP_OK) return s;
    model_args_format(&sh->gpt, sh->model_args, sizeof sh->model_args);
    sh->vocab = sh->gpt.vocab_size, sh->window = sh->gpt.block_size;
    return AMP_OK;
}

amp_status lm_model_create(const lm_shape *sh, amp_ctx *ctx, amp_model **out) {
    return sh->llama ? amp_llama_create(ctx, &sh->llama_cfg, out)
                     : amp_gpt_create(ctx, &sh->gpt, out);
}

amp_status lm_model_set_recompute(const lm_shape *sh, amp_model *m, amp_recompute mode) {
    return sh->llama ? amp_llama_set_recompute(m, mode) : amp_gpt_set_recompute(m, mode);
}

amp_status lm_model_init_weights(const lm_shape *sh, const char *init, amp_model *m,
                                 amp_optimizer *opt) {
    return sh->llama ? amp_llama_load_pretrained(m, opt, init)
                     : amp_model_load_weights(m, opt, init);
}

amp_status lm_model_loss(const lm_shape *sh, amp_model *m, amp_tensor *x, amp_tensor *y,
                         amp_tensor **loss) {
    return sh->llama ? amp_llama_loss(m, x, y, loss) : amp_gpt_loss(m, x, y, loss);
}

amp_status lm_model_generate(const lm_shape *sh, amp_model *m, const int32_t *prompt,
                             int64_t n_prompt, int64_t n, const amp_lm_sample_opts *opts,
                             int32_t *out) {
    int64_t positions = sh->llama ? sh->llama_cfg.max_position_embeddings : sh->gpt.block_size;
    bool cache = n_prompt + n <= positions;
    return sh->llama ? amp_llama_generate(m, prompt, n_prompt, n, opts, cache, out)
                     : amp_gpt_generate(m, prompt, n_prompt, n, opts, cache, out);
}

int64_t lm_model_n_params(const lm_shape *sh, const amp_model *m) {
    return sh->llama ? amp_llama_n_params(m) : amp_gpt_n_params(m);
}

void lm_model_describe(const lm_shape *sh, const amp_model *m, char *out, size_t size) {
    const amp_llama_config *c = &sh->llama_cfg;
    if (sh->llama)
        snprintf(out, size, "llama, %lld layers, %lld heads (%lld key/value), %lld wide, "
                 "intermediate %lld, window %lld of %lld positions, vocab %lld%s, %lld parameters",
                 (long long)c->num_hidden_layers, (long long)c->num_attention_heads,
                 (long long)c->num_key_value_heads, (long long)c->hidden_size,
                 (long long)c->intermediate_size, (long long)sh->window,
                 (long long)c->max_position_embeddings, (long long)c->vocab_size,
                 c->tie_word_embeddings ? " (tied head)" : "", (long long)lm_model_n_params(sh, m));
    else
        snprintf(out, size, "gpt, %d layers, %d heads, %d wide, block %d, vocab %d (padded %d), "
                 "%lld parameters", sh->gpt.n_layer, sh->gpt.n_head, sh->gpt.n_embd,
                 sh->gpt.block_size, sh->gpt.vocab_size,
                 (int)amp_lm_padded_vocab(sh->gpt.vocab_size), (long long)lm_model_n_params(sh, m));
}

amp_status lm_model_saved(const lm_shape *sh, const char *dir) {
    if (!sh->llama) return AMP_OK;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return amp_llama_config_save(&sh->llama_cfg, path);
}

