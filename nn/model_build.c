/* Building a model tree: its entries laid out into the root's flat lists under dotted names,
 * then one block each for parameters, gradients and buffers, carved into views, then the
 * initial values. */
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

static int amp_count_counters(const amp_model *m) {
    int n = m->kind == AMP_MODULE_BATCHNORM2D;
    for (int i = 0; i < m->n_children; i++) n += amp_count_counters(m->children[i]);
    return n;
}

typedef struct amp_flat_cursor {
    amp_model *root;
    int param, buffer, counter;
} amp_flat_cursor;

static amp_status amp_flat_name(char *out, const char *prefix, const char *name) {
    int k = snprintf(out, AMP_FULL_NAME_MAX, "%s%s", prefix, name);
    if (k >= AMP_FULL_NAME_MAX)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_model_build: the name '%s%s' is longer than %d "
                        "characters", prefix, name, AMP_FULL_NAME_MAX - 1);
    return AMP_OK;
}

static amp_status amp_flat_entry(amp_named_tensor *e, const char *prefix, const amp_decl *d,
                                 amp_norm_cast norm) {
    memset(e, 0, sizeof *e);
    AMP_TRY(amp_flat_name(e->name, prefix, d->name));
    e->ndim = d->ndim;
    memcpy(e->shape, d->shape, sizeof e->shape);
    e->init = d->init;
    e->norm = norm;
    return AMP_OK;
}

/* Own entries first, then each child's under "<prefix><child>.": torch's order. */
static amp_status amp_flat_node(amp_flat_cursor *c, amp_model *m, const char *prefix) {
    amp_model *r = c->root;
    int param_lo = c->param, buffer_lo = c->buffer;
    for (int i = 0; i < m->n_own_params; i++)
        AMP_TRY(amp_flat_entry(&r->params[c->param++], prefix, &m->own_params[i], m->norm));
    for (int i = 0; i < m->n_own_buffers; i++)
        AMP_TRY(amp_flat_entry(&r->buffers[c->buffer++], prefix, &m->own_buffers[i], m->norm));
    if (m->kind == AMP_MODULE_BATCHNORM2D) {
        amp_named_counter *k = &r->counters[c->counter++];
        AMP_TRY(amp_flat_name(k->name, prefix, "num_batches_tracked"));
        k->value = &m->cfg.num_batches_tracked;
    }
    for (int i = 0; i < m->n_children; i++) {
        char sub[AMP_FULL_NAME_MAX], child[AMP_NAME_MAX + 1];
        snprintf(child, sizeof child, "%s.", m->children[i]->name);
        AMP_TRY(amp_flat_name(sub, prefix, child));
        AMP_TRY(amp_flat_node(c, m->children[i], sub));
    }
    m->params = r->params + param_lo;
    m->n_params = c->param - param_lo;
    m->buffers = r->buffers + buffer_lo;
    m->n_buffers = c->buffer - buffer_lo;
    return AMP_OK;
}

/* Two entries of one list under the same dotted name ("a.b" + "c" and "a" + "b.c"). */
static amp_status amp_flat_check_unique(const amp_model *r) {
    int n = r->n_params + r->n_buffers;
    for (int i = 0; i < n; i++) {
        const char *a = i < r->n_params ? r->params[i].name : r->buffers[i - r->n_params].name;
        for (int j = i + 1; j < n; j++) {
            const char *b = j < r->n_params ? r->params[j].name : r->buffers[j - r->n_params].name;
            if (!strcmp(a, b))
                return amp_fail(AMP_ERR_INVALID_ARG, "amp_model_build: two entries are named "
                                "'%s'", a);
        }
    }
    return AMP_OK;
}

/* Undoes a build that failed part way (out of memory): nothing of it stays. */
static void amp_model_unbuild(amp_model *r) {
    for (int i = 0; i < r->n_params; i++) amp_tensor_free(r->params[i].t);
    for (int i = 0; i < r->n_buffers; i++) amp_tensor_free(r->buffers[i].t);
    amp_ledger_free(r->ctx, r->param_block);
    amp_ledger_free(r->ctx, r->grad_block);
    amp_ledger_free(r->ctx, r->buffer_block);
    r->param_block = r->grad_block = r->buffer_block = NULL;
    free(r->params);
    free(r->buffers);
    free(r->counters);
    r->params = r->buffers = NULL;
    r->counters = NULL;
    r->n_params = r->n_buffers = r->n_counters = 0;
}

amp_status amp_model_flatten(amp_model *root) {
    int np = amp_model_n_params(root), nb = amp_model_n_buffers(root);
    int nc = amp_count_counters(root);
    root->params = calloc((size_t)(np ? np : 1), sizeof *root->params);
    root->buffers = calloc((size_t)(nb ? nb : 1), sizeof *root->buffers);
    root->counters = calloc((size_t)(nc ? nc : 1), sizeof *root->counters);
    amp_status s = root->params && root->buffers && root->counters
                       ? AMP_OK : amp_fail(AMP_ERR_OOM, "amp_model_build: out of memory");
    amp_flat_cursor c = {.root = root};
    if (s == AMP_OK) s = amp_flat_node(&c, root, "");
    if (s == AMP_OK) {
        root->n_counters = nc;
        s = amp_flat_check_unique(root);
    }
    if (s != AMP_OK) amp_model_unbuild(root);
    return s;
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
    AMP_TRY(be->memset_zero(be->dev, *block, nbytes));
    if (grads) {
        AMP_TRY(amp_ledger_alloc(m->ctx, AMP_MEM_GRADS, nbytes, grads));
        AMP_TRY(be->memset_zero(be->dev, *grads, nbytes));
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

static void amp_model_mark_built(amp_model *m, void *unused) {
    (void)unused;
    m->built = true;
}

amp_status amp_model_build(amp_model *m) {
    AMP_CHECK_ARG(m);
    amp_model *r = m->root;
    if (r->built) return AMP_OK;
    if (r->kind == AMP_MODULE_SEQUENTIAL && r->n_children == 0)
        return amp_fail(AMP_ERR_STATE, "amp_model_build: the model has no layers");
    AMP_TRY(amp_model_flatten(r));
    amp_status s = amp_named_carve(r, r->params, r->n_params, &r->param_block, &r->grad_block);
    if (s == AMP_OK) s = amp_named_carve(r, r->buffers, r->n_buffers, &r->buffer_block, NULL);
    if (s == AMP_OK) s = amp_model_init_params(r);
    if (s != AMP_OK) {
        amp_model_unbuild(r);
        return s;
    }
    amp_model_walk(r, amp_model_mark_built, NULL);
    return AMP_OK;
}
