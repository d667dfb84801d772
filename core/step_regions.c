/* Release points within a step: memory follows what a user of PyTorch expects without counting
 * references. The step tensors made since the last release point form a region of the data
 * arena; a release point frees the region's data at once:
 *  - amp_backward (without retain_graph), when it returns: the graph it consumed, its saved
 *    activations, masks and statistics, its gradient temporaries, and whatever else was made
 *    since the last release point; the loss is kept (readable until the step ends);
 *  - amp_model_forward with gradients disabled and no graph pending, when it returns: its own
 *    intermediate tensors and what was made before it since the last release point; its output
 *    is carried (readable until the next release point, the next such forward: an evaluation
 *    loop holds one batch's logits at a time).
 * amp_tensor_keep keeps any other step tensor readable until the step ends (amp_zero_grad or
 * amp_ctx_reset_step). A tensor used after its region was released is refused with an error that
 * says so (amp_tensor_check_live): its struct stays until the step ends, its data does not.
 * Kept and carried data move into arenas of their own (kept_arena until the step ends,
 * carry_arenas[r & 1] for the tensors carried into region r), so the data arena is reset to the
 * region's start: a loop of micro-batches or evaluation batches reuses the same memory. */
#include <stdlib.h>

#include "core/ctx.h"
#include "core/error.h"
#include "core/mem_ledger.h"
#include "core/tensor_internal.h"
#include "core/grow.h"

/* Small: they hold losses, logits and what a user keeps, not activations. */
#define AMP_KEPT_MIN_CHUNK ((size_t)64 << 10)

void amp_ctx_regions_init(amp_ctx *ctx) {
    amp_arena_init_user(&ctx->kept_arena, amp_ledger_arena_alloc, amp_ledger_arena_free, ctx);
    ctx->kept_arena.min_chunk = AMP_KEPT_MIN_CHUNK;
    for (int k = 0; k < 2; k++) {
        amp_arena_init_user(&ctx->carry_arenas[k], amp_ledger_arena_alloc, amp_ledger_arena_free,
                            ctx);
        ctx->carry_arenas[k].min_chunk = AMP_KEPT_MIN_CHUNK;
    }
    amp_arena_init_user(&ctx->sink_arena, amp_ledger_arena_alloc, amp_ledger_arena_free, ctx);
    ctx->sink_arena.min_chunk = AMP_KEPT_MIN_CHUNK;
    amp_arena_init_user(&ctx->recompute_arena, amp_ledger_recompute_alloc, amp_ledger_arena_free,
                        ctx);
    ctx->region_mark = amp_arena_get_mark(&ctx->data_arena);
}

void amp_ctx_regions_destroy(amp_ctx *ctx) {
    amp_arena_destroy(&ctx->sink_arena);
    amp_arena_destroy(&ctx->recompute_arena);
    amp_arena_destroy(&ctx->kept_arena);
    amp_arena_destroy(&ctx->carry_arenas[0]);
    amp_arena_destroy(&ctx->carry_arenas[1]);
    free(ctx->kept);
    ctx->kept = NULL;
    ctx->n_kept = ctx->cap_kept = 0;
}

void amp_ctx_regions_step_end(amp_ctx *ctx) {
    amp_arena_reset(&ctx->sink_arena);
    ctx->n_open_sinks = 0;
    amp_arena_reset(&ctx->recompute_arena);
    amp_arena_reset(&ctx->kept_arena);
    amp_arena_reset(&ctx->carry_arenas[0]);
    amp_arena_reset(&ctx->carry_arenas[1]);
    ctx->n_kept = 0;
    ctx->region_gen++;
    ctx->region_mark = amp_arena_get_mark(&ctx->data_arena);
}

/* Whether t's data goes away at this release point: in the region of the data arena, or in a
 * carry arena (the one reset now, or the one reset at the next release). */
static bool amp_data_goes(const amp_ctx *ctx, const amp_tensor *t) {
    return amp_arena_holds_since(&ctx->data_arena, ctx->region_mark, t->data) ||
           amp_arena_holds_since(&ctx->carry_arenas[0], AMP_ARENA_START, t->data) ||
           amp_arena_holds_since(&ctx->carry_arenas[1], AMP_ARENA_START, t->data);
}

static amp_status amp_move_data(amp_tensor *t, amp_arena *to) {
    size_t nbytes = amp_tensor_nbytes(t);
    void *dst;
    AMP_TRY(amp_arena_alloc(to, nbytes, &dst));
    AMP_TRY(AMP_DEV(t->backend, copy, dst, t->data, nbytes));
    t->data = dst;
    return AMP_OK;
}

static amp_status amp_kept_add(amp_ctx *ctx, amp_tensor *t) {
    if (!(t->flags & AMP_TENSOR_STEP) || (t->flags & AMP_TENSOR_KEPT)) return AMP_OK;
    amp_tensor **k = amp_grow(ctx->kept, ctx->n_kept, &ctx->cap_kept, 16, sizeof *k);
    if (!k) return amp_fail(AMP_ERR_OOM, "amp_tensor_keep: out of memory");
    ctx->kept = k;
    ctx->kept[ctx->n_kept++] = t;
    t->flags |= AMP_TENSOR_KEPT;
    return AMP_OK;
}

amp_status amp_tensor_keep(amp_tensor *t) {
    AMP_TRY(amp_tensor_check_live(__func__, "t", t));
    return amp_kept_add(t->ctx, t);
}

amp_status amp_tensor_drop(amp_tensor *t) {
    AMP_TRY(amp_tensor_check_live(__func__, "t", t));
    if (!(t->flags & AMP_TENSOR_STEP))
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_tensor_drop: t is caller-owned (amp_tensor_create"
                        " or amp_tensor_from_host): free it with amp_tensor_free");
    if (t->flags & AMP_TENSOR_KEPT)
        return amp_fail(AMP_ERR_STATE, "amp_tensor_drop: t is kept (amp_tensor_keep) until the "
                        "step ends; keep or drop a tensor, not both");
    amp_tensor_step_drop(t);
    return AMP_OK;
}

void amp_tensor_step_drop(amp_tensor *t) {
    amp_ctx *ctx = t->ctx;
    t->flags |= AMP_TENSOR_DROPPED;
    /* Up the chain of views while each link is dropped and unread. Data goes back only when it is
     * a tensor's own, in the current region (not carried, not a kept cast's), and at most once. */
    while (t && (t->flags & AMP_TENSOR_DROPPED) && t->data_readers == 0) {
        if ((t->flags & AMP_TENSOR_ARENA_DATA) &&
            amp_arena_holds_since(&ctx->data_arena, ctx->region_mark, t->data)) {
            amp_arena_give_back(&ctx->data_arena, t->data, amp_tensor_nbytes(t));
            t->flags &= (uint16_t)~(AMP_TENSOR_ARENA_DATA | AMP_TENSOR_BW_TEMP);
        }
        amp_tensor *base = t->view_of;
        t->view_of = NULL; /* its one read of the base ends here */
        if (base && base->data_readers > 0) base->data_readers--;
        t = base;
    }
}

amp_status amp_ctx_release_region(amp_ctx *ctx, amp_tensor *keep, amp_tensor *carry) {
    if (keep) AMP_TRY(amp_kept_add(ctx, keep));
    /* The kept tensors' gradients stay with them (a loss's, an intermediate's). */
    for (int i = 0; i < ctx->n_kept; i++) {
        amp_tensor *g = ctx->kept[i]->grad;
        if (g && g->step_gen == ctx->step_gen) AMP_TRY(amp_kept_add(ctx, g));
    }
    for (int i = 0; i < ctx->n_kept; i++)
        if (amp_data_goes(ctx, ctx->kept[i])) AMP_TRY(amp_move_data(ctx->kept[i], &ctx->kept_arena));
    uint32_t next = ctx->region_gen + 1;
    amp_arena *carry_to = &ctx->carry_arenas[next & 1];
    amp_arena_reset(carry_to); /* what was carried into the region before last */
    if (carry && (carry->flags & AMP_TENSOR_STEP) && !(carry->flags & AMP_TENSOR_KEPT)) {
        if (amp_data_goes(ctx, carry)) AMP_TRY(amp_move_data(carry, carry_to));
        carry->region = next;
    }
    amp_arena_reset_to(&ctx->data_arena, ctx->region_mark);
    amp_arena_reset_to(&ctx->sink_arena, AMP_ARENA_START); /* none open across it */
    ctx->n_open_sinks = 0;
    ctx->region_gen = next;
    return AMP_OK;
}
