/* The row loop of the CPU kernels over the last dim (LayerNorm, softmax, cross-entropy): rows in
 * parallel, each given f32 room from the running thread's widening arena (kept from call to call,
 * kernels/cpu/dnnl_util.h), so a call allocates nothing in the steady state; and the row
 * reductions in a CUDA warp's order (kernels/math/lanes.h) that softmax and cross-entropy share. */
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/math/lanes.h"
#include "kernels/math/softmax.h"

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

void amp_cpu_row_max_sumexp(const float *v, int64_t n, float *m_out, float *s_out) {
    float acc[AMP_LANES];
    for (int l = 0; l < AMP_LANES; l++) acc[l] = -INFINITY;
    for (int64_t i = 0; i < n; i++) acc[i % AMP_LANES] = amp_lanes_max2(acc[i % AMP_LANES], v[i]);
    float m = amp_lanes_combine(acc, 1);
    for (int l = 0; l < AMP_LANES; l++) acc[l] = 0.0f;
    for (int64_t i = 0; i < n; i++) acc[i % AMP_LANES] += amp_softmax_exp(v[i], m);
    *m_out = m;
    *s_out = amp_lanes_combine(acc, 0);
}

float amp_cpu_row_sum(const float *v, int64_t n) {
    float acc[AMP_LANES] = {0};
    for (int64_t i = 0; i < n; i++) acc[i % AMP_LANES] += v[i];
    return amp_lanes_combine(acc, 0);
}
