/* CPU backend: SwiGLU forward and backward (core/backend_kernels.def's swiglu_*), rows in
 * parallel over kernels/math/swiglu.h. */
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/load_store.h"
#include "kernels/math/swiglu.h"

amp_status amp_cpu_swiglu_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t rows, int64_t cols,
                              const void *a, const void *b, int64_t ld, void *y) {
    AMP_TRY(amp_backend_check_rows(__func__, dt, rows, cols, ld));
    if (rows * cols == 0) return AMP_OK;
    AMP_CHECK_ARG(a);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(y);
#pragma omp parallel for schedule(static) if (rows * cols >= AMP_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            amp_store_f32(y, dt, r * cols + c,
                          amp_swiglu_elem(amp_load_f32(a, dt, r * ld + c),
                                          amp_load_f32(b, dt, r * ld + c), dt));
    return AMP_OK;
}

amp_status amp_cpu_swiglu_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t rows, int64_t cols,
                              const void *a, const void *b, int64_t ld, const void *dy, void *da,
                              void *db) {
    AMP_TRY(amp_backend_check_rows(__func__, dt, rows, cols, ld));
    if (rows * cols == 0) return AMP_OK;
    AMP_CHECK_ARG(a);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(da);
    AMP_CHECK_ARG(db);
#pragma omp parallel for schedule(static) if (rows * cols >= AMP_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t at = r * ld + c;
            float ga, gb;
            amp_swiglu_elem_bwd(amp_load_f32(a, dt, at), amp_load_f32(b, dt, at),
                                amp_load_f32(dy, dt, r * cols + c), dt, &ga, &gb);
            amp_store_f32(da, dt, at, ga);
            amp_store_f32(db, dt, at, gb);
        }
    return AMP_OK;
}
