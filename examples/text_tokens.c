/* amp-text-tokens: text files to byte-level token files for amp-train --model gpt.
 *   amp-text-tokens [--val-fraction F] OUTDIR FILE...
 * The files' bytes, concatenated in the order given, are the tokens (vocab 256); the first
 * 1 - F of them (F = 0.1 by default) go to OUTDIR/train.bin and the rest to OUTDIR/val.bin, in
 * llm.c's format (amp/data.h), so the validation text is the corpus's end, as nanoGPT's
 * character-level preparation splits it. OUTDIR is made with its parents (mkdir -p). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "amp/amp.h"

static int usage(void) {
    fprintf(stderr, "usage: amp-text-tokens [--val-fraction F] OUTDIR FILE...\n");
    return 2;
}

/* Makes dir and every missing parent (mkdir -p); 0, or -1 with errno set. */
static int make_dirs(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return errno = ENAMETOOLONG, -1;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(path, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* Appends the bytes of path to *ids (grown as needed). */
static int append_file(const char *path, uint16_t **ids, int64_t *n, int64_t *cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "amp-text-tokens: cannot open '%s': %s\n", path, strerror(errno));
        return -1;
    }
    unsigned char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (*n + (int64_t)got > *cap) {
            int64_t want = (*cap ? *cap * 2 : 1 << 20) + (int64_t)got;
            uint16_t *grown = realloc(*ids, (size_t)want * sizeof **ids);
            if (!grown) {
                fclose(f);
                fprintf(stderr, "amp-text-tokens: out of memory\n");
                return -1;
            }
            *ids = grown, *cap = want;
        }
        for (size_t i = 0; i < got; i++) (*ids)[(*n)++] = buf[i];
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) fprintf(stderr, "amp-text-tokens: cannot read '%s'\n", path);
    return bad ? -1 : 0;
}

int main(int argc, char **argv) {
    double val_fraction = 0.1;
    int a = 1;
    if (a + 1 < argc && !strcmp(argv[a], "--val-fraction")) {
        char *end;
        val_fraction = strtod(argv[a + 1], &end);
        if (*end || !(val_fraction > 0 && val_fraction < 1)) {
            fprintf(stderr, "amp-text-tokens: --val-fraction '%s' is not in (0, 1)\n", argv[a + 1]);
            return 2;
        }
        a += 2;
    }
    if (argc - a < 2) return usage();
    const char *out = argv[a++];
    if (make_dirs(out) != 0) {
        fprintf(stderr, "amp-text-tokens: cannot make '%s': %s\n", out, strerror(errno));
        return 1;
    }
    uint16_t *ids = NULL;
    int64_t n = 0, cap = 0;
    for (; a < argc; a++)
        if (append_file(argv[a], &ids, &n, &cap) != 0) return free(ids), 1;
    int64_t n_val = (int64_t)((double)n * val_fraction), n_train = n - n_val;
    if (n_val < 2 || n_train < 2) {
        fprintf(stderr, "amp-text-tokens: %lld bytes are too few to split\n", (long long)n);
        return free(ids), 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/train.bin", out);
    amp_status s = amp_tokens_write(path, ids, n_train);
    if (s == AMP_OK) {
        snprintf(path, sizeof path, "%s/val.bin", out);
        s = amp_tokens_write(path, ids + n_train, n_val);
    }
    free(ids);
    if (s != AMP_OK) {
        fprintf(stderr, "amp-text-tokens: %s\n", amp_last_error());
        return 1;
    }
    printf("amp-text-tokens: %lld bytes: %lld tokens in %s/train.bin, %lld in %s/val.bin "
           "(vocab 256)\n", (long long)n, (long long)n_train, out, (long long)n_val, out);
    return 0;
}
