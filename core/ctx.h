/* The context's internals, shared by core and nn (the tape) and amp (the autocast state). */
#ifndef AMP_CORE_CTX_H
#define AMP_CORE_CTX_H

#include "amp/rng.h"
#include "amp/tensor.h"
#include "core/arena.h"
#include "core/backend.h"
#include "core/cast_shadow.h"
#include "core/mem_ledger.h"

/* Autocast: what the amp layer switches and the op dispatcher in nn/ obeys (nn/autocast.c). */
typedef struct amp_cast_cache_entry {
    const amp_tensor *src;
    amp_tensor *cast;
    uint64_t version; /* src's version when cast: a write since makes the entry miss */
} amp_cast_cache_entry;

typedef struct amp_autocast_state {
    bool enabled;
    amp_dtype half; /* AMP_F16 or AMP_BF16 */
    /* Casts of parameters made this step, reused by every op that needs them (PyTorch's autocast
     * weight cache); emptied by amp_ctx_reset_step and by backward. */
    amp_cast_cache_entry *cache;
    int n_cache, cap_cache;
    int cache_from; /* lookups start here: a recomputation sees only its own casts */
    /* The casts of parameters kept from step to step (core/cast_shadow.h), as many as the
     * parameters autocast casts (each table grows once, in the first steps). */
    amp_cast_shadow *shadows;
    int n_shadows, cap_shadows;
} amp_autocast_state;

/* Called on an object that holds another object of the context when that one is freed (an
 * optimizer hears of its model, DDP of its model and optimizer): it must stop using it. */
typedef void (*amp_forget_fn)(void *listener, const void *freed);
typedef struct amp_ctx_listener {
    void *who;
    amp_forget_fn fn;
} amp_ctx_listener;

/* Called for every op with its inputs and output (AMP_TRACE, tests). */
typedef void (*amp_trace_fn)(void *user, const char *op, const amp_tensor *const *in, int n_in,
                             const amp_tensor *out);

struct amp_ctx {
    const amp_backend *backend;
    /* Tensor structs and tape nodes of the step, in two arenas used in turn: the structs of the
     * step just ended stay readable through the next one, so a tensor kept past amp_zero_grad is
     * recognised as stale (its step_gen) instead of being read from reused memory. */
    amp_arena host_arenas[2];
    uint32_t step_gen; /* steps ended so far; host_arenas[step_gen & 1] is the current one */
    amp_arena data_arena; /* tensor data of the step, in backend memory (chunks: the ledger's) */
    /* Release points within a step (core/step_regions.c): the step tensors made since
     * region_mark in the data arena are region_gen's; a release frees their data but for the
     * kept tensors (moved into kept_arena until the step ends) and a carried one (moved into
     * carry_arenas[region_gen & 1], readable until the next release). */
    uint32_t region_gen;
    amp_arena_mark region_mark;
    amp_arena kept_arena, carry_arenas[2];
    struct amp_tensor **kept; /* kept this step, whichever region they were made in */
    int n_kept, cap_kept;
    /* The temporaries of a leaf's later gradient contributions (nn/autograd.c), reset when none
     * is open, at release points and at the step's end. */
    amp_arena sink_arena;
    int n_open_sinks;
    /* Every backend block allocated for this context, by kind (core/mem_ledger.h). */
    amp_mem_ledger ledger;
    struct amp_tape_node **tape; /* nodes in execution order: a topological order */
    int n_tape, cap_tape;
    /* The tape's generation (amp_ctx_tape_clear moves it), which caller-owned tensors the tape
     * reads are stamped with (amp_tensor.tape_gen), and whether one of them was freed while the
     * tape still held it: backward then refuses instead of reading the freed tensor. */
    uint32_t tape_gen;
    bool tape_lost_input;
    amp_rng_state rng;
    bool grad_enabled;
    /* amp_ctx_opts.allow_tf32 and .allow_nondeterministic: nn/ copies them into the backend
     * descriptors it fills (amp_gemm_desc, amp_conv2d_desc), so no backend holds a global mode. */
    bool allow_tf32, allow_nondeterministic;
    amp_autocast_state autocast;
    amp_trace_fn trace;
    void *trace_user;
    /* Who watches backward passes (DDP's gradient buckets, parallel/ddp.c); NULL: nobody. */
    const struct amp_backward_observer *bw_observer;
    void *bw_observer_user;
    /* Set during a backward that releases its graph (no retain_graph): gradients may be handed
     * from an output to an input instead of copied (amp_grad_pass, nn/autograd.c). */
    bool bw_releases;
    /* Activation recomputation (nn/recompute.c): the arena a recomputed child's forward makes its
     * data in, swapped for data_arena while it runs and reset after; how many such runs are
     * under way (a child set to recompute inside one runs as a part of it); set while a
     * backward runs a forward again (batch norms then leave their running statistics alone). */
    amp_arena recompute_arena;
    int recompute_depth;
    bool recompute_replay;
    /* Collectives among the ranks of a job for ops that need them in the middle of a pass (sync
     * batch norm's statistics, nn/ops_sync_batchnorm.c), set by parallel/ (amp_model_convert_sync_
     * batchnorm); NULL: a world of one, the op's local path. */
    const struct amp_collective *collective;
    void *collective_user;
    /* Lifetimes (core/ctx_lifetime.c): the public objects made on the context (models,
     * optimizers, caller-owned tensors, stagers, DDP) hold it; amp_ctx_free marks it released and
     * it goes with the last of them, in whatever order the caller frees them. */
    int n_holders;
    bool released;
    amp_ctx_listener *listeners;
    int n_listeners, cap_listeners;
    void *amp;                      /* the amp layer's state after amp_initialize (amp/state_internal.h) */
    const struct amp_layer_hooks *amp_hooks; /* set with it; NULL without */
};

struct amp_optimizer;
/* How the layers below reach the amp layer without including it (Apex patches optimizer.step and
 * zero_grad the same way): optim/ and nn/ call these through ctx->amp_hooks when it is set. */
typedef struct amp_layer_hooks {
    /* amp_optimizer_step: *handled is set when the amp layer manages opt (it then ran amp_step). */
    amp_status (*optimizer_step)(void *amp, struct amp_optimizer *opt, bool *handled);
    /* After an optimizer's gradients were marked empty: drops the amp layer's per-step state of
     * that optimizer (flags, sums of earlier backwards, a pending skip). */
    void (*optimizer_zero_grad)(void *amp, struct amp_optimizer *opt);
    /* A model or optimizer is being freed: the amp layer forgets it. */
    void (*forget)(void *amp, const void *object);
    /* Brings what the host knows of opt's steps up to date where the amp layer let the device
     * decide them (a sync-free step skipped on the device): its step count. */
    amp_status (*optimizer_settle)(void *amp, struct amp_optimizer *opt);
    void (*free)(void *amp); /* amp_ctx_free */
} amp_layer_hooks;

/* How a layer above nn/ follows a backward pass without nn/ knowing it (DDP all-reduces gradient
 * buckets as soon as backward has finished writing them). nn/autograd.c calls begin before the
 * reverse walk (the tape is known: node i of n), node_done after node i ran or was skipped (the
 * walk goes from n - 1 down to 0), and end after the walk with its status: end runs even when a
 * node failed, so work in flight is completed, and its error is returned when the walk's was OK. */
typedef struct amp_backward_observer {
    amp_status (*begin)(void *user, struct amp_tape_node *const *tape, int n);
    amp_status (*node_done)(void *user, const struct amp_tape_node *node);
    amp_status (*end)(void *user, amp_status walk);
    /* Called by the amp layer once a step's inf/NaN flags (n backend f32 scalars, 0 or 1) are
     * known, before anything is decided from them: DDP makes every rank's flags their maximum,
     * so that all ranks skip the same steps. NULL: nothing to agree with. */
    amp_status (*agree_found_inf)(void *user, float *found_inf, int n);
    /* hi[j] = the sum over the ranks of hi[j] + lo[j] (n backend f32 pairs), in f64 with one
     * rounding, the same bits on every rank: ZeRO's partial sums of squares for the clipping
     * norm. NULL: one rank. */
    amp_status (*sum_over_ranks)(void *user, float *hi, const float *lo, int n);
} amp_backward_observer;

/* How nn/ all-reduces without knowing parallel/ (ctx->collective). Both calls are collective:
 * every rank makes them in the same order, and every rank gets the same bits (an order fixed by
 * rank, not by the network). allreduce_sum_f32: in place over n f32 of the context's backend
 * memory; allreduce_sum_i64: in place over n int64 of host memory (counts, exact). */
typedef struct amp_collective {
    amp_status (*allreduce_sum_f32)(void *user, float *backend_ptr, int64_t n);
    amp_status (*allreduce_sum_i64)(void *user, int64_t *host, int n);
    void (*release)(void *user); /* amp_ctx_free, or another collective replacing this one */
} amp_collective;

/* Lifetimes (core/ctx_lifetime.c). hold/drop: a public object made on ctx, and its free (the
 * last drop of a released context destroys it). listen/unlisten: who hears amp_ctx_forget(ctx,
 * freed), which an object's free calls before it goes; a listener hearing must not listen or
 * unlisten. */
void amp_ctx_hold(amp_ctx *ctx);
void amp_ctx_drop(amp_ctx *ctx);
amp_status amp_ctx_listen(amp_ctx *ctx, void *who, amp_forget_fn fn);
void amp_ctx_unlisten(amp_ctx *ctx, void *who);
void amp_ctx_forget(amp_ctx *ctx, const void *freed);
/* The context's own teardown (core/ctx.c), when nothing holds it any more. */
void amp_ctx_destroy(amp_ctx *ctx);
/* amp_ctx_create (amp/tensor.h) on the backends `backends` gives (core/ctx.c): what the public
 * amp_ctx_create, above core, calls with the library's backends. */
amp_status amp_ctx_create_from(const amp_backend_getters *backends, const amp_ctx_opts *opts,
                               amp_ctx **out);

/* Release points (core/step_regions.c). release_region frees the data of the step tensors made
 * since the last release point, but for the kept ones (amp_tensor_keep) and `keep` (kept too:
 * the loss of a backward), and moves `carry` into memory that lasts until the next release
 * (the output of a no-grad forward); either may be NULL. step_end: the step is over. */
amp_status amp_ctx_release_region(amp_ctx *ctx, struct amp_tensor *keep, struct amp_tensor *carry);
void amp_ctx_regions_step_end(amp_ctx *ctx);
void amp_ctx_regions_init(amp_ctx *ctx);
void amp_ctx_regions_destroy(amp_ctx *ctx);

/* Memory for a step object (struct, node) that reset releases. Zero-filled. */
amp_status amp_ctx_step_alloc(amp_ctx *ctx, size_t nbytes, void **out);
/* Appends a node to the tape. */
amp_status amp_ctx_tape_push(amp_ctx *ctx, struct amp_tape_node *node);
/* Empties the tape (its nodes are step memory) and starts its next generation. */
void amp_ctx_tape_clear(amp_ctx *ctx);

#endif
