/* CPU backend: mean squared error, forward and backward (cross-entropy is xent.c).
 *
 * The loss reduces to one backend scalar: chunks of AMP_CPU_REDUCE_CHUNK elements summed in
 * double, the chunk sums added in index order, so it does not depend on the thread count.
 * Gradients are overwritten. */
#include <math.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/math/mse.h"

/* MSE chunk sums computed per parallel region: they live on the caller's stack (4 KiB). */
#define MSE_GROUP 512

amp_status amp_cpu_mse_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *a,
                           const void *b, float *loss) {
    AMP_TRY(amp_backend_check_mse(__func__, dt, n, a, b));
    AMP_CHECK_ARG(loss);
    int64_t n_chunks = (n + AMP_CPU_REDUCE_CHUNK - 1) / AMP_CPU_REDUCE_CHUNK;
    double total = 0.0;
    for (int64_t g0 = 0; g0 < n_chunks; g0 += MSE_GROUP) {
        int64_t gn = n_chunks - g0 < MSE_GROUP ? n_chunks - g0 : MSE_GROUP;
        double part[MSE_GROUP];
#pragma omp parallel for schedule(static) if (n >= AMP_CPU_PARALLEL_MIN)
        for (int64_t c = 0; c < gn; c++) {
            float ba[AMP_CPU_REDUCE_CHUNK], bb[AMP_CPU_REDUCE_CHUNK];
            int64_t i0 = (g0 + c) * AMP_CPU_REDUCE_CHUNK;
            int64_t len = n - i0 < AMP_CPU_REDUCE_CHUNK ? n - i0 : AMP_CPU_REDUCE_CHUNK;
            const float *x = tile_in(a, dt, i0, len, ba), *y = tile_in(b, dt, i0, len, bb);
            double lane[8] = {0};
            int64_t i = 0;
            for (; i + 8 <= len; i += 8)
                for (int j = 0; j < 8; j++) lane[j] += (double)amp_mse_sq(x[i + j], y[i + j]);
            for (; i < len; i++) lane[i & 7] += (double)amp_mse_sq(x[i], y[i]);
            part[c] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                      ((lane[4] + lane[5]) + (lane[6] + lane[7]));
        }
        for (int64_t c = 0; c < gn; c++) total += part[c];
    }
    *loss = (float)(total / (double)n); /* n = 0: NaN, as torch's mean over nothing */
    return AMP_OK;
}

amp_status amp_cpu_mse_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *a,
                           const void *b, const float *dloss, void *da) {
    AMP_TRY(amp_backend_check_mse(__func__, dt, n, a, b));
    AMP_CHECK_ARG(dloss);
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(da);
    float norm = (float)(2.0 / (double)n), g = *dloss;
    int64_t n_tiles = (n + AMP_CPU_REDUCE_CHUNK - 1) / AMP_CPU_REDUCE_CHUNK;
#pragma omp parallel for schedule(static) if (n >= AMP_CPU_PARALLEL_MIN)
    for (int64_t t = 0; t < n_tiles; t++) {
        float ba[AMP_CPU_REDUCE_CHUNK], bb[AMP_CPU_REDUCE_CHUNK];
        int64_t i0 = t * AMP_CPU_REDUCE_CHUNK;
        int64_t len = n - i0 < AMP_CPU_REDUCE_CHUNK ? n - i0 : AMP_CPU_REDUCE_CHUNK;
        const float *x = tile_in(a, dt, i0, len, ba), *y = tile_in(b, dt, i0, len, bb);
        /* da may alias a or b: each element is read before it is written. */
        float *o = tile_out(da, dt, i0, ba);
        for (int64_t i = 0; i < len; i++) o[i] = amp_mse_grad(x[i], y[i], norm, g);
        tile_out_store(da, dt, i0, len, o);
    }
    return AMP_OK;
}
