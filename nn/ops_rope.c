/* Rotary position embeddings (amp_rope, amp_rope_table_create). The table of cos and sin is made
 * once on the host, from integer positions and Hugging Face's f32 arithmetic (LlamaRotaryEmbedding
 * and _compute_llama3_parameters, step for step), then copied to the backend: both backends read
 * the same table, so they give the same bits, and no angle is ever accumulated. The op rotates
 * the pairs of the first `heads` heads of x [B, T, H, D] in one pass (rope, core/backend_kernels.def)
 * and copies the rest, so a packed q/k/v goes through whole: q and k rotated, v as it was. Its
 * backward is the inverse rotation of dy, which reads neither x nor y. No cast category: x's
 * dtype in and out (under O1 a linear's half q; Hugging Face's q * cos in f32 then autocast's cast
 * to the half type for attention round the same f32 sum once, as this op does). */
#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/tensor_internal.h"
#include "nn/autograd.h"

#define ROPE_DEFAULT_THETA 10000.0f

typedef struct rope_aux {
    amp_rope_desc d;
} rope_aux;

/* The inverse frequencies of the pairs, f32 as Hugging Face computes them. */
static void rope_inv_freq(const amp_rope_config *c, float theta, float *inv) {
    int64_t half = c->head_dim / 2;
    for (int64_t i = 0; i < half; i++)
        inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)c->head_dim);
    if (c->type != AMP_ROPE_LLAMA3) return;
    /* Llama 3.1: wavelengths above original / low_freq_factor slowed by factor, below
     * original / high_freq_factor kept, and a smooth blend between */
    float old_len = (float)c->original_max_positions, factor = c->factor;
    float low_wavelen = (float)((double)c->original_max_positions / (double)c->low_freq_factor);
    float high_wavelen = (float)((double)c->original_max_positions / (double)c->high_freq_factor);
    float span = (float)((double)c->high_freq_factor - (double)c->low_freq_factor);
    for (int64_t i = 0; i < half; i++) {
        float wavelen = (float)(2.0 * M_PI) / inv[i];
        float scaled = wavelen > low_wavelen ? inv[i] / factor : inv[i];
        float smooth = (old_len / wavelen - c->low_freq_factor) / span;
        float blended = (1.0f - smooth) * scaled / factor + smooth * scaled;
        bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        inv[i] = medium ? blended : scaled;
    }
}

static amp_status rope_check_config(const char *fn, const amp_rope_config *c) {
    if (c->head_dim < 2 || c->head_dim % 2)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: head_dim = %lld, want an even number >= 2", fn,
                        (long long)c->head_dim);
    if (c->max_positions < 1 || c->max_positions > INT32_MAX)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: max_positions = %lld is outside [1, 2^31 - 1]",
                        fn, (long long)c->max_positions);
    if (!(c->theta >= 0.0f) || !isfinite(c->theta) || (c->theta > 0.0f && c->theta <= 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: theta = %g, want a finite rope_theta > 1 (0: "
                        "10000)", fn, (double)c->theta);
    if (c->type == AMP_ROPE_DEFAULT) return AMP_OK;
    if (c->type != AMP_ROPE_LLAMA3)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: type = %d, want AMP_ROPE_DEFAULT or "
                        "AMP_ROPE_LLAMA3", fn, (int)c->type);
    if (!(c->factor >= 1.0f) || !isfinite(c->factor) || !(c->low_freq_factor > 0.0f) ||
        !(c->high_freq_factor > c->low_freq_factor) || !isfinite(c->high_freq_factor) ||
        c->original_max_positions < 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: Llama 3 scaling needs factor >= 1, 0 < "
                        "low_freq_factor < high_freq_factor and original_max_positions >= 1 "
                        "(got %g, %g, %g, %lld)", fn, (double)c->factor,
                        (double)c->low_freq_factor, (double)c->high_freq_factor,
                        (long long)c->original_max_positions);
    return AMP_OK;
}

amp_status amp_rope_table_create(amp_ctx *ctx, const amp_rope_config *cfg, amp_tensor **out) {
    static const char fn[] = "amp_rope_table_create";
    AMP_CHECK_ARG(out);
    *out = NULL;
    if (!ctx || !cfg) return amp_fail(AMP_ERR_INVALID_ARG, "%s: ctx and cfg must not be NULL", fn);
    AMP_TRY(rope_check_config(fn, cfg));
    int64_t half = cfg->head_dim / 2, rows = cfg->max_positions;
    float theta = cfg->theta > 0.0f ? cfg->theta : ROPE_DEFAULT_THETA;
    float *inv = malloc((size_t)half * sizeof *inv);
    float *tab = malloc((size_t)(rows * half * 2) * sizeof *tab);
    if (!inv || !tab) {
        free(inv);
        free(tab);
        return amp_fail(AMP_ERR_OOM, "%s: out of host memory for %lld positions", fn,
                        (long long)rows);
    }
    rope_inv_freq(cfg, theta, inv);
    for (int64_t p = 0; p < rows; p++)
        for (int64_t i = 0; i < half; i++) {
            float angle = (float)p * inv[i]; /* from the position itself, never accumulated */
            tab[(p * half + i) * 2] = (float)cos((double)angle);
            tab[(p * half + i) * 2 + 1] = (float)sin((double)angle);
        }
    free(inv);
    amp_status s = amp_tensor_from_host(ctx, AMP_F32, 3, (const int64_t[]){rows, half, 2}, tab,
                                        out);
    free(tab);
    return s;
}

static amp_status rope_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_rope_desc d = ((const rope_aux *)node->aux)->d;
    d.inverse = true;
    amp_tensor *x = node->in[0], *table = node->in[1];
    amp_grad_sink sx;
    AMP_TRY(amp_grad_begin(x, &sx));
    if (sx.buf)
        AMP_TRY(AMP_BE(dy->backend, rope, &d, (const float *)table->data, dy->data, sx.buf->data));
    return amp_grad_end(&sx);
}

amp_status amp_rope(amp_tensor *x, amp_tensor *table, const amp_rope_opts *opts,
                    amp_tensor **out) {
    static const char op[] = "amp_rope";
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(op, "x", x, 4));
    AMP_TRY(amp_check_float(op, "x", x));
    AMP_TRY(amp_check_tensor(op, "table", table, 3));
    amp_rope_opts o = opts ? *opts : (amp_rope_opts){0};
    int64_t B = x->shape[0], T = x->shape[1], H = x->shape[2], D = x->shape[3];
    if (table->dtype != AMP_F32 || table->shape[2] != 2 || table->shape[1] * 2 != D)
        return amp_fail(AMP_ERR_SHAPE, "%s: the table is %s [%lld, %lld, %lld], want f32 [positions, "
                        "head_dim / 2 = %lld, 2] (amp_rope_table_create)", op,
                        amp_dtype_name(table->dtype), (long long)table->shape[0],
                        (long long)table->shape[1], (long long)table->shape[2], (long long)(D / 2));
    if (table->backend != x->backend || table->ctx != x->ctx)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the table and x belong to different contexts or "
                        "backends", op);
    if (o.layout != AMP_ROPE_HALF && o.layout != AMP_ROPE_INTERLEAVED)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.layout = %d, want AMP_ROPE_HALF or "
                        "AMP_ROPE_INTERLEAVED", op, (int)o.layout);
    if (o.heads < 0 || o.heads > H)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.heads = %lld is outside [0, %lld] (0: "
                        "every head of x)", op, (long long)o.heads, (long long)H);
    if (o.offset < 0 || o.offset + T > table->shape[0])
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: positions %lld .. %lld are past the table's %lld "
                        "(max_position_embeddings)", op, (long long)o.offset,
                        (long long)(o.offset + T - 1), (long long)table->shape[0]);
    amp_rope_desc d = {.batch = B, .seq = T, .heads = H, .head_dim = D,
                       .rot_heads = o.heads ? o.heads : H, .offset = o.offset,
                       .table_rows = table->shape[0], .dt = x->dtype,
                       .interleaved = o.layout == AMP_ROPE_INTERLEAVED};
    amp_tensor *y;
    AMP_TRY(amp_tensor_step_like(x, x->dtype, &y));
    AMP_TRY(amp_fail_as(AMP_BE(x->backend, rope, &d, (const float *)table->data, x->data, y->data),
                        op));
    amp_tensor *in[2] = {x, table};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, "rope", "x table", rope_bwd, 2, in, sizeof(rope_aux), &node));
    if (node) {
        amp_node_unread(node, 1u, true); /* it reads the table only */
        ((rope_aux *)node->aux)->d = d;
    }
    *out = y;
    return AMP_OK;
}
