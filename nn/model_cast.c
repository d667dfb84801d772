/* Converting a built model to a half type (Apex O2/O3's model.half(), batch norm optionally kept
 * in f32): parameters, gradients and buffers get new blocks of mixed dtypes, each tensor 64-byte
 * aligned as before, and the f32 blocks are freed. */
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

bool amp_model_param_is_norm(const amp_model *m, int i) {
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].kind == AMP_LAYER_BATCHNORM2D &&
            (m->layers[l].weight == i || m->layers[l].bias_param == i))
            return true;
    return false;
}

void amp_model_set_io_cast(amp_model *m, amp_dtype in_dtype, amp_dtype out_dtype) {
    m->in_dtype = in_dtype;
    m->out_dtype = out_dtype;
}

/* Re-homes list[0..n) into a new block in dtypes dts[]; with grads, their gradients too. The
 * values are converted first and the tensors rebound only when every conversion worked, so a
 * failure leaves the model as it was. */
static amp_status amp_recarve(amp_model *m, amp_named_tensor *list, int n, const amp_dtype *dts,
                              void **block, void **grad_block) {
    const amp_backend *be = m->ctx->backend;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += amp_aligned_bytes(list[i].t, dts[i]);
    if (total == 0) return AMP_OK;
    void *nb = NULL, *ng = NULL;
    amp_status s = be->alloc(total, &nb);
    if (s == AMP_OK && grad_block) s = be->alloc(total, &ng);
    if (s == AMP_OK && grad_block) s = be->memset_zero(ng, total);
    for (size_t i = 0, off = 0; s == AMP_OK && i < (size_t)n; i++) {
        const amp_tensor *t = list[i].t;
        s = AMP_BE(be, cast, (char *)nb + off, dts[i], t->data, t->dtype, t->numel);
        off += amp_aligned_bytes(t, dts[i]);
    }
    if (s != AMP_OK) {
        if (nb) be->free(nb);
        if (ng) be->free(ng);
        return amp_fail_context(s, "amp_model_cast");
    }
    for (size_t i = 0, off = 0; i < (size_t)n; i++) {
        amp_tensor *t = list[i].t;
        t->data = (char *)nb + off;
        t->dtype = dts[i];
        if (grad_block && t->grad) {
            t->grad->data = (char *)ng + off;
            t->grad->dtype = dts[i];
            t->grad_written = false;
        }
        off += amp_aligned_bytes(t, dts[i]);
    }
    be->free(*block);
    *block = nb;
    if (grad_block) {
        be->free(*grad_block);
        *grad_block = ng;
    }
    return AMP_OK;
}

amp_status amp_model_cast(amp_model *m, amp_dtype half, bool keep_norm_f32) {
    AMP_CHECK_ARG(m);
    if (half != AMP_F16 && half != AMP_BF16 && half != AMP_F32)
        return amp_fail(AMP_ERR_DTYPE, "amp_model_cast: target %s is not a float type",
                        amp_dtype_name(half));
    AMP_TRY(amp_model_build(m));
    int n = m->n_params > m->n_buffers ? m->n_params : m->n_buffers;
    amp_dtype *dts = malloc((size_t)(n ? n : 1) * sizeof *dts);
    if (!dts) return amp_fail(AMP_ERR_OOM, "amp_model_cast: out of memory");
    for (int i = 0; i < m->n_params; i++)
        dts[i] = keep_norm_f32 && amp_model_param_is_norm(m, i) ? AMP_F32 : half;
    amp_status s = amp_recarve(m, m->params, m->n_params, dts, &m->param_block, &m->grad_block);
    /* Every buffer today is a batch-norm running statistic. */
    for (int i = 0; i < m->n_buffers; i++) dts[i] = keep_norm_f32 ? AMP_F32 : half;
    if (s == AMP_OK) s = amp_recarve(m, m->buffers, m->n_buffers, dts, &m->buffer_block, NULL);
    free(dts);
    return s;
}
