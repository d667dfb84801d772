/* The write versions of what a backward reads (PyTorch's saved-variable check,
 * torch/csrc/autograd/saved_variable.cpp: "one of the variables needed for gradient computation
 * has been modified by an inplace operation"). amp_record keeps each input's and the output's
 * version, amp_node_save each saved tensor's (core/tensor_internal.h: amp_tensor_mark_written
 * moves it on every write in place: a host copy, a load, an optimizer step, amp_accumulate);
 * before the backward writes anything, every node the loss reaches compares them with the
 * tensors' versions now, except for what the op declared its backward never reads
 * (amp_node_unread). One compare per saved tensor per node.
 *
 * What is exempt, and why, is said where the op declares it (nn/ops_*.c): e.g. a cast never reads
 * its input (so the step's write of an f32 weight under O1 leaves the cast valid), an add reads
 * no data, embedding reads its ids but not the weight. A tensor written by the step that an op
 * does read (an O0 weight, the half weight of an O2 model, which the step writes from the
 * masters) is not exempt: a retained graph's second backward after amp_step is refused, as
 * PyTorch refuses it. The O2 masters themselves are no op's input (the optimizer's own), and O1's
 * kept half copies (core/cast_shadow.h) are never rewritten while a tape may read them: the
 * optimizer leaves a copy a retained graph reads stale instead. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "nn/autograd.h"

/* Input i's name from the node's args into buf. */
static const char *amp_node_arg_name(const amp_tape_node *n, int i, char *buf, size_t size) {
    const char *w = n->args ? n->args : "";
    for (int k = 0; k < i && *w; k++) {
        w += strcspn(w, " ");
        if (*w) w++;
    }
    int len = (int)strcspn(w, " ");
    if (len == 0) return "unnamed";
    snprintf(buf, size, "%.*s", len, w);
    return buf;
}

/* Which tensor of a node amp_version_moved names: input i >= 0, saved[k] as -1 - k, or out. */
#define AMP_VERSION_OUT (-1 - AMP_NODE_MAX_SAVED)
#define AMP_VERSION_PARAM (AMP_VERSION_OUT - 1) /* params[k] as AMP_VERSION_PARAM - k */

/* The refusal: which tensor of which op, its versions then and now, and what to do. */
static amp_status amp_version_moved(const amp_tape_node *n, int i, const amp_tensor *t,
                                    uint64_t was) {
    char what[128], name[48];
    if (i <= AMP_VERSION_PARAM)
        snprintf(what, sizeof what, "parameter %d of the child %s runs again",
                 AMP_VERSION_PARAM - i, n->op);
    else if (i == AMP_VERSION_OUT)
        snprintf(what, sizeof what, "the output of %s", n->op);
    else if (i < 0)
        snprintf(what, sizeof what, "the %s saved by %s", n->saved_name[-1 - i], n->op);
    else
        snprintf(what, sizeof what, "input %d (%s) of %s", i,
                 amp_node_arg_name(n, i, name, sizeof name), n->op);
    const char *hint = (t->flags & AMP_TENSOR_PARAM)
                           ? "a parameter, which amp_step, a load or a copy wrote after this "
                             "forward: run the forward again after such a write"
                           : "write into another tensor, or run the forward again after the write";
    return amp_fail(AMP_ERR_STATE, "amp_backward: one of the tensors needed for gradient "
                    "computation has been modified after its forward: %s was version %llu, is "
                    "now %llu; %s (amp_zero_grad or amp_ctx_reset_step releases this graph)",
                    what, (unsigned long long)was, (unsigned long long)*t->version, hint);
}

static amp_status amp_node_check_versions(const amp_tape_node *n) {
    for (int i = 0; i < n->n_in; i++) {
        const amp_tensor *t = n->in[i];
        if (t && !(n->unread & (1u << i)) && *t->version != n->in_version[i])
            return amp_version_moved(n, i, t, n->in_version[i]);
    }
    if (!(n->unread & AMP_NODE_UNREAD_OUT) && *n->out->version != n->out_version)
        return amp_version_moved(n, AMP_VERSION_OUT, n->out, n->out_version);
    for (int k = 0; k < AMP_NODE_MAX_SAVED; k++) {
        const amp_tensor *t = n->saved[k];
        if (t && *t->version != n->saved_version[k])
            return amp_version_moved(n, -1 - k, t, n->saved_version[k]);
    }
    for (int k = 0; k < n->n_params; k++)
        if (*n->params[k]->version != n->param_version[k])
            return amp_version_moved(n, AMP_VERSION_PARAM - k, n->params[k], n->param_version[k]);
    return AMP_OK;
}

/* The tape is in execution order, so a node's inputs' nodes come before it: one reverse pass
 * marks what the loss reaches and checks it; each mark is cleared once read, so the flags are
 * all false again afterwards, and on a refusal the rest are cleared too. */
amp_status amp_autograd_check_versions(const amp_tensor *loss) {
    amp_ctx *ctx = loss->ctx;
    loss->node->reached = true;
    amp_status s = AMP_OK;
    for (int i = ctx->n_tape - 1; i >= 0; i--) {
        amp_tape_node *n = ctx->tape[i];
        if (!n->reached) continue;
        n->reached = false;
        if (s != AMP_OK) continue;
        s = amp_node_check_versions(n);
        for (int k = 0; s == AMP_OK && k < n->n_in; k++) {
            const amp_tensor *t = n->in[k];
            if (t && t->requires_grad && t->node) t->node->reached = true;
        }
    }
    return s;
}
