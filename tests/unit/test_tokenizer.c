/* The tokenizer of a token stream, llm.c's tokenizer .bin (data/tokenizer.c):
 *  - version 2 (its end-of-text id in the header): every token's bytes back as written, a UTF-8
 *    character split over two tokens included; ids outside the vocabulary refused by name;
 *  - version 1 (GPT-2's, 50257 tokens, end of text 50256, the layout of llm.c's
 *    gpt2_tokenizer.bin): found and decoded;
 *  - bad files: too short for the header, a token file's magic, another version, a vocabulary
 *    of 0 or past uint16, a version 1 file that is not GPT-2's, an end-of-text id outside the
 *    vocabulary, a token of length 0, a table that ends early, bytes after it, a missing file:
 *    clear errors naming the file (and the token), nothing returned. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "test_tmp.h"
#include "test_util.h"

#define NAME "test_tokenizer"

/* A tokenizer file: the header words given, then n tokens (length byte, bytes) and `extra`
 * stray bytes; lens[i] may differ from strlen(pieces[i]) to write a bad length. */
static void write_tokenizer(const char *file, uint32_t magic, uint32_t version, uint32_t vocab,
                            uint32_t eot, const char *const *pieces, const unsigned *lens,
                            int n, int extra) {
    FILE *f = fopen(test_tmp_path(file), "wb");
    CHECK(f != NULL);
    if (!f) return;
    uint32_t header[256] = {magic, version, vocab, eot};
    fwrite(header, sizeof header, 1, f);
    for (int i = 0; i < n; i++) {
        unsigned char len = (unsigned char)lens[i];
        fwrite(&len, 1, 1, f);
        fwrite(pieces[i], 1, strlen(pieces[i]), f);
    }
    for (int i = 0; i < extra; i++) fputc('x', f);
    fclose(f);
}

/* Token i's bytes are want[i]. */
static void check_piece(const amp_tokenizer *t, int32_t id, const char *want) {
    const char *bytes = NULL;
    size_t len = 0;
    CHECK_OK(amp_tokenizer_decode(t, id, &bytes, &len));
    CHECK_MSG(bytes && len == strlen(want) && memcmp(bytes, want, len) == 0,
              "token %d: got %zu bytes, want '%s'", id, len, want);
}

static void test_version_2(void) {
    /* "€" is e2 82 ac: split over tokens 2 and 3, as GPT-2's byte-level BPE may split it. */
    const char *pieces[] = {"a", " the", "\xe2\x82", "\xac", "<|endoftext|>"};
    unsigned lens[] = {1, 4, 2, 1, 13};
    write_tokenizer("v2.bin", 20240328, 2, 5, 4, pieces, lens, 5, 0);
    amp_tokenizer *t = NULL;
    CHECK_OK(amp_tokenizer_open(test_tmp_path("v2.bin"), &t));
    if (!t) return;
    CHECK(amp_tokenizer_vocab_size(t) == 5 && amp_tokenizer_eot(t) == 4);
    for (int i = 0; i < 5; i++) check_piece(t, i, pieces[i]);
    const char *bytes = NULL;
    size_t len = 0;
    CHECK_FAILS(amp_tokenizer_decode(t, 5, &bytes, &len), AMP_ERR_INVALID_ARG,
                "id 5 is outside the vocabulary of 5");
    CHECK_FAILS(amp_tokenizer_decode(t, -1, &bytes, &len), AMP_ERR_INVALID_ARG, "id -1");
    CHECK_FAILS(amp_tokenizer_decode(t, 0, NULL, &len), AMP_ERR_INVALID_ARG, "bytes");
    amp_tokenizer_free(t);
    amp_tokenizer_free(NULL);
    CHECK(amp_tokenizer_vocab_size(NULL) == 0 && amp_tokenizer_eot(NULL) == -1);
}

/* Version 1, GPT-2's 50257 tokens: token i is its decimal digits, the last "<|endoftext|>". */
static void test_version_1(void) {
    enum { V = 50257 };
    static char text[V][16];
    static const char *pieces[V];
    static unsigned lens[V];
    for (int i = 0; i < V; i++) {
        snprintf(text[i], sizeof text[i], i == V - 1 ? "<|endoftext|>" : "%d", i);
        pieces[i] = text[i], lens[i] = (unsigned)strlen(text[i]);
    }
    write_tokenizer("gpt2.bin", 20240328, 1, V, 0, pieces, lens, V, 0);
    amp_tokenizer *t = NULL;
    CHECK_OK(amp_tokenizer_open(test_tmp_path("gpt2.bin"), &t));
    if (!t) return;
    CHECK(amp_tokenizer_vocab_size(t) == V && amp_tokenizer_eot(t) == V - 1);
    check_piece(t, 0, "0");
    check_piece(t, 12345, "12345");
    check_piece(t, V - 1, "<|endoftext|>");
    amp_tokenizer_free(t);
    write_tokenizer("v1_small.bin", 20240328, 1, 3, 0, pieces, lens, 3, 0);
    CHECK_FAILS(amp_tokenizer_open(test_tmp_path("v1_small.bin"), &t), AMP_ERR_FORMAT,
                "is version 1 with 3 tokens; version 1 is GPT-2's tokenizer of 50257");
}

/* Each bad file is refused with `want` in the message and nothing returned. */
static void check_refused(const char *file, amp_status status, const char *want) {
    amp_tokenizer *t = (amp_tokenizer *)&t; /* not NULL: the call must clear it */
    CHECK_FAILS(amp_tokenizer_open(test_tmp_path(file), &t), status, want);
    CHECK_MSG(t == NULL, "%s: a tokenizer came back from a refused file", file);
    CHECK_MSG(strstr(amp_last_error(), file) != NULL, "the error does not name %s: %s", file,
              amp_last_error());
}

static void test_bad_files(void) {
    const char *pieces[] = {"a", "b", "c"};
    unsigned lens[] = {1, 1, 1};
    FILE *f = fopen(test_tmp_path("tiny.bin"), "wb");
    if (f) fputs("not a tokenizer", f), fclose(f);
    check_refused("tiny.bin", AMP_ERR_FORMAT, "less than the 1024-byte header");
    write_tokenizer("magic.bin", 20240520, 2, 3, 0, pieces, lens, 3, 0);
    check_refused("magic.bin", AMP_ERR_FORMAT, "has magic 20240520, not 20240328");
    write_tokenizer("version.bin", 20240328, 3, 3, 0, pieces, lens, 3, 0);
    check_refused("version.bin", AMP_ERR_FORMAT, "has version 3");
    write_tokenizer("empty.bin", 20240328, 2, 0, 0, pieces, lens, 0, 0);
    check_refused("empty.bin", AMP_ERR_FORMAT, "vocabulary of 0, outside [1, 65536]");
    write_tokenizer("huge.bin", 20240328, 2, 70000, 0, pieces, lens, 3, 0);
    check_refused("huge.bin", AMP_ERR_FORMAT, "vocabulary of 70000");
    write_tokenizer("eot.bin", 20240328, 2, 3, 3, pieces, lens, 3, 0);
    check_refused("eot.bin", AMP_ERR_FORMAT,
                  "the end-of-text token 3 is outside the vocabulary of 3");
    const char *holed[] = {"a", "", "c"};
    unsigned holed_lens[] = {1, 0, 1};
    write_tokenizer("zero.bin", 20240328, 2, 3, 0, holed, holed_lens, 3, 0);
    check_refused("zero.bin", AMP_ERR_FORMAT, "token 1 has length 0");
    write_tokenizer("short.bin", 20240328, 2, 4, 0, pieces, lens, 3, 0);
    check_refused("short.bin", AMP_ERR_FORMAT, "ends inside token 3 of 4: truncated");
    unsigned long_lens[] = {1, 1, 5}; /* the last token says 5 bytes, 1 follows */
    write_tokenizer("cut.bin", 20240328, 2, 3, 0, pieces, long_lens, 3, 0);
    check_refused("cut.bin", AMP_ERR_FORMAT, "ends inside token 2 of 3");
    write_tokenizer("trailing.bin", 20240328, 2, 3, 0, pieces, lens, 3, 7);
    check_refused("trailing.bin", AMP_ERR_FORMAT, "has 7 bytes after its 3 tokens");
    check_refused("absent.bin", AMP_ERR_IO, "cannot open");
    amp_tokenizer *t = NULL;
    CHECK_FAILS(amp_tokenizer_open(NULL, &t), AMP_ERR_INVALID_ARG, "path");
    CHECK_FAILS(amp_tokenizer_open(test_tmp_path("magic.bin"), NULL), AMP_ERR_INVALID_ARG, "out");
}

int main(void) {
    test_tmp_make("test_tokenizer");
    test_version_2();
    test_version_1();
    test_bad_files();
    test_tmp_remove();
    return test_summary(NAME);
}
