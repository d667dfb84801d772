/* Activation recomputation of a child (amp_model_set_recompute, amp/nn.h): torch.utils.checkpoint
 * made exact by construction. The forward runs once with gradients off, its data in an arena of
 * its own (ctx->recompute_arena, swapped for the data arena and reset after), so nothing but a
 * copy of its output stays; one tape node takes its inputs and the child's parameters. Its
 * backward runs the forward again on leaves over the same inputs, with what decides the values
 * set back as the first run had it (the autocast state, the training flags of the subtree, the
 * RNG counter that dropout draws from), records it on the tape past the outer graph, walks that
 * part of the tape with the output's gradient, and folds the inputs' gradients back. The inner
 * nodes run in the order the child's own nodes would have run without recomputation, and every
 * gradient the outer graph holds is handed in and out whole, so every sum is taken in the same
 * order: the same bits.
 *
 * What the replay must not see: casts of the outer graph in autocast's cache (a cast the outer
 * graph made would be read as an input the node does not know: lookups start past them), and
 * the outer gradients' memory (released into the arena it came from, core/tensor.c). What it
 * costs and saves: bench/results/2026-12-04.md. */
#include <stdio.h>
#include <string.h>

#include "core/ctx.h"
#include "core/error.h"
#include "nn/autograd.h"
#include "nn/model_internal.h"

static const char RECOMPUTE_ARGS[] = "input0 input1 input2 input3 input4 input5 input6 input7";

/* What the first run was, for the replay to be the same run. */
typedef struct amp_recompute_aux {
    amp_model *m;
    char name[AMP_FULL_NAME_MAX + 32]; /* the node's op name: "recomputed child 'h.0'" */
    amp_rng_state rng_before, rng_after;
    bool autocast_enabled;
    amp_dtype autocast_half;
    bool *training; /* the subtree's flags, in amp_model_walk's order */
    int n_nodes;
} amp_recompute_aux;

/* The data arena and its region start while a recomputed forward runs. */
typedef struct amp_arena_swap {
    amp_arena data;
    amp_arena_mark mark;
} amp_arena_swap;

static void amp_recompute_arena_in(amp_ctx *ctx, amp_arena_swap *s) {
    s->data = ctx->data_arena;
    s->mark = ctx->region_mark;
    ctx->data_arena = ctx->recompute_arena;
    ctx->region_mark = AMP_ARENA_START;
    ctx->recompute_depth++;
}

/* Back to the step's arena; the recomputation's data stays readable until the reset. */
static void amp_recompute_arena_out(amp_ctx *ctx, const amp_arena_swap *s) {
    ctx->recompute_arena = ctx->data_arena;
    ctx->data_arena = s->data;
    ctx->region_mark = s->mark;
    ctx->recompute_depth--;
}

/* The run's intermediates go; what they took at most is m's transient of this step (a bump
 * arena from its start: its extent is its peak). */
static void amp_recompute_arena_reset(amp_model *m) {
    amp_ctx *ctx = m->ctx;
    if (m->recompute_step != ctx->step_gen) {
        m->recompute_step = ctx->step_gen;
        m->recompute_memory = (amp_recompute_memory){0};
    }
    size_t used = ctx->recompute_arena.in_use;
    if (used > m->recompute_memory.transient_bytes) m->recompute_memory.transient_bytes = used;
    amp_arena_reset_to(&ctx->recompute_arena, AMP_ARENA_START);
}

static void amp_count_node(amp_model *node, void *n) {
    (void)node;
    (*(int *)n)++;
}

typedef struct amp_flag_walk {
    bool *flags;
    int i;
    bool set; /* write the flags into the models, else read them */
} amp_flag_walk;

static void amp_flag_node(amp_model *node, void *arg) {
    amp_flag_walk *w = arg;
    if (w->set) node->training = w->flags[w->i++];
    else w->flags[w->i++] = node->training;
}

static void amp_training_flags(amp_model *m, bool *flags, bool set) {
    amp_flag_walk w = {.flags = flags, .set = set};
    amp_model_walk(m, amp_flag_node, &w);
}

/* The dotted name of m from its root ("transformer.h.0"). */
static void amp_model_path(const amp_model *m, char *buf, size_t size) {
    if (!m->parent || !m->parent->parent) {
        snprintf(buf, size, "%s", m->name);
        return;
    }
    amp_model_path(m->parent, buf, size);
    size_t n = strlen(buf);
    snprintf(buf + n, size - n, ".%s", m->name);
}

/* Whether buffer b of m's subtree is a library batch norm's running statistic: the one write
 * a forward may make, which the replay leaves alone (nn/modules.c). */
static bool amp_is_bn_stat(const amp_model *m, const amp_named_tensor *b) {
    if (m->kind == AMP_MODULE_BATCHNORM2D && b >= m->buffers && b < m->buffers + m->n_buffers)
        return true;
    for (int i = 0; i < m->n_children; i++)
        if (amp_is_bn_stat(m->children[i], b)) return true;
    return false;
}

/* The first run's writes that a second run would repeat or read: refused, naming the tensor. */
static amp_status amp_recompute_check_writes(const amp_model *m, const char *path,
                                             amp_tensor *const *in, int n_in,
                                             const uint64_t *versions) {
    static const char who[] = "amp_model_forward";
    const char *why = "its recomputation in backward would %s; run it without recomputation "
                      "(amp_model_set_recompute NONE) or move the write out of its forward";
    char msg[160];
    for (int i = 0; i < n_in; i++)
        if (*in[i]->version != versions[i]) {
            snprintf(msg, sizeof msg, why, "read the written values");
            return amp_fail(AMP_ERR_STATE, "%s: the child '%s' is set to recompute, and its "
                            "forward wrote its input %d in place: %s", who, path, i, msg);
        }
    versions += n_in;
    for (int i = 0; i < m->n_params; i++)
        if (*m->params[i].t->version != versions[i]) {
            snprintf(msg, sizeof msg, why, "read the written values");
            return amp_fail(AMP_ERR_STATE, "%s: the child '%s' is set to recompute, and its "
                            "forward wrote its parameter '%s' in place: %s", who, path,
                            m->params[i].name, msg);
        }
    versions += m->n_params;
    for (int i = 0; i < m->n_buffers; i++)
        if (*m->buffers[i].t->version != versions[i] && !amp_is_bn_stat(m, &m->buffers[i])) {
            snprintf(msg, sizeof msg, why, "write it a second time");
            return amp_fail(AMP_ERR_STATE, "%s: the child '%s' is set to recompute, and its "
                            "forward wrote its buffer '%s' in place (only a library batch "
                            "norm's running statistics are known to the replay): %s", who, path,
                            m->buffers[i].name, msg);
        }
    return AMP_OK;
}

/* The state the replay restores; what was current is put back after it. */
typedef struct amp_replay_state {
    amp_rng_state rng;
    bool autocast_enabled, grad_enabled, bw_releases;
    amp_dtype autocast_half;
    int n_tape, n_cache, cache_from;
    bool *training;
} amp_replay_state;

static amp_status amp_replay_enter(amp_ctx *ctx, const amp_recompute_aux *a,
                                   amp_replay_state *now) {
    *now = (amp_replay_state){.rng = ctx->rng, .autocast_enabled = ctx->autocast.enabled,
                              .autocast_half = ctx->autocast.half,
                              .grad_enabled = ctx->grad_enabled, .bw_releases = ctx->bw_releases,
                              .n_tape = ctx->n_tape, .n_cache = ctx->autocast.n_cache,
                              .cache_from = ctx->autocast.cache_from};
    AMP_TRY(amp_ctx_step_alloc(ctx, (size_t)a->n_nodes * sizeof *now->training,
                               (void **)&now->training));
    amp_training_flags(a->m, now->training, false);
    amp_training_flags(a->m, a->training, true);
    ctx->rng = a->rng_before;
    ctx->autocast.enabled = a->autocast_enabled;
    ctx->autocast.half = a->autocast_half;
    ctx->autocast.cache_from = ctx->autocast.n_cache;
    ctx->grad_enabled = true;
    ctx->bw_releases = false; /* the forward's data is no backward temporary */
    ctx->recompute_replay = true;
    return AMP_OK;
}

static void amp_replay_leave(amp_ctx *ctx, const amp_recompute_aux *a,
                             const amp_replay_state *now) {
    ctx->n_tape = now->n_tape; /* the replay's nodes were its own */
    ctx->autocast.n_cache = now->n_cache;
    ctx->autocast.cache_from = now->cache_from;
    ctx->rng = now->rng;
    ctx->autocast.enabled = now->autocast_enabled;
    ctx->autocast.half = now->autocast_half;
    ctx->grad_enabled = now->grad_enabled;
    ctx->bw_releases = now->bw_releases;
    ctx->recompute_replay = false;
    amp_training_flags(a->m, now->training, true);
}

/* A leaf over input x's data for the replay, carrying the gradient x already has this backward
 * (a consumer outside the child ran first), so that the child's contributions add onto it in the
 * order they would without recomputation. */
static amp_status amp_replay_input(amp_tensor *x, amp_tensor **leaf) {
    AMP_TRY(amp_tensor_step_over(x, x->dtype, x->data, leaf));
    amp_tensor *l = *leaf;
    l->version = x->version;
    l->requires_grad = x->requires_grad;
    if (!x->requires_grad || !x->grad_written) return AMP_OK;
    AMP_TRY(amp_tensor_step_like(x, x->dtype, &l->grad));
    AMP_TRY(AMP_DEV(x->backend, copy, l->grad->data, x->grad->data, amp_tensor_nbytes(x)));
    l->grad_written = true;
    return AMP_OK;
}

/* x's gradient becomes its leaf's: the leaf started from x's (amp_replay_input). */
static amp_status amp_fold_input_grad(amp_tensor *x, const amp_tensor *leaf) {
    if (!x->requires_grad || !leaf->grad_written) return AMP_OK;
    if (!x->grad_written) return amp_grad_accumulate(x, leaf->grad, 1.0f);
    return AMP_DEV(x->backend, copy, x->grad->data, leaf->grad->data, amp_tensor_nbytes(x));
}

/* The replay and its backward; state and arenas are the caller's to restore. */
static amp_status amp_replay_run(amp_tape_node *node, const amp_tensor *dy, amp_tensor **leaves) {
    amp_recompute_aux *a = node->aux;
    amp_model *m = a->m;
    amp_ctx *ctx = m->ctx;
    for (int i = 0; i < node->n_in; i++) {
        leaves[i] = NULL;
        for (int j = 0; j < i; j++) /* the same tensor twice: one leaf */
            if (node->in[j] == node->in[i]) leaves[i] = leaves[j];
        if (!leaves[i]) AMP_TRY(amp_replay_input(node->in[i], &leaves[i]));
    }
    int from = ctx->n_tape;
    amp_tensor *h = NULL;
    AMP_TRY(m->forward(m, leaves, node->n_in, &h));
    char path[AMP_FULL_NAME_MAX];
    amp_model_path(m, path, sizeof path);
    if (!h || h->dtype != node->out->dtype || h->ndim != node->out->ndim ||
        memcmp(h->shape, node->out->shape, (size_t)h->ndim * sizeof *h->shape) != 0)
        return amp_fail(AMP_ERR_STATE, "amp_backward: the child '%s' ran again (recomputation) "
                        "and gave %s: its forward depends on something besides its inputs, "
                        "parameters, autocast and the RNG", path,
                        h ? "an output of another shape or dtype than its forward did"
                          : "no output");
    if (ctx->rng.counter != a->rng_after.counter)
        return amp_fail(AMP_ERR_STATE, "amp_backward: the child '%s' ran again (recomputation) "
                        "and drew %lld random numbers where its forward drew %lld: its forward "
                        "depends on something besides its inputs, parameters, autocast and the "
                        "RNG", path, (long long)(ctx->rng.counter - a->rng_before.counter),
                        (long long)(a->rng_after.counter - a->rng_before.counter));
    ctx->bw_releases = true; /* the replay's graph goes with this walk */
    if (!h->node) { /* no op recorded: the output is an input, or needs no gradient */
        for (int i = 0; i < node->n_in; i++)
            if (leaves[i] == h) return amp_grad_accumulate(h, dy, 1.0f);
        return AMP_OK;
    }
    AMP_TRY(amp_tensor_step_like(h, h->dtype, &h->grad));
    AMP_TRY(AMP_DEV(h->backend, copy, h->grad->data, dy->data, amp_tensor_nbytes(h)));
    h->grad_written = true;
    char where[AMP_FULL_NAME_MAX + 32];
    snprintf(where, sizeof where, "recomputed child '%s'", path);
    return amp_autograd_walk(ctx, from, where, false);
}

static amp_status amp_recompute_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_recompute_aux *a = node->aux;
    amp_ctx *ctx = a->m->ctx;
    amp_replay_state now;
    AMP_TRY(amp_replay_enter(ctx, a, &now));
    amp_arena_swap swap;
    amp_recompute_arena_in(ctx, &swap);
    amp_tensor *leaves[AMP_NODE_MAX_IN];
    amp_status s = amp_replay_run(node, dy, leaves);
    amp_replay_leave(ctx, a, &now);
    amp_recompute_arena_out(ctx, &swap);
    for (int i = 0; i < node->n_in && s == AMP_OK; i++) {
        bool first = leaves[i] != NULL;
        for (int j = 0; j < i && first; j++) first = leaves[j] != leaves[i];
        if (first) s = amp_fold_input_grad(node->in[i], leaves[i]);
    }
    amp_recompute_arena_reset(a->m);
    return s;
}

/* The node: the inputs, the output's copy, the parameters that need a gradient. */
static amp_status amp_recompute_record(amp_model *m, amp_tensor *const *in, int n_in,
                                       amp_tensor *y, amp_recompute_aux *a) {
    amp_ctx *ctx = m->ctx;
    bool any = false;
    for (int i = 0; i < n_in; i++) any |= in[i]->requires_grad;
    int n_grad = 0;
    for (int i = 0; i < m->n_params; i++) n_grad += m->params[i].t->requires_grad;
    if (!any && n_grad == 0) return AMP_OK;
    amp_tape_node *node;
    AMP_TRY(amp_record_always(y, a->name, RECOMPUTE_ARGS, amp_recompute_bwd, n_in, in, sizeof *a,
                              &node));
    memcpy(node->aux, a, sizeof *a);
    node->op = ((amp_recompute_aux *)node->aux)->name; /* a's is the caller's stack */
    AMP_TRY(amp_ctx_step_alloc(ctx, (size_t)n_grad * sizeof *node->params,
                               (void **)&node->params));
    AMP_TRY(amp_ctx_step_alloc(ctx, (size_t)n_grad * sizeof *node->param_version,
                               (void **)&node->param_version));
    for (int i = 0; i < m->n_params; i++) {
        amp_tensor *p = m->params[i].t;
        if (!p->requires_grad) continue;
        node->params[node->n_params] = p;
        node->param_version[node->n_params++] = *p->version;
    }
    /* Its backward reads no data of its output (the replay makes its own). */
    amp_node_unread(node, 0, true);
    return AMP_OK;
}

/* The first run: gradients off, its data in the recomputation arena; its output copied out. */
static amp_status amp_recompute_first_run(amp_model *m, amp_tensor *const *in, int n_in,
                                          amp_recompute_aux *a, amp_tensor **y) {
    amp_ctx *ctx = m->ctx;
    ctx->grad_enabled = false;
    amp_arena_swap swap;
    amp_recompute_arena_in(ctx, &swap);
    amp_tensor *h = NULL;
    amp_status s = m->forward(m, in, n_in, &h);
    amp_recompute_arena_out(ctx, &swap);
    ctx->grad_enabled = true;
    a->rng_after = ctx->rng;
    if (s == AMP_OK && !h)
        s = amp_fail(AMP_ERR_STATE, "amp_model_forward: the child's forward returned no output");
    if (s == AMP_OK) s = amp_tensor_step_like(h, h->dtype, y);
    if (s == AMP_OK)
        s = AMP_DEV(h->backend, copy, (*y)->data, h->data, amp_tensor_nbytes(h));
    amp_recompute_arena_reset(m);
    if (s == AMP_OK) m->recompute_memory.kept_bytes = amp_tensor_nbytes(*y);
    return s;
}

amp_status amp_recompute_forward(amp_model *m, amp_tensor *const *in, int n_in,
                                 amp_tensor **out) {
    amp_ctx *ctx = m->ctx;
    char path[AMP_FULL_NAME_MAX];
    amp_model_path(m, path, sizeof path);
    if (n_in > AMP_NODE_MAX_IN)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_model_forward: the child '%s' is set to "
                        "recompute and was given %d inputs; at most %d", path, n_in,
                        AMP_NODE_MAX_IN);
    amp_recompute_aux a = {.m = m, .rng_before = ctx->rng,
                           .autocast_enabled = ctx->autocast.enabled,
                           .autocast_half = ctx->autocast.half};
    snprintf(a.name, sizeof a.name, "recomputed child '%s'", path);
    amp_model_walk(m, amp_count_node, &a.n_nodes);
    AMP_TRY(amp_ctx_step_alloc(ctx, (size_t)a.n_nodes * sizeof *a.training, (void **)&a.training));
    amp_training_flags(m, a.training, false);
    int n_versions = n_in + m->n_params + m->n_buffers;
    uint64_t *versions;
    AMP_TRY(amp_ctx_step_alloc(ctx, (size_t)n_versions * sizeof *versions, (void **)&versions));
    for (int i = 0; i < n_in; i++) versions[i] = *in[i]->version;
    for (int i = 0; i < m->n_params; i++) versions[n_in + i] = *m->params[i].t->version;
    for (int i = 0; i < m->n_buffers; i++)
        versions[n_in + m->n_params + i] = *m->buffers[i].t->version;
    amp_tensor *y;
    AMP_TRY(amp_recompute_first_run(m, in, n_in, &a, &y));
    AMP_TRY(amp_recompute_check_writes(m, path, in, n_in, versions));
    AMP_TRY(amp_recompute_record(m, in, n_in, y, &a));
    *out = y;
    return AMP_OK;
}
