/* safetensors layer: round trips of every dtype and shape kind, the exact bytes of a small file
 * against the format's layout, and every kind of bad file or bad call with the expected status
 * and a message naming the file and the tensor. Files are written into $AMP_TEST_TMP.
 *
 * With `--write-corpus DIR` it writes a few valid files into DIR and exits: how the seed corpus
 * in tests/fuzz/corpus was made (run it again there after a format change). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint/safetensors.h"
#include "tests/test_util.h"

static char g_dir[512];

static const char *tmp_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", g_dir, name);
    return buf;
}

static void write_bytes(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(buf, 1, len, f) == len);
    CHECK(fclose(f) == 0);
}

/* The whole file in a malloc'd buffer (NULL when it cannot be read). */
static uint8_t *read_bytes(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            buf = realloc(buf, cap);
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    *len = n;
    return buf;
}

/* A file laid out by hand: the 8-byte little-endian size of `json`, `json` unpadded, then
 * `data_len` bytes i * 7 + 1. Returns its length; buf must hold it. */
static size_t raw_file(uint8_t *buf, const char *json, size_t data_len) {
    size_t n = strlen(json);
    for (int k = 0; k < 8; k++) buf[k] = (uint8_t)((uint64_t)n >> (8 * k));
    memcpy(buf + 8, json, n);
    for (size_t i = 0; i < data_len; i++) buf[8 + n + i] = (uint8_t)(i * 7 + 1);
    return 8 + n + data_len;
}

/* Element bytes of tensor `k` of the round-trip fixture: a pattern that differs per tensor. */
static void fill_pattern(uint8_t *p, size_t n, int k) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 31 + (size_t)k * 17 + 5);
}

static void test_dtypes(void) {
    int ok = 1;
    for (int d = 0; d < AMP_ST_N_DTYPES; d++) {
        const char *name = amp_st_dtype_name((amp_st_dtype)d);
        amp_st_dtype back;
        ok &= name != NULL && amp_st_dtype_size((amp_st_dtype)d) >= 1;
        ok &= name && amp_st_dtype_from_name(name, &back) == AMP_OK && back == (amp_st_dtype)d;
    }
    CHECK(ok);
    CHECK(amp_st_dtype_size(AMP_ST_F32) == 4 && amp_st_dtype_size(AMP_ST_BF16) == 2);
    CHECK(amp_st_dtype_size(AMP_ST_I64) == 8 && amp_st_dtype_size(AMP_ST_BOOL) == 1);
    CHECK(strcmp(amp_st_dtype_name(AMP_ST_BF16), "BF16") == 0);
    CHECK(amp_st_dtype_name(AMP_ST_N_DTYPES) == NULL && amp_st_dtype_size(AMP_ST_N_DTYPES) == 0);
    amp_st_dtype st;
    CHECK_FAILS(amp_st_dtype_from_name("float32", &st), AMP_ERR_INVALID_ARG, "float32");

    const amp_dtype amp[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_I32};
    const amp_st_dtype file[] = {AMP_ST_F32, AMP_ST_F16, AMP_ST_BF16, AMP_ST_I32};
    for (int i = 0; i < 4; i++) {
        amp_dtype back;
        CHECK(amp_st_dtype_from_amp(amp[i], &st) == AMP_OK && st == file[i]);
        CHECK(amp_st_dtype_to_amp(file[i], &back) == AMP_OK && back == amp[i]);
    }
    amp_dtype back;
    CHECK_FAILS(amp_st_dtype_to_amp(AMP_ST_I64, &back), AMP_ERR_DTYPE, "I64");
    CHECK_FAILS(amp_st_dtype_from_amp((amp_dtype)42, &st), AMP_ERR_DTYPE, "42");
}

/* Every dtype in one file, plus a scalar, zero-size tensors and an odd-sized U8 first, so most
 * tensors start at offsets that are not multiples of their element size. */
static void test_round_trip(void) {
    enum { MAX_T = AMP_ST_N_DTYPES + 5 };
    char names[MAX_T][32];
    amp_st_dtype dts[MAX_T];
    int ndims[MAX_T];
    int64_t shapes[MAX_T][AMP_ST_MAX_DIMS];
    uint8_t *bufs[MAX_T];
    size_t sizes[MAX_T];
    int n = 0;
    /* odd U8 vector, then every dtype as [3, 5], a scalar, two zero-size, one 8-D tensor */
    snprintf(names[n], 32, "odd.u8");
    dts[n] = AMP_ST_U8, ndims[n] = 1, shapes[n][0] = 7, n++;
    for (int d = 0; d < AMP_ST_N_DTYPES; d++) {
        snprintf(names[n], 32, "t.%s", amp_st_dtype_name((amp_st_dtype)d));
        dts[n] = (amp_st_dtype)d, ndims[n] = 2, shapes[n][0] = 3, shapes[n][1] = 5, n++;
    }
    snprintf(names[n], 32, "scalar");
    dts[n] = AMP_ST_F64, ndims[n] = 0, n++;
    snprintf(names[n], 32, "empty");
    dts[n] = AMP_ST_F32, ndims[n] = 3, shapes[n][0] = 2, shapes[n][1] = 0, shapes[n][2] = 3, n++;
    snprintf(names[n], 32, "empty.1d");
    dts[n] = AMP_ST_BF16, ndims[n] = 1, shapes[n][0] = 0, n++;
    snprintf(names[n], 32, "eight.dims");
    dts[n] = AMP_ST_I16, ndims[n] = AMP_ST_MAX_DIMS;
    for (int d = 0; d < AMP_ST_MAX_DIMS; d++) shapes[n][d] = d % 3 + 1;
    n++;

    amp_st_writer *w = NULL;
    CHECK_OK(amp_st_writer_create(&w));
    if (!w) return;
    for (int k = 0; k < n; k++) {
        size_t numel = 1;
        for (int d = 0; d < ndims[k]; d++) numel *= (size_t)shapes[k][d];
        sizes[k] = numel * amp_st_dtype_size(dts[k]);
        bufs[k] = malloc(sizes[k] ? sizes[k] : 1);
        fill_pattern(bufs[k], sizes[k], k);
        CHECK_OK(amp_st_writer_add(w, names[k], dts[k], ndims[k], shapes[k],
                                   sizes[k] ? bufs[k] : NULL));
    }
    CHECK_OK(amp_st_writer_set_meta(w, "run", "round trip \xc3\xa9t\xc3\xa9"));
    char path[600];
    CHECK_OK(amp_st_writer_write_file(w, tmp_path(path, sizeof path, "round.safetensors")));
    amp_st_writer_free(w);

    size_t len = 0;
    uint8_t *file = read_bytes(path, &len);
    CHECK(file && len > 8);
    uint64_t hdr = 0;
    for (int k = 7; k >= 0 && file; k--) hdr = hdr << 8 | file[k];
    CHECK_MSG(hdr % 8 == 0, "header size %llu, want a multiple of 8", (unsigned long long)hdr);
    free(file);

    amp_st_reader *r = NULL;
    CHECK_OK(amp_st_reader_open(path, &r));
    if (!r) goto out;
    CHECK(amp_st_reader_n(r) == (size_t)n);
    CHECK(strcmp(amp_st_reader_label(r), path) == 0);
    int ok = 1;
    for (int k = 0; k < n && k < (int)amp_st_reader_n(r); k++) {
        amp_st_tensor t, f;
        CHECK_OK(amp_st_reader_at(r, (size_t)k, &t));
        CHECK_OK(amp_st_reader_find(r, names[k], &f));
        ok &= strcmp(t.name, names[k]) == 0 && t.dtype == dts[k] && t.ndim == ndims[k];
        for (int d = 0; d < ndims[k]; d++) ok &= t.shape[d] == shapes[k][d];
        ok &= t.nbytes == sizes[k] && (size_t)t.numel * amp_st_dtype_size(dts[k]) == sizes[k];
        ok &= memcmp(t.data, bufs[k], sizes[k]) == 0;
        ok &= f.data == t.data && strcmp(f.name, t.name) == 0;
    }
    CHECK(ok);
    amp_st_tensor s;
    CHECK(amp_st_reader_find(r, "scalar", &s) == AMP_OK && s.ndim == 0 && s.numel == 1);
    CHECK(amp_st_reader_find(r, "empty", &s) == AMP_OK && s.numel == 0 && s.nbytes == 0);
    CHECK(strcmp(amp_st_reader_meta(r, "run"), "round trip \xc3\xa9t\xc3\xa9") == 0);
    CHECK(strcmp(amp_st_reader_meta(r, AMP_ST_META_FORMAT), "1") == 0);
    const char *crc = amp_st_reader_meta(r, AMP_ST_META_CRC32);
    CHECK(crc && strlen(crc) == 8 && strspn(crc, "0123456789abcdef") == 8);
    CHECK(amp_st_reader_meta(r, "absent") == NULL);
    CHECK_FAILS(amp_st_reader_at(r, (size_t)n, &s), AMP_ERR_INVALID_ARG, "round.safetensors");
    CHECK_FAILS(amp_st_reader_find(r, "no.such.weight", &s), AMP_ERR_INVALID_ARG,
                "no.such.weight");
    CHECK(strstr(amp_last_error(), "round.safetensors") != NULL);
    amp_st_reader_free(r);
out:
    for (int k = 0; k < n; k++) free(bufs[k]);
}

/* Many tensors of varied sizes, found by name in any order; the writer writes twice the same. */
static void test_many(void) {
    enum { N = 1000 };
    static float data[N * 3];
    for (int i = 0; i < N * 3; i++) data[i] = (float)i * 0.5f;
    amp_st_writer *w = NULL;
    CHECK_OK(amp_st_writer_create(&w));
    if (!w) return;
    int64_t off = 0;
    for (int i = 0; i < N; i++) {
        char name[64];
        snprintf(name, sizeof name, "layers.%d.weight", i);
        int64_t shape[1] = {i % 4};
        CHECK_OK(amp_st_writer_add(w, name, AMP_ST_F32, 1, shape, data + off));
        off += i % 4;
    }
    char p1[600], p2[600];
    CHECK_OK(amp_st_writer_write_file(w, tmp_path(p1, sizeof p1, "many1.safetensors")));
    /* write_fd from the current position of a caller's descriptor */
    int fd = open(tmp_path(p2, sizeof p2, "many2.safetensors"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_OK(amp_st_writer_write_fd(w, fd, p2));
    close(fd);
    amp_st_writer_free(w);
    size_t l1 = 0, l2 = 0;
    uint8_t *b1 = read_bytes(p1, &l1), *b2 = read_bytes(p2, &l2);
    CHECK(b1 && b2 && l1 == l2 && memcmp(b1, b2, l1) == 0);
    free(b1);
    free(b2);

    amp_st_reader *r = NULL;
    CHECK_OK(amp_st_reader_open(p1, &r));
    if (!r) return;
    CHECK(amp_st_reader_n(r) == N);
    int ok = 1;
    off = 0;
    for (int i = 0; i < N; i++) {
        char name[64];
        snprintf(name, sizeof name, "layers.%d.weight", (i * 7919) % N);
        amp_st_tensor t;
        ok &= amp_st_reader_find(r, name, &t) == AMP_OK && strcmp(t.name, name) == 0;
    }
    for (int i = 0; i < N; i++) {
        amp_st_tensor t;
        ok &= amp_st_reader_at(r, (size_t)i, &t) == AMP_OK && t.numel == i % 4;
        ok &= memcmp(t.data, data + off, t.nbytes) == 0;
        off += i % 4;
    }
    CHECK(ok);
    amp_st_reader_free(r);
}

static void test_metadata(void) {
    amp_st_writer *w = NULL;
    CHECK_OK(amp_st_writer_create(&w));
    if (!w) return;
    CHECK_OK(amp_st_writer_set_meta(w, "opt_level", "O1"));
    CHECK_OK(amp_st_writer_set_meta(w, "step", "12"));
    CHECK_OK(amp_st_writer_set_meta(w, "opt_level", "O2")); /* replaces, keeps its place */
    CHECK_OK(amp_st_writer_set_meta(w, "empty", ""));
    CHECK_FAILS(amp_st_writer_set_meta(w, AMP_ST_META_CRC32, "0"), AMP_ERR_INVALID_ARG,
                AMP_ST_META_CRC32);
    CHECK_FAILS(amp_st_writer_set_meta(w, AMP_ST_META_FORMAT, "2"), AMP_ERR_INVALID_ARG,
                AMP_ST_META_FORMAT);
    CHECK_FAILS(amp_st_writer_set_meta(w, "bad\xff", "x"), AMP_ERR_INVALID_ARG, "UTF-8");
    CHECK_FAILS(amp_st_writer_set_meta(w, "k", "\xe2\x82"), AMP_ERR_INVALID_ARG, "UTF-8");
    char path[600];
    CHECK_OK(amp_st_writer_write_file(w, tmp_path(path, sizeof path, "meta.safetensors")));
    amp_st_writer_free(w);
    amp_st_reader *r = NULL;
    CHECK_OK(amp_st_reader_open(path, &r));
    if (!r) return;
    CHECK(amp_st_reader_n(r) == 0);
    CHECK(amp_st_reader_meta_n(r) == 5);
    const char *want[][2] = {{AMP_ST_META_FORMAT, "1"}, {AMP_ST_META_CRC32, "00000000"},
                             {"opt_level", "O2"}, {"step", "12"}, {"empty", ""}};
    for (size_t i = 0; i < 5 && i < amp_st_reader_meta_n(r); i++) {
        const char *k, *v;
        CHECK_OK(amp_st_reader_meta_at(r, i, &k, &v));
        CHECK_MSG(strcmp(k, want[i][0]) == 0 && strcmp(v, want[i][1]) == 0,
                  "entry %zu: '%s' = '%s', want '%s' = '%s'", i, k, v, want[i][0], want[i][1]);
    }
    const char *k, *v;
    CHECK_FAILS(amp_st_reader_meta_at(r, 5, &k, &v), AMP_ERR_INVALID_ARG, "meta.safetensors");
    amp_st_reader_free(r);

    /* A file without __metadata__ (as Python writes one without metadata) has none, no crc. */
    uint8_t buf[256];
    size_t len =
        raw_file(buf, "{\"x\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    CHECK_OK(amp_st_reader_from_memory(buf, len, "nometa", &r));
    CHECK(amp_st_reader_meta_n(r) == 0 && amp_st_reader_meta(r, AMP_ST_META_CRC32) == NULL);
    amp_st_reader_free(r);
}

/* The exact bytes of a small file, written out by hand from the format's description. */
static void test_exact_bytes(void) {
    const float a[2] = {1.0f, -2.0f};
    const uint8_t b = 7;
    const uint8_t data[9] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x07};
    char crc[16], json[512];
    snprintf(crc, sizeof crc, "%08lx", (unsigned long)crc32(crc32(0L, Z_NULL, 0), data, 9));
    int n = snprintf(json, sizeof json,
                     "{\"__metadata__\":{\"libamp.format\":\"1\",\"libamp.crc32\":\"%s\","
                     "\"k\":\"v\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[8,9]}}",
                     crc);
    size_t padded = ((size_t)n + 7) / 8 * 8;
    uint8_t want[600];
    for (int k = 0; k < 8; k++) want[k] = (uint8_t)(padded >> (8 * k));
    memcpy(want + 8, json, (size_t)n);
    memset(want + 8 + n, ' ', padded - (size_t)n);
    memcpy(want + 8 + padded, data, 9);
    size_t want_len = 8 + padded + 9;

    amp_st_writer *w = NULL;
    CHECK_OK(amp_st_writer_create(&w));
    if (!w) return;
    CHECK_OK(amp_st_writer_add(w, "a", AMP_ST_F32, 1, (int64_t[]){2}, a));
    CHECK_OK(amp_st_writer_add(w, "b", AMP_ST_U8, 0, NULL, &b));
    CHECK_OK(amp_st_writer_set_meta(w, "k", "v"));
    char path[600];
    CHECK_OK(amp_st_writer_write_file(w, tmp_path(path, sizeof path, "exact.safetensors")));
    amp_st_writer_free(w);
    size_t len = 0;
    uint8_t *got = read_bytes(path, &len);
    CHECK_MSG(got && len == want_len && memcmp(got, want, len) == 0,
              "file of %zu bytes, want %zu: header '%.*s'", len, want_len,
              got && len > 8 ? (int)(len - 8) : 0, got ? (const char *)got + 8 : "");
    free(got);

    /* The same layout by hand, with the data start unaligned and spaces inside the JSON, reads. */
    uint8_t buf[256];
    len = raw_file(buf, " { \"a\" : {\"shape\":[2], \"dtype\":\"F32\", \"data_offsets\":[0,8]} } ",
                   8);
    memcpy(buf + len - 8, data, 8);
    amp_st_reader *r = NULL;
    CHECK_OK(amp_st_reader_from_memory(buf, len, "by-hand", &r));
    amp_st_tensor t;
    float v[2] = {0, 0};
    if (r && amp_st_reader_at(r, 0, &t) == AMP_OK) memcpy(v, t.data, sizeof v);
    CHECK(v[0] == 1.0f && v[1] == -2.0f);
    amp_st_reader_free(r);
}

static void test_writer_errors(void) {
    amp_st_writer *w = NULL;
    CHECK_OK(amp_st_writer_create(&w));
    if (!w) return;
    const float x[4] = {0};
    int64_t shape[AMP_ST_MAX_DIMS + 1] = {2, 2, 1, 1, 1, 1, 1, 1, 1};
    CHECK_OK(amp_st_writer_add(w, "w", AMP_ST_F32, 2, shape, x));
    CHECK_FAILS(amp_st_writer_add(w, "w", AMP_ST_F32, 2, shape, x), AMP_ERR_INVALID_ARG,
                "'w' was already added");
    CHECK_FAILS(amp_st_writer_add(w, "__metadata__", AMP_ST_F32, 2, shape, x),
                AMP_ERR_INVALID_ARG, "reserved");
    CHECK_FAILS(amp_st_writer_add(w, "bad\xc0\x80", AMP_ST_F32, 2, shape, x),
                AMP_ERR_INVALID_ARG, "UTF-8");
    CHECK_FAILS(amp_st_writer_add(w, "nine", AMP_ST_F32, AMP_ST_MAX_DIMS + 1, shape, x),
                AMP_ERR_INVALID_ARG, "'nine': ndim 9");
    CHECK_FAILS(amp_st_writer_add(w, "neg", AMP_ST_F32, 2, (int64_t[]){2, -1}, x),
                AMP_ERR_INVALID_ARG, "'neg': dimension 1 is -1");
    CHECK_FAILS(amp_st_writer_add(w, "huge", AMP_ST_F32, 2, (int64_t[]){INT64_MAX / 2, 3}, x),
                AMP_ERR_INVALID_ARG, "'huge': shape [");
    CHECK_FAILS(amp_st_writer_add(w, "nodata", AMP_ST_F32, 1, shape, NULL), AMP_ERR_INVALID_ARG,
                "'nodata': data is NULL");
    CHECK_FAILS(amp_st_writer_add(w, "dt", (amp_st_dtype)99, 1, shape, x), AMP_ERR_INVALID_ARG,
                "'dt': unknown dtype 99");
    CHECK_FAILS(amp_st_writer_add(w, "noshape", AMP_ST_F32, 1, NULL, x), AMP_ERR_INVALID_ARG,
                "'noshape'");
    CHECK_FAILS(amp_st_writer_add(NULL, "x", AMP_ST_F32, 1, shape, x), AMP_ERR_INVALID_ARG, "w");
    /* An unwritable path: an error naming it, and nothing left behind. */
    char path[600];
    tmp_path(path, sizeof path, "no/such/dir/x.safetensors");
    CHECK_FAILS(amp_st_writer_write_file(w, path), AMP_ERR_IO, path);
    amp_st_writer_free(w);
    amp_st_writer_free(NULL);
    amp_st_reader_free(NULL);
}

/* One bad header per row: the status and two pieces the message must contain (the label, which
 * stands for the file, is checked on every row). Data bytes: `data_len`. */
typedef struct bad_case {
    const char *json;
    size_t data_len;
    amp_status status;
    const char *needle, *needle2;
} bad_case;

#define E(fields) "{\"w\":{" fields "}}"
#define OK_W "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"

static const bad_case bad_cases[] = {
    {"{\"w\": {\"dtype\": \"F32\",", 4, AMP_ERR_FORMAT, "not valid JSON", "line 1"},
    {"", 0, AMP_ERR_FORMAT, "not valid JSON", ""},
    {"{\"w\":\"\xff\"}", 0, AMP_ERR_FORMAT, "not valid JSON", ""},
    {"[1, 2]", 0, AMP_ERR_FORMAT, "is a JSON array", "want an object"},
    {"{\"w\": 3}", 0, AMP_ERR_FORMAT, "tensor 'w'", "JSON integer"},
    {E("\"dtype\":\"F32\",\"shape\":[1]"), 4, AMP_ERR_FORMAT, "tensor 'w'", "'data_offsets'"},
    {E("\"shape\":[1],\"data_offsets\":[0,4]"), 4, AMP_ERR_FORMAT, "tensor 'w'", "'dtype'"},
    {E("\"dtype\":\"F32\",\"data_offsets\":[0,4]"), 4, AMP_ERR_FORMAT, "tensor 'w'", "'shape'"},
    {E("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"offsets\":1"), 4, AMP_ERR_FORMAT,
     "tensor 'w'", "unexpected field 'offsets'"},
    {E("\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]"), 4, AMP_ERR_FORMAT, "tensor 'w'",
     "dtype is a JSON integer"},
    {E("\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]"), 4, AMP_ERR_FORMAT, "tensor 'w'",
     "unknown dtype 'F33'"},
    {E("\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]"), 1, AMP_ERR_UNSUPPORTED,
     "tensor 'w'", "sub-byte dtype F4"},
    {E("\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]"), 4, AMP_ERR_FORMAT, "tensor 'w'",
     "shape is a JSON integer"},
    {E("\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]"), 4, AMP_ERR_FORMAT,
     "tensor 'w'", "shape[0] is not a non-negative integer"},
    {E("\"dtype\":\"F32\",\"shape\":[1, 1.0],\"data_offsets\":[0,4]"), 4, AMP_ERR_FORMAT,
     "tensor 'w'", "shape[1]"},
    {E("\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]"), 4,
     AMP_ERR_UNSUPPORTED, "tensor 'w'", "9 dimensions"},
    {E("\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,4]"), 4,
     AMP_ERR_FORMAT, "tensor 'w'", "overflows"},
    {E("\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]"), 4,
     AMP_ERR_FORMAT, "tensor 'w'", "overflows"},
    {E("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":4"), 4, AMP_ERR_FORMAT, "tensor 'w'",
     "two non-negative integers"},
    {E("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]"), 8, AMP_ERR_FORMAT,
     "tensor 'w'", "[begin, end]"},
    {E("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]"), 4, AMP_ERR_FORMAT,
     "tensor 'w'", "non-negative"},
    {E("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]"), 4, AMP_ERR_FORMAT,
     "tensor 'w'", "data_offsets"},
    {E("\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]"), 4, AMP_ERR_FORMAT, "tensor 'w'",
     "begin after end"},
    {E("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 4, AMP_ERR_FORMAT, "tensor 'w'",
     "end past the 4-byte data section"},
    {E("\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]"), 20, AMP_ERR_FORMAT,
     "tensor 'w'", "hold 20 bytes but F32 [2, 3] needs 24"},
    {"{" OK_W ",\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
     AMP_ERR_FORMAT, "tensor 'v'", "[4, 8) before it belong to no tensor (a hole after 'w')"},
    {"{\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, AMP_ERR_FORMAT,
     "tensor 'v'", "[0, 4) before it"},
    {"{" OK_W ",\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[2,10]}}", 10,
     AMP_ERR_FORMAT, "tensor 'v'", "overlap tensor 'w'"},
    {"{" OK_W ",\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     AMP_ERR_FORMAT, "tensor 'v'", "overlap tensor 'w'"},
    {"{" OK_W "}", 8, AMP_ERR_FORMAT, "last 4 bytes belong to no tensor",
     "trailing bytes after 'w'"},
    {"{}", 3, AMP_ERR_FORMAT, "last 3 bytes belong to no tensor", ""},
    {"{" OK_W "," OK_W "}", 4, AMP_ERR_FORMAT, "key \"w\" twice", "unique"},
    {"{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, AMP_ERR_FORMAT, "key \"a\" twice", ""},
    {"{\"__metadata__\":[]," OK_W "}", 4, AMP_ERR_FORMAT, "__metadata__ is a JSON array", ""},
    {"{\"__metadata__\":{\"step\":3}," OK_W "}", 4, AMP_ERR_FORMAT,
     "__metadata__ entry 'step' is a JSON integer", "want a string"},
    {"{\"__metadata__\":{\"libamp.crc32\":\"xyz\"}," OK_W "}", 4, AMP_ERR_FORMAT,
     "libamp.crc32 'xyz' is not 8 hex digits", ""},
    {"{\"__metadata__\":{\"libamp.crc32\":\"00000000\"}," OK_W "}", 4, AMP_ERR_FORMAT,
     "crc32 is", "records 00000000"},
    {"{\"__metadata__\":{\"libamp.format\":\"2\"}," OK_W "}", 4, AMP_ERR_UNSUPPORTED,
     "libamp.format is '2'", "newer"},
};

static void test_bad_headers(void) {
    uint8_t buf[1024];
    for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
        const bad_case *c = &bad_cases[i];
        char label[64];
        snprintf(label, sizeof label, "bad/case-%zu.safetensors", i);
        size_t len = raw_file(buf, c->json, c->data_len);
        amp_st_reader *r = (amp_st_reader *)&len; /* must come back NULL */
        amp_status s = amp_st_reader_from_memory(buf, len, label, &r);
        const char *msg = amp_last_error();
        CHECK_MSG(s == c->status && r == NULL && strstr(msg, label) && strstr(msg, c->needle) &&
                      strstr(msg, c->needle2),
                  "case %zu (%s): status %d message '%s', want %d with '%s' and '%s'", i, c->json,
                  (int)s, msg, (int)c->status, c->needle, c->needle2);
        if (s == AMP_OK) amp_st_reader_free(r);
    }
}

/* Damage below the JSON: the size field and the file's length. */
static void test_bad_framing(void) {
    uint8_t buf[256] = {0};
    amp_st_reader *r = NULL;
    CHECK_FAILS(amp_st_reader_from_memory(buf, 5, "tiny.safetensors", &r), AMP_ERR_FORMAT,
                "'tiny.safetensors': 5 bytes is too short");
    CHECK_FAILS(amp_st_reader_from_memory(NULL, 0, "empty.safetensors", &r), AMP_ERR_FORMAT,
                "'empty.safetensors': 0 bytes");
    size_t len = raw_file(buf, "{" OK_W "}", 4);
    buf[0] = (uint8_t)(buf[0] + 1); /* one more header byte than the file has room for */
    buf[len - 1] = ' ', buf[len - 2] = ' ', buf[len - 3] = ' ', buf[len - 4] = ' ';
    CHECK_FAILS(amp_st_reader_from_memory(buf, len, "f.safetensors", &r), AMP_ERR_FORMAT,
                "'f.safetensors': tensor 'w': data_offsets [0, 4] end past the 3-byte data");
    len = raw_file(buf, "{" OK_W "}", 4);
    buf[0] = (uint8_t)(buf[0] + 5);
    CHECK_FAILS(amp_st_reader_from_memory(buf, len, "f.safetensors", &r), AMP_ERR_FORMAT,
                "runs past the end of the");
    buf[6] = 0x01; /* 2^48 + ...: absurd */
    CHECK_FAILS(amp_st_reader_from_memory(buf, len, "f.safetensors", &r), AMP_ERR_FORMAT,
                "over the format's limit");
    memset(buf, 0xff, 8);
    CHECK_FAILS(amp_st_reader_from_memory(buf, len, "f.safetensors", &r), AMP_ERR_FORMAT,
                "header size 18446744073709551615");
    CHECK(r == NULL);
    CHECK_FAILS(amp_st_reader_from_memory(NULL, 4, "x", &r), AMP_ERR_INVALID_ARG, "buf");
}

/* A valid file written by the writer, then damaged on disk. */
static void test_damaged_files(void) {
    const float w[6] = {1, 2, 3, 4, 5, 6};
    const int32_t steps[2] = {7, 8};
    amp_st_writer *wr = NULL;
    CHECK_OK(amp_st_writer_create(&wr));
    if (!wr) return;
    CHECK_OK(amp_st_writer_add(wr, "fc.weight", AMP_ST_F32, 2, (int64_t[]){2, 3}, w));
    CHECK_OK(amp_st_writer_add(wr, "steps", AMP_ST_I32, 1, (int64_t[]){2}, steps));
    char good[600], bad[600];
    CHECK_OK(amp_st_writer_write_file(wr, tmp_path(good, sizeof good, "damage.safetensors")));
    amp_st_writer_free(wr);
    size_t len = 0;
    uint8_t *file = read_bytes(good, &len);
    CHECK(file && len > 40);
    if (!file) return;
    tmp_path(bad, sizeof bad, "damaged.safetensors");
    amp_st_reader *r = NULL;

    write_bytes(bad, file, len - 3); /* truncated inside the last tensor */
    CHECK_FAILS(amp_st_reader_open(bad, &r), AMP_ERR_FORMAT, "tensor 'steps'");
    CHECK(strstr(amp_last_error(), bad) && strstr(amp_last_error(), "truncated"));
    write_bytes(bad, file, len - 8); /* exactly one tensor missing: its offsets are past the end */
    CHECK_FAILS(amp_st_reader_open(bad, &r), AMP_ERR_FORMAT, "'steps': data_offsets [24, 32]");
    write_bytes(bad, file, 20); /* inside the header */
    CHECK_FAILS(amp_st_reader_open(bad, &r), AMP_ERR_FORMAT, "runs past the end of the 20-byte");
    CHECK(strstr(amp_last_error(), bad) != NULL);
    write_bytes(bad, file, 4);
    CHECK_FAILS(amp_st_reader_open(bad, &r), AMP_ERR_FORMAT, "4 bytes is too short");
    CHECK(strstr(amp_last_error(), bad) != NULL);

    file[len - 10] ^= 0x10; /* one bit of fc.weight's data */
    write_bytes(bad, file, len);
    CHECK_FAILS(amp_st_reader_open(bad, &r), AMP_ERR_FORMAT, "crc32");
    CHECK(strstr(amp_last_error(), bad) && strstr(amp_last_error(), "corrupt"));
    file[len - 10] ^= 0x10;

    uint8_t *brace = memchr(file + 8, '{', 16); /* the header's first byte */
    CHECK(brace != NULL);
    if (brace) *brace = '[';
    write_bytes(bad, file, len);
    CHECK_FAILS(amp_st_reader_open(bad, &r), AMP_ERR_FORMAT, "not valid JSON");
    CHECK(strstr(amp_last_error(), bad) != NULL);
    if (brace) *brace = '{';

    write_bytes(bad, file, len); /* repaired: reads again */
    CHECK_OK(amp_st_reader_open(bad, &r));
    amp_st_reader_free(r);
    r = NULL;
    /* A file over the reader's size limit, made sparse so it takes no disk: refused unread. */
    tmp_path(bad, sizeof bad, "huge.safetensors");
    int fd = open(bad, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    if (fd >= 0 && ftruncate(fd, (off_t)AMP_ST_MAX_FILE_BYTES + 1) == 0) {
        CHECK_FAILS(amp_st_reader_open(bad, &r), AMP_ERR_UNSUPPORTED, "over the reader's limit");
        CHECK(strstr(amp_last_error(), bad) != NULL);
    }
    if (fd >= 0) close(fd);
    unlink(bad);
    tmp_path(bad, sizeof bad, "no-such-file.safetensors");
    CHECK_FAILS(amp_st_reader_open(bad, &r), AMP_ERR_IO, bad);
    CHECK_FAILS(amp_st_reader_open(g_dir, &r), AMP_ERR_IO, "not a regular file");
    free(file);
}

/* Seed files for the fuzzer: a two-tensor file with metadata, one of every dtype kind, one
 * without libamp's metadata (so mutations of its data still open), and an empty file. */
static int write_corpus(const char *dir) {
    char path[600];
    const float f[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
    const uint16_t h[3] = {0x3c00, 0xc000, 0x7bff};
    const int64_t i64[1] = {-5};
    const uint8_t u8[3] = {1, 2, 3};
    amp_st_writer *w = NULL;
    int rc = 0;
    for (int k = 0; k < 3 && rc == 0; k++) {
        if (amp_st_writer_create(&w) != AMP_OK) return 1;
        amp_status s = amp_st_writer_add(w, "fc.weight", AMP_ST_F32, 2, (int64_t[]){2, 3}, f);
        if (k >= 1) {
            s = s ? s : amp_st_writer_add(w, "u8", AMP_ST_U8, 1, (int64_t[]){3}, u8);
            s = s ? s : amp_st_writer_add(w, "h", AMP_ST_F16, 1, (int64_t[]){3}, h);
            s = s ? s : amp_st_writer_add(w, "s", AMP_ST_I64, 0, NULL, i64);
            s = s ? s : amp_st_writer_add(w, "z", AMP_ST_BF16, 2, (int64_t[]){0, 4}, NULL);
        }
        if (k == 2) s = s ? s : amp_st_writer_set_meta(w, "opt_level", "O2");
        snprintf(path, sizeof path, "%s/seed-%d.safetensors", dir, k);
        s = s ? s : amp_st_writer_write_file(w, path);
        if (s != AMP_OK) {
            fprintf(stderr, "write_corpus: %s\n", amp_last_error());
            rc = 1;
        }
        amp_st_writer_free(w);
    }
    uint8_t buf[256];
    size_t len = raw_file(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                               "\"b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[8,9]}}",
                          9);
    snprintf(path, sizeof path, "%s/seed-plain.safetensors", dir);
    write_bytes(path, buf, len);
    len = raw_file(buf, "{}", 0);
    snprintf(path, sizeof path, "%s/seed-empty.safetensors", dir);
    write_bytes(path, buf, len);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0) return write_corpus(argv[2]);
    const char *tmp = getenv("AMP_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/test_safetensors_%ld", tmp && *tmp ? tmp : "/tmp",
             (long)getpid());
    if (mkdir(g_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "cannot create %s: %s\n", g_dir, strerror(errno));
        return 1;
    }
    test_dtypes();
    test_round_trip();
    test_many();
    test_metadata();
    test_exact_bytes();
    test_writer_errors();
    test_bad_headers();
    test_bad_framing();
    test_damaged_files();
    return test_summary("test_safetensors");
}
