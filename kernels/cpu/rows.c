/* The row loop of the CPU kernels over the last dim (LayerNorm, softmax, cross-entropy): rows in
 * parallel, each given f32 room from the running thread's widening arena (kept from call to call,
 * kernels/cpu/dnnl_util.h), so a call allocates nothing in the steady state; and the row
 * reductions in a CUDA warp's order (kernels/math/lanes.h) that softmax and cross-entropy share. */
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/exp_avx2.h"
#include "kernels/cpu/exp_avx512.h"
#include "kernels/cpu/vector_exp.h"
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

/* The 32 lanes' sum of e[0, n) (lane l: elements l, l + 32, ...). */
AMP_CPU_CLONE_INLINE void lanes_sum(const float *e, int64_t n, float *acc) {
    int64_t i = 0;
    for (; i + AMP_LANES <= n; i += AMP_LANES)
        for (int l = 0; l < AMP_LANES; l++) acc[l] += e[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += e[i];
}

/* The 32 lanes' NaN-propagating max of v[0, n). */
AMP_CPU_CLONE_INLINE float lanes_max(const float *v, int64_t n) {
    float acc[AMP_LANES];
    for (int l = 0; l < AMP_LANES; l++) acc[l] = -INFINITY;
    int64_t i = 0;
    for (; i + AMP_LANES <= n; i += AMP_LANES)
        for (int l = 0; l < AMP_LANES; l++) acc[l] = amp_lanes_max2(acc[l], v[i + l]);
    for (int l = 0; i < n; i++, l++) acc[l] = amp_lanes_max2(acc[l], v[i]);
    return amp_lanes_combine(acc, 1);
}

AMP_CPU_CLONED(, void, amp_cpu_row_max_sumexp, (const float *v, int64_t n, float *e, float *m_out,
               float *s_out),
               (v, n, e, m_out, s_out)) {
    /* exp_avx512.c, else exp_avx2.c: the same bits, fewer instructions */
    bool avx512 = amp_cpu_avx512_kernels(), avx2 = !avx512 && amp_cpu_avx2_exp_kernels();
    float m = avx512 ? amp_avx512_row_max(v, n) : avx2 ? amp_avx2_row_max(v, n) : lanes_max(v, n);
    float acc[AMP_LANES];
    *m_out = m;
    if (avx512 && isfinite(m)) {
        *s_out = amp_avx512_exp_sum(v, n, m, e);
        return;
    }
    if (avx2 && isfinite(m)) {
        *s_out = amp_avx2_exp_sum(v, n, m, e);
        return;
    }
    if (isfinite(m))
        amp_cpu_exp_shifted(v, n, m, e);
    else /* fully masked (0), a NaN in the row (m NaN) or an inf: the scalar function */
        for (int64_t j = 0; j < n; j++) e[j] = amp_softmax_exp(v[j], m);
    for (int l = 0; l < AMP_LANES; l++) acc[l] = 0.0f;
    lanes_sum(e, n, acc);
    *s_out = amp_lanes_combine(acc, 0);
}

AMP_CPU_CLONED(, float, amp_cpu_row_sum, (const float *v, int64_t n),
               (v, n)) {
    if (amp_cpu_avx512_kernels()) return amp_avx512_row_sum(v, n, 0.0f, false);
    if (amp_cpu_avx2_exp_kernels()) return amp_avx2_row_sum(v, n, 0.0f, false);
    float acc[AMP_LANES] = {0};
    lanes_sum(v, n, acc);
    return amp_lanes_combine(acc, 0);
}
