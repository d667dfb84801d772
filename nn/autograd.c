/* Tape recording, gradient sinks and the reverse walk of amp_backward. */
#include "nn/autograd.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"

amp_status amp_record(amp_tensor *out, const char *op, const char *args, amp_backward_fn backward,
                      int n_in, amp_tensor *const *in, size_t aux_size, amp_tape_node **node) {
    *node = NULL;
    amp_ctx *ctx = out->ctx;
    if (ctx->trace) ctx->trace(ctx->trace_user, op, (const amp_tensor *const *)in, n_in, out);
    if (!ctx->grad_enabled) return AMP_OK;
    bool any = false;
    for (int i = 0; i < n_in; i++) any |= in[i] && in[i]->requires_grad;
    if (!any) return AMP_OK;
    return amp_record_always(out, op, args, backward, n_in, in, aux_size, node);
}

amp_status amp_record_always(amp_tensor *out, const char *op, const char *args,
                             amp_backward_fn backward, int n_in, amp_tensor *const *in,
                             size_t aux_size, amp_tape_node **node) {
    *node = NULL;
    amp_ctx *ctx = out->ctx;
    if (!ctx->grad_enabled) return AMP_OK;
    amp_tape_node *n;
    AMP_TRY(amp_ctx_step_alloc(ctx, sizeof *n, (void **)&n));
    n->op = op;
    n->args = args;
    n->backward = backward;
    n->out = out;
    n->n_in = n_in;
    n->out_version = *out->version;
    for (int i = 0; i < n_in; i++) {
        n->in[i] = in[i];
        if (!in[i]) continue;
        n->in_version[i] = *in[i]->version;
        if (in[i]->flags & AMP_TENSOR_STEP) in[i]->data_readers++;
        else in[i]->tape_gen = ctx->tape_gen + 1;
    }
    out->data_readers++;
    if (aux_size) AMP_TRY(amp_ctx_step_alloc(ctx, aux_size, &n->aux));
    AMP_TRY(amp_ctx_tape_push(ctx, n));
    out->requires_grad = true;
    out->grad_written = false;
    out->node = n;
    *node = n;
    return AMP_OK;
}

static void amp_unread(amp_tensor *t) {
    if (t && (t->flags & AMP_TENSOR_STEP) && t->data_readers > 0) t->data_readers--;
}

void amp_node_unread(amp_tape_node *node, unsigned in_mask, bool out) {
    if (!node) return; /* nothing recorded: nothing counted */
    for (int i = 0; i < node->n_in; i++)
        if ((in_mask & (1u << i)) && !(node->unread & (1u << i))) {
            amp_unread(node->in[i]);
            node->unread |= 1u << i;
        }
    if (out && !(node->unread & AMP_NODE_UNREAD_OUT)) {
        amp_unread(node->out);
        node->unread |= AMP_NODE_UNREAD_OUT;
    }
}

/* A kept tensor's gradient is kept with it (core/step_regions.c), so it is never given back:
 * AMP_TENSOR_BW_TEMP on a gradient means it may go once its node is done. */
static void amp_grad_keep_with(amp_tensor *t) {
    if (t->flags & AMP_TENSOR_KEPT) t->grad->flags &= (uint16_t)~AMP_TENSOR_BW_TEMP;
}

/* Leaves made by the user get an owned gradient on first need; step tensors a step one. */
static amp_status amp_grad_ensure(amp_tensor *t) {
    if (t->grad) return AMP_OK;
    if (!(t->flags & AMP_TENSOR_STEP))
        return amp_tensor_create(t->ctx, t->dtype, t->ndim, t->shape, &t->grad);
    AMP_TRY(amp_tensor_step_like(t, t->dtype, &t->grad));
    amp_grad_keep_with(t);
    return AMP_OK;
}

/* A leaf's temporary (a parameter's later gradient contribution, added at once) is scratch that
 * goes when no such temporary is open any more, so that accumulating over micro-batches or uses
 * holds one of them at a time; an intermediate tensor's is step memory of the region. */
amp_status amp_grad_begin(amp_tensor *t, amp_grad_sink *s) {
    *s = (amp_grad_sink){.t = t};
    if (!t || !t->requires_grad) return AMP_OK;
    AMP_TRY(amp_grad_ensure(t));
    if (!t->grad_written) {
        s->buf = t->grad;
    } else if (t->flags & AMP_TENSOR_STEP) {
        AMP_TRY(amp_tensor_step_like(t, t->dtype, &s->buf));
    } else {
        amp_ctx *ctx = t->ctx;
        void *data;
        AMP_TRY(amp_arena_alloc(&ctx->sink_arena, amp_tensor_nbytes(t), &data));
        AMP_TRY(amp_tensor_step_over(t, t->dtype, data, &s->buf));
        s->scratch = true;
        ctx->n_open_sinks++;
    }
    return AMP_OK;
}

amp_status amp_grad_end(amp_grad_sink *s) {
    if (!s->buf) return AMP_OK;
    amp_tensor *t = s->t;
    if (s->buf != t->grad) {
        AMP_TRY(AMP_BE(t->backend, axpy, t->dtype, t->numel, 1.0f, s->buf->data, t->grad->data));
        amp_tensor_step_release(s->buf); /* a step tensor's added temporary */
    }
    t->grad_written = true;
    if (s->scratch && --t->ctx->n_open_sinks == 0)
        amp_arena_reset_to(&t->ctx->sink_arena, AMP_ARENA_START);
    return AMP_OK;
}

amp_status amp_grad_target(amp_tensor *t, amp_tensor **grad, float *beta) {
    AMP_TRY(amp_grad_ensure(t));
    *grad = t->grad;
    *beta = t->grad_written ? 1.0f : 0.0f;
    return AMP_OK;
}

void amp_grad_mark_written(amp_tensor *t) { t->grad_written = true; }

amp_status amp_grad_accumulate(amp_tensor *t, const amp_tensor *src, float alpha) {
    if (!t || !t->requires_grad) return AMP_OK;
    AMP_TRY(amp_grad_ensure(t));
    const amp_backend *be = t->backend;
    if (t->grad_written)
        AMP_TRY(AMP_BE(be, axpy, t->dtype, t->numel, alpha, src->data, t->grad->data));
    else if (alpha == 1.0f)
        AMP_TRY(AMP_DEV(be, copy, t->grad->data, src->data, amp_tensor_nbytes(t)));
    else
        AMP_TRY(AMP_BE(be, unary, AMP_UNARY_SCALE, t->dtype, t->numel, src->data, alpha, t->grad->data));
    t->grad_written = true;
    return AMP_OK;
}

amp_status amp_grad_accumulate_cast(amp_tensor *t, const amp_tensor *src) {
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(t, &s));
    if (s.buf)
        AMP_TRY(AMP_BE(src->backend, cast, s.buf->data, t->dtype, src->data, src->dtype,
                       src->numel));
    return amp_grad_end(&s);
}

/* Taking dy over is safe when nothing reads it as out's gradient any more: out's node is done
 * (the reverse walk), the graph goes with this backward (a retained graph's next backward writes
 * out's gradient again) and nobody kept out. t's own later contributions then add into dy's
 * memory, which is t's alone from here on. */
amp_status amp_grad_pass(amp_tape_node *node, amp_tensor *t) {
    if (!t || !t->requires_grad) return AMP_OK;
    amp_tensor *out = node->out, *dy = out->grad;
    if (t->ctx->bw_releases && !t->grad_written && (t->flags & AMP_TENSOR_STEP) &&
        (out->flags & (AMP_TENSOR_STEP | AMP_TENSOR_KEPT)) == AMP_TENSOR_STEP &&
        t->dtype == dy->dtype && t->numel == dy->numel && t->backend == dy->backend) {
        AMP_TRY(amp_tensor_step_over(t, t->dtype, dy->data, &t->grad));
        /* The memory is t's now: given back when t's node is done, not out's. */
        t->grad->flags |= dy->flags & AMP_TENSOR_BW_TEMP;
        dy->flags &= (uint16_t)~AMP_TENSOR_BW_TEMP;
        amp_grad_keep_with(t);
        t->grad_written = true;
        return AMP_OK;
    }
    return amp_grad_accumulate(t, dy, 1.0f);
}

/* Whether t's data can become t's gradient: t and every tensor whose data it views were
 * dropped by their callers (amp_tensor_drop: nobody reads them again), each is read by one
 * thing only (t by the node now running, each base by the view below it), the data is the base's
 * own in this region, all of it (no narrower view), and the graph goes with this backward. */
static amp_tensor *amp_grad_over_owner(const amp_tensor *t) {
    amp_ctx *ctx = t->ctx;
    if (!ctx->bw_releases || ctx->recompute_depth > 0 || !t->requires_grad || t->grad_written)
        return NULL;
    amp_tensor *o = (amp_tensor *)t;
    for (;;) {
        if ((o->flags & (AMP_TENSOR_STEP | AMP_TENSOR_KEPT | AMP_TENSOR_DROPPED)) !=
                (AMP_TENSOR_STEP | AMP_TENSOR_DROPPED) ||
            o->data_readers != 1 || o->data != t->data ||
            amp_tensor_nbytes(o) != amp_tensor_nbytes(t))
            return NULL;
        if (!o->view_of) break;
        o = o->view_of;
    }
    if (!(o->flags & AMP_TENSOR_ARENA_DATA) ||
        !amp_arena_holds_since(&ctx->data_arena, ctx->region_mark, o->data))
        return NULL;
    return o;
}

amp_status amp_grad_over_input(amp_tensor *t, amp_tensor **grad) {
    *grad = NULL;
    amp_tensor *owner = amp_grad_over_owner(t);
    if (!owner) return AMP_OK;
    AMP_TRY(amp_tensor_step_over(t, t->dtype, t->data, &t->grad));
    /* The data is the gradient's now: given back when the gradient's last reader is done (as a
     * backward's temporary), never by its first owner. */
    owner->flags &= (uint16_t)~AMP_TENSOR_ARENA_DATA;
    t->grad->flags |= AMP_TENSOR_BW_TEMP | AMP_TENSOR_ARENA_DATA;
    t->grad_written = true;
    *grad = t->grad;
    return AMP_OK;
}

amp_status amp_autograd_walk(amp_ctx *ctx, int from, const char *where, bool observed) {
    const amp_backward_observer *obs = observed ? ctx->bw_observer : NULL;
    void *user = ctx->bw_observer_user;
    amp_status s = AMP_OK;
    for (int i = ctx->n_tape - 1; i >= from && s == AMP_OK; i--) {
        amp_tape_node *n = ctx->tape[i];
        if (n->out->grad_written) { /* else its output did not reach the loss */
            s = n->backward(n, n->out->grad);
            if (s != AMP_OK) { /* the kernel's name gives way to the op's */
                char who[160];
                snprintf(who, sizeof who, "%s%sbackward of %s", where ? where : "",
                         where ? ": " : "", n->op);
                s = amp_fail_as(s, who);
            }
        }
        if (s == AMP_OK && obs) s = obs->node_done(user, n);
        /* Every reader of out's gradient is done (its consumers came later on the tape): a
         * gradient this backward made goes back to the arena for the nodes still to run. */
        if (s == AMP_OK) amp_tensor_step_release(n->out->grad);
    }
    return s;
}

amp_status amp_autograd_backward(amp_tensor *loss, float seed_value, bool retain_graph) {
    return amp_autograd_backward_seeded(loss, seed_value, NULL, retain_graph);
}

amp_status amp_autograd_check_loss(const amp_tensor *loss) {
    AMP_TRY(amp_tensor_check_live("amp_backward", "loss", loss));
    if (loss->numel != 1)
        return amp_fail(AMP_ERR_SHAPE, "amp_backward: loss has %lld elements, want 1 (reduce it first)",
                        (long long)loss->numel);
    if (loss->requires_grad && !loss->node && (loss->flags & AMP_TENSOR_STEP))
        return amp_fail(AMP_ERR_STATE, "amp_backward: the graph of this loss was released by an "
                                       "earlier amp_backward (backward twice: pass retain_graph "
                                       "to the first to keep it)");
    if (!loss->requires_grad || !loss->node)
        return amp_fail(AMP_ERR_STATE, "amp_backward: loss does not require grad (no parameter or "
                                       "input that requires grad reached it, or grads are disabled)");
    if (loss->ctx->tape_lost_input)
        return amp_fail(AMP_ERR_STATE, "amp_backward: a caller-owned tensor this graph reads was "
                        "freed (amp_tensor_free) before backward; free such tensors after "
                        "amp_backward or amp_ctx_reset_step");
    return AMP_OK;
}

amp_status amp_autograd_backward_seeded(amp_tensor *loss, float seed_value,
                                        const float *seed_scalar, bool retain_graph) {
    AMP_TRY(amp_autograd_check_loss(loss));
    AMP_TRY(amp_autograd_check_versions(loss)); /* before anything below writes */
    amp_ctx *ctx = loss->ctx;
    /* Gradients of intermediate tensors belong to one backward: a retained graph's earlier
     * backward must not leak into this one. Leaves (parameters) keep accumulating. */
    for (int i = 0; i < ctx->n_tape; i++) ctx->tape[i]->out->grad_written = false;
    AMP_TRY(amp_grad_ensure(loss));
    if (seed_scalar)
        AMP_TRY(AMP_BE(loss->backend, fill_scalar, loss->grad->data, loss->grad->dtype, 1,
                       seed_scalar, 1.0f));
    else
        AMP_TRY(AMP_BE(loss->backend, fill, loss->grad->data, loss->grad->dtype, 1, seed_value));
    loss->grad_written = true;
    const amp_backward_observer *obs = ctx->bw_observer;
    void *user = ctx->bw_observer_user;
    amp_status s = obs ? obs->begin(user, ctx->tape, ctx->n_tape) : AMP_OK;
    ctx->bw_releases = !retain_graph;
    if (s == AMP_OK) s = amp_autograd_walk(ctx, 0, NULL, true);
    ctx->bw_releases = false;
    if (obs) {
        amp_status e = obs->end(user, s);
        if (s == AMP_OK) s = e;
    }
    if (retain_graph) return s;
    for (int i = 0; i < ctx->n_tape; i++) ctx->tape[i]->out->node = NULL;
    amp_ctx_tape_clear(ctx); /* a second backward through the same graph is an error, as PyTorch */
    ctx->autocast.n_cache = 0; /* cached casts belonged to that graph */
    /* A release point (core/step_regions.c): the graph's memory goes, the loss stays. */
    amp_status r = amp_ctx_release_region(ctx, loss, NULL);
    return s == AMP_OK ? r : s;
}

bool amp_set_grad_enabled(amp_ctx *ctx, bool enabled) {
    AMP_CHECK_ARG_OR(ctx, false);
    bool prev = ctx->grad_enabled;
    ctx->grad_enabled = enabled;
    return prev;
}

amp_status amp_tensor_set_requires_grad(amp_tensor *t, bool requires_grad) {
    AMP_CHECK_ARG(t);
    if (t->node)
        return amp_fail(AMP_ERR_STATE, "amp_tensor_set_requires_grad: only leaf tensors can change it");
    if (requires_grad && t->dtype == AMP_I32)
        return amp_fail(AMP_ERR_DTYPE, "amp_tensor_set_requires_grad: i32 tensors have no gradient");
    t->requires_grad = requires_grad;
    return AMP_OK;
}

void amp_tensor_zero_grad(amp_tensor *t) {
    if (t) t->grad_written = false;
}

amp_status amp_tensor_get_grad(const amp_tensor *t, amp_tensor **out) {
    AMP_CHECK_ARG(t);
    AMP_CHECK_ARG(out);
    if (!t->grad || !t->grad_written) {
        *out = NULL;
        return amp_fail(AMP_ERR_STATE, "amp_tensor_get_grad: no gradient since the last zero_grad");
    }
    *out = t->grad;
    return AMP_OK;
}

amp_status amp_check_tensor(const char *op, const char *arg, const amp_tensor *t, int ndim) {
    AMP_TRY(amp_tensor_check_live(op, arg, t));
    if (ndim > 0 && t->ndim != ndim) {
        char b[64];
        return amp_fail(AMP_ERR_SHAPE, "%s: %s has shape %s, want %d dimensions", op, arg,
                        amp_shape_str(t, b, sizeof b), ndim);
    }
    return AMP_OK;
}

amp_status amp_check_float(const char *op, const char *arg, const amp_tensor *t) {
    if (t->dtype != AMP_F32 && t->dtype != AMP_F16 && t->dtype != AMP_BF16)
        return amp_fail(AMP_ERR_DTYPE, "%s: %s has dtype %s, want f32, f16 or bf16", op, arg,
                        amp_dtype_name(t->dtype));
    return AMP_OK;
}

amp_status amp_check_same_dtype(const char *op, const amp_tensor *a, const amp_tensor *b) {
    if (a->dtype != b->dtype)
        return amp_fail(AMP_ERR_DTYPE, "%s: inputs have dtypes %s and %s, want the same", op,
                        amp_dtype_name(a->dtype), amp_dtype_name(b->dtype));
    if (a->ctx != b->ctx)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: inputs belong to different contexts", op);
    return AMP_OK;
}
