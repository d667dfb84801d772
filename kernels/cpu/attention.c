/* CPU backend: fused scaled dot-product attention, forward (attn_fwd), FlashAttention's
 * algorithm over tiles: for each (batch, head) and block of ATTN_BR query rows, the blocks of
 * ATTN_BC keys the rows see are visited in order, S = scale Q K^T, the rows' running max and sum
 * updated (the online softmax), and O += P V; only O and the rows' logsumexp are written. Tasks
 * (batch, head, query block) run in parallel (a grouped query head reading its key/value head's
 * rows where they are), each in its thread's arena (ATTN_BR x ATTN_BC
 * scores, the widened tiles, the f32 accumulator): no memory grows with seq^2. Half inputs are
 * widened tile by tile (f32 arithmetic), the products oneDNN's sgemm; bf16 inputs on a CPU with
 * AVX512-BF16 take bf16 products instead (attn_gemm, attention_tiles.h). The softmax's exps
 * run in vector loops built per ISA (attention_tiles.h): as scalar calls they took 60 % of the
 * forward.
 *
 * The tile sizes and the speed against PyTorch's CPU flash attention: bench/RESULTS.md
 * ("fused causal attention on the CPU against PyTorch's SDPA"). */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/math/attention.h"

/* The online softmax over one tile of scores (nr rows of nc keys from key j0): each row's max
 * and sum updated, its accumulator rescaled, the scores turned into the probabilities times
 * dropout's factor (0 past the row's keys), ready for O += P V. Built per ISA (the exps are most
 * of the work outside the products); the row sums run in ATTN_LANES explicit lanes so that they
 * vectorise at every width. */
AMP_CPU_CLONED(static, void, fwd_softmax_tile, (const amp_attn_desc *d, int64_t bh, int64_t i0,
               int64_t nr, int64_t j0, int64_t nc, int64_t len, attn_tiles *t),
               (d, bh, i0, nr, j0, nc, len, t)) {
    const int64_t dim = d->head_dim;
    const float inv_keep = amp_dropout_scale(d->dropout_p);
    for (int64_t r = 0; r < nr; r++) {
        int64_t i = i0 + r, nk = attn_min(amp_attn_keys(d, i, len) - j0, nc);
        float *s = t->s + r * ATTN_BC;
        if (nk <= 0) {
            memset(s, 0, (size_t)nc * sizeof *s);
            continue;
        }
        bool nan;
        float m_new = fmaxf(t->m[r], attn_row_max(s, nk, &nan));
        float corr = t->m[r] == -INFINITY ? 0.0f : amp_expf(t->m[r] - m_new);
        float sum = nan || !isfinite(m_new) ? attn_row_exp_scalar(s, nk, m_new)
                                            : attn_row_exp(s, nk, m_new);
        t->l[r] = t->l[r] * corr + sum;
        t->m[r] = m_new;
        for (int64_t j = nk; j < nc; j++) s[j] = 0.0f;
        float *acc = t->acc + r * dim;
        for (int64_t c = 0; c < dim; c++) acc[c] *= corr;
        if (d->dropout_p > 0.0f)
            for (int64_t j = 0; j < nk; j++)
                s[j] *= amp_attn_keep(d->dropout_p, inv_keep, d->seed,
                                      amp_attn_draw(d, bh, i, j0 + j));
    }
}

/* One query block's pass over its keys; false when oneDNN failed. */
static bool fwd_block(const amp_attn_desc *d, const attn_operands *x, int64_t bh, int64_t i0,
                      attn_tiles *t) {
    const int64_t seq = d->seq, dim = d->head_dim, nr = attn_min(ATTN_BR, seq - i0);
    const int64_t len = attn_kv_len(d, x->kv_len, bh), kvh = amp_attn_kv_of(d, bh);
    const attn_opnd q = attn_in(d, x->q, AMP_ATTN_Q, bh, i0, nr, t->q);
    for (int64_t r = 0; r < nr; r++) t->m[r] = -INFINITY, t->l[r] = 0.0f;
    memset(t->acc, 0, (size_t)(nr * dim) * sizeof *t->acc);
    int64_t kend = amp_attn_keys(d, i0 + nr - 1, len);
    for (int64_t j0 = 0; j0 < kend; j0 += ATTN_BC) {
        int64_t nc = attn_min(ATTN_BC, kend - j0);
        const attn_opnd k = attn_in(d, x->k, AMP_ATTN_KV, kvh, j0, nc, t->k);
        const attn_opnd v = attn_in(d, x->v, AMP_ATTN_KV, kvh, j0, nc, t->v);
        if (!attn_gemm(d, 'N', 'T', nr, nc, dim, d->scale, q, k, 0.0f, t->s, ATTN_BC)) return false;
        fwd_softmax_tile(d, bh, i0, nr, j0, nc, len, t);
        if (!attn_gemm(d, 'N', 'N', nr, dim, nc, 1.0f, attn_f32(t->s, ATTN_BC), v, 1.0f, t->acc,
                       dim))
            return false;
    }
    for (int64_t r = 0; r < nr; r++) {
        float inv = amp_attn_inv_sum(t->l[r]);
        for (int64_t c = 0; c < dim; c++) t->acc[r * dim + c] *= inv;
        x->lse[bh * seq + i0 + r] = amp_attn_lse(t->m[r], t->l[r]);
    }
    attn_store_rows(d, x->out, AMP_ATTN_O, bh, i0, nr, t->acc);
    return true;
}

/* Task i: (batch, head) i % (batch heads), the causal blocks near the end (which see the most
 * keys) first. */
static bool fwd_task(const amp_attn_desc *d, const attn_operands *x, int64_t task, attn_tiles *t) {
    int64_t bhs = d->batch * d->heads, blocks = (d->seq + ATTN_BR - 1) / ATTN_BR;
    return fwd_block(d, x, task % bhs, (blocks - 1 - task / bhs) * ATTN_BR, t);
}

amp_status amp_cpu_attn_fwd(amp_device_ctx *dev, const amp_attn_desc *d, const void *q,
                            const void *k, const void *v, const int32_t *kv_len, void *o,
                            float *lse) {
    AMP_TRY(amp_backend_check_attn_fwd(__func__, d, q, k, v, o, lse));
    AMP_TRY(attn_check_kv_len(__func__, d, kv_len));
    attn_operands x = {.q = q, .k = k, .v = v, .kv_len = kv_len, .out = o, .lse = lse};
    int64_t blocks = (d->seq + ATTN_BR - 1) / ATTN_BR;
    return attn_run(__func__, d, &x, d->batch * d->heads * blocks, d->heads, fwd_task);
}
