/* Tensor lists for the multi-tensor optimizer entries' tests (test_optim_multi.c): per tensor a
 * gradient (f32/f16/bf16), f32 parameters (not at O3), a half copy (O2) or half parameters (O3),
 * and up to two f32 state arrays, each buffer followed by a guard that must come back untouched;
 * empty tensors get NULL pointers (the entries read nothing of them). */
#ifndef TESTS_UNIT_OPTIM_BANK_H
#define TESTS_UNIT_OPTIM_BANK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"
#include "test_data.h"

#define GUARD_BYTES 32
#define GUARD_BYTE 0xa5

enum { MODE_F32, MODE_O2, MODE_O3 }; /* f32 parameters; + half copy; half parameters only */

typedef struct bank {
    int64_t n;
    int64_t *numel;
    amp_dtype g_dt, h_dt;
    int mode, n_state;
    void **grad, **half;
    float **param, **s1, **s2;
} bank;

static void *guarded(size_t bytes, bool null_if_empty) {
    if (bytes == 0 && null_if_empty) return NULL;
    unsigned char *p = malloc(bytes + GUARD_BYTES);
    memset(p + bytes, GUARD_BYTE, GUARD_BYTES);
    return p;
}

/* The arrays of tensor i, with their bytes (NULL where the bank has none). */
static int bank_arrays(const bank *b, int64_t i, void *ptr[5], size_t bytes[5]) {
    size_t n = (size_t)b->numel[i];
    ptr[0] = b->grad[i], bytes[0] = n * test_dtype_size(b->g_dt);
    ptr[1] = b->param ? b->param[i] : NULL, bytes[1] = n * 4;
    ptr[2] = b->half ? b->half[i] : NULL, bytes[2] = n * 2;
    ptr[3] = b->s1 ? b->s1[i] : NULL, bytes[3] = n * 4;
    ptr[4] = b->s2 ? b->s2[i] : NULL, bytes[4] = n * 4;
    return 5;
}

/* Empty tensors get NULL pointers (allowed: the entries read nothing of them). */
static bank bank_make(int64_t n, const int64_t *numel, amp_dtype g_dt, int mode, amp_dtype h_dt,
                      int n_state, float grad_mag) {
    bank b = {.n = n, .g_dt = g_dt, .h_dt = mode == MODE_F32 ? AMP_F32 : h_dt, .mode = mode,
              .n_state = n_state};
    size_t m = n > 0 ? (size_t)n : 1;
    b.numel = malloc(m * sizeof *b.numel);
    memcpy(b.numel, numel, (size_t)n * sizeof *numel);
    b.grad = calloc(m, sizeof(void *));
    if (mode != MODE_O3) b.param = calloc(m, sizeof(float *));
    if (mode != MODE_F32) b.half = calloc(m, sizeof(void *));
    if (n_state >= 1) b.s1 = calloc(m, sizeof(float *));
    if (n_state >= 2) b.s2 = calloc(m, sizeof(float *));
    for (int64_t i = 0; i < n; i++) {
        int64_t k = numel[i];
        b.grad[i] = guarded((size_t)k * test_dtype_size(g_dt), true);
        for (int64_t j = 0; j < k; j++)
            test_store(b.grad[i], g_dt, j, (float)((2.0 * test_uniform() - 1.0) * grad_mag));
        if (b.param) b.param[i] = guarded((size_t)k * 4, true);
        if (b.half) b.half[i] = guarded((size_t)k * 2, true);
        for (int64_t j = 0; j < k; j++) {
            float p = (float)(2.0 * test_uniform() - 1.0);
            if (b.param) b.param[i][j] = p;
            if (b.half) test_store(b.half[i], h_dt, j, p);
        }
        if (b.s1) b.s1[i] = guarded((size_t)k * 4, true);
        if (b.s2) b.s2[i] = guarded((size_t)k * 4, true);
        for (int64_t j = 0; j < k; j++) {
            if (b.s1) b.s1[i][j] = (float)(0.2 * test_uniform() - 0.1);
            if (b.s2) b.s2[i][j] = (float)(0.01 * test_uniform());
        }
    }
    return b;
}

static bank bank_clone(const bank *a) {
    bank b = bank_make(a->n, a->numel, a->g_dt, a->mode, a->h_dt, a->n_state, 0.0f);
    for (int64_t i = 0; i < a->n; i++) {
        void *pa[5], *pb[5];
        size_t by[5];
        bank_arrays(a, i, pa, by);
        bank_arrays(&b, i, pb, by);
        for (int k = 0; k < 5; k++)
            if (pa[k]) memcpy(pb[k], pa[k], by[k] + GUARD_BYTES);
    }
    return b;
}

/* Every byte of every array equal, guards included. */
static bool bank_same(const bank *a, const bank *b) {
    for (int64_t i = 0; i < a->n; i++) {
        void *pa[5], *pb[5];
        size_t by[5];
        bank_arrays(a, i, pa, by);
        bank_arrays(b, i, pb, by);
        for (int k = 0; k < 5; k++)
            if (pa[k] && memcmp(pa[k], pb[k], by[k] + GUARD_BYTES) != 0) return false;
    }
    return true;
}

static bool bank_guards_ok(const bank *b) {
    for (int64_t i = 0; i < b->n; i++) {
        void *p[5];
        size_t by[5];
        bank_arrays(b, i, p, by);
        for (int k = 0; k < 5; k++)
            for (int g = 0; p[k] && g < GUARD_BYTES; g++)
                if (((unsigned char *)p[k])[by[k] + (size_t)g] != GUARD_BYTE) return false;
    }
    return true;
}

static void bank_free(bank *b) {
    for (int64_t i = 0; i < b->n; i++) {
        void *p[5];
        size_t by[5];
        bank_arrays(b, i, p, by);
        for (int k = 0; k < 5; k++) free(p[k]);
    }
    free(b->numel), free(b->grad), free(b->param), free(b->half), free(b->s1), free(b->s2);
}

static amp_opt_tensors bank_list(const bank *b) {
    return (amp_opt_tensors){.n = b->n, .numel = b->numel, .grad = b->grad, .grad_dtype = b->g_dt,
                             .param = b->param, .half = b->half, .half_dtype = b->h_dt,
                             .state1 = b->s1, .state2 = b->s2};
}

#endif
