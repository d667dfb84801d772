/* libamp data parallelism: a communicator over MPI and DistributedDataParallel.
 *
 * Processes are started by `mpirun -np N prog` or `srun prog`, one per GPU (or per CPU worker).
 * A program not started by a launcher is a world of one and needs no MPI at all.
 *
 *   amp_comm *comm;  amp_comm_create(&comm);                  (MPI_Init when nobody did)
 *   ... amp_initialize(m, opt, AMP_O1) ...
 *   amp_ddp *ddp;    amp_ddp_create(m, opt, &(amp_ddp_opts){.comm = comm}, &ddp);
 *   loader: amp_loader_opts.rank = amp_comm_rank(comm), .world_size = amp_comm_size(comm)
 *   loop:   forward, amp_backward (buckets are all-reduced while backward runs), amp_step
 *
 * Gradients are averaged over the ranks during amp_backward: the parameters' gradients are cut
 * into buckets (PyTorch's DDP: reverse parameter order, the first bucket 1 MiB, then 25 MiB, one
 * dtype per bucket) and a bucket is all-reduced as soon as the backward pass has written every
 * gradient in it, while the rest of backward runs (non-blocking MPI collectives on the CPU).
 * amp_backward returns once every bucket is reduced and averaged, so amp_step, clipping and the
 * loss scaler see the global gradient; the loss scaler's overflow flag is agreed by a MAX
 * all-reduce, so every rank skips the same steps and keeps the same scale.
 *
 * Thread safety: one context, one DDP, one thread per process. Every call that communicates is
 * collective: every rank must make it, in the same order. */
#ifndef AMP_PARALLEL_H
#define AMP_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>

#include "amp/checkpoint.h"
#include "amp/nn.h"
#include "amp/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- communicator ---- */
typedef struct amp_comm amp_comm;

/* The world of this process: rank and size from MPI_COMM_WORLD when a launcher (mpirun, srun)
 * started it, else a world of one without MPI. Initialises MPI when nobody did (and finalises it
 * in amp_comm_free then). MPI errors are returned, never fatal (MPI_ERRORS_RETURN). */
amp_status amp_comm_create(amp_comm **out);
void amp_comm_free(amp_comm *comm); /* NULL is a no-op */
int amp_comm_rank(const amp_comm *comm);
int amp_comm_size(const amp_comm *comm);
/* The rank among the processes of this machine (the GPU to use): OMPI_COMM_WORLD_LOCAL_RANK,
 * SLURM_LOCALID, or MPI's shared-memory split. */
int amp_comm_local_rank(const amp_comm *comm);
/* How many of the world's processes run on this machine (to share its cores among them). */
int amp_comm_local_size(const amp_comm *comm);
/* One GPU per process, as PyTorch's torch.cuda.set_device(local_rank): makes GPU local_rank
 * (modulo the GPUs this process sees) the one the CUDA backend will use. Call it before the
 * first amp_ctx_create; AMP_ERR_STATE after the backend started on another GPU. Without CUDA or
 * a device: AMP_OK, nothing done. */
amp_status amp_comm_select_device(const amp_comm *comm);
/* Whether a launcher (mpirun, srun, a PMI/PMIx launcher) started this process, read from the
 * environment without touching MPI: a program that must not start MPI otherwise (one that forks)
 * asks before amp_comm_create. */
bool amp_comm_launched(void);
/* Whether the world spans processes (size > 1): collectives then really communicate. */
bool amp_comm_is_distributed(const amp_comm *comm);
amp_status amp_comm_barrier(amp_comm *comm);
/* Ends every process of the job with `code` (MPI_Abort): for a program that cannot go on after a
 * communication error (a collective that timed out leaves its peers waiting). Never returns. After
 * such an error amp_comm_free releases only our memory: MPI_Finalize would wait for the lost
 * peers. */
void amp_comm_abort(amp_comm *comm, int code);
/* In place over host memory: sum (or max) of n doubles across ranks. */
amp_status amp_comm_allreduce_sum_f64(amp_comm *comm, double *values, int n);
amp_status amp_comm_allreduce_max_f64(amp_comm *comm, double *values, int n);

/* ---- DistributedDataParallel ---- */
typedef struct amp_ddp amp_ddp;

typedef struct amp_ddp_opts {
    amp_comm *comm;            /* NULL: the DDP makes (and owns) a world communicator */
    size_t bucket_bytes;       /* 0: 25 MiB (PyTorch's bucket_cap_mb) */
    size_t first_bucket_bytes; /* 0: 1 MiB (PyTorch's first bucket, so communication starts early) */
    /* Apex's gradient_predivide_factor: gradients are divided by f before the all-reduce and by
     * world_size / f after it (0: 1, the plain average after the sum). A larger f keeps half sums
     * from overflowing on many ranks. */
    float gradient_predivide_factor;
    bool allreduce_always_fp32; /* half gradients are all-reduced in f32 (else in their dtype) */
    /* ZeRO (DeepSpeed's stage, PyTorch's ZeroRedundancyOptimizer): 0, DDP's replicas; 1, each
     * rank keeps and steps only its shard of the optimizer: one contiguous run of the flattened
     * parameters (the ranks' runs balanced to 32 elements), whose f32 masters, master gradients
     * and optimizer state only it holds. Gradients are all-reduced as under DDP, each rank
     * steps its run, and amp_step ends with an all-gather of the updated weights, so every rank
     * holds the same model after each step. The loss scaler's overflow flag and the clipping
     * norm are taken over all the ranks' shards (amp_clip_grad_norm sums their squares), so the
     * ranks step or skip together, with the same scale. SGD and Adam/AdamW (LAMB refused: its
     * trust ratio needs whole tensors), one loss and one optimizer, the CPU backend, in a world
     * of more than one (a world of one keeps everything whole). amp_ddp_checkpoint_save gathers
     * the state to rank 0 and writes DDP's files, byte for byte; amp_ddp_checkpoint_load reads
     * whole state on every rank and keeps this rank's shard, so a checkpoint moves between
     * stages 0 and 1 (at the same world size); amp_checkpoint_save of a sharded optimizer is
     * refused. */
    int zero_stage;
    /* zero_stage 1: each bucket is reduce-scattered instead of all-reduced, so that a rank
     * receives only its shard's reduced gradients (llm.c's -z 1); the rest of its gradient block
     * then holds its own unreduced values, which nothing reads. Not with
     * allreduce_always_fp32. */
    bool zero_reduce_scatter;
} amp_ddp_opts;

/* Wraps a built model and its optimizer (after amp_initialize, when amp is used: the other order
 * is an error, as in Apex). Collective: checks that every rank has the same parameters (names,
 * shapes, dtypes; the error names the first difference), then broadcasts rank 0's parameters,
 * buffers and master weights, so every rank starts from the same values. */
amp_status amp_ddp_create(amp_model *m, amp_optimizer *opt, const amp_ddp_opts *opts,
                          amp_ddp **out);
void amp_ddp_free(amp_ddp *ddp); /* NULL is a no-op */
/* PyTorch's no_sync(): while off, backward only accumulates local gradients (no communication);
 * the first backward with sync on again all-reduces the accumulated sum. On by default. */
amp_status amp_ddp_set_sync(amp_ddp *ddp, bool sync);
amp_comm *amp_ddp_comm(const amp_ddp *ddp);
/* The ZeRO stage in effect: the option's, or 0 in a world of one. */
int amp_ddp_zero_stage(const amp_ddp *ddp);
int amp_ddp_n_buckets(const amp_ddp *ddp);

/* What the last synchronised backward spent communicating (amp-bench, tests): seconds from the
 * first bucket's launch to the last one's completion, and seconds the host waited at the end of
 * backward for buckets still in flight (the part backward did not hide). */
typedef struct amp_ddp_stats {
    double comm_seconds, exposed_seconds;
    int buckets_launched_early; /* launched while backward still had nodes to run */
} amp_ddp_stats;
amp_status amp_ddp_get_stats(const amp_ddp *ddp, amp_ddp_stats *out);

/* Checkpoints under DDP (amp/checkpoint.h has the format). Collective. save: rank 0 writes the
 * folder while the others wait, and every rank returns rank 0's outcome (its error message
 * included); the ranks' loader positions must agree (the distributed sampler keeps them in step),
 * and the world size is stored with the checkpoint. load: every rank reads the same folder (a
 * file system all ranks see), and any rank's failure fails all of them; a checkpoint of another
 * world size is refused (the sampler would cut the epochs differently). Resuming with the same
 * world size is bit-exact, as amp_checkpoint_load is. The replicated state is rank 0's; every
 * rank's RNG state (ranks may seed theirs apart, for dropout masks of their own) is stored too,
 * and each rank gets its own back. */
amp_status amp_ddp_checkpoint_save(amp_ddp *ddp, const char *dir, int64_t step,
                                   const amp_checkpoint_opts *opts, char *path_out,
                                   size_t path_size);
amp_status amp_ddp_checkpoint_load(amp_ddp *ddp, const char *path, const amp_checkpoint_opts *opts,
                                   int64_t *step_out);

/* ---- SyncBatchNorm ---- */
/* torch.nn.SyncBatchNorm.convert_sync_batchnorm: every BatchNorm2d layer of m computes its
 * training statistics over the global batch of comm's ranks (amp_sync_batchnorm2d; eval is
 * unchanged), and the context of m all-reduces them through comm. comm NULL or a world of one:
 * the layers are flagged and run alone (the values of batch norm to rounding). comm must outlive
 * the context of m (it is not owned). On the CPU backend the statistics go to MPI; on CUDA to the
 * backend's collectives (NCCL), on a communicator made here: then the call is collective. Every
 * rank must convert the same model. Use with DDP in either order. */
amp_status amp_model_convert_sync_batchnorm(amp_model *m, amp_comm *comm);

#ifdef __cplusplus
}
#endif
#endif
