/* Tensors: shape checks, creation (owned, step, view), host transfers. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "core/error.h"
#include "core/tensor_internal.h"
#include "core/half.h"

size_t amp_dtype_size(amp_dtype dt) {
    switch (dt) {
    case AMP_F16:
    case AMP_BF16: return 2;
    case AMP_F32:
    case AMP_I32: return 4;
    }
    return 0;
}

const char *amp_dtype_name(amp_dtype dt) {
    switch (dt) {
    case AMP_F32: return "f32";
    case AMP_F16: return "f16";
    case AMP_BF16: return "bf16";
    case AMP_I32: return "i32";
    }
    return "unknown";
}

amp_status amp_shape_check(const char *who, int ndim, const int64_t *shape, int64_t *numel) {
    if (ndim < 1 || ndim > AMP_MAX_DIMS)
        return amp_fail(AMP_ERR_SHAPE, "%s: ndim %d is outside 1..%d", who, ndim, AMP_MAX_DIMS);
    if (!shape) return amp_fail(AMP_ERR_INVALID_ARG, "%s: shape is NULL", who);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1)
            return amp_fail(AMP_ERR_SHAPE, "%s: dimension %d is %" PRId64 ", must be >= 1", who, i,
                            shape[i]);
        if (n > INT64_MAX / shape[i])
            return amp_fail(AMP_ERR_SHAPE, "%s: element count overflows", who);
        n *= shape[i];
    }
    *numel = n;
    return AMP_OK;
}

static amp_status amp_dtype_check(const char *who, amp_dtype dt) {
    if (amp_dtype_size(dt) == 0)
        return amp_fail(AMP_ERR_DTYPE, "%s: unknown dtype %d", who, (int)dt);
    return AMP_OK;
}

static void amp_tensor_fill_header(amp_tensor *t, amp_ctx *ctx, amp_dtype dt, int ndim,
                                   const int64_t *shape, int64_t numel) {
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < AMP_MAX_DIMS; i++) t->shape[i] = i < ndim ? shape[i] : 1;
    t->numel = numel;
    t->ctx = ctx;
    t->backend = ctx->backend;
    t->version_own = 0;
    t->version = &t->version_own;
}

amp_status amp_tensor_create(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape,
                             amp_tensor **out) {
    AMP_CHECK_ARG(ctx);
    AMP_CHECK_ARG(out);
    *out = NULL;
    int64_t numel;
    AMP_TRY(amp_dtype_check(__func__, dt));
    AMP_TRY(amp_shape_check(__func__, ndim, shape, &numel));
    amp_tensor *t = calloc(1, sizeof *t);
    if (!t) return amp_fail(AMP_ERR_OOM, "amp_tensor_create: out of memory");
    amp_tensor_fill_header(t, ctx, dt, ndim, shape, numel);
    size_t nbytes = (size_t)numel * amp_dtype_size(dt);
    amp_status s = amp_ledger_alloc(ctx, AMP_MEM_OTHER, nbytes, &t->data);
    if (s == AMP_OK) s = ctx->backend->memset_zero(ctx->backend->dev, t->data, nbytes);
    if (s != AMP_OK) {
        amp_ledger_free(ctx, t->data);
        free(t);
        return amp_fail_context(s, "amp_tensor_create");
    }
    t->flags = AMP_TENSOR_OWNED;
    amp_ctx_hold(ctx);
    *out = t;
    return AMP_OK;
}

amp_status amp_tensor_from_host(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape,
                                const void *host, amp_tensor **out) {
    AMP_CHECK_ARG(host);
    AMP_TRY(amp_tensor_create(ctx, dt, ndim, shape, out));
    amp_status s = amp_tensor_copy_from_host(*out, host, amp_tensor_nbytes(*out));
    if (s != AMP_OK) {
        amp_tensor_free(*out);
        *out = NULL;
    }
    return s;
}

amp_status amp_tensor_view(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape, void *data,
                           amp_tensor **out) {
    int64_t numel;
    AMP_TRY(amp_shape_check(__func__, ndim, shape, &numel));
    amp_tensor *t = calloc(1, sizeof *t);
    if (!t) return amp_fail(AMP_ERR_OOM, "amp_tensor_view: out of memory");
    amp_tensor_fill_header(t, ctx, dt, ndim, shape, numel);
    t->data = data;
    t->flags = AMP_TENSOR_VIEW;
    *out = t;
    return AMP_OK;
}

amp_status amp_tensor_step(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape,
                           amp_tensor **out) {
    int64_t numel;
    AMP_TRY(amp_shape_check(__func__, ndim, shape, &numel));
    amp_tensor *t;
    AMP_TRY(amp_ctx_step_alloc(ctx, sizeof *t, (void **)&t));
    amp_tensor_fill_header(t, ctx, dt, ndim, shape, numel);
    AMP_TRY(amp_arena_alloc(&ctx->data_arena, (size_t)numel * amp_dtype_size(dt), &t->data));
    t->flags = AMP_TENSOR_STEP | AMP_TENSOR_ARENA_DATA;
    if (ctx->bw_releases) t->flags |= AMP_TENSOR_BW_TEMP;
    t->step_gen = ctx->step_gen;
    t->region = ctx->region_gen;
    *out = t;
    return AMP_OK;
}

void amp_tensor_step_release(amp_tensor *t) {
    if (!t || !(t->flags & AMP_TENSOR_BW_TEMP)) return;
    /* While a recomputation runs, data_arena is its own (nn/recompute.c): what the rest of the
     * backward made goes back after it, to the arena it came from. */
    amp_ctx *ctx = t->ctx;
    if (ctx->recompute_depth > 0 && !amp_arena_holds_since(&ctx->data_arena, AMP_ARENA_START,
                                                           t->data))
        return;
    t->flags &= (uint16_t)~(AMP_TENSOR_BW_TEMP | AMP_TENSOR_ARENA_DATA); /* given back once */
    amp_arena_give_back(&ctx->data_arena, t->data, amp_tensor_nbytes(t));
}

amp_status amp_tensor_step_like(const amp_tensor *like, amp_dtype dt, amp_tensor **out) {
    return amp_tensor_step(like->ctx, dt, like->ndim, like->shape, out);
}

amp_status amp_tensor_step_over(const amp_tensor *like, amp_dtype dt, void *data,
                                amp_tensor **out) {
    amp_ctx *ctx = like->ctx;
    amp_tensor *t;
    AMP_TRY(amp_ctx_step_alloc(ctx, sizeof *t, (void **)&t));
    amp_tensor_fill_header(t, ctx, dt, like->ndim, like->shape, like->numel);
    t->data = data;
    t->flags = AMP_TENSOR_STEP;
    t->step_gen = ctx->step_gen;
    t->region = ctx->region_gen;
    *out = t;
    return AMP_OK;
}

amp_status amp_tensor_step_shared(const amp_tensor *like, amp_dtype dt, void *data,
                                  amp_tensor **out) {
    AMP_TRY(amp_tensor_step_over(like, dt, data, out));
    (*out)->flags |= AMP_TENSOR_SHARED;
    return AMP_OK;
}

amp_status amp_tensor_check_writable(const char *who, const char *arg, const amp_tensor *t) {
    if (!t || !(t->flags & AMP_TENSOR_SHARED)) return AMP_OK;
    return amp_fail(AMP_ERR_STATE, "%s: %s is autocast's half copy of a parameter, kept from "
                    "step to step and read-only; write to a tensor of your own (amp_tensor_create)",
                    who, arg);
}

void amp_tensor_free(amp_tensor *t) {
    if (!t || (t->flags & AMP_TENSOR_STEP)) return;
    amp_ctx *ctx = t->ctx;
    /* The live tape reads it: its backward would read freed memory, so it refuses instead. */
    if (ctx->n_tape > 0 && t->tape_gen == ctx->tape_gen + 1) ctx->tape_lost_input = true;
    bool owned = t->flags & AMP_TENSOR_OWNED;
    if (owned) amp_ctx_forget(ctx, t); /* an optimizer made over it stops using it */
    amp_cast_shadow_forget(t);
    if (owned) amp_ledger_free(ctx, t->data);
    if (t->grad && t->grad != t && !(t->grad->flags & AMP_TENSOR_STEP)) amp_tensor_free(t->grad);
    free(t);
    if (owned) amp_ctx_drop(ctx);
}

size_t amp_block_layout(const int64_t *numel, int n, size_t elem_size, size_t align,
                        size_t *offsets) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (offsets) offsets[i] = total;
        size_t nbytes = (size_t)numel[i] * elem_size;
        total += (nbytes + align - 1) / align * align;
    }
    return total;
}

amp_status amp_tensor_check_live(const char *who, const char *arg, const amp_tensor *t) {
    if (!t) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument '%s' is NULL", who, arg);
    if (!(t->flags & AMP_TENSOR_STEP)) return AMP_OK;
    if (t->flags & AMP_TENSOR_DROPPED)
        return amp_fail(AMP_ERR_STATE, "%s: %s was dropped (amp_tensor_drop: its caller said it "
                        "would not use it again); drop a tensor after its last use", who, arg);
    if (t->step_gen != t->ctx->step_gen)
        return amp_fail(AMP_ERR_STATE, "%s: %s was made in a step that has ended (amp_zero_grad or "
                        "amp_ctx_reset_step released it); recompute it in this step", who, arg);
    if (t->region != t->ctx->region_gen && !(t->flags & AMP_TENSOR_KEPT))
        return amp_fail(AMP_ERR_STATE, "%s: %s was released by a release point of the step (an "
                        "amp_backward, or the next amp_model_forward with gradients disabled, "
                        "frees what was made before it); amp_tensor_keep it before then to read "
                        "it until the step ends", who, arg);
    return AMP_OK;
}

size_t amp_tensor_nbytes(const amp_tensor *t) {
    AMP_CHECK_ARG_OR(t, 0);
    return (size_t)t->numel * amp_dtype_size(t->dtype);
}

static amp_status amp_nbytes_check(const char *who, const amp_tensor *t, size_t nbytes) {
    if (nbytes != amp_tensor_nbytes(t)) {
        char shape[96];
        return amp_fail(AMP_ERR_SHAPE,
                        "%s: buffer of %zu bytes for a tensor of %zu bytes (%" PRId64 " elements "
                        "of %s, %zu bytes each, shape %s)%s", who, nbytes, amp_tensor_nbytes(t),
                        t->numel, amp_dtype_name(t->dtype), amp_dtype_size(t->dtype),
                        amp_shape_str(t, shape, sizeof shape),
                        t->dtype != AMP_F32 && nbytes == (size_t)t->numel * sizeof(float)
                            ? ": amp_tensor_to_host_f32 reads it into floats"
                            : "");
    }
    return AMP_OK;
}

amp_status amp_tensor_to_host(const amp_tensor *t, void *host, size_t nbytes) {
    AMP_TRY(amp_tensor_check_live(__func__, "t", t));
    AMP_CHECK_ARG(host);
    AMP_TRY(amp_nbytes_check(__func__, t, nbytes));
    return t->backend->copy_to_host(t->backend->dev, host, t->data, nbytes);
}

/* Element i of raw host bytes of dtype dt as a float. Read through memcpy: raw may lie inside
 * the float buffer being written (amp_tensor_to_host_f32), so no typed pointer may alias it. */
static float amp_widen_raw(const unsigned char *raw, amp_dtype dt, size_t i) {
    uint16_t h;
    int32_t v;
    float f;
    switch (dt) {
    case AMP_F16: memcpy(&h, raw + 2 * i, 2); return amp_f16_bits_to_f32(h);
    case AMP_BF16: memcpy(&h, raw + 2 * i, 2); return amp_bf16_bits_to_f32(h);
    case AMP_I32: memcpy(&v, raw + 4 * i, 4); return (float)v;
    default: memcpy(&f, raw + 4 * i, 4); return f;
    }
}

amp_status amp_tensor_to_host_f32(const amp_tensor *t, float *host, size_t nbytes) {
    AMP_TRY(amp_tensor_check_live(__func__, "t", t));
    AMP_CHECK_ARG(host);
    size_t n = (size_t)t->numel;
    if (nbytes != n * sizeof(float)) {
        char shape[96];
        return amp_fail(AMP_ERR_SHAPE, "%s: buffer of %zu bytes for %zu floats (a %s tensor of "
                        "shape %s): want %zu bytes", __func__, nbytes, n, amp_dtype_name(t->dtype),
                        amp_shape_str(t, shape, sizeof shape), n * sizeof(float));
    }
    if (t->dtype == AMP_F32)
        return t->backend->copy_to_host(t->backend->dev, host, t->data, nbytes);
    /* The stored elements land at the buffer's end, each narrower than the float it becomes: the
     * widening runs from the front, where it never overtakes what it has yet to read. */
    size_t es = amp_dtype_size(t->dtype);
    unsigned char *raw = (unsigned char *)host + nbytes - n * es;
    AMP_TRY(t->backend->copy_to_host(t->backend->dev, raw, t->data, n * es));
    for (size_t i = 0; i < n; i++) host[i] = amp_widen_raw(raw, t->dtype, i);
    return AMP_OK;
}

amp_status amp_tensor_argmax_rows(const amp_tensor *t, int32_t *idx, int64_t n_rows) {
    AMP_TRY(amp_tensor_check_live(__func__, "t", t));
    AMP_CHECK_ARG(idx);
    if (n_rows != t->shape[0]) {
        char shape[96];
        return amp_fail(AMP_ERR_SHAPE, "%s: n_rows %lld for a tensor of shape %s (want its first "
                        "dimension)", __func__, (long long)n_rows, amp_shape_str(t, shape, sizeof shape));
    }
    int64_t cols = t->numel / n_rows;
    if (cols > INT32_MAX)
        return amp_fail(AMP_ERR_SHAPE, "%s: rows of %lld elements do not fit int32 positions",
                        __func__, (long long)cols);
    size_t nbytes = (size_t)t->numel * sizeof(float);
    float *v = malloc(nbytes);
    if (!v) return amp_fail(AMP_ERR_OOM, "%s: %zu bytes for the host copy", __func__, nbytes);
    amp_status s = amp_tensor_to_host_f32(t, v, nbytes);
    for (int64_t r = 0; s == AMP_OK && r < n_rows; r++) {
        const float *row = v + r * cols;
        int64_t best = 0;
        for (int64_t j = 1; j < cols && row[best] == row[best]; j++)
            if (row[j] > row[best] || row[j] != row[j]) best = j;
        idx[r] = (int32_t)best;
    }
    free(v);
    return s;
}

amp_status amp_tensor_copy_from_host(amp_tensor *t, const void *host, size_t nbytes) {
    AMP_TRY(amp_tensor_check_live(__func__, "t", t));
    AMP_TRY(amp_tensor_check_writable(__func__, "t", t));
    AMP_CHECK_ARG(host);
    AMP_TRY(amp_nbytes_check(__func__, t, nbytes));
    amp_tensor_mark_written(t);
    return t->backend->copy_from_host(t->backend->dev, t->data, host, nbytes);
}

amp_status amp_tensor_item(const amp_tensor *t, float *out) {
    AMP_TRY(amp_tensor_check_live(__func__, "t", t));
    AMP_CHECK_ARG(out);
    unsigned char raw[4]; /* element 0 only: a host copy and a widening, no kernel */
    AMP_TRY(t->backend->copy_to_host(t->backend->dev, raw, t->data, amp_dtype_size(t->dtype)));
    *out = amp_widen_raw(raw, t->dtype, 0);
    return AMP_OK;
}

const char *amp_shape_str(const amp_tensor *t, char *buf, size_t size) {
    size_t off = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < t->ndim && off < size; i++)
        off += (size_t)snprintf(buf + off, size - off, i ? ", %" PRId64 : "%" PRId64, t->shape[i]);
    if (off < size) snprintf(buf + off, size - off, "]");
    return buf;
}

bool amp_same_shape(const amp_tensor *a, const amp_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

amp_status amp_backend_missing(const amp_backend *be, const char *entry) {
    return amp_fail(AMP_ERR_UNSUPPORTED, "backend %s has no '%s' kernel", be->name, entry);
}

amp_dtype amp_tensor_dtype(const amp_tensor *t) {
    AMP_CHECK_ARG_OR(t, AMP_F32);
    return t->dtype;
}

int amp_tensor_ndim(const amp_tensor *t) {
    AMP_CHECK_ARG_OR(t, 0);
    return t->ndim;
}

int64_t amp_tensor_dim(const amp_tensor *t, int d) {
    AMP_CHECK_ARG_OR(t, -1);
    return d >= 0 && d < t->ndim ? t->shape[d] : -1;
}

const int64_t *amp_tensor_shape(const amp_tensor *t) {
    AMP_CHECK_ARG_OR(t, NULL);
    return t->shape;
}

int64_t amp_tensor_numel(const amp_tensor *t) {
    AMP_CHECK_ARG_OR(t, 0);
    return t->numel;
}

amp_ctx *amp_tensor_ctx(const amp_tensor *t) {
    AMP_CHECK_ARG_OR(t, NULL);
    return t->ctx;
}

bool amp_tensor_requires_grad(const amp_tensor *t) {
    AMP_CHECK_ARG_OR(t, false);
    return t->requires_grad;
}
