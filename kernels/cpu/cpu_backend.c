/* The CPU backend's table: the reference backend, always built. GEMM and convolution run through
 * oneDNN; the rest are OpenMP loops over kernels/math. f16 is storage only: every kernel widens to
 * f32, computes, and rounds back. Also the public amp_ctx_create, which hands core the backends
 * (its comment says why it is here). */
#include "core/ctx.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dnnl_util.h"

/* The CPU's device context holds nothing: oneDNN's engine is the process's (dnnl_util.c), its
 * scratch is per thread, and host memory is one pool. So the table's `dev` is the address of a
 * marker, never looked into (amp_device_ctx stays incomplete on this side); the kernels take it
 * and ignore it, and the device entries below adapt the host functions the kernels' own files
 * share to the table's signatures. */
static char amp_cpu_context_marker;
#define AMP_CPU_DEV ((amp_device_ctx *)&amp_cpu_context_marker)

amp_device_ctx *amp_cpu_device(void) { return AMP_CPU_DEV; }

static amp_status cpu_alloc(amp_device_ctx *dev, size_t nbytes, void **out) {
    return amp_cpu_alloc(nbytes, out);
}
static void cpu_free(amp_device_ctx *dev, void *p) { amp_cpu_free(p); }
static void cpu_memory_stats(amp_device_ctx *dev, size_t *in_use, size_t *peak) {
    amp_cpu_memory_stats(in_use, peak);
}
static void cpu_memory_reset_peak(amp_device_ctx *dev) { amp_cpu_memory_reset_peak(); }
static void cpu_memory_trim(amp_device_ctx *dev) { amp_dnnl_arenas_release(); }
static uint64_t cpu_system_allocs(amp_device_ctx *dev) { return amp_cpu_system_allocs(); }
static amp_status cpu_memset_zero(amp_device_ctx *dev, void *p, size_t nbytes) {
    return amp_cpu_memset_zero(p, nbytes);
}
/* copy, copy_to_host and copy_from_host: host memory all three. */
static amp_status cpu_copy(amp_device_ctx *dev, void *dst, const void *src, size_t nbytes) {
    return amp_cpu_copy(dst, src, nbytes);
}
static amp_status cpu_sync(amp_device_ctx *dev) { return amp_cpu_sync(); }
static amp_status cpu_upload_async(amp_device_ctx *dev, void *dst, const void *host, size_t nbytes,
                                   void *after) {
    return amp_cpu_upload_async(dst, host, nbytes, after);
}
static amp_status cpu_mark(amp_device_ctx *dev, void **event) { return amp_cpu_mark(event); }
static void cpu_event_free(amp_device_ctx *dev, void *event) { amp_cpu_event_free(event); }

static const amp_backend amp_cpu_backend = {
        .name = "cpu",
        .device = AMP_DEVICE_CPU,
        .dev = AMP_CPU_DEV,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .memory_stats = cpu_memory_stats,
        .memory_reset_peak = cpu_memory_reset_peak,
        .memory_trim = cpu_memory_trim,
        .system_allocs = cpu_system_allocs,
        .memset_zero = cpu_memset_zero,
        .copy = cpu_copy,
        .copy_to_host = cpu_copy,
        .copy_from_host = cpu_copy,
        .sync = cpu_sync,
        .upload_async = cpu_upload_async,
        .mark = cpu_mark,
        .event_free = cpu_event_free,
        .k =
                {
#define AMP_KERNEL(name, category, flops, check, params, args) .name = amp_cpu_##name,
#include "core/backend_kernels.def"
#undef AMP_KERNEL
                },
};

const amp_backend *amp_backend_cpu(void) { return &amp_cpu_backend; }

/* The public amp_ctx_create (amp/tensor.h) lives here, above core, so that core, below kernels/,
 * makes the context without naming a backend (core/ctx.c calling amp_backend_cpu() would be a
 * link-level cycle under the include-level layering). It hands core the library's backends as a
 * constant table of getters (amp_backend_getters); the choice among them stays core's
 * (amp_backend_pick). Why a table handed down at each call rather than a registry that the
 * backends fill: a registry filled by constructor functions would be empty in a program linked
 * to libamp.a that names no symbol of the backends' files (the linker takes an archive member
 * only for a symbol it needs, and a constructor is not one), and weak references do not pull
 * archive members in either; a registry filled at run time would need an order and a lock
 * between threads making contexts. Here the reference goes the layering's way: every program
 * that makes a context calls this function, whose object file needs both getters, so the linker
 * brings the CPU and CUDA backends (or, built without CUDA, core's amp_backend_cuda that says
 * so) into libamp.a's programs as into libamp.so, with no state to set up. */
amp_status amp_ctx_create(const amp_ctx_opts *opts, amp_ctx **out) {
    static const amp_backend_getters backends = {.cpu = amp_backend_cpu,
                                                 .cuda = amp_backend_cuda};
    return amp_ctx_create_from(&backends, opts, out);
}
