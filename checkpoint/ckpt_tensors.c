/* Tensors between the backend and safetensors files (checkpoint/ckpt_tensors.h). */
#include "checkpoint/ckpt_tensors.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/half.h"
#include "core/tensor_internal.h"
#include "core/grow.h"

void amp_ckpt_bufs_free(amp_ckpt_bufs *b) {
    for (int i = 0; i < b->n; i++) free(b->p[i]);
    free(b->p);
    *b = (amp_ckpt_bufs){0};
}

amp_status amp_ckpt_bufs_alloc(amp_ckpt_bufs *b, size_t nbytes, void **out) {
    void **p = amp_grow(b->p, b->n, &b->cap, 64, sizeof *p);
    if (!p) return amp_fail(AMP_ERR_OOM, "checkpoint: out of memory");
    b->p = p;
    *out = malloc(nbytes ? nbytes : 1);
    if (!*out) return amp_fail(AMP_ERR_OOM, "checkpoint: out of memory for %zu bytes", nbytes);
    b->p[b->n++] = *out;
    return AMP_OK;
}

amp_status amp_ckpt_add_tensor(amp_st_writer *w, amp_ckpt_bufs *b, const char *name,
                               const amp_tensor *t) {
    amp_st_dtype dt;
    AMP_TRY(amp_st_dtype_from_amp(t->dtype, &dt));
    void *host;
    AMP_TRY(amp_ckpt_bufs_alloc(b, amp_tensor_nbytes(t), &host));
    AMP_TRY(amp_tensor_to_host(t, host, amp_tensor_nbytes(t)));
    return amp_st_writer_add(w, name, dt, t->ndim, t->shape, host);
}

static amp_status amp_ckpt_add_scalar(amp_st_writer *w, amp_ckpt_bufs *b, const char *name,
                                      amp_st_dtype dt, const void *v, size_t size) {
    void *host;
    AMP_TRY(amp_ckpt_bufs_alloc(b, size, &host));
    memcpy(host, v, size); /* every machine this runs on is little-endian, as the format */
    return amp_st_writer_add(w, name, dt, 0, NULL, host);
}

amp_status amp_ckpt_add_i64(amp_st_writer *w, amp_ckpt_bufs *b, const char *name, int64_t v) {
    return amp_ckpt_add_scalar(w, b, name, AMP_ST_I64, &v, sizeof v);
}
amp_status amp_ckpt_add_u64(amp_st_writer *w, amp_ckpt_bufs *b, const char *name, uint64_t v) {
    return amp_ckpt_add_scalar(w, b, name, AMP_ST_U64, &v, sizeof v);
}
amp_status amp_ckpt_add_f32(amp_st_writer *w, amp_ckpt_bufs *b, const char *name, float v) {
    return amp_ckpt_add_scalar(w, b, name, AMP_ST_F32, &v, sizeof v);
}

bool amp_ckpt_find(const amp_st_reader *r, const char *name, amp_st_tensor *out) {
    return amp_st_reader_find(r, name, out) == AMP_OK; /* a binary search over the names */
}

static amp_status amp_ckpt_scalar(const amp_st_reader *r, const char *name, amp_st_tensor *t) {
    if (!amp_ckpt_find(r, name, t))
        return amp_fail(AMP_ERR_FORMAT, "checkpoint '%s': no tensor '%s'", amp_st_reader_label(r),
                        name);
    if (t->numel != 1 || t->ndim > 1)
        return amp_fail(AMP_ERR_FORMAT, "checkpoint '%s': '%s' has %lld elements, want a scalar",
                        amp_st_reader_label(r), name, (long long)t->numel);
    return AMP_OK;
}

amp_status amp_ckpt_get_i64(const amp_st_reader *r, const char *name, int64_t *out) {
    amp_st_tensor t;
    AMP_TRY(amp_ckpt_scalar(r, name, &t));
    int32_t v32;
    uint64_t u64;
    switch (t.dtype) {
    case AMP_ST_I64: memcpy(out, t.data, 8); return AMP_OK;
    case AMP_ST_I32: memcpy(&v32, t.data, 4); *out = v32; return AMP_OK;
    case AMP_ST_U64:
        memcpy(&u64, t.data, 8);
        if (u64 > (uint64_t)INT64_MAX) break;
        *out = (int64_t)u64;
        return AMP_OK;
    default: break;
    }
    return amp_fail(AMP_ERR_FORMAT, "checkpoint '%s': '%s' (%s) is not an int64 scalar",
                    amp_st_reader_label(r), name, amp_st_dtype_name(t.dtype));
}

amp_status amp_ckpt_get_u64(const amp_st_reader *r, const char *name, uint64_t *out) {
    amp_st_tensor t;
    AMP_TRY(amp_ckpt_scalar(r, name, &t));
    if (t.dtype != AMP_ST_U64)
        return amp_fail(AMP_ERR_FORMAT, "checkpoint '%s': '%s' is %s, want U64",
                        amp_st_reader_label(r), name, amp_st_dtype_name(t.dtype));
    memcpy(out, t.data, 8);
    return AMP_OK;
}

amp_status amp_ckpt_get_f32(const amp_st_reader *r, const char *name, float *out) {
    amp_st_tensor t;
    AMP_TRY(amp_ckpt_scalar(r, name, &t));
    if (t.dtype != AMP_ST_F32)
        return amp_fail(AMP_ERR_FORMAT, "checkpoint '%s': '%s' is %s, want F32",
                        amp_st_reader_label(r), name, amp_st_dtype_name(t.dtype));
    memcpy(out, t.data, 4);
    return AMP_OK;
}

bool amp_ckpt_fits(const amp_st_tensor *f, const amp_tensor *t) {
    if (f->dtype != AMP_ST_F32 && f->dtype != AMP_ST_F16 && f->dtype != AMP_ST_BF16) return false;
    if (f->ndim != t->ndim) return false;
    for (int d = 0; d < t->ndim; d++)
        if (f->shape[d] != t->shape[d]) return false;
    return true;
}

const char *amp_ckpt_shape_str(const amp_st_tensor *f, char *buf, size_t size) {
    size_t off = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < f->ndim && off < size; d++)
        off += (size_t)snprintf(buf + off, size - off, d ? ", %lld" : "%lld", (long long)f->shape[d]);
    if (off < size) snprintf(buf + off, size - off, "]");
    return buf;
}

static float amp_ckpt_load_elem(const uint8_t *p, amp_st_dtype dt, int64_t i) {
    if (dt == AMP_ST_F32) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return dt == AMP_ST_F16 ? amp_f16_bits_to_f32(h) : amp_bf16_bits_to_f32(h);
}

amp_status amp_ckpt_load_into(const amp_st_tensor *f, amp_tensor *t) {
    size_t nbytes = amp_tensor_nbytes(t);
    uint8_t *host = malloc(nbytes ? nbytes : 1);
    if (!host) return amp_fail(AMP_ERR_OOM, "checkpoint: out of memory for '%s'", f->name);
    amp_st_dtype same;
    if (amp_st_dtype_from_amp(t->dtype, &same) == AMP_OK && same == f->dtype) {
        memcpy(host, f->data, nbytes); /* bits as saved */
    } else {
        const uint8_t *src = f->data;
        for (int64_t i = 0; i < t->numel; i++) {
            float v = amp_ckpt_load_elem(src, f->dtype, i);
            if (t->dtype == AMP_F32) memcpy(host + 4 * i, &v, 4);
            else {
                uint16_t h = t->dtype == AMP_F16 ? amp_f32_to_f16_bits(v) : amp_f32_to_bf16_bits(v);
                memcpy(host + 2 * i, &h, 2);
            }
        }
    }
    amp_status s = amp_tensor_copy_from_host(t, host, nbytes);
    free(host);
    return s;
}

void amp_ckpt_issue(amp_ckpt_issues *is, int group, const char *fmt, ...) {
    if (group < 0 || group >= AMP_CKPT_ISSUE_GROUPS) return;
    if (is->count[group]++ >= AMP_CKPT_ISSUE_SHOWN) return;
    char *text = is->text[group];
    size_t len = strlen(text);
    if (len && len + 2 < sizeof is->text[group]) strcat(text, ", ");
    len = strlen(text);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text + len, sizeof is->text[group] - len, fmt, ap);
    va_end(ap);
}

bool amp_ckpt_issues_any(const amp_ckpt_issues *is) {
    for (int g = 0; g < AMP_CKPT_ISSUE_GROUPS; g++)
        if (is->count[g]) return true;
    return false;
}

amp_status amp_ckpt_issues_fail(const amp_ckpt_issues *is, const char *who, const char *file) {
    char msg[4096];
    size_t off = (size_t)snprintf(msg, sizeof msg, "%s '%s' does not fit:", who, file);
    for (int g = 0; g < AMP_CKPT_ISSUE_GROUPS && off < sizeof msg; g++) {
        if (!is->count[g]) continue;
        off += (size_t)snprintf(msg + off, sizeof msg - off, " %d %s: %s%s;", is->count[g],
                                is->group[g], is->text[g],
                                is->count[g] > AMP_CKPT_ISSUE_SHOWN ? ", ..." : "");
    }
    return amp_fail(AMP_ERR_SHAPE, "%s", msg);
}
