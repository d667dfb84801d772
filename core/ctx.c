/* Context: backend choice (CUDA when a device answers, else the CPU: core/backend_select.c),
 * arenas, tape, RNG. The public amp_ctx_create is kernels/cpu/cpu_backend.c's, which hands this
 * file the backends (core names none: see there). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu_info.h"
#include "core/ctx.h"
#include "core/env.h"
#include "core/error.h"
#include "core/grow.h"

static amp_status amp_host_alloc(size_t nbytes, void **out) {
    *out = aligned_alloc(AMP_ARENA_ALIGN, (nbytes + AMP_ARENA_ALIGN - 1) & ~(size_t)(AMP_ARENA_ALIGN - 1));
    return *out ? AMP_OK : amp_fail(AMP_ERR_OOM, "host allocation of %zu bytes failed", nbytes);
}

amp_status amp_ctx_create_from(const amp_backend_getters *backends, const amp_ctx_opts *opts,
                               amp_ctx **out) {
    if (!out) return amp_fail(AMP_ERR_INVALID_ARG, "amp_ctx_create: argument 'out' is NULL");
    *out = NULL;
    amp_ctx_opts o = opts ? *opts : (amp_ctx_opts){0};
    if (o.device != AMP_DEVICE_AUTO && o.device != AMP_DEVICE_CPU && o.device != AMP_DEVICE_CUDA)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_ctx_create: unknown device %d", (int)o.device);
    if (o.n_threads < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_ctx_create: n_threads %d < 0", o.n_threads);
    if (amp_cpu_isa_check() != AMP_OK) /* a misspelt cap would test another CPU than asked */
        return amp_fail_context(AMP_ERR_INVALID_ARG, "amp_ctx_create");
    const amp_backend *be = NULL;
    AMP_TRY(amp_backend_pick(backends, o.device, &be));
    amp_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return amp_fail(AMP_ERR_OOM, "amp_ctx_create: out of memory");
    ctx->backend = be;
    ctx->rng = (amp_rng_state){.seed = o.seed};
    ctx->grad_enabled = true;
    ctx->allow_tf32 = o.allow_tf32;
    ctx->allow_nondeterministic = o.allow_nondeterministic;
    ctx->autocast.half = AMP_F16;
    amp_arena_init(&ctx->host_arenas[0], amp_host_alloc, free);
    amp_arena_init(&ctx->host_arenas[1], amp_host_alloc, free);
    amp_arena_init_user(&ctx->data_arena, amp_ledger_arena_alloc, amp_ledger_arena_free, ctx);
    amp_ctx_regions_init(ctx);
    if (o.n_threads > 0) omp_set_num_threads(o.n_threads);
    if (amp_env_flag("AMP_TRACE")) amp_trace_enable(ctx, true);
    *out = ctx;
    return AMP_OK;
}

void amp_ctx_free(amp_ctx *ctx) {
    if (!ctx || ctx->released) return;
    ctx->released = true;
    if (ctx->n_holders == 0) amp_ctx_destroy(ctx);
}

void amp_ctx_destroy(amp_ctx *ctx) {
    if (ctx->amp_hooks) ctx->amp_hooks->free(ctx->amp);
    if (ctx->collective && ctx->collective->release) ctx->collective->release(ctx->collective_user);
    amp_cast_shadows_free(ctx);
    amp_arena_destroy(&ctx->host_arenas[0]);
    amp_arena_destroy(&ctx->host_arenas[1]);
    amp_arena_destroy(&ctx->data_arena);
    amp_ctx_regions_destroy(ctx);
    amp_ledger_destroy(ctx); /* last: the amp layer and the arena free through it */
    free(ctx->tape);
    free(ctx->listeners);
    free(ctx);
}

amp_device amp_ctx_device(const amp_ctx *ctx) {
    AMP_CHECK_ARG_OR(ctx, AMP_DEVICE_AUTO);
    return ctx->backend->device;
}

const char *amp_ctx_backend_name(const amp_ctx *ctx) {
    AMP_CHECK_ARG_OR(ctx, "none");
    return ctx->backend->name;
}

void amp_ctx_reset_step(amp_ctx *ctx) {
    if (!ctx) return;
    amp_ctx_tape_clear(ctx);
    ctx->autocast.n_cache = 0;
    amp_cast_shadows_reap(ctx);
    ctx->step_gen++;
    amp_arena_reset(&ctx->host_arenas[ctx->step_gen & 1]); /* the step before last's structs */
    amp_arena_reset(&ctx->data_arena);
    amp_ctx_regions_step_end(ctx);
}

size_t amp_ctx_arena_bytes(const amp_ctx *ctx, size_t *peak) {
    if (peak) *peak = 0;
    AMP_CHECK_ARG_OR(ctx, 0);
    const amp_arena *h = ctx->host_arenas;
    if (peak) *peak = h[0].peak + h[1].peak + ctx->data_arena.peak;
    return h[0].in_use + h[1].in_use + ctx->data_arena.in_use;
}

amp_status amp_ctx_step_alloc(amp_ctx *ctx, size_t nbytes, void **out) {
    AMP_TRY(amp_arena_alloc(&ctx->host_arenas[ctx->step_gen & 1], nbytes, out));
    memset(*out, 0, nbytes);
    return AMP_OK;
}

amp_status amp_ctx_tape_push(amp_ctx *ctx, struct amp_tape_node *node) {
    struct amp_tape_node **t = amp_grow(ctx->tape, ctx->n_tape, &ctx->cap_tape, 64, sizeof *t);
    if (!t) return amp_fail(AMP_ERR_OOM, "autograd tape: out of memory");
    ctx->tape = t;
    ctx->tape[ctx->n_tape++] = node;
    return AMP_OK;
}

void amp_ctx_tape_clear(amp_ctx *ctx) {
    ctx->n_tape = 0;
    ctx->tape_gen++;
    ctx->tape_lost_input = false;
}

amp_status amp_ctx_memory(const amp_ctx *ctx, size_t *in_use, size_t *peak) {
    AMP_CHECK_ARG(ctx);
    if (!ctx->backend->memory_stats)
        return amp_fail(AMP_ERR_UNSUPPORTED, "amp_ctx_memory: backend %s does not count its memory",
                        ctx->backend->name);
    ctx->backend->memory_stats(ctx->backend->dev, in_use, peak);
    return AMP_OK;
}

amp_status amp_ctx_system_allocs(const amp_ctx *ctx, uint64_t *n) {
    AMP_CHECK_ARG(ctx);
    AMP_CHECK_ARG(n);
    if (!ctx->backend->system_allocs)
        return amp_fail(AMP_ERR_UNSUPPORTED, "amp_ctx_system_allocs: backend %s does not count "
                        "its allocations", ctx->backend->name);
    *n = ctx->backend->system_allocs(ctx->backend->dev);
    return AMP_OK;
}

void amp_ctx_memory_reset_peak(amp_ctx *ctx) {
    if (!ctx) return;
    if (ctx->backend->memory_reset_peak) ctx->backend->memory_reset_peak(ctx->backend->dev);
    amp_ledger_reset_peak(ctx);
}

amp_status amp_ctx_memory_trim(amp_ctx *ctx) {
    AMP_CHECK_ARG(ctx);
    amp_ctx_reset_step(ctx);
    amp_arena_release(&ctx->data_arena);
    amp_arena_release(&ctx->kept_arena);
    amp_arena_release(&ctx->carry_arenas[0]);
    amp_arena_release(&ctx->carry_arenas[1]);
    amp_arena_release(&ctx->sink_arena);
    amp_arena_release(&ctx->recompute_arena);
    ctx->region_mark = amp_arena_get_mark(&ctx->data_arena);
    if (ctx->backend->memory_trim) ctx->backend->memory_trim(ctx->backend->dev);
    return AMP_OK;
}
