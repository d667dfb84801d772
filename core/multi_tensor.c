/* The multi-tensor planner: Apex's multi_tensor_apply host loop turned into an iterator that
 * hands out one launch per call instead of launching a kernel (see core/multi_tensor.h). */
#include "core/multi_tensor.h"

#include <string.h>

#include "core/error.h"

/* Apex's depth_to_max_tensors: the most slots whose addresses, with the rest of its
 * TensorListMetadata, stay under the 4 KiB argument limit at each depth. */
static const int k_apex_max_tensors[AMP_MT_MAX_DEPTH] = {110, 64, 48, 36, 30};

amp_mt_limits amp_mt_limits_apex(int depth) {
    amp_mt_limits l = {AMP_MT_CHUNK_NUMEL, 0, AMP_MT_MAX_BLOCKS};
    if (depth >= 1 && depth <= AMP_MT_MAX_DEPTH) l.max_tensors = k_apex_max_tensors[depth - 1];
    return l;
}

static int mt_slot_capacity(int depth) {
    int by_addrs = AMP_MT_MAX_ADDRS / depth;
    return by_addrs < AMP_MT_MAX_TENSORS ? by_addrs : AMP_MT_MAX_TENSORS;
}

static amp_status mt_check_limits(int depth, amp_mt_limits lim) {
    if (lim.chunk_numel < 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_mt_planner_init: chunk_numel = %lld, want >= 1",
                        (long long)lim.chunk_numel);
    int cap = mt_slot_capacity(depth);
    if (lim.max_tensors < 1 || lim.max_tensors > cap)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "amp_mt_planner_init: max_tensors = %d, want 1..%d at depth %d",
                        lim.max_tensors, cap, depth);
    if (lim.max_blocks < 1 || lim.max_blocks > AMP_MT_MAX_BLOCKS)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_mt_planner_init: max_blocks = %d, want 1..%d",
                        lim.max_blocks, AMP_MT_MAX_BLOCKS);
    return AMP_OK;
}

static amp_status mt_check_tensor(const amp_mt_tensor *t, int64_t i, int depth,
                                  int64_t chunk_numel) {
    if (t->numel < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_mt_planner_init: tensor %lld has numel %lld",
                        (long long)i, (long long)t->numel);
    if (t->numel == 0) return AMP_OK;
    for (int d = 0; d < depth; d++)
        if (!t->ptr[d])
            return amp_fail(AMP_ERR_INVALID_ARG,
                            "amp_mt_planner_init: tensor %lld has a NULL address in list %d",
                            (long long)i, d);
    if (amp_mt_n_chunks(t->numel, chunk_numel) > AMP_MT_MAX_CHUNKS_PER_TENSOR)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "amp_mt_planner_init: tensor %lld has %lld elements, more than %lld "
                        "chunks of %lld",
                        (long long)i, (long long)t->numel,
                        (long long)AMP_MT_MAX_CHUNKS_PER_TENSOR, (long long)chunk_numel);
    return AMP_OK;
}

amp_status amp_mt_planner_init(amp_mt_planner *pl, int depth, const amp_dtype *dtypes,
                               const amp_mt_tensor *tensors, int64_t n_tensors,
                               amp_mt_limits limits) {
    AMP_CHECK_ARG(pl);
    memset(pl, 0, sizeof *pl);
    pl->last_nonempty = -1; /* a failed init leaves an iterator that yields nothing */
    if (depth < 1 || depth > AMP_MT_MAX_DEPTH)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_mt_planner_init: depth = %d, want 1..%d", depth,
                        AMP_MT_MAX_DEPTH);
    AMP_CHECK_ARG(dtypes);
    for (int d = 0; d < depth; d++)
        if (dtypes[d] != AMP_F32 && dtypes[d] != AMP_F16 && dtypes[d] != AMP_BF16 &&
            dtypes[d] != AMP_I32)
            return amp_fail(AMP_ERR_DTYPE, "amp_mt_planner_init: list %d has unknown dtype %d", d,
                            (int)dtypes[d]);
    AMP_TRY(mt_check_limits(depth, limits));
    /* tensor_index is 32-bit to fit the launch; a list of 2^31 tensors is not a model. */
    if (n_tensors < 0 || n_tensors > INT32_MAX)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_mt_planner_init: n_tensors = %lld, want "
                        "0..%d", (long long)n_tensors, INT32_MAX);
    if (n_tensors > 0) AMP_CHECK_ARG(tensors);
    int64_t last = -1;
    for (int64_t i = 0; i < n_tensors; i++) {
        AMP_TRY(mt_check_tensor(&tensors[i], i, depth, limits.chunk_numel));
        if (tensors[i].numel > 0) last = i;
    }
    pl->tensors = tensors;
    pl->n_tensors = n_tensors;
    pl->limits = limits;
    pl->depth = depth;
    for (int d = 0; d < depth; d++) pl->dtype[d] = dtypes[d];
    pl->next_tensor = 0;
    pl->next_chunk = 0;
    pl->last_nonempty = last;
    return AMP_OK;
}

/* Appends tensor i as the launch's next slot and returns the slot. */
static int mt_add_slot(const amp_mt_planner *pl, amp_mt_launch *l, int64_t i) {
    int s = l->n_tensors++;
    for (int d = 0; d < pl->depth; d++) l->addr[s * pl->depth + d] = pl->tensors[i].ptr[d];
    l->numel[s] = pl->tensors[i].numel;
    l->tensor_index[s] = (int32_t)i;
    return s;
}

bool amp_mt_planner_next(amp_mt_planner *pl, amp_mt_launch *out) {
    if (!pl || !out || pl->next_tensor > pl->last_nonempty) return false;
    amp_mt_launch *l = out;
    /* Only the header and the filled entries are written: a kernel reads no other entry, and
     * clearing 3.8 KB per launch would cost more than the planning. */
    l->chunk_numel = pl->limits.chunk_numel;
    l->first_block = pl->blocks_done;
    l->n_tensors = 0;
    l->n_blocks = 0;
    l->depth = (uint8_t)pl->depth;
    for (int d = 0; d < AMP_MT_MAX_DEPTH; d++) {
        l->dtype[d] = (uint8_t)(d < pl->depth ? pl->dtype[d] : AMP_F32);
        l->elem_size[d] = (uint8_t)(d < pl->depth ? amp_dtype_size(pl->dtype[d]) : 0);
    }
    int64_t i = pl->next_tensor;
    int64_t chunk = pl->next_chunk;
    /* chunk > 0: tensor i was cut by the previous launch and is carried into slot 0. */
    int slot = chunk > 0 ? mt_add_slot(pl, l, i) : -1;
    for (;;) {
        if (chunk == 0) {
            while (pl->tensors[i].numel == 0) i++; /* stops at last_nonempty at the latest */
            slot = mt_add_slot(pl, l, i);
        }
        int64_t n_chunks = amp_mt_n_chunks(pl->tensors[i].numel, pl->limits.chunk_numel);
        for (; chunk < n_chunks; chunk++) {
            l->block[l->n_blocks++] = ((uint32_t)chunk << AMP_MT_SLOT_BITS) | (uint32_t)slot;
            bool tensor_done = chunk == n_chunks - 1;
            bool tensors_full = l->n_tensors == pl->limits.max_tensors && tensor_done;
            bool blocks_full = l->n_blocks == pl->limits.max_blocks;
            bool list_done = i == pl->last_nonempty && tensor_done;
            if (tensors_full || blocks_full || list_done) {
                pl->next_tensor = tensor_done ? i + 1 : i;
                pl->next_chunk = tensor_done ? 0 : chunk + 1;
                pl->blocks_done += l->n_blocks;
                return true;
            }
        }
        i++;
        chunk = 0;
    }
}
