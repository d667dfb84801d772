/* The autograd tape: each differentiable op that ran with a grad-requiring input leaves a node;
 * amp_backward walks the nodes in reverse. Gradients flow through "sinks": the first contribution
 * to a tensor's gradient in a step overwrites it, later ones accumulate (backend entries only ever
 * overwrite, core/backend.h). */
#ifndef AMP_NN_AUTOGRAD_H
#define AMP_NN_AUTOGRAD_H

#include "amp/nn.h"
#include "core/ctx.h"
#include "core/tensor_internal.h"

#define AMP_NODE_MAX_IN 8
#define AMP_NODE_MAX_SAVED 3

typedef struct amp_tape_node amp_tape_node;
typedef amp_status (*amp_backward_fn)(amp_tape_node *n, const amp_tensor *dy);
/* Writes the node's output again into `into` (its shape and dtype) from what the node keeps for
 * its own backward: selective recomputation, a consumer that did not keep it (amp_linear_ex's
 * recompute_input) calls it in its backward. The same bits as the forward wrote. */
typedef amp_status (*amp_regenerate_fn)(const amp_tape_node *n, amp_tensor *into);

/* Bit of amp_tape_node.unread for the output (bits 0..AMP_NODE_MAX_IN-1 are the inputs'). */
#define AMP_NODE_UNREAD_OUT (1u << AMP_NODE_MAX_IN)

struct amp_tape_node {
    const char *op;   /* the public op's name without "amp_" (errors name it) */
    const char *args; /* its names for in[0..n_in), one word each ("q k v kv_len") */
    amp_backward_fn backward;
    amp_tensor *out;
    amp_tensor *in[AMP_NODE_MAX_IN];
    int n_in;
    /* What the backward never reads of the data (amp_node_unread): bit i for in[i],
     * AMP_NODE_UNREAD_OUT for out. Everything else is saved for the backward, PyTorch's
     * save_for_backward: its write version when recorded is in_version[i] / out_version, and
     * the backward is refused when one moved (amp_autograd_check_versions). */
    unsigned unread;
    bool reached; /* internal to amp_autograd_check_versions' walk; false between backwards */
    uint64_t in_version[AMP_NODE_MAX_IN];
    uint64_t out_version;
    /* Statistics, masks, indices: step tensors the op made for its backward (amp_node_save),
     * checked the same way (max_dim hands its indices to the caller too). */
    amp_tensor *saved[AMP_NODE_MAX_SAVED];
    const char *saved_name[AMP_NODE_MAX_SAVED];
    uint64_t saved_version[AMP_NODE_MAX_SAVED];
    void *aux; /* op-specific descriptor copy (step memory) */
    /* Leaves whose gradients the backward writes without their being inputs (a recomputed
     * child's parameters, nn/recompute.c), with their write versions when recorded: checked as
     * the inputs', and counted by DDP as read by this node. */
    amp_tensor **params;
    uint64_t *param_version;
    int n_params;
    amp_regenerate_fn regenerate; /* NULL: the output cannot be written again */
};

/* node->saved[slot] = t (NULL: none) under `name` (errors say it), with its write version now. */
static inline void amp_node_save(amp_tape_node *node, int slot, amp_tensor *t, const char *name) {
    node->saved[slot] = t;
    node->saved_name[slot] = name;
    node->saved_version[slot] = t ? *t->version : 0;
}

/* Records `out` as produced by op from in[0..n_in) (named by args: see amp_tape_node) when grads
 * are enabled and some input requires grad; *node is then the new node (else NULL: nothing to
 * save). The write versions of the inputs and of out are recorded as they are now: call it once
 * the op has written out. aux_size bytes of zeroed step memory are reserved at node->aux. */
amp_status amp_record(amp_tensor *out, const char *op, const char *args, amp_backward_fn backward,
                      int n_in, amp_tensor *const *in, size_t aux_size, amp_tape_node **node);

/* amp_record without its conditions: records the node whenever grads are enabled, whether or
 * not an input requires grad (a recomputed child whose parameters do). */
amp_status amp_record_always(amp_tensor *out, const char *op, const char *args,
                             amp_backward_fn backward, int n_in, amp_tensor *const *in,
                             size_t aux_size, amp_tape_node **node);
/* The reverse walk over tape[from, n_tape): each node whose output's gradient was written runs
 * its backward (errors name the op, after `where` when set), then its output's gradient goes
 * back to the arena; observed tells the backward observer (DDP) of every node. */
amp_status amp_autograd_walk(amp_ctx *ctx, int from, const char *where, bool observed);

/* What a loss must be before any backward of it (checked first, so that the amp layer's own
 * checks never speak for a loss that is not one): live, one element, with a graph. */
amp_status amp_autograd_check_loss(const amp_tensor *loss);
/* PyTorch's check of saved variables, before the backward writes anything: every node the loss
 * reaches (through inputs that require grad) compares the write version of each tensor its
 * backward reads (not declared unread) with the one recorded by amp_record; AMP_ERR_STATE naming
 * amp_backward, the op, the input and both versions when one moved. Changes nothing. */
amp_status amp_autograd_check_versions(const amp_tensor *loss);
/* Back-propagates from a one-element loss whose gradient is seed_value (1, or the loss scale),
 * then clears the tape unless retain_graph (PyTorch's: a second loss of the same forward can then
 * be back-propagated). amp_backward (amp layer) calls it. The checks above come first; when one
 * refuses, nothing has changed: no gradient written, the tape and the step's memory as they were
 * (amp_zero_grad or amp_ctx_reset_step releases them). */
amp_status amp_autograd_backward(amp_tensor *loss, float seed_value, bool retain_graph);
/* The same with the seed read from a backend scalar (an f32 in backend memory, e.g. the loss
 * scaler's scale on the device) when seed_scalar is set: no host read of it. */
amp_status amp_autograd_backward_seeded(amp_tensor *loss, float seed_value,
                                        const float *seed_scalar, bool retain_graph);

/* Where one gradient contribution for `t` goes. buf is NULL when t needs no gradient. */
typedef struct amp_grad_sink {
    amp_tensor *t;
    amp_tensor *buf; /* t->grad itself (first write of the step) or a temporary */
    bool scratch;    /* buf is a leaf's temporary in the context's sink arena */
} amp_grad_sink;

amp_status amp_grad_begin(amp_tensor *t, amp_grad_sink *s);
/* After buf was written: adds a temporary into t->grad, marks the gradient written. */
amp_status amp_grad_end(amp_grad_sink *s);
/* For a producer that accumulates in place (a GEMM's C = A B + beta C): t's gradient itself
 * (t must require grad), with *beta 0 for the step's first contribution and 1 after one;
 * amp_grad_mark_written once it is written. The same bits as a temporary added by
 * amp_grad_end: one rounding of the sum either way. */
amp_status amp_grad_target(amp_tensor *t, amp_tensor **grad, float *beta);
void amp_grad_mark_written(amp_tensor *t);
/* grad(t) += alpha * src, without a temporary (src has t's numel and dtype). */
amp_status amp_grad_accumulate(amp_tensor *t, const amp_tensor *src, float alpha);
/* grad(t) += src rounded to t's dtype (src of t's numel in another dtype: a cast's backward). */
amp_status amp_grad_accumulate_cast(amp_tensor *t, const amp_tensor *src);
/* grad(t) += node's output gradient (dy), for ops whose gradient flows back unchanged (reshape,
 * add): t's first contribution in a backward that releases the graph takes dy's memory over
 * instead of copying it, as PyTorch hands a view's gradient back; otherwise as accumulate. */
amp_status amp_grad_pass(amp_tape_node *node, amp_tensor *t);

/* For a backward that reads each element of its input t once, before writing t's gradient in
 * its place (cross-entropy's, as llm.c's fused classifier writes dlogits over the logits):
 * *grad is t's gradient over t's own data when nothing can read t again (t and the tensors it
 * views dropped by their callers, read by this node alone, the graph not retained, t's first
 * contribution), else NULL (write the gradient as usual, amp_grad_begin). The same values
 * either way; one [rows, classes] tensor less at the backward's peak. */
amp_status amp_grad_over_input(amp_tensor *t, amp_tensor **grad);

/* A view of x (nn/ops_shape.c): a step struct over x's data from element `at`, of another shape
 * (numel from it), sharing x's version counter; not recorded (the caller records it). */
amp_status amp_view_step(amp_tensor *x, int ndim, const int64_t *shape, int64_t at,
                         amp_tensor **out);

/* What the node's backward does not read of its tensors' data: the inputs of in_mask (bit i for
 * in[i]) and the output when out is set. amp_record counts every input and the output as read
 * (amp_tensor_drop keeps the data of a tensor with readers) and saved for the backward (their
 * versions checked); an op whose backward needs only its gradient (an add, a cast, a view) or
 * saved state of its own says so once recorded (node NULL: nothing was recorded, nothing to
 * say), and a write to such a tensor after the forward is then no reason to refuse the backward.
 * Say it only of data the backward never reads: anything else would let a rewritten tensor
 * through into the gradients. */
void amp_node_unread(amp_tape_node *node, unsigned in_mask, bool out);

/* Input checks shared by the ops; each names the op and the argument. */
amp_status amp_check_tensor(const char *op, const char *arg, const amp_tensor *t, int ndim);
amp_status amp_check_float(const char *op, const char *arg, const amp_tensor *t);
amp_status amp_check_same_dtype(const char *op, const amp_tensor *a, const amp_tensor *b);

#endif
