/* A minimal test harness: CHECK records a failure with file:line and goes on; a test's main
 * ends with `return test_summary("name");`, which prints "N passed, N failed" and returns the
 * exit code ctest reads (0 pass, 1 fail). test_skip() returns 77, which ctest reports SKIPPED. */
#ifndef AMP_TEST_UTIL_H
#define AMP_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_n_pass, test_n_fail;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) test_n_pass++;                                                                   \
        else {                                                                                     \
            test_n_fail++;                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (cond) test_n_pass++;                                                                   \
        else {                                                                                     \
            test_n_fail++;                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* An amp call that must succeed; prints amp_last_error() when it does not. */
#define CHECK_OK(call)                                                                             \
    do {                                                                                           \
        amp_status check_ok_s_ = (call);                                                           \
        CHECK_MSG(check_ok_s_ == AMP_OK, "status %d: %s", (int)check_ok_s_, amp_last_error());     \
    } while (0)

/* An amp call that must fail with `status` and a message containing `needle`. */
#define CHECK_FAILS(call, status, needle)                                                          \
    do {                                                                                           \
        amp_status check_f_s_ = (call);                                                            \
        CHECK_MSG(check_f_s_ == (status) && strstr(amp_last_error(), (needle)) != NULL,            \
                  "got status %d message '%s', want %d containing '%s'", (int)check_f_s_,          \
                  amp_last_error(), (int)(status), (needle));                                      \
    } while (0)

static inline int test_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, test_n_pass, test_n_fail);
    return test_n_fail ? 1 : 0;
}

static inline int test_skip(const char *name, const char *why) {
    printf("%s: SKIPPED: %s\n", name, why);
    return 77;
}

#endif
