/* What CPU this is, for figures and checkpoints: its model name and the instruction-set features
 * that change libamp's numbers or speed (oneDNN's kernels and their k-splits depend on them). */
#ifndef AMP_CORE_CPU_INFO_H
#define AMP_CORE_CPU_INFO_H

/* "AMD EPYC", from /proc/cpuinfo's "model name" ("unknown" elsewhere). */
const char *amp_cpu_model(void);
/* The features of a fixed list present on this CPU, space-separated, in list order:
 * "avx2 fma f16c avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile" at most ("none" when none). */
const char *amp_cpu_isa(void);

#endif
