/* AMP_CPU_CLONES: a hot CPU loop built three times, for AVX-512, AVX2 and the baseline x86-64,
 * the one for this CPU picked at load time (GCC's target_clones, an ifunc). The library builds
 * for the baseline ISA so that one binary runs on every x86-64; without this its loops run two
 * float (or one double) lanes wide on CPUs with sixteen. The clones give the same bits: the
 * library builds with -ffp-contract=off (no fma where the source has none) and the loops keep
 * their written order of operations (their reductions run in explicit lanes), so only the
 * vector width differs. */
#ifndef AMP_KERNELS_CPU_CLONES_H
#define AMP_KERNELS_CPU_CLONES_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define AMP_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef AMP_CPU_CLONES
#define AMP_CPU_CLONES
#endif

/* A loop shared by cloned functions: inlined into each clone, so that it runs at the clone's
 * width. Left to itself GCC may keep one out-of-line copy, built for the baseline ISA (batch
 * norm's dx loop did: 2-4 lanes where its callers had 16). */
#if defined(__GNUC__)
#define AMP_CPU_CLONE_INLINE static inline __attribute__((always_inline))
#else
#define AMP_CPU_CLONE_INLINE static inline
#endif

#endif
