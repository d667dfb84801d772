/* The cast op (differentiable, with the per-step weight cache) and the autocast categories. */
#include "nn/autocast.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/grow.h"

static bool amp_is_float(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

static amp_status amp_cast_bwd(amp_tape_node *node, const amp_tensor *dy) {
    return amp_grad_accumulate_cast(node->in[0], dy);
}

amp_tensor *amp_cast_f32_source(const amp_tensor *t) {
    if (!t || !t->node || t->node->backward != amp_cast_bwd) return NULL;
    amp_tensor *src = t->node->in[0];
    return src->dtype == AMP_F32 && src->requires_grad ? src : NULL;
}

/* Parameters (leaves that require grad) are cast once per step while autocast is on. */
static amp_tensor **amp_cast_cache_find(amp_ctx *ctx, const amp_tensor *x, amp_dtype dt) {
    amp_autocast_state *ac = &ctx->autocast;
    for (int i = ac->cache_from; i < ac->n_cache; i++)
        if (ac->cache[i].src == x && ac->cache[i].cast->dtype == dt &&
            ac->cache[i].version == *x->version)
            return &ac->cache[i].cast;
    return NULL;
}

/* x cast to dt into y: a model parameter's kept copy when it has one it may use
 * (core/cast_shadow.h), recast when stale unless this step already handed it out (its tape may
 * hold the old values: then a step tensor, as without a kept copy); else a step tensor (also
 * when there is no room or memory for a copy). Only parameters: they live as long as their model
 * and change only through the API, where other leaves (a tensor marked requires_grad for a step)
 * come and go, and their addresses with them. */
static amp_status amp_cast_kept(amp_tensor *x, amp_dtype dt, bool cacheable, amp_tensor **y) {
    amp_ctx *ctx = x->ctx;
    amp_cast_shadow *sh = NULL;
    if (cacheable && x->dtype == AMP_F32 && (x->flags & AMP_TENSOR_PARAM) &&
        amp_cast_shadow_add(ctx, x, dt, &sh) != AMP_OK)
        sh = NULL;
    if (sh && !amp_cast_shadow_current(sh) && !amp_cast_shadow_in_use(ctx, sh)) {
        AMP_TRY(AMP_BE(x->backend, cast, sh->data, dt, x->data, x->dtype, x->numel));
        amp_cast_shadow_set_current(sh);
    }
    if (sh && amp_cast_shadow_current(sh)) {
        sh->read_in = ctx->step_gen + 1u;
        return amp_tensor_step_shared(x, dt, sh->data, y);
    }
    AMP_TRY(amp_tensor_step_like(x, dt, y));
    return AMP_BE(x->backend, cast, (*y)->data, dt, x->data, x->dtype, x->numel);
}

amp_status amp_cast(amp_tensor *x, amp_dtype dt, amp_tensor **out) {
    static const char *op = "amp_cast";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "x", x, 0));
    if (!amp_is_float(dt) || !amp_is_float(x->dtype))
        return amp_fail(AMP_ERR_DTYPE, "%s: %s -> %s: only f32, f16 and bf16 convert", op,
                        amp_dtype_name(x->dtype), amp_dtype_name(dt));
    if (x->dtype == dt) {
        *out = x;
        return AMP_OK;
    }
    amp_ctx *ctx = x->ctx;
    /* A cast made with gradients off has no tape node: reused by a later forward that records,
     * it would cut the parameter off from its gradient. So only recording casts are cached (a
     * no-grad forward may still reuse them: same values). */
    bool cacheable = ctx->autocast.enabled && amp_cast_cacheable(x);
    bool cache_new = cacheable && ctx->grad_enabled;
    amp_tensor **hit = cacheable ? amp_cast_cache_find(ctx, x, dt) : NULL;
    if (hit) {
        *out = *hit;
        return AMP_OK;
    }
    amp_tensor *y;
    AMP_TRY(amp_cast_kept(x, dt, cacheable, &y));
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "cast", "x", amp_cast_bwd, 1, &x, 0, &node));
    /* Its backward casts dy back and reads no data. So x may be written after the forward: an
     * f32 weight stepped while a retained graph holds its cast (O1) leaves this node valid; what
     * the ops after it saved is the half copy, never rewritten while a tape may read it
     * (core/cast_shadow.h), and checked as their input. */
    amp_node_unread(node, 1u, true);
    amp_autocast_state *ac = &ctx->autocast;
    /* Grows in the first step only; without room the cast is simply not reused. */
    amp_cast_cache_entry *c = cache_new ? amp_grow(ac->cache, ac->n_cache, &ac->cap_cache, 64,
                                                   sizeof *c)
                                        : NULL;
    if (c) ac->cache = c;
    if (c && ac->n_cache < ac->cap_cache)
        ac->cache[ac->n_cache++] = (amp_cast_cache_entry){.src = x, .cast = y, .version = *x->version};
    *out = y;
    return AMP_OK;
}

amp_status amp_cast_to_f32(amp_tensor **t) {
    if (!*t || (*t)->dtype == AMP_F32 || !amp_is_float((*t)->dtype)) return AMP_OK;
    return amp_cast(*t, AMP_F32, t);
}

/* Rank of float dtypes for promotion: f32 wins; f16 with bf16 promotes to f32 (PyTorch). */
static amp_dtype amp_promote(amp_dtype a, amp_dtype b) { return a == b ? a : AMP_F32; }

amp_status amp_autocast(amp_cast_category cat, amp_tensor **in, int n) {
    amp_ctx *ctx = NULL;
    amp_dtype widest = AMP_F32;
    bool mixed = false;
    for (int i = 0; i < n; i++) {
        if (!in[i] || !amp_is_float(in[i]->dtype)) continue;
        if (ctx && in[i]->dtype != widest) mixed = true;
        widest = ctx ? amp_promote(widest, in[i]->dtype) : in[i]->dtype;
        ctx = in[i]->ctx;
    }
    if (!ctx) return AMP_OK;
    amp_dtype target;
    if (cat == AMP_CAT_HALF && ctx->autocast.enabled) target = ctx->autocast.half;
    else if (cat == AMP_CAT_FP32 && mixed) target = AMP_F32;
    else if (cat == AMP_CAT_WIDEN && ctx->autocast.enabled) target = AMP_F32;
    else if (cat == AMP_CAT_PROMOTE && mixed) target = widest;
    else return AMP_OK;
    for (int i = 0; i < n; i++)
        if (in[i] && amp_is_float(in[i]->dtype)) AMP_TRY(amp_cast(in[i], target, &in[i]));
    return AMP_OK;
}
