/* The table of O1's kept half copies of f32 parameters (core/cast_shadow.h). A copy whose
 * parameter goes (freed, or autocast ended) while the step's tape may still read it is orphaned
 * (src NULL) and freed when the step ends. */
#include "core/cast_shadow.h"

#include <stdlib.h>

#include "core/ctx.h"
#include "core/error.h"
#include "core/tensor_internal.h"
#include "core/grow.h"

amp_cast_shadow *amp_cast_shadow_find(amp_ctx *ctx, const amp_tensor *src, amp_dtype dt) {
    amp_autocast_state *ac = &ctx->autocast;
    for (int i = 0; src && i < ac->n_shadows; i++)
        if (ac->shadows[i].src == src && ac->shadows[i].dtype == dt) return &ac->shadows[i];
    return NULL;
}

amp_status amp_cast_shadow_add(amp_ctx *ctx, const amp_tensor *src, amp_dtype dt,
                               amp_cast_shadow **out) {
    *out = amp_cast_shadow_find(ctx, src, dt);
    amp_autocast_state *ac = &ctx->autocast;
    if (*out) return AMP_OK;
    amp_cast_shadow *t = amp_grow(ac->shadows, ac->n_shadows, &ac->cap_shadows, 64, sizeof *t);
    if (!t) return amp_fail(AMP_ERR_OOM, "autocast: out of host memory for %d kept casts",
                            2 * ac->cap_shadows);
    ac->shadows = t;
    void *data = NULL;
    AMP_TRY(amp_ledger_alloc(ctx, AMP_MEM_PARAMS, (size_t)src->numel * amp_dtype_size(dt), &data));
    ac->shadows[ac->n_shadows] = (amp_cast_shadow){.src = src, .data = data, .dtype = dt};
    *out = &ac->shadows[ac->n_shadows++];
    return AMP_OK;
}

bool amp_cast_shadow_in_use(const amp_ctx *ctx, const amp_cast_shadow *sh) {
    return sh->read_in == ctx->step_gen + 1u;
}

bool amp_cast_shadow_current(const amp_cast_shadow *sh) {
    return sh->src && sh->filled && sh->version == *sh->src->version;
}

void amp_cast_shadow_set_current(amp_cast_shadow *sh) {
    sh->filled = sh->src != NULL;
    if (sh->src) sh->version = *sh->src->version;
}

/* Entry i freed; the last entry takes its place. */
static void amp_cast_shadow_remove(amp_ctx *ctx, int i) {
    amp_autocast_state *ac = &ctx->autocast;
    amp_ledger_free(ctx, ac->shadows[i].data);
    ac->shadows[i] = ac->shadows[--ac->n_shadows];
}

/* Entry i freed now, or orphaned until the step ends when the step handed it out. */
static void amp_cast_shadow_drop(amp_ctx *ctx, int i, bool *removed) {
    amp_cast_shadow *sh = &ctx->autocast.shadows[i];
    *removed = !amp_cast_shadow_in_use(ctx, sh);
    if (*removed) {
        amp_cast_shadow_remove(ctx, i);
        return;
    }
    sh->src = NULL;
    sh->filled = false;
}

void amp_cast_shadow_forget(const amp_tensor *t) {
    if (!t || !t->ctx) return;
    amp_autocast_state *ac = &t->ctx->autocast;
    for (int i = 0; i < ac->n_shadows;) {
        bool removed = false;
        if (ac->shadows[i].src == t) amp_cast_shadow_drop(t->ctx, i, &removed);
        if (!removed) i++;
    }
}

void amp_cast_shadows_release(amp_ctx *ctx) {
    for (int i = 0; i < ctx->autocast.n_shadows;) {
        bool removed = false;
        if (ctx->autocast.shadows[i].src) amp_cast_shadow_drop(ctx, i, &removed);
        if (!removed) i++;
    }
}

void amp_cast_shadows_reap(amp_ctx *ctx) {
    amp_autocast_state *ac = &ctx->autocast;
    for (int i = 0; i < ac->n_shadows;) {
        if (ac->shadows[i].src) i++;
        else amp_cast_shadow_remove(ctx, i);
    }
}

void amp_cast_shadows_free(amp_ctx *ctx) {
    for (int i = 0; i < ctx->autocast.n_shadows; i++)
        amp_ledger_free(ctx, ctx->autocast.shadows[i].data);
    ctx->autocast.n_shadows = 0;
    free(ctx->autocast.shadows);
    free(ctx->autocast.cache);
    ctx->autocast.shadows = NULL;
    ctx->autocast.cache = NULL;
    ctx->autocast.cap_shadows = ctx->autocast.cap_cache = ctx->autocast.n_cache = 0;
}
