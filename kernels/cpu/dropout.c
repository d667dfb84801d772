/* CPU backend: inverted dropout forward (values and u8 mask) and backward.
 *
 * Element i is kept when philox(seed, offset + i) >= p (kernels/math/dropout.h), so the mask is
 * the same whatever the thread count and matches the CUDA backend's. Outputs are overwritten;
 * y may alias x and dx may alias dy. p = 0 copies x and keeps everything, as PyTorch's dropout
 * returns its input unchanged then. */
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/math/dropout.h"

/* Elements per tile: two f32 tiles of 4 KiB each. */
#define DROPOUT_TILE 1024

/* mask[i] = keep(seed, first + i). Philox's ten rounds of 32x32->64-bit multiplies dominate
 * dropout; built for AVX-512 and AVX2 as well (cpu_clones.h), where they run 8 or 4 lanes wide,
 * and for the baseline ISA. */
AMP_CPU_CLONED(static, void, dropout_mask,
               (uint8_t *mask, int64_t n, uint64_t seed, uint64_t first, float p),
               (mask, n, seed, first, p)) {
    for (int64_t i = 0; i < n; i++) mask[i] = amp_dropout_keep(seed, first + (uint64_t)i, p);
}

amp_status amp_cpu_dropout_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *x, float p,
                               uint64_t seed, uint64_t offset, void *y, uint8_t *mask) {
    AMP_TRY(amp_backend_check_dropout(__func__, dt, n, p));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    AMP_CHECK_ARG(mask);
    if (p == 0.0f) {
        memset(mask, 1, (size_t)n);
        return amp_cpu_copy(y, x, (size_t)n * amp_dtype_size(dt));
    }
    float scale = amp_dropout_scale(p);
    int64_t n_tiles = (n + DROPOUT_TILE - 1) / DROPOUT_TILE;
#pragma omp parallel for schedule(static) if (n >= AMP_CPU_PARALLEL_MIN)
    for (int64_t t = 0; t < n_tiles; t++) {
        float bx[DROPOUT_TILE], by[DROPOUT_TILE];
        int64_t i0 = t * DROPOUT_TILE, len = n - i0 < DROPOUT_TILE ? n - i0 : DROPOUT_TILE;
        uint8_t *m = mask + i0;
        dropout_mask(m, len, seed, offset + (uint64_t)i0, p);
        const float *xt = tile_in(x, dt, i0, len, bx);
        float *yt = tile_out(y, dt, i0, by);
        for (int64_t i = 0; i < len; i++) yt[i] = amp_dropout_apply(xt[i], m[i], scale);
        tile_out_store(y, dt, i0, len, yt);
    }
    return AMP_OK;
}

amp_status amp_cpu_dropout_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *dy,
                               const uint8_t *mask, float p, void *dx) {
    AMP_TRY(amp_backend_check_dropout(__func__, dt, n, p));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(mask);
    AMP_CHECK_ARG(dx);
    float scale = amp_dropout_scale(p);
    int64_t n_tiles = (n + DROPOUT_TILE - 1) / DROPOUT_TILE;
#pragma omp parallel for schedule(static) if (n >= AMP_CPU_PARALLEL_MIN)
    for (int64_t t = 0; t < n_tiles; t++) {
        float bg[DROPOUT_TILE], bo[DROPOUT_TILE];
        int64_t i0 = t * DROPOUT_TILE, len = n - i0 < DROPOUT_TILE ? n - i0 : DROPOUT_TILE;
        const float *g = tile_in(dy, dt, i0, len, bg);
        float *o = tile_out(dx, dt, i0, bo);
        for (int64_t i = 0; i < len; i++) o[i] = amp_dropout_apply(g[i], mask[i0 + i], scale);
        tile_out_store(dx, dt, i0, len, o);
    }
    return AMP_OK;
}
