/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
 * counter-based generator cuRAND and PyTorch use: random number i of a stream is a pure function
 * of (key, counter), so the CPU and CUDA backends draw the same dropout masks in any thread order. */
#ifndef AMP_CORE_PHILOX_H
#define AMP_CORE_PHILOX_H

#include <stdint.h>

#include "core/hd.h"

AMP_HD static inline void amp_philox4x32(uint64_t counter, uint64_t key, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Uniform in [0, 1) with 24 random bits: the word of element `index` of stream `key`. */
AMP_HD static inline float amp_philox_uniform(uint64_t key, uint64_t index) {
    uint32_t r[4];
    amp_philox4x32(index, key, r);
    return (float)(r[0] >> 8) * (1.0f / 16777216.0f);
}

#endif
