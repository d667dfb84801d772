/* The memory ledger (core/mem_ledger.h) and amp_ctx_memory_usage (amp/memory.h). */
#include "core/mem_ledger.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/ctx.h"
#include "core/error.h"

#define AMP_LEDGER_MIN_CAP 64

/* Bytes recorded by every live ledger, per device: what the backend's own count (memory_stats,
 * one per backend for the whole process) is compared with. */
static _Atomic size_t g_recorded[AMP_DEVICE_CUDA + 1];

static _Atomic size_t *amp_ledger_recorded(const amp_ctx *ctx) {
    unsigned d = (unsigned)ctx->backend->device;
    return &g_recorded[d <= AMP_DEVICE_CUDA ? d : 0];
}

/* Backend memory in use that no ledger recorded: the allocator's rounding and the backend's own
 * scratch. 0 when the backend does not count. */
static size_t amp_ledger_outside(const amp_ctx *ctx) {
    if (!ctx->backend->memory_stats) return 0;
    size_t in_use = 0, recorded = atomic_load(amp_ledger_recorded(ctx));
    ctx->backend->memory_stats(ctx->backend->dev, &in_use, NULL);
    return in_use > recorded ? in_use - recorded : 0;
}

/* Fibonacci hashing: backend pointers are 64-byte aligned, so their low bits say nothing; the
 * product's middle bits mix all of them. */
static size_t amp_ledger_home(const amp_mem_ledger *l, const void *p) {
    uint64_t h = (uint64_t)(uintptr_t)p * UINT64_C(0x9e3779b97f4a7c15);
    return (size_t)(h >> 24) & (l->cap - 1);
}

/* p's slot, or l->cap when p is not recorded. */
static size_t amp_ledger_find(const amp_mem_ledger *l, const void *p) {
    if (!l->cap) return 0;
    for (size_t i = amp_ledger_home(l, p);; i = (i + 1) & (l->cap - 1)) {
        if (l->slots[i].ptr == p) return i;
        if (!l->slots[i].ptr) return l->cap;
    }
}

static void amp_ledger_place(amp_mem_ledger *l, amp_ledger_entry e) {
    size_t i = amp_ledger_home(l, e.ptr);
    while (l->slots[i].ptr) i = (i + 1) & (l->cap - 1);
    l->slots[i] = e;
}

static amp_status amp_ledger_grow(amp_mem_ledger *l) {
    size_t cap = l->cap ? 2 * l->cap : AMP_LEDGER_MIN_CAP;
    amp_ledger_entry *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return amp_fail(AMP_ERR_OOM, "memory ledger: cannot grow its table to %zu entries", cap);
    amp_ledger_entry *old = l->slots;
    size_t old_cap = l->cap;
    l->slots = slots;
    l->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].ptr) amp_ledger_place(l, old[i]);
    free(old);
    return AMP_OK;
}

/* Empties slot i and moves later entries of its probe run back into the hole (Knuth's deletion
 * for linear probing): an entry moves unless its home lies cyclically in (hole, its slot]. */
static void amp_ledger_remove(amp_mem_ledger *l, size_t hole) {
    size_t mask = l->cap - 1;
    for (size_t j = (hole + 1) & mask; l->slots[j].ptr; j = (j + 1) & mask) {
        size_t home = amp_ledger_home(l, l->slots[j].ptr);
        bool stays = hole <= j ? home > hole && home <= j : home > hole || home <= j;
        if (stays) continue;
        l->slots[hole] = l->slots[j];
        hole = j;
    }
    l->slots[hole] = (amp_ledger_entry){0};
    l->n--;
}

static void amp_ledger_forget(amp_ctx *ctx, size_t i) {
    amp_mem_ledger *l = &ctx->ledger;
    const amp_ledger_entry *e = &l->slots[i];
    l->now.bytes[e->kind] -= e->nbytes;
    l->now.total -= e->nbytes;
    atomic_fetch_sub(amp_ledger_recorded(ctx), e->nbytes);
    amp_ledger_remove(l, i);
}

amp_status amp_ledger_alloc(amp_ctx *ctx, amp_mem_kind kind, size_t nbytes, void **out) {
    *out = NULL;
    amp_mem_ledger *l = &ctx->ledger;
    if ((unsigned)kind >= AMP_MEM_N_KINDS)
        return amp_fail(AMP_ERR_INVALID_ARG, "memory ledger: unknown kind %d", (int)kind);
    if (2 * (l->n + 1) > l->cap) AMP_TRY(amp_ledger_grow(l)); /* before: nothing to undo */
    AMP_TRY(ctx->backend->alloc(ctx->backend->dev, nbytes, out));
    /* The same address recorded still: a block freed behind the ledger's back (straight to the
     * backend) and handed out again. Its old record is dropped, not counted twice. */
    size_t stale = amp_ledger_find(l, *out);
    if (stale < l->cap) amp_ledger_forget(ctx, stale);
    amp_ledger_place(l, (amp_ledger_entry){.ptr = *out, .nbytes = nbytes, .kind = kind});
    l->n++;
    l->now.bytes[kind] += nbytes;
    l->now.total += nbytes;
    atomic_fetch_add(amp_ledger_recorded(ctx), nbytes);
    if (l->now.total > l->peak.total) {
        l->peak = l->now;
        l->peak_outside = amp_ledger_outside(ctx);
    }
    return AMP_OK;
}

void amp_ledger_free(amp_ctx *ctx, void *p) {
    if (!p) return;
    size_t i = amp_ledger_find(&ctx->ledger, p);
    if (i < ctx->ledger.cap) amp_ledger_forget(ctx, i);
    ctx->backend->free(ctx->backend->dev, p);
}

void amp_ledger_reset_peak(amp_ctx *ctx) {
    ctx->ledger.peak = ctx->ledger.now;
    ctx->ledger.peak_outside = amp_ledger_outside(ctx);
}

void amp_ledger_destroy(amp_ctx *ctx) {
    atomic_fetch_sub(amp_ledger_recorded(ctx), ctx->ledger.now.total);
    free(ctx->ledger.slots);
    ctx->ledger = (amp_mem_ledger){0};
}

amp_status amp_ledger_arena_alloc(void *ctx, size_t nbytes, void **out) {
    return amp_ledger_alloc(ctx, AMP_MEM_ACTIVATIONS, nbytes, out);
}

void amp_ledger_arena_free(void *ctx, void *p) { amp_ledger_free(ctx, p); }

amp_status amp_ledger_recompute_alloc(void *ctx, size_t nbytes, void **out) {
    return amp_ledger_alloc(ctx, AMP_MEM_RECOMPUTE, nbytes, out);
}

/* ---- public ---- */

const char *amp_mem_kind_name(amp_mem_kind k) {
    static const char *const names[AMP_MEM_N_KINDS] = {
        [AMP_MEM_PARAMS] = "params",           [AMP_MEM_GRADS] = "grads",
        [AMP_MEM_MASTERS] = "masters",         [AMP_MEM_OPTIM_STATE] = "optimizer",
        [AMP_MEM_ACTIVATIONS] = "activations", [AMP_MEM_WORKSPACE] = "workspace",
        [AMP_MEM_OTHER] = "other",             [AMP_MEM_RECOMPUTE] = "recompute",
    };
    return (unsigned)k < AMP_MEM_N_KINDS ? names[k] : "unknown";
}

static void amp_usage_add_outside(amp_mem_usage *u, size_t outside) {
    u->bytes[AMP_MEM_WORKSPACE] += outside;
    u->total += outside;
}

amp_status amp_ctx_memory_usage(const amp_ctx *ctx, amp_mem_usage *now, amp_mem_usage *at_peak) {
    AMP_CHECK_ARG(ctx);
    if (now) {
        *now = ctx->ledger.now;
        amp_usage_add_outside(now, amp_ledger_outside(ctx));
    }
    if (at_peak) {
        *at_peak = ctx->ledger.peak;
        amp_usage_add_outside(at_peak, ctx->ledger.peak_outside);
    }
    return AMP_OK;
}
