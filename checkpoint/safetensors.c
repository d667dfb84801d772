/* safetensors writing and reading through jansson. The reader validates what the Python package's
 * Rust reader validates (header size, JSON, dtype, shape, offsets covering the data exactly), so a
 * file this writer produces loads there and a file that loads there loads here; it is stricter in
 * two places: an entry may carry no field besides dtype, shape and data_offsets, and a libamp
 * crc32 in the metadata must match the data. */
#define _POSIX_C_SOURCE 200809L

#include "checkpoint/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/error.h"

#define ST_IO_CHUNK ((size_t)1 << 30) /* per read()/write(): Linux moves under 2 GiB a call */
#define ST_META_KEY "__metadata__"
/* The data section starts on this boundary, as the Python writer pads it (spaces after JSON). */
#define ST_ALIGN 8

static const struct {
    const char *name;
    size_t size;
} st_dtypes[AMP_ST_N_DTYPES] = {
    [AMP_ST_F32] = {"F32", 4},         [AMP_ST_F16] = {"F16", 2},
    [AMP_ST_BF16] = {"BF16", 2},       [AMP_ST_I32] = {"I32", 4},
    [AMP_ST_I64] = {"I64", 8},         [AMP_ST_U8] = {"U8", 1},
    [AMP_ST_F64] = {"F64", 8},         [AMP_ST_BOOL] = {"BOOL", 1},
    [AMP_ST_I8] = {"I8", 1},           [AMP_ST_I16] = {"I16", 2},
    [AMP_ST_U16] = {"U16", 2},         [AMP_ST_U32] = {"U32", 4},
    [AMP_ST_U64] = {"U64", 8},         [AMP_ST_F8_E4M3] = {"F8_E4M3", 1},
    [AMP_ST_F8_E5M2] = {"F8_E5M2", 1}, [AMP_ST_F8_E8M0] = {"F8_E8M0", 1},
    [AMP_ST_C64] = {"C64", 8},
};

/* Dtypes of the format whose elements are narrower than a byte: valid files, but nbytes is not
 * numel * size for them and nothing in libamp stores them. */
static const char *const st_subbyte_dtypes[] = {"F4", "F6_E2M3", "F6_E3M2"};

const char *amp_st_dtype_name(amp_st_dtype dtype) {
    return (unsigned)dtype < AMP_ST_N_DTYPES ? st_dtypes[dtype].name : NULL;
}

size_t amp_st_dtype_size(amp_st_dtype dtype) {
    return (unsigned)dtype < AMP_ST_N_DTYPES ? st_dtypes[dtype].size : 0;
}

amp_status amp_st_dtype_from_name(const char *name, amp_st_dtype *out) {
    AMP_CHECK_ARG(name);
    AMP_CHECK_ARG(out);
    for (int d = 0; d < AMP_ST_N_DTYPES; d++) {
        if (strcmp(name, st_dtypes[d].name) == 0) {
            *out = (amp_st_dtype)d;
            return AMP_OK;
        }
    }
    return amp_fail(AMP_ERR_INVALID_ARG, "unknown safetensors dtype '%s'", name);
}

amp_status amp_st_dtype_from_amp(amp_dtype dtype, amp_st_dtype *out) {
    AMP_CHECK_ARG(out);
    switch (dtype) {
    case AMP_F32: *out = AMP_ST_F32; return AMP_OK;
    case AMP_F16: *out = AMP_ST_F16; return AMP_OK;
    case AMP_BF16: *out = AMP_ST_BF16; return AMP_OK;
    case AMP_I32: *out = AMP_ST_I32; return AMP_OK;
    }
    return amp_fail(AMP_ERR_DTYPE, "amp_st_dtype_from_amp: unknown amp_dtype %d", (int)dtype);
}

amp_status amp_st_dtype_to_amp(amp_st_dtype dtype, amp_dtype *out) {
    AMP_CHECK_ARG(out);
    switch (dtype) {
    case AMP_ST_F32: *out = AMP_F32; return AMP_OK;
    case AMP_ST_F16: *out = AMP_F16; return AMP_OK;
    case AMP_ST_BF16: *out = AMP_BF16; return AMP_OK;
    case AMP_ST_I32: *out = AMP_I32; return AMP_OK;
    default: break;
    }
    const char *name = amp_st_dtype_name(dtype);
    if (!name) return amp_fail(AMP_ERR_DTYPE, "amp_st_dtype_to_amp: unknown dtype %d", (int)dtype);
    return amp_fail(AMP_ERR_DTYPE, "safetensors dtype %s has no libamp tensor dtype", name);
}

/* True when s is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF):
 * what JSON text must be and what jansson checks when it parses the file again. */
static bool st_utf8_valid(const char *s) {
    static const uint32_t min[4] = {0, 0x80, 0x800, 0x10000}; /* shortest form per length */
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = *p < 0x80                ? 0
                : (*p & 0xE0) == 0xC0    ? 1
                : (*p & 0xF0) == 0xE0    ? 2
                : (*p & 0xF8) == 0xF0    ? 3
                                         : -1; /* continuation bytes needed */
        if (n < 0) return false;
        uint32_t cp = n ? *p & (0x3Fu >> n) : *p;
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80) return false; /* the NUL too: a cut sequence stops here */
            cp = cp << 6 | (p[i] & 0x3F);
        }
        if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        p += n + 1;
    }
    return true;
}

/* "[2, 3]" into buf, for messages. */
static const char *st_shape_str(int ndim, const int64_t *shape, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, d ? ", %" PRId64 : "%" PRId64, shape[d]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

/* numel of a shape and its size in bytes, or false when either passes INT64_MAX (checked before
 * each multiplication, in the order of the dimensions, as the Python package's reader does). */
static bool st_sizes(int ndim, const int64_t *shape, size_t itemsize, int64_t *numel,
                     int64_t *nbytes) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] != 0 && n > INT64_MAX / shape[d]) return false;
        n *= shape[d];
    }
    if (n > INT64_MAX / (int64_t)itemsize) return false;
    *numel = n;
    *nbytes = n * (int64_t)itemsize;
    return true;
}

/* ---- writer ---- */

typedef struct st_entry {
    char *name;
    amp_st_dtype dtype;
    int ndim;
    int64_t shape[AMP_ST_MAX_DIMS];
    int64_t nbytes;
    const void *data;
} st_entry;

struct amp_st_writer {
    st_entry *tensors;
    size_t n, cap;
    int64_t total; /* bytes of the data section so far */
    json_t *names; /* name -> null: the set of names added, for the uniqueness check */
    json_t *meta;  /* key -> string, in the order set */
};

amp_status amp_st_writer_create(amp_st_writer **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    amp_st_writer *w = calloc(1, sizeof *w);
    if (w) w->names = json_object();
    if (w && w->names) w->meta = json_object();
    if (!w || !w->meta) {
        amp_st_writer_free(w);
        return amp_fail(AMP_ERR_OOM, "amp_st_writer_create: out of memory");
    }
    *out = w;
    return AMP_OK;
}

void amp_st_writer_free(amp_st_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) free(w->tensors[i].name);
    free(w->tensors);
    json_decref(w->names);
    json_decref(w->meta);
    free(w);
}

amp_status amp_st_writer_add(amp_st_writer *w, const char *name, amp_st_dtype dtype, int ndim,
                             const int64_t *shape, const void *data) {
    AMP_CHECK_ARG(w);
    AMP_CHECK_ARG(name);
    const char *fn = "amp_st_writer_add";
    if (!st_utf8_valid(name))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: tensor name '%s' is not valid UTF-8", fn, name);
    if (strcmp(name, ST_META_KEY) == 0)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: '%s' is reserved for the file's metadata; name the tensor otherwise",
                        fn, name);
    if (json_object_get(w->names, name))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: tensor '%s' was already added", fn, name);
    if (!amp_st_dtype_name(dtype))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: tensor '%s': unknown dtype %d", fn, name,
                        (int)dtype);
    if (ndim < 0 || ndim > AMP_ST_MAX_DIMS)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: tensor '%s': ndim %d not in 0..%d", fn, name,
                        ndim, AMP_ST_MAX_DIMS);
    if (ndim > 0 && !shape)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: tensor '%s': shape is NULL with ndim %d", fn,
                        name, ndim);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: tensor '%s': dimension %d is %" PRId64, fn,
                            name, d, shape[d]);
    int64_t numel, nbytes;
    char sh[256];
    if (!st_sizes(ndim, shape, amp_st_dtype_size(dtype), &numel, &nbytes) ||
        (uint64_t)nbytes > SIZE_MAX || nbytes > INT64_MAX - w->total)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: tensor '%s': shape %s of %s is too large", fn,
                        name, st_shape_str(ndim, shape, sh, sizeof sh), amp_st_dtype_name(dtype));
    if (nbytes > 0 && !data)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: tensor '%s': data is NULL for %" PRId64 " bytes",
                        fn, name, nbytes);
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        st_entry *grown = realloc(w->tensors, cap * sizeof *grown);
        if (!grown) return amp_fail(AMP_ERR_OOM, "%s: tensor '%s': out of memory", fn, name);
        w->tensors = grown;
        w->cap = cap;
    }
    st_entry *e = &w->tensors[w->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (!e->name || json_object_set_new(w->names, name, json_null()) != 0) {
        free(e->name);
        return amp_fail(AMP_ERR_OOM, "%s: tensor '%s': out of memory", fn, name);
    }
    e->dtype = dtype;
    e->ndim = ndim;
    for (int d = 0; d < ndim; d++) e->shape[d] = shape[d];
    e->nbytes = nbytes;
    e->data = data;
    w->total += nbytes;
    w->n++;
    return AMP_OK;
}

amp_status amp_st_writer_set_meta(amp_st_writer *w, const char *key, const char *value) {
    AMP_CHECK_ARG(w);
    AMP_CHECK_ARG(key);
    AMP_CHECK_ARG(value);
    const char *fn = "amp_st_writer_set_meta";
    if (strcmp(key, AMP_ST_META_FORMAT) == 0 || strcmp(key, AMP_ST_META_CRC32) == 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: key '%s' is set by the writer itself", fn, key);
    if (!st_utf8_valid(key))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: key '%s' is not valid UTF-8", fn, key);
    if (!st_utf8_valid(value))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: value of '%s' is not valid UTF-8", fn, key);
    if (json_object_set_new(w->meta, key, json_string(value)) != 0)
        return amp_fail(AMP_ERR_OOM, "%s: key '%s': out of memory", fn, key);
    return AMP_OK;
}

/* crc32 of the data section: the tensors back to back, as they are written. */
static uint32_t st_writer_crc(const amp_st_writer *w) {
    uLong crc = crc32_z(0L, Z_NULL, 0);
    for (size_t i = 0; i < w->n; i++)
        if (w->tensors[i].nbytes)
            crc = crc32_z(crc, w->tensors[i].data, (z_size_t)w->tensors[i].nbytes);
    return (uint32_t)crc;
}

/* The header's JSON: metadata first (libamp's two keys, then the caller's), then the tensors in
 * the order added, each with its offsets into the data section. */
static json_t *st_header_json(const amp_st_writer *w) {
    char crc[16];
    snprintf(crc, sizeof crc, "%08" PRIx32, st_writer_crc(w));
    json_t *root = json_object(), *meta = json_object();
    bool ok = root && meta && json_object_set_new(meta, AMP_ST_META_FORMAT,
                                                  json_string(AMP_ST_FORMAT_VERSION)) == 0;
    ok = ok && json_object_set_new(meta, AMP_ST_META_CRC32, json_string(crc)) == 0;
    ok = ok && json_object_update(meta, w->meta) == 0;
    ok = ok && json_object_set(root, ST_META_KEY, meta) == 0;
    int64_t offset = 0;
    for (size_t i = 0; ok && i < w->n; i++) {
        const st_entry *e = &w->tensors[i];
        json_t *shape = json_array();
        for (int d = 0; shape && d < e->ndim; d++)
            if (json_array_append_new(shape, json_integer(e->shape[d])) != 0) {
                json_decref(shape);
                shape = NULL;
            }
        json_t *entry = shape ? json_pack("{s:s, s:o, s:[I,I]}", "dtype",
                                          amp_st_dtype_name(e->dtype), "shape", shape,
                                          "data_offsets", (json_int_t)offset,
                                          (json_int_t)(offset + e->nbytes))
                              : NULL;
        ok = entry && json_object_set_new(root, e->name, entry) == 0;
        offset += e->nbytes;
    }
    json_decref(meta);
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

static amp_status st_write_all(int fd, const void *buf, size_t len, const char *path) {
    const uint8_t *p = buf;
    while (len) {
        size_t chunk = len < ST_IO_CHUNK ? len : ST_IO_CHUNK;
        ssize_t k = write(fd, p, chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return amp_fail(AMP_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        if (k == 0) return amp_fail(AMP_ERR_IO, "cannot write '%s': no progress", path);
        p += k;
        len -= (size_t)k;
    }
    return AMP_OK;
}

amp_status amp_st_writer_write_fd(amp_st_writer *w, int fd, const char *path) {
    AMP_CHECK_ARG(w);
    if (!path) path = "(unnamed file)";
    json_t *root = st_header_json(w);
    char *json = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!json) return amp_fail(AMP_ERR_OOM, "'%s': cannot build the safetensors header", path);
    size_t len = strlen(json), padded = (len + ST_ALIGN - 1) / ST_ALIGN * ST_ALIGN;
    uint8_t size[8];
    for (int k = 0; k < 8; k++) size[k] = (uint8_t)((uint64_t)padded >> (8 * k));
    amp_status s = st_write_all(fd, size, sizeof size, path);
    if (s == AMP_OK) s = st_write_all(fd, json, len, path);
    if (s == AMP_OK) s = st_write_all(fd, "        ", padded - len, path);
    free(json);
    for (size_t i = 0; s == AMP_OK && i < w->n; i++)
        s = st_write_all(fd, w->tensors[i].data, (size_t)w->tensors[i].nbytes, path);
    return s;
}

amp_status amp_st_writer_write_file(amp_st_writer *w, const char *path) {
    AMP_CHECK_ARG(w);
    AMP_CHECK_ARG(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return amp_fail(AMP_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    amp_status s = amp_st_writer_write_fd(w, fd, path);
    if (s == AMP_OK && fsync(fd) != 0)
        s = amp_fail(AMP_ERR_IO, "cannot sync '%s': %s", path, strerror(errno));
    /* close() reports delayed write errors on some file systems (NFS): a failure is a failure. */
    if (close(fd) != 0 && s == AMP_OK)
        s = amp_fail(AMP_ERR_IO, "cannot close '%s': %s", path, strerror(errno));
    if (s != AMP_OK) unlink(path);
    return s;
}

/* ---- reader ---- */

struct amp_st_reader {
    char *label;
    uint8_t *buf; /* the whole file */
    size_t len;
    json_t *root; /* the parsed header: owns the names and metadata strings handed out */
    amp_st_tensor *tensors;
    size_t n;
    const amp_st_tensor **by_name; /* the tensors sorted by name, for amp_st_reader_find */
    const char **meta_keys, **meta_values;
    size_t n_meta;
};

/* Where a tensor's bytes lie in the data section, for the coverage check. */
typedef struct st_span {
    uint64_t begin, end;
    size_t index;
} st_span;

static const char *st_json_type(const json_t *v) {
    static const char *const names[] = {
        [JSON_OBJECT] = "object", [JSON_ARRAY] = "array", [JSON_STRING] = "string",
        [JSON_INTEGER] = "integer", [JSON_REAL] = "real number", [JSON_TRUE] = "true",
        [JSON_FALSE] = "false", [JSON_NULL] = "null"};
    return names[json_typeof(v)];
}

static amp_status st_read_dtype(const amp_st_reader *r, const char *name, const json_t *v,
                                amp_st_dtype *out) {
    const char *lb = r->label;
    if (!json_is_string(v))
        return amp_fail(AMP_ERR_FORMAT, "'%s': tensor '%s': dtype is a JSON %s, want a string",
                        lb, name, st_json_type(v));
    const char *s = json_string_value(v);
    if (amp_st_dtype_from_name(s, out) == AMP_OK) return AMP_OK;
    for (size_t i = 0; i < sizeof st_subbyte_dtypes / sizeof *st_subbyte_dtypes; i++)
        if (strcmp(s, st_subbyte_dtypes[i]) == 0)
            return amp_fail(AMP_ERR_UNSUPPORTED,
                            "'%s': tensor '%s': sub-byte dtype %s is not supported", lb, name, s);
    return amp_fail(AMP_ERR_FORMAT,
                    "'%s': tensor '%s': unknown dtype '%.64s' (known: F64 F32 F16 BF16 I64 I32 I16 "
                    "I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2 F8_E8M0 C64)",
                    lb, name, s);
}

static amp_status st_read_shape(const amp_st_reader *r, const char *name, const json_t *v,
                                amp_st_tensor *t) {
    const char *lb = r->label;
    if (!json_is_array(v))
        return amp_fail(AMP_ERR_FORMAT, "'%s': tensor '%s': shape is a JSON %s, want an array",
                        lb, name, st_json_type(v));
    size_t ndim = json_array_size(v);
    if (ndim > AMP_ST_MAX_DIMS)
        return amp_fail(AMP_ERR_UNSUPPORTED,
                        "'%s': tensor '%s': shape has %zu dimensions, more than the %d read here",
                        lb, name, ndim, AMP_ST_MAX_DIMS);
    t->ndim = (int)ndim;
    for (size_t d = 0; d < ndim; d++) {
        const json_t *dim = json_array_get(v, d);
        if (!json_is_integer(dim) || json_integer_value(dim) < 0)
            return amp_fail(AMP_ERR_FORMAT,
                            "'%s': tensor '%s': shape[%zu] is not a non-negative integer", lb,
                            name, d);
        t->shape[d] = json_integer_value(dim);
    }
    int64_t nbytes;
    char sh[256];
    if (!st_sizes(t->ndim, t->shape, amp_st_dtype_size(t->dtype), &t->numel, &nbytes) ||
        (uint64_t)nbytes > SIZE_MAX)
        return amp_fail(AMP_ERR_FORMAT, "'%s': tensor '%s': shape %s of %s overflows 64 bits", lb,
                        name, st_shape_str(t->ndim, t->shape, sh, sizeof sh),
                        amp_st_dtype_name(t->dtype));
    t->nbytes = (size_t)nbytes;
    return AMP_OK;
}

static amp_status st_read_offsets(const amp_st_reader *r, const char *name, const json_t *v,
                                  uint64_t data_len, const amp_st_tensor *t, st_span *span) {
    const char *lb = r->label;
    const json_t *b = json_array_get(v, 0), *e = json_array_get(v, 1);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(b) ||
        !json_is_integer(e) || json_integer_value(b) < 0 || json_integer_value(e) < 0)
        return amp_fail(AMP_ERR_FORMAT,
                        "'%s': tensor '%s': data_offsets is not [begin, end] of two non-negative "
                        "integers", lb, name);
    span->begin = (uint64_t)json_integer_value(b);
    span->end = (uint64_t)json_integer_value(e);
    if (span->begin > span->end)
        return amp_fail(AMP_ERR_FORMAT, "'%s': tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                        "] begin after end",
                        lb, name, span->begin, span->end);
    if (span->end > data_len)
        return amp_fail(AMP_ERR_FORMAT,
                        "'%s': tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                        "] end past the %" PRIu64 "-byte data section (truncated file?)",
                        lb, name, span->begin, span->end, data_len);
    if (span->end - span->begin != t->nbytes) {
        char sh[256];
        return amp_fail(AMP_ERR_FORMAT,
                        "'%s': tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                        " bytes but %s %s needs %zu",
                        lb, name, span->begin, span->end, span->end - span->begin,
                        amp_st_dtype_name(t->dtype), st_shape_str(t->ndim, t->shape, sh, sizeof sh),
                        t->nbytes);
    }
    return AMP_OK;
}

static amp_status st_read_entry(const amp_st_reader *r, const char *name, const json_t *v,
                                uint64_t data_len, amp_st_tensor *t, st_span *span) {
    const char *lb = r->label;
    if (!json_is_object(v))
        return amp_fail(AMP_ERR_FORMAT, "'%s': tensor '%s': entry is a JSON %s, want an object "
                        "with dtype, shape and data_offsets", lb, name, st_json_type(v));
    const char *field;
    const json_t *fv;
    json_object_foreach((json_t *)v, field, fv) {
        if (strcmp(field, "dtype") && strcmp(field, "shape") && strcmp(field, "data_offsets"))
            return amp_fail(AMP_ERR_FORMAT, "'%s': tensor '%s': unexpected field '%.64s' (an "
                            "entry has only dtype, shape and data_offsets)", lb, name, field);
    }
    static const char *const required[] = {"dtype", "shape", "data_offsets"};
    for (int i = 0; i < 3; i++)
        if (!json_object_get(v, required[i]))
            return amp_fail(AMP_ERR_FORMAT, "'%s': tensor '%s': missing field '%s'", lb, name,
                            required[i]);
    memset(t, 0, sizeof *t);
    t->name = name;
    AMP_TRY(st_read_dtype(r, name, json_object_get(v, "dtype"), &t->dtype));
    AMP_TRY(st_read_shape(r, name, json_object_get(v, "shape"), t));
    return st_read_offsets(r, name, json_object_get(v, "data_offsets"), data_len, t, span);
}

static amp_status st_read_meta(amp_st_reader *r, const json_t *meta) {
    if (!json_is_object(meta))
        return amp_fail(AMP_ERR_FORMAT, "'%s': %s is a JSON %s, want an object of strings",
                        r->label, ST_META_KEY, st_json_type(meta));
    size_t n = json_object_size(meta);
    r->meta_keys = calloc(n ? n : 1, sizeof *r->meta_keys);
    r->meta_values = calloc(n ? n : 1, sizeof *r->meta_values);
    if (!r->meta_keys || !r->meta_values)
        return amp_fail(AMP_ERR_OOM, "'%s': out of memory for %zu metadata entries", r->label, n);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)meta, key, v) {
        if (!json_is_string(v))
            return amp_fail(AMP_ERR_FORMAT, "'%s': %s entry '%.64s' is a JSON %s, want a string",
                            r->label, ST_META_KEY, key, st_json_type(v));
        r->meta_keys[r->n_meta] = key;
        r->meta_values[r->n_meta++] = json_string_value(v);
    }
    return AMP_OK;
}

static int st_span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The Python reader's rule: sorted by offset, each tensor starts where the previous one ended
 * and the last ends where the file does. A hole would be bytes no tensor owns; an overlap, two
 * tensors sharing bytes (writing one would change the other). */
static amp_status st_check_coverage(const amp_st_reader *r, st_span *spans, uint64_t data_len) {
    qsort(spans, r->n, sizeof *spans, st_span_cmp);
    uint64_t at = 0;
    const char *prev = NULL;
    for (size_t i = 0; i < r->n; i++) {
        const char *name = r->tensors[spans[i].index].name;
        if (spans[i].begin > at)
            return amp_fail(AMP_ERR_FORMAT,
                            "'%s': tensor '%s': data bytes [%" PRIu64 ", %" PRIu64
                            ") before it belong to no tensor (a hole%s%s%s)",
                            r->label, name, at, spans[i].begin, prev ? " after '" : "",
                            prev ? prev : "", prev ? "'" : "");
        if (spans[i].begin < at)
            return amp_fail(AMP_ERR_FORMAT,
                            "'%s': tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                            "] overlap tensor '%s', which ends at %" PRIu64,
                            r->label, name, spans[i].begin, spans[i].end, prev, at);
        at = spans[i].end;
        prev = name;
    }
    if (at != data_len)
        return amp_fail(AMP_ERR_FORMAT,
                        "'%s': the data section's last %" PRIu64 " bytes belong to no tensor "
                        "(trailing bytes%s%s%s, or a missing entry)",
                        r->label, data_len - at, prev ? " after '" : "", prev ? prev : "",
                        prev ? "'" : "");
    return AMP_OK;
}

static amp_status st_check_libamp_meta(const amp_st_reader *r, const uint8_t *data,
                                       uint64_t data_len) {
    const char *format = amp_st_reader_meta(r, AMP_ST_META_FORMAT);
    if (format && strcmp(format, AMP_ST_FORMAT_VERSION) != 0)
        return amp_fail(AMP_ERR_UNSUPPORTED,
                        "'%s': %s is '%.32s' but this libamp reads format %s (written by a newer "
                        "libamp?)",
                        r->label, AMP_ST_META_FORMAT, format, AMP_ST_FORMAT_VERSION);
    const char *want = amp_st_reader_meta(r, AMP_ST_META_CRC32);
    if (!want) return AMP_OK;
    if (strlen(want) != 8 || strspn(want, "0123456789abcdefABCDEF") != 8)
        return amp_fail(AMP_ERR_FORMAT, "'%s': %s '%.32s' is not 8 hex digits", r->label,
                        AMP_ST_META_CRC32, want);
    uint32_t got = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), data, (z_size_t)data_len);
    if (got != (uint32_t)strtoul(want, NULL, 16))
        return amp_fail(AMP_ERR_FORMAT,
                        "'%s': the data section's crc32 is %08" PRIx32 " but the header records "
                        "%s: the file is corrupt; restore it from another copy",
                        r->label, got, want);
    return AMP_OK;
}

/* jansson says only "duplicate object key"; its position is just past the key's closing quote,
 * so the key is recovered from the text to name the tensor. Copies the key as written (JSON
 * escapes kept) into buf, or returns false when the text is not as expected. */
static bool st_duplicate_key(const char *hdr, size_t hdr_len, size_t pos, char *buf,
                             size_t size) {
    if (pos < 2 || pos > hdr_len || hdr[pos - 1] != '"') return false;
    for (size_t q = pos - 1; q-- > 0;) {
        if (hdr[q] != '"') continue;
        size_t slashes = 0;
        while (slashes < q && hdr[q - 1 - slashes] == '\\') slashes++;
        if (slashes % 2) continue;
        size_t n = pos - 2 - q;
        snprintf(buf, size, "%.*s%s", (int)(n < size - 4 ? n : size - 4), hdr + q + 1,
                 n < size - 4 ? "" : "...");
        return true;
    }
    return false;
}

static amp_status st_parse_json(amp_st_reader *r, const char *hdr, size_t hdr_len) {
    json_error_t err;
    r->root = json_loadb(hdr, hdr_len, JSON_REJECT_DUPLICATES, &err);
    if (!r->root) {
        char key[128];
        if (json_error_code(&err) == json_error_duplicate_key &&
            st_duplicate_key(hdr, hdr_len, (size_t)err.position, key, sizeof key))
            return amp_fail(AMP_ERR_FORMAT,
                            "'%s': the header has the key \"%s\" twice (byte %d of the header): "
                            "tensor, metadata and field names must be unique",
                            r->label, key, err.position);
        if (json_error_code(&err) == json_error_out_of_memory)
            return amp_fail(AMP_ERR_OOM, "'%s': out of memory parsing the %zu-byte header",
                            r->label, hdr_len);
        return amp_fail(AMP_ERR_FORMAT,
                        "'%s': the header is not valid JSON: %s (line %d, column %d): not a "
                        "safetensors file, or a corrupt one",
                        r->label, err.text, err.line, err.column);
    }
    if (!json_is_object(r->root))
        return amp_fail(AMP_ERR_FORMAT, "'%s': the header is a JSON %s, want an object of tensors",
                        r->label, st_json_type(r->root));
    return AMP_OK;
}

static int st_by_name_cmp(const void *a, const void *b) {
    const amp_st_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* Validates r->buf (r->len bytes) and fills the tensor and metadata tables. */
static amp_status st_parse(amp_st_reader *r) {
    if (r->len < 8)
        return amp_fail(AMP_ERR_FORMAT,
                        "'%s': %zu bytes is too short for a safetensors file (the header size "
                        "alone takes 8)",
                        r->label, r->len);
    uint64_t hdr_len = 0;
    for (int k = 7; k >= 0; k--) hdr_len = hdr_len << 8 | r->buf[k];
    if (hdr_len > AMP_ST_MAX_HEADER_BYTES)
        return amp_fail(AMP_ERR_FORMAT,
                        "'%s': header size %" PRIu64 " is over the format's limit of %" PRIu64
                        " bytes: not a safetensors file, or a corrupt one",
                        r->label, hdr_len, AMP_ST_MAX_HEADER_BYTES);
    if (hdr_len > r->len - 8)
        return amp_fail(AMP_ERR_FORMAT,
                        "'%s': header size %" PRIu64 " runs past the end of the %zu-byte file: "
                        "truncated, or not a safetensors file",
                        r->label, hdr_len, r->len);
    AMP_TRY(st_parse_json(r, (const char *)r->buf + 8, (size_t)hdr_len));
    const uint8_t *data = r->buf + 8 + hdr_len;
    uint64_t data_len = r->len - 8 - hdr_len;

    size_t n = json_object_size(r->root);
    r->tensors = calloc(n ? n : 1, sizeof *r->tensors);
    st_span *spans = calloc(n ? n : 1, sizeof *spans);
    if (!r->tensors || !spans) {
        free(spans);
        return amp_fail(AMP_ERR_OOM, "'%s': out of memory for %zu header entries", r->label, n);
    }
    amp_status s = AMP_OK;
    const char *name;
    const json_t *v;
    json_object_foreach(r->root, name, v) {
        if (strcmp(name, ST_META_KEY) == 0) {
            if ((s = st_read_meta(r, v)) != AMP_OK) break;
            continue;
        }
        if ((s = st_read_entry(r, name, v, data_len, &r->tensors[r->n], &spans[r->n])) != AMP_OK)
            break;
        spans[r->n].index = r->n;
        r->tensors[r->n].data = data + spans[r->n].begin;
        r->n++;
    }
    if (s == AMP_OK) s = st_check_coverage(r, spans, data_len);
    free(spans);
    if (s == AMP_OK) s = st_check_libamp_meta(r, data, data_len);
    if (s != AMP_OK) return s;
    r->by_name = malloc((r->n ? r->n : 1) * sizeof *r->by_name);
    if (!r->by_name) return amp_fail(AMP_ERR_OOM, "'%s': out of memory for %zu names", r->label, n);
    for (size_t i = 0; i < r->n; i++) r->by_name[i] = &r->tensors[i];
    qsort(r->by_name, r->n, sizeof *r->by_name, st_by_name_cmp);
    return AMP_OK;
}

/* Takes ownership of buf (len bytes) whatever happens. */
static amp_status st_reader_take(uint8_t *buf, size_t len, const char *label,
                                 amp_st_reader **out) {
    amp_st_reader *r = calloc(1, sizeof *r);
    if (r) r->label = strdup(label);
    if (!r || !r->label) {
        free(buf);
        free(r);
        return amp_fail(AMP_ERR_OOM, "'%s': out of memory", label);
    }
    r->buf = buf;
    r->len = len;
    amp_status s = st_parse(r);
    if (s != AMP_OK) {
        amp_st_reader_free(r);
        return s;
    }
    *out = r;
    return AMP_OK;
}

amp_status amp_st_reader_from_memory(const void *buf, size_t len, const char *label,
                                     amp_st_reader **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    if (len) AMP_CHECK_ARG(buf);
    if (!label) label = "(memory)";
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) return amp_fail(AMP_ERR_OOM, "'%s': cannot copy %zu bytes", label, len);
    if (len) memcpy(copy, buf, len);
    return st_reader_take(copy, len, label, out);
}

amp_status amp_st_reader_open(const char *path, amp_st_reader **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    AMP_CHECK_ARG(path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return amp_fail(AMP_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    amp_status s = AMP_OK;
    if (fstat(fd, &st) != 0)
        s = amp_fail(AMP_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        s = amp_fail(AMP_ERR_IO, "'%s' is not a regular file", path);
    else if ((uint64_t)st.st_size > AMP_ST_MAX_FILE_BYTES || (uint64_t)st.st_size > SIZE_MAX)
        s = amp_fail(AMP_ERR_UNSUPPORTED,
                     "'%s' is %lld bytes, over the reader's limit of %" PRIu64 " bytes", path,
                     (long long)st.st_size, AMP_ST_MAX_FILE_BYTES);
    size_t len = s == AMP_OK ? (size_t)st.st_size : 0, got = 0;
    uint8_t *buf = s == AMP_OK ? malloc(len ? len : 1) : NULL;
    if (s == AMP_OK && !buf)
        s = amp_fail(AMP_ERR_OOM, "'%s': cannot allocate %zu bytes to read it", path, len);
    while (s == AMP_OK && got < len) {
        size_t chunk = len - got < ST_IO_CHUNK ? len - got : ST_IO_CHUNK;
        ssize_t k = read(fd, buf + got, chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) s = amp_fail(AMP_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
        else if (k == 0)
            s = amp_fail(AMP_ERR_IO, "'%s' shrank from %zu to %zu bytes while being read", path,
                         len, got);
        else got += (size_t)k;
    }
    close(fd);
    if (s != AMP_OK) {
        free(buf);
        return s;
    }
    return st_reader_take(buf, len, path, out);
}

void amp_st_reader_free(amp_st_reader *r) {
    if (!r) return;
    free(r->label);
    free(r->buf);
    json_decref(r->root);
    free(r->tensors);
    free(r->by_name);
    free(r->meta_keys);
    free(r->meta_values);
    free(r);
}

const char *amp_st_reader_label(const amp_st_reader *r) { return r ? r->label : ""; }

size_t amp_st_reader_n(const amp_st_reader *r) { return r ? r->n : 0; }

amp_status amp_st_reader_at(const amp_st_reader *r, size_t i, amp_st_tensor *out) {
    AMP_CHECK_ARG(r);
    AMP_CHECK_ARG(out);
    if (i >= r->n)
        return amp_fail(AMP_ERR_INVALID_ARG, "'%s': tensor index %zu, the file has %zu",
                        r->label, i, r->n);
    *out = r->tensors[i];
    return AMP_OK;
}

amp_status amp_st_reader_find(const amp_st_reader *r, const char *name, amp_st_tensor *out) {
    AMP_CHECK_ARG(r);
    AMP_CHECK_ARG(name);
    AMP_CHECK_ARG(out);
    const amp_st_tensor key = {.name = name}, *kp = &key, **hit;
    hit = bsearch(&kp, r->by_name, r->n, sizeof *r->by_name, st_by_name_cmp);
    if (hit) {
        *out = **hit;
        return AMP_OK;
    }
    return amp_fail(AMP_ERR_INVALID_ARG, "'%s' has no tensor '%s' (it has %zu tensors)", r->label,
                    name, r->n);
}

const char *amp_st_reader_meta(const amp_st_reader *r, const char *key) {
    if (!r || !key) return NULL;
    for (size_t i = 0; i < r->n_meta; i++)
        if (strcmp(r->meta_keys[i], key) == 0) return r->meta_values[i];
    return NULL;
}

size_t amp_st_reader_meta_n(const amp_st_reader *r) { return r ? r->n_meta : 0; }

amp_status amp_st_reader_meta_at(const amp_st_reader *r, size_t i, const char **key,
                                 const char **value) {
    AMP_CHECK_ARG(r);
    AMP_CHECK_ARG(key);
    AMP_CHECK_ARG(value);
    if (i >= r->n_meta)
        return amp_fail(AMP_ERR_INVALID_ARG, "'%s': metadata index %zu, the file has %zu",
                        r->label, i, r->n_meta);
    *key = r->meta_keys[i];
    *value = r->meta_values[i];
    return AMP_OK;
}
