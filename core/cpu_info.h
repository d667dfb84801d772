/* What CPU this is, for figures, checkpoints and the CPU backend's dispatch: its model name, the
 * instruction-set level its kernels may use, and the features of that level.
 *
 * The level is the CPU's own, lowered by AMP_CPU_ISA as oneDNN's is by ONEDNN_MAX_CPU_ISA, so that
 * one machine runs the code paths of the others of its kind: AMP_CPU_ISA=avx2 turns off every
 * AVX-512 path (ours and oneDNN's), =avx512_core turns off the bf16 and AMX ones, =sse41 leaves
 * only the portable loops. A cap above the CPU's level changes nothing. */
#ifndef AMP_CORE_CPU_INFO_H
#define AMP_CORE_CPU_INFO_H

#include "amp/status.h"

/* Each level has every feature of the ones below it, as oneDNN's ISA levels do. */
typedef enum amp_cpu_level {
    AMP_CPU_SSE41,            /* the baseline x86-64 build: the portable loops */
    AMP_CPU_AVX2,             /* AVX2, FMA and F16C (the 256-bit clones, F16C casts) */
    AMP_CPU_AVX512_CORE,      /* AVX-512 F, BW, VL and DQ (the hand-vectorised kernels) */
    AMP_CPU_AVX512_CORE_BF16, /* AVX512-BF16 (the attention's bf16 dot products) */
    AMP_CPU_AVX512_CORE_FP16, /* AVX512-FP16 (no kernel of ours; oneDNN's level beyond bf16) */
    AMP_CPU_AVX512_CORE_AMX,  /* AMX tiles (oneDNN's bf16 GEMMs) */
} amp_cpu_level;

/* "AMD EPYC", from /proc/cpuinfo's "model name" ("unknown" elsewhere). */
const char *amp_cpu_model(void);
/* The level the CPU backend runs at: the CPU's, capped by AMP_CPU_ISA when that names a level
 * (an unknown value caps nothing here; amp_cpu_isa_check refuses it). Read once. */
amp_cpu_level amp_cpu_level_get(void);
/* The level's name as AMP_CPU_ISA spells it: "sse41", "avx2", "avx512_core", ... */
const char *amp_cpu_level_name(amp_cpu_level level);
/* The features of the running level present on this CPU, space-separated, in list order:
 * "avx2 fma f16c avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile" at most ("none" when none).
 * Checkpoints record it: a resume on another level is not bit for bit. */
const char *amp_cpu_isa(void);
/* AMP_CPU_ISA as set ("" when unset), for figures that say what ran. */
const char *amp_cpu_isa_cap(void);
/* AMP_ERR_INVALID_ARG naming the variable, its value and the levels when AMP_CPU_ISA is set
 * to something that is not a level; AMP_OK otherwise. amp_ctx_create calls it. */
amp_status amp_cpu_isa_check(void);

#endif
