/* Which sample comes where in an epoch: the seeded permutation and the distributed shard rule. */
#ifndef AMP_DATA_SAMPLER_H
#define AMP_DATA_SAMPLER_H

#include <stdint.h>

/* perm[0..n) = a permutation of 0..n-1 that depends only on (seed, epoch, n): Fisher-Yates
 * (Durstenfeld's version), swap i with j uniform in [0, i] for i = n-1 .. 1, j drawn from
 * Philox4x32-10 with key `seed` and counter (epoch << 32 | i). Needs n < 2^32; the orders repeat
 * after 2^32 epochs. */
void amp_sampler_permutation(uint64_t seed, int64_t epoch, int64_t n, int64_t *perm);

/* Samples each rank sees per epoch: ceil(n / world_size), as torch's DistributedSampler with
 * drop_last=False (the epoch's order padded by repeating its start). */
static inline int64_t amp_sampler_shard_size(int64_t n, int world_size) {
    return (n + world_size - 1) / world_size;
}

/* Position in the epoch's order of the rank's i-th sample (padding wraps to the start). */
static inline int64_t amp_sampler_shard_pos(int64_t n, int rank, int world_size, int64_t i) {
    return (rank + i * world_size) % n;
}

#endif
