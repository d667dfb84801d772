/* The CPU backend with an alloc and a cast that fail on a chosen call (0: never), counting the
 * blocks it hands out and the blocks it is given back: for tests of all-or-nothing operations
 * (test_model.c, test_amp_gan.c). flaky_backend() is the table; set g_flaky before each try. */
#ifndef AMP_TESTS_FLAKY_BACKEND_H
#define AMP_TESTS_FLAKY_BACKEND_H

#include "core/backend.h"
#include "core/error.h"

typedef struct flaky_state {
    int alloc_calls, cast_calls, fail_alloc_at, fail_cast_at;
    int n_alloc, n_free;
} flaky_state;
static flaky_state g_flaky;

static inline amp_status flaky_alloc(amp_device_ctx *dev, size_t nbytes, void **out) {
    if (++g_flaky.alloc_calls == g_flaky.fail_alloc_at) {
        *out = NULL;
        return amp_fail(AMP_ERR_OOM, "flaky_alloc: call %d fails", g_flaky.alloc_calls);
    }
    amp_status s = amp_backend_cpu()->alloc(dev, nbytes, out);
    if (s == AMP_OK) g_flaky.n_alloc++;
    return s;
}

static inline void flaky_free(amp_device_ctx *dev, void *p) {
    if (p) g_flaky.n_free++;
    amp_backend_cpu()->free(dev, p);
}

static inline amp_status flaky_cast(amp_device_ctx *dev, void *dst, amp_dtype dst_dt,
                                    const void *src, amp_dtype src_dt, int64_t n) {
    if (++g_flaky.cast_calls == g_flaky.fail_cast_at)
        return amp_fail(AMP_ERR_BACKEND, "flaky_cast: call %d fails", g_flaky.cast_calls);
    return amp_backend_cpu()->k.cast(dev, dst, dst_dt, src, src_dt, n);
}

static inline amp_backend flaky_backend(void) {
    amp_backend b = *amp_backend_cpu();
    b.name = "flaky";
    b.alloc = flaky_alloc;
    b.free = flaky_free;
    b.k.cast = flaky_cast;
    return b;
}

#endif
