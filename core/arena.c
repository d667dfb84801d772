#include "core/arena.h"

#include <stdlib.h>

#include "core/error.h"
#include "core/grow.h"

void amp_arena_init(amp_arena *a, amp_status (*alloc)(size_t, void **), void (*free_fn)(void *)) {
    *a = (amp_arena){.alloc = alloc, .free = free_fn};
}

void amp_arena_init_user(amp_arena *a, amp_status (*alloc)(void *, size_t, void **),
                         void (*free_fn)(void *, void *), void *user) {
    *a = (amp_arena){.alloc_user = alloc, .free_user = free_fn, .user = user};
}

static amp_status amp_chunk_alloc(amp_arena *a, size_t size, void **base) {
    return a->alloc_user ? a->alloc_user(a->user, size, base) : a->alloc(size, base);
}

static void amp_chunk_free(amp_arena *a, void *base) {
    if (a->free_user) a->free_user(a->user, base);
    else a->free(base);
}

static size_t amp_align_up(size_t n) { return (n + AMP_ARENA_ALIGN - 1) & ~(size_t)(AMP_ARENA_ALIGN - 1); }

static amp_status amp_arena_add_chunk(amp_arena *a, size_t size) {
    amp_arena_chunk *c = amp_grow(a->chunks, a->n_chunks, &a->cap_chunks, 4, sizeof *c);
    if (!c) return amp_fail(AMP_ERR_OOM, "step arena: cannot grow the chunk list");
    a->chunks = c;
    void *base = NULL;
    amp_status s = amp_chunk_alloc(a, size, &base);
    if (s != AMP_OK) return amp_fail_context(s, "step arena: chunk of %zu bytes", size);
    a->chunks[a->n_chunks++] = (amp_arena_chunk){.base = base, .size = size};
    return AMP_OK;
}

/* The smallest spare of at least `need` bytes: its front is handed out, the rest stays. */
static bool amp_arena_take_spare(amp_arena *a, size_t need, void **out) {
    int best = -1;
    for (int i = 0; i < a->n_spares; i++)
        if (a->spares[i].size >= need && (best < 0 || a->spares[i].size < a->spares[best].size))
            best = i;
    if (best < 0) return false;
    amp_arena_spare *s = &a->spares[best];
    *out = s->base;
    if (s->size > need) {
        s->base += need;
        s->size -= need;
    } else {
        *s = a->spares[--a->n_spares];
    }
    return true;
}

void amp_arena_give_back(amp_arena *a, void *p, size_t nbytes) {
    amp_arena_spare b = {.base = p, .size = amp_align_up(nbytes ? nbytes : 1)};
    /* Merged with the spares just before and after it, so that freed neighbours serve a larger
     * block later. */
    for (int i = 0; i < a->n_spares;) {
        amp_arena_spare *s = &a->spares[i];
        if (s->base + s->size == b.base || b.base + b.size == s->base) {
            if (s->base < b.base) b.base = s->base;
            b.size += s->size;
            *s = a->spares[--a->n_spares];
            i = 0; /* the larger block may now touch one already passed */
            continue;
        }
        i++;
    }
    amp_arena_spare *grown = amp_grow(a->spares, a->n_spares, &a->cap_spares, 16, sizeof *grown);
    if (!grown) return; /* then the block is simply not reused before the reset */
    a->spares = grown;
    a->spares[a->n_spares++] = b;
}

amp_status amp_arena_alloc(amp_arena *a, size_t nbytes, void **out) {
    size_t need = amp_align_up(nbytes ? nbytes : 1);
    if (a->n_spares && amp_arena_take_spare(a, need, out)) return AMP_OK;
    while (a->current < a->n_chunks) {
        amp_arena_chunk *c = &a->chunks[a->current];
        if (c->size - c->used >= need) {
            *out = (char *)c->base + c->used;
            c->used += need;
            a->in_use += need;
            if (a->in_use > a->peak) a->peak = a->in_use;
            if (a->in_use > a->step_peak) a->step_peak = a->in_use;
            return AMP_OK;
        }
        a->current++;
    }
    size_t last = a->n_chunks ? a->chunks[a->n_chunks - 1].size : 0;
    size_t size = need > 2 * last ? need : 2 * last;
    size_t min_chunk = a->min_chunk ? a->min_chunk : AMP_ARENA_MIN_CHUNK;
    if (size < min_chunk) size = min_chunk;
    AMP_TRY(amp_arena_add_chunk(a, size));
    a->current = a->n_chunks - 1;
    return amp_arena_alloc(a, nbytes, out);
}

void amp_arena_reset(amp_arena *a) {
    if (a->n_chunks > 1) {
        /* Coalesce into one chunk of the step's peak: the doubling chunks sum to up to twice
         * that. Freed first (nothing is live), so the two never coexist; if the allocation fails
         * the arena simply starts empty and grows again. */
        for (int i = 0; i < a->n_chunks; i++) amp_chunk_free(a, a->chunks[i].base);
        a->n_chunks = 0;
        void *base = NULL;
        size_t min_chunk = a->min_chunk ? a->min_chunk : AMP_ARENA_MIN_CHUNK;
        size_t size = a->step_peak < min_chunk ? min_chunk : a->step_peak;
        if (amp_chunk_alloc(a, size, &base) == AMP_OK) {
            a->chunks[0] = (amp_arena_chunk){.base = base, .size = size};
            a->n_chunks = 1;
        }
    }
    for (int i = 0; i < a->n_chunks; i++) a->chunks[i].used = 0;
    a->current = 0;
    a->in_use = 0;
    a->step_peak = 0;
    a->n_spares = 0;
}

amp_arena_mark amp_arena_get_mark(const amp_arena *a) {
    if (a->current >= a->n_chunks) return (amp_arena_mark){a->n_chunks, 0, a->in_use};
    return (amp_arena_mark){a->current, a->chunks[a->current].used, a->in_use};
}

void amp_arena_reset_to(amp_arena *a, amp_arena_mark m) {
    for (int i = m.chunk; i < a->n_chunks; i++) a->chunks[i].used = i == m.chunk ? m.used : 0;
    a->current = m.chunk;
    a->in_use = m.in_use;
    a->n_spares = 0; /* a spare before the mark stays in use as far as the chunks are concerned */
}

bool amp_arena_holds_since(const amp_arena *a, amp_arena_mark m, const void *p) {
    const char *q = p;
    for (int i = m.chunk; i < a->n_chunks; i++) {
        const char *base = a->chunks[i].base;
        size_t from = i == m.chunk ? m.used : 0;
        if (q >= base + from && q < base + a->chunks[i].used) return true;
    }
    return false;
}

void amp_arena_release(amp_arena *a) {
    for (int i = 0; i < a->n_chunks; i++) amp_chunk_free(a, a->chunks[i].base);
    a->n_chunks = 0;
    a->current = 0;
    a->in_use = 0;
    a->step_peak = 0;
    a->n_spares = 0;
}

void amp_arena_destroy(amp_arena *a) {
    for (int i = 0; i < a->n_chunks; i++) amp_chunk_free(a, a->chunks[i].base);
    free(a->chunks);
    free(a->spares);
    *a = (amp_arena){0};
}
