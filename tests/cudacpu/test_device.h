/* The device context the CUDA kernel files run in for the cudacpu tests, which build those files
 * without the rest of the backend (kernels/cuda/cuda_backend.c): amp_cuda_device() here is the
 * legacy default stream (so dev_buf's cudaMemcpy orders after the kernels), with the states of
 * the library files a test links in: the caching allocator (AMP_TEST_DEVICE_ALLOC, set by
 * tests/cudacpu/CMakeLists.txt when cuda_alloc.c is a source), the convolution's cuDNN state
 * (AMP_TEST_DEVICE_CONV, for conv.c) and the bad-index record (bad_index.c, linked by
 * every test). Include once per test
 * binary (it defines amp_cuda_device, and amp_cpu_device for the CPU kernels linked in). */
#ifndef AMP_TESTS_CUDACPU_TEST_DEVICE_H
#define AMP_TESTS_CUDACPU_TEST_DEVICE_H

#include "dev_buffer.h"
#include "kernels/cuda/cuda_backend.h"

static amp_device_ctx *test_device_make(void) {
    static amp_device_ctx dev = {};
    dev.stream = 0;
    dev_check(amp_cuda_bad_index_create(&dev.bad_index, 0), "the bad-index record",
              AMP_BAD_WORDS * sizeof(unsigned long long));
#ifdef AMP_TEST_DEVICE_ALLOC
    if (amp_cuda_alloc_state_create(&dev.alloc) != AMP_OK) exit(1);
#endif
#ifdef AMP_TEST_DEVICE_CONV
    if (amp_cuda_conv_state_create(&dev.conv) != AMP_OK) exit(1);
#endif
    return &dev;
}

extern "C" amp_device_ctx *amp_cuda_device(void) {
    static amp_device_ctx *dev = test_device_make();
    return dev;
}

/* The CPU kernels some tests link in take a context and never look into it (cpu_backend.c). */
extern "C" amp_device_ctx *amp_cpu_device(void) { return nullptr; }

#endif
