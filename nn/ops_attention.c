/* Fused scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention): one
 * backend call forward, one backward; saved are the output (the tape keeps it) and each row's
 * f32 logsumexp, never the probabilities, so the state grows as batch heads seq, not seq^2. The
 * qkvpacked form (FlashAttention's) reads q, k and v where a fused QKV projection wrote them and
 * writes y as [batch, seq, heads, head_dim]: no permute, split or transpose copies either way.
 * Grouped-query attention reads each key/value head where it is, for every query head of its
 * group (the backend's descriptor carries kv_heads), so k and v are never repeated. */
#include <math.h>
#include <string.h>

#include "core/ctx.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor_internal.h"
#include "nn/autocast.h"

typedef struct attn_aux {
    amp_attn_desc d;
} attn_aux;

/* The gradient of q, k or v: straight into its sink (its gradient itself on the first
 * contribution), or a temporary when it needs none or is one of the other two (q, k and v may
 * be one tensor: each then gets all three, added in). */
static amp_status attn_grad_buf(amp_tensor *t, bool shared, amp_grad_sink *s, amp_tensor **buf) {
    *s = (amp_grad_sink){0};
    if (!shared) AMP_TRY(amp_grad_begin(t, s));
    if (s->buf) *buf = s->buf;
    else AMP_TRY(amp_tensor_step_like(t, t->dtype, buf));
    return AMP_OK;
}

static amp_status attn_grad_done(amp_tensor *t, amp_grad_sink *s, amp_tensor *buf) {
    if (s->buf) return amp_grad_end(s);
    AMP_TRY(amp_grad_accumulate(t, buf, 1.0f));
    amp_tensor_step_release(buf);
    return AMP_OK;
}

static amp_status attn_bwd(amp_tape_node *node, const amp_tensor *dy) {
    const amp_attn_desc *d = &((const attn_aux *)node->aux)->d;
    amp_tensor *q = node->in[0], *k = node->in[1], *v = node->in[2];
    amp_tensor *kv_len = node->n_in > 3 ? node->in[3] : NULL;
    amp_tensor *lse = node->saved[0], *delta, *dq, *dk, *dv;
    bool shared = q == k || q == v || k == v;
    amp_grad_sink sq, sk, sv;
    AMP_TRY(amp_tensor_step_like(lse, AMP_F32, &delta));
    AMP_TRY(attn_grad_buf(q, shared, &sq, &dq));
    AMP_TRY(attn_grad_buf(k, shared, &sk, &dk));
    AMP_TRY(attn_grad_buf(v, shared, &sv, &dv));
    AMP_TRY(AMP_BE(dy->backend, attn_bwd, d, q->data, k->data, v->data,
                   kv_len ? kv_len->data : NULL, node->out->data, dy->data, lse->data,
                   delta->data, dq->data, dk->data, dv->data));
    amp_tensor_step_release(delta);
    AMP_TRY(attn_grad_done(q, &sq, dq));
    AMP_TRY(attn_grad_done(k, &sk, dk));
    return attn_grad_done(v, &sv, dv);
}

/* The options against a batch of `batch` sequences. */
static amp_status check_options(const char *op, const amp_tensor *x, int64_t batch,
                                const amp_attention_options *o) {
    if (!(o->dropout_p >= 0.0f && o->dropout_p < 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: dropout_p = %g, want 0 <= p < 1", op,
                        (double)o->dropout_p);
    if (!isfinite(o->scale) || o->scale < 0.0f)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: scale = %g, want 0 (1/sqrt(head_dim)) or a "
                        "finite value > 0", op, (double)o->scale);
    if (o->kv_heads < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: kv_heads = %lld, want 0 (heads) or a divisor of "
                        "heads", op, (long long)o->kv_heads);
    amp_tensor *len = o->kv_len;
    if (!len) return AMP_OK;
    AMP_TRY(amp_check_tensor(op, "kv_len", len, 1));
    if (len->dtype != AMP_I32 || len->shape[0] != batch || len->ctx != x->ctx)
        return amp_fail(AMP_ERR_SHAPE, "%s: kv_len must be i32 [%lld] on the inputs' context (it "
                        "has dtype %s and %lld elements)", op, (long long)batch,
                        amp_dtype_name(len->dtype), (long long)len->shape[0]);
    return AMP_OK;
}

static amp_status check_inputs(const char *op, amp_tensor *q, amp_tensor *k, amp_tensor *v,
                               const amp_attention_options *o) {
    AMP_TRY(amp_check_float(op, "q", q));
    AMP_TRY(amp_check_same_dtype(op, q, k));
    AMP_TRY(amp_check_same_dtype(op, q, v));
    char bq[64], bk[64], bv[64];
    if (!amp_same_shape(k, v) || k->shape[0] != q->shape[0] || k->shape[3] != q->shape[3] ||
        k->shape[1] < 1 || q->shape[1] % k->shape[1] != 0 || (o->kv_heads && o->kv_heads != k->shape[1]))
        return amp_fail(AMP_ERR_SHAPE, "%s: q %s [batch, heads, seq, head_dim], k %s and v %s "
                        "[batch, kv_heads, kv_seq, head_dim]: k and v must have one shape, the "
                        "batch and head_dim of q, and kv_heads dividing heads (grouped-query "
                        "attention)", op, amp_shape_str(q, bq, sizeof bq),
                        amp_shape_str(k, bk, sizeof bk), amp_shape_str(v, bv, sizeof bv));
    if (o->causal && k->shape[2] < q->shape[2])
        return amp_fail(AMP_ERR_SHAPE, "%s: causal with %lld queries and only %lld keys; the mask "
                        "is aligned to the end, so the queries must not outnumber the keys", op,
                        (long long)q->shape[2], (long long)k->shape[2]);
    return check_options(op, q, q->shape[0], o);
}

/* The descriptor of batch x heads x seq x head_dim attention over kv_heads x kv_seq keys in
 * dtype dt, its dropout offset reserved from the context's stream while training with dropout. */
static amp_attn_desc attn_desc(amp_ctx *ctx, const int64_t bhsd[4], int64_t kv_heads,
                               int64_t kv_seq, amp_dtype dt, bool packed,
                               const amp_attention_options *o) {
    float p = o->training ? o->dropout_p : 0.0f;
    amp_attn_desc d = {.batch = bhsd[0],
                       .heads = bhsd[1],
                       .seq = bhsd[2],
                       .head_dim = bhsd[3],
                       .kv_heads = kv_heads,
                       .kv_seq = kv_seq,
                       .dt = dt,
                       .scale = o->scale > 0.0f ? o->scale : (float)(1.0 / sqrt((double)bhsd[3])),
                       .causal = o->causal,
                       .dropout_p = p,
                       .seed = ctx->rng.seed,
                       .packed = packed};
    if (p > 0.0f) d.offset = amp_rng_reserve(&ctx->rng, (uint64_t)(d.batch * d.heads) *
                                                             (uint64_t)d.seq * (uint64_t)kv_seq);
    return d;
}

/* What both forms do once their inputs are checked: y (the caller's, in its layout) and each
 * row's logsumexp from the backend, then the tape node (named as the op without "amp_") with
 * the logsumexp saved. in's last entry is kv_len, NULL when there is none. */
static amp_status attn_forward(const char *op, const amp_attn_desc *d, amp_tensor *const *in,
                               int n_in, const void *const qkv[3], amp_tensor *y,
                               amp_backward_fn bwd, amp_tensor **out) {
    amp_tensor *lse, *len = in[n_in - 1];
    int64_t lse_shape[3] = {d->batch, d->heads, d->seq};
    AMP_TRY(amp_tensor_step(y->ctx, AMP_F32, 3, lse_shape, &lse));
    amp_status s = AMP_BE(y->backend, attn_fwd, d, qkv[0], qkv[1], qkv[2],
                          len ? len->data : NULL, y->data, lse->data);
    if (s != AMP_OK) return amp_fail_as(s, op);
    amp_tape_node *node;
    /* Its backward reads every input, y and the logsumexp. */
    AMP_TRY(amp_record(y, op + strlen("amp_"), n_in == 4 ? "q k v kv_len" : "qkv kv_len", bwd,
                       len ? n_in : n_in - 1, in, sizeof(attn_aux), &node));
    if (node) {
        amp_node_save(node, 0, lse, "logsumexp");
        ((attn_aux *)node->aux)->d = *d;
    }
    *out = y;
    return AMP_OK;
}

amp_status amp_scaled_dot_product_attention(amp_tensor *q, amp_tensor *k, amp_tensor *v,
                                            const amp_attention_options *options,
                                            amp_tensor **out) {
    static const char *op = "amp_scaled_dot_product_attention";
    AMP_CHECK_ARG(out);
    AMP_CHECK_ARG(options);
    AMP_TRY(amp_check_tensor(op, "q", q, 4));
    AMP_TRY(amp_check_tensor(op, "k", k, 4));
    AMP_TRY(amp_check_tensor(op, "v", v, 4));
    amp_tensor *io[3] = {q, k, v};
    AMP_TRY(amp_autocast(AMP_CAT_HALF, io, 3));
    q = io[0];
    k = io[1];
    v = io[2];
    AMP_TRY(check_inputs(op, q, k, v, options));
    amp_attn_desc d = attn_desc(q->ctx, q->shape, k->shape[1], k->shape[2], q->dtype, false,
                                options);
    amp_tensor *y;
    AMP_TRY(amp_tensor_step_like(q, q->dtype, &y));
    amp_tensor *in[4] = {q, k, v, options->kv_len};
    const void *x[3] = {q->data, k->data, v->data};
    return attn_forward(op, &d, in, 4, x, y, attn_bwd, out);
}

/* The packed form's backward: dq, dk and dv go straight into their places in one gradient of
 * qkv (the three cover it), so no gradient is split or copied. */
static amp_status attn_packed_bwd(amp_tape_node *node, const amp_tensor *dy) {
    const amp_attn_desc *d = &((const attn_aux *)node->aux)->d;
    amp_tensor *qkv = node->in[0], *kv_len = node->n_in > 1 ? node->in[1] : NULL;
    amp_tensor *lse = node->saved[0], *delta;
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(qkv, &s));
    if (!s.buf) return AMP_OK;
    AMP_TRY(amp_tensor_step_like(lse, AMP_F32, &delta));
    size_t es = amp_dtype_size(d->dt), k_at = (size_t)(d->heads * d->head_dim) * es;
    size_t v_at = (size_t)((d->heads + d->kv_heads) * d->head_dim) * es;
    const char *x = qkv->data;
    char *g = s.buf->data;
    AMP_TRY(AMP_BE(dy->backend, attn_bwd, d, x, x + k_at, x + v_at,
                   kv_len ? kv_len->data : NULL, node->out->data, dy->data, lse->data,
                   delta->data, g, g + k_at, g + v_at));
    amp_tensor_step_release(delta);
    return amp_grad_end(&s);
}

amp_status amp_scaled_dot_product_attention_qkvpacked(amp_tensor *qkv,
                                                      const amp_attention_options *options,
                                                      amp_tensor **out) {
    static const char *op = "amp_scaled_dot_product_attention_qkvpacked";
    AMP_CHECK_ARG(out);
    AMP_CHECK_ARG(options);
    if (!qkv) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'qkv' is NULL", op);
    int64_t kvh = options->kv_heads;
    AMP_TRY(amp_check_tensor(op, "qkv", qkv, kvh > 0 ? 4 : 5));
    AMP_TRY(amp_autocast(AMP_CAT_HALF, &qkv, 1));
    AMP_TRY(amp_check_float(op, "qkv", qkv));
    const int64_t *sh = qkv->shape;
    /* [batch, seq, 3, heads, head_dim], or [batch, seq, heads + 2 kv_heads, head_dim] */
    int64_t heads = kvh > 0 ? sh[2] - 2 * kvh : sh[3], dim = kvh > 0 ? sh[3] : sh[4];
    char b[64];
    if (kvh == 0 && sh[2] != 3)
        return amp_fail(AMP_ERR_SHAPE, "%s: qkv %s must be [batch, seq, 3, heads, head_dim] (or "
                        "[batch, seq, heads + 2 kv_heads, head_dim] with options.kv_heads)", op,
                        amp_shape_str(qkv, b, sizeof b));
    if (kvh > 0 && (heads < 1 || heads % kvh != 0))
        return amp_fail(AMP_ERR_SHAPE, "%s: qkv %s holds %lld heads besides 2 x kv_heads = %lld; "
                        "want heads >= 1 and a multiple of kv_heads", op,
                        amp_shape_str(qkv, b, sizeof b), (long long)heads, (long long)kvh);
    AMP_TRY(check_options(op, qkv, sh[0], options));
    amp_attn_desc d = attn_desc(qkv->ctx, (const int64_t[]){sh[0], heads, sh[1], dim},
                                kvh > 0 ? kvh : heads, sh[1], qkv->dtype, true, options);
    amp_tensor *y;
    int64_t y_shape[4] = {d.batch, d.seq, d.heads, d.head_dim};
    AMP_TRY(amp_tensor_step(qkv->ctx, qkv->dtype, 4, y_shape, &y));
    size_t es = amp_dtype_size(d.dt), k_at = (size_t)(d.heads * d.head_dim) * es;
    size_t v_at = (size_t)((d.heads + d.kv_heads) * d.head_dim) * es;
    const char *p = qkv->data;
    amp_tensor *in[2] = {qkv, options->kv_len};
    const void *x[3] = {p, p + k_at, p + v_at};
    return attn_forward(op, &d, in, 2, x, y, attn_packed_bwd, out);
}
