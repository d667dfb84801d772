/* e^x over an array in vector loops with amp_expf's bits (kernels/math/transcendental.h), for
 * the CPU kernels built per ISA (cpu_clones.h) whose exps dominate: softmax's and cross-entropy's
 * rows, GELU, sigmoid. */
#ifndef AMP_KERNELS_CPU_VECTOR_EXP_H
#define AMP_KERNELS_CPU_VECTOR_EXP_H

#include <stdint.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/exp_avx2.h"
#include "kernels/cpu/exp_avx512.h"
#include "kernels/math/transcendental.h"

/* amp_expf's lowest argument (below it e^x is 0 in f32), and where lower arguments are clamped:
 * amp_expf_core(-105) is 0 exactly (2^-151 rounds to 0), as amp_expf gives there. */
#define AMP_EXP_LOW -103.97208404541015625f
#define AMP_EXP_ZERO_ARG -105.0f

/* e[j] = amp_expf(v[j] - m) for j < n, the scalar function's bits, where each v[j] - m is a
 * number <= 88.72 or -inf, never NaN (the callers take rows or tiles with a NaN, or a max that
 * is not finite, the scalar way): the argument clamped into amp_expf_core's range, then its exp,
 * in two vector loops (one would not vectorise: GCC does not if-convert a select that feeds the
 * exp), or exp_avx512.c's where the AVX-512 kernels run, exp_avx2.c's at the avx2 level. e may
 * be v. */
AMP_CPU_CLONE_INLINE void amp_cpu_exp_shifted(const float *v, int64_t n, float m, float *e) {
    if (amp_cpu_avx512_kernels()) { /* the same bits in fewer instructions (exp_avx512.c) */
        amp_avx512_exp_shifted(v, n, m, e);
        return;
    }
    if (amp_cpu_avx2_exp_kernels()) { /* the same in eight lanes (exp_avx2.c) */
        amp_avx2_exp_shifted(v, n, m, e);
        return;
    }
    for (int64_t j = 0; j < n; j++) {
        float t = v[j] - m;
        e[j] = t >= AMP_EXP_LOW ? t : AMP_EXP_ZERO_ARG;
    }
    for (int64_t j = 0; j < n; j++) e[j] = amp_expf_core(e[j]);
}

#endif
