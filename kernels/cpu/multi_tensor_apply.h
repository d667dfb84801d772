/* The CPU side of multi-tensor apply (core/multi_tensor.h is the planner): the one launcher the
 * CPU backend's multi-tensor entries share (optim.c: SGD and Adam; optim_lamb.c: LAMB's three
 * passes; unscale_multi.c: unscale, nonfinite and sum_squares). Apex's multi_tensor_apply is the
 * model, as for the CUDA launcher (kernels/cuda/multi_tensor_apply.cuh): one generic loop over
 * the plan, one small op per entry (amp_cpu_mt_op: a piece function, and a per-launch hook for
 * the reductions).
 *
 * A launch's blocks are Apex's chunks of 65536 elements. On the CPU a block is cut further into
 * pieces of AMP_CPU_MT_PIECE elements, and the pieces of all blocks of a launch are what OpenMP
 * shares among threads: a launch of one block (a list of a few tensors under 65536 elements) still
 * uses every thread, and a piece is the CPU's reduction chunk, so a half copy is written while
 * its f32 values are in L1. Pieces of a launch never overlap (its blocks do not), so the loop
 * over them may run in any order on any number of threads; a reduction keeps one partial per
 * piece and adds them after the launch in plan order, which makes its bits independent of the
 * thread count.
 *
 * Each entry validates its arguments with messages that name it, then builds the planner's
 * tensor table (one malloc, freed before it returns) and applies its op to the plan. */
#ifndef AMP_KERNELS_CPU_MULTI_TENSOR_CPU_H
#define AMP_KERNELS_CPU_MULTI_TENSOR_CPU_H

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "core/multi_tensor.h"
#include "kernels/cpu/cpu_backend.h"

/* Elements per piece: the CPU reductions' chunk (AMP_CPU_REDUCE_CHUNK, 16 KiB of f32). */
#define AMP_CPU_MT_PIECE AMP_CPU_REDUCE_CHUNK
/* The most pieces one launch can hold (Apex's limits: 320 blocks of 65536). */
#define AMP_CPU_MT_MAX_PIECES (AMP_MT_MAX_BLOCKS * (AMP_MT_CHUNK_NUMEL / AMP_CPU_MT_PIECE))
static_assert(AMP_MT_CHUNK_NUMEL % AMP_CPU_MT_PIECE == 0, "a chunk must be whole pieces");

/* The pieces of one launch: block b's pieces are [first[b], first[b + 1]), in element order. */
typedef struct amp_cpu_mt_pieces {
    int n;                                /* pieces in the launch */
    int64_t numel;                        /* elements in the launch (the parallel threshold) */
    int32_t first[AMP_MT_MAX_BLOCKS + 1];
} amp_cpu_mt_pieces;

/* One piece: its index among the launch's pieces (where a reduction keeps its partial), its
 * block, its first element within the block and its length (<= AMP_CPU_MT_PIECE). */
typedef struct amp_cpu_mt_piece {
    int k;
    int block;
    int64_t lo, len;
} amp_cpu_mt_piece;

/* What amp_cpu_mt_apply runs: Apex's functor, split in two.
 *  - piece(ctx, l, pc): the op on one piece of launch l. It runs on any thread, in any order,
 *    beside the launch's other pieces (which never overlap it): it writes only its own elements
 *    and, for a reduction, its own partial (at pc->k).
 *  - launch_done(ctx, l, pcs), or NULL: after every piece of launch l has run, on the calling
 *    thread, launch after launch in plan order. A reduction adds its partials there, block by
 *    block in order (amp_cpu_mt_block_sum), which makes its bits independent of the thread count.
 * ctx is the op's own state, handed to both. */
typedef struct amp_cpu_mt_op {
    void (*piece)(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_piece *pc);
    void (*launch_done)(void *ctx, const amp_mt_launch *l, const amp_cpu_mt_pieces *pcs);
    void *ctx;
} amp_cpu_mt_op;

/* Runs op over every launch of the plan (its own copy of the iterator: *plan is left as it is,
 * so the caller may run another pass over the same plan), the pieces of a launch shared among
 * the OpenMP threads (one thread below AMP_CPU_PARALLEL_MIN elements). The plan must come from
 * amp_cpu_mt_planner_init (Apex's chunk, which bounds the pieces per launch). */
void amp_cpu_mt_apply(const amp_mt_planner *plan, const amp_cpu_mt_op *op);

/* The sum of block b's partials part[k * stride] for its pieces k, in order, from 0.0: a chunk's
 * sum, in the order every reduction of a launch adds them. */
static inline double amp_cpu_mt_block_sum(const amp_cpu_mt_pieces *p, int b, const double *part,
                                          int stride) {
    double s = 0.0;
    for (int k = p->first[b]; k < p->first[b + 1]; k++) s += part[(int64_t)k * stride];
    return s;
}

/* The address of the piece's first element in list d; NULL for d < 0 (a list not used). */
static inline void *amp_cpu_mt_piece_ptr(const amp_mt_launch *l, const amp_cpu_mt_piece *pc,
                                         int d) {
    if (d < 0) return NULL;
    return (char *)amp_mt_block_ptr(l, pc->block, d) + pc->lo * (int64_t)l->elem_size[d];
}

/* The caller's position in its list of the tensor that block b belongs to. */
static inline int64_t amp_cpu_mt_block_tensor(const amp_mt_launch *l, int b) {
    return l->tensor_index[amp_mt_block_slot(l, b)];
}

/* The planner's tensor table for n tensors (n >= 1), malloc'd with `extra_bytes` after it
 * (aligned for doubles) for the caller's own per-call arrays; AMP_ERR_OOM naming fn. */
amp_status amp_cpu_mt_table_alloc(const char *fn, int64_t n, size_t extra_bytes,
                                  amp_mt_tensor **table, void **extra);

/* The scale a fused kernel multiplies each gradient by: *scalars->grad_scale as it is when
 * given (the contract's "multiplied by it", as the CUDA kernels read it), else desc_scale with 0
 * or 1 meaning none (1). A negative, infinite or NaN value fails with AMP_ERR_INVALID_ARG naming
 * fn: the device scalar is host memory on this backend, so it can be checked. Call it only once
 * found_inf has been found clear: a skipped step's scalars may hold anything. */
amp_status amp_cpu_mt_grad_scale(const char *fn, float desc_scale, const amp_step_scalars *scalars,
                                 float *out);

/* True when the step is skipped: scalars->found_inf is set and nonzero. */
static inline bool amp_cpu_mt_skipped(const amp_step_scalars *scalars) {
    return scalars && scalars->found_inf && *scalars->found_inf != 0.0f;
}

/* Runs amp_mt_planner_init and names fn in its error. */
amp_status amp_cpu_mt_planner_init(const char *fn, amp_mt_planner *pl, int depth,
                                   const amp_dtype *dtypes, const amp_mt_tensor *table,
                                   int64_t n);

#endif
