/* A folder of a test's own for the files it writes: test_tmp_make("name") makes
 * $AMP_TEST_TMP/name.<pid> (/tmp without the variable), test_tmp_path names a file in it,
 * test_tmp_remove removes it with what it holds. One folder per process. */
#ifndef AMP_TEST_TMP_H
#define AMP_TEST_TMP_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"

static char test_tmp_dir[512];

static inline void test_tmp_make(const char *name) {
    const char *tmp = getenv("AMP_TEST_TMP");
    snprintf(test_tmp_dir, sizeof test_tmp_dir, "%s/%s.%d", tmp ? tmp : "/tmp", name,
             (int)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", test_tmp_dir);
    CHECK_MSG(system(cmd) == 0, "cannot make %s", test_tmp_dir);
}

/* The path of file in the folder (a static buffer: use it before the next call). */
static inline const char *test_tmp_path(const char *file) {
    static char p[640];
    snprintf(p, sizeof p, "%s/%s", test_tmp_dir, file);
    return p;
}

static inline void test_tmp_remove(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_tmp_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_tmp_dir);
}

#endif
