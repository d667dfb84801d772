/* Whether the CPU backend's hand-vectorised AVX-512 kernels run (pool_2x2_avx512.c,
 * batchnorm_avx512.c, channel_blocks_avx512.c, memory.c's casts): on CPUs with AVX-512 F, BW and VL, unless AMP_CPU_GENERIC is set in the
 * environment, which keeps the generic loops that other CPUs run (the tests run both on a CPU
 * that has it). Decided once per process. */
#include <stdlib.h>

#include "kernels/cpu/cpu_backend.h"

static int cpu_avx512_decide(void) {
    if (getenv("AMP_CPU_GENERIC")) return 0;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

bool amp_cpu_avx512_kernels(void) {
    static int decided = -1; /* every thread decides the same; atomics keep it race-free */
    int d = __atomic_load_n(&decided, __ATOMIC_RELAXED);
    if (d < 0) {
        d = cpu_avx512_decide();
        __atomic_store_n(&decided, d, __ATOMIC_RELAXED);
    }
    return d != 0;
}
