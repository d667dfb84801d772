/* Eight-lane masks for the CPU backend's hand-vectorised AVX2 kernels (exp_avx2.c): the tail of a
 * row read and written through vmaskmovps, which touches no masked-off element (no fault past
 * the row's end). x86-64 with GCC or Clang only; the functions are built for AVX2, FMA and F16C
 * (cpu_clones.h's AVX2 level), which the caller checks at run time (amp_cpu_level_get). */
#ifndef AMP_KERNELS_CPU_AVX2_LANES_H
#define AMP_KERNELS_CPU_AVX2_LANES_H

#include <immintrin.h>
#include <stdint.h>

#define AMP_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

/* The first n lanes' mask (all bits set in a lane taken: none for n <= 0, all eight for n >= 8),
 * as vmaskmovps and vblendvps read it. */
AMP_AVX2_TARGET static inline __m256i avx2_lanes(int64_t n) {
    int k = n <= 0 ? 0 : n >= 8 ? 8 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#endif
