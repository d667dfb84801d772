/* DDP's state, shared by parallel/ddp.c (creation, checks, broadcast) and parallel/ddp_buckets.c
 * (the all-reduce of gradient buckets during backward). */
#ifndef AMP_PARALLEL_DDP_INTERNAL_H
#define AMP_PARALLEL_DDP_INTERNAL_H

#include "core/ctx.h"
#include "nn/autograd.h"
#include "nn/model_internal.h"
#include "optim/optimizer_internal.h"
#include "parallel/comm_internal.h"

/* One bucket: consecutive parameters (in reverse registration order) of one gradient dtype, whose
 * gradients are one contiguous range of the model's gradient block (views start on 64-byte
 * boundaries and the padding between them is zero, so the range is reduced whole). */
typedef struct amp_ddp_bucket {
    int first, last;         /* parameter indices, first <= last; reverse order: last is ready first */
    amp_dtype dtype;         /* the gradients' dtype */
    void *data;              /* the range in the gradient block (backend memory) */
    int64_t numel;           /* elements of dtype in the range, padding included */
    float *f32;              /* allreduce_always_fp32 with a half dtype: the f32 copy reduced */
    int pending;             /* parameters whose gradient is not complete yet this backward */
    bool launched;
    MPI_Request req;
    int *rs_counts;          /* zero_reduce_scatter: each rank's elements of the bucket */
} amp_ddp_bucket;

struct amp_ddp {
    amp_comm *comm;
    bool owns_comm;
    amp_model *model;
    amp_optimizer *opt;
    amp_ctx *ctx;
    amp_ddp_opts opts;       /* with the defaults filled in */
    void *grad_block;        /* the model's gradient block when the buckets were cut */
    int n_params;
    const amp_tensor **sorted; /* the parameters sorted by address, to find an input's index */
    int *sorted_index;       /* parameter index of sorted[i] */
    int *uses;               /* per parameter: tape inputs still to run this backward */
    int *bucket_of;          /* per parameter: its bucket */
    amp_ddp_bucket *buckets;
    int n_buckets;
    int next_launch;         /* buckets are launched in order: every rank issues the same sequence */
    bool sync;               /* amp_ddp_set_sync */
    bool active;             /* the backward in progress all-reduces */
    MPI_Op op_f16_sum, op_bf16_sum; /* MPI has no half types: sums widened to f32 per element */
    void *coll;              /* the communicator's backend communicator (NCCL) when the memory
                                is not host memory (owned by comm); NULL: MPI on host memory */
    double t_last_coll;      /* when the newest backend collective was queued */
    double t_first_launch, t_walk_end;
    int launched_in_walk;
    int nodes_left;          /* tape nodes backward has still to run */
    int launched_early;      /* buckets launched while nodes were left: hidden behind backward */
    amp_ddp_stats stats;
    const char *lost; /* "model" or "optimizer": freed under it; it no longer watches backward */
    /* ZeRO (parallel/zero.c): the stage in effect, and each rank's run of the parameter block
     * in bytes, [zero_bytes[r], zero_bytes[r + 1]), which the all-gather after a step fills. */
    int zero_stage;
    bool opt_gone;          /* the optimizer was freed (whatever was freed first) */
    size_t *zero_bytes;
    int64_t *zero_cuts;     /* the same runs in flat elements, [zero_cuts[r], zero_cuts[r + 1]) */
    void *zero_param_block; /* the model's parameter block when the shards were cut */
};

/* AMP_OK when d is there and its model and optimizer are not freed; else the error for `who`. */
amp_status amp_ddp_check_usable(const char *who, const amp_ddp *d);

/* parallel/ddp.c: the backend's communicator for the DDP's ranks (NCCL on CUDA), bootstrapped
 * over MPI. */
amp_status amp_ddp_coll_create(amp_ddp *d);
/* Fails when the backend's collectives queued before now are still running past the deadline
 * (a peer died or hangs): NCCL does not wait on the host, so this is where it is noticed. */
amp_status amp_ddp_coll_watchdog(amp_ddp *d);

/* parallel/zero.c: cuts the optimizer into this rank's shard (after the broadcast of rank 0's
 * state), and frees what that made. */
amp_status amp_zero_create(amp_ddp *d);
void amp_zero_free(amp_ddp *d);
/* parallel/zero_checkpoint.c: around rank 0's save, every rank's pieces gathered into whole views
 * on rank 0 (collective; the step counts agreed on every rank), then put back; around a load,
 * whole views on every rank, then each rank's pieces taken from them (loaded) or left (not). */
amp_status amp_zero_save_begin(amp_ddp *d, amp_optimizer_pieces *kept);
amp_status amp_zero_save_end(amp_ddp *d, amp_optimizer_pieces *kept);
amp_status amp_zero_load_begin(amp_ddp *d, amp_optimizer_pieces *kept);
amp_status amp_zero_load_end(amp_ddp *d, amp_optimizer_pieces *kept, bool loaded);

/* parallel/ddp_buckets.c */
amp_status amp_ddp_buckets_create(amp_ddp *d);
void amp_ddp_buckets_free(amp_ddp *d);
extern const amp_backward_observer amp_ddp_observer;

#endif
