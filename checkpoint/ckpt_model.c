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

static void amp_ckpt_check_tensor(const amp_st_reader *r, const amp_named_tensor *nt,
                                  amp_ckpt_issues *is) {
    amp_st_tensor f;
    if (!amp_ckpt_find(r, nt->name, &f)) {
        amp_ckpt_issue(is, ISSUE_MISSING, "%s", nt->name);
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

amp_status amp_ckpt_model_check(const amp_st_reader *r, const amp_model *m) {
    amp_ckpt_issues is = {.group = {"missing", "mis-shaped", "unexpected", "not float"}};
    for (int i = 0; i < m->n_params; i++) amp_ckpt_check_tensor(r, &m->params[i], &is);
    for (int i = 0; i < m->n_buffers; i++) amp_ckpt_check_tensor(r, &m->buffers[i], &is);
    for (int c = 0; c < m->n_counters; c++) {
        const char *name = m->counters[c].name;
        int64_t v;
        if (!amp_ckpt_find(r, name, &(amp_st_tensor){0})) amp_ckpt_issue(&is, ISSUE_MISSING, "%s", name);
        else if (amp_ckpt_get_i64(r, name, &v) != AMP_OK || v < 0)
            amp_ckpt_issue(&is, ISSUE_DTYPE, "%s (want an int64 scalar >= 0)", name);
    }
    size_t n = amp_st_reader_n(r);
    for (size_t i = 0; i < n; i++) {
        amp_st_tensor f;
        if (amp_st_reader_at(r, i, &f) == AMP_OK && !amp_ckpt_model_knows(m, f.name))
            amp_ckpt_issue(&is, ISSUE_UNEXPECTED, "%s", f.name);
    }
    if (amp_ckpt_issues_any(&is))
        return amp_ckpt_issues_fail(&is, "model weights", amp_st_reader_label(r));
    return AMP_OK;
}

amp_status amp_ckpt_model_apply(const amp_st_reader *r, amp_model *m, bool skip_params) {
    amp_st_tensor f;
    for (int i = 0; !skip_params && i < m->n_params; i++) {
        if (!amp_ckpt_find(r, m->params[i].name, &f)) continue; /* checked: cannot happen */
        AMP_TRY(amp_ckpt_load_into(&f, m->params[i].t));
    }
    for (int i = 0; i < m->n_buffers; i++) {
        if (!amp_ckpt_find(r, m->buffers[i].name, &f)) continue;
        AMP_TRY(amp_ckpt_load_into(&f, m->buffers[i].t));
    }
    for (int i = 0; i < m->n_counters; i++)
        AMP_TRY(amp_ckpt_get_i64(r, m->counters[i].name, m->counters[i].value));
    return AMP_OK;
}
