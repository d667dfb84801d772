/* The context's internals, shared by core and nn (the tape) and amp (the autocast state). */
#ifndef AMP_CORE_CTX_H
#define AMP_CORE_CTX_H

#include "amp/rng.h"
#include "amp/tensor.h"
#include "core/arena.h"
#include "core/backend.h"

struct amp_ctx {
    const amp_backend *backend;
    amp_arena host_arena; /* tensor structs and tape nodes of the step */
    amp_arena data_arena; /* tensor data of the step, in backend memory */
    struct amp_tape_node **tape; /* nodes in execution order: a topological order */
    int n_tape, cap_tape;
    amp_rng_state rng;
    bool grad_enabled;
};

/* Memory for a step object (struct, node) that reset releases. Zero-filled. */
amp_status amp_ctx_step_alloc(amp_ctx *ctx, size_t nbytes, void **out);
/* Appends a node to the tape. */
amp_status amp_ctx_tape_push(amp_ctx *ctx, struct amp_tape_node *node);

#endif
