/* What the attention kernels of both backends share (amp_attn_desc, core/backend.h): which keys
 * a query sees, the dropout draw of a (b, h, i, j) probability, and a row's online softmax
 * state. The products themselves are each backend's (oneDNN tiles on the CPU, warps on CUDA),
 * so the two agree to rounding, not bit for bit; the dropout masks are identical. */
#ifndef AMP_KERNELS_MATH_ATTENTION_H
#define AMP_KERNELS_MATH_ATTENTION_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/hd.h"
#include "kernels/math/dropout.h"
#include "kernels/math/transcendental.h"

/* The key/value heads and length of d (0 in the descriptor: those of q). */
AMP_HD static inline int64_t amp_attn_kv_heads(const amp_attn_desc *d) {
    return d->kv_heads > 0 ? d->kv_heads : d->heads;
}
AMP_HD static inline int64_t amp_attn_kv_seq(const amp_attn_desc *d) {
    return d->kv_seq > 0 ? d->kv_seq : d->seq;
}

/* The key/value head that query head bh = b heads + h reads (grouped-query attention): b kv_heads
 * + h / (heads / kv_heads). */
AMP_HD static inline int64_t amp_attn_kv_of(const amp_attn_desc *d, int64_t bh) {
    int64_t kvh = amp_attn_kv_heads(d), b = bh / d->heads, h = bh - b * d->heads;
    return b * kvh + h / (d->heads / kvh);
}

/* The tensors of an attention call by their addressing: q (and dq), k and v (and dk, dv), o (and
 * dO). */
typedef enum amp_attn_part { AMP_ATTN_Q = 0, AMP_ATTN_KV = 1, AMP_ATTN_O = 2 } amp_attn_part;

/* The stride between a head's rows in part p (amp_attn_row). */
AMP_HD static inline int64_t amp_attn_ld(const amp_attn_desc *d, amp_attn_part p) {
    if (!d->packed) return d->head_dim;
    return (p == AMP_ATTN_O ? d->heads : d->heads + 2 * amp_attn_kv_heads(d)) * d->head_dim;
}
/* Where row i of head row bh of part p starts, in elements: bh = b heads + h for q and o, b
 * kv_heads + g for k and v. Dense: [batch, heads, seq, head_dim] (k, v: [batch, kv_heads,
 * kv_seq, head_dim]); packed: amp_attn_desc's layout. The logsumexp and delta stay dense [batch,
 * heads, seq]. */
AMP_HD static inline int64_t amp_attn_row(const amp_attn_desc *d, amp_attn_part p, int64_t bh,
                                          int64_t i) {
    bool kv = p == AMP_ATTN_KV;
    if (!d->packed) return (bh * (kv ? amp_attn_kv_seq(d) : d->seq) + i) * d->head_dim;
    int64_t nh = kv ? amp_attn_kv_heads(d) : d->heads, b = bh / nh, h = bh - b * nh;
    return (b * d->seq + i) * amp_attn_ld(d, p) + h * d->head_dim;
}

/* Keys of query row i are [0, amp_attn_keys(...)): causal with the mask aligned to the end
 * (query i of seq sees keys j <= i + kv_seq - seq: PyTorch's causal_lower_right, a cache's
 * queries after its keys; top-left when kv_seq = seq), and the batch's valid length (kv_len, or
 * kv_seq when there is no padding mask). */
AMP_HD static inline int64_t amp_attn_keys(const amp_attn_desc *d, int64_t i, int64_t kv_len) {
    int64_t n = amp_attn_kv_seq(d);
    if (d->causal) {
        int64_t last = i + 1 + (n - d->seq);
        n = last < n ? (last > 0 ? last : 0) : n;
    }
    return kv_len < n ? kv_len : n;
}

/* The first query row that sees key j under the causal mask (0 without it). */
AMP_HD static inline int64_t amp_attn_first_row(const amp_attn_desc *d, int64_t j) {
    if (!d->causal) return 0;
    int64_t r = j - (amp_attn_kv_seq(d) - d->seq);
    return r > 0 ? r : 0;
}

/* The Philox index of probability (bh, i, j), bh = b heads + h. */
AMP_HD static inline uint64_t amp_attn_draw(const amp_attn_desc *d, int64_t bh, int64_t i,
                                            int64_t j) {
    return d->offset + ((uint64_t)bh * (uint64_t)d->seq + (uint64_t)i) *
                           (uint64_t)amp_attn_kv_seq(d) + (uint64_t)j;
}

/* The factor a kept probability is multiplied by: 0 when dropped, 1 / (1 - p) when kept, 1
 * without dropout. */
AMP_HD static inline float amp_attn_keep(float p, float inv_keep, uint64_t seed, uint64_t index) {
    if (p == 0.0f) return 1.0f;
    return amp_dropout_keep(seed, index, p) ? inv_keep : 0.0f;
}

/* A row's output factor and logsumexp from its running max m and sum l of e^(s - m): a row that
 * saw no key (l = 0) gives 0 and -inf. */
AMP_HD static inline float amp_attn_inv_sum(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }
AMP_HD static inline float amp_attn_lse(float m, float l) {
    return l > 0.0f ? m + amp_logf(l) : -INFINITY;
}

/* e^(s - lse) for the backward: 0 for a row without keys (lse = -inf). */
AMP_HD static inline float amp_attn_prob(float s, float lse) {
    return lse == -INFINITY ? 0.0f : amp_expf(s - lse);
}

#endif
