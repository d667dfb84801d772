/* Whether the CPU backend's hand-vectorised AVX-512 kernels run (pool_2x2_avx512.c,
 * batchnorm_avx512.c, channel_blocks_avx512.c, memory.c's casts): on CPUs with AVX-512 F, BW
 * and VL, unless AMP_CPU_GENERIC is set in the environment, which keeps the generic loops that
 * other CPUs run (the tests run both on a CPU that has it); and the bf16 ones
 * (attention_bf16.c) where AVX512-BF16 is there too. Decided once per process. */
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

static int cpu_avx512_bf16_decide(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    return cpu_avx512_decide() && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

/* decide() once per process in *decided (-1 until then); every thread decides the same, so
 * relaxed atomics keep it race-free. */
static bool decided_once(int *decided, int (*decide)(void)) {
    int d = __atomic_load_n(decided, __ATOMIC_RELAXED);
    if (d < 0) {
        d = decide();
        __atomic_store_n(decided, d, __ATOMIC_RELAXED);
    }
    return d != 0;
}

bool amp_cpu_avx512_kernels(void) {
    static int decided = -1;
    return decided_once(&decided, cpu_avx512_decide);
}

bool amp_cpu_avx512_bf16_kernels(void) {
    static int decided = -1;
    return decided_once(&decided, cpu_avx512_bf16_decide);
}
