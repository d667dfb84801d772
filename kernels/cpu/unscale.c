/* CPU backend: the loss scaler's passes over gradients (core/backend.h states the contracts).
 *
 * unscale: out = grad * inv_scale in f32 with torch's non-finite test on the input
 * (kernels/math/unscale.h). Each chunk ORs its own flag and OpenMP combines them (reduction), so
 * no thread writes *found_inf inside the loop; the caller's flag is written once, after the loop,
 * and only when an inf/NaN was seen. A flag that is already 1 is never cleared: one flag zeroed
 * at the start of a step covers every tensor of the step, as torch's found_inf does.
 *
 * nonfinite (the piece function of nonfinite_multi, unscale_multi.c) is the same test without
 * the writes, on the stored bits: a half is inf/NaN exactly when its exponent field is all ones,
 * so it needs no widening.
 *
 * The lists' passes (unscale_multi, nonfinite_multi, sum_squares_multi) are unscale_multi.c. */
#include <math.h>
#include <stdint.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/unscale.h"

/* out[i] = unscaled in[i] for [0, n); returns 1 when an input was inf/NaN. in may equal out
 * (same index read before written). Two loops so that the test of inv_scale stays out of them. */
static uint32_t unscale_f32_range(const float *in, float inv_scale, float *out, int64_t n) {
    uint32_t bad = 0;
    if (inv_scale == 1.0f) {
        for (int64_t i = 0; i < n; i++) {
            float g = in[i];
            bad |= amp_unscale_nonfinite(g);
            out[i] = g;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float g = in[i];
            bad |= amp_unscale_nonfinite(g);
            out[i] = g * inv_scale;
        }
    }
    return bad;
}

uint32_t amp_cpu_unscale_piece(amp_dtype g_dt, const void *grad, float inv_scale, float *out,
                               int64_t len) {
    const float *in = grad;
    if (g_dt != AMP_F32) { /* widen into out (exact), then unscale there in place */
        (void)amp_cpu_convert(out, AMP_F32, grad, g_dt, len);
        in = out;
    }
    return unscale_f32_range(in, inv_scale, out, len);
}

amp_status amp_cpu_unscale(amp_device_ctx *dev, amp_dtype g_dt, int64_t n, const void *grad,
                           float inv_scale, float *out, float *found_inf) {
    AMP_TRY(amp_backend_check_unscale("amp_cpu_unscale", g_dt, n, grad, inv_scale, out, found_inf));
    if (n == 0) return AMP_OK;
    /* Chunks of AMP_CPU_REDUCE_CHUNK: a half chunk is widened into out and unscaled there while
     * it is still in L1 (16 KiB of f32). */
    int64_t n_chunks = (n + AMP_CPU_REDUCE_CHUNK - 1) / AMP_CPU_REDUCE_CHUNK;
    uint32_t bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= AMP_CPU_PARALLEL_MIN)
    for (int64_t c = 0; c < n_chunks; c++) {
        int64_t i0 = c * AMP_CPU_REDUCE_CHUNK;
        int64_t len = n - i0 < AMP_CPU_REDUCE_CHUNK ? n - i0 : AMP_CPU_REDUCE_CHUNK;
        const char *g = (const char *)grad + i0 * (int64_t)amp_dtype_size(g_dt);
        bad |= amp_cpu_unscale_piece(g_dt, g, inv_scale, out + i0, len);
    }
    if (bad) *found_inf = 1.0f;
    return AMP_OK;
}

/* 1 when one of the n elements is inf or NaN: an OR over the exponent test, which vectorises. */
static uint32_t nonfinite_f32_range(const uint32_t *x, int64_t n) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= (x[i] & 0x7f800000u) == 0x7f800000u;
    return bad;
}

static uint32_t nonfinite_half_range(const uint16_t *x, int64_t n, uint16_t exp_mask) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= (uint16_t)(x[i] & exp_mask) == exp_mask;
    return bad;
}

uint32_t amp_cpu_nonfinite_piece(amp_dtype dt, const void *x, int64_t len) {
    if (dt == AMP_F32) return nonfinite_f32_range(x, len);
    return nonfinite_half_range(x, len, dt == AMP_F16 ? 0x7c00u : 0x7f80u); /* f16: 5, bf16: 8 */
}
