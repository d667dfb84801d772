/* Host-side draws from an amp_rng_state (include/amp/rng.h). */
#ifndef AMP_CORE_RNG_H
#define AMP_CORE_RNG_H

#include "amp/rng.h"

/* Uniform in [lo, hi). */
float amp_rng_uniform(amp_rng_state *s, float lo, float hi);
/* Normal with the given mean and standard deviation: Box-Muller over two 32-bit numbers of one
 * Philox draw, in double, so a draw never meets log(0). */
float amp_rng_normal(amp_rng_state *s, float mean, float std);
/* Uniform integer in [0, n), n >= 1 (rejection sampling: no modulo bias). */
uint32_t amp_rng_below(amp_rng_state *s, uint32_t n);
/* Reserves n consecutive numbers (a dropout mask) and returns the first index. */
uint64_t amp_rng_reserve(amp_rng_state *s, uint64_t n);

#endif
