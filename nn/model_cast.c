/* Converting a built model to a half type (Apex O2/O3's model.half(), batch norm optionally kept
 * in f32): parameters, gradients and buffers get new blocks of mixed dtypes, each tensor 64-byte
 * aligned as before, and the f32 blocks are freed. The new blocks are still the model's own
 * storage in the context's memory ledger (AMP_MEM_PARAMS, gradients AMP_MEM_GRADS). */
#include <stdlib.h>

#include "core/ctx.h"
#include "core/error.h"
#include "core/tensor_internal.h"
#include "nn/model_internal.h"

#define AMP_CAST_ALIGN 64

static size_t amp_aligned_bytes(const amp_tensor *t, amp_dtype dt) {
    size_t n = (size_t)t->numel * amp_dtype_size(dt);
    return (n + AMP_CAST_ALIGN - 1) / AMP_CAST_ALIGN * AMP_CAST_ALIGN;
}

/* The dtype a cast to `half` gives an entry of this norm kind. */
static amp_dtype cast_dtype(amp_norm_cast norm, amp_dtype half, bool keep_norm_f32) {
    return norm == AMP_NORM_F32 || (norm == AMP_NORM_KEEP && keep_norm_f32) ? AMP_F32 : half;
}

void amp_model_set_io_cast(amp_model *m, amp_dtype in_dtype, amp_dtype out_dtype) {
    m->in_dtype = in_dtype;
    m->out_dtype = out_dtype;
}

/* A list's new home: one block of values and, for parameters, one of zeroed gradients laid out
 * the same way. Both NULL when the list is empty (nothing moves). */
typedef struct amp_cast_block {
    void *data, *grads;
} amp_cast_block;

static void amp_cast_block_free(amp_ctx *ctx, amp_cast_block *b) {
    amp_ledger_free(ctx, b->data);
    amp_ledger_free(ctx, b->grads);
    b->data = b->grads = NULL;
}

/* Allocates list[0..n)'s new block in dtypes dts[] (with a gradient block when with_grads) and
 * converts the values into it; the tensors themselves are not touched. On failure nothing stays
 * allocated. */
static amp_status amp_cast_fill(amp_ctx *ctx, const amp_named_tensor *list, int n,
                                const amp_dtype *dts, bool with_grads, amp_cast_block *out) {
    const amp_backend *be = ctx->backend;
    *out = (amp_cast_block){0};
    size_t total = 0;
    for (int i = 0; i < n; i++) total += amp_aligned_bytes(list[i].t, dts[i]);
    if (total == 0) return AMP_OK;
    amp_status s = amp_ledger_alloc(ctx, AMP_MEM_PARAMS, total, &out->data);
    if (s == AMP_OK && with_grads) s = amp_ledger_alloc(ctx, AMP_MEM_GRADS, total, &out->grads);
    if (s == AMP_OK && with_grads) s = be->memset_zero(be->dev, out->grads, total);
    for (size_t i = 0, off = 0; s == AMP_OK && i < (size_t)n; i++) {
        const amp_tensor *t = list[i].t;
        s = AMP_BE(be, cast, (char *)out->data + off, dts[i], t->data, t->dtype, t->numel);
        off += amp_aligned_bytes(t, dts[i]);
    }
    if (s != AMP_OK) amp_cast_block_free(ctx, out);
    return s;
}

/* Points list[0..n) (and their gradients, with a gradient block) at the filled block b, then
 * frees the old blocks. Cannot fail: it runs only once every new block is ready. */
static void amp_cast_rebind(amp_ctx *ctx, amp_named_tensor *list, int n,
                            const amp_dtype *dts, amp_cast_block *b, void **block,
                            void **grad_block) {
    if (!b->data) return; /* an empty list keeps its (empty) block */
    for (size_t i = 0, off = 0; i < (size_t)n; i++) {
        amp_tensor *t = list[i].t;
        t->data = (char *)b->data + off;
        t->dtype = dts[i];
        amp_tensor_mark_written(t); /* new storage, maybe a new dtype: caches of it are stale */
        if (b->grads && t->grad) {
            t->grad->data = (char *)b->grads + off;
            t->grad->dtype = dts[i];
            t->grad_written = false;
        }
        off += amp_aligned_bytes(t, dts[i]);
    }
    amp_ledger_free(ctx, *block);
    *block = b->data;
    if (grad_block) {
        amp_ledger_free(ctx, *grad_block);
        *grad_block = b->grads;
    }
}

/* All or nothing: both new homes (parameters with their gradients, then buffers) are allocated
 * and filled before any tensor is rebound, so a failure in either (out of memory, a cast the
 * backend refuses) frees what was made and leaves every tensor's data, dtype and gradient as it
 * was; a half-cast model would have its parameters in one dtype and its buffers in another.
 * Prepare and commit are apart so that several models can be cast all or nothing together. */
amp_status amp_model_cast_prepare(amp_model *m, amp_dtype half, bool keep_norm_f32,
                                  amp_model_cast_plan *plan) {
    AMP_CHECK_ARG(m);
    AMP_CHECK_ARG(plan);
    *plan = (amp_model_cast_plan){0};
    if (half != AMP_F16 && half != AMP_BF16 && half != AMP_F32)
        return amp_fail(AMP_ERR_DTYPE, "amp_model_cast: target %s is not a float type",
                        amp_dtype_name(half));
    AMP_TRY(amp_model_build(m));
    int n = m->n_params + m->n_buffers;
    amp_dtype *dts = malloc((size_t)(n ? n : 1) * sizeof *dts);
    if (!dts) return amp_fail(AMP_ERR_OOM, "amp_model_cast: out of memory");
    amp_dtype *param_dts = dts, *buffer_dts = dts + m->n_params;
    for (int i = 0; i < m->n_params; i++)
        param_dts[i] = cast_dtype(m->params[i].norm, half, keep_norm_f32);
    for (int i = 0; i < m->n_buffers; i++)
        buffer_dts[i] = cast_dtype(m->buffers[i].norm, half, keep_norm_f32);

    amp_cast_block pb, bb = {0};
    amp_status s = amp_cast_fill(m->ctx, m->params, m->n_params, param_dts, true, &pb);
    if (s == AMP_OK) s = amp_cast_fill(m->ctx, m->buffers, m->n_buffers, buffer_dts, false, &bb);
    if (s != AMP_OK) {
        amp_cast_block_free(m->ctx, &pb);
        free(dts);
        return amp_fail_context(s, "amp_model_cast");
    }
    *plan = (amp_model_cast_plan){.dts = dts, .params = pb.data, .grads = pb.grads,
                                  .buffers = bb.data};
    return AMP_OK;
}

void amp_model_cast_commit(amp_model *m, amp_model_cast_plan *plan) {
    amp_cast_block pb = {plan->params, plan->grads}, bb = {plan->buffers, NULL};
    amp_cast_rebind(m->ctx, m->params, m->n_params, plan->dts, &pb, &m->param_block,
                    &m->grad_block);
    amp_cast_rebind(m->ctx, m->buffers, m->n_buffers, plan->dts + m->n_params, &bb, &m->buffer_block,
                    NULL);
    free(plan->dts);
    *plan = (amp_model_cast_plan){0};
}

void amp_model_cast_abort(amp_model *m, amp_model_cast_plan *plan) {
    amp_cast_block pb = {plan->params, plan->grads}, bb = {plan->buffers, NULL};
    amp_cast_block_free(m->ctx, &pb);
    amp_cast_block_free(m->ctx, &bb);
    free(plan->dts);
    *plan = (amp_model_cast_plan){0};
}

amp_status amp_model_cast(amp_model *m, amp_dtype half, bool keep_norm_f32) {
    amp_model_cast_plan plan;
    AMP_TRY(amp_model_cast_prepare(m, half, keep_norm_f32, &plan));
    amp_model_cast_commit(m, &plan);
    return AMP_OK;
}
