/* Helpers of the CPU backend's multi-tensor entries (kernels/cpu/multi_tensor_apply.h). */
#include "kernels/cpu/multi_tensor_apply.h"

#include <stdlib.h>

amp_status amp_cpu_mt_table_alloc(const char *fn, int64_t n, size_t extra_bytes,
                                  amp_mt_tensor **table, void **extra) {
    /* The table's size is a multiple of 8 (an amp_mt_tensor holds int64 and pointers), so what
     * follows it is aligned for doubles. */
    static_assert(sizeof(amp_mt_tensor) % sizeof(double) == 0, "extra must stay aligned");
    size_t table_bytes = (size_t)n * sizeof(amp_mt_tensor);
    if (n < 1 || (uint64_t)n > SIZE_MAX / 2 / sizeof(amp_mt_tensor) ||
        extra_bytes > SIZE_MAX / 2 - table_bytes)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: %lld tensors", fn, (long long)n);
    char *p = malloc(table_bytes + extra_bytes);
    if (!p)
        return amp_fail(AMP_ERR_OOM, "%s: out of host memory for the plan of %lld tensors", fn,
                        (long long)n);
    *table = (amp_mt_tensor *)p;
    if (extra) *extra = p + table_bytes;
    return AMP_OK;
}

amp_status amp_cpu_mt_grad_scale(const char *fn, float desc_scale, const amp_step_scalars *scalars,
                                 float *out) {
    if (scalars && scalars->grad_scale) {
        float gs = *scalars->grad_scale;
        if (!(gs >= 0.0f) || isinf(gs))
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: *scalars->grad_scale = %g, want a finite "
                            "value >= 0", fn, (double)gs);
        *out = gs;
        return AMP_OK;
    }
    if (!(desc_scale >= 0.0f) || isinf(desc_scale))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: grad_scale = %g, want a finite value > 0 (0: "
                        "none)", fn, (double)desc_scale);
    *out = desc_scale == 0.0f ? 1.0f : desc_scale;
    return AMP_OK;
}

amp_status amp_cpu_mt_planner_init(const char *fn, amp_mt_planner *pl, int depth,
                                   const amp_dtype *dtypes, const amp_mt_tensor *table,
                                   int64_t n) {
    amp_status s = amp_mt_planner_init(pl, depth, dtypes, table, n, amp_mt_limits_apex(depth));
    return s == AMP_OK ? s : amp_fail_context(s, "%s", fn);
}
