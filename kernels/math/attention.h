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

/* Where row i of (batch, head) bh starts in q, k, v and their gradients (qkv) or in o and dO
 * (!qkv), in elements, and the stride between a head's rows (amp_attn_ld): dense [batch, heads,
 * seq, head_dim], or amp_attn_desc's packed layout. The logsumexp and delta stay dense
 * [batch, heads, seq]. */
AMP_HD static inline int64_t amp_attn_ld(const amp_attn_desc *d, bool qkv) {
    return d->packed ? (qkv ? 3 : 1) * d->heads * d->head_dim : d->head_dim;
}
AMP_HD static inline int64_t amp_attn_row(const amp_attn_desc *d, bool qkv, int64_t bh,
                                          int64_t i) {
    if (!d->packed) return (bh * d->seq + i) * d->head_dim;
    int64_t b = bh / d->heads, h = bh - b * d->heads;
    return (b * d->seq + i) * amp_attn_ld(d, qkv) + h * d->head_dim;
}

/* Keys of query row i are [0, amp_attn_keys(...)): causal (j <= i) and the batch's valid
 * length (kv_len, or seq when there is no padding mask). */
AMP_HD static inline int64_t amp_attn_keys(bool causal, int64_t seq, int64_t i, int64_t kv_len) {
    int64_t n = causal && i + 1 < seq ? i + 1 : seq;
    return kv_len < n ? kv_len : n;
}

/* The Philox index of probability (bh, i, j), bh = b heads + h. */
AMP_HD static inline uint64_t amp_attn_draw(uint64_t offset, int64_t seq, int64_t bh, int64_t i,
                                            int64_t j) {
    return offset + ((uint64_t)bh * (uint64_t)seq + (uint64_t)i) * (uint64_t)seq + (uint64_t)j;
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
