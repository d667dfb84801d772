/* The per-epoch permutation. A counter-based generator makes epoch e's order computable without
 * replaying epochs 0..e-1, which is what resuming from a checkpoint needs. */
#include "data/sampler.h"

#include <assert.h>

#include "core/philox.h"

void amp_sampler_permutation(uint64_t seed, int64_t epoch, int64_t n, int64_t *perm) {
    assert(n >= 0 && n <= (int64_t)UINT32_MAX && epoch >= 0);
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        uint32_t r[4];
        amp_philox4x32((uint64_t)epoch << 32 | (uint64_t)i, seed, r);
        /* 64 random bits reduced mod (i + 1): the bias is below (i + 1) / 2^64. */
        uint64_t bits = (uint64_t)r[0] << 32 | r[1];
        int64_t j = (int64_t)(bits % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
