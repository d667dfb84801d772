/* Token streams in llm.c's format (data/tokens.c):
 *  - amp_tokens_write then amp_tokens_open: the header llm.c writes (magic 20240520, version 1,
 *    the count, 256 int32), the ids back unchanged;
 *  - sequential batches: row i of step s from ((s B + i) T) mod (n - T - 1), targets the next
 *    tokens; random batches: inside the file, the same for the same (seed, step), others for
 *    another step or seed, and every start reachable in about uniform measure;
 *  - bad files and arguments: a wrong magic, another version, a body shorter or longer than the
 *    header says, an id outside the vocabulary (its position named), a file too short for the
 *    window, a vocabulary past uint16: clear errors naming the file, nothing returned. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "test_tmp.h"
#include "test_util.h"

#define NAME "test_tokens"

/* A file of raw bytes: the header words given, then `n_body` uint16 of the body. */
static void write_raw(const char *file, uint32_t magic, uint32_t version, uint32_t count,
                      const uint16_t *body, size_t n_body) {
    FILE *f = fopen(test_tmp_path(file), "wb");
    CHECK(f != NULL);
    if (!f) return;
    int32_t header[256] = {0};
    header[0] = (int32_t)magic, header[1] = (int32_t)version, header[2] = (int32_t)count;
    fwrite(header, sizeof header, 1, f);
    if (n_body) fwrite(body, 2, n_body, f);
    fclose(f);
}

static void test_round_trip_and_batches(void) {
    enum { N = 1000 };
    uint16_t ids[N];
    uint64_t r = 0x9e3779b97f4a7c15ull; /* ids without a period, so a window is found once */
    for (int i = 0; i < N; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        ids[i] = (uint16_t)(r % 251);
    }
    CHECK_OK(amp_tokens_write(test_tmp_path("a.bin"), ids, N));
    /* The header as llm.c reads it. */
    FILE *f = fopen(test_tmp_path("a.bin"), "rb");
    int32_t header[256] = {0};
    if (f) {
        CHECK(fread(header, sizeof header, 1, f) == 1);
        fseek(f, 0, SEEK_END);
        CHECK(ftell(f) == 1024 + 2 * N);
        fclose(f);
    }
    CHECK(header[0] == 20240520 && header[1] == 1 && header[2] == N && header[3] == 0);
    amp_tokens *t = NULL;
    CHECK_OK(amp_tokens_open(test_tmp_path("a.bin"), 256, &t));
    if (!t) return;
    CHECK(amp_tokens_count(t) == N && memcmp(amp_tokens_data(t), ids, sizeof ids) == 0);

    enum { B = 3, T = 16 };
    int32_t x[B * T], y[B * T], x2[B * T], y2[B * T];
    int bad = 0;
    for (int64_t step = 0; step < 40; step++) {
        CHECK_OK(amp_tokens_batch(t, AMP_TOKENS_SEQUENTIAL, 0, step, B, T, x, y));
        for (int i = 0; i < B; i++) {
            int64_t start = ((step * B + i) * T) % (N - T - 1);
            for (int j = 0; j < T; j++)
                bad += x[i * T + j] != ids[start + j] || y[i * T + j] != ids[start + j + 1];
        }
    }
    CHECK_MSG(bad == 0, "sequential batches: %d tokens off the formula", bad);

    /* Random windows: where each row starts is found back in the file. */
    int64_t hits[4] = {0};
    for (int64_t step = 0; step < 400; step++) {
        CHECK_OK(amp_tokens_batch(t, AMP_TOKENS_RANDOM, 7, step, B, T, x, y));
        for (int i = 0; i < B; i++) {
            int64_t start = -1;
            for (int64_t s = 0; s < N - T - 1 && start < 0; s++)
                if (ids[s] == x[i * T]) {
                    bool all = true;
                    for (int j = 0; j < T && all; j++)
                        all = ids[s + j] == x[i * T + j] && ids[s + j + 1] == y[i * T + j];
                    if (all) start = s;
                }
            CHECK_MSG(start >= 0, "step %lld row %d: a window not in the file", (long long)step, i);
            if (start >= 0) hits[start * 4 / (N - T - 1)]++;
        }
    }
    for (int q = 0; q < 4; q++) /* 300 draws a quarter on average */
        CHECK_MSG(hits[q] > 200 && hits[q] < 400, "quarter %d of the file: %lld of 1200 starts", q,
                  (long long)hits[q]);
    CHECK_OK(amp_tokens_batch(t, AMP_TOKENS_RANDOM, 7, 5, B, T, x, y));
    CHECK_OK(amp_tokens_batch(t, AMP_TOKENS_RANDOM, 7, 5, B, T, x2, y2));
    CHECK(memcmp(x, x2, sizeof x) == 0 && memcmp(y, y2, sizeof y) == 0);
    CHECK_OK(amp_tokens_batch(t, AMP_TOKENS_RANDOM, 8, 5, B, T, x2, y2));
    CHECK(memcmp(x, x2, sizeof x) != 0);
    CHECK_OK(amp_tokens_batch(t, AMP_TOKENS_RANDOM, 7, 6, B, T, x2, y2));
    CHECK(memcmp(x, x2, sizeof x) != 0);

    CHECK_FAILS(amp_tokens_batch(t, AMP_TOKENS_RANDOM, 7, 0, B, N - 1, x, y), AMP_ERR_SHAPE,
                "1000 tokens; a window of seq 999 needs at least 1001");
    CHECK_FAILS(amp_tokens_batch(t, (amp_token_order)4, 7, 0, B, T, x, y), AMP_ERR_INVALID_ARG,
                "unknown order 4");
    CHECK_FAILS(amp_tokens_batch(t, AMP_TOKENS_RANDOM, 7, -1, B, T, x, y), AMP_ERR_INVALID_ARG,
                "step -1");
    amp_tokens_free(t);
}

static void test_bad_files(void) {
    uint16_t body[8] = {1, 2, 3, 4, 5, 6, 7, 300};
    amp_tokens *t = (amp_tokens *)1;
    write_raw("magic.bin", 20240521, 1, 8, body, 8);
    CHECK_FAILS(amp_tokens_open(test_tmp_path("magic.bin"), 512, &t), AMP_ERR_FORMAT,
                "magic.bin' has magic 20240521, not 20240520");
    CHECK(t == NULL);
    write_raw("version.bin", 20240520, 2, 8, body, 8);
    CHECK_FAILS(amp_tokens_open(test_tmp_path("version.bin"), 512, &t), AMP_ERR_FORMAT,
                "has version 2");
    write_raw("short.bin", 20240520, 1, 9, body, 8);
    CHECK_FAILS(amp_tokens_open(test_tmp_path("short.bin"), 512, &t), AMP_ERR_FORMAT,
                "says 9 tokens (18 bytes after the header) but has 16: truncated");
    write_raw("long.bin", 20240520, 1, 7, body, 8);
    CHECK_FAILS(amp_tokens_open(test_tmp_path("long.bin"), 512, &t), AMP_ERR_FORMAT,
                "says 7 tokens");
    write_raw("vocab.bin", 20240520, 1, 8, body, 8);
    CHECK_FAILS(amp_tokens_open(test_tmp_path("vocab.bin"), 256, &t), AMP_ERR_FORMAT,
                "vocab.bin': token 7 is id 300, outside the vocabulary of 256");
    CHECK_OK(amp_tokens_open(test_tmp_path("vocab.bin"), 301, &t));
    amp_tokens_free(t);
    FILE *f = fopen(test_tmp_path("tiny.bin"), "wb");
    if (f) fputs("not a token file", f), fclose(f);
    CHECK_FAILS(amp_tokens_open(test_tmp_path("tiny.bin"), 256, &t), AMP_ERR_FORMAT,
                "has 16 bytes, less than the 1024-byte header");
    CHECK_FAILS(amp_tokens_open(test_tmp_path("absent.bin"), 256, &t), AMP_ERR_IO, "cannot open");
    CHECK_FAILS(amp_tokens_open(test_tmp_path("vocab.bin"), 70000, &t), AMP_ERR_INVALID_ARG,
                "vocab_size 70000");
}

int main(void) {
    test_tmp_make("test_tokens");
    test_round_trip_and_batches();
    test_bad_files();
    test_tmp_remove();
    return test_summary(NAME);
}
