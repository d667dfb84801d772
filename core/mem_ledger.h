/* The context's memory ledger (amp_ctx_memory_usage, include/amp/memory.h): every backend block
 * the library allocates for a context is made and released here, with the kind of thing it
 * holds, so the split by kind is exact at every moment and sums to what the context holds.
 *
 * Blocks are found again by pointer in an open-addressing table (linear probing, deletion by
 * backward shift, so no tombstones pile up across the steps of a long run), grown by doubling
 * before it is half full. A context has a few dozen long-lived blocks (model, optimizer, amp
 * layer) and the step arena's chunks; the hot path of a step allocates nothing here. A context is
 * used by one thread at a time (amp/tensor.h), so the table takes no lock; only the sum over
 * every context of a backend, which amp_ctx_memory_usage subtracts from the backend's own count,
 * is shared (atomic). */
#ifndef AMP_CORE_MEM_LEDGER_H
#define AMP_CORE_MEM_LEDGER_H

#include <stddef.h>

#include "amp/memory.h"

typedef struct amp_ledger_entry {
    void *ptr; /* NULL: an empty slot */
    size_t nbytes;
    amp_mem_kind kind;
} amp_ledger_entry;

typedef struct amp_mem_ledger {
    amp_ledger_entry *slots;
    size_t cap, n; /* cap: 0 or a power of two */
    amp_mem_usage now;
    amp_mem_usage peak; /* the split when now.total was highest since the last reset */
    size_t peak_outside; /* backend memory outside every ledger at that moment */
} amp_mem_ledger;

/* ctx's backend alloc of nbytes, recorded as kind. On failure nothing is allocated (an error from
 * the backend, or AMP_ERR_OOM when the table cannot grow). */
amp_status amp_ledger_alloc(amp_ctx *ctx, amp_mem_kind kind, size_t nbytes, void **out);
/* ctx's backend free of p, forgotten by the ledger. NULL is a no-op; a pointer the ledger does not
 * know (allocated from the backend directly) is still freed, and counted nowhere. */
void amp_ledger_free(amp_ctx *ctx, void *p);
/* The peak becomes the split of this moment (amp_ctx_memory_reset_peak). */
void amp_ledger_reset_peak(amp_ctx *ctx);
/* amp_ctx_free, after everything else was freed: drops the table. Blocks still recorded (a model
 * not freed before its context) leave the backend sum as memory outside every ledger. */
void amp_ledger_destroy(amp_ctx *ctx);

/* The step arena's chunk functions (amp_arena_init_user with user = the context): its chunks are
 * AMP_MEM_ACTIVATIONS. */
amp_status amp_ledger_arena_alloc(void *ctx, size_t nbytes, void **out);
void amp_ledger_arena_free(void *ctx, void *p);
/* The recomputation arena's (ctx->recompute_arena): AMP_MEM_RECOMPUTE; freed by the above. */
amp_status amp_ledger_recompute_alloc(void *ctx, size_t nbytes, void **out);

#endif
