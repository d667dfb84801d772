/* amp_backend_cuda() and amp_backend_select_device() for builds without the CUDA toolkit; kernels/cuda defines the real one. */
#include "core/backend.h"
#include "core/error.h"

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
