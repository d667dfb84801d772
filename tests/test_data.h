/* Test data shared by the kernel tests (C and C++): a seeded splitmix64 generator, tensors of
 * random values in f32, f16 or bf16 storage, plain element loads and stores through core/half.h
 * (the scalar conversions test_half.c checks against double references, independent of the
 * backends' vector casts), and the ulp distance between two floats. Each test seeds the generator
 * at the start of main, so its data is the same on every run. */
#ifndef AMP_TEST_DATA_H
#define AMP_TEST_DATA_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/tensor.h"
#include "core/half.h"

static uint64_t test_rng_state;

static inline void test_rng_seed(uint64_t seed) { test_rng_state = seed; }

/* The next 64 random bits (splitmix64, Steele et al. 2014). */
static inline uint64_t test_rng_next(void) {
    test_rng_state += 0x9e3779b97f4a7c15ull;
    uint64_t z = test_rng_state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1), 53 random bits. */
static inline double test_uniform(void) { return (double)(test_rng_next() >> 11) * 0x1p-53; }

/* Bytes per element of a float dtype. */
static inline size_t test_dtype_size(amp_dtype dt) { return dt == AMP_F32 ? 4 : 2; }

/* Element i of a float tensor, widened exactly. */
static inline float test_load(const void *p, amp_dtype dt, int64_t i) {
    if (dt == AMP_F16) return amp_f16_bits_to_f32(((const uint16_t *)p)[i]);
    if (dt == AMP_BF16) return amp_bf16_bits_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* Stores v into element i, rounded to nearest even for f16/bf16. */
static inline void test_store(void *p, amp_dtype dt, int64_t i, float v) {
    if (dt == AMP_F16) ((uint16_t *)p)[i] = amp_f32_to_f16_bits(v);
    else if (dt == AMP_BF16) ((uint16_t *)p)[i] = amp_f32_to_bf16_bits(v);
    else ((float *)p)[i] = v;
}

/* n values uniform in [lo, hi) (as f32, then rounded to dt), in malloc'd storage with one spare
 * byte, so that n = 0 gives a pointer too. */
static inline void *test_random_tensor(amp_dtype dt, int64_t n, double lo, double hi) {
    void *p = malloc((size_t)n * test_dtype_size(dt) + 1);
    for (int64_t i = 0; i < n; i++) test_store(p, dt, i, (float)(lo + (hi - lo) * test_uniform()));
    return p;
}

/* Distance in units in the last place between two finite floats of the same sign. */
static inline int64_t test_ulp_diff(float a, float b) {
    int64_t ia = (int32_t)amp_f32_bits(a), ib = (int32_t)amp_f32_bits(b);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return ia > ib ? ia - ib : ib - ia;
}

#endif
