/* The broadcast path of the binary ops (nn/ops_broadcast.c), which nn/ops_elementwise.c takes
 * when the operands' shapes differ. */
#ifndef AMP_NN_BROADCAST_INTERNAL_H
#define AMP_NN_BROADCAST_INTERNAL_H

#include "core/backend.h"
#include "core/tensor_internal.h"
#include "nn/autograd.h"

/* What a binary op's backward leaves unread (amp_node_unread): add and sub read no data, mul
 * reads its inputs but not its output, div reads b and its output (dy / b, -(dy / b) y) but not
 * a. node may be NULL. */
static inline void amp_binary_unread(amp_tape_node *node, amp_binary_op kind) {
    if (kind == AMP_BINARY_ADD || kind == AMP_BINARY_SUB) amp_node_unread(node, 3u, true);
    else if (kind == AMP_BINARY_MUL) amp_node_unread(node, 0u, true);
    else if (kind == AMP_BINARY_DIV) amp_node_unread(node, 1u, false);
}

/* y = kind(a, b) over their broadcast shape (add, sub, mul or div), recorded for backward; a and
 * b are checked float tensors of one dtype whose shapes differ. */
amp_status amp_bcast_binary_run(const char *op, const char *name, amp_binary_op kind,
                                amp_tensor *a, amp_tensor *b, amp_tensor **out);

#endif
