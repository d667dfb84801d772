/* Multi-tensor apply, the planning half: cuts a list of tensors into launches of chunks, the way
 * Apex's multi_tensor_apply (csrc/multi_tensor_apply.cuh) does, so that one kernel launch
 * updates many small tensors (a fused optimizer step is a handful of launches, not one per
 * parameter). The other half is an op's step function over one chunk.
 *
 * Terms. A tensor of the list has `depth` aligned addresses, one per list (depth 4 for Adam:
 * grad, param, exp_avg, exp_avg_sq), all of the same numel; each list has one dtype. A chunk is
 * `chunk_numel` consecutive elements of a tensor (the last one may be shorter); a block is one
 * chunk given to one CUDA thread block. A launch (amp_mt_launch) holds a table of tensor slots
 * (addresses and numel) and a table of blocks, each a (slot, chunk index) pair.
 *
 * How a list is cut, as Apex cuts it: tensors are taken in order, each non-empty one gets the
 * next slot and one block per chunk, in chunk order. A launch is closed when
 *   - its block table is full (max_blocks), or
 *   - its tensor table is full (max_tensors) and the last slot's tensor has no chunk left, or
 *   - the last non-empty tensor of the list has no chunk left.
 * A tensor whose chunks do not all fit continues in the next launch: it becomes that launch's
 * slot 0 (Apex's carried slot), and only its remaining chunks get blocks there.
 * Empty tensors (numel 0) take no slot and no block. (Apex's host loop gives an empty tensor a
 * slot with no block, and when the list ends with one, its pending last launch is never issued;
 * tensor_index below is what lets a kernel find a slot's per-tensor data despite the skips.)
 *
 * The launch is a value type of fixed size, passed by value as a kernel argument. CUDA allows
 * 4096 bytes of kernel arguments in all; sizeof(amp_mt_launch) is 3840 on LP64 (every depth
 * uses the same type; the tables are sized for the largest depth of each), which leaves
 * AMP_MT_OP_ARG_BYTES = 256 bytes for the op's own arguments (scalars, a noop flag, per-tensor
 * norm pointers). Layout, in declaration order (offsets on LP64):
 *      0  void    *addr[150]         slot s, list d at addr[s * depth + d] (depth * slots <= 150)
 *   1200  int64_t  numel[110]        whole numel of the slot's tensor (not only this launch's part)
 *   2080  int64_t  chunk_numel
 *   2088  int64_t  first_block       blocks of all earlier launches (a per-block output index)
 *   2096  int32_t  tensor_index[110] the slot's position in the caller's list
 *   2536  uint32_t block[320]        (chunk index << 7) | slot
 *   3816  int32_t  n_tensors, n_blocks
 *   3824  uint8_t  depth, dtype[5], elem_size[5]       (then padding to 3840)
 * Per depth, the bytes of the tables a launch can fill: addresses 880 / 1024 / 1152 / 1152 /
 * 1200 for depth 1..5 with Apex's 110 / 64 / 48 / 36 / 30 slots.
 * A block's (slot, chunk) pair is one 32-bit word so that the four tables and the header fit:
 * with separate int32 chunk and uint8 slot arrays (Apex's) and the 64-bit numel and tensor index
 * that Apex lacks, the launch would take 4152 bytes. It limits a tensor to 2^25 chunks
 * (2^41 elements at Apex's chunk of 65536), checked by the planner.
 *
 * Sizes, offsets and element counts are int64_t throughout: a tensor may have 2^31 elements or
 * more; element offsets are chunk * chunk_numel in 64 bits.
 *
 * Use. The planner is an iterator that allocates nothing:
 *     amp_mt_planner pl;
 *     AMP_TRY(amp_mt_planner_init(&pl, 4, dtypes, tensors, n, amp_mt_limits_apex(4)));
 *     amp_mt_launch l;
 *     while (amp_mt_planner_next(&pl, &l)) {
 *         CUDA: kernel<<<l.n_blocks, threads, 0, stream>>>(l, op_args);   blockIdx.x = b
 *         CPU:  for (int b = 0; b < l.n_blocks; b++) step(&l, b, op_args);
 *     }
 * and the step function of block b reads amp_mt_block_numel(&l, b) elements at
 * amp_mt_block_ptr(&l, b, d) for each list d. Blocks of one launch never overlap, so a CPU loop
 * over them may run in parallel. The `tensors` array must outlive the iteration; the planner does
 * not read the tensors' memory, so the addresses may be device pointers. */
#ifndef AMP_CORE_MULTI_TENSOR_H
#define AMP_CORE_MULTI_TENSOR_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

#include "amp/status.h"
#include "amp/tensor.h"
#include "core/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_MT_MAX_DEPTH 5
/* Apex's chunk: 65536 elements, 128 per thread of a 512-thread block. */
#define AMP_MT_CHUNK_NUMEL 65536
/* Capacity of a launch: tensor slots, addresses (depth * slots), blocks. Apex's limits per depth
 * (110, 64, 48, 36, 30 slots; 320 blocks) fit; larger ones are refused. */
#define AMP_MT_MAX_TENSORS 110
#define AMP_MT_MAX_ADDRS 150
#define AMP_MT_MAX_BLOCKS 320
/* A block word: the slot in the low bits, the chunk index above them. */
#define AMP_MT_SLOT_BITS 7
#define AMP_MT_MAX_CHUNKS_PER_TENSOR ((int64_t)1 << (32 - AMP_MT_SLOT_BITS))
/* CUDA's limit on the bytes of all arguments of one kernel, and what a launch leaves of it. */
#define AMP_MT_KERNEL_ARG_LIMIT 4096
#define AMP_MT_OP_ARG_BYTES 256

/* One tensor of the list: its numel and its address in each list (ptr[d] for d < depth; the
 * others are not read). */
typedef struct amp_mt_tensor {
    int64_t numel;
    void *ptr[AMP_MT_MAX_DEPTH];
} amp_mt_tensor;

/* How a list is cut. */
typedef struct amp_mt_limits {
    int64_t chunk_numel; /* elements per block, >= 1 */
    int max_tensors;     /* slots: 1 .. min(AMP_MT_MAX_TENSORS, AMP_MT_MAX_ADDRS / depth) */
    int max_blocks;      /* blocks per launch: 1 .. AMP_MT_MAX_BLOCKS */
} amp_mt_limits;

/* One kernel launch: see the layout above. Filled by amp_mt_planner_next. */
typedef struct amp_mt_launch {
    void *addr[AMP_MT_MAX_ADDRS];
    int64_t numel[AMP_MT_MAX_TENSORS];
    int64_t chunk_numel;
    int64_t first_block;
    int32_t tensor_index[AMP_MT_MAX_TENSORS];
    uint32_t block[AMP_MT_MAX_BLOCKS];
    int32_t n_tensors;
    int32_t n_blocks;
    uint8_t depth;
    uint8_t dtype[AMP_MT_MAX_DEPTH];     /* amp_dtype of each list */
    uint8_t elem_size[AMP_MT_MAX_DEPTH]; /* its bytes per element, for the device side */
} amp_mt_launch;

static_assert(sizeof(amp_mt_launch) + AMP_MT_OP_ARG_BYTES <= AMP_MT_KERNEL_ARG_LIMIT,
              "amp_mt_launch must leave AMP_MT_OP_ARG_BYTES of CUDA's kernel-argument limit");
static_assert(AMP_MT_MAX_TENSORS <= (1 << AMP_MT_SLOT_BITS), "a slot must fit its bits");

/* The iterator over one list's launches. Fields are private to core/multi_tensor.c. */
typedef struct amp_mt_planner {
    const amp_mt_tensor *tensors;
    int64_t n_tensors;
    int64_t last_nonempty; /* -1: nothing to launch */
    int64_t next_tensor;   /* the tensor the next block comes from */
    int64_t next_chunk;    /* its next chunk; > 0: it is carried into the next launch */
    int64_t blocks_done;
    amp_mt_limits limits;
    int depth;
    amp_dtype dtype[AMP_MT_MAX_DEPTH];
} amp_mt_planner;

/* Apex's limits for `depth` (1..5): chunk 65536, 110/64/48/36/30 slots, 320 blocks. Any other
 * depth gives max_tensors 0, which amp_mt_planner_init refuses. */
amp_mt_limits amp_mt_limits_apex(int depth);

/* Checks the list and starts the iteration. dtypes[d] is list d's dtype (d < depth). Fails with
 * AMP_ERR_INVALID_ARG (message naming the culprit) for depth outside 1..5, limits outside the
 * capacity above, n_tensors < 0 or > INT32_MAX, a negative numel, a NULL address of a non-empty
 * tensor, or a tensor of more than AMP_MT_MAX_CHUNKS_PER_TENSOR chunks; AMP_ERR_DTYPE for an
 * unknown dtype. `tensors` may be NULL when n_tensors is 0. */
amp_status amp_mt_planner_init(amp_mt_planner *pl, int depth, const amp_dtype *dtypes,
                               const amp_mt_tensor *tensors, int64_t n_tensors,
                               amp_mt_limits limits);

/* Fills *out with the next launch and returns true, or returns false (leaving *out untouched)
 * when every chunk has been handed out. A launch always has at least one block. */
bool amp_mt_planner_next(amp_mt_planner *pl, amp_mt_launch *out);

/* Chunks of a tensor of `numel` elements: ceil(numel / chunk_numel). */
AMP_HD static inline int64_t amp_mt_n_chunks(int64_t numel, int64_t chunk_numel) {
    return numel <= 0 ? 0 : (numel - 1) / chunk_numel + 1;
}

/* Block b's slot, chunk, first element (in its tensor) and element count. */
AMP_HD static inline int amp_mt_block_slot(const amp_mt_launch *l, int b) {
    return (int)(l->block[b] & ((1u << AMP_MT_SLOT_BITS) - 1u));
}
AMP_HD static inline int64_t amp_mt_block_chunk(const amp_mt_launch *l, int b) {
    return (int64_t)(l->block[b] >> AMP_MT_SLOT_BITS);
}
AMP_HD static inline int64_t amp_mt_block_offset(const amp_mt_launch *l, int b) {
    return amp_mt_block_chunk(l, b) * l->chunk_numel;
}
AMP_HD static inline int64_t amp_mt_block_numel(const amp_mt_launch *l, int b) {
    int64_t left = l->numel[amp_mt_block_slot(l, b)] - amp_mt_block_offset(l, b);
    return left < l->chunk_numel ? left : l->chunk_numel;
}
/* The address of block b's first element in list d. */
AMP_HD static inline void *amp_mt_block_ptr(const amp_mt_launch *l, int b, int d) {
    char *base = (char *)l->addr[amp_mt_block_slot(l, b) * l->depth + d];
    return base + amp_mt_block_offset(l, b) * (int64_t)l->elem_size[d];
}

#ifdef __cplusplus
}
#endif
#endif
