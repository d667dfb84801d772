/* IDX reading and MNIST-format datasets: good files (gzipped and plain) give the right values
 * and normalisation; every kind of corrupt file gives the right status and a message naming the
 * file, without crashing. Fixtures are written at run time into $AMP_TEST_TMP. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "amp/data.h"
#include "data/idx.h"
#include "tests/test_util.h"

static char g_dir[512];

/* Bytes of an IDX file: magic, dims, data (length data_len), then `extra` bytes of 0xEE. */
static size_t idx_bytes(uint8_t *buf, uint32_t magic, int ndim, const uint32_t *dims,
                        const uint8_t *data, size_t data_len, size_t extra) {
    size_t p = 0;
    uint32_t words[4] = {magic, 0, 0, 0};
    for (int d = 0; d < ndim; d++) words[1 + d] = dims[d];
    for (int w = 0; w < 1 + ndim; w++)
        for (int k = 3; k >= 0; k--) buf[p++] = (uint8_t)(words[w] >> (8 * k));
    memcpy(buf + p, data, data_len);
    p += data_len;
    memset(buf + p, 0xEE, extra);
    return p + extra;
}

static void write_file(const char *path, const uint8_t *buf, size_t len, int gz) {
    if (gz) {
        gzFile f = gzopen(path, "wb9");
        CHECK(f != NULL);
        if (!f) return;
        CHECK(len == 0 || gzwrite(f, buf, (unsigned)len) == (int)len);
        CHECK(gzclose(f) == Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        if (!f) return;
        CHECK(fwrite(buf, 1, len, f) == len);
        CHECK(fclose(f) == 0);
    }
}

static size_t read_whole(const char *path, uint8_t *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static const char *tmp_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", g_dir, name);
    return buf;
}

/* Fixture: 7 images of 3 x 4 with pixel (i, r, c) = (i * 37 + r * 11 + c * 5) % 256 (0 and 255
 * included) and labels i % 10. */
enum { N_IMG = 7, ROWS = 3, COLS = 4 };
static uint8_t g_pixels[N_IMG * ROWS * COLS], g_labels[N_IMG];

static void make_fixture(void) {
    for (int i = 0; i < N_IMG; i++) {
        g_labels[i] = (uint8_t)(i % 10);
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < COLS; c++)
                g_pixels[(i * ROWS + r) * COLS + c] = (uint8_t)((i * 37 + r * 11 + c * 5) % 256);
    }
    g_pixels[0] = 0;
    g_pixels[1] = 255;
}

static void write_images(const char *path, int gz) {
    uint8_t buf[1024];
    size_t len = idx_bytes(buf, 0x803, 3, (uint32_t[]){N_IMG, ROWS, COLS}, g_pixels,
                           sizeof g_pixels, 0);
    write_file(path, buf, len, gz);
}

static void write_labels(const char *path, int gz) {
    uint8_t buf[64];
    size_t len = idx_bytes(buf, 0x801, 1, (uint32_t[]){N_IMG}, g_labels, N_IMG, 0);
    write_file(path, buf, len, gz);
}

/* Checks ds against the fixture normalised with (mean, std), with a double reference. */
static void check_values(const amp_dataset *ds, double mean, double std) {
    CHECK(amp_dataset_n(ds) == N_IMG);
    int64_t shape[3];
    amp_dataset_sample_shape(ds, shape);
    CHECK(shape[0] == 1 && shape[1] == ROWS && shape[2] == COLS);
    CHECK(amp_dataset_sample_numel(ds) == ROWS * COLS);
    CHECK(amp_dataset_n_classes(ds) == 10);
    const float *x = amp_dataset_images(ds);
    const int32_t *y = amp_dataset_labels(ds);
    double max_err = 0;
    for (int i = 0; i < N_IMG * ROWS * COLS; i++) {
        double want = ((double)g_pixels[i] / 255.0 - mean) / std;
        double err = fabs((double)x[i] - want);
        if (err > max_err) max_err = err;
    }
    CHECK_MSG(max_err < 2e-6, "max abs error %g", max_err);
    int labels_ok = 1;
    for (int i = 0; i < N_IMG; i++) labels_ok &= y[i] == g_labels[i];
    CHECK(labels_ok);
}

static void test_good_files(void) {
    char ip[600], lp[600];
    for (int gz = 0; gz < 2; gz++) {
        tmp_path(ip, sizeof ip, gz ? "good-images.gz" : "good-images");
        tmp_path(lp, sizeof lp, gz ? "good-labels.gz" : "good-labels");
        write_images(ip, gz);
        write_labels(lp, gz);
        amp_dataset *ds = NULL;
        CHECK_OK(amp_dataset_load_idx(ip, lp, NULL, &ds));
        if (ds) check_values(ds, 0.1307, 0.3081);
        /* First pixel 0 -> -mean/std, second 255 -> (1 - mean)/std, as torchvision computes. */
        if (ds) CHECK(amp_dataset_images(ds)[0] == (0.0f - 0.1307f) / 0.3081f);
        if (ds) CHECK(amp_dataset_images(ds)[1] == (1.0f - 0.1307f) / 0.3081f);
        amp_dataset_free(ds);

        ds = NULL;
        amp_mnist_opts fashion = {.mean = AMP_FASHION_MNIST_MEAN, .std = AMP_FASHION_MNIST_STD};
        CHECK_OK(amp_dataset_load_idx(ip, lp, &fashion, &ds));
        if (ds) check_values(ds, 0.2860, 0.3530);
        amp_dataset_free(ds);

        ds = NULL;
        CHECK_OK(amp_dataset_load_idx(ip, lp, &(amp_mnist_opts){.mean = 0, .std = 1}, &ds));
        if (ds) check_values(ds, 0.0, 1.0);
        if (ds) CHECK(amp_dataset_images(ds)[1] == 1.0f);
        amp_dataset_free(ds);
    }
}

/* amp_mnist_load finds train-* / t10k-* names, .gz first, else the unpacked file. */
static void test_mnist_dir(void) {
    char dir[600], p[700];
    snprintf(dir, sizeof dir, "%s/mnist", g_dir);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    write_images(p, 1);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir);
    write_labels(p, 1);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", dir);
    write_images(p, 0);
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", dir);
    write_labels(p, 0);
    for (int train = 0; train < 2; train++) {
        amp_dataset *ds = NULL;
        CHECK_OK(amp_mnist_load(dir, train, &ds));
        if (ds) check_values(ds, 0.1307, 0.3081);
        amp_dataset_free(ds);
    }
    char empty[600];
    snprintf(empty, sizeof empty, "%s/empty", g_dir);
    mkdir(empty, 0755);
    amp_dataset *ds = (amp_dataset *)&ds;
    CHECK_FAILS(amp_mnist_load(empty, true, &ds), AMP_ERR_IO, "train-images-idx3-ubyte.gz");
    CHECK_FAILS(amp_mnist_load(empty, true, &ds), AMP_ERR_IO, strerror(ENOENT));
    CHECK(ds == NULL);
}

static void test_missing_and_unreadable(void) {
    char ip[600], lp[600], missing[600];
    tmp_path(ip, sizeof ip, "good-images.gz");
    tmp_path(lp, sizeof lp, "good-labels.gz");
    tmp_path(missing, sizeof missing, "no-such-file.gz");
    amp_dataset *ds = NULL;
    CHECK_FAILS(amp_dataset_load_idx(missing, lp, NULL, &ds), AMP_ERR_IO, missing);
    CHECK_FAILS(amp_dataset_load_idx(ip, missing, NULL, &ds), AMP_ERR_IO, missing);
    CHECK_FAILS(amp_dataset_load_idx(ip, missing, NULL, &ds), AMP_ERR_IO, strerror(ENOENT));
    /* A directory opens but cannot be read. */
    CHECK_FAILS(amp_dataset_load_idx(g_dir, lp, NULL, &ds), AMP_ERR_IO, g_dir);
    CHECK(ds == NULL);
    CHECK_FAILS(amp_dataset_load_idx(NULL, lp, NULL, &ds), AMP_ERR_INVALID_ARG, "images_path");
    CHECK_FAILS(amp_dataset_load_idx(ip, lp, &(amp_mnist_opts){.std = -1}, &ds),
                AMP_ERR_INVALID_ARG, "std");
    CHECK_FAILS(amp_dataset_load_idx(ip, lp, &(amp_mnist_opts){.n_classes = 300}, &ds),
                AMP_ERR_INVALID_ARG, "n_classes");
}

/* Loads `path` as the images of a dataset (labels good) and expects `status` and `needle`. */
static void expect_images_fail(const char *path, amp_status status, const char *needle,
                               const char *what) {
    char lp[600];
    tmp_path(lp, sizeof lp, "good-labels.gz");
    amp_dataset *ds = NULL;
    amp_status s = amp_dataset_load_idx(path, lp, NULL, &ds);
    CHECK_MSG(s == status && strstr(amp_last_error(), path) && strstr(amp_last_error(), needle),
              "%s: got %d '%s', want %d naming the file and '%s'", what, (int)s, amp_last_error(),
              (int)status, needle);
    CHECK(ds == NULL);
    amp_dataset_free(ds);
}

static void test_truncated(void) {
    uint8_t full[1024], gzbytes[2048];
    size_t len = idx_bytes(full, 0x803, 3, (uint32_t[]){N_IMG, ROWS, COLS}, g_pixels,
                           sizeof g_pixels, 0);
    char p[600], what[64];
    /* Plain and gzipped, cut inside the magic, inside the dims, at the header's end, inside the
     * data and one byte short. */
    const size_t cuts[] = {0, 2, 4, 9, 15, 16, 17, 16 + 40, len - 1};
    for (int gz = 0; gz < 2; gz++)
        for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
            snprintf(what, sizeof what, "%s cut at %zu", gz ? "gz" : "plain", cuts[k]);
            tmp_path(p, sizeof p, gz ? "cut.gz" : "cut");
            write_file(p, full, cuts[k], gz);
            expect_images_fail(p, AMP_ERR_FORMAT, cuts[k] < 16 ? "truncated IDX header"
                                                               : "truncated", what);
        }
    /* A gzip stream itself cut short: inside the gzip header, inside the deflate data, inside
     * the CRC trailer. zlib reports these; none may pass or crash. */
    tmp_path(p, sizeof p, "whole.gz");
    write_file(p, full, len, 1);
    size_t gz_len = read_whole(p, gzbytes, sizeof gzbytes);
    CHECK(gz_len > 30);
    const size_t gz_cuts[] = {5, 10, 14, gz_len / 2, gz_len - 6, gz_len - 1};
    for (size_t k = 0; k < sizeof gz_cuts / sizeof gz_cuts[0]; k++) {
        snprintf(what, sizeof what, "gzip stream cut at %zu of %zu", gz_cuts[k], gz_len);
        tmp_path(p, sizeof p, "gzcut.gz");
        write_file(p, gzbytes, gz_cuts[k], 0);
        expect_images_fail(p, AMP_ERR_FORMAT, "", what);
    }
    /* A flipped byte in the deflate data or the CRC: corrupt. */
    for (size_t at = gz_len - 8; at < gz_len; at += 4) {
        uint8_t bad[2048];
        memcpy(bad, gzbytes, gz_len);
        bad[at] ^= 0x5A;
        snprintf(what, sizeof what, "gzip byte %zu flipped", at);
        tmp_path(p, sizeof p, "gzflip.gz");
        write_file(p, bad, gz_len, 0);
        expect_images_fail(p, AMP_ERR_FORMAT, "gzip", what);
    }
}

static void test_bad_headers(void) {
    uint8_t buf[1024];
    char p[600];
    tmp_path(p, sizeof p, "bad-images.gz");
    const uint32_t dims[3] = {N_IMG, ROWS, COLS};
    struct {
        uint32_t magic;
        const char *needle;
    } magics[] = {{0x801, "swapped"}, {0x802, "dimensions"}, {0xD03, "unsigned-byte"},
                  {0x1F8B0803, "not an IDX"}, {0x3080000, "magic"}};
    for (size_t k = 0; k < sizeof magics / sizeof magics[0]; k++) {
        write_file(p, buf, idx_bytes(buf, magics[k].magic, 3, dims, g_pixels, sizeof g_pixels, 0),
                   1);
        expect_images_fail(p, AMP_ERR_FORMAT, "wrong magic 0x", magics[k].needle);
        CHECK(strstr(amp_last_error(), magics[k].needle) != NULL);
    }
    /* Dims: a zero, a product that overflows, one that is huge but fits (must fail on the
     * missing data without allocating it), one image fewer than the data (trailing bytes),
     * one more (truncated). */
    write_file(p, buf, idx_bytes(buf, 0x803, 3, (uint32_t[]){N_IMG, 0, COLS}, g_pixels, 0, 0), 1);
    expect_images_fail(p, AMP_ERR_FORMAT, "dimension 1 is 0", "zero dim");
    write_file(p, buf,
               idx_bytes(buf, 0x803, 3, (uint32_t[]){0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu},
                         g_pixels, sizeof g_pixels, 0), 1);
    expect_images_fail(p, AMP_ERR_FORMAT, "exceed", "overflowing dims");
    write_file(p, buf,
               idx_bytes(buf, 0x803, 3, (uint32_t[]){1000000, 1000, 1000}, g_pixels,
                         sizeof g_pixels, 0), 1);
    expect_images_fail(p, AMP_ERR_FORMAT, "1000000 x 1000 x 1000 need 1000000000000", "huge dims");
    write_file(p, buf, idx_bytes(buf, 0x803, 3, (uint32_t[]){N_IMG - 1, ROWS, COLS}, g_pixels,
                                 sizeof g_pixels, 0), 1);
    expect_images_fail(p, AMP_ERR_FORMAT, "trailing", "dims one image short");
    write_file(p, buf, idx_bytes(buf, 0x803, 3, (uint32_t[]){N_IMG + 1, ROWS, COLS}, g_pixels,
                                 sizeof g_pixels, 0), 1);
    expect_images_fail(p, AMP_ERR_FORMAT, "truncated", "dims one image too many");
    write_file(p, buf, idx_bytes(buf, 0x803, 3, dims, g_pixels, sizeof g_pixels, 3), 0);
    expect_images_fail(p, AMP_ERR_FORMAT, "trailing", "garbage after the data");
}

static void test_labels(void) {
    char ip[600], lp[600];
    tmp_path(ip, sizeof ip, "good-images.gz");
    tmp_path(lp, sizeof lp, "bad-labels.gz");
    uint8_t buf[64], labels[N_IMG];
    amp_dataset *ds = NULL;

    write_file(lp, buf, idx_bytes(buf, 0x801, 1, (uint32_t[]){N_IMG - 1}, g_labels, N_IMG - 1, 0),
               1);
    CHECK_FAILS(amp_dataset_load_idx(ip, lp, NULL, &ds), AMP_ERR_FORMAT, "holds 7 images");
    CHECK(strstr(amp_last_error(), ip) && strstr(amp_last_error(), lp) &&
          strstr(amp_last_error(), "6 labels"));

    memcpy(labels, g_labels, N_IMG);
    labels[4] = 10;
    write_file(lp, buf, idx_bytes(buf, 0x801, 1, (uint32_t[]){N_IMG}, labels, N_IMG, 0), 1);
    CHECK_FAILS(amp_dataset_load_idx(ip, lp, NULL, &ds), AMP_ERR_FORMAT, "label 10 at index 4");
    CHECK(strstr(amp_last_error(), lp) != NULL);

    /* Labels 0..6 with n_classes 5: label 5 at index 5 is the first bad one; 7 classes pass. */
    CHECK_FAILS(amp_dataset_load_idx(ip, tmp_path(lp, sizeof lp, "good-labels.gz"),
                                     &(amp_mnist_opts){.n_classes = 5}, &ds),
                AMP_ERR_FORMAT, "label 5 at index 5 is not below n_classes 5");
    CHECK(ds == NULL);
    CHECK_OK(amp_dataset_load_idx(ip, lp, &(amp_mnist_opts){.n_classes = 7}, &ds));
    CHECK(amp_dataset_n_classes(ds) == 7);
    amp_dataset_free(ds);

    /* Labels given where images are expected and the other way round. */
    CHECK_FAILS(amp_dataset_load_idx(lp, ip, NULL, &ds), AMP_ERR_FORMAT, "swapped");
}

/* Random damage (seeded, so a failure repeats): 1-3 bytes of a plain or gzipped images file set
 * to random values, or the file cut or extended at a random length. The loader must answer OK (a
 * changed pixel, say) or AMP_ERR_FORMAT naming the file, and never crash (ASan builds check the
 * memory side). */
static void test_random_damage(void) {
    uint8_t full[1024], gzbytes[2048], bad[2200];
    size_t len = idx_bytes(full, 0x803, 3, (uint32_t[]){N_IMG, ROWS, COLS}, g_pixels,
                           sizeof g_pixels, 0);
    char p[600], lp[600];
    tmp_path(p, sizeof p, "whole.gz");
    write_file(p, full, len, 1);
    size_t gz_len = read_whole(p, gzbytes, sizeof gzbytes);
    tmp_path(lp, sizeof lp, "good-labels.gz");
    tmp_path(p, sizeof p, "damaged");
    uint64_t state = 12345;
    int n_ok = 0, n_format = 0, n_other = 0;
    for (int it = 0; it < 400; it++) {
        const uint8_t *src = it % 2 ? gzbytes : full;
        size_t src_len = it % 2 ? gz_len : len, out_len = src_len;
        memcpy(bad, src, src_len);
        state = state * 6364136223846793005u + 1442695040888963407u;
        int kind = (int)(state >> 60) % 3;
        if (kind < 2) {
            for (int k = 0; k <= kind; k++) {
                state = state * 6364136223846793005u + 1442695040888963407u;
                /* Mostly in the first 24 bytes, where the header and the gzip header live. */
                size_t at = (size_t)(state >> 33) % (k == 0 ? 24 : src_len);
                bad[at] = (uint8_t)(state >> 20);
            }
        } else {
            state = state * 6364136223846793005u + 1442695040888963407u;
            out_len = (size_t)(state >> 33) % (src_len + 64);
            if (out_len > src_len) memset(bad + src_len, (int)(state >> 24) & 0xFF,
                                          out_len - src_len);
        }
        write_file(p, bad, out_len, 0);
        amp_dataset *ds = NULL;
        amp_status s = amp_dataset_load_idx(p, lp, NULL, &ds);
        if (s == AMP_OK) n_ok++;
        else if (s == AMP_ERR_FORMAT && strstr(amp_last_error(), p)) n_format++;
        else {
            n_other++;
            fprintf(stderr, "damage %d: status %d '%s'\n", it, (int)s, amp_last_error());
        }
        CHECK((s == AMP_OK) == (ds != NULL));
        amp_dataset_free(ds);
    }
    printf("random damage: %d loaded, %d AMP_ERR_FORMAT, %d other\n", n_ok, n_format, n_other);
    CHECK(n_other == 0 && n_format > 200);
}

static void test_idx_direct(void) {
    char p[600];
    tmp_path(p, sizeof p, "good-labels");
    amp_idx idx;
    CHECK_OK(amp_idx_read(p, 1, &idx));
    CHECK(idx.ndim == 1 && idx.dims[0] == N_IMG && idx.numel == N_IMG);
    CHECK(idx.data && memcmp(idx.data, g_labels, N_IMG) == 0);
    char dims[32];
    amp_idx_dims_str(&idx, dims, sizeof dims);
    CHECK(strcmp(dims, "7") == 0);
    amp_idx_free(&idx);
    CHECK(idx.data == NULL && idx.numel == 0);
    amp_idx_free(NULL);
    CHECK_FAILS(amp_idx_read(p, 4, &idx), AMP_ERR_INVALID_ARG, "ndim");
}

static void test_create(void) {
    float x[6] = {1, 2, 3, 4, 5, 6};
    int32_t y[2] = {1, 3};
    amp_dataset *ds = NULL;
    CHECK_OK(amp_dataset_create(2, (const int64_t[3]){1, 1, 3}, x, y, 4, &ds));
    CHECK(amp_dataset_n(ds) == 2 && amp_dataset_sample_numel(ds) == 3);
    CHECK(ds && amp_dataset_images(ds)[5] == 6.0f && amp_dataset_labels(ds)[1] == 3);
    amp_dataset_free(ds);
    CHECK_FAILS(amp_dataset_create(2, (const int64_t[3]){1, 1, 3}, x, y, 3, &ds),
                AMP_ERR_INVALID_ARG, "y[1] = 3");
    CHECK_FAILS(amp_dataset_create(2, (const int64_t[3]){1, 0, 3}, x, y, 4, &ds),
                AMP_ERR_INVALID_ARG, "sample_shape[1]");
    amp_dataset_free(NULL);
}

int main(void) {
    const char *tmp = getenv("AMP_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/test_idx_%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    if (mkdir(g_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "cannot create %s: %s\n", g_dir, strerror(errno));
        return 1;
    }
    make_fixture();
    test_good_files();
    test_mnist_dir();
    test_missing_and_unreadable();
    test_truncated();
    test_bad_headers();
    test_random_damage();
    test_labels();
    test_idx_direct();
    test_create();
    return test_summary("test_idx");
}
