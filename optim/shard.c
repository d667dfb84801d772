/* ZeRO's optimizer side (Rajbhandari et al., "ZeRO", SC 2020): each rank steps one contiguous
 * run of the flattened parameters and keeps the optimizer state, the f32 masters and the master
 * gradients of that run only. Which run is the sharding layer's choice (parallel/zero.c); here a
 * parameter i is cut to the piece [shard_lo[i], shard_hi[i]) of its elements, and every pass of
 * the step (unscale, clip, update) reads and writes the pieces.
 *
 * The update of an element reads nothing but that element's gradient, weight and state (SGD,
 * Adam/AdamW), so a piece updates to the bits the whole parameter would. LAMB's trust ratio
 * divides by norms of the whole parameter and of its whole update, which a piece does not hold:
 * it is refused until those norms are summed over the ranks. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tensor_internal.h"
#include "optim/optimizer_internal.h"

int64_t amp_optimizer_piece_lo(const amp_optimizer *opt, int i) {
    return opt->shard_lo ? opt->shard_lo[i] : 0;
}

int64_t amp_optimizer_piece_numel(const amp_optimizer *opt, int i) {
    return opt->shard_lo ? opt->shard_hi[i] - opt->shard_lo[i] : opt->params[i]->numel;
}

bool amp_optimizer_sharded(const amp_optimizer *opt) { return opt && opt->shard_lo; }

void *amp_optimizer_piece_ptr(const amp_optimizer *opt, int i, void *data, amp_dtype dt) {
    return (char *)data + (size_t)amp_optimizer_piece_lo(opt, i) * amp_dtype_size(dt);
}

/* Copies piece i of each old (whole) view into the new (piece) view. */
static amp_status amp_shard_copy_views(const amp_optimizer *opt, int per_param,
                                       amp_tensor *const *old, amp_tensor *const *fresh) {
    const amp_backend *be = opt->backend;
    for (int i = 0; i < opt->n_params; i++) {
        int64_t n = amp_optimizer_piece_numel(opt, i), lo = amp_optimizer_piece_lo(opt, i);
        for (int j = 0; n && j < per_param; j++) {
            const float *src = (const float *)old[i * per_param + j]->data + lo;
            AMP_TRY(be->copy(be->dev, fresh[i * per_param + j]->data, src,
                             (size_t)n * sizeof(float)));
        }
    }
    return AMP_OK;
}

static amp_status amp_shard_check(const amp_optimizer *opt, const int64_t *lo, const int64_t *hi) {
    const char *who = "amp_optimizer_shard";
    if (opt->shard_lo)
        return amp_fail(AMP_ERR_STATE, "%s: the optimizer is sharded already", who);
    if (opt->kind == AMP_OPTIM_LAMB)
        return amp_fail(AMP_ERR_UNSUPPORTED, "%s: LAMB's trust ratio needs the norms of whole "
                        "parameters, which a shard does not hold; use SGD or Adam/AdamW under "
                        "ZeRO, or DDP (zero_stage 0) with LAMB", who);
    for (int i = 0; i < opt->n_params; i++) {
        char label[160];
        if (lo[i] < 0 || lo[i] > hi[i] || hi[i] > opt->params[i]->numel ||
            (lo[i] % 32 && lo[i] != hi[i]))
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: piece [%lld, %lld) of parameter %s, which "
                            "has %lld elements (want 0 <= lo <= hi <= numel, lo a multiple of "
                            "32 unless empty)",
                            who, (long long)lo[i], (long long)hi[i],
                            amp_optimizer_param_label(opt, i, label, sizeof label),
                            (long long)opt->params[i]->numel);
    }
    return AMP_OK;
}

amp_status amp_optimizer_shard(amp_optimizer *opt, const int64_t *lo, const int64_t *hi,
                               amp_status (*gather)(void *user, amp_optimizer *opt), void *user) {
    AMP_CHECK_ARG(opt);
    AMP_CHECK_ARG(lo);
    AMP_CHECK_ARG(hi);
    AMP_TRY(amp_optimizer_check_usable(__func__, opt));
    AMP_TRY(amp_shard_check(opt, lo, hi));
    size_t n = (size_t)(opt->n_params ? opt->n_params : 1);
    int64_t *slo = malloc(n * sizeof *slo), *shi = malloc(n * sizeof *shi);
    if (!slo || !shi) {
        free(slo);
        free(shi);
        return amp_fail(AMP_ERR_OOM, "%s: out of host memory", __func__);
    }
    memcpy(slo, lo, (size_t)opt->n_params * sizeof *slo);
    memcpy(shi, hi, (size_t)opt->n_params * sizeof *shi);
    opt->shard_lo = slo; /* alloc_views cuts the pieces from here on */
    opt->shard_hi = shi;
    bool masters = opt->masters == AMP_OPTIM_MASTERS_PERSISTENT;
    void *state = NULL, *mdata = NULL, *mgrad = NULL;
    amp_tensor **sv = NULL, **mv = NULL, **mg = NULL;
    amp_status s = amp_optimizer_alloc_views(opt, opt->n_state, AMP_MEM_OPTIM_STATE, &state, &sv);
    if (s == AMP_OK && opt->n_state) s = amp_shard_copy_views(opt, opt->n_state, opt->state, sv);
    if (s == AMP_OK && masters) s = amp_optimizer_alloc_views(opt, 1, AMP_MEM_MASTERS, &mdata, &mv);
    if (s == AMP_OK && masters) s = amp_shard_copy_views(opt, 1, opt->master_views, mv);
    if (s == AMP_OK && masters) s = amp_optimizer_alloc_views(opt, 1, AMP_MEM_MASTERS, &mgrad, &mg);
    if (s != AMP_OK) {
        amp_optimizer_free_views(opt, opt->n_state, state, sv);
        amp_optimizer_free_views(opt, 1, mdata, mv);
        amp_optimizer_free_views(opt, 1, mgrad, mg);
        opt->shard_lo = opt->shard_hi = NULL;
        free(slo);
        free(shi);
        return amp_fail_context(s, "%s", __func__);
    }
    /* The whole views go with their blocks; nobody holds them (a checkpoint asks each time). */
    amp_optimizer_free_views(opt, opt->n_state, opt->state_data, opt->state);
    if (masters) {
        amp_optimizer_free_views(opt, 1, opt->master_data, opt->master_views);
        amp_optimizer_free_views(opt, 1, opt->master_grad_data, opt->master_grads);
        opt->master_data = mdata;
        opt->master_views = mv;
        opt->master_grad_data = mgrad;
        opt->master_grads = mg;
    }
    opt->state_data = state;
    opt->state = sv;
    opt->shard_gather = gather;
    opt->shard_gather_user = user;
    return AMP_OK;
}

amp_status amp_optimizer_check_unsharded(const char *who, const amp_optimizer *opt,
                                         const char *what) {
    if (!amp_optimizer_sharded(opt)) return AMP_OK;
    return amp_fail(AMP_ERR_UNSUPPORTED, "%s: the optimizer's state is sharded over the ranks "
                    "(ZeRO), and %s needs all of it on one rank", who, what);
}

amp_status amp_optimizer_unshard_begin(amp_optimizer *opt, amp_optimizer_pieces *kept) {
    AMP_CHECK_ARG(opt);
    AMP_CHECK_ARG(kept);
    *kept = (amp_optimizer_pieces){0};
    if (!amp_optimizer_sharded(opt))
        return amp_fail(AMP_ERR_STATE, "amp_optimizer_unshard_begin: the optimizer is not sharded");
    bool masters = opt->masters == AMP_OPTIM_MASTERS_PERSISTENT;
    amp_optimizer_pieces k = {.shard_lo = opt->shard_lo, .shard_hi = opt->shard_hi,
                              .state_data = opt->state_data, .state = opt->state,
                              .master_data = opt->master_data, .master_views = opt->master_views};
    opt->shard_lo = opt->shard_hi = NULL; /* alloc_views makes whole views from here */
    void *state = NULL, *mdata = NULL;
    amp_tensor **sv = NULL, **mv = NULL;
    amp_status s = amp_optimizer_alloc_views(opt, opt->n_state, AMP_MEM_OPTIM_STATE, &state, &sv);
    if (s == AMP_OK && masters) s = amp_optimizer_alloc_views(opt, 1, AMP_MEM_MASTERS, &mdata, &mv);
    if (s != AMP_OK) {
        amp_optimizer_free_views(opt, opt->n_state, state, sv);
        amp_optimizer_free_views(opt, 1, mdata, mv);
        opt->shard_lo = k.shard_lo;
        opt->shard_hi = k.shard_hi;
        return amp_fail_context(s, "amp_optimizer_unshard_begin");
    }
    opt->state_data = state;
    opt->state = sv;
    if (masters) {
        opt->master_data = mdata;
        opt->master_views = mv;
    }
    *kept = k;
    return AMP_OK;
}

amp_status amp_optimizer_unshard_end(amp_optimizer *opt, amp_optimizer_pieces *kept,
                                     bool take_whole) {
    bool masters = opt->masters == AMP_OPTIM_MASTERS_PERSISTENT;
    opt->shard_lo = kept->shard_lo;
    opt->shard_hi = kept->shard_hi;
    amp_status s = AMP_OK;
    if (take_whole) { /* the pieces of what is in the whole views now */
        s = amp_shard_copy_views(opt, opt->n_state, opt->state, kept->state);
        if (s == AMP_OK && masters)
            s = amp_shard_copy_views(opt, 1, opt->master_views, kept->master_views);
    }
    amp_optimizer_free_views(opt, opt->n_state, opt->state_data, opt->state);
    opt->state_data = kept->state_data;
    opt->state = kept->state;
    if (masters) {
        amp_optimizer_free_views(opt, 1, opt->master_data, opt->master_views);
        opt->master_data = kept->master_data;
        opt->master_views = kept->master_views;
    }
    *kept = (amp_optimizer_pieces){0};
    return s == AMP_OK ? AMP_OK : amp_fail_context(s, "amp_optimizer_unshard_end");
}
