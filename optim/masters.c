/* Master weights: what Apex's O2 and O3 need of the optimizer.
 *
 * O2 (persistent): Apex keeps an fp32 copy of every fp16 parameter in the optimizer's param
 * groups, steps those with fp32 gradients and copies them back into the model after each step
 * (apex/amp/_process_optimizer.py: master_params_to_model_params). Here the masters live in one
 * f32 block carved into per-parameter views, and the copy back is fused into the update kernel
 * (sgd_update/adam_update write half_copy in the same pass), so a half weight is never read by
 * the step and is always the round-to-nearest-even of its master.
 *
 * A parameter left f32 (batch norm under keep_batchnorm_fp32) also steps its master, then gets
 * a copy of it: the master stays the one authoritative value, so a checkpoint saves masters
 * only and every parameter is rebuilt from them the same way. The other choice, making the
 * master view point at the f32 parameter's data, would save that copy (batch-norm vectors are a
 * few hundred floats) but break the moment the amp layer or a checkpoint load replaces the
 * parameter's storage.
 *
 * O3 has no master weights here, as in Apex, where torch.optim updates the half parameters
 * themselves: the update kernel widens each chunk of a half parameter, updates it in f32 and
 * rounds it back in the same pass (core/backend.h), which is one rounding per step where torch's
 * half ops round after every op, and no f32 copy of the model exists at any time. */
#include <string.h>

#include "core/ctx.h"
#include "core/error.h"
#include "core/tensor_internal.h"
#include "optim/optimizer_internal.h"

static bool amp_optim_is_half(amp_dtype dt) { return dt == AMP_F16 || dt == AMP_BF16; }

amp_status amp_optimizer_make_masters(amp_optimizer *opt) {
    AMP_CHECK_ARG(opt);
    if (opt->masters != AMP_OPTIM_MASTERS_NONE)
        return amp_fail(AMP_ERR_STATE, "%s: the optimizer has master weights already", __func__);
    for (int i = 0; i < opt->n_params; i++) {
        const amp_tensor *p = opt->params[i];
        char label[160];
        amp_optimizer_param_label(opt, i, label, sizeof label);
        if (p->dtype != AMP_F32)
            return amp_fail(AMP_ERR_DTYPE,
                            "%s: parameter %s is already %s; masters are copied from the f32 "
                            "parameters before the model is cast",
                            __func__, label, amp_dtype_name(p->dtype));
        if (!p->data || p->backend != opt->backend)
            return amp_fail(AMP_ERR_STATE, "%s: parameter %s has no storage on backend %s",
                            __func__, label, opt->backend->name);
    }
    void *data = NULL, *grad_data = NULL;
    amp_tensor **views = NULL, **grads = NULL;
    amp_status s = amp_optimizer_alloc_views(opt, 1, AMP_MEM_MASTERS, &data, &views);
    if (s == AMP_OK)
        s = amp_optimizer_alloc_views(opt, 1, AMP_MEM_MASTERS, &grad_data, &grads);
    for (int i = 0; s == AMP_OK && i < opt->n_params; i++)
        s = opt->backend->copy(opt->backend->dev, views[i]->data, opt->params[i]->data,
                               amp_tensor_nbytes(opt->params[i]));
    if (s != AMP_OK) {
        amp_optimizer_free_views(opt, 1, data, views);
        amp_optimizer_free_views(opt, 1, grad_data, grads);
        return amp_fail_context(s, "%s: master weights", __func__);
    }
    opt->master_data = data;
    opt->master_views = views;
    opt->master_grad_data = grad_data;
    opt->master_grads = grads;
    opt->masters = AMP_OPTIM_MASTERS_PERSISTENT;
    return AMP_OK;
}

void amp_optimizer_drop_masters(amp_optimizer *opt) {
    if (!opt || opt->masters == AMP_OPTIM_MASTERS_NONE) return;
    amp_optimizer_free_views(opt, 1, opt->master_data, opt->master_views);
    amp_optimizer_free_views(opt, 1, opt->master_grad_data, opt->master_grads);
    opt->master_data = opt->master_grad_data = NULL;
    opt->master_views = opt->master_grads = NULL;
    opt->masters = AMP_OPTIM_MASTERS_NONE;
}

bool amp_optimizer_has_masters(const amp_optimizer *opt) {
    return opt && opt->masters == AMP_OPTIM_MASTERS_PERSISTENT;
}

amp_tensor *amp_optimizer_master(const amp_optimizer *opt, int i) {
    if (!amp_optimizer_has_masters(opt) || i < 0 || i >= opt->n_params) return NULL;
    return opt->master_views[i];
}

float *amp_optimizer_master_grad(amp_optimizer *opt, int i) {
    if (!amp_optimizer_has_masters(opt) || i < 0 || i >= opt->n_params) return NULL;
    return opt->master_grads[i] ? opt->master_grads[i]->data : NULL; /* an empty piece has none */
}

/* Parameter i's data from its master; the checks of amp_optimizer_masters_check passed. */
static amp_status amp_optim_master_to_param(amp_optimizer *opt, int i) {
    amp_tensor *p = opt->params[i];
    const amp_tensor *m = opt->master_views[i];
    amp_tensor_mark_written(p);
    if (p->dtype == AMP_F32)
        return AMP_DEV(opt->backend, copy, p->data, m->data, amp_tensor_nbytes(m));
    return AMP_BE(opt->backend, cast, p->data, p->dtype, m->data, AMP_F32, m->numel);
}

amp_status amp_optimizer_masters_to_params(amp_optimizer *opt) {
    AMP_CHECK_ARG(opt);
    if (opt->masters != AMP_OPTIM_MASTERS_PERSISTENT)
        return amp_fail(AMP_ERR_STATE, "%s: the optimizer keeps no master weights", __func__);
    AMP_TRY(amp_optimizer_check_unsharded(__func__, opt, "writing every weight from its master"));
    for (int i = 0; i < opt->n_params; i++) {
        char label[160];
        amp_optimizer_param_label(opt, i, label, sizeof label);
        amp_status s = amp_optimizer_masters_check(opt, i, label);
        if (s != AMP_OK) return amp_fail_context(s, "%s", __func__);
    }
    for (int i = 0; i < opt->n_params; i++) AMP_TRY(amp_optim_master_to_param(opt, i));
    return AMP_OK;
}

amp_status amp_optimizer_masters_check(const amp_optimizer *opt, int i, const char *label) {
    const amp_tensor *p = opt->params[i], *m = opt->master_views[i];
    if (p->dtype != AMP_F32 && !amp_optim_is_half(p->dtype))
        return amp_fail(AMP_ERR_DTYPE, "parameter %s is %s; master weights update f32, f16 or "
                                       "bf16 parameters",
                        label, amp_dtype_name(p->dtype));
    if (amp_optimizer_sharded(opt)) { /* a piece: a flat run of the parameter's elements */
        int64_t piece = amp_optimizer_piece_numel(opt, i);
        if ((m ? m->numel : 0) != piece || opt->shard_hi[i] > p->numel)
            return amp_fail(AMP_ERR_SHAPE, "parameter %s has %lld elements, its master piece "
                            "[%lld, %lld)", label, (long long)p->numel,
                            (long long)opt->shard_lo[i], (long long)opt->shard_hi[i]);
    } else if (p->numel != m->numel || !amp_same_shape(p, m)) {
        char ps[64], ms[64];
        return amp_fail(AMP_ERR_SHAPE, "parameter %s is %s, its master %s", label,
                        amp_shape_str(p, ps, sizeof ps), amp_shape_str(m, ms, sizeof ms));
    }
    if (!p->data)
        return amp_fail(AMP_ERR_STATE, "parameter %s has no storage", label);
    if (p->backend != opt->backend)
        return amp_fail(AMP_ERR_STATE, "parameter %s left backend %s", label,
                        opt->backend->name);
    if (amp_optim_is_half(p->dtype) && !opt->backend->k.cast)
        return amp_backend_missing(opt->backend, "cast");
    return AMP_OK;
}

/* An f32 parameter with a current kept half copy (O1, core/cast_shadow.h) has it written in the
 * update's pass, so it stays current and the next forward does not cast. Only a current one: a
 * step the device skips (an overflow) writes neither, and the copy must already match. Copies
 * in the other half dtype (autocast switched between f16 and bf16) go stale. */
static void amp_optim_keep_cast_current(const amp_optimizer *opt, const amp_tensor *p,
                                        amp_optim_target *t) {
    amp_ctx *ctx = p->ctx;
    /* A sharded step writes only its piece of the copy; the rest would be stale. */
    if (amp_optimizer_sharded(opt)) return;
    amp_cast_shadow *sh = amp_cast_shadow_find(ctx, p, ctx->autocast.half);
    amp_dtype other = ctx->autocast.half == AMP_F16 ? AMP_BF16 : AMP_F16;
    (void)other; /* a copy in the other half dtype goes stale with the write's version */
    if (!sh) return;
    /* LAMB's clipping needs the step in one fused call, which parameters with and without a
     * kept copy would split (amp_optimizer_apply): those copies are recast instead. So is a copy
     * that a graph kept for another backward (retain_graph) still reads. */
    bool kept_graph = amp_cast_shadow_in_use(ctx, sh) && ctx->n_tape > 0;
    if (!amp_cast_shadow_current(sh) || kept_graph ||
        (opt->kind == AMP_OPTIM_LAMB && opt->lamb.max_grad_norm > 0.0f))
        return; /* the update's write leaves it stale */
    t->half_copy = sh->data;
    t->half_dtype = sh->dtype;
}

amp_status amp_optimizer_update_begin(amp_optimizer *opt, const amp_optim_inputs *in, int i,
                                      amp_optim_target *t) {
    amp_tensor *p = opt->params[i];
    *t = (amp_optim_target){.half_dtype = AMP_F32, .grad_scale = 1.0f};
    /* Under ZeRO the update starts at this rank's piece (the state and masters hold only it). */
    void *p_piece = amp_optimizer_piece_ptr(opt, i, p->data, p->dtype);
    if (opt->masters == AMP_OPTIM_MASTERS_PERSISTENT) {
        t->grad = opt->master_grads[i]->data;
        t->grad_dtype = AMP_F32;
        t->param = opt->master_views[i]->data; /* an f32 parameter gets it in update_end */
        if (amp_optim_is_half(p->dtype)) {
            t->half_copy = p_piece;
            t->half_dtype = p->dtype;
        }
        return AMP_OK;
    }
    if (in->grad_source && in->grad_source[i]) {
        t->grad = in->grad_source[i];
        t->grad_dtype = AMP_F32;
    } else {
        t->grad = amp_optimizer_piece_ptr(opt, i, p->grad->data, p->grad->dtype);
        t->grad_dtype = p->grad->dtype;
        if (amp_optim_is_half(t->grad_dtype)) {
            t->grad_scale = in->half_grad_scale;
            t->half_scaled = true;
        }
    }
    if (amp_optim_is_half(p->dtype)) { /* O3: the half parameter is the only copy */
        t->half_copy = p_piece;
        t->half_dtype = p->dtype;
        return AMP_OK;
    }
    t->param = p_piece;
    amp_optim_keep_cast_current(opt, p, t);
    return AMP_OK;
}

amp_status amp_optimizer_update_end(amp_optimizer *opt, int i, const amp_optim_target *t) {
    amp_tensor *p = opt->params[i];
    if (opt->masters == AMP_OPTIM_MASTERS_PERSISTENT && p->dtype == AMP_F32) {
        amp_tensor_mark_written(p);
        void *piece = amp_optimizer_piece_ptr(opt, i, p->data, AMP_F32);
        return opt->backend->copy(opt->backend->dev, piece, opt->master_views[i]->data,
                                  (size_t)amp_optimizer_piece_numel(opt, i) * sizeof(float));
    }
    /* The kept copy the update wrote in the same pass holds the new values as well. */
    amp_cast_shadow *sh = t->half_copy && opt->masters == AMP_OPTIM_MASTERS_NONE && p->dtype == AMP_F32
                              ? amp_cast_shadow_find(p->ctx, p, t->half_dtype) : NULL;
    if (sh && sh->data == t->half_copy) amp_cast_shadow_set_current(sh);
    return AMP_OK;
}
