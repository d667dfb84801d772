/* The tokenizer of a token stream, for decoding: llm.c's tokenizer .bin (amp/data.h), read
 * whole and checked at open; every token's bytes in one block, found through offsets. */
#include <stdlib.h>

#include "amp/data.h"
#include "core/error.h"
#include "data/read_file.h"

#define TOKENIZER_MAGIC 20240328u
#define TOKENIZER_HEADER 256 /* uint32 words */
#define GPT2_VOCAB 50257     /* version 1 files are GPT-2's */

struct amp_tokenizer {
    int32_t vocab, eot;
    uint32_t *offset; /* token i is bytes[offset[i], offset[i + 1]) */
    char *bytes;
};

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The header's vocabulary and end-of-text id, or an error naming what is wrong with it. */
static amp_status check_header(const char *path, const unsigned char *buf, size_t len,
                               int32_t *vocab, int32_t *eot) {
    if (len < TOKENIZER_HEADER * 4)
        return amp_fail(AMP_ERR_FORMAT, "amp_tokenizer_open: '%s' has %zu bytes, less than the "
                        "%d-byte header of a tokenizer file (llm.c's format)", path, len,
                        TOKENIZER_HEADER * 4);
    uint32_t magic = le32(buf), version = le32(buf + 4), n = le32(buf + 8), end = le32(buf + 12);
    if (magic != TOKENIZER_MAGIC)
        return amp_fail(AMP_ERR_FORMAT, "amp_tokenizer_open: '%s' has magic %u, not %u: not a "
                        "tokenizer file of llm.c's format (a token file has 20240520)", path, magic,
                        TOKENIZER_MAGIC);
    if (version != 1 && version != 2)
        return amp_fail(AMP_ERR_FORMAT, "amp_tokenizer_open: '%s' has version %u; this reads "
                        "versions 1 and 2", path, version);
    if (n < 1 || n > 65536)
        return amp_fail(AMP_ERR_FORMAT, "amp_tokenizer_open: '%s' has a vocabulary of %u, "
                        "outside [1, 65536] (token files hold uint16 ids)", path, n);
    if (version == 1 && n != GPT2_VOCAB)
        return amp_fail(AMP_ERR_FORMAT, "amp_tokenizer_open: '%s' is version 1 with %u tokens; "
                        "version 1 is GPT-2's tokenizer of %d (version 2 names its end-of-text "
                        "token)", path, n, GPT2_VOCAB);
    if (version == 1) end = GPT2_VOCAB - 1;
    if (end >= n)
        return amp_fail(AMP_ERR_FORMAT, "amp_tokenizer_open: '%s': the end-of-text token %u is "
                        "outside the vocabulary of %u", path, end, n);
    *vocab = (int32_t)n, *eot = (int32_t)end;
    return AMP_OK;
}

amp_status amp_tokenizer_open(const char *path, amp_tokenizer **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    AMP_CHECK_ARG(path);
    unsigned char *buf = NULL;
    size_t len = 0;
    AMP_TRY(amp_read_file("amp_tokenizer_open", path, &buf, &len));
    int32_t vocab = 0, eot = 0;
    amp_status s = check_header(path, buf, len, &vocab, &eot);
    amp_tokenizer *t = NULL;
    if (s == AMP_OK && (!(t = calloc(1, sizeof *t)) ||
                        !(t->offset = malloc(((size_t)vocab + 1) * sizeof *t->offset)) ||
                        !(t->bytes = malloc(len))))
        s = amp_fail(AMP_ERR_OOM, "amp_tokenizer_open: '%s': out of host memory", path);
    size_t at = TOKENIZER_HEADER * 4, used = 0;
    for (int32_t i = 0; s == AMP_OK && i < vocab; i++) {
        size_t n = at < len ? buf[at] : 0;
        if (at >= len || at + 1 + n > len)
            s = amp_fail(AMP_ERR_FORMAT, "amp_tokenizer_open: '%s' ends inside token %d of %d: "
                         "truncated or not a tokenizer file", path, i, vocab);
        else if (n == 0)
            s = amp_fail(AMP_ERR_FORMAT, "amp_tokenizer_open: '%s': token %d has length 0 (every "
                         "token is at least one byte)", path, i);
        if (s != AMP_OK) break;
        t->offset[i] = (uint32_t)used;
        for (size_t k = 0; k < n; k++) t->bytes[used++] = (char)buf[at + 1 + k];
        at += 1 + n;
    }
    if (s == AMP_OK && at != len)
        s = amp_fail(AMP_ERR_FORMAT, "amp_tokenizer_open: '%s' has %zu bytes after its %d "
                     "tokens: not a tokenizer file of llm.c's format", path, len - at, vocab);
    free(buf);
    if (s != AMP_OK) {
        amp_tokenizer_free(t);
        return s;
    }
    t->offset[vocab] = (uint32_t)used;
    t->vocab = vocab, t->eot = eot;
    *out = t;
    return AMP_OK;
}

void amp_tokenizer_free(amp_tokenizer *t) {
    if (!t) return;
    free(t->offset);
    free(t->bytes);
    free(t);
}

int32_t amp_tokenizer_vocab_size(const amp_tokenizer *t) { return t ? t->vocab : 0; }
int32_t amp_tokenizer_eot(const amp_tokenizer *t) { return t ? t->eot : -1; }

amp_status amp_tokenizer_decode(const amp_tokenizer *t, int32_t id, const char **bytes,
                                size_t *len) {
    AMP_CHECK_ARG(t);
    AMP_CHECK_ARG(bytes);
    AMP_CHECK_ARG(len);
    if (id < 0 || id >= t->vocab)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_tokenizer_decode: id %d is outside the "
                        "vocabulary of %d", id, t->vocab);
    *bytes = t->bytes + t->offset[id];
    *len = t->offset[id + 1] - t->offset[id];
    return AMP_OK;
}
