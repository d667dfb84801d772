/* The row loop of the CPU kernels over the last dim (LayerNorm, softmax): rows in parallel, each
 * given f32 room from the running thread's widening arena (kept from call to call,
 * kernels/cpu/dnnl_util.h), so a call allocates nothing in the steady state. */
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dnnl_util.h"

amp_status amp_cpu_each_row(const char *fn, int64_t rows, int64_t floats,
                            void (*row)(void *ctx, int64_t r, float *buf), void *ctx) {
    int failed = 0;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *buf = NULL;
        if (amp_dnnl_arena(AMP_DNNL_ARENA_WIDEN, (size_t)floats * sizeof *buf, (void **)&buf) !=
            AMP_OK) {
#pragma omp atomic write
            failed = 1;
            continue;
        }
        row(ctx, r, buf);
    }
    if (failed)
        return amp_fail(AMP_ERR_OOM, "%s: out of host memory for a row of %lld floats", fn,
                        (long long)floats);
    return AMP_OK;
}
