/* Hugging Face folders in and out for the Llama (amp/models/llama.h): config.json's fields read
 * with jansson, in both spellings transformers has written (4.x: rope_theta and rope_scaling at
 * the top level; 5.x: one rope_parameters object holding rope_theta and rope_type), and the
 * folder's model.safetensors, or the shards its model.safetensors.index.json names, loaded as
 * they are (the parameter names are Hugging Face's). */
#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/checkpoint.h"
#include "amp/models/llama.h"
#include "amp/status.h"
#include <sys/stat.h>

#define WHO "amp_llama_config_load"

/* config.json's integer and real fields of amp_llama_config, under their names: read, written and
 * compared from this one list (`shape`: a real that makes another model, compared by
 * amp_llama_config_differences; dropout and the init's range do not). */
#define INT_FIELD(name) {#name, offsetof(amp_llama_config, name)}
static const struct {
    const char *key;
    size_t at;
} INT_FIELDS[] = {INT_FIELD(vocab_size), INT_FIELD(hidden_size), INT_FIELD(intermediate_size),
                  INT_FIELD(num_hidden_layers), INT_FIELD(num_attention_heads),
                  INT_FIELD(num_key_value_heads), INT_FIELD(head_dim),
                  INT_FIELD(max_position_embeddings)};
#define REAL_FIELD(name, shape) {#name, offsetof(amp_llama_config, name), shape}
static const struct {
    const char *key;
    size_t at;
    bool shape;
} REAL_FIELDS[] = {REAL_FIELD(rms_norm_eps, true), REAL_FIELD(rope_theta, true),
                   REAL_FIELD(attention_dropout, false), REAL_FIELD(initializer_range, false)};
#define N_INT_FIELDS (sizeof INT_FIELDS / sizeof INT_FIELDS[0])
#define N_REAL_FIELDS (sizeof REAL_FIELDS / sizeof REAL_FIELDS[0])

static int64_t *int_field(amp_llama_config *c, size_t i) {
    return (int64_t *)((char *)c + INT_FIELDS[i].at);
}
static float *real_field(amp_llama_config *c, size_t i) {
    return (float *)((char *)c + REAL_FIELDS[i].at);
}

typedef struct cfg_reader {
    const char *path;
    json_t *root;
} cfg_reader;

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static amp_status wrong_type(const cfg_reader *r, const char *key, const json_t *v,
                             const char *want) {
    return amp_error(AMP_ERR_INVALID_ARG, WHO ": %s: '%s' is %s, want %s", r->path, key,
                     json_kind(v), want);
}

/* An integer field of obj (absent or null: *out unchanged). */
static amp_status get_int(const cfg_reader *r, json_t *obj, const char *key, int64_t *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return AMP_OK;
    if (!json_is_integer(v)) return wrong_type(r, key, v, "an integer");
    *out = (int64_t)json_integer_value(v);
    return AMP_OK;
}

static amp_status get_float(const cfg_reader *r, json_t *obj, const char *key, float *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return AMP_OK;
    if (!json_is_number(v)) return wrong_type(r, key, v, "a number");
    *out = (float)json_number_value(v);
    return AMP_OK;
}

static amp_status get_bool(const cfg_reader *r, json_t *obj, const char *key, bool *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return AMP_OK;
    if (!json_is_boolean(v)) return wrong_type(r, key, v, "true or false");
    *out = json_is_true(v);
    return AMP_OK;
}

/* rope_scaling (4.x) or rope_parameters (5.x): the type and Llama 3.1's numbers; 5.x also holds
 * rope_theta. */
static amp_status get_rope(const cfg_reader *r, const char *key, amp_llama_config *c) {
    json_t *o = json_object_get(r->root, key);
    if (!o || json_is_null(o)) return AMP_OK;
    if (!json_is_object(o)) return wrong_type(r, key, o, "an object");
    json_t *t = json_object_get(o, "rope_type");
    if (!t) t = json_object_get(o, "type"); /* the older spelling */
    if (t && !json_is_string(t)) return wrong_type(r, "rope_type", t, "a string");
    const char *type = t ? json_string_value(t) : "default";
    if (!strcmp(type, "llama3")) c->rope_type = AMP_ROPE_LLAMA3;
    else if (!strcmp(type, "default")) c->rope_type = AMP_ROPE_DEFAULT;
    else
        return amp_error(AMP_ERR_INVALID_ARG, WHO ": %s: %s type '%s' is not supported (want "
                         "\"default\" or \"llama3\")", r->path, key, type);
    amp_status s = get_float(r, o, "rope_theta", &c->rope_theta);
    if (s == AMP_OK) s = get_float(r, o, "factor", &c->rope_factor);
    if (s == AMP_OK) s = get_float(r, o, "low_freq_factor", &c->rope_low_freq_factor);
    if (s == AMP_OK) s = get_float(r, o, "high_freq_factor", &c->rope_high_freq_factor);
    if (s == AMP_OK)
        s = get_int(r, o, "original_max_position_embeddings",
                    &c->rope_original_max_position_embeddings);
    return s;
}

/* What this Llama does not compute, refused rather than run as something else. */
static amp_status check_supported(const cfg_reader *r) {
    json_t *v = json_object_get(r->root, "model_type");
    if (v && (!json_is_string(v) || strcmp(json_string_value(v), "llama")))
        return amp_error(AMP_ERR_INVALID_ARG, WHO ": %s: model_type %s%s%s is not \"llama\"",
                         r->path, json_is_string(v) ? "\"" : "",
                         json_is_string(v) ? json_string_value(v) : json_kind(v),
                         json_is_string(v) ? "\"" : "");
    v = json_object_get(r->root, "hidden_act");
    if (v && (!json_is_string(v) || strcmp(json_string_value(v), "silu")))
        return amp_error(AMP_ERR_INVALID_ARG, WHO ": %s: hidden_act must be \"silu\" (SwiGLU)",
                         r->path);
    bool mlp_bias = false;
    amp_status s = get_bool(r, r->root, "mlp_bias", &mlp_bias);
    if (s == AMP_OK && mlp_bias)
        return amp_error(AMP_ERR_INVALID_ARG, WHO ": %s: mlp_bias true is not supported", r->path);
    int64_t tp = 1;
    if (s == AMP_OK) s = get_int(r, r->root, "pretraining_tp", &tp);
    if (s == AMP_OK && tp != 1)
        return amp_error(AMP_ERR_INVALID_ARG, WHO ": %s: pretraining_tp %lld: only 1 is the "
                         "model's own arithmetic", r->path, (long long)tp);
    return s;
}

/* The fields of r.root into *cfg, all or nothing; r.root freed. */
static amp_status config_read(cfg_reader r, amp_llama_config *cfg) {
    amp_llama_config c = {0};
    amp_status s = json_is_object(r.root) ? AMP_OK : wrong_type(&r, "(the file)", r.root, "an object");
    if (s == AMP_OK) s = check_supported(&r);
    for (size_t i = 0; s == AMP_OK && i < N_INT_FIELDS; i++)
        s = get_int(&r, r.root, INT_FIELDS[i].key, int_field(&c, i));
    for (size_t i = 0; s == AMP_OK && i < N_REAL_FIELDS; i++)
        s = get_float(&r, r.root, REAL_FIELDS[i].key, real_field(&c, i));
    if (s == AMP_OK) s = get_bool(&r, r.root, "tie_word_embeddings", &c.tie_word_embeddings);
    if (s == AMP_OK) s = get_bool(&r, r.root, "attention_bias", &c.attention_bias);
    if (s == AMP_OK) s = get_rope(&r, "rope_scaling", &c);
    if (s == AMP_OK) s = get_rope(&r, "rope_parameters", &c);
    json_decref(r.root);
    if (s == AMP_OK) *cfg = c; /* all or nothing */
    return s;
}

amp_status amp_llama_config_load(const char *path, amp_llama_config *cfg) {
    if (!path || !cfg) return amp_error(AMP_ERR_INVALID_ARG, WHO ": path and cfg must not be NULL");
    json_error_t err;
    cfg_reader r = {.path = path, .root = json_load_file(path, 0, &err)};
    if (!r.root)
        return amp_error(AMP_ERR_IO, WHO ": %s: %s (line %d)", path, err.text, err.line);
    return config_read(r, cfg);
}

amp_status amp_llama_config_parse(const char *json, const char *origin, amp_llama_config *cfg) {
    if (!json || !cfg)
        return amp_error(AMP_ERR_INVALID_ARG, WHO ": json and cfg must not be NULL");
    if (!origin) origin = "(text)";
    json_error_t err;
    cfg_reader r = {.path = origin, .root = json_loads(json, 0, &err)};
    if (!r.root)
        return amp_error(AMP_ERR_FORMAT, WHO ": %s: %s (line %d)", origin, err.text, err.line);
    return config_read(r, cfg);
}

/* f as the double of its shortest decimal that reads back to it (1e-05f as 1e-05, not
 * 9.99999975e-06), which JSON_REAL_PRECISION(9) then prints as that decimal. */
static json_t *float_real(float f) {
    char text[32];
    for (int p = 6; p <= 9; p++) {
        snprintf(text, sizeof text, "%.*g", p, (double)f);
        if (strtof(text, NULL) == f) break;
    }
    return json_real(strtod(text, NULL));
}

/* The rope numbers as both generations read them: 5.x's rope_parameters, and 4.x's top-level
 * rope_theta with rope_scaling (null for the default type), so that either loads the folder
 * with the same frequencies. */
static json_t *rope_object(const amp_llama_config *c, bool with_theta) {
    json_t *o = json_object();
    if (with_theta) json_object_set_new(o, "rope_theta", float_real(c->rope_theta));
    json_object_set_new(o, "rope_type",
                        json_string(c->rope_type == AMP_ROPE_LLAMA3 ? "llama3" : "default"));
    if (c->rope_type == AMP_ROPE_LLAMA3) {
        json_object_set_new(o, "factor", float_real(c->rope_factor));
        json_object_set_new(o, "low_freq_factor", float_real(c->rope_low_freq_factor));
        json_object_set_new(o, "high_freq_factor", float_real(c->rope_high_freq_factor));
        json_object_set_new(o, "original_max_position_embeddings",
                            json_integer(c->rope_original_max_position_embeddings));
    }
    return o;
}

amp_status amp_llama_config_to_json(const amp_llama_config *cfg, char *out, size_t size) {
    static const char who[] = "amp_llama_config_to_json";
    if (!cfg || !out || size == 0)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: cfg and out must not be NULL", who);
    amp_llama_config filled = *cfg, *c = &filled; /* 0: the defaults, as the model has them */
    amp_llama_config_defaults(c);
    json_t *o = json_object();
    json_object_set_new(o, "architectures", json_pack("[s]", "LlamaForCausalLM"));
    json_object_set_new(o, "model_type", json_string("llama"));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    for (size_t i = 0; i < N_INT_FIELDS; i++)
        json_object_set_new(o, INT_FIELDS[i].key, json_integer(*int_field(c, i)));
    for (size_t i = 0; i < N_REAL_FIELDS; i++)
        json_object_set_new(o, REAL_FIELDS[i].key, float_real(*real_field(c, i)));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    json_object_set_new(o, "attention_bias", json_boolean(c->attention_bias));
    json_object_set_new(o, "mlp_bias", json_false());
    json_object_set_new(o, "pretraining_tp", json_integer(1));
    json_object_set_new(o, "rope_scaling",
                        c->rope_type == AMP_ROPE_LLAMA3 ? rope_object(c, false) : json_null());
    json_object_set_new(o, "rope_parameters", rope_object(c, true));
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!text) return amp_error(AMP_ERR_OOM, "%s: out of host memory", who);
    size_t len = strlen(text);
    amp_status s = AMP_OK;
    if (len + 1 > size)
        s = amp_error(AMP_ERR_INVALID_ARG, "%s: the config's %zu bytes do not fit in %zu", who,
                      len + 1, size);
    else memcpy(out, text, len + 1);
    free(text);
    return s;
}

/* The shards DIR/model.safetensors.index.json names (its weight_map's files, each once, in the
 * order they first appear), or DIR/model.safetensors alone when there is no index: into paths
 * (AMP_WEIGHT_FILES_MAX of 4096 bytes), their count into *n. */
static amp_status weight_files(const char *who, const char *dir, char (*paths)[4096], int *n) {
    char index[4096];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    FILE *probe = fopen(index, "rb");
    if (!probe) {
        snprintf(paths[0], 4096, "%s/model.safetensors", dir);
        *n = 1;
        return AMP_OK;
    }
    fclose(probe);
    json_error_t err;
    json_t *root = json_load_file(index, 0, &err), *map = root ? json_object_get(root, "weight_map") : NULL;
    amp_status s = AMP_OK;
    if (!root) s = amp_error(AMP_ERR_IO, "%s: %s: %s (line %d)", who, index, err.text, err.line);
    else if (!json_is_object(map))
        s = amp_error(AMP_ERR_FORMAT, "%s: %s has no weight_map object", who, index);
    *n = 0;
    const char *key;
    json_t *file;
    json_object_foreach(map, key, file) {
        if (s != AMP_OK) break;
        if (!json_is_string(file) || strchr(json_string_value(file), '/')) {
            s = amp_error(AMP_ERR_FORMAT, "%s: %s: weight_map['%s'] is not a file name in the "
                          "folder", who, index, key);
            break;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(file));
        bool seen = false;
        for (int i = 0; i < *n && !seen; i++) seen = !strcmp(paths[i], path);
        if (seen) continue;
        if (*n == AMP_WEIGHT_FILES_MAX) {
            s = amp_error(AMP_ERR_FORMAT, "%s: %s names more than %d shards", who, index,
                          AMP_WEIGHT_FILES_MAX);
            break;
        }
        FILE *f = fopen(path, "rb");
        if (!f) {
            s = amp_error(AMP_ERR_IO, "%s: %s, a shard %s names, is missing", who, path, index);
            break;
        }
        fclose(f);
        snprintf(paths[(*n)++], 4096, "%s", path);
    }
    if (s == AMP_OK && *n == 0) s = amp_error(AMP_ERR_FORMAT, "%s: %s names no shard", who, index);
    json_decref(root);
    return s;
}

amp_status amp_llama_config_save(const amp_llama_config *cfg, const char *path) {
    static const char who[] = "amp_llama_config_save";
    if (!cfg || !path)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: cfg and path must not be NULL", who);
    char text[AMP_LLAMA_CONFIG_JSON_MAX];
    amp_status s = amp_llama_config_to_json(cfg, text, sizeof text);
    if (s != AMP_OK) return s;
    FILE *f = fopen(path, "wb");
    if (!f) return amp_error(AMP_ERR_IO, "%s: cannot write %s: %s", who, path, strerror(errno));
    size_t len = strlen(text);
    bool ok = fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF;
    if (fclose(f) != 0) ok = false;
    if (!ok) return amp_error(AMP_ERR_IO, "%s: writing %s failed: %s", who, path, strerror(errno));
    return AMP_OK;
}

static void differ_add(char *out, size_t size, size_t *len, int *n, const char *field,
                       const char *a, const char *b) {
    if (*len < size)
        *len += (size_t)snprintf(out + *len, size - *len, "%s%s %s vs %s", *n ? ", " : "", field,
                                 a, b);
    (*n)++;
}

int amp_llama_config_differences(const amp_llama_config *a, const amp_llama_config *b, char *out,
                                 size_t size) {
    amp_llama_config x = *a, y = *b;
    amp_llama_config_defaults(&x);
    amp_llama_config_defaults(&y);
    int n = 0;
    size_t len = 0;
    char u[64], v[64];
    if (out && size) out[0] = '\0';
    else size = 0;
    for (size_t i = 0; i < N_INT_FIELDS; i++) {
        int64_t p = *int_field(&x, i), q = *int_field(&y, i);
        if (p == q) continue;
        snprintf(u, sizeof u, "%lld", (long long)p);
        snprintf(v, sizeof v, "%lld", (long long)q);
        differ_add(out, size, &len, &n, INT_FIELDS[i].key, u, v);
    }
    for (size_t i = 0; i < N_REAL_FIELDS; i++) {
        float p = *real_field(&x, i), q = *real_field(&y, i);
        if (!REAL_FIELDS[i].shape || p == q) continue;
        snprintf(u, sizeof u, "%.9g", (double)p);
        snprintf(v, sizeof v, "%.9g", (double)q);
        differ_add(out, size, &len, &n, REAL_FIELDS[i].key, u, v);
    }
    const struct {
        const char *name;
        int64_t a, b;
    } flags[] = {{"rope_type", x.rope_type, y.rope_type},
                 {"tie_word_embeddings", x.tie_word_embeddings, y.tie_word_embeddings},
                 {"attention_bias", x.attention_bias, y.attention_bias}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (flags[i].a == flags[i].b) continue;
        snprintf(u, sizeof u, "%lld", (long long)flags[i].a);
        snprintf(v, sizeof v, "%lld", (long long)flags[i].b);
        differ_add(out, size, &len, &n, flags[i].name, u, v);
    }
    bool llama3 = x.rope_type == AMP_ROPE_LLAMA3 && y.rope_type == AMP_ROPE_LLAMA3;
    const struct {
        const char *name;
        double a, b;
        bool used;
    } reals[] = {{"rope factor", x.rope_factor, y.rope_factor, llama3},
                 {"rope low_freq_factor", x.rope_low_freq_factor, y.rope_low_freq_factor, llama3},
                 {"rope high_freq_factor", x.rope_high_freq_factor, y.rope_high_freq_factor, llama3},
                 {"rope original_max_position_embeddings",
                  (double)x.rope_original_max_position_embeddings,
                  (double)y.rope_original_max_position_embeddings, llama3}};
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        if (!reals[i].used || reals[i].a == reals[i].b) continue;
        snprintf(u, sizeof u, "%.9g", reals[i].a);
        snprintf(v, sizeof v, "%.9g", reals[i].b);
        differ_add(out, size, &len, &n, reals[i].name, u, v);
    }
    return n;
}

/* DIR's weight files (weight_files) into m, masters too through opt (may be NULL). */
static amp_status load_folder_weights(const char *who, amp_model *m, amp_optimizer *opt,
                                      const char *dir) {
    char(*paths)[4096] = malloc(AMP_WEIGHT_FILES_MAX * sizeof *paths); /* 1 MiB: off the stack */
    const char *list[AMP_WEIGHT_FILES_MAX];
    int n = 0;
    amp_status s = paths ? weight_files(who, dir, paths, &n)
                         : amp_error(AMP_ERR_OOM, "%s: out of host memory", who);
    for (int i = 0; i < n; i++) list[i] = paths[i];
    if (s == AMP_OK) s = amp_model_load_weights_files(m, opt, list, n);
    free(paths);
    return s;
}

static amp_status check_dir(const char *who, const char *dir) {
    if (!dir) return amp_error(AMP_ERR_INVALID_ARG, "%s: dir must not be NULL", who);
    if (strlen(dir) > 3000)
        return amp_error(AMP_ERR_INVALID_ARG, "%s: the path '%.64s...' is too long", who, dir);
    return AMP_OK;
}

amp_status amp_llama_from_pretrained(amp_ctx *ctx, const char *dir, amp_model **out) {
    static const char who[] = "amp_llama_from_pretrained";
    if (!out) return amp_error(AMP_ERR_INVALID_ARG, "%s: argument 'out' is NULL", who);
    *out = NULL;
    if (!ctx) return amp_error(AMP_ERR_INVALID_ARG, "%s: ctx must not be NULL", who);
    amp_status s = check_dir(who, dir);
    if (s != AMP_OK) return s;
    char config[4096];
    snprintf(config, sizeof config, "%s/config.json", dir);
    amp_llama_config c;
    amp_model *m = NULL;
    s = amp_llama_config_load(config, &c);
    if (s == AMP_OK) s = amp_llama_create(ctx, &c, &m);
    if (s == AMP_OK) s = amp_model_build(m);
    if (s == AMP_OK) s = load_folder_weights(who, m, NULL, dir);
    if (s != AMP_OK) {
        amp_model_free(m);
        return s;
    }
    *out = m;
    return AMP_OK;
}

amp_status amp_llama_load_pretrained(amp_model *m, amp_optimizer *opt, const char *dir) {
    static const char who[] = "amp_llama_load_pretrained";
    amp_llama_config mine, theirs;
    amp_status s = check_dir(who, dir);
    if (s == AMP_OK && amp_llama_config_of(m, &mine) != AMP_OK)
        s = amp_error(AMP_ERR_INVALID_ARG, "%s: the model is not a Llama of amp_llama_create", who);
    char config[4096];
    if (s == AMP_OK) snprintf(config, sizeof config, "%s/config.json", dir);
    if (s == AMP_OK) s = amp_llama_config_load(config, &theirs);
    char differ[1024];
    if (s == AMP_OK && amp_llama_config_differences(&theirs, &mine, differ, sizeof differ))
        s = amp_error(AMP_ERR_INVALID_ARG, "%s: %s is another model's than this one: %s (the "
                      "file's against the model's)", who, config, differ);
    if (s == AMP_OK) s = load_folder_weights(who, m, opt, dir);
    return s;
}

amp_status amp_llama_save_pretrained(amp_model *m, const char *dir) {
    static const char who[] = "amp_llama_save_pretrained";
    amp_llama_config c;
    amp_status s = check_dir(who, dir);
    if (s == AMP_OK && amp_llama_config_of(m, &c) != AMP_OK)
        s = amp_error(AMP_ERR_INVALID_ARG, "%s: the model is not a Llama of amp_llama_create", who);
    char path[4096];
    if (s == AMP_OK && mkdir(dir, 0777) != 0 && errno != EEXIST)
        s = amp_error(AMP_ERR_IO, "%s: cannot make %s: %s", who, dir, strerror(errno));
    if (s == AMP_OK) snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (s == AMP_OK) s = amp_model_save_weights(m, path);
    if (s == AMP_OK) snprintf(path, sizeof path, "%s/config.json", dir);
    if (s == AMP_OK) s = amp_llama_config_save(&c, path);
    return s;
}
