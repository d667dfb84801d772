/* The CPU backend's multi-tensor launcher and the helpers of its entries
 * (kernels/cpu/multi_tensor_apply.h). */
#include "kernels/cpu/multi_tensor_apply.h"

#include <stdlib.h>

/* The pieces of launch l. */
static void mt_pieces_make(const amp_mt_launch *l, amp_cpu_mt_pieces *p) {
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
static amp_cpu_mt_piece mt_piece_at(const amp_mt_launch *l, const amp_cpu_mt_pieces *p, int k) {
    int lo = 0, hi = l->n_blocks - 1; /* the block holding k is in [lo, hi] */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (p->first[mid] <= k) lo = mid;
        else hi = mid - 1;
    }
    amp_cpu_mt_piece r;
    r.k = k;
    r.block = lo;
    r.lo = (int64_t)(k - p->first[lo]) * AMP_CPU_MT_PIECE;
    int64_t left = amp_mt_block_numel(l, lo) - r.lo;
    r.len = left < AMP_CPU_MT_PIECE ? left : AMP_CPU_MT_PIECE;
    return r;
}

void amp_cpu_mt_apply(const amp_mt_planner *plan, const amp_cpu_mt_op *op) {
    amp_mt_planner pl = *plan; /* an iterator is a value: the caller's stays at its start */
    amp_mt_launch l;
    amp_cpu_mt_pieces pcs;
    while (amp_mt_planner_next(&pl, &l)) {
        mt_pieces_make(&l, &pcs);
#pragma omp parallel for schedule(static) if (pcs.numel >= AMP_CPU_PARALLEL_MIN)
        for (int k = 0; k < pcs.n; k++) {
            amp_cpu_mt_piece pc = mt_piece_at(&l, &pcs, k);
            op->piece(op->ctx, &l, &pc);
        }
        if (op->launch_done) op->launch_done(op->ctx, &l, &pcs);
    }
}

amp_status amp_cpu_mt_table_alloc(const char *fn, int64_t n, size_t extra_bytes,
                                  amp_mt_tensor **table, void **extra) {
    /* The table's size is a multiple of 8 (an amp_mt_tensor holds int64 and pointers), so what
     * follows it is aligned for doubles. */
    static_assert(sizeof(amp_mt_tensor) % sizeof(double) == 0, "extra must stay aligned");
    size_t table_bytes = (size_t)n * sizeof(amp_mt_tensor);
    if (n < 1 || (uint64_t)n > SIZE_MAX / 2 / sizeof(amp_mt_tensor) ||
        extra_bytes > SIZE_MAX / 2 - table_bytes)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: %lld tensors", fn, (long long)n);
    char *p = malloc(table_bytes + extra_bytes);
    if (!p)
        return amp_fail(AMP_ERR_OOM, "%s: out of host memory for the plan of %lld tensors", fn,
                        (long long)n);
    *table = (amp_mt_tensor *)p;
    if (extra) *extra = p + table_bytes;
    return AMP_OK;
}

amp_status amp_cpu_mt_grad_scale(const char *fn, float desc_scale, const amp_step_scalars *scalars,
                                 float *out) {
    if (scalars && scalars->grad_scale) {
        float gs = *scalars->grad_scale;
        if (!(gs >= 0.0f) || isinf(gs))
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: *scalars->grad_scale = %g, want a finite "
                            "value >= 0", fn, (double)gs);
        *out = gs;
        return AMP_OK;
    }
    if (!(desc_scale >= 0.0f) || isinf(desc_scale))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: grad_scale = %g, want a finite value > 0 (0: "
                        "none)", fn, (double)desc_scale);
    *out = desc_scale == 0.0f ? 1.0f : desc_scale;
    return AMP_OK;
}

amp_status amp_cpu_mt_planner_init(const char *fn, amp_mt_planner *pl, int depth,
                                   const amp_dtype *dtypes, const amp_mt_tensor *table,
                                   int64_t n) {
    amp_status s = amp_mt_planner_init(pl, depth, dtypes, table, n, amp_mt_limits_apex(depth));
    return s == AMP_OK ? s : amp_fail_context(s, "%s", fn);
}
