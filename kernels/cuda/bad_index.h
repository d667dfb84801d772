/* The device's bad-index record: one home for every CUDA op that meets an index it cannot use
 * in device memory (the host cannot see it without waiting). The op writes NaN where the bad
 * index would have read, notes the lowest position and its value in its word, and goes on; the
 * record is read back at every point where the host waits for the device anyway:
 *  - cross-entropy's label check (xent.cu: the one wait its forward makes);
 *  - every host read (amp_cuda_copy_to_host: a tensor's values, the scaler's state, the step's
 *    skipped flag, a gradient norm): the step's own synchronisation points are all of these;
 *  - amp_cuda_sync.
 * The first of them to see a bad entry fails naming the op that met it, the position and the
 * value, and clears the record: one report per bad call, as the CPU backend, which checks at
 * the call, gives one. The copy of the record queues on the context's stream before the wait
 * that the caller makes anyway, into pinned memory: no extra host synchronisation. */
#ifndef AMP_KERNELS_CUDA_BAD_INDEX_H
#define AMP_KERNELS_CUDA_BAD_INDEX_H

#include <cuda_runtime_api.h>

#include "amp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The record's words, one per op that writes it, in the order a report names them (a model's
 * forward meets them in this order). */
typedef enum amp_cuda_bad_word {
    AMP_BAD_EMBEDDING, /* embedding_fwd's ids: the output row is NaN */
    AMP_BAD_KV_LEN,    /* attn_fwd's or attn_bwd's kv_len: the batch's outputs are NaN */
    AMP_BAD_LABEL_BWD, /* xent_bwd's labels: the row's gradient is NaN */
    AMP_BAD_LABEL,     /* xent_fwd's check of its own labels: reported by that call */
    AMP_BAD_WORDS
} amp_cuda_bad_word;

/* A word with nothing noted. An entry is position << 32 | (uint32_t)value: the integer
 * atomicMin keeps the lowest position whatever the order (one position has one value). */
#define AMP_BAD_NONE 0xffffffffffffffffull

typedef struct amp_cuda_bad_index {
    unsigned long long *words; /* device memory, AMP_BAD_WORDS words */
    unsigned long long *seen;  /* pinned host memory: the last copy of words */
} amp_cuda_bad_index;

/* Allocates both halves and clears the record on `stream`; free takes NULL halves. */
cudaError_t amp_cuda_bad_index_create(amp_cuda_bad_index *r, cudaStream_t stream);
void amp_cuda_bad_index_free(amp_cuda_bad_index *r);
/* Queues the copy of the record into r->seen on `stream`; read it after the stream's wait. */
cudaError_t amp_cuda_bad_index_fetch(const amp_cuda_bad_index *r, cudaStream_t stream);
/* Clears both halves: the device's words on `stream`, the host copy at once. */
amp_status amp_cuda_bad_index_clear(const amp_cuda_bad_index *r, cudaStream_t stream);
/* After that wait: AMP_OK when every word is clear; else clears the record on `stream` and
 * fails with AMP_ERR_INVALID_ARG naming the first op in the words' order, its position and
 * value, and `found_at` (where the host saw it). */
amp_status amp_cuda_bad_index_report(const amp_cuda_bad_index *r, cudaStream_t stream,
                                     const char *found_at);
/* The position and value of one copied word (after fetch and the wait). */
long long amp_cuda_bad_index_where(const amp_cuda_bad_index *r, amp_cuda_bad_word w);
int amp_cuda_bad_index_value(const amp_cuda_bad_index *r, amp_cuda_bad_word w);

#ifdef __cplusplus
}
#endif

#endif
