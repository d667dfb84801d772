/* amp_checkpoint_save / amp_checkpoint_load and the weights-only calls (include/amp/checkpoint.h):
 * the two files of a step folder are built here from the model and state halves, written into a
 * temporary folder and published (checkpoint/ckpt_files.c); a load reads and validates both
 * completely before anything is applied. */
#define _POSIX_C_SOURCE 200809L
#include "amp/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/ckpt_files.h"
#include "checkpoint/ckpt_model.h"
#include "checkpoint/ckpt_state.h"
#include "core/error.h"
#include "nn/model_internal.h"
#include "optim/optimizer_internal.h"
#include "amp/state_internal.h"

static const amp_checkpoint_opts amp_ckpt_no_opts;

/* Builds one file with `add` and writes it to dir/file. */
static amp_status amp_ckpt_write(const char *dir, const char *file,
                                 amp_status (*add)(amp_st_writer *, amp_ckpt_bufs *, void *),
                                 void *ctx) {
    char path[AMP_CKPT_PATH_MAX];
    AMP_TRY(amp_ckpt_join(dir, file, path, sizeof path));
    amp_st_writer *w = NULL;
    amp_ckpt_bufs bufs = {0};
    amp_status s = amp_st_writer_create(&w);
    if (s == AMP_OK) s = add(w, &bufs, ctx);
    if (s == AMP_OK) s = amp_st_writer_write_file(w, path);
    amp_st_writer_free(w);
    amp_ckpt_bufs_free(&bufs);
    return s;
}

typedef struct amp_ckpt_save_job {
    int64_t step;
    amp_model *m;
    amp_optimizer *opt;
    const amp_checkpoint_opts *o;
} amp_ckpt_save_job;

static amp_status amp_ckpt_add_model_file(amp_st_writer *w, amp_ckpt_bufs *b, void *ctx) {
    return amp_ckpt_model_add(w, b, ((amp_ckpt_save_job *)ctx)->m);
}

static amp_status amp_ckpt_add_state_file(amp_st_writer *w, amp_ckpt_bufs *b, void *ctx) {
    amp_ckpt_save_job *j = ctx;
    return amp_ckpt_state_add(w, b, j->step, j->m, j->opt, j->o);
}

amp_status amp_checkpoint_save(const char *dir, int64_t step, amp_model *m, amp_optimizer *opt,
                               const amp_checkpoint_opts *opts, char *path_out, size_t path_size) {
    AMP_CHECK_ARG(dir);
    AMP_CHECK_ARG(m);
    AMP_TRY(amp_model_check_root("amp_checkpoint_save", m));
    if (opt) AMP_TRY(amp_optimizer_check_usable("amp_checkpoint_save", opt));
    if (opt)
        AMP_TRY(amp_optimizer_check_unsharded("amp_checkpoint_save", opt,
                                              "a checkpoint (amp_ddp_checkpoint_save gathers it)"));
    const amp_checkpoint_opts *o = opts ? opts : &amp_ckpt_no_opts;
    if (opt && opt->model != m)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_checkpoint_save: the optimizer was not created "
                        "for this model");
    if (o->n_user < 0 || o->keep < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_checkpoint_save: n_user %d and keep %d must be "
                        ">= 0", o->n_user, o->keep);
    char name[64], tmp[AMP_CKPT_PATH_MAX], final[AMP_CKPT_PATH_MAX];
    AMP_TRY(amp_ckpt_step_name(step, name, sizeof name));
    /* path_out is checked before anything is written: a refused save leaves the folder, its
     * step folders and `latest` as they were. */
    if (path_out) {
        if (path_size == 0)
            return amp_fail(AMP_ERR_INVALID_ARG, "amp_checkpoint_save: path_size is 0 for a "
                            "non-NULL path_out; give its size, or NULL for no path");
        amp_status fits = amp_ckpt_join(dir, name, final, sizeof final);
        if (fits == AMP_OK && strlen(final) >= path_size)
            fits = amp_fail(AMP_ERR_INVALID_ARG, "amp_checkpoint_save: path_out has %zu bytes, "
                            "the new folder's path '%s' needs %zu; nothing was saved",
                            path_size, final, strlen(final) + 1);
        AMP_TRY(fits);
    }
    AMP_TRY(amp_ckpt_mkdirs(dir));
    AMP_TRY(amp_ckpt_make_tmp(dir, name, tmp, sizeof tmp));
    amp_ckpt_save_job job = {step, m, opt, o};
    amp_status s = amp_ckpt_write(tmp, AMP_CKPT_MODEL_FILE, amp_ckpt_add_model_file, &job);
    if (s == AMP_OK) s = amp_ckpt_write(tmp, AMP_CKPT_STATE_FILE, amp_ckpt_add_state_file, &job);
    if (s == AMP_OK) s = amp_ckpt_publish(dir, tmp, name);
    if (s != AMP_OK) {
        (void)amp_ckpt_remove_folder(tmp);
        return amp_fail_context(s, "amp_checkpoint_save '%s'", dir);
    }
    AMP_TRY(amp_ckpt_set_latest(dir, name));
    AMP_TRY(amp_ckpt_prune(dir, o->keep, name));
    if (path_out) memcpy(path_out, final, strlen(final) + 1);
    return AMP_OK;
}

amp_status amp_checkpoint_latest(const char *dir, char *out, size_t size) {
    AMP_CHECK_ARG(dir);
    AMP_CHECK_ARG(out);
    char name[256];
    AMP_TRY(amp_ckpt_read_latest(dir, name, sizeof name));
    return amp_ckpt_join(dir, name, out, size);
}

amp_status amp_checkpoint_find_latest(const char *dir, char *out, size_t size, bool *found) {
    AMP_CHECK_ARG(dir);
    AMP_CHECK_ARG(out);
    AMP_CHECK_ARG(found);
    if (size == 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_checkpoint_find_latest: size is 0");
    char probe[AMP_CKPT_PATH_MAX];
    struct stat st;
    AMP_TRY(amp_ckpt_join(dir, AMP_CKPT_LATEST, probe, sizeof probe));
    bool none = false;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT)
            return amp_fail(AMP_ERR_IO, "amp_checkpoint_find_latest: cannot read '%s': %s", dir,
                            strerror(errno));
        none = true; /* the folder comes with the first save */
    } else if (!S_ISDIR(st.st_mode)) {
        return amp_fail(AMP_ERR_IO, "amp_checkpoint_find_latest: '%s' is not a directory", dir);
    } else if (stat(probe, &st) != 0) {
        if (errno != ENOENT)
            return amp_fail(AMP_ERR_IO, "amp_checkpoint_find_latest: cannot read '%s': %s",
                            probe, strerror(errno));
        /* No save completed: what a save killed before its `latest` left goes. */
        amp_ckpt_clean_leftovers(dir);
        none = true;
    }
    if (none) {
        *found = false;
        out[0] = '\0';
        return AMP_OK;
    }
    AMP_TRY(amp_checkpoint_latest(dir, out, size));
    *found = true;
    return AMP_OK;
}

/* A step folder as given, or the one `latest` names when path is a checkpoint directory. */
static amp_status amp_ckpt_resolve(const char *who, const char *path, char *folder,
                                   size_t size) {
    char probe[AMP_CKPT_PATH_MAX];
    struct stat st;
    AMP_TRY(amp_ckpt_join(path, AMP_CKPT_LATEST, probe, sizeof probe));
    if (stat(probe, &st) == 0) return amp_checkpoint_latest(path, folder, size);
    AMP_TRY(amp_ckpt_join(path, AMP_CKPT_STATE_FILE, probe, sizeof probe));
    if (stat(probe, &st) != 0)
        return amp_fail(AMP_ERR_IO, "%s: '%s' is neither a step folder (no %s) nor a checkpoint "
                        "directory (no %s)", who, path, AMP_CKPT_STATE_FILE, AMP_CKPT_LATEST);
    if (snprintf(folder, size, "%s", path) >= (int)size)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: path too long", who);
    return AMP_OK;
}

static amp_status amp_ckpt_open(const char *folder, const char *file, amp_st_reader **r) {
    char path[AMP_CKPT_PATH_MAX];
    AMP_TRY(amp_ckpt_join(folder, file, path, sizeof path));
    return amp_st_reader_open(path, r);
}

amp_status amp_checkpoint_load(const char *path, amp_model *m, amp_optimizer *opt,
                               const amp_checkpoint_opts *opts, int64_t *step_out) {
    AMP_CHECK_ARG(path);
    AMP_CHECK_ARG(m);
    AMP_TRY(amp_model_check_root("amp_checkpoint_load", m));
    if (opt) AMP_TRY(amp_optimizer_check_usable("amp_checkpoint_load", opt));
    if (opt)
        AMP_TRY(amp_optimizer_check_unsharded("amp_checkpoint_load", opt,
                                              "a checkpoint (amp_ddp_checkpoint_load shards it)"));
    /* Between a backward and its step the load would change the weights under gradients made
     * for the old ones and then be refused at the scaler: refused first, nothing changed. */
    if (opt) AMP_TRY(amp_scaler_state_settable("amp_checkpoint_load", opt));
    const amp_checkpoint_opts *o = opts ? opts : &amp_ckpt_no_opts;
    char folder[AMP_CKPT_PATH_MAX];
    AMP_TRY(amp_ckpt_resolve("amp_checkpoint_load", path, folder, sizeof folder));
    AMP_TRY(amp_model_build(m));
    amp_st_reader *model = NULL, *state = NULL;
    amp_status s = amp_ckpt_open(folder, AMP_CKPT_MODEL_FILE, &model);
    if (s == AMP_OK) s = amp_ckpt_open(folder, AMP_CKPT_STATE_FILE, &state);
    if (s == AMP_OK) s = amp_ckpt_model_check(model, m);
    if (s == AMP_OK) s = amp_ckpt_state_check(state, m, opt, o);
    /* Nothing has changed up to here; past it only an allocation or the backend can fail. */
    if (s == AMP_OK) s = amp_ckpt_state_apply(state, model, m, opt, o, step_out);
    amp_st_reader_free(model);
    amp_st_reader_free(state);
    return s == AMP_OK ? AMP_OK : amp_fail_context(s, "amp_checkpoint_load '%s'", folder);
}

amp_status amp_checkpoint_user_meta(const char *path, const char *key, char *out, size_t size) {
    AMP_CHECK_ARG(path);
    AMP_CHECK_ARG(key);
    AMP_CHECK_ARG(out);
    char folder[AMP_CKPT_PATH_MAX], full[512];
    AMP_TRY(amp_ckpt_resolve("amp_checkpoint_user_meta", path, folder, sizeof folder));
    amp_st_reader *r = NULL;
    AMP_TRY(amp_ckpt_open(folder, AMP_CKPT_STATE_FILE, &r));
    snprintf(full, sizeof full, "user.%s", key);
    const char *v = amp_st_reader_meta(r, full);
    amp_status s = !v ? amp_fail(AMP_ERR_INVALID_ARG, "checkpoint '%s': no user metadata '%s'",
                                 folder, key)
                 : snprintf(out, size, "%s", v) >= (int)size
                     ? amp_fail(AMP_ERR_INVALID_ARG, "checkpoint '%s': metadata '%s' is longer "
                                "than %zu bytes", folder, key, size - 1)
                     : AMP_OK;
    amp_st_reader_free(r);
    return s;
}

amp_status amp_model_load_weights_files(amp_model *m, amp_optimizer *opt,
                                       const char *const *paths, int n) {
    static const char who[] = "amp_model_load_weights";
    AMP_CHECK_ARG(m);
    AMP_CHECK_ARG(paths);
    if (n < 1 || n > AMP_WEIGHT_FILES_MAX)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: %d files, want 1 to %d", who, n,
                        AMP_WEIGHT_FILES_MAX);
    for (int i = 0; i < n; i++)
        if (!paths[i]) return amp_fail(AMP_ERR_INVALID_ARG, "%s: file %d is NULL", who, i);
    AMP_TRY(amp_model_check_root(who, m));
    if (opt) AMP_TRY(amp_optimizer_check_usable(who, opt));
    if (opt && opt->model != m)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the optimizer was not created for this model",
                        who);
    AMP_TRY(amp_model_build(m));
    amp_st_reader *rs[AMP_WEIGHT_FILES_MAX] = {0};
    amp_status s = AMP_OK;
    for (int i = 0; i < n && s == AMP_OK; i++) s = amp_st_reader_open(paths[i], &rs[i]);
    bool masters = opt && amp_optimizer_has_masters(opt);
    const amp_st_reader *const *r = (const amp_st_reader *const *)rs;
    if (s == AMP_OK) s = amp_ckpt_model_check_files(r, n, m);
    if (s == AMP_OK) s = amp_ckpt_model_apply_files(r, n, m, masters);
    if (s == AMP_OK && masters) s = amp_ckpt_masters_from_files(r, n, opt);
    for (int i = 0; i < n; i++) amp_st_reader_free(rs[i]);
    return s;
}

amp_status amp_model_load_weights(amp_model *m, amp_optimizer *opt, const char *path) {
    AMP_CHECK_ARG(path);
    return amp_model_load_weights_files(m, opt, &path, 1);
}

static amp_status amp_ckpt_add_weights(amp_st_writer *w, amp_ckpt_bufs *b, void *ctx) {
    return amp_ckpt_model_add(w, b, ctx);
}

amp_status amp_model_save_weights(amp_model *m, const char *path) {
    AMP_CHECK_ARG(m);
    AMP_CHECK_ARG(path);
    AMP_TRY(amp_model_check_root("amp_model_save_weights", m));
    char dir[AMP_CKPT_PATH_MAX], tmp[AMP_CKPT_PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_model_save_weights: path too long");
    char *slash = strrchr(dir, '/');
    const char *leaf = slash ? slash + 1 : path;
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    if (snprintf(tmp, sizeof tmp, "%s/.tmp-%s", dir, leaf) >= (int)sizeof tmp)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_model_save_weights: path too long");
    amp_st_writer *w = NULL;
    amp_ckpt_bufs bufs = {0};
    amp_status s = amp_st_writer_create(&w);
    if (s == AMP_OK) s = amp_ckpt_add_weights(w, &bufs, m);
    if (s == AMP_OK) s = amp_st_writer_write_file(w, tmp); /* fsync'd */
    amp_st_writer_free(w);
    amp_ckpt_bufs_free(&bufs);
    if (s == AMP_OK && rename(tmp, path) != 0)
        s = amp_fail(AMP_ERR_IO, "amp_model_save_weights: cannot rename '%s' to '%s'", tmp, path);
    if (s == AMP_OK) s = amp_ckpt_fsync_path(dir);
    if (s != AMP_OK) remove(tmp);
    return s;
}
