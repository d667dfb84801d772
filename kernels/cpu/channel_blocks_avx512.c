/* Half NCHW activations widened straight into the f32 channel-blocked layouts oneDNN's
 * convolution kernels take (nChw16c, or channels-last with 16 channels), and f32 results in
 * those layouts rounded straight back to half NCHW: one pass each way instead of a widening pass
 * and a oneDNN reorder (oneDNN 2.6 has no f16 convolution on the CPU, and its f16 reorders are
 * its reference loop). Sixteen channels by sixteen positions are converted in registers and
 * transposed there (unpack, then 128-bit lane shuffles); positions past the last multiple of 16
 * are masked. Values are widened and rounded as core/half.h's conversions do (NaN payloads kept
 * on the way in, NaN as 0x7fff on the way out), so the bits are those of amp_cpu_cast followed by
 * a reorder. */
#include <stdbool.h>
#include <stdint.h>

#include "kernels/cpu/cpu_backend.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/avx512_lanes.h"

/* One block of 16 channels of one sample: src holds its 16 planes of hw elements each, dst gets
 * the 16 f32 channels of position p at dst + p * dst_hw. narrow_block is the way back. */
AMP_AVX512_TARGET static void widen_block(float *dst, int64_t dst_hw, const void *src, amp_dtype dt,
                                          int64_t hw) {
    for (int64_t p = 0; p < hw; p += 16) {
        int64_t n = hw - p < 16 ? hw - p : 16;
        __mmask16 m = avx512_lanes(n);
        __m512 r[16];
        for (int c = 0; c < 16; c++) r[c] = avx512_load16_exact(src, dt, c * hw + p, m);
        avx512_transpose16(r);
        for (int64_t i = 0; i < n; i++) _mm512_storeu_ps(dst + (p + i) * dst_hw, r[i]);
    }
}

AMP_AVX512_TARGET static void narrow_block(void *dst, amp_dtype dt, const float *src,
                                           int64_t src_hw, int64_t hw) {
    for (int64_t p = 0; p < hw; p += 16) {
        int64_t n = hw - p < 16 ? hw - p : 16;
        __mmask16 m = avx512_lanes(n);
        __m512 r[16];
        for (int i = 0; i < 16; i++)
            r[i] = i < n ? _mm512_loadu_ps(src + (p + i) * src_hw) : _mm512_setzero_ps();
        avx512_transpose16(r);
        for (int c = 0; c < 16; c++) avx512_store16(dst, dt, c * hw + p, m, r[c]);
    }
}

bool amp_cpu_c16_vectorised(amp_dtype dt, int64_t c) {
    return amp_cpu_avx512_kernels() && (dt == AMP_F16 || dt == AMP_BF16) && c > 0 && c % 16 == 0;
}

void amp_cpu_widen_to_c16(float *dst, const amp_c16_layout *l, const void *src, amp_dtype dt,
                          int64_t n, int64_t c, int64_t hw) {
    int64_t blocks = c / 16, esize = (int64_t)amp_dtype_size(dt);
#pragma omp parallel for schedule(static) if (n * c * hw >= AMP_CPU_PARALLEL_MIN)
    for (int64_t nb = 0; nb < n * blocks; nb++) {
        int64_t i = nb / blocks, b = nb % blocks;
        widen_block(dst + i * l->n + b * l->block, l->hw,
                    (const char *)src + ((i * c + b * 16) * hw) * esize, dt, hw);
    }
}

void amp_cpu_narrow_from_c16(void *dst, amp_dtype dt, const float *src, const amp_c16_layout *l,
                             int64_t n, int64_t c, int64_t hw) {
    int64_t blocks = c / 16, esize = (int64_t)amp_dtype_size(dt);
#pragma omp parallel for schedule(static) if (n * c * hw >= AMP_CPU_PARALLEL_MIN)
    for (int64_t nb = 0; nb < n * blocks; nb++) {
        int64_t i = nb / blocks, b = nb % blocks;
        narrow_block((char *)dst + ((i * c + b * 16) * hw) * esize, dt,
                     src + i * l->n + b * l->block, l->hw, hw);
    }
}

#else /* not x86-64 with GCC or Clang: the widening pass and oneDNN's reorder; never called */

bool amp_cpu_c16_vectorised(amp_dtype dt, int64_t c) {
    (void)dt, (void)c;
    return false;
}

void amp_cpu_widen_to_c16(float *dst, const amp_c16_layout *l, const void *src, amp_dtype dt,
                          int64_t n, int64_t c, int64_t hw) {
    (void)dst, (void)l, (void)src, (void)dt, (void)n, (void)c, (void)hw;
}

void amp_cpu_narrow_from_c16(void *dst, amp_dtype dt, const float *src, const amp_c16_layout *l,
                             int64_t n, int64_t c, int64_t hw) {
    (void)dst, (void)dt, (void)src, (void)l, (void)n, (void)c, (void)hw;
}
#endif
