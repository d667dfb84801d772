/* CPU backend: the embedding's gather (embedding_fwd) and its deterministic scatter-add
 * (embedding_bwd), core/backend_kernels.def's contracts. The backward splits the dims between
 * threads: each thread owns a block of columns of every row and adds the positions into it in
 * index order, the order the CUDA kernel's one thread per column keeps, so both backends give
 * the same bits without float atomics. */
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/load_store.h"

/* Columns per block of the backward: a cache line of f32 dw per row touched. */
#define EMB_COL_BLOCK 16

amp_status amp_cpu_embedding_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, int64_t dim,
                                 int64_t vocab, const int32_t *idx, const void *w, void *y) {
    AMP_TRY(amp_backend_check_embedding(__func__, dt, n, dim, vocab, idx));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(w);
    AMP_CHECK_ARG(y);
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= vocab)
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: idx[%lld] = %d is outside [0, %lld)",
                            __func__, (long long)i, idx[i], (long long)vocab);
    size_t row = (size_t)dim * amp_dtype_size(dt);
#pragma omp parallel for schedule(static) if (n * dim >= AMP_CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)y + (size_t)i * row, (const char *)w + (size_t)idx[i] * row, row);
    return AMP_OK;
}

amp_status amp_cpu_embedding_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, int64_t dim,
                                 int64_t vocab, const int32_t *idx, const void *dy, float *dw) {
    AMP_TRY(amp_backend_check_embedding(__func__, dt, n, dim, vocab, idx));
    AMP_CHECK_ARG(dw);
    memset(dw, 0, (size_t)(vocab * dim) * sizeof *dw);
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(dy);
    int64_t blocks = (dim + EMB_COL_BLOCK - 1) / EMB_COL_BLOCK;
#pragma omp parallel for schedule(static) if (n * dim >= AMP_CPU_PARALLEL_MIN)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t c0 = b * EMB_COL_BLOCK, c1 = c0 + EMB_COL_BLOCK < dim ? c0 + EMB_COL_BLOCK : dim;
        for (int64_t i = 0; i < n; i++) {
            if (idx[i] < 0 || idx[i] >= vocab) continue;
            float *out = dw + (int64_t)idx[i] * dim;
            for (int64_t c = c0; c < c1; c++) out[c] += amp_load_f32(dy, dt, i * dim + c);
        }
    }
    return AMP_OK;
}
