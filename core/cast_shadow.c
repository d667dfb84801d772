/* The table of O1's kept half copies of f32 parameters (core/cast_shadow.h). A copy whose
 * parameter goes (freed, or autocast ended) while the step's tape may still read it is orphaned
 * (src NULL) and freed when the step ends. */
#include "core/cast_shadow.h"

#include "core/ctx.h"
#include "core/error.h"
#include "core/tensor_internal.h"

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
    if (*out || ac->n_shadows == AMP_CAST_SHADOW_MAX) return AMP_OK;
    void *data = NULL;
    AMP_TRY(amp_ledger_alloc(ctx, AMP_MEM_PARAMS, (size_t)src->numel * amp_dtype_size(dt), &data));
    ac->shadows[ac->n_shadows] = (amp_cast_shadow){.src = src, .data = data, .dtype = dt};
    *out = &ac->shadows[ac->n_shadows++];
    return AMP_OK;
}

bool amp_cast_shadow_in_use(const amp_ctx *ctx, const amp_cast_shadow *sh) {
    return sh->read_in == ctx->step_gen + 1u;
}

/* Whether a's and b's data overlap (a view of a parameter, a reshape of it). */
static bool amp_overlap(const amp_tensor *a, const amp_tensor *b) {
    const char *pa = a->data, *pb = b->data;
    return pa && pb && pa < pb + amp_tensor_nbytes(b) && pb < pa + amp_tensor_nbytes(a);
}

void amp_cast_shadow_stale(const amp_tensor *t) {
    if (!t || !t->ctx) return;
    amp_autocast_state *ac = &t->ctx->autocast;
    for (int i = 0; i < ac->n_shadows; i++)
        if (ac->shadows[i].src && (ac->shadows[i].src == t || amp_overlap(ac->shadows[i].src, t)))
            ac->shadows[i].current = false;
}

void amp_cast_shadows_stale_all(amp_ctx *ctx) {
    for (int i = 0; ctx && i < ctx->autocast.n_shadows; i++) ctx->autocast.shadows[i].current = false;
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
    sh->current = false;
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
}
