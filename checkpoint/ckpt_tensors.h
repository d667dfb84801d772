/* What both checkpoint files share: host copies of backend tensors for a writer, lookups that may
 * miss, scalars, dtype conversion on load, and the list of culprits a failed validation names. */
#ifndef AMP_CHECKPOINT_CKPT_TENSORS_H
#define AMP_CHECKPOINT_CKPT_TENSORS_H

#include <stdbool.h>

#include "amp/tensor.h"
#include "checkpoint/safetensors.h"

/* Host buffers that must live until the writer has written (it borrows them). */
typedef struct amp_ckpt_bufs {
    void **p;
    int n, cap;
} amp_ckpt_bufs;
void amp_ckpt_bufs_free(amp_ckpt_bufs *b);
/* nbytes of host memory owned by b. */
amp_status amp_ckpt_bufs_alloc(amp_ckpt_bufs *b, size_t nbytes, void **out);

/* Adds a backend tensor under `name` (a host copy in its own dtype). */
amp_status amp_ckpt_add_tensor(amp_st_writer *w, amp_ckpt_bufs *b, const char *name,
                               const amp_tensor *t);
/* Adds a scalar (shape []) of an 8-byte integer or a float. */
amp_status amp_ckpt_add_i64(amp_st_writer *w, amp_ckpt_bufs *b, const char *name, int64_t v);
amp_status amp_ckpt_add_u64(amp_st_writer *w, amp_ckpt_bufs *b, const char *name, uint64_t v);
amp_status amp_ckpt_add_f32(amp_st_writer *w, amp_ckpt_bufs *b, const char *name, float v);

/* The tensor called name, or false when the file has none (a lookup that may miss: the callers
 * collect what is missing and report it themselves). */
bool amp_ckpt_find(const amp_st_reader *r, const char *name, amp_st_tensor *out);
/* A scalar of the file (shape [] or [1]) as int64 (I64, I32, U64 that fits) or float (F32):
 * AMP_ERR_FORMAT naming the tensor and file when it is missing or of another kind. */
amp_status amp_ckpt_get_i64(const amp_st_reader *r, const char *name, int64_t *out);
amp_status amp_ckpt_get_u64(const amp_st_reader *r, const char *name, uint64_t *out);
amp_status amp_ckpt_get_f32(const amp_st_reader *r, const char *name, float *out);

/* Whether file tensor f fits backend tensor t: a float dtype (F32, F16, BF16) and t's shape. */
bool amp_ckpt_fits(const amp_st_tensor *f, const amp_tensor *t);
/* "[2, 3]" of a file tensor, for messages. */
const char *amp_ckpt_shape_str(const amp_st_tensor *f, char *buf, size_t size);
/* Writes f's values into t, converted to t's dtype (round to nearest even), through a host
 * buffer; amp_ckpt_fits(f, t) must hold. */
amp_status amp_ckpt_load_into(const amp_st_tensor *f, amp_tensor *t);

/* Culprits of a validation, grouped ("missing", "unexpected", "mis-shaped", ...): each group keeps
 * its count and its first few names; amp_ckpt_issues_fail turns them into one message. */
#define AMP_CKPT_ISSUE_GROUPS 4
#define AMP_CKPT_ISSUE_SHOWN 6
typedef struct amp_ckpt_issues {
    const char *group[AMP_CKPT_ISSUE_GROUPS];
    int count[AMP_CKPT_ISSUE_GROUPS];
    char text[AMP_CKPT_ISSUE_GROUPS][1024];
} amp_ckpt_issues;
void amp_ckpt_issue(amp_ckpt_issues *is, int group, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool amp_ckpt_issues_any(const amp_ckpt_issues *is);
/* AMP_ERR_SHAPE with "<who> '<file>': 2 missing: a, b; 1 mis-shaped: ..." */
amp_status amp_ckpt_issues_fail(const amp_ckpt_issues *is, const char *who, const char *file);

#endif
