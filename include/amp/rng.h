/* The context's random number generator: Philox4x32-10, counter-based. Its whole state is a seed
 * and a counter, so it is saved and restored exactly (checkpoints), and the CPU and CUDA backends
 * draw the same numbers. Weight initialisation and dropout draw from it. */
#ifndef AMP_RNG_H
#define AMP_RNG_H

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_rng_state {
    uint64_t seed;
    uint64_t counter; /* numbers drawn so far */
} amp_rng_state;

amp_status amp_rng_get_state(const amp_ctx *ctx, amp_rng_state *out);
amp_status amp_rng_set_state(amp_ctx *ctx, const amp_rng_state *state);

#ifdef __cplusplus
}
#endif
#endif
