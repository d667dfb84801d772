/* The state file: what resuming needs beyond the weights (checkpoint/ckpt_state.h). Optimizer
 * state follows torch.optim's state_dict: per parameter index, "momentum_buffer" (SGD) or
 * "exp_avg", "exp_avg_sq" and "step" (Adam), present only once the parameter has been stepped.
 * Integer state (steps, counters, the RNG) is stored as 8-byte integers, the scale as F32: every
 * value comes back with its exact bits. */
#include "checkpoint/ckpt_state.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/ckpt_model.h"
#include "core/cpu_info.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tensor_internal.h"
#include "nn/model_internal.h"
#include "optim/optimizer_internal.h"

#define META_KIND "optimizer.kind"
#define META_PARAMS "optimizer.param_names"
#define META_LOSSES "amp.num_losses"
#define META_LEVEL "amp.opt_level"
#define META_HALF "amp.half_type"
#define META_THREADS "machine.threads"
#define META_ISA "machine.isa"
#define META_CPU "machine.cpu"

enum { ISSUE_MISSING, ISSUE_SHAPE, ISSUE_UNEXPECTED, ISSUE_OTHER };

static const char *amp_ckpt_kind_name(const amp_optimizer *opt) {
    switch (amp_optimizer_kind(opt)) {
    case AMP_OPTIM_SGD: return "sgd";
    case AMP_OPTIM_LAMB: return "lamb";
    default: return "adam";
    }
}

/* The parameter names, one per line: how a load checks that index i means the same tensor. */
static amp_status amp_ckpt_param_list(const amp_optimizer *opt, char **out) {
    size_t len = 1;
    for (int i = 0; i < opt->n_params; i++)
        len += strlen(opt->names[i] ? opt->names[i] : "") + 8;
    char *s = malloc(len);
    if (!s) return amp_fail(AMP_ERR_OOM, "checkpoint: out of memory");
    s[0] = '\0';
    size_t n = 0;
    for (int i = 0; i < opt->n_params; i++) {
        /* A parameter outside group 0 carries "@<group>": the lists of optimizers grouped
         * differently differ, and an ungrouped one's list is as it always was. */
        int g = amp_optimizer_param_group(opt, i);
        const char *name = opt->names[i] ? opt->names[i] : "";
        n += (size_t)(g > 0 ? snprintf(s + n, len - n, "%s@%d\n", name, g)
                            : snprintf(s + n, len - n, "%s\n", name));
    }
    *out = s;
    return AMP_OK;
}

static amp_status amp_ckpt_add_optimizer(amp_st_writer *w, amp_ckpt_bufs *b, amp_optimizer *opt) {
    char name[256], *list = NULL;
    AMP_TRY(amp_st_writer_set_meta(w, META_KIND, amp_ckpt_kind_name(opt)));
    AMP_TRY(amp_ckpt_param_list(opt, &list));
    amp_status s = amp_st_writer_set_meta(w, META_PARAMS, list);
    free(list);
    AMP_TRY(s);
    AMP_TRY(amp_optimizer_refresh(opt)); /* step counts the device moved */
    AMP_TRY(amp_ckpt_add_i64(w, b, "optimizer.n_steps", amp_optimizer_step_count(opt)));
    AMP_TRY(amp_ckpt_add_f32(w, b, "optimizer.lr", amp_optimizer_lr(opt)));
    for (int g = 1; g < amp_optimizer_n_groups(opt); g++) {
        snprintf(name, sizeof name, "optimizer.param_groups.%d.lr", g);
        AMP_TRY(amp_ckpt_add_f32(w, b, name, amp_optimizer_group_lr(opt, g)));
        snprintf(name, sizeof name, "optimizer.param_groups.%d.weight_decay", g);
        AMP_TRY(amp_ckpt_add_f32(w, b, name, amp_optimizer_group_weight_decay(opt, g)));
    }
    for (int i = 0; i < opt->n_params; i++) {
        if (!amp_optimizer_has_state(opt, i)) continue;
        for (int j = 0; j < amp_optimizer_n_state(opt); j++) {
            const char *sn = amp_optimizer_state_name(opt, j);
            amp_tensor *t;
            AMP_TRY(amp_optimizer_state_tensor(opt, i, sn, &t));
            snprintf(name, sizeof name, "optimizer.state.%d.%s", i, sn);
            AMP_TRY(amp_ckpt_add_tensor(w, b, name, t));
        }
        int64_t step;
        if (amp_optimizer_state_step(opt, i, &step) == AMP_OK) {
            snprintf(name, sizeof name, "optimizer.state.%d.step", i);
            AMP_TRY(amp_ckpt_add_i64(w, b, name, step));
        }
    }
    if (!amp_optimizer_has_masters(opt)) return AMP_OK;
    for (int i = 0; i < opt->n_params; i++) {
        snprintf(name, sizeof name, "master.%s", opt->names[i] ? opt->names[i] : "");
        AMP_TRY(amp_ckpt_add_tensor(w, b, name, amp_optimizer_master(opt, i)));
    }
    return AMP_OK;
}

static amp_status amp_ckpt_add_scalers(amp_st_writer *w, amp_ckpt_bufs *b, amp_optimizer *opt) {
    amp_options o;
    if (amp_get_options(opt, &o) != AMP_OK) return AMP_OK; /* no amp_initialize: no scalers */
    char v[32], name[96];
    snprintf(v, sizeof v, "%d", o.num_losses);
    AMP_TRY(amp_st_writer_set_meta(w, META_LOSSES, v));
    snprintf(v, sizeof v, "O%d", (int)o.opt_level);
    AMP_TRY(amp_st_writer_set_meta(w, META_LEVEL, v));
    AMP_TRY(amp_st_writer_set_meta(w, META_HALF, o.half_type == AMP_HALF_BF16 ? "bf16" : "f16"));
    for (int k = 0; k < o.num_losses; k++) {
        amp_scaler_state sc;
        AMP_TRY(amp_scaler_get_state(opt, k, &sc));
        snprintf(name, sizeof name, "scaler.%d.scale", k);
        AMP_TRY(amp_ckpt_add_f32(w, b, name, sc.scale));
        const struct { const char *what; int64_t v; } ints[] = {
            {"growth_tracker", sc.growth_tracker}, {"hysteresis_left", sc.hysteresis_left},
            {"skipped_steps", sc.skipped_steps},   {"total_steps", sc.total_steps},
            {"dynamic", sc.dynamic},               {"check_overflow", sc.check_overflow},
        };
        for (size_t j = 0; j < sizeof ints / sizeof ints[0]; j++) {
            snprintf(name, sizeof name, "scaler.%d.%s", k, ints[j].what);
            AMP_TRY(amp_ckpt_add_i64(w, b, name, ints[j].v));
        }
    }
    return AMP_OK;
}

amp_status amp_ckpt_state_add(amp_st_writer *w, amp_ckpt_bufs *b, int64_t step, amp_model *m,
                              amp_optimizer *opt, const amp_checkpoint_opts *o) {
    char v[64];
    AMP_TRY(amp_ckpt_add_i64(w, b, "train.step", step));
    amp_rng_state rng;
    AMP_TRY(amp_rng_get_state(amp_model_ctx(m), &rng));
    AMP_TRY(amp_ckpt_add_u64(w, b, "rng.seed", rng.seed));
    AMP_TRY(amp_ckpt_add_u64(w, b, "rng.counter", rng.counter));
    if (o->loader) {
        amp_loader_state ls;
        AMP_TRY(amp_loader_get_state(o->loader, &ls));
        AMP_TRY(amp_ckpt_add_i64(w, b, "loader.epoch", ls.epoch));
        AMP_TRY(amp_ckpt_add_i64(w, b, "loader.batch", ls.batch));
        /* What decides the batches: a resume with other values would see other batches. */
        amp_loader_opts lo;
        AMP_TRY(amp_loader_get_opts(o->loader, &lo));
        AMP_TRY(amp_ckpt_add_u64(w, b, "loader.seed", lo.shuffle ? lo.seed : 0));
        AMP_TRY(amp_ckpt_add_i64(w, b, "loader.batch_size", lo.batch_size));
        AMP_TRY(amp_ckpt_add_i64(w, b, "loader.samples", amp_loader_n_samples(o->loader)));
        AMP_TRY(amp_ckpt_add_i64(w, b, "loader.shuffle", lo.shuffle));
    }
    if (opt) {
        AMP_TRY(amp_ckpt_add_optimizer(w, b, opt));
        AMP_TRY(amp_ckpt_add_scalers(w, b, opt));
    }
    snprintf(v, sizeof v, "%d", omp_get_max_threads());
    AMP_TRY(amp_st_writer_set_meta(w, META_THREADS, v));
    AMP_TRY(amp_st_writer_set_meta(w, META_ISA, amp_cpu_isa()));
    AMP_TRY(amp_st_writer_set_meta(w, META_CPU, amp_cpu_model()));
    for (int i = 0; i < o->n_user; i++) {
        char key[256];
        if (!o->user_keys || !o->user_values || !o->user_keys[i] || !o->user_values[i])
            return amp_fail(AMP_ERR_INVALID_ARG, "amp_checkpoint_save: user metadata %d is NULL", i);
        snprintf(key, sizeof key, "user.%s", o->user_keys[i]);
        AMP_TRY(amp_st_writer_set_meta(w, key, o->user_values[i]));
    }
    return AMP_OK;
}

/* ---- validation ---- */

static bool amp_ckpt_has_masters(const amp_st_reader *r) {
    size_t n = amp_st_reader_n(r);
    amp_st_tensor f;
    for (size_t i = 0; i < n; i++)
        if (amp_st_reader_at(r, i, &f) == AMP_OK && !strncmp(f.name, "master.", 7)) return true;
    return false;
}

static void amp_ckpt_check_f32(const amp_st_reader *r, const char *name, const amp_tensor *like,
                               amp_ckpt_issues *is) {
    amp_st_tensor f;
    if (!amp_ckpt_find(r, name, &f)) amp_ckpt_issue(is, ISSUE_MISSING, "%s", name);
    else if (f.dtype != AMP_ST_F32 || !amp_ckpt_fits(&f, like)) {
        char fs[96];
        amp_ckpt_issue(is, ISSUE_SHAPE, "%s (%s %s)", name, amp_st_dtype_name(f.dtype),
                       amp_ckpt_shape_str(&f, fs, sizeof fs));
    }
}

/* Optimizer state entries of parameter i: all of the kind's names, or none. */
static void amp_ckpt_check_param_state(const amp_st_reader *r, const amp_optimizer *opt, int i,
                                       amp_ckpt_issues *is) {
    char name[256];
    int n_state = amp_optimizer_n_state(opt), present = 0;
    for (int j = 0; j < n_state; j++) {
        snprintf(name, sizeof name, "optimizer.state.%d.%s", i, amp_optimizer_state_name(opt, j));
        present += amp_ckpt_find(r, name, &(amp_st_tensor){0});
    }
    bool adam = amp_optim_kind_has_steps(amp_optimizer_kind(opt));
    char step_name[64];
    snprintf(step_name, sizeof step_name, "optimizer.state.%d.step", i);
    int64_t step = 0;
    bool has_step = amp_ckpt_find(r, step_name, &(amp_st_tensor){0});
    if (present == 0 && !has_step) return;
    for (int j = 0; j < n_state; j++) {
        snprintf(name, sizeof name, "optimizer.state.%d.%s", i, amp_optimizer_state_name(opt, j));
        amp_ckpt_check_f32(r, name, opt->params[i], is);
    }
    if (adam && (!has_step || amp_ckpt_get_i64(r, step_name, &step) != AMP_OK || step < 1))
        amp_ckpt_issue(is, ISSUE_OTHER, "optimizer.state.%d.step (want an int64 >= 1)", i);
    if (!adam && has_step) amp_ckpt_issue(is, ISSUE_UNEXPECTED, "optimizer.state.%d.step", i);
}

/* Whether `name` is something this optimizer would have written. */
static bool amp_ckpt_state_known(const amp_optimizer *opt, const char *name) {
    if (!strncmp(name, "master.", 7)) {
        for (int i = 0; i < opt->n_params; i++)
            if (opt->names[i] && !strcmp(name + 7, opt->names[i])) return true;
        return false;
    }
    if (strncmp(name, "optimizer.state.", 16)) return true; /* other groups: checked by name */
    char *end;
    long i = strtol(name + 16, &end, 10);
    if (end == name + 16 || *end != '.' || i < 0 || i >= opt->n_params) return false;
    if (!strcmp(end + 1, "step")) return true;
    for (int j = 0; j < amp_optimizer_n_state(opt); j++)
        if (!strcmp(end + 1, amp_optimizer_state_name(opt, j))) return true;
    return false;
}

static void amp_ckpt_check_optimizer(const amp_st_reader *r, const amp_optimizer *opt,
                                     amp_ckpt_issues *is) {
    const char *kind = amp_st_reader_meta(r, META_KIND), *names = amp_st_reader_meta(r, META_PARAMS);
    if (!kind || strcmp(kind, amp_ckpt_kind_name(opt)))
        amp_ckpt_issue(is, ISSUE_OTHER, "optimizer kind %s, this one is %s", kind ? kind : "(none)",
                       amp_ckpt_kind_name(opt));
    char *mine = NULL;
    if (amp_ckpt_param_list(opt, &mine) == AMP_OK && (!names || strcmp(names, mine)))
        amp_ckpt_issue(is, ISSUE_OTHER, "the optimizer's parameter list differs (another model, "
                       "another parameter order or other parameter groups)");
    free(mine);
    int64_t v;
    float lr;
    if (amp_ckpt_get_i64(r, "optimizer.n_steps", &v) != AMP_OK || v < 0)
        amp_ckpt_issue(is, ISSUE_MISSING, "optimizer.n_steps");
    if (amp_ckpt_get_f32(r, "optimizer.lr", &lr) != AMP_OK || !(lr >= 0))
        amp_ckpt_issue(is, ISSUE_MISSING, "optimizer.lr");
    for (int g = 1; g < amp_optimizer_n_groups(opt); g++) {
        char name[96];
        float wd;
        snprintf(name, sizeof name, "optimizer.param_groups.%d.lr", g);
        if (amp_ckpt_get_f32(r, name, &lr) != AMP_OK || !(lr >= 0) || !isfinite(lr))
            amp_ckpt_issue(is, ISSUE_MISSING, "%s", name);
        snprintf(name, sizeof name, "optimizer.param_groups.%d.weight_decay", g);
        if (amp_ckpt_get_f32(r, name, &wd) != AMP_OK)
            amp_ckpt_issue(is, ISSUE_MISSING, "%s", name);
        else if (wd != amp_optimizer_group_weight_decay(opt, g))
            amp_ckpt_issue(is, ISSUE_OTHER, "group %d's weight_decay is %g in the file, %g here",
                           g, (double)wd, (double)amp_optimizer_group_weight_decay(opt, g));
    }
    for (int i = 0; i < opt->n_params; i++) amp_ckpt_check_param_state(r, opt, i, is);
    if (amp_ckpt_has_masters(r))
        for (int i = 0; i < opt->n_params; i++) {
            char name[256];
            snprintf(name, sizeof name, "master.%s", opt->names[i] ? opt->names[i] : "");
            amp_ckpt_check_f32(r, name, opt->params[i], is);
        }
    size_t n = amp_st_reader_n(r);
    amp_st_tensor f;
    for (size_t i = 0; i < n; i++)
        if (amp_st_reader_at(r, i, &f) == AMP_OK && !amp_ckpt_state_known(opt, f.name))
            amp_ckpt_issue(is, ISSUE_UNEXPECTED, "%s", f.name);
}

static void amp_ckpt_check_scalers(const amp_st_reader *r, const amp_optimizer *opt,
                                   amp_ckpt_issues *is) {
    amp_options o;
    const char *saved = amp_st_reader_meta(r, META_LOSSES);
    if (!saved || amp_get_options(opt, &o) != AMP_OK) return; /* applied, or said, later */
    if (atoi(saved) != o.num_losses)
        amp_ckpt_issue(is, ISSUE_OTHER, "%s loss scalers, this run has %d", saved, o.num_losses);
    for (int k = 0; k < o.num_losses && k < atoi(saved); k++) {
        char name[96];
        float scale;
        snprintf(name, sizeof name, "scaler.%d.scale", k);
        if (amp_ckpt_get_f32(r, name, &scale) != AMP_OK) amp_ckpt_issue(is, ISSUE_MISSING, "%s", name);
    }
}

/* The saved loader's seed, batch size, epoch length and shuffle against this loader's. */
static bool amp_ckpt_loader_same(const amp_st_reader *r, amp_loader *ld, amp_ckpt_issues *is) {
    amp_loader_opts lo;
    uint64_t seed;
    int64_t batch_size, samples, shuffle;
    if (amp_loader_get_opts(ld, &lo) != AMP_OK || amp_ckpt_get_u64(r, "loader.seed", &seed) ||
        amp_ckpt_get_i64(r, "loader.batch_size", &batch_size) ||
        amp_ckpt_get_i64(r, "loader.samples", &samples) ||
        amp_ckpt_get_i64(r, "loader.shuffle", &shuffle)) {
        amp_ckpt_issue(is, ISSUE_MISSING, "loader.seed/batch_size/samples/shuffle");
        return false;
    }
    if (seed == (lo.shuffle ? lo.seed : 0) && batch_size == lo.batch_size &&
        samples == amp_loader_n_samples(ld) && (shuffle != 0) == lo.shuffle)
        return true;
    amp_ckpt_issue(is, ISSUE_OTHER, "loader (saved: seed %llu, batch size %lld, %lld samples, "
                   "shuffle %d; this loader: seed %llu, batch size %lld, %lld samples, shuffle %d: "
                   "create it with the saved options)", (unsigned long long)seed,
                   (long long)batch_size, (long long)samples, (int)shuffle,
                   (unsigned long long)(lo.shuffle ? lo.seed : 0), (long long)lo.batch_size,
                   (long long)amp_loader_n_samples(ld), (int)lo.shuffle);
    return false;
}

amp_status amp_ckpt_state_check(const amp_st_reader *r, const amp_model *m,
                                const amp_optimizer *opt, const amp_checkpoint_opts *o) {
    amp_ckpt_issues is = {.group = {"missing", "mis-shaped", "unexpected", "mismatched"}};
    uint64_t u;
    int64_t v;
    if (amp_ckpt_get_u64(r, "rng.seed", &u) != AMP_OK) amp_ckpt_issue(&is, ISSUE_MISSING, "rng.seed");
    if (amp_ckpt_get_u64(r, "rng.counter", &u) != AMP_OK)
        amp_ckpt_issue(&is, ISSUE_MISSING, "rng.counter");
    if (amp_ckpt_get_i64(r, "train.step", &v) != AMP_OK || v < 0)
        amp_ckpt_issue(&is, ISSUE_MISSING, "train.step");
    if (o->loader) {
        int64_t epoch = -1, batch = -1;
        if (amp_ckpt_get_i64(r, "loader.epoch", &epoch) != AMP_OK ||
            amp_ckpt_get_i64(r, "loader.batch", &batch) != AMP_OK)
            amp_ckpt_issue(&is, ISSUE_MISSING, "loader.epoch/loader.batch (saved without a loader)");
        else if (!amp_ckpt_loader_same(r, o->loader, &is))
            ; /* named in is */
        else if (epoch < 0 || epoch >= ((int64_t)1 << 32) || batch < 0 ||
                 batch > amp_loader_n_batches(o->loader))
            amp_ckpt_issue(&is, ISSUE_OTHER, "loader position epoch %lld batch %lld (this loader "
                           "has %lld batches per epoch)", (long long)epoch, (long long)batch,
                           (long long)amp_loader_n_batches(o->loader));
    }
    if (opt) {
        if (opt->model != m)
            return amp_fail(AMP_ERR_INVALID_ARG, "amp_checkpoint_load: the optimizer was not "
                            "created for this model");
        amp_ckpt_check_optimizer(r, opt, &is);
        amp_ckpt_check_scalers(r, opt, &is);
    }
    if (amp_ckpt_issues_any(&is)) return amp_ckpt_issues_fail(&is, "state", amp_st_reader_label(r));
    return AMP_OK;
}

/* ---- applying ---- */

amp_status amp_ckpt_masters_from_files(const amp_st_reader *const *rs, int n_files,
                                       amp_optimizer *opt) {
    amp_st_tensor f;
    for (int i = 0; i < opt->n_params; i++) {
        const char *name = opt->names[i] ? opt->names[i] : "";
        bool found = false;
        for (int k = 0; k < n_files && !found; k++) found = amp_ckpt_find(rs[k], name, &f);
        if (!found)
            return amp_fail(AMP_ERR_FORMAT, "checkpoint '%s': no weights for '%s'",
                            amp_st_reader_label(rs[0]), opt->names[i] ? opt->names[i] : "?");
        AMP_TRY(amp_ckpt_load_into(&f, amp_optimizer_master(opt, i)));
    }
    return amp_optimizer_masters_to_params(opt);
}

amp_status amp_ckpt_masters_from_weights(const amp_st_reader *model, amp_optimizer *opt) {
    return amp_ckpt_masters_from_files(&model, 1, opt);
}

static amp_status amp_ckpt_apply_optimizer(const amp_st_reader *r, amp_optimizer *opt) {
    char name[256];
    amp_st_tensor f;
    for (int i = 0; i < opt->n_params; i++) {
        bool has = false;
        for (int j = 0; j < amp_optimizer_n_state(opt); j++) {
            const char *sn = amp_optimizer_state_name(opt, j);
            snprintf(name, sizeof name, "optimizer.state.%d.%s", i, sn);
            amp_tensor *t;
            AMP_TRY(amp_optimizer_state_tensor(opt, i, sn, &t));
            if (amp_ckpt_find(r, name, &f)) {
                AMP_TRY(amp_ckpt_load_into(&f, t));
                has = true;
            } else {
                AMP_TRY(t->backend->memset_zero(t->backend->dev, t->data, amp_tensor_nbytes(t)));
            }
        }
        int64_t step = 0;
        snprintf(name, sizeof name, "optimizer.state.%d.step", i);
        if (amp_optim_kind_has_steps(amp_optimizer_kind(opt)) && has) AMP_TRY(amp_ckpt_get_i64(r, name, &step));
        AMP_TRY(amp_optimizer_state_restore(opt, i, has, step));
    }
    int64_t n_steps;
    float lr;
    AMP_TRY(amp_ckpt_get_i64(r, "optimizer.n_steps", &n_steps));
    AMP_TRY(amp_ckpt_get_f32(r, "optimizer.lr", &lr));
    AMP_TRY(amp_optimizer_set_step_count(opt, n_steps));
    AMP_TRY(amp_optimizer_set_group_lr(opt, 0, lr));
    for (int g = 1; g < amp_optimizer_n_groups(opt); g++) {
        snprintf(name, sizeof name, "optimizer.param_groups.%d.lr", g);
        AMP_TRY(amp_ckpt_get_f32(r, name, &lr));
        AMP_TRY(amp_optimizer_set_group_lr(opt, g, lr));
    }
    return AMP_OK;
}

/* Every scaler, or none: the old states come back if one is refused. */
static amp_status amp_ckpt_apply_scalers(const amp_st_reader *r, amp_optimizer *opt) {
    amp_options o;
    if (!amp_st_reader_meta(r, META_LOSSES)) return AMP_OK;
    if (amp_get_options(opt, &o) != AMP_OK) {
        amp_log_msg(AMP_LOG_INFO, "checkpoint '%s': loss scaler state not applied (amp_initialize was "
                "not called before the load)", amp_st_reader_label(r));
        return AMP_OK;
    }
    amp_scaler_state old[16], want;
    int n = o.num_losses < 16 ? o.num_losses : 16;
    for (int k = 0; k < n; k++) AMP_TRY(amp_scaler_get_state(opt, k, &old[k]));
    amp_status s = AMP_OK;
    for (int k = 0; s == AMP_OK && k < n; k++) {
        char name[96];
        int64_t v[6];
        static const char *what[6] = {"growth_tracker", "hysteresis_left", "skipped_steps",
                                      "total_steps", "dynamic", "check_overflow"};
        snprintf(name, sizeof name, "scaler.%d.scale", k);
        s = amp_ckpt_get_f32(r, name, &want.scale);
        for (int j = 0; s == AMP_OK && j < 6; j++) {
            snprintf(name, sizeof name, "scaler.%d.%s", k, what[j]);
            s = amp_ckpt_get_i64(r, name, &v[j]);
        }
        if (s != AMP_OK) break;
        want.growth_tracker = v[0];
        want.hysteresis_left = (int)v[1];
        want.skipped_steps = v[2];
        want.total_steps = v[3];
        want.dynamic = v[4] != 0;
        want.check_overflow = v[5] != 0;
        s = amp_scaler_set_state(opt, k, &want);
    }
    if (s != AMP_OK)
        for (int k = 0; k < n; k++) (void)amp_scaler_set_state(opt, k, &old[k]);
    return s == AMP_OK ? AMP_OK : amp_fail_context(s, "checkpoint '%s'", amp_st_reader_label(r));
}

/* One line when the bits may differ from an uninterrupted run: another thread count or ISA. */
static void amp_ckpt_note_machine(const amp_st_reader *r) {
    const char *threads = amp_st_reader_meta(r, META_THREADS), *isa = amp_st_reader_meta(r, META_ISA);
    char now[16];
    snprintf(now, sizeof now, "%d", omp_get_max_threads());
    if ((threads && strcmp(threads, now)) || (isa && strcmp(isa, amp_cpu_isa())))
        amp_log_msg(AMP_LOG_INFO, "checkpoint '%s' was saved with %s threads on [%s], this run has %s "
                "on [%s]: the run goes on, but not bit for bit as it would have (oneDNN's "
                "reductions depend on both)", amp_st_reader_label(r), threads ? threads : "?",
                isa ? isa : "?", now, amp_cpu_isa());
}

amp_status amp_ckpt_state_apply(const amp_st_reader *r, const amp_st_reader *model, amp_model *m,
                                amp_optimizer *opt, const amp_checkpoint_opts *o, int64_t *step) {
    bool file_masters = amp_ckpt_has_masters(r);
    bool run_masters = opt && amp_optimizer_has_masters(opt);
    if (model) AMP_TRY(amp_ckpt_model_apply(model, m, file_masters || run_masters));
    if (opt && file_masters) { /* the full-precision values: into the masters, or the weights */
        for (int i = 0; i < opt->n_params; i++) {
            char name[256];
            amp_st_tensor f;
            snprintf(name, sizeof name, "master.%s", opt->names[i] ? opt->names[i] : "");
            if (!amp_ckpt_find(r, name, &f)) continue; /* checked */
            AMP_TRY(amp_ckpt_load_into(&f, run_masters ? amp_optimizer_master(opt, i)
                                                       : opt->params[i]));
        }
        if (run_masters) AMP_TRY(amp_optimizer_masters_to_params(opt));
    } else if (run_masters && model) {
        AMP_TRY(amp_ckpt_masters_from_weights(model, opt));
    }
    if (opt) {
        AMP_TRY(amp_ckpt_apply_optimizer(r, opt));
        AMP_TRY(amp_ckpt_apply_scalers(r, opt));
    }
    amp_rng_state rng;
    AMP_TRY(amp_ckpt_get_u64(r, "rng.seed", &rng.seed));
    AMP_TRY(amp_ckpt_get_u64(r, "rng.counter", &rng.counter));
    AMP_TRY(amp_rng_set_state(amp_model_ctx(m), &rng));
    if (o->loader) {
        amp_loader_state ls;
        AMP_TRY(amp_ckpt_get_i64(r, "loader.epoch", &ls.epoch));
        AMP_TRY(amp_ckpt_get_i64(r, "loader.batch", &ls.batch));
        AMP_TRY(amp_loader_set_state(o->loader, &ls));
    }
    int64_t saved_step;
    AMP_TRY(amp_ckpt_get_i64(r, "train.step", &saved_step));
    if (step) *step = saved_step;
    amp_ckpt_note_machine(r);
    return AMP_OK;
}
