/* libFuzzer harness for the safetensors reader. Any bytes must give AMP_OK or an error whose
 * message names the input, never a crash, a leak or undefined behaviour (ASan, UBSan). A file
 * that opens must be self-consistent (sizes, lookups, every data byte readable), and writing its
 * tensors and metadata back with the writer and reading that again must give the same file
 * contents: a property the unit tests check on a few files and this checks on whatever the
 * fuzzer finds. A violated property aborts, which libFuzzer reports with the input. */
#define _GNU_SOURCE

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"

#define LABEL "fuzz-input"

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_safetensors: %s:%d: %s (last error: %s)\n", __FILE__, __LINE__,  \
                    #cond, amp_last_error());                                                      \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Every byte of every tensor is read into this, so ASan sees any pointer past the buffer. */
static volatile uint8_t g_sink;

static void check_consistent(const amp_st_reader *r) {
    size_t n = amp_st_reader_n(r);
    for (size_t i = 0; i < n; i++) {
        amp_st_tensor t, f;
        REQUIRE(amp_st_reader_at(r, i, &t) == AMP_OK);
        REQUIRE(t.name && amp_st_dtype_name(t.dtype) && t.ndim >= 0 && t.ndim <= AMP_ST_MAX_DIMS);
        int64_t numel = 1;
        for (int d = 0; d < t.ndim; d++) numel *= t.shape[d];
        REQUIRE(numel == t.numel && t.nbytes == (size_t)numel * amp_st_dtype_size(t.dtype));
        REQUIRE(amp_st_reader_find(r, t.name, &f) == AMP_OK && f.data == t.data);
        uint8_t x = 0;
        for (size_t k = 0; k < t.nbytes; k++) x ^= ((const uint8_t *)t.data)[k];
        g_sink = x;
    }
    amp_st_tensor none;
    REQUIRE(amp_st_reader_at(r, n, &none) == AMP_ERR_INVALID_ARG);
    for (size_t i = 0; i < amp_st_reader_meta_n(r); i++) {
        const char *key, *value;
        REQUIRE(amp_st_reader_meta_at(r, i, &key, &value) == AMP_OK);
        REQUIRE(amp_st_reader_meta(r, key) == value);
        g_sink = (uint8_t)(strlen(key) + strlen(value));
    }
}

/* Writes r's tensors and metadata with the writer into a memory file and reads that back. */
static void check_round_trip(const amp_st_reader *r) {
    amp_st_writer *w = NULL;
    REQUIRE(amp_st_writer_create(&w) == AMP_OK);
    size_t n = amp_st_reader_n(r);
    for (size_t i = 0; i < n; i++) {
        amp_st_tensor t;
        REQUIRE(amp_st_reader_at(r, i, &t) == AMP_OK);
        REQUIRE(amp_st_writer_add(w, t.name, t.dtype, t.ndim, t.shape, t.data) == AMP_OK);
    }
    for (size_t i = 0; i < amp_st_reader_meta_n(r); i++) {
        const char *key, *value;
        REQUIRE(amp_st_reader_meta_at(r, i, &key, &value) == AMP_OK);
        if (strcmp(key, AMP_ST_META_CRC32) && strcmp(key, AMP_ST_META_FORMAT))
            REQUIRE(amp_st_writer_set_meta(w, key, value) == AMP_OK);
    }
    int fd = memfd_create("fuzz_safetensors", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(amp_st_writer_write_fd(w, fd, "memfd") == AMP_OK);
    amp_st_writer_free(w);
    struct stat st;
    REQUIRE(fstat(fd, &st) == 0 && st.st_size >= 8);
    uint8_t *buf = malloc((size_t)st.st_size);
    REQUIRE(buf && pread(fd, buf, (size_t)st.st_size, 0) == st.st_size);
    close(fd);
    amp_st_reader *back = NULL;
    REQUIRE(amp_st_reader_from_memory(buf, (size_t)st.st_size, "round trip", &back) == AMP_OK);
    free(buf);
    REQUIRE(amp_st_reader_n(back) == n);
    for (size_t i = 0; i < n; i++) {
        amp_st_tensor a, b;
        REQUIRE(amp_st_reader_at(r, i, &a) == AMP_OK && amp_st_reader_at(back, i, &b) == AMP_OK);
        REQUIRE(strcmp(a.name, b.name) == 0 && a.dtype == b.dtype && a.ndim == b.ndim);
        REQUIRE(memcmp(a.shape, b.shape, sizeof a.shape[0] * (size_t)a.ndim) == 0);
        REQUIRE(a.nbytes == b.nbytes && memcmp(a.data, b.data, a.nbytes) == 0);
    }
    for (size_t i = 0; i < amp_st_reader_meta_n(r); i++) {
        const char *key, *value, *got;
        REQUIRE(amp_st_reader_meta_at(r, i, &key, &value) == AMP_OK);
        got = amp_st_reader_meta(back, key);
        REQUIRE(got != NULL);
        if (strcmp(key, AMP_ST_META_CRC32)) REQUIRE(strcmp(got, value) == 0);
    }
    amp_st_reader_free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    amp_st_reader *r = NULL;
    amp_status s = amp_st_reader_from_memory(data, size, LABEL, &r);
    if (s != AMP_OK) {
        /* Every refusal says which input it is about. */
        REQUIRE(r == NULL && s < 0 && strstr(amp_last_error(), LABEL) != NULL);
        return 0;
    }
    REQUIRE(strcmp(amp_st_reader_label(r), LABEL) == 0);
    check_consistent(r);
    check_round_trip(r);
    amp_st_reader_free(r);
    return 0;
}
