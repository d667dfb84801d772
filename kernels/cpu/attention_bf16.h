/* The CPU attention's tile products in bf16 on CPUs with AVX512-BF16 (attention_bf16.c). */
#ifndef AMP_KERNELS_CPU_ATTENTION_BF16_H
#define AMP_KERNELS_CPU_ATTENTION_BF16_H

#include <stdbool.h>
#include <stdint.h>

/* C = alpha op(A) op(B) + beta C, dnnl_sgemm's arguments (row-major, 'N' or 'T', m, n, k >= 1),
 * with op(A) and op(B) rounded to bf16 and the products summed in f32, where
 * amp_cpu_avx512_bf16_kernels() (cpu_backend.h); false when the thread's scratch could not be
 * had, a size is below 1, or this build has no such kernel. A and B are f32, or bf16 storage
 * where a_half or b_half is set (read as it is: the same bits as its f32 widening rounded back). */
bool amp_cpu_attn_gemm_bf16(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha,
                            const void *a, bool a_half, int64_t lda, const void *b, bool b_half,
                            int64_t ldb, float beta, float *c, int64_t ldc);

#endif
