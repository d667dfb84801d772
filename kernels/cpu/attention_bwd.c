/* CPU backend: fused scaled dot-product attention, backward (attn_bwd), FlashAttention's
 * recomputation: the probabilities come back from q, k and the forward's logsumexp, never from a
 * saved seq x seq tensor. One task per (batch, key/value head), in parallel, its group's query
 * heads in order (one head without grouping), each: delta = rowsum(dO O) for its
 * rows, then for each block of ATTN_BC keys, over the blocks of ATTN_BR query rows that see them,
 *   S = scale Q K^T, P = e^(S - lse) (masked), dP = dO V^T, with dropout's factor z (0 or
 *   1 / (1 - p), the forward's draws) Pz = P z and dS = P (dP z - delta);
 *   dV += Pz^T dO, dK += scale dS^T Q, dQ += scale dS K,
 * the five products by oneDNN's sgemm (bf16 products for bf16 inputs on CPUs with AVX512-BF16:
 * attn_gemm, attention_tiles.h). dQ accumulates in the task's f32 rows of the whole head
 * (seq x head_dim floats in the thread's arena), so every sum has one order: deterministic,
 * without atomics, whatever the thread count. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/math/attention.h"
#include "core/half.h"

/* delta[i] = sum_c dO[i, c] O[i, c] for the head's rows, in ATTN_LANES f32 lanes added in
 * order (the same sum whatever the thread count); half rows widened in the tiles' buffers.
 * Built per ISA (one element at a time it took 2 ms of a GPT step's 13 in attention). */
AMP_CPU_CLONED(static, void, head_delta, (const amp_attn_desc *d, const attn_operands *x,
               int64_t bh, attn_tiles *t),
               (d, x, bh, t)) {
    int64_t dim = d->head_dim;
    for (int64_t i0 = 0; i0 < d->seq; i0 += ATTN_BR) {
        int64_t nr = attn_min(ATTN_BR, d->seq - i0);
        const attn_opnd dout_rows = attn_rows_f32(d, x->dout, AMP_ATTN_O, bh, i0, nr, t->dout);
        const attn_opnd o_rows = attn_rows_f32(d, x->o, AMP_ATTN_O, bh, i0, nr, t->q);
        for (int64_t r = 0; r < nr; r++) {
            const float *dout = (const float *)dout_rows.p + r * dout_rows.ld;
            const float *o = (const float *)o_rows.p + r * o_rows.ld;
            float lane[ATTN_LANES] = {0};
            int64_t c = 0;
            for (; c + ATTN_LANES <= dim; c += ATTN_LANES)
                for (int l = 0; l < ATTN_LANES; l++) lane[l] += amp_mul_rn(dout[c + l], o[c + l]);
            for (; c < dim; c++) lane[0] += amp_mul_rn(dout[c], o[c]);
            float sum = 0.0f;
            for (int l = 0; l < ATTN_LANES; l++) sum += lane[l];
            x->delta[bh * d->seq + i0 + r] = sum;
        }
    }
}

/* P, then dS in dp, for query block i0 (nr rows) against key block j0 (nc keys); pz (in s) is P
 * with dropout's factor. Built per ISA, the exps in attention_tiles.h's vector loops. */
AMP_CPU_CLONED(static, void, block_probs, (const amp_attn_desc *d, const attn_operands *x,
               int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc, int64_t len,
               attn_tiles *t),
               (d, x, bh, i0, nr, j0, nc, len, t)) {
    const float inv_keep = amp_dropout_scale(d->dropout_p);
    for (int64_t r = 0; r < nr; r++) {
        int64_t i = i0 + r, row = bh * d->seq + i;
        int64_t nk = attn_min(amp_attn_keys(d, i, len) - j0, nc);
        nk = nk > 0 ? nk : 0;
        float lse = x->lse[row], delta = x->delta[row];
        float *s = t->s + r * ATTN_BC, *dp = t->dp + r * ATTN_BC;
        bool nan;
        (void)attn_row_max(s, nk > 0 ? nk : 1, &nan); /* a NaN score takes the scalar way */
        if (nk > 0 && isfinite(lse) && !nan) {
            (void)attn_row_exp(s, nk, lse);
        } else {
            for (int64_t j = 0; j < nk; j++) s[j] = amp_attn_prob(s[j], lse);
        }
        for (int64_t j = nk; j < nc; j++) s[j] = 0.0f;
        if (d->dropout_p > 0.0f) {
            for (int64_t j = 0; j < nk; j++) {
                float z = amp_attn_keep(d->dropout_p, inv_keep, d->seed,
                                        amp_attn_draw(d, bh, i, j0 + j));
                dp[j] = s[j] * (dp[j] * z - delta);
                s[j] *= z;
            }
            for (int64_t j = nk; j < nc; j++) dp[j] = 0.0f * (dp[j] - delta);
        } else {
            for (int64_t j = 0; j < nc; j++) dp[j] = s[j] * (dp[j] - delta);
        }
    }
}

/* src rounded to dt (the gradient a head's attention writes), added to the f64 sums. */
static void fold_rounded(double *sum, const float *src, int64_t n, amp_dtype dt) {
    for (int64_t e = 0; e < n; e++) {
        float v = src[e];
        if (dt == AMP_BF16) v = amp_bf16_bits_to_f32(amp_f32_to_bf16_bits(v));
        else if (dt == AMP_F16) v = amp_f16_bits_to_f32(amp_f32_to_f16_bits(v));
        sum[e] += (double)v;
    }
}

/* f32 rows of the f64 sums (rounded once), the last step before attn_store_rows. */
static void sums_to_f32(float *dst, const double *sum, int64_t n) {
    for (int64_t e = 0; e < n; e++) dst[e] = (float)sum[e];
}

/* One query head bh reading key/value head kvh: dK and dV block by block (stored when the head
 * is alone in its group, else folded into the group's sums), dQ over the whole head; false when
 * oneDNN failed. */
static bool bwd_head(const amp_attn_desc *d, const attn_operands *x, int64_t bh, int64_t kvh,
                     attn_tiles *t) {
    const int64_t seq = d->seq, kv_seq = amp_attn_kv_seq(d), dim = d->head_dim;
    const int64_t len = attn_kv_len(d, x->kv_len, bh);
    head_delta(d, x, bh, t);
    memset(t->dq, 0, (size_t)(seq * dim) * sizeof *t->dq);
    for (int64_t j0 = 0; j0 < kv_seq; j0 += ATTN_BC) {
        int64_t nc = attn_min(ATTN_BC, kv_seq - j0);
        memset(t->dk, 0, (size_t)(nc * dim) * sizeof *t->dk);
        memset(t->dv, 0, (size_t)(nc * dim) * sizeof *t->dv);
        const attn_opnd k = attn_in(d, x->k, AMP_ATTN_KV, kvh, j0, nc, t->k);
        const attn_opnd v = attn_in(d, x->v, AMP_ATTN_KV, kvh, j0, nc, t->v);
        /* Rows before the first that sees key j0 see none of these keys when causal; no row sees
         * keys >= len. */
        int64_t first = amp_attn_first_row(d, j0) / ATTN_BR * ATTN_BR;
        for (int64_t i0 = j0 < len ? first : seq; i0 < seq; i0 += ATTN_BR) {
            int64_t nr = attn_min(ATTN_BR, seq - i0);
            /* The block's rows see keys below ks only (its last row sees the most): the keys
             * past it would add exact zeros to dQ, dK and dV, so their products are skipped. */
            int64_t ks = attn_min(nc, amp_attn_keys(d, i0 + nr - 1, len) - j0);
            if (ks <= 0) continue;
            const attn_opnd q = attn_in(d, x->q, AMP_ATTN_Q, bh, i0, nr, t->q);
            const attn_opnd dout = attn_in(d, x->dout, AMP_ATTN_O, bh, i0, nr, t->dout);
            const attn_opnd s = attn_f32(t->s, ATTN_BC), dp = attn_f32(t->dp, ATTN_BC);
            if (!attn_gemm(d, 'N', 'T', nr, ks, dim, d->scale, q, k, 0.0f, t->s, ATTN_BC) ||
                !attn_gemm(d, 'N', 'T', nr, ks, dim, 1.0f, dout, v, 0.0f, t->dp, ATTN_BC))
                return false;
            block_probs(d, x, bh, i0, nr, j0, ks, len, t);
            if (!attn_gemm(d, 'T', 'N', ks, dim, nr, 1.0f, s, dout, 1.0f, t->dv, dim) ||
                !attn_gemm(d, 'T', 'N', ks, dim, nr, d->scale, dp, q, 1.0f, t->dk, dim) ||
                !attn_gemm(d, 'N', 'N', nr, dim, ks, d->scale, dp, k, 1.0f, t->dq + i0 * dim, dim))
                return false;
        }
        if (t->dk_sum) {
            fold_rounded(t->dk_sum + j0 * dim, t->dk, nc * dim, d->dt);
            fold_rounded(t->dv_sum + j0 * dim, t->dv, nc * dim, d->dt);
        } else {
            attn_store_rows(d, x->dk, AMP_ATTN_KV, kvh, j0, nc, t->dk);
            attn_store_rows(d, x->dv, AMP_ATTN_KV, kvh, j0, nc, t->dv);
        }
    }
    attn_store_rows(d, x->dq, AMP_ATTN_Q, bh, 0, seq, t->dq);
    return true;
}

/* Task kvh = b kv_heads + g: the group's query heads in order, each one's dK and dV (rounded to
 * the dtype, as its own attention would write them) summed over the group in f64 and rounded
 * once: the bits of k and v repeated and the repeat's gradient summed (amp_sum_dim's order). */
static bool bwd_task(const amp_attn_desc *d, const attn_operands *x, int64_t kvh, attn_tiles *t) {
    const int64_t group = attn_group(d), kvheads = amp_attn_kv_heads(d);
    const int64_t bh0 = kvh / kvheads * d->heads + kvh % kvheads * group;
    if (group == 1) return bwd_head(d, x, bh0, kvh, t);
    const int64_t n = amp_attn_kv_seq(d) * d->head_dim;
    memset(t->dk_sum, 0, (size_t)n * sizeof *t->dk_sum);
    memset(t->dv_sum, 0, (size_t)n * sizeof *t->dv_sum);
    for (int64_t h = 0; h < group; h++)
        if (!bwd_head(d, x, bh0 + h, kvh, t)) return false;
    for (int64_t j0 = 0; j0 < amp_attn_kv_seq(d); j0 += ATTN_BC) {
        int64_t nc = attn_min(ATTN_BC, amp_attn_kv_seq(d) - j0), at = j0 * d->head_dim;
        sums_to_f32(t->dk, t->dk_sum + at, nc * d->head_dim);
        attn_store_rows(d, x->dk, AMP_ATTN_KV, kvh, j0, nc, t->dk);
        sums_to_f32(t->dv, t->dv_sum + at, nc * d->head_dim);
        attn_store_rows(d, x->dv, AMP_ATTN_KV, kvh, j0, nc, t->dv);
    }
    return true;
}

amp_status amp_cpu_attn_bwd(amp_device_ctx *dev, const amp_attn_desc *d, const void *q,
                            const void *k, const void *v, const int32_t *kv_len, const void *o,
                            const void *dout, const float *lse, float *delta, void *dq, void *dk,
                            void *dv) {
    AMP_TRY(amp_backend_check_attn_bwd(__func__, d, q, k, v, o, dout, lse, delta, dq, dk, dv));
    AMP_TRY(attn_check_kv_len(__func__, d, kv_len));
    attn_operands x = {.q = q, .k = k, .v = v, .o = o, .dout = dout, .kv_len = kv_len,
                       .lse = (float *)lse, .delta = delta, .dq = dq, .dk = dk, .dv = dv};
    return attn_run(__func__, d, &x, d->batch * amp_attn_kv_heads(d), amp_attn_kv_heads(d),
                    bwd_task);
}
