/* Device batches that do not make the host wait (include/amp/data.h): two pairs of device
 * tensors alternate, each filled through the backend's upload_async.
 *
 * Ordering (no host wait anywhere): the pair of put k was last read by the step of put k - 2.
 * Every put records a mark of the compute work queued so far (through the step of the previous
 * put); the copy of put k waits for the mark recorded at put k - 1, which covers the step of put
 * k - 2 and nothing later, so it overlaps the step of put k - 1. The backend makes the compute
 * stream wait for the copy before the step of put k reads it.
 *
 * A pair made new (the first two puts, the smaller last batch of an epoch) is the exception: its
 * blocks come from the caching allocator, which orders a block's reuse only on the compute
 * stream, so compute queued before this put may still write them (the zero fill of
 * amp_tensor_create, a step tensor freed just before); the copy into a new pair waits for the mark
 * of this put instead, which covers everything queued so far. */
#include <stdlib.h>

#include "amp/data.h"
#include "core/ctx.h"
#include "core/error.h"
#include "core/tensor_internal.h"

#define AMP_STAGER_PAIRS 2

struct amp_stager {
    amp_ctx *ctx;
    amp_tensor *x[AMP_STAGER_PAIRS], *y[AMP_STAGER_PAIRS];
    bool fresh[AMP_STAGER_PAIRS]; /* made since its last successful copy: see the header */
    void *mark[AMP_STAGER_PAIRS]; /* mark[k % 2]: recorded at put k */
    int64_t n_puts;
};

amp_status amp_stager_create(amp_ctx *ctx, amp_stager **out) {
    AMP_CHECK_ARG(ctx);
    AMP_CHECK_ARG(out);
    *out = calloc(1, sizeof **out);
    if (!*out) return amp_fail(AMP_ERR_OOM, "amp_stager_create: out of memory");
    (*out)->ctx = ctx;
    amp_ctx_hold(ctx);
    return AMP_OK;
}

void amp_stager_free(amp_stager *s) {
    if (!s) return;
    const amp_backend *be = s->ctx->backend;
    for (int k = 0; k < AMP_STAGER_PAIRS; k++) {
        amp_tensor_free(s->x[k]);
        amp_tensor_free(s->y[k]);
        if (be->event_free) be->event_free(be->dev, s->mark[k]);
    }
    amp_ctx *ctx = s->ctx;
    free(s);
    amp_ctx_drop(ctx);
}

/* Whether t has the shape (ndim, shape) and dtype dt. */
static bool amp_stager_fits(const amp_tensor *t, amp_dtype dt, int ndim, const int64_t *shape) {
    if (!t || t->dtype != dt || t->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d]) return false;
    return true;
}

/* Pair k shaped for b: re-made when a shape changes. The old pair goes first (its memory may
 * be what the new one needs); when the new x or y cannot be made, the slot is left empty (both
 * NULL), never half made, and the next put makes it again. A batch made by hand with ndim 0 is
 * an image batch of four dimensions, as before ndim existed. */
static amp_status amp_stager_shape(amp_stager *s, int k, const amp_batch *b) {
    int x_ndim = b->ndim ? b->ndim : 4;
    amp_dtype y_dt = b->targets ? AMP_F32 : AMP_I32;
    int y_ndim = b->targets ? b->target_ndim : 1;
    const int64_t *y_shape = b->targets ? b->target_shape : &b->n;
    if (amp_stager_fits(s->x[k], AMP_F32, x_ndim, b->shape) &&
        amp_stager_fits(s->y[k], y_dt, y_ndim, y_shape))
        return AMP_OK;
    amp_tensor_free(s->x[k]);
    amp_tensor_free(s->y[k]);
    s->x[k] = s->y[k] = NULL;
    amp_tensor *nx = NULL, *ny = NULL;
    amp_status st = amp_tensor_create(s->ctx, AMP_F32, x_ndim, b->shape, &nx);
    if (st == AMP_OK) st = amp_tensor_create(s->ctx, y_dt, y_ndim, y_shape, &ny);
    if (st != AMP_OK) {
        amp_tensor_free(nx);
        return amp_fail_context(st, "amp_stager_put: a batch of %lld samples", (long long)b->n);
    }
    s->x[k] = nx;
    s->y[k] = ny;
    s->fresh[k] = true;
    return AMP_OK;
}

amp_status amp_stager_put(amp_stager *s, const amp_batch *b, amp_tensor **x, amp_tensor **y) {
    AMP_CHECK_ARG(s);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    *x = *y = NULL;
    if (b->n <= 0 || !b->x || !(b->y || b->targets) || b->shape[0] != b->n ||
        (b->targets && b->target_shape[0] != b->n) || b->ndim < 0 || b->ndim > 4 ||
        (b->targets && (b->target_ndim < 1 || b->target_ndim > 4)))
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_stager_put: batch of %lld samples with shape[0] "
                        "%lld, ndim %d (the end-of-epoch mark has none to copy)", (long long)b->n,
                        (long long)b->shape[0], b->ndim);
    const amp_backend *be = s->ctx->backend;
    int k = (int)(s->n_puts % AMP_STAGER_PAIRS);
    void *after = s->n_puts > 0 ? s->mark[(s->n_puts - 1) % AMP_STAGER_PAIRS] : NULL;
    AMP_TRY(amp_stager_shape(s, k, b));
    AMP_TRY(AMP_DEV(be, mark, &s->mark[k]));
    if (s->fresh[k]) after = s->mark[k]; /* new blocks: after all compute queued so far */
    AMP_TRY(AMP_DEV(be, upload_async, s->x[k]->data, b->x, (size_t)amp_tensor_nbytes(s->x[k]),
                   after));
    AMP_TRY(AMP_DEV(be, upload_async, s->y[k]->data, b->targets ? (const void *)b->targets : b->y,
                   (size_t)amp_tensor_nbytes(s->y[k]), after));
    s->fresh[k] = false;
    s->n_puts++;
    *x = s->x[k];
    *y = s->y[k];
    return AMP_OK;
}
