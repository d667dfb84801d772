/* Small tensors for the op tests: a leaf of smooth values, and the bits of a tensor as one hash
 * (tests that hold two computations to the same bits compare hashes of outputs and gradients). */
#ifndef AMP_TESTS_TEST_TENSORS_H
#define AMP_TESTS_TEST_TENSORS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "amp/amp.h"
#include "core/half.h"
#include "test_util.h"

/* A leaf of dt (f32, f16 or bf16) requiring grad, element i = sin(a (i + 1)) * scale + offset,
 * rounded to dt. */
static inline amp_tensor *test_sin_leaf(amp_ctx *ctx, amp_dtype dt, int ndim,
                                        const int64_t *shape, double a, double scale,
                                        double offset) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *f = malloc((size_t)n * sizeof *f);
    uint16_t *h = malloc((size_t)n * sizeof *h);
    if (!f || !h) abort();
    for (int64_t i = 0; i < n; i++) {
        f[i] = (float)(sin(a * (double)(i + 1)) * scale + offset);
        h[i] = dt == AMP_F16 ? amp_f32_to_f16_bits(f[i]) : amp_f32_to_bf16_bits(f[i]);
    }
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, dt, ndim, shape, dt == AMP_F32 ? (void *)f : (void *)h, &t));
    CHECK_OK(amp_tensor_set_requires_grad(t, true));
    free(f);
    free(h);
    return t;
}

/* FNV-1a of the tensor's bytes; 0 for NULL. */
static inline uint64_t test_tensor_hash(const amp_tensor *t) {
    if (!t) return 0;
    size_t n = (size_t)amp_tensor_numel(t) * amp_dtype_size(amp_tensor_dtype(t));
    unsigned char *b = malloc(n ? n : 1);
    if (!b) abort();
    CHECK_OK(amp_tensor_to_host(t, b, n));
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    free(b);
    return h;
}

#endif
