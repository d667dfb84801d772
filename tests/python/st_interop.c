/* The C half of the safetensors interoperability test (test_safetensors_interop.py drives it):
 *   st_interop write DIR   writes DIR/c_numpy.safetensors (every dtype numpy has) and
 *                          DIR/c_bf16.safetensors (BF16, which numpy lacks) with the values below
 *   st_interop check FILE  reads a file written by safetensors.numpy.save_file and checks it
 *   st_interop skip WHY    reports SKIPPED (exit 77): how ctest shows a machine without python3
 * The same values are spelled out in the Python script; change both together. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <string.h>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "tests/test_util.h"

static amp_status write_files(const char *dir) {
    const float fc_weight[6] = {0.5f, -1.25f, 3.0f, 1e-3f, -0.0f, 65504.0f};
    const uint16_t fc_bias[3] = {0x3c00, 0xc000, 0x7bff}; /* f16 1, -2, 65504 */
    const int64_t step = 1234567890123;
    const int32_t labels[4] = {-1, 0, 7, 2147483647};
    const uint8_t mask[3] = {1, 0, 1};
    const uint8_t bytes[5] = {0, 1, 127, 128, 255};
    const double dbl[2] = {0.1, -1e300};
    const uint16_t master[4] = {0x3f80, 0xc040, 0x4049, 0x0000}; /* bf16 1, -3, 3.140625, 0 */
    const float after[2] = {42.0f, -42.0f};
    char path[1024];
    amp_st_writer *w = NULL;
    AMP_TRY(amp_st_writer_create(&w));
    amp_status s = amp_st_writer_add(w, "fc.weight", AMP_ST_F32, 2, (int64_t[]){2, 3}, fc_weight);
    if (!s) s = amp_st_writer_add(w, "fc.bias", AMP_ST_F16, 1, (int64_t[]){3}, fc_bias);
    if (!s) s = amp_st_writer_add(w, "step", AMP_ST_I64, 0, NULL, &step);
    if (!s) s = amp_st_writer_add(w, "labels", AMP_ST_I32, 2, (int64_t[]){2, 2}, labels);
    if (!s) s = amp_st_writer_add(w, "mask", AMP_ST_BOOL, 1, (int64_t[]){3}, mask);
    if (!s) s = amp_st_writer_add(w, "bytes", AMP_ST_U8, 1, (int64_t[]){5}, bytes);
    if (!s) s = amp_st_writer_add(w, "double", AMP_ST_F64, 1, (int64_t[]){2}, dbl);
    if (!s) s = amp_st_writer_add(w, "empty", AMP_ST_F32, 2, (int64_t[]){0, 3}, NULL);
    if (!s) s = amp_st_writer_set_meta(w, "opt_level", "O2");
    snprintf(path, sizeof path, "%s/c_numpy.safetensors", dir);
    if (!s) s = amp_st_writer_write_file(w, path);
    amp_st_writer_free(w);
    AMP_TRY(s);

    AMP_TRY(amp_st_writer_create(&w));
    s = amp_st_writer_add(w, "master", AMP_ST_BF16, 2, (int64_t[]){2, 2}, master);
    if (!s) s = amp_st_writer_add(w, "after", AMP_ST_F32, 1, (int64_t[]){2}, after);
    snprintf(path, sizeof path, "%s/c_bf16.safetensors", dir);
    if (!s) s = amp_st_writer_write_file(w, path);
    amp_st_writer_free(w);
    return s;
}

/* Checks tensor `name` of r: dtype, shape and bytes. */
static void check_tensor(const amp_st_reader *r, const char *name, amp_st_dtype dtype, int ndim,
                         const int64_t *shape, const void *want, size_t nbytes) {
    amp_st_tensor t;
    CHECK_OK(amp_st_reader_find(r, name, &t));
    if (amp_st_reader_find(r, name, &t) != AMP_OK) return;
    CHECK_MSG(t.dtype == dtype, "'%s' is %s, want %s", name, amp_st_dtype_name(t.dtype),
              amp_st_dtype_name(dtype));
    int same = t.ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t.shape[d] == shape[d];
    CHECK_MSG(same, "'%s': shape differs (%d dims, want %d)", name, t.ndim, ndim);
    CHECK_MSG(t.nbytes == nbytes && memcmp(t.data, want, nbytes) == 0, "'%s' values differ",
              name);
}

/* The file test_safetensors_interop.py writes with safetensors.numpy.save_file. */
static int check_python_file(const char *path) {
    const float w[6] = {1.5f, -2.0f, 0.0f, 3.25f, -1e-8f, 1e30f};
    const uint16_t h[4] = {0x3c00, 0xbc00, 0x3800, 0x7c00}; /* f16 1, -1, 0.5, inf */
    const int32_t i[3] = {-7, 0, 123456};
    const float s = 2.5f;
    amp_st_reader *r = NULL;
    CHECK_OK(amp_st_reader_open(path, &r));
    if (!r) return test_summary("st_interop");
    CHECK(amp_st_reader_n(r) == 4);
    check_tensor(r, "w", AMP_ST_F32, 2, (int64_t[]){3, 2}, w, sizeof w);
    check_tensor(r, "h", AMP_ST_F16, 1, (int64_t[]){4}, h, sizeof h);
    check_tensor(r, "i", AMP_ST_I32, 1, (int64_t[]){3}, i, sizeof i);
    check_tensor(r, "s", AMP_ST_F32, 0, NULL, &s, sizeof s);
    const char *writer = amp_st_reader_meta(r, "writer");
    CHECK(writer && strcmp(writer, "python") == 0);
    CHECK(amp_st_reader_meta(r, AMP_ST_META_CRC32) == NULL); /* Python adds none: not required */
    amp_st_reader_free(r);
    return test_summary("st_interop");
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "skip") == 0) return test_skip("st_interop", argv[2]);
    if (argc == 3 && strcmp(argv[1], "check") == 0) return check_python_file(argv[2]);
    if (argc == 3 && strcmp(argv[1], "write") == 0) {
        amp_status s = write_files(argv[2]);
        if (s != AMP_OK) fprintf(stderr, "st_interop: %s\n", amp_last_error());
        return s == AMP_OK ? 0 : 1;
    }
    fprintf(stderr, "usage: st_interop write DIR | check FILE | skip REASON\n");
    return 2;
}
