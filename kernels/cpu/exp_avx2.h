/* The exps and row sums of the CPU's row kernels in AVX2 registers (exp_avx2.c), on CPUs at the
 * avx2 level without the AVX-512 kernels (an AVX2-only EPYC, or AMP_CPU_ISA=avx2): the bits of
 * kernels/math/transcendental.h's amp_expf_core and of kernels/math/lanes.h's 32-lane order, as
 * exp_avx512.h's functions give them, so that both backends still agree. The callers pick
 * exp_avx512.h's where amp_cpu_avx512_kernels(), these where amp_cpu_avx2_exp_kernels(), the
 * portable loops elsewhere. Why they are written by hand: bench/results/2026-12-02.md, "the row
 * kernels' exps in AVX2 registers". */
#ifndef AMP_KERNELS_CPU_EXP_AVX2_H
#define AMP_KERNELS_CPU_EXP_AVX2_H

#include <stdbool.h>
#include <stdint.h>

#include "core/cpu_info.h"

/* Whether these run: the level (core/cpu_info.h, capped by AMP_CPU_ISA) has AVX2, FMA and F16C.
 * Callers ask amp_cpu_avx512_kernels() first, which implies it. */
static inline bool amp_cpu_avx2_exp_kernels(void) { return amp_cpu_level_get() >= AMP_CPU_AVX2; }

/* e[j] = amp_expf(v[j] - m) for j < n, where every v[j] - m is <= 88.72 or -inf, never NaN
 * (vector_exp.h's amp_cpu_exp_shifted). e may be v. */
void amp_avx2_exp_shifted(const float *v, int64_t n, float m, float *e);

/* The 32 lanes' NaN-propagating max of v[0, n) combined as amp_lanes_combine(acc, 1) does. */
float amp_avx2_row_max(const float *v, int64_t n);

/* amp_avx2_exp_shifted(v, n, m, e), and the 32 lanes' sum of e combined as
 * amp_lanes_combine(acc, 0) does, in one pass. */
float amp_avx2_exp_sum(const float *v, int64_t n, float m, float *e);

/* The 32 lanes' sum of v[0, n) (squares false) or of (v[j] - c)^2, each square rounded before it
 * is added (squares true: LayerNorm's and RMSNorm's), combined as amp_lanes_combine(acc, 0)
 * does. */
float amp_avx2_row_sum(const float *v, int64_t n, float c, bool squares);

#endif
