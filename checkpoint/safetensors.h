/* safetensors files (https://github.com/huggingface/safetensors): the container of both files of a
 * checkpoint, readable by the Python `safetensors` package and writable by it.
 *
 * Layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON (padded with spaces so the
 * data starts 8-byte aligned), then the data section. The JSON object maps each tensor name to
 * {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} (byte offsets into the data
 * section), plus an optional "__metadata__" object of string -> string. Data is little-endian,
 * row-major, and the tensors cover the data section exactly: no holes, no overlap.
 *
 * This writer stores the tensors contiguously in the order they were added and adds two metadata
 * entries: "libamp.format" = "1" and "libamp.crc32" = zlib's crc32 of the whole data section (8
 * lowercase hex digits). The reader checks the crc when the entry is present (files written by
 * Python have none) and refuses a "libamp.format" it does not know.
 *
 * Errors: AMP_ERR_INVALID_ARG for a bad call (NULL, a repeated or reserved name, a negative
 * dimension); AMP_ERR_IO when a file cannot be opened, read or written (message: path and
 * strerror); AMP_ERR_FORMAT for a corrupt file (message: the file's label, the tensor or field
 * and what is wrong); AMP_ERR_UNSUPPORTED for a valid file this reader does not take (sub-byte
 * dtypes, more than AMP_ST_MAX_DIMS dimensions, a newer libamp format, a file over
 * AMP_ST_MAX_FILE_BYTES); AMP_ERR_OOM when memory runs out. */
#ifndef AMP_CHECKPOINT_SAFETENSORS_H
#define AMP_CHECKPOINT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "amp/status.h"
#include "amp/tensor.h"

#define AMP_ST_MAX_DIMS 8
/* The Python package's own limit on N: a larger header is refused there, so it is here too. */
#define AMP_ST_MAX_HEADER_BYTES ((uint64_t)100000000)
/* amp_st_reader_open holds the whole file in host memory; beyond this size it refuses the file
 * rather than ask for an allocation no machine here can give. */
#define AMP_ST_MAX_FILE_BYTES ((uint64_t)1 << 36)
/* Metadata keys the writer sets itself (amp_st_writer_set_meta refuses them). */
#define AMP_ST_META_FORMAT "libamp.format"
#define AMP_ST_META_CRC32 "libamp.crc32"
#define AMP_ST_FORMAT_VERSION "1"

/* Element types, named in files as amp_st_dtype_name gives. Values are only appended. */
typedef enum amp_st_dtype {
    AMP_ST_F32 = 0,
    AMP_ST_F16 = 1,
    AMP_ST_BF16 = 2,
    AMP_ST_I32 = 3,
    AMP_ST_I64 = 4,
    AMP_ST_U8 = 5,
    AMP_ST_F64 = 6,
    AMP_ST_BOOL = 7,
    AMP_ST_I8 = 8,
    AMP_ST_I16 = 9,
    AMP_ST_U16 = 10,
    AMP_ST_U32 = 11,
    AMP_ST_U64 = 12,
    AMP_ST_F8_E4M3 = 13,
    AMP_ST_F8_E5M2 = 14,
    AMP_ST_F8_E8M0 = 15,
    AMP_ST_C64 = 16,
    AMP_ST_N_DTYPES /* not a dtype: the count */
} amp_st_dtype;

/* "F32", "BF16", ...; NULL for a value outside the enum. */
const char *amp_st_dtype_name(amp_st_dtype dtype);
/* Bytes per element; 0 for a value outside the enum. */
size_t amp_st_dtype_size(amp_st_dtype dtype);
/* The dtype a file names `name` ("F32"); AMP_ERR_INVALID_ARG naming it when unknown. */
amp_status amp_st_dtype_from_name(const char *name, amp_st_dtype *out);
/* Between libamp tensor dtypes and file dtypes: F32, F16, BF16, I32 map one to one; any other file
 * dtype gives AMP_ERR_DTYPE naming it. */
amp_status amp_st_dtype_from_amp(amp_dtype dtype, amp_st_dtype *out);
amp_status amp_st_dtype_to_amp(amp_st_dtype dtype, amp_dtype *out);

/* One tensor of a file (reader) or of a writer. A scalar has ndim 0 and numel 1; a dimension of 0
 * gives numel 0 and nbytes 0. */
typedef struct amp_st_tensor {
    const char *name; /* owned by the reader: valid until amp_st_reader_free */
    amp_st_dtype dtype;
    int ndim;
    int64_t shape[AMP_ST_MAX_DIMS];
    int64_t numel;
    size_t nbytes;    /* numel * amp_st_dtype_size(dtype) */
    const void *data; /* nbytes little-endian bytes inside the reader's buffer; not aligned for
                       * the dtype in general (a file may place an F32 after 3 U8s): memcpy it */
} amp_st_tensor;

/* ---- writer ---- */

typedef struct amp_st_writer amp_st_writer;

amp_status amp_st_writer_create(amp_st_writer **out);
void amp_st_writer_free(amp_st_writer *w); /* NULL is a no-op */

/* Adds a tensor of `ndim` (0..AMP_ST_MAX_DIMS) dimensions. The name is copied; it must be valid
 * UTF-8, unique in this writer and not "__metadata__". `data` is host memory of
 * numel * amp_st_dtype_size(dtype) bytes, borrowed: it must stay valid and unchanged until the
 * write call (it may be NULL when that size is 0). AMP_ERR_INVALID_ARG naming the tensor for a
 * repeated or invalid name, an unknown dtype, a negative dimension or a size past SIZE_MAX. */
amp_status amp_st_writer_add(amp_st_writer *w, const char *name, amp_st_dtype dtype, int ndim,
                             const int64_t *shape, const void *data);
/* Sets "__metadata__"[key] = value (both copied, valid UTF-8); setting a key again replaces its
 * value. The keys the writer sets itself (AMP_ST_META_*) give AMP_ERR_INVALID_ARG. */
amp_status amp_st_writer_set_meta(amp_st_writer *w, const char *key, const char *value);

/* Writes the whole file to `fd` from its current position; `path` names it in messages only.
 * Neither syncs nor closes fd (the checkpoint layer syncs, renames and syncs the folder). On
 * failure part of the file may have been written. The writer can be written again. */
amp_status amp_st_writer_write_fd(amp_st_writer *w, int fd, const char *path);
/* Creates or truncates `path`, writes the file, fsyncs and closes it. On failure the partial file
 * is removed, so no truncated file is left behind under that name. */
amp_status amp_st_writer_write_file(amp_st_writer *w, const char *path);

/* ---- reader ---- */

typedef struct amp_st_reader amp_st_reader;

/* Reads and validates the whole file at `path` (see the error list at the top: the header is
 * checked entry by entry, the offsets must cover the data exactly, the crc must match when
 * present). On failure *out is NULL. */
amp_status amp_st_reader_open(const char *path, amp_st_reader **out);
/* Same validation over `len` bytes at `buf`, which are copied (buf may be freed on return);
 * `label` names the bytes in messages (a path, "fuzz input"). */
amp_status amp_st_reader_from_memory(const void *buf, size_t len, const char *label,
                                     amp_st_reader **out);
void amp_st_reader_free(amp_st_reader *r); /* NULL is a no-op */

/* The label given at open (the path for amp_st_reader_open). */
const char *amp_st_reader_label(const amp_st_reader *r);
/* Number of tensors; amp_st_reader_at(r, i) gives them in the order of the file's header. */
size_t amp_st_reader_n(const amp_st_reader *r);
/* AMP_ERR_INVALID_ARG when i >= amp_st_reader_n(r). */
amp_status amp_st_reader_at(const amp_st_reader *r, size_t i, amp_st_tensor *out);
/* The tensor called `name`; AMP_ERR_INVALID_ARG naming the tensor and the file when absent. */
amp_status amp_st_reader_find(const amp_st_reader *r, const char *name, amp_st_tensor *out);
/* "__metadata__"[key], owned by the reader; NULL when absent. */
const char *amp_st_reader_meta(const amp_st_reader *r, const char *key);
/* Metadata entries, in the file's order: amp_st_reader_meta_at sets *key and *value (owned by
 * the reader) and gives AMP_ERR_INVALID_ARG when i >= amp_st_reader_meta_n(r). */
size_t amp_st_reader_meta_n(const amp_st_reader *r);
amp_status amp_st_reader_meta_at(const amp_st_reader *r, size_t i, const char **key,
                                 const char **value);

#endif
