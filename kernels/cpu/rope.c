/* CPU backend: RoPE (core/backend_kernels.def's rope), one (batch, position) row of heads per
 * iteration, rows in parallel. The rotated heads go through kernels/math/rope.h's pair; the
 * others are copied bit for bit. */
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/load_store.h"
#include "kernels/math/rope.h"

amp_status amp_cpu_rope(amp_device_ctx *dev, const amp_rope_desc *d, const float *table,
                        const void *x, void *y) {
    AMP_TRY(amp_backend_check_rope(__func__, d));
    int64_t rows = d->batch * d->seq, D = d->head_dim, half = D / 2, row = d->heads * D;
    if (rows == 0 || row == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    if (d->rot_heads > 0) AMP_CHECK_ARG(table);
    size_t esize = amp_dtype_size(d->dt);
#pragma omp parallel for schedule(static) if (rows * row >= AMP_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = r % d->seq, base = r * row;
        const float *cs = table + (d->offset + t) * half * 2;
        for (int64_t h = 0; h < d->rot_heads; h++)
            for (int64_t i = 0; i < half; i++) {
                int64_t ia, ib;
                amp_rope_members(i, D, d->interleaved, &ia, &ib);
                ia += base + h * D, ib += base + h * D;
                float c = cs[2 * i], s = d->inverse ? -cs[2 * i + 1] : cs[2 * i + 1], ya, yb;
                amp_rope_pair(amp_load_f32(x, d->dt, ia), amp_load_f32(x, d->dt, ib), c, s, &ya,
                              &yb);
                amp_store_f32(y, d->dt, ia, ya);
                amp_store_f32(y, d->dt, ib, yb);
            }
        int64_t kept = (d->heads - d->rot_heads) * D, from = base + d->rot_heads * D;
        if (kept > 0 && x != y)
            memcpy((char *)y + (size_t)from * esize, (const char *)x + (size_t)from * esize,
                   (size_t)kept * esize);
    }
    return AMP_OK;
}
