/* The device side of the bad-index record (bad_index.h): what an op's kernel calls when it meets
 * an index it cannot use. */
#ifndef AMP_KERNELS_CUDA_BAD_INDEX_CUH
#define AMP_KERNELS_CUDA_BAD_INDEX_CUH

#include <stdint.h>

#include "kernels/cuda/bad_index.h"

/* Notes `value` at `position` in word w, keeping the lowest position (positions past 2^32 - 2
 * read as that: a record of where, not an index to trust). */
static __device__ inline void amp_bad_index_note(unsigned long long *words, amp_cuda_bad_word w,
                                                 int64_t position, int32_t value) {
    unsigned long long at = position < 0xfffffffell ? (unsigned long long)position : 0xfffffffeull;
    atomicMin(words + w, at << 32 | (unsigned long long)(uint32_t)value);
}

#endif
