/* The exps and row sums of the CPU's row kernels in AVX-512 registers (exp_avx512.c), on CPUs where
 * amp_cpu_avx512_kernels() (cpu_backend.h): the bits of kernels/math/transcendental.h's
 * amp_expf_core and of kernels/math/lanes.h's 32-lane order, so that both backends still agree. Why
 * they are written by hand: bench/RESULTS.md, "softmax's exps in AVX-512 registers". */
#ifndef AMP_KERNELS_CPU_EXP_AVX512_H
#define AMP_KERNELS_CPU_EXP_AVX512_H

#include <stdbool.h>
#include <stdint.h>

/* e[j] = amp_expf(v[j] - m) for j < n, where every v[j] - m is <= 88.72 or -inf, never NaN
 * (vector_exp.h's amp_cpu_exp_shifted). e may be v. */
void amp_avx512_exp_shifted(const float *v, int64_t n, float m, float *e);

/* The 32 lanes' NaN-propagating max of v[0, n) combined as amp_lanes_combine(acc, 1) does. */
float amp_avx512_row_max(const float *v, int64_t n);

/* amp_avx512_exp_shifted(v, n, m, e), and the 32 lanes' sum of e combined as
 * amp_lanes_combine(acc, 0) does, in one pass. */
float amp_avx512_exp_sum(const float *v, int64_t n, float m, float *e);

/* The 32 lanes' sum of v[0, n) (squares false) or of (v[j] - c)^2, each square rounded before it
 * is added (squares true: LayerNorm's and RMSNorm's), combined as amp_lanes_combine(acc, 0)
 * does: the bits of kernels/math/layernorm.h's and lanes.h's loops, the combine in registers. */
float amp_avx512_row_sum(const float *v, int64_t n, float c, bool squares);

#endif
