/* The model tree: creation, registration of parameters, buffers and children, accessors,
 * lifetime, and the forward entry point. The build is nn/model_build.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tensor_internal.h"
#include "core/grow.h"
#include "nn/model_internal.h"

amp_status amp_module_new(amp_ctx *ctx, const char *who, amp_module_kind kind,
                          amp_forward_fn forward, amp_model **out) {
    if (!out) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'out' is NULL", who);
    *out = NULL;
    if (!ctx) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'ctx' is NULL", who);
    amp_model *m = calloc(1, sizeof *m);
    if (!m) return amp_fail(AMP_ERR_OOM, "%s: out of memory", who);
    m->ctx = ctx;
    m->root = m;
    m->kind = kind;
    m->forward = forward;
    m->training = true;
    m->in_dtype = m->out_dtype = AMP_I32;
    amp_ctx_hold(ctx);
    *out = m;
    return AMP_OK;
}

amp_status amp_model_create(amp_ctx *ctx, amp_forward_fn forward, void *user,
                            void (*free_user)(void *user), amp_model **out) {
    AMP_TRY(amp_module_new(ctx, __func__, AMP_MODULE_USER, forward, out));
    (*out)->user = user;
    (*out)->free_user = free_user;
    return AMP_OK;
}

void *amp_model_user(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, NULL);
    return m->user;
}

amp_forward_fn amp_model_forward_fn(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, NULL);
    return m->forward;
}

amp_status amp_model_check_root(const char *who, const amp_model *m) {
    if (!m) return amp_fail(AMP_ERR_INVALID_ARG, "%s: the model is NULL", who);
    if (m->parent)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: model '%s' is a child of another model; pass "
                        "the model at the top of its tree, which owns the storage", who, m->name);
    return AMP_OK;
}

void amp_model_walk(amp_model *m, void (*fn)(amp_model *node, void *arg), void *arg) {
    fn(m, arg);
    for (int i = 0; i < m->n_children; i++) amp_model_walk(m->children[i], fn, arg);
}

/* Whether `name` is taken among m's own parameters, buffers and children. */
static bool amp_model_name_taken(const amp_model *m, const char *name) {
    for (int i = 0; i < m->n_own_params; i++)
        if (!strcmp(m->own_params[i].name, name)) return true;
    for (int i = 0; i < m->n_own_buffers; i++)
        if (!strcmp(m->own_buffers[i].name, name)) return true;
    for (int i = 0; i < m->n_children; i++)
        if (!strcmp(m->children[i]->name, name)) return true;
    return false;
}

/* One part of a dotted path: 1..AMP_NAME_MAX-1 characters, no '.', unique in m. torch's
 * register_parameter, register_buffer and add_module refuse a '.' ("parameter name can't
 * contain \".\""): a dotted name is a path through children, so "fc.weight" registered on a
 * node would meet a child "fc"'s "weight" only at the build, and a checkpoint could not tell
 * the two apart. */
static amp_status amp_model_check_name(const char *who, const amp_model *m, const char *name) {
    if (!name) return amp_fail(AMP_ERR_INVALID_ARG, "%s: the name is NULL", who);
    size_t n = strlen(name);
    if (n == 0 || n >= AMP_NAME_MAX)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: name '%s' must have 1..%d characters", who,
                        name, AMP_NAME_MAX - 1);
    if (name[0] == '.' || name[n - 1] == '.' || strstr(name, ".."))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: name '%s' has an empty dotted part (and a "
                        "name may hold no '.' at all)", who, name);
    const char *dot = strrchr(name, '.');
    if (dot)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: name '%s' contains '.', which joins the names "
                        "of a path (torch refuses it in parameter, buffer and module names too): "
                        "give the entry the name '%s' on a child model named '%.*s' "
                        "(amp_model_add_child)", who, name, dot + 1, (int)(dot - name), name);
    if (amp_model_name_taken(m, name))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the model already has an entry named '%s'", who,
                        name);
    return AMP_OK;
}

static amp_status amp_model_check_init(const char *who, const char *name, amp_init init) {
    bool finite = init.a - init.a == 0.0f && init.b - init.b == 0.0f;
    if ((int)init.kind < AMP_INIT_ZEROS || init.kind > AMP_INIT_CALLER || !finite ||
        init.fan_in < 0 || (init.kind == AMP_INIT_NORMAL && init.b < 0.0f) ||
        (init.kind == AMP_INIT_UNIFORM && init.a > init.b))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: '%s' has an invalid initialiser (kind %d, a %g, "
                        "b %g, fan_in %lld): want a known kind, finite values, a normal's std >= 0, "
                        "a uniform's a <= b", who, name, (int)init.kind, (double)init.a,
                        (double)init.b, (long long)init.fan_in);
    return AMP_OK;
}

static amp_status amp_model_register(const char *who, amp_model *m, bool param, const char *name,
                                     int ndim, const int64_t *shape, amp_init init, int *index) {
    AMP_CHECK_ARG(m);
    AMP_CHECK_ARG(shape);
    if (m->root->built)
        return amp_fail(AMP_ERR_STATE, "%s: the model is built; register '%s' before its first "
                        "forward or amp_model_build", who, name ? name : "(null)");
    AMP_TRY(amp_model_check_name(who, m, name));
    int64_t numel;
    AMP_TRY(amp_shape_check(who, ndim, shape, &numel));
    AMP_TRY(amp_model_check_init(who, name, init));
    amp_decl **list = param ? &m->own_params : &m->own_buffers;
    int *n = param ? &m->n_own_params : &m->n_own_buffers;
    int *cap = param ? &m->cap_own_params : &m->cap_own_buffers;
    amp_decl *l = amp_grow(*list, *n, cap, 4, sizeof *l);
    if (!l) return amp_fail(AMP_ERR_OOM, "%s: out of memory", who);
    *list = l;
    amp_decl *d = &(*list)[*n];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    d->ndim = ndim;
    memcpy(d->shape, shape, (size_t)ndim * sizeof *shape);
    d->init = init;
    if (index) *index = *n;
    (*n)++;
    return AMP_OK;
}

amp_status amp_model_register_param(amp_model *m, const char *name, int ndim,
                                    const int64_t *shape, amp_init init, int *index) {
    return amp_model_register(__func__, m, true, name, ndim, shape, init, index);
}

amp_status amp_model_register_buffer(amp_model *m, const char *name, int ndim,
                                     const int64_t *shape, amp_init init, int *index) {
    return amp_model_register(__func__, m, false, name, ndim, shape, init, index);
}

static bool amp_model_in_subtree(const amp_model *top, const amp_model *m) {
    if (top == m) return true;
    for (int i = 0; i < top->n_children; i++)
        if (amp_model_in_subtree(top->children[i], m)) return true;
    return false;
}

static void amp_model_set_root(amp_model *m, void *root) { m->root = root; }

amp_status amp_model_add_child(amp_model *parent, const char *name, amp_model *child) {
    AMP_CHECK_ARG(parent);
    AMP_CHECK_ARG(child);
    const char *who = __func__;
    if (parent->root->built || child->built)
        return amp_fail(AMP_ERR_STATE, "%s: %s is built; compose models before the first forward "
                        "or amp_model_build", who, child->built ? "the child" : "the parent");
    if (child->parent)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the child already belongs to another model "
                        "(as '%s')", who, child->name);
    if (child->ctx != parent->ctx)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the child is on another context", who);
    if (amp_model_in_subtree(child, parent->root))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the child contains the parent (a cycle)", who);
    AMP_TRY(amp_model_check_name(who, parent, name));
    amp_model **l = amp_grow(parent->children, parent->n_children, &parent->cap_children, 4,
                             sizeof *l);
    if (!l) return amp_fail(AMP_ERR_OOM, "%s: out of memory", who);
    parent->children = l;
    parent->children[parent->n_children++] = child;
    child->parent = parent;
    snprintf(child->name, sizeof child->name, "%s", name);
    amp_model_walk(child, amp_model_set_root, parent->root);
    return AMP_OK;
}

int amp_model_n_children(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, 0);
    return m->n_children;
}

amp_model *amp_model_child(const amp_model *m, int i) {
    AMP_CHECK_ARG_OR(m, NULL);
    if (i < 0 || i >= m->n_children) {
        (void)amp_fail(AMP_ERR_INVALID_ARG, "amp_model_child: index %d is out of range: model "
                       "'%s' has %d children", i, m->name, m->n_children);
        return NULL;
    }
    return m->children[i];
}

const char *amp_model_name(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, NULL);
    return m->name;
}

amp_status amp_model_set_norm(amp_model *m, bool norm) {
    AMP_CHECK_ARG(m);
    if (m->root->built)
        return amp_fail(AMP_ERR_STATE, "amp_model_set_norm: the model is built; mark it before");
    m->norm = norm ? AMP_NORM_KEEP : AMP_NORM_NONE;
    return AMP_OK;
}

amp_status amp_model_set_recompute(amp_model *child, amp_recompute mode) {
    static const char who[] = "amp_model_set_recompute";
    if (!child) return amp_fail(AMP_ERR_INVALID_ARG, "%s: the model is NULL", who);
    if (mode == AMP_RECOMPUTE_SELECTIVE)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: AMP_RECOMPUTE_SELECTIVE is a choice of ops "
                        "inside a forward (amp_linear_ex's recompute_input), which a model makes "
                        "(amp_gpt_set_recompute, amp_llama_set_recompute); a child takes NONE or "
                        "FULL", who);
    if (mode != AMP_RECOMPUTE_NONE && mode != AMP_RECOMPUTE_FULL)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: mode %d is not an amp_recompute (NONE or FULL)",
                        who, (int)mode);
    if (!child->parent)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: '%s' is a root model: its inputs and output are "
                        "all it would keep, and its backward comes at once; set it on the "
                        "children (blocks) whose intermediates should not be kept", who,
                        child->name[0] ? child->name : "the model");
    if (!child->forward)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: '%s' has no forward function (a container its "
                        "parent runs part by part): there is no forward to run again", who,
                        child->name);
    if (child->ctx->n_tape > 0)
        return amp_fail(AMP_ERR_STATE, "%s: a graph is pending (a forward whose backward has not "
                        "run): set recomputation between steps, before the forward", who);
    child->recompute = mode;
    return AMP_OK;
}

amp_recompute amp_model_get_recompute(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, AMP_RECOMPUTE_NONE);
    return m->recompute;
}

amp_status amp_model_recompute_memory(const amp_model *child, amp_recompute_memory *out) {
    AMP_CHECK_ARG(child);
    AMP_CHECK_ARG(out);
    bool now = child->recompute_step == child->ctx->step_gen;
    *out = now ? child->recompute_memory : (amp_recompute_memory){0};
    return AMP_OK;
}

static void amp_model_free_node(amp_model *m) {
    for (int i = 0; i < m->n_children; i++) amp_model_free_node(m->children[i]);
    if (m->free_user) m->free_user(m->user);
    free(m->own_params);
    free(m->own_buffers);
    free(m->children);
    amp_ctx *ctx = m->ctx;
    free(m);
    amp_ctx_drop(ctx);
}

void amp_model_free(amp_model *m) {
    if (!m) return;
    if (m->parent) {
        /* Its parent owns it; freeing it here would leave the parent pointing at freed memory. */
        (void)amp_fail(AMP_ERR_STATE, "amp_model_free: model '%s' belongs to a parent and goes "
                       "with it; not freed", m->name);
        amp_log_msg(AMP_LOG_WARN, "%s", amp_last_error());
        return;
    }
    amp_ctx *ctx = m->ctx;
    amp_ctx_forget(ctx, m); /* its optimizers and DDP stop using it */
    if (ctx->amp_hooks) ctx->amp_hooks->forget(ctx->amp, m);
    for (int i = 0; i < m->n_params; i++) amp_tensor_free(m->params[i].t);
    for (int i = 0; i < m->n_buffers; i++) amp_tensor_free(m->buffers[i].t);
    amp_ledger_free(ctx, m->param_block);
    amp_ledger_free(ctx, m->grad_block);
    amp_ledger_free(ctx, m->buffer_block);
    free(m->params);
    free(m->buffers);
    free(m->counters);
    amp_model_free_node(m);
}

static void amp_model_set_training(amp_model *m, void *training) {
    m->training = *(const bool *)training;
}

/* The accessors answer NULL with 0, false or NULL and leave the message in amp_last_error. */
amp_status amp_model_train(amp_model *m, bool training) {
    AMP_CHECK_ARG(m);
    amp_model_walk(m, amp_model_set_training, &training);
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

static int amp_model_count(const amp_model *m, bool params) {
    int n = params ? m->n_own_params : m->n_own_buffers;
    for (int i = 0; i < m->n_children; i++) n += amp_model_count(m->children[i], params);
    return n;
}

int amp_model_n_params(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, 0);
    return m->root->built ? m->n_params : amp_model_count(m, true);
}

int amp_model_n_buffers(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, 0);
    return m->root->built ? m->n_buffers : amp_model_count(m, false);
}

/* Entry names are stored dotted from the root; a child's accessors answer them from the child
 * down, as its own named_parameters() would. */
static size_t amp_model_prefix_len(const amp_model *m) {
    size_t n = 0;
    for (const amp_model *a = m; a->parent; a = a->parent) n += strlen(a->name) + 1;
    return n;
}

/* Whether entry i of a list of n exists; if not, the reason (not built yet, or an index out
 * of range) is left in amp_last_error, as for a NULL model. */
static bool amp_model_entry_ok(const char *who, const amp_model *m, int i, int n,
                               const char *what) {
    if (!m->root->built) {
        (void)amp_fail(AMP_ERR_STATE, "%s: the model is not built yet, its %s have no storage "
                       "(its first forward or amp_model_build builds it)", who, what);
        return false;
    }
    if (i < 0 || i >= n) {
        (void)amp_fail(AMP_ERR_INVALID_ARG, "%s: index %d is out of range: the model has %d %s",
                       who, i, n, what);
        return false;
    }
    return true;
}

amp_tensor *amp_model_param(const amp_model *m, int i) {
    AMP_CHECK_ARG_OR(m, NULL);
    if (!amp_model_entry_ok(__func__, m, i, m->n_params, "parameters")) return NULL;
    return m->params[i].t;
}
const char *amp_model_param_name(const amp_model *m, int i) {
    AMP_CHECK_ARG_OR(m, NULL);
    if (!amp_model_entry_ok(__func__, m, i, m->n_params, "parameters")) return NULL;
    return m->params[i].name + amp_model_prefix_len(m);
}
amp_tensor *amp_model_buffer(const amp_model *m, int i) {
    AMP_CHECK_ARG_OR(m, NULL);
    if (!amp_model_entry_ok(__func__, m, i, m->n_buffers, "buffers")) return NULL;
    return m->buffers[i].t;
}
const char *amp_model_buffer_name(const amp_model *m, int i) {
    AMP_CHECK_ARG_OR(m, NULL);
    if (!amp_model_entry_ok(__func__, m, i, m->n_buffers, "buffers")) return NULL;
    return m->buffers[i].name + amp_model_prefix_len(m);
}

amp_status amp_model_find(const amp_model *m, const char *name, amp_tensor **out) {
    AMP_CHECK_ARG(m);
    AMP_CHECK_ARG(name);
    AMP_CHECK_ARG(out);
    *out = NULL;
    if (!m->root->built) return amp_fail(AMP_ERR_STATE, "amp_model_find: model not built yet");
    size_t skip = amp_model_prefix_len(m);
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name + skip, name) == 0) return (*out = m->params[i].t), AMP_OK;
    for (int i = 0; i < m->n_buffers; i++)
        if (strcmp(m->buffers[i].name + skip, name) == 0) return (*out = m->buffers[i].t), AMP_OK;
    return amp_fail(AMP_ERR_INVALID_ARG, "amp_model_find: no parameter or buffer named '%s'", name);
}

/* From the registrations, built or not: the built lists hold the same shapes. */
int64_t amp_model_numel(const amp_model *m) {
    AMP_CHECK_ARG_OR(m, 0);
    int64_t n = 0;
    for (int i = 0; i < m->n_own_params; i++) {
        int64_t k = 1;
        for (int d = 0; d < m->own_params[i].ndim; d++) k *= m->own_params[i].shape[d];
        n += k;
    }
    for (int i = 0; i < m->n_children; i++) n += amp_model_numel(m->children[i]);
    return n;
}

amp_status amp_model_forward_n(amp_model *m, amp_tensor *const *inputs, int n_inputs,
                               amp_tensor **out) {
    AMP_CHECK_ARG(m);
    AMP_CHECK_ARG(out);
    const char *who = "amp_model_forward";
    if (n_inputs < 1 || !inputs)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: no inputs (n_inputs %d)", who, n_inputs);
    for (int i = 0; i < n_inputs; i++) {
        if (!inputs[i]) return amp_fail(AMP_ERR_INVALID_ARG, "%s: input %d is NULL", who, i);
        if (inputs[i]->ctx != m->ctx)
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: %s belongs to another context", who,
                            n_inputs == 1 ? "x" : "an input");
    }
    if (!m->forward)
        return amp_fail(AMP_ERR_STATE, "%s: model '%s' has no forward function (a container its "
                        "parent runs child by child)", who, m->name);
    AMP_TRY(amp_model_build(m));
    if (m->parent) { /* inside its root's forward */
        amp_ctx *ctx = m->ctx;
        if (m->recompute == AMP_RECOMPUTE_FULL && ctx->grad_enabled && ctx->recompute_depth == 0)
            return amp_recompute_forward(m, inputs, n_inputs, out);
        return m->forward(m, inputs, n_inputs, out);
    }

    /* The root: the boundary casts of O2/O3 around the user's forward. */
    amp_tensor *cast_in[8];
    amp_tensor *const *xs = inputs;
    if (m->in_dtype != AMP_I32) {
        if (n_inputs > 8)
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: %d inputs, at most 8 with a cast model", who,
                            n_inputs);
        for (int i = 0; i < n_inputs; i++) {
            cast_in[i] = inputs[i];
            if (inputs[i]->dtype != AMP_I32) AMP_TRY(amp_cast(inputs[i], m->in_dtype, &cast_in[i]));
        }
        xs = cast_in;
    }
    amp_tensor *h = NULL;
    AMP_TRY(m->forward(m, xs, n_inputs, &h));
    if (!h)
        return amp_fail(AMP_ERR_STATE, "%s: the model's forward returned no output", who);
    if (m->out_dtype != AMP_I32) AMP_TRY(amp_cast(h, m->out_dtype, &h));
    /* A forward without gradients and with no graph pending (an evaluation batch) is a release
     * point (core/step_regions.c): what it and the batch before made goes, its output stays. */
    amp_ctx *ctx = m->ctx;
    if (!ctx->grad_enabled && ctx->n_tape == 0) AMP_TRY(amp_ctx_release_region(ctx, NULL, h));
    *out = h;
    return AMP_OK;
}

amp_status amp_model_forward(amp_model *m, amp_tensor *x, amp_tensor **out) {
    AMP_CHECK_ARG(m);
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(out);
    return amp_model_forward_n(m, &x, 1, out);
}
