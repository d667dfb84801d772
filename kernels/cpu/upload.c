/* The CPU backend's batch uploads: backend memory is host memory, so an upload is a copy at the
 * call and there is nothing to order; marks are not needed (NULL). */
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"

amp_status amp_cpu_upload_async(void *dst, const void *host, size_t nbytes, void *after) {
    (void)after;
    if (nbytes == 0) return AMP_OK;
    AMP_CHECK_ARG(dst);
    AMP_CHECK_ARG(host);
    memcpy(dst, host, nbytes);
    return AMP_OK;
}

amp_status amp_cpu_mark(void **event) {
    AMP_CHECK_ARG(event);
    *event = NULL;
    return AMP_OK;
}

void amp_cpu_event_free(void *event) { (void)event; }
