/* Model weights in and out of a safetensors file, PyTorch's state_dict layout. PyTorch's batch
 * norm has a third buffer, num_batches_tracked (int64, shape []); libamp counts it per module (the
 * model's counters), and it is written and read here so that `load_state_dict(strict=True)` finds
 * every key. */
#include "checkpoint/ckpt_model.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/tensor_internal.h"
#include "nn/model_internal.h"

enum { ISSUE_MISSING, ISSUE_SHAPE, ISSUE_UNEXPECTED, ISSUE_DTYPE };

amp_status amp_ckpt_model_add(amp_st_writer *w, amp_ckpt_bufs *b, amp_model *m) {
    AMP_TRY(amp_model_build(m));
    for (int i = 0; i < m->n_params; i++)
        AMP_TRY(amp_ckpt_add_tensor(w, b, m->params[i].name, m->params[i].t));
    for (int i = 0; i < m->n_buffers; i++)
        AMP_TRY(amp_ckpt_add_tensor(w, b, m->buffers[i].name, m->buffers[i].t));
    for (int i = 0; i < m->n_counters; i++)
        AMP_TRY(amp_ckpt_add_i64(w, b, m->counters[i].name, *m->counters[i].value));
    return AMP_OK;
}

/* The file of the n that holds `name`, into *out, and how many hold it. */
static int amp_ckpt_find_in(const amp_st_reader *const *rs, int n, const char *name,
                            amp_st_tensor *out) {
    int found = 0;
    amp_st_tensor f;
    for (int i = 0; i < n; i++)
        if (amp_ckpt_find(rs[i], name, &f) && found++ == 0) *out = f;
    return found;
}

static void amp_ckpt_check_tensor(const amp_st_reader *const *rs, int n,
                                  const amp_named_tensor *nt, amp_ckpt_issues *is) {
    amp_st_tensor f;
    int found = amp_ckpt_find_in(rs, n, nt->name, &f);
    if (found == 0) {
        amp_ckpt_issue(is, ISSUE_MISSING, "%s", nt->name);
        return;
    }
    if (found > 1) {
        amp_ckpt_issue(is, ISSUE_UNEXPECTED, "%s (in %d of the files)", nt->name, found);
        return;
    }
    if (f.dtype != AMP_ST_F32 && f.dtype != AMP_ST_F16 && f.dtype != AMP_ST_BF16) {
        amp_ckpt_issue(is, ISSUE_DTYPE, "%s (%s)", nt->name, amp_st_dtype_name(f.dtype));
        return;
    }
    if (!amp_ckpt_fits(&f, nt->t)) {
        char fs[96], ms[96];
        amp_ckpt_issue(is, ISSUE_SHAPE, "%s (file %s, model %s)", nt->name,
                       amp_ckpt_shape_str(&f, fs, sizeof fs), amp_shape_str(nt->t, ms, sizeof ms));
    }
}
/* Whether a file tensor is one the model has (a parameter, a buffer or a counter). */
static bool amp_ckpt_model_knows(const amp_model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return true;
    for (int i = 0; i < m->n_buffers; i++)
        if (!strcmp(m->buffers[i].name, name)) return true;
    for (int i = 0; i < m->n_counters; i++)
        if (!strcmp(m->counters[i].name, name)) return true;
    return false;
}

amp_status amp_ckpt_model_check_files(const amp_st_reader *const *rs, int n_files,
                                      const amp_model *m) {
    amp_ckpt_issues is = {.group = {"missing", "mis-shaped", "unexpected", "not float"}};
    for (int i = 0; i < m->n_params; i++) amp_ckpt_check_tensor(rs, n_files, &m->params[i], &is);
    for (int i = 0; i < m->n_buffers; i++) amp_ckpt_check_tensor(rs, n_files, &m->buffers[i], &is);
    for (int c = 0; c < m->n_counters; c++) {
        const char *name = m->counters[c].name;
        const amp_st_reader *r = NULL;
        int64_t v;
        int found = 0;
        for (int k = 0; k < n_files; k++)
            if (amp_ckpt_find(rs[k], name, &(amp_st_tensor){0})) found++, r = rs[k];
        if (found == 0) amp_ckpt_issue(&is, ISSUE_MISSING, "%s", name);
        else if (found > 1) amp_ckpt_issue(&is, ISSUE_UNEXPECTED, "%s (in %d of the files)", name, found);
        else if (amp_ckpt_get_i64(r, name, &v) != AMP_OK || v < 0)
            amp_ckpt_issue(&is, ISSUE_DTYPE, "%s (want an int64 scalar >= 0)", name);
    }
    for (int k = 0; k < n_files; k++) {
        size_t n = amp_st_reader_n(rs[k]);
        for (size_t i = 0; i < n; i++) {
            amp_st_tensor f;
            if (amp_st_reader_at(rs[k], i, &f) == AMP_OK && !amp_ckpt_model_knows(m, f.name))
                amp_ckpt_issue(&is, ISSUE_UNEXPECTED, "%s", f.name);
        }
    }
    if (amp_ckpt_issues_any(&is))
        return amp_ckpt_issues_fail(&is, "model weights", n_files == 1
                                    ? amp_st_reader_label(rs[0]) : "the files");
    return AMP_OK;
}

amp_status amp_ckpt_model_check(const amp_st_reader *r, const amp_model *m) {
    return amp_ckpt_model_check_files(&r, 1, m);
}

amp_status amp_ckpt_model_apply_files(const amp_st_reader *const *rs, int n_files, amp_model *m,
                                      bool skip_params) {
    amp_st_tensor f;
    for (int i = 0; !skip_params && i < m->n_params; i++) {
        if (!amp_ckpt_find_in(rs, n_files, m->params[i].name, &f)) continue; /* checked */
        AMP_TRY(amp_ckpt_load_into(&f, m->params[i].t));
    }
    for (int i = 0; i < m->n_buffers; i++) {
        if (!amp_ckpt_find_in(rs, n_files, m->buffers[i].name, &f)) continue;
        AMP_TRY(amp_ckpt_load_into(&f, m->buffers[i].t));
    }
    for (int i = 0; i < m->n_counters; i++)
        for (int k = 0; k < n_files; k++)
            if (amp_ckpt_find(rs[k], m->counters[i].name, &f))
                AMP_TRY(amp_ckpt_get_i64(rs[k], m->counters[i].name, m->counters[i].value));
    return AMP_OK;
}

amp_status amp_ckpt_model_apply(const amp_st_reader *r, amp_model *m, bool skip_params) {
    return amp_ckpt_model_apply_files(&r, 1, m, skip_params);
}
