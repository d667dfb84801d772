/* Model storage: named parameters and buffers in one block each, accessors, lifetime. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "core/error.h"
#include "core/tensor_internal.h"
#include "nn/model_internal.h"

/* Each tensor starts on a 64-byte boundary inside its block: vector loads stay aligned. */
#define AMP_PARAM_ALIGN_ELEMS 16

static int64_t amp_round_up(int64_t n) {
    return (n + AMP_PARAM_ALIGN_ELEMS - 1) / AMP_PARAM_ALIGN_ELEMS * AMP_PARAM_ALIGN_ELEMS;
}

static amp_status amp_named_add(amp_named_tensor **list, int *n, int *cap, const char *layer,
                                const char *what, int ndim, const int64_t *shape, int *index) {
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 16;
        amp_named_tensor *l = realloc(*list, (size_t)c * sizeof *l);
        if (!l) return amp_fail(AMP_ERR_OOM, "model: out of memory");
        *list = l;
        *cap = c;
    }
    amp_named_tensor *e = &(*list)[*n];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s.%s", layer, what);
    e->ndim = ndim;
    memcpy(e->shape, shape, (size_t)ndim * sizeof *shape);
    *index = (*n)++;
    return AMP_OK;
}

amp_status amp_model_add_param(amp_model *m, const char *layer, const char *what, int ndim,
                               const int64_t *shape, int *index) {
    return amp_named_add(&m->params, &m->n_params, &m->cap_params, layer, what, ndim, shape, index);
}

amp_status amp_model_add_buffer(amp_model *m, const char *layer, const char *what, int ndim,
                                const int64_t *shape, int *index) {
    return amp_named_add(&m->buffers, &m->n_buffers, &m->cap_buffers, layer, what, ndim, shape,
                         index);
}

static int64_t amp_named_block_numel(const amp_named_tensor *l, int n) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < l[i].ndim; d++) numel *= l[i].shape[d];
        total += amp_round_up(numel);
    }
    return total;
}

/* Allocates one f32 block for the list and makes each entry a view into it (and, when grads is
 * non-NULL, a second block for the gradients, viewed the same way). Both blocks are the model's
 * in the context's memory ledger: parameters and buffers AMP_MEM_PARAMS, gradients
 * AMP_MEM_GRADS. */
static amp_status amp_named_carve(amp_model *m, amp_named_tensor *l, int n, void **block,
                                  void **grads) {
    const amp_backend *be = m->ctx->backend;
    size_t nbytes = (size_t)(amp_named_block_numel(l, n) ? amp_named_block_numel(l, n) : 1) * 4;
    AMP_TRY(amp_ledger_alloc(m->ctx, AMP_MEM_PARAMS, nbytes, block));
    AMP_TRY(be->memset_zero(*block, nbytes));
    if (grads) {
        AMP_TRY(amp_ledger_alloc(m->ctx, AMP_MEM_GRADS, nbytes, grads));
        AMP_TRY(be->memset_zero(*grads, nbytes));
    }
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        amp_tensor *t;
        AMP_TRY(amp_tensor_view(m->ctx, AMP_F32, l[i].ndim, l[i].shape, (float *)*block + off, &t));
        l[i].t = t;
        if (grads) {
            AMP_TRY(amp_tensor_view(m->ctx, AMP_F32, l[i].ndim, l[i].shape, (float *)*grads + off,
                                    &t->grad));
            l[i].t->requires_grad = true;
            l[i].t->flags |= AMP_TENSOR_PARAM;
        }
        off += amp_round_up(l[i].t->numel);
    }
    return AMP_OK;
}

amp_status amp_model_build(amp_model *m) {
    AMP_CHECK_ARG(m);
    if (m->built) return AMP_OK;
    if (m->n_layers == 0) return amp_fail(AMP_ERR_STATE, "amp_model_build: the model has no layers");
    AMP_TRY(amp_named_carve(m, m->params, m->n_params, &m->param_block, &m->grad_block));
    AMP_TRY(amp_named_carve(m, m->buffers, m->n_buffers, &m->buffer_block, NULL));
    m->built = true;
    return amp_model_init_params(m);
}

void amp_model_free(amp_model *m) {
    if (!m) return;
    amp_ctx *ctx = m->ctx;
    amp_ctx_forget(ctx, m); /* its optimizers and DDP stop using it */
    if (ctx->amp_hooks) ctx->amp_hooks->forget(ctx->amp, m);
    for (int i = 0; i < m->n_params; i++) amp_tensor_free(m->params[i].t);
    for (int i = 0; i < m->n_buffers; i++) amp_tensor_free(m->buffers[i].t);
    amp_ledger_free(m->ctx, m->param_block);
    amp_ledger_free(m->ctx, m->grad_block);
    amp_ledger_free(m->ctx, m->buffer_block);
    free(m->params);
    free(m->buffers);
    free(m->layers);
    free(m);
    amp_ctx_drop(ctx);
}

/* The accessors answer NULL with 0, false or NULL and leave the message in amp_last_error. */
amp_status amp_model_train(amp_model *m, bool training) {
    AMP_CHECK_ARG(m);
    m->training = training;
    return AMP_OK;
}

bool amp_model_is_training(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, false);
    return m->training;
}

amp_ctx *amp_model_ctx(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, NULL);
    return m->ctx;
}

int amp_model_n_params(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, 0);
    return m->n_params;
}

int amp_model_n_buffers(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, 0);
    return m->n_buffers;
}

amp_tensor *amp_model_param(const amp_model *m, int i) {
    AMP_CHECK_ARG_OR(m, NULL);
    return i >= 0 && i < m->n_params ? m->params[i].t : NULL;
}
const char *amp_model_param_name(const amp_model *m, int i) {
    AMP_CHECK_ARG_OR(m, NULL);
    return i >= 0 && i < m->n_params ? m->params[i].name : NULL;
}
amp_tensor *amp_model_buffer(const amp_model *m, int i) {
    AMP_CHECK_ARG_OR(m, NULL);
    return i >= 0 && i < m->n_buffers ? m->buffers[i].t : NULL;
}
const char *amp_model_buffer_name(const amp_model *m, int i) {
    AMP_CHECK_ARG_OR(m, NULL);
    return i >= 0 && i < m->n_buffers ? m->buffers[i].name : NULL;
}

amp_status amp_model_find(const amp_model *m, const char *name, amp_tensor **out) {
    AMP_CHECK_ARG(m);
    AMP_CHECK_ARG(name);
    AMP_CHECK_ARG(out);
    if (!m->built) return amp_fail(AMP_ERR_STATE, "amp_model_find: model not built yet");
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return (*out = m->params[i].t), AMP_OK;
    for (int i = 0; i < m->n_buffers; i++)
        if (strcmp(m->buffers[i].name, name) == 0) return (*out = m->buffers[i].t), AMP_OK;
    *out = NULL;
    return amp_fail(AMP_ERR_INVALID_ARG, "amp_model_find: no parameter or buffer named '%s'", name);
}

int64_t amp_model_numel(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, 0);
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++) {
        int64_t k = 1;
        for (int d = 0; d < m->params[i].ndim; d++) k *= m->params[i].shape[d];
        n += k;
    }
    return n;
}
