/* The CPU backend's table: the reference backend, always built. GEMM and convolution run through
 * oneDNN; the rest are OpenMP loops over kernels/math. f16 is storage only: every kernel widens to
 * f32, computes, and rounds back. */
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dnnl_util.h"

static amp_status amp_cpu_copy_host(void *dst, const void *src, size_t nbytes) {
    return amp_cpu_copy(dst, src, nbytes);
}

static const amp_backend amp_cpu_backend = {
    .name = "cpu",
    .device = AMP_DEVICE_CPU,
    .alloc = amp_cpu_alloc,
    .free = amp_cpu_free,
    .memory_stats = amp_cpu_memory_stats,
    .memory_reset_peak = amp_cpu_memory_reset_peak,
    .memory_trim = amp_dnnl_arenas_release,
    .system_allocs = amp_cpu_system_allocs,
    .memset_zero = amp_cpu_memset_zero,
    .copy = amp_cpu_copy,
    .copy_to_host = amp_cpu_copy_host,
    .copy_from_host = amp_cpu_copy_host,
    .sync = amp_cpu_sync,
    .upload_async = amp_cpu_upload_async,
    .mark = amp_cpu_mark,
    .event_free = amp_cpu_event_free,
    .k = {
#define AMP_KERNEL(name, category, flops, check, params, args) .name = amp_cpu_##name,
#include "core/backend_kernels.def"
#undef AMP_KERNEL
    },
};

const amp_backend *amp_backend_cpu(void) { return &amp_cpu_backend; }
