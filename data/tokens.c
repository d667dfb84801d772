/* Token streams in llm.c's .bin format (amp/data.h): read whole and checked at open, batches of
 * windows cut from them by a counter-based draw (Philox of (seed, step, row)) or in order. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/data.h"
#include "core/error.h"
#include "core/philox.h"
#include "data/read_file.h"

#define TOKENS_MAGIC 20240520
#define TOKENS_VERSION 1
#define TOKENS_HEADER 256 /* int32 words */

struct amp_tokens {
    int64_t n;
    uint16_t *ids;
};

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

amp_status amp_tokens_open(const char *path, int32_t vocab_size, amp_tokens **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    AMP_CHECK_ARG(path);
    if (vocab_size < 1 || vocab_size > 65536)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_tokens_open: vocab_size %d is outside [1, "
                        "65536] (the ids are uint16)", vocab_size);
    unsigned char *buf = NULL;
    size_t len = 0;
    AMP_TRY(amp_read_file("amp_tokens_open", path, &buf, &len));
    amp_status s = AMP_OK;
    uint32_t magic = len >= 12 ? le32(buf) : 0, version = len >= 12 ? le32(buf + 4) : 0;
    /* The count is an int32, as llm.c writes and reads it: a negative one is a corrupt header
     * (read as unsigned it would be reported as 4294967291 tokens). */
    int64_t count = len >= 12 ? (int64_t)(int32_t)le32(buf + 8) : 0;
    uint64_t n = count > 0 ? (uint64_t)count : 0;
    if (len < TOKENS_HEADER * 4) {
        s = amp_fail(AMP_ERR_FORMAT, "amp_tokens_open: '%s' has %zu bytes, less than the %d-byte "
                     "header of a token file (llm.c's format)", path, len, TOKENS_HEADER * 4);
    } else if (magic != TOKENS_MAGIC) {
        s = amp_fail(AMP_ERR_FORMAT, "amp_tokens_open: '%s' has magic %u, not %d: not a token "
                     "file of llm.c's format", path, magic, TOKENS_MAGIC);
    } else if (version != TOKENS_VERSION) {
        s = amp_fail(AMP_ERR_FORMAT, "amp_tokens_open: '%s' has version %u; this reads version "
                     "%d (uint16 ids)", path, version, TOKENS_VERSION);
    } else if (count < 0) {
        s = amp_fail(AMP_ERR_FORMAT, "amp_tokens_open: '%s' says %lld tokens in its header: a "
                     "count must be in [0, 2^31 - 1] (a corrupt header, or not a token file)",
                     path, (long long)count);
    } else if (len != TOKENS_HEADER * 4 + 2 * n) {
        s = amp_fail(AMP_ERR_FORMAT, "amp_tokens_open: '%s' says %llu tokens (%llu bytes after "
                     "the header) but has %zu: truncated or not a token file", path,
                     (unsigned long long)n, (unsigned long long)(2 * n), len - TOKENS_HEADER * 4);
    }
    amp_tokens *t = NULL;
    if (s == AMP_OK && !(t = calloc(1, sizeof *t)))
        s = amp_fail(AMP_ERR_OOM, "amp_tokens_open: out of host memory");
    if (s == AMP_OK && !(t->ids = malloc(n ? (size_t)n * 2 : 1)))
        s = amp_fail(AMP_ERR_OOM, "amp_tokens_open: '%s': out of host memory for %llu tokens",
                     path, (unsigned long long)n);
    for (uint64_t i = 0; s == AMP_OK && i < n; i++) {
        const unsigned char *p = buf + TOKENS_HEADER * 4 + 2 * i;
        t->ids[i] = (uint16_t)(p[0] | p[1] << 8);
        if (t->ids[i] >= vocab_size)
            s = amp_fail(AMP_ERR_FORMAT, "amp_tokens_open: '%s': token %llu is id %u, outside "
                         "the vocabulary of %d", path, (unsigned long long)i, t->ids[i], vocab_size);
    }
    free(buf);
    if (s != AMP_OK) {
        amp_tokens_free(t);
        return s;
    }
    t->n = (int64_t)n;
    *out = t;
    return AMP_OK;
}

void amp_tokens_free(amp_tokens *t) {
    if (!t) return;
    free(t->ids);
    free(t);
}

int64_t amp_tokens_count(const amp_tokens *t) { return t ? t->n : 0; }
const uint16_t *amp_tokens_data(const amp_tokens *t) { return t ? t->ids : NULL; }

amp_status amp_tokens_batch(const amp_tokens *t, amp_token_order order, uint64_t seed,
                            int64_t step, int64_t batch, int64_t seq, int32_t *idx,
                            int32_t *targets) {
    AMP_CHECK_ARG(t);
    AMP_CHECK_ARG(idx);
    AMP_CHECK_ARG(targets);
    if (order != AMP_TOKENS_RANDOM && order != AMP_TOKENS_SEQUENTIAL)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_tokens_batch: unknown order %d", (int)order);
    if (batch < 1 || seq < 1 || step < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_tokens_batch: batch %lld and seq %lld must be "
                        ">= 1, step %lld >= 0", (long long)batch, (long long)seq, (long long)step);
    if (t->n < seq + 2)
        return amp_fail(AMP_ERR_SHAPE, "amp_tokens_batch: %lld tokens; a window of seq %lld needs "
                        "at least %lld", (long long)t->n, (long long)seq, (long long)(seq + 2));
    uint64_t starts = (uint64_t)(t->n - seq - 1);
    for (int64_t i = 0; i < batch; i++) {
        uint64_t start;
        if (order == AMP_TOKENS_SEQUENTIAL) {
            start = (((uint64_t)step * (uint64_t)batch + (uint64_t)i) * (uint64_t)seq) % starts;
        } else {
            uint32_t r[4];
            amp_philox4x32((uint64_t)step * (uint64_t)batch + (uint64_t)i, seed, r);
            start = (((uint64_t)r[0] << 32) | r[1]) % starts;
        }
        for (int64_t j = 0; j < seq; j++) {
            idx[i * seq + j] = t->ids[start + (uint64_t)j];
            targets[i * seq + j] = t->ids[start + (uint64_t)j + 1];
        }
    }
    return AMP_OK;
}

amp_status amp_tokens_write(const char *path, const uint16_t *tokens, int64_t n) {
    AMP_CHECK_ARG(path);
    /* The header's count is an int32 (llm.c's): more than 2^31 - 1 would read back negative. */
    if (n < 0 || n > (int64_t)INT32_MAX || (n > 0 && !tokens))
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_tokens_write: %lld tokens (at most 2^31 - 1, "
                        "the header's int32 count, and an array for them)", (long long)n);
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_tokens_write: path too long");
    FILE *f = fopen(tmp, "wb");
    if (!f) return amp_fail(AMP_ERR_IO, "amp_tokens_write: cannot create '%s': %s", tmp, strerror(errno));
    unsigned char header[TOKENS_HEADER * 4] = {0};
    uint32_t words[3] = {TOKENS_MAGIC, TOKENS_VERSION, (uint32_t)n};
    for (int w = 0; w < 3; w++)
        for (int b = 0; b < 4; b++) header[4 * w + b] = (unsigned char)(words[w] >> (8 * b));
    bool ok = fwrite(header, 1, sizeof header, f) == sizeof header;
    for (int64_t i = 0; ok && i < n; i++) {
        unsigned char le[2] = {(unsigned char)tokens[i], (unsigned char)(tokens[i] >> 8)};
        ok = fwrite(le, 1, 2, f) == 2;
    }
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return amp_fail(AMP_ERR_IO, "amp_tokens_write: cannot write '%s': %s", path, strerror(errno));
    }
    return AMP_OK;
}
