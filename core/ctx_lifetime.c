/* The lifetimes of a context and what is made on it, in any order of frees: a C user frees by
 * hand, and a PyTorch user expects no order at all (refcounts). Each public object made on a
 * context holds it (amp_ctx_hold) until its free (amp_ctx_drop); amp_ctx_free only marks the
 * context released, and the last drop destroys it. An object that holds another one (an optimizer
 * its model's parameters, DDP its model and optimizer) listens for that one's free and stops
 * using it: a later call on it is an error that says what was freed, never a use after free. */
#include <stdlib.h>

#include "core/ctx.h"
#include "core/error.h"
#include "core/grow.h"

void amp_ctx_hold(amp_ctx *ctx) { ctx->n_holders++; }

void amp_ctx_drop(amp_ctx *ctx) {
    if (--ctx->n_holders == 0 && ctx->released) amp_ctx_destroy(ctx);
}

amp_status amp_ctx_listen(amp_ctx *ctx, void *who, amp_forget_fn fn) {
    amp_ctx_listener *l = amp_grow(ctx->listeners, ctx->n_listeners, &ctx->cap_listeners, 8,
                                   sizeof *l);
    if (!l) return amp_fail(AMP_ERR_OOM, "amp_ctx_listen: out of memory");
    ctx->listeners = l;
    ctx->listeners[ctx->n_listeners++] = (amp_ctx_listener){who, fn};
    return AMP_OK;
}

void amp_ctx_unlisten(amp_ctx *ctx, void *who) {
    for (int i = 0; i < ctx->n_listeners;)
        if (ctx->listeners[i].who == who) ctx->listeners[i] = ctx->listeners[--ctx->n_listeners];
        else i++;
}

/* A listener only marks itself (amp_optimizer_hear, amp_ddp_hear): it never listens or unlistens
 * while it hears, so the list holds still during the walk. */
void amp_ctx_forget(amp_ctx *ctx, const void *freed) {
    for (int i = 0; i < ctx->n_listeners; i++) ctx->listeners[i].fn(ctx->listeners[i].who, freed);
}
