/* AMP_CPU_CLONED: a hot CPU loop built three times, for AVX-512, AVX2 and the baseline x86-64,
 * the one for the running level (core/cpu_info.h, capped by AMP_CPU_ISA) picked at each call.
 * The library builds for the baseline ISA so that one binary runs on every x86-64; without this
 * its loops run two float (or one double) lanes wide on CPUs with sixteen. The clones give the
 * same bits: the library builds with -ffp-contract=off (no fma where the source has none) and
 * the loops keep their written order of operations (their reductions run in explicit lanes), so
 * only the vector width differs. They are picked by the library's level rather than by GCC's
 * target_clones (an ifunc resolved at load time from the CPU alone), so that AMP_CPU_ISA=avx2
 * runs the AVX2 clones on a CPU with AVX-512, where they would otherwise go unseen.
 *
 * Written in place of a function's head, the body following:
 *     AMP_CPU_CLONED(static, void, ew_tile, (const ew_op *f, int64_t n), (f, n)) { ... }
 * storage is `static` or empty, type the return type, params the parameter list and args the
 * same names as arguments. The body becomes an always-inline function that each clone, built
 * for its target, inlines; the function itself calls the running level's clone. */
#ifndef AMP_KERNELS_CPU_CLONES_H
#define AMP_KERNELS_CPU_CLONES_H

#include "core/cpu_info.h"

/* A loop shared by cloned functions: inlined into each clone, so that it runs at the clone's
 * width. Left to itself GCC may keep one out-of-line copy, built for the baseline ISA (batch
 * norm's dx loop did: 2-4 lanes where its callers had 16). */
#if defined(__GNUC__)
#define AMP_CPU_CLONE_INLINE static inline __attribute__((always_inline))
#else
#define AMP_CPU_CLONE_INLINE static inline
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define AMP_CPU_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define AMP_CPU_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
/* GCC keeps `return f(...)` of a void f, as C++ does (C11 leaves it to the compiler). */
#define AMP_CPU_CLONED(storage, type, name, params, args)                                       \
    AMP_CPU_CLONE_INLINE type name##_body params;                                               \
    AMP_CPU_TARGET_AVX512 static type name##_avx512 params { return name##_body args; }          \
    AMP_CPU_TARGET_AVX2 static type name##_avx2 params { return name##_body args; }              \
    static type name##_base params { return name##_body args; }                                 \
    storage type name params {                                                                   \
        amp_cpu_level level_ = amp_cpu_level_get();                                             \
        if (level_ >= AMP_CPU_AVX512_CORE) return name##_avx512 args;                            \
        if (level_ >= AMP_CPU_AVX2) return name##_avx2 args;                                    \
        return name##_base args;                                                                 \
    }                                                                                            \
    AMP_CPU_CLONE_INLINE type name##_body params
#else
#define AMP_CPU_CLONED(storage, type, name, params, args) storage type name params
#endif

#endif
