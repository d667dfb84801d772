/* Runs a test body on every device that answers: the CPU, then CUDA where a device (or the CUDA
 * backend under ../shared/cudacpu) answers; a device that does not is named and skipped. */
#ifndef AMP_TESTS_TEST_DEVICES_H
#define AMP_TESTS_TEST_DEVICES_H

#include <stdio.h>

#include "amp/amp.h"

static inline void test_on_each_device(void (*body)(amp_device device)) {
    const amp_device devices[2] = {AMP_DEVICE_CPU, AMP_DEVICE_CUDA};
    for (int d = 0; d < 2; d++) {
        amp_ctx *probe = NULL;
        if (amp_ctx_create(&(amp_ctx_opts){.device = devices[d]}, &probe) != AMP_OK) {
            printf("%s: no device (%s), not run\n", d ? "CUDA" : "CPU", amp_last_error());
            continue;
        }
        amp_ctx_free(probe);
        printf("%s\n", d ? "CUDA" : "CPU");
        body(devices[d]);
    }
}

#endif
