/* How a context's backend is picked (amp_backend_pick), and amp_backend_cuda() and
 * amp_backend_select_device() for builds without the CUDA toolkit (kernels/cuda defines the real
 * ones). core is below kernels/, so nothing here names a backend's table: the getters come from
 * above (amp_backend_getters, core/backend.h). */
#include "core/backend.h"
#include "core/error.h"
#include "core/log.h"

amp_status amp_backend_pick(const amp_backend_getters *from, amp_device want,
                            const amp_backend **out) {
    if (want == AMP_DEVICE_CPU) {
        *out = from->cpu();
        return AMP_OK;
    }
    const amp_backend *cuda = from->cuda();
    /* AUTO takes CUDA only when it has every entry, so that no op of any model can fail for want
     * of a kernel; CUDA asked for by name is given as it is (a missing entry then fails in the op
     * that needs it, naming it). */
    const char *missing = cuda ? amp_backend_missing_entry(cuda) : NULL;
    if (cuda && (want == AMP_DEVICE_CUDA || !missing)) {
        *out = cuda;
        return AMP_OK;
    }
    if (want == AMP_DEVICE_CUDA)
        return amp_fail_context(AMP_ERR_NO_DEVICE, "amp_ctx_create: device CUDA was asked for");
    if (cuda)
        amp_log_msg(AMP_LOG_INFO, "the CUDA backend has no %s entry yet; using the CPU backend",
                    missing);
    else
        amp_log_msg(AMP_LOG_INFO, "%s; using the CPU backend", amp_last_error());
    *out = from->cpu();
    return AMP_OK;
}

#ifndef AMP_HAVE_CUDA
const amp_backend *amp_backend_cuda(void) {
    amp_fail(AMP_ERR_NO_DEVICE, "no CUDA device: libamp was built without the CUDA backend");
    return NULL;
}

amp_status amp_backend_select_device(int local_rank) {
    (void)local_rank;
    return AMP_OK;
}
#endif
