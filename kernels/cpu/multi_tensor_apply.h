/* The CPU side of multi-tensor apply (core/multi_tensor.h is the planner; this is how the CPU
 * backend runs one of its launches), shared by optim.c, optim_lamb.c and unscale_multi.c.
 *
 * A launch's blocks are Apex's chunks of 65536 elements. On the CPU a block is cut further into
 * pieces of AMP_CPU_MT_PIECE elements, and the pieces of all blocks of a launch are what OpenMP
 * shares among threads: a launch of one block (a list of a few tensors under 65536 elements) still
 * uses every thread, as the per-tensor entries do, and a piece is the per-tensor entries' own
 * chunk, so both run the same range functions over the same spans and a half copy is written
 * while its f32 values are in L1. Pieces of a launch never overlap (its blocks do not), so the
 * loop over them may run in any order on any number of threads; a reduction keeps one partial
 * per piece and adds them afterwards in plan order, which makes its bits independent of the
 * thread count.
 *
 * Each entry validates its arguments with messages that name it, then builds the planner's
 * tensor table (one malloc, freed before it returns) and iterates the launches. */
#ifndef AMP_KERNELS_CPU_MULTI_TENSOR_CPU_H
#define AMP_KERNELS_CPU_MULTI_TENSOR_CPU_H

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "core/multi_tensor.h"
#include "kernels/cpu/cpu_backend.h"

/* Elements per piece: the per-tensor entries' chunk (AMP_CPU_REDUCE_CHUNK, 16 KiB of f32). */
#define AMP_CPU_MT_PIECE AMP_CPU_REDUCE_CHUNK
/* The most pieces one launch can hold (Apex's limits: 320 blocks of 65536). */
#define AMP_CPU_MT_MAX_PIECES (AMP_MT_MAX_BLOCKS * (AMP_MT_CHUNK_NUMEL / AMP_CPU_MT_PIECE))
static_assert(AMP_MT_CHUNK_NUMEL % AMP_CPU_MT_PIECE == 0, "a chunk must be whole pieces");

/* The pieces of one launch: block b's pieces are [first[b], first[b + 1]). */
typedef struct amp_cpu_mt_pieces {
    int n;                                /* pieces in the launch */
    int64_t numel;                        /* elements in the launch (the parallel threshold) */
    int32_t first[AMP_MT_MAX_BLOCKS + 1];
} amp_cpu_mt_pieces;

/* One piece: its block, its first element within the block and its length. */
typedef struct amp_cpu_mt_piece {
    int block;
    int64_t lo, len;
} amp_cpu_mt_piece;

static inline void amp_cpu_mt_pieces_make(const amp_mt_launch *l, amp_cpu_mt_pieces *p) {
    /* The planner was given amp_mt_limits_apex, whose chunk bounds the piece count. */
    assert(l->chunk_numel == AMP_MT_CHUNK_NUMEL);
    int32_t k = 0;
    int64_t numel = 0;
    for (int b = 0; b < l->n_blocks; b++) {
        int64_t len = amp_mt_block_numel(l, b);
        p->first[b] = k;
        k += (int32_t)((len + AMP_CPU_MT_PIECE - 1) / AMP_CPU_MT_PIECE);
        numel += len;
    }
    p->first[l->n_blocks] = k;
    p->n = k;
    p->numel = numel;
}

/* Piece k of the launch (0 <= k < p->n): a binary search over the blocks' first pieces. */
static inline amp_cpu_mt_piece amp_cpu_mt_piece_at(const amp_mt_launch *l,
                                                  const amp_cpu_mt_pieces *p, int k) {
    int lo = 0, hi = l->n_blocks - 1; /* the block holding k is in [lo, hi] */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (p->first[mid] <= k) lo = mid;
        else hi = mid - 1;
    }
    amp_cpu_mt_piece r;
    r.block = lo;
    r.lo = (int64_t)(k - p->first[lo]) * AMP_CPU_MT_PIECE;
    int64_t left = amp_mt_block_numel(l, lo) - r.lo;
    r.len = left < AMP_CPU_MT_PIECE ? left : AMP_CPU_MT_PIECE;
    return r;
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
