/* CPU backend: softmax cross-entropy and mean squared error, forward and backward.
 *
 * Both losses reduce to one backend scalar with the mean reduction. Cross-entropy works one row
 * per task (max, sum of exp in double, log-softmax written in f32 for backward), then sums the
 * rows' losses in row order. MSE sums chunks of AMP_CPU_REDUCE_CHUNK elements in double and adds
 * the chunk sums in index order. Either way the loss does not depend on the thread count.
 * Gradients are overwritten. A label outside [0, classes) is an error naming its row, checked
 * before anything is written. */
#include <math.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/math/mse.h"
#include "kernels/math/xent.h"

/* MSE chunk sums computed per parallel region: they live on the caller's stack (4 KiB). */
#define MSE_GROUP 512

static amp_status check_xent(const char *fn, amp_dtype dt, int64_t rows, int64_t classes,
                             const int32_t *labels) {
    AMP_TRY(amp_backend_check_xent(fn, dt, rows, classes, labels));
    for (int64_t r = 0; r < rows; r++)
        if (labels[r] < 0 || labels[r] >= classes)
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: label %d of row %lld is outside [0, %lld)",
                            fn, (int)labels[r], (long long)r, (long long)classes);
    return AMP_OK;
}

/* Writes the log-softmax of one row of logits (widened tile by tile). */
static void xent_row(amp_dtype dt, int64_t classes, const void *logits, int64_t r, float *ls) {
    float buf[AMP_CPU_REDUCE_CHUNK];
    int64_t base = r * classes;
    float max = -INFINITY;
    for (int64_t t0 = 0; t0 < classes; t0 += AMP_CPU_REDUCE_CHUNK) {
        int64_t len = classes - t0 < AMP_CPU_REDUCE_CHUNK ? classes - t0 : AMP_CPU_REDUCE_CHUNK;
        const float *x = tile_in(logits, dt, base + t0, len, buf);
        for (int64_t j = 0; j < len; j++) max = amp_xent_max(max, x[j]);
    }
    double sum = 0.0;
    for (int64_t t0 = 0; t0 < classes; t0 += AMP_CPU_REDUCE_CHUNK) {
        int64_t len = classes - t0 < AMP_CPU_REDUCE_CHUNK ? classes - t0 : AMP_CPU_REDUCE_CHUNK;
        const float *x = tile_in(logits, dt, base + t0, len, buf);
        for (int64_t j = 0; j < len; j++) sum += (double)amp_xent_exp(x[j], max);
    }
    float log_sum = (float)log(sum);
    for (int64_t t0 = 0; t0 < classes; t0 += AMP_CPU_REDUCE_CHUNK) {
        int64_t len = classes - t0 < AMP_CPU_REDUCE_CHUNK ? classes - t0 : AMP_CPU_REDUCE_CHUNK;
        const float *x = tile_in(logits, dt, base + t0, len, buf);
        float *out = ls + base + t0;
        for (int64_t j = 0; j < len; j++) out[j] = amp_xent_logsoftmax(x[j], max, log_sum);
    }
}

amp_status amp_cpu_xent_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t rows, int64_t classes,
                            const void *logits, const int32_t *labels, float *loss,
                            float *logsoftmax) {
    AMP_TRY(check_xent(__func__, dt, rows, classes, labels));
    AMP_CHECK_ARG(loss);
    if (rows > 0) {
        AMP_CHECK_ARG(logits);
        AMP_CHECK_ARG(logsoftmax);
    }
#pragma omp parallel for schedule(static) if (rows * classes >= AMP_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) xent_row(dt, classes, logits, r, logsoftmax);
    /* One term per row, added in row order: cheap next to the rows * classes exps. */
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++) total -= (double)logsoftmax[r * classes + labels[r]];
    *loss = (float)(total / (double)rows); /* 0 rows: NaN, as torch's mean over nothing */
    return AMP_OK;
}

amp_status amp_cpu_xent_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t rows, int64_t classes,
                            const float *logsoftmax, const int32_t *labels, const float *dloss,
                            void *dlogits) {
    AMP_TRY(check_xent(__func__, dt, rows, classes, labels));
    AMP_CHECK_ARG(dloss);
    if (rows == 0) return AMP_OK;
    AMP_CHECK_ARG(logsoftmax);
    AMP_CHECK_ARG(dlogits);
    float scale = *dloss / (float)rows;
#pragma omp parallel for schedule(static) if (rows * classes >= AMP_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        float buf[AMP_CPU_REDUCE_CHUNK];
        for (int64_t t0 = 0; t0 < classes; t0 += AMP_CPU_REDUCE_CHUNK) {
            int64_t len = classes - t0 < AMP_CPU_REDUCE_CHUNK ? classes - t0 : AMP_CPU_REDUCE_CHUNK;
            int64_t i0 = r * classes + t0, label = labels[r] - t0;
            float *g = tile_out(dlogits, dt, i0, buf);
            for (int64_t j = 0; j < len; j++)
                g[j] = amp_xent_grad(logsoftmax[i0 + j], j == label, scale);
            tile_out_store(dlogits, dt, i0, len, g);
        }
    }
    return AMP_OK;
}

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
