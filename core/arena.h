/* Step arena: a bump allocator for the tensors of one training step, released all at once.
 * Memory comes in chunks from an allocation function (host malloc, or the context's memory
 * ledger over its backend, core/mem_ledger.h, which needs the context: the _user form). After a
 * step that needed several chunks, reset() replaces them with one chunk the size of that step's
 * peak use (the old chunks are freed first: nothing in them is live after a reset), so the
 * steady-state step allocates nothing and holds no more than it uses. A block handed back
 * before the reset (give_back: a backward's gradient once its node is done) is handed out again
 * by the next allocations that fit in it, so the chunks hold what is live at once, not all that
 * the step ever made. */
#ifndef AMP_CORE_ARENA_H
#define AMP_CORE_ARENA_H

#include <stdbool.h>
#include <stddef.h>

#include "amp/status.h"

#define AMP_ARENA_ALIGN 64        /* cache line and AVX-512 vector */
#define AMP_ARENA_MIN_CHUNK (1u << 20)

typedef struct amp_arena_chunk {
    void *base;
    size_t size, used;
} amp_arena_chunk;

/* A block handed back for reuse until the reset. */
typedef struct amp_arena_spare {
    char *base;
    size_t size;
} amp_arena_spare;

typedef struct amp_arena {
    amp_status (*alloc)(size_t nbytes, void **out);
    void (*free)(void *p);
    /* Set instead of alloc and free by amp_arena_init_user: the same, given `user`. */
    amp_status (*alloc_user)(void *user, size_t nbytes, void **out);
    void (*free_user)(void *user, void *p);
    void *user;
    amp_arena_chunk *chunks;
    int n_chunks, cap_chunks, current;
    size_t in_use, peak;
    size_t step_peak; /* the largest in_use since the last reset */
    size_t min_chunk; /* 0: AMP_ARENA_MIN_CHUNK (small arenas set less) */
    amp_arena_spare *spares; /* handed back, adjacent ones merged; none after a reset */
    int n_spares, cap_spares;
} amp_arena;

/* A position in an arena: what was allocated before it stays when the arena is reset to it. */
typedef struct amp_arena_mark {
    int chunk;
    size_t used, in_use;
} amp_arena_mark;
/* The mark before the first allocation: reset_to it frees all, keeping the chunks. */
#define AMP_ARENA_START ((amp_arena_mark){0, 0, 0})

void amp_arena_init(amp_arena *a, amp_status (*alloc)(size_t, void **), void (*free_fn)(void *));
void amp_arena_init_user(amp_arena *a, amp_status (*alloc)(void *, size_t, void **),
                         void (*free_fn)(void *, void *), void *user);
/* Aligned memory for nbytes (>= 1), valid until reset: the smallest spare it fits in (the rest
 * of the spare stays one), else new memory. */
amp_status amp_arena_alloc(amp_arena *a, size_t nbytes, void **out);
/* Hands p (nbytes from amp_arena_alloc, nothing reads it any more) back for reuse until the next
 * reset or reset_to. in_use and peak count the chunks' extent, so they do not go down: what they
 * measure is what the chunks must hold. */
void amp_arena_give_back(amp_arena *a, void *p, size_t nbytes);
void amp_arena_reset(amp_arena *a);
/* The position of the next allocation; reset_to frees what came after it (the chunks stay). */
amp_arena_mark amp_arena_get_mark(const amp_arena *a);
void amp_arena_reset_to(amp_arena *a, amp_arena_mark m);
/* Whether p points into memory allocated at or after m. */
bool amp_arena_holds_since(const amp_arena *a, amp_arena_mark m, const void *p);
/* As reset, but every chunk goes back to the free function: the arena holds nothing and grows
 * again from its next allocation (peak, since creation, stays). */
void amp_arena_release(amp_arena *a);
void amp_arena_destroy(amp_arena *a);

#endif
