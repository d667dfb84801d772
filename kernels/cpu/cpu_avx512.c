/* Whether the CPU backend's hand-vectorised AVX-512 kernels run (pool_2x2_avx512.c,
 * batchnorm_avx512.c, channel_blocks_avx512.c, memory.c's casts, exp_avx512.c): at the
 * avx512_core level, AVX-512 F, BW, VL and DQ; and the bf16 ones (attention_bf16.c) at
 * avx512_core_bf16. The level is the CPU's, capped by AMP_CPU_ISA (core/cpu_info.h), so a CPU
 * that has them runs the loops of the CPUs that do not when asked (the tests run both). */
#include "core/cpu_info.h"
#include "kernels/cpu/cpu_backend.h"

bool amp_cpu_avx512_kernels(void) {
    return amp_cpu_level_get() >= AMP_CPU_AVX512_CORE;
}

bool amp_cpu_avx512_bf16_kernels(void) {
    return amp_cpu_level_get() >= AMP_CPU_AVX512_CORE_BF16;
}
