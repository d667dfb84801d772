/* The bad-index record's host side (bad_index.h): its memory, the copy back and the report. */
#include "kernels/cuda/bad_index.h"

#include <stdint.h>

#include "core/error.h"

#define WORDS_BYTES (AMP_BAD_WORDS * sizeof(unsigned long long))

cudaError_t amp_cuda_bad_index_create(amp_cuda_bad_index *r, cudaStream_t stream) {
    cudaError_t e = cudaMalloc((void **)&r->words, WORDS_BYTES);
    if (e == cudaSuccess) e = cudaHostAlloc((void **)&r->seen, WORDS_BYTES, cudaHostAllocDefault);
    if (e == cudaSuccess) e = cudaMemsetAsync(r->words, 0xff, WORDS_BYTES, stream);
    if (e == cudaSuccess)
        for (int w = 0; w < AMP_BAD_WORDS; w++) r->seen[w] = AMP_BAD_NONE;
    return e;
}

void amp_cuda_bad_index_free(amp_cuda_bad_index *r) {
    if (r->words) cudaFree(r->words);
    if (r->seen) cudaFreeHost(r->seen);
    r->words = r->seen = NULL;
}

cudaError_t amp_cuda_bad_index_fetch(const amp_cuda_bad_index *r, cudaStream_t stream) {
    return cudaMemcpyAsync(r->seen, r->words, WORDS_BYTES, cudaMemcpyDeviceToHost, stream);
}

long long amp_cuda_bad_index_where(const amp_cuda_bad_index *r, amp_cuda_bad_word w) {
    return (long long)(r->seen[w] >> 32);
}

int amp_cuda_bad_index_value(const amp_cuda_bad_index *r, amp_cuda_bad_word w) {
    return (int)(int32_t)(uint32_t)(r->seen[w] & 0xffffffffull);
}

amp_status amp_cuda_bad_index_clear(const amp_cuda_bad_index *r, cudaStream_t stream) {
    for (int i = 0; i < AMP_BAD_WORDS; i++) r->seen[i] = AMP_BAD_NONE;
    cudaError_t e = cudaMemsetAsync(r->words, 0xff, WORDS_BYTES, stream);
    if (e != cudaSuccess)
        return amp_fail(AMP_ERR_BACKEND, "clearing the bad-index record: %s (%s)",
                        cudaGetErrorString(e), cudaGetErrorName(e));
    return AMP_OK;
}

amp_status amp_cuda_bad_index_report(const amp_cuda_bad_index *r, cudaStream_t stream,
                                     const char *found_at) {
    int w = 0;
    while (w < AMP_BAD_WORDS && r->seen[w] == AMP_BAD_NONE) w++;
    if (w == AMP_BAD_WORDS) return AMP_OK;
    long long at = amp_cuda_bad_index_where(r, (amp_cuda_bad_word)w);
    int value = amp_cuda_bad_index_value(r, (amp_cuda_bad_word)w);
    AMP_TRY(amp_cuda_bad_index_clear(r, stream));
    /* Named as the user called them (the op's public name), not as the kernels are. */
    switch ((amp_cuda_bad_word)w) {
    case AMP_BAD_LABEL:
        return amp_fail(AMP_ERR_INVALID_ARG, "an earlier amp_cross_entropy had label %d in row %lld, "
                        "outside [0, classes) (found at %s)", value, at, found_at);
    case AMP_BAD_LABEL_BWD:
        return amp_fail(AMP_ERR_INVALID_ARG, "an earlier backward of cross_entropy had label %d in "
                        "row %lld, outside [0, classes); that row's gradient is NaN (found at %s)",
                        value, at, found_at);
    case AMP_BAD_EMBEDDING:
        return amp_fail(AMP_ERR_INVALID_ARG, "an earlier amp_embedding had id %d at position %lld, "
                        "outside [0, vocab); its output row is NaN (found at %s)", value, at,
                        found_at);
    case AMP_BAD_KV_LEN:
    default:
        return amp_fail(AMP_ERR_INVALID_ARG, "an earlier amp_scaled_dot_product_attention (or its "
                        "backward) had kv_len[%lld] = %d, outside [0, seq]; that batch's outputs "
                        "are NaN (found at %s)", at, value, found_at);
    }
}
