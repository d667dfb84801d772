/* Sequential: a model whose forward runs its children in order, one user of the model API. A
 * library Linear or BatchNorm2d directly followed by a library ReLU, and a library Linear
 * directly followed by a library GELU, run as the fused op. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "nn/model_internal.h"

/* A layer's dotted path from the root ("layer1.0"), which names it in errors: a Sequential
 * inside a Sequential adds no context of its own around its layer's, so the message reads
 * "layer 'layer1.0': ..." as the state_dict names it. */
static void amp_seq_path(const amp_model *l, char *out, size_t size) {
    if (l->parent && l->parent->parent) {
        amp_seq_path(l->parent, out, size);
        size_t n = strlen(out);
        snprintf(out + n, size - n, ".%s", l->name);
    } else {
        snprintf(out, size, "%s", l->name);
    }
}

static amp_status amp_seq_fail(amp_status s, const amp_model *l, const amp_model *after) {
    char a[AMP_FULL_NAME_MAX], b[AMP_FULL_NAME_MAX];
    amp_seq_path(l, a, sizeof a);
    if (after) {
        amp_seq_path(after, b, sizeof b);
        return amp_fail_context(s, "layers '%s' and '%s'", a, b);
    }
    return l->kind == AMP_MODULE_SEQUENTIAL ? s : amp_fail_context(s, "layer '%s'", a);
}

static amp_status amp_seq_forward(amp_model *m, amp_tensor *const *in, int n_in,
                                  amp_tensor **out) {
    if (n_in != 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "Sequential: %d inputs, it takes one", n_in);
    amp_tensor *h = in[0];
    for (int i = 0; i < m->n_children; i++) {
        amp_model *l = m->children[i];
        amp_tensor *next;
        amp_status s;
        amp_model *after = i + 1 < m->n_children ? m->children[i + 1] : NULL;
        bool then_relu = after && after->kind == AMP_MODULE_RELU;
        if (after && after->kind == AMP_MODULE_GELU && l->kind == AMP_MODULE_LINEAR) {
            /* Linear then GELU: the GELU in the GEMM's epilogue (amp_linear_gelu). */
            s = amp_linear_gelu(h, l->params[0].t, l->cfg.bias ? l->params[1].t : NULL,
                                after->cfg.tanh_approx, &next);
            if (s != AMP_OK) return amp_seq_fail(s, l, after);
            i++;
        } else if (then_relu &&
                   (l->kind == AMP_MODULE_LINEAR || l->kind == AMP_MODULE_BATCHNORM2D)) {
            /* Linear then ReLU: one GEMM with the bias in its epilogue and the ReLU in place on
             * its output (kernels/cuda/gemm.c says what it saves). Batch norm then
             * ReLU: the ReLU in the normalising pass, no tensor between them. Same gradients. */
            if (l->kind == AMP_MODULE_LINEAR)
                s = amp_linear_relu(h, l->params[0].t, l->cfg.bias ? l->params[1].t : NULL, &next);
            else
                s = amp_module_batchnorm_run(l, true, h, &next);
            if (s != AMP_OK) return amp_seq_fail(s, l, after);
            i++;
        } else {
            s = amp_model_forward(l, h, &next);
            if (s != AMP_OK) return amp_seq_fail(s, l, NULL);
        }
        h = next;
    }
    *out = h;
    return AMP_OK;
}

amp_status amp_seq_create(amp_ctx *ctx, amp_model **out) {
    return amp_module_new(ctx, __func__, AMP_MODULE_SEQUENTIAL, amp_seq_forward, out);
}

amp_status amp_seq_add(amp_model *seq, const char *name, amp_model *child) {
    AMP_CHECK_ARG(seq);
    AMP_CHECK_ARG(child);
    char index[16];
    if (!name) {
        snprintf(index, sizeof index, "%d", seq->n_children);
        name = index;
    }
    return amp_model_add_child(seq, name, child);
}

/* What amp_seq_add_<layer> checks before making the module: the model and the layer name. */
static amp_status amp_seq_check(const char *who, const amp_model *m, const char *name) {
    if (!m) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'm' is NULL", who);
    if (m->root->built)
        return amp_fail(AMP_ERR_STATE, "%s: the model is already built; add layers before", who);
    if (name && (strlen(name) == 0 || strlen(name) >= AMP_NAME_MAX))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: layer name must have 1..%d characters", who,
                        AMP_NAME_MAX - 1);
    /* As amp_model_add_child (and torch's add_module) refuse it, but before the layer is made. */
    if (name && strchr(name, '.'))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: layer name '%s' contains '.', which joins the "
                        "names of a path: name the layer without one (a nested Sequential gives "
                        "\"layer1.0\" names by itself)", who, name);
    return AMP_OK;
}

/* Adds a module just made (made: the constructor's status), freeing it when that fails. */
static amp_status amp_seq_take(amp_model *m, const char *name, amp_status made, amp_model *l) {
    AMP_TRY(made);
    amp_status s = amp_seq_add(m, name, l);
    if (s != AMP_OK) amp_model_free(l);
    return s;
}

amp_status amp_seq_add_linear(amp_model *m, const char *name, int64_t in, int64_t out, bool bias) {
    AMP_TRY(amp_seq_check(__func__, m, name));
    amp_model *l = NULL;
    amp_status s = amp_module_linear(m->ctx, in, out, bias, &l);
    return amp_seq_take(m, name, s, l);
}

amp_status amp_seq_add_conv2d(amp_model *m, const char *name, int64_t c_in, int64_t c_out,
                              int kernel, int stride, int padding, bool bias) {
    AMP_TRY(amp_seq_check(__func__, m, name));
    amp_model *l = NULL;
    amp_status s = amp_module_conv2d(m->ctx, c_in, c_out, kernel, stride, padding, bias, &l);
    return amp_seq_take(m, name, s, l);
}

amp_status amp_seq_add_batchnorm2d(amp_model *m, const char *name, int64_t c) {
    AMP_TRY(amp_seq_check(__func__, m, name));
    amp_model *l = NULL;
    amp_status s = amp_module_batchnorm2d(m->ctx, c, &l);
    return amp_seq_take(m, name, s, l);
}

amp_status amp_seq_add_relu(amp_model *m, const char *name) {
    AMP_TRY(amp_seq_check(__func__, m, name));
    amp_model *l = NULL;
    amp_status s = amp_module_relu(m->ctx, &l);
    return amp_seq_take(m, name, s, l);
}

amp_status amp_seq_add_maxpool2d(amp_model *m, const char *name, int kernel, int stride) {
    AMP_TRY(amp_seq_check(__func__, m, name));
    amp_model *l = NULL;
    amp_status s = amp_module_maxpool2d(m->ctx, kernel, stride, &l);
    return amp_seq_take(m, name, s, l);
}

amp_status amp_seq_add_flatten(amp_model *m, const char *name) {
    AMP_TRY(amp_seq_check(__func__, m, name));
    amp_model *l = NULL;
    amp_status s = amp_module_flatten(m->ctx, &l);
    return amp_seq_take(m, name, s, l);
}

amp_status amp_seq_add_dropout(amp_model *m, const char *name, float p) {
    AMP_TRY(amp_seq_check(__func__, m, name));
    amp_model *l = NULL;
    amp_status s = amp_module_dropout(m->ctx, p, &l);
    return amp_seq_take(m, name, s, l);
}
