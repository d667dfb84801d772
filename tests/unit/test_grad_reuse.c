/* A backward that releases its graph gives each gradient's memory back to the step's data arena
 * once its node is done, and each temporary once its backward has used it (nn/autograd.c,
 * core/arena.h's spares), so the nodes still to run reuse it:
 *  - memory: the backward of 8 residual MLP blocks needs no more step memory above the forward
 *    than that of 2 (each block's gradients and the GELU's dz added to it before);
 *  - values: two GPT blocks (LayerNorm, the qkv projection, the packed causal attention, the
 *    output projection, the residual adds, the GELU MLP), in f32 and under bf16 autocast: the
 *    gradients of the input and of every weight equal, bit for bit, those of the same backward
 *    retaining its graph (which gives nothing back; the fused GELU's dz then has memory of its
 *    own, in a releasing backward it overwrites dh); intermediates kept with amp_tensor_keep (an
 *    attention output, an MLP's GELU output) keep their gradients through it;
 * on every device that answers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "block_leaves.h"
#include "core/ctx.h"
#include "core/half.h"
#include "test_devices.h"
#include "test_util.h"

#define NAME "test_grad_reuse"

/* ---- memory: x + linear(gelu(linear(x))) `blocks` times, loss mean(x^2) ---- */

enum { MR = 256, MC = 128 };

/* The data arena's peak above what the forward left in it. */
static size_t backward_extra(amp_device device, int blocks) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 3}, &ctx));
    if (!ctx) return 0;
    amp_tensor *x0 = leaf(ctx, 2, (const int64_t[]){MR, MC}, 1.0f, 0.0f);
    amp_tensor *w1 = leaf(ctx, 2, (const int64_t[]){4 * MC, MC}, 0.05f, 1.0f);
    amp_tensor *w2 = leaf(ctx, 2, (const int64_t[]){MC, 4 * MC}, 0.05f, 2.0f);
    amp_tensor *x = x0, *h = NULL, *y = NULL, *sq = NULL, *loss = NULL;
    for (int i = 0; i < blocks; i++) {
        CHECK_OK(amp_linear_gelu(x, w1, NULL, true, &h));
        CHECK_OK(amp_linear(h, w2, NULL, &y));
        CHECK_OK(amp_add(x, y, &x));
    }
    CHECK_OK(amp_mul(x, x, &sq));
    CHECK_OK(amp_mean(sq, &loss));
    size_t forward = ctx->data_arena.in_use;
    CHECK_OK(amp_backward(loss));
    size_t extra = ctx->data_arena.peak - forward;
    amp_tensor_free(x0);
    amp_tensor_free(w1);
    amp_tensor_free(w2);
    amp_ctx_free(ctx);
    return extra;
}

static void test_memory(amp_device device) {
    size_t two = backward_extra(device, 2), eight = backward_extra(device, 8);
    size_t row = (size_t)MR * MC * sizeof(float); /* one [MR, MC] f32 tensor */
    printf("  backward above the forward: 2 blocks %zu KiB, 8 blocks %zu KiB\n", two >> 10,
           eight >> 10);
    /* Given nothing back, each block's backward adds dX twice, dz and dh: 10 rows a block. */
    CHECK_MSG(eight <= two + row / 2,
              "8 blocks' backward holds %zu KiB above the forward, 2 blocks' %zu KiB: gradients "
              "are not reused", eight >> 10, two >> 10);
}

/* ---- values: two GPT blocks, released against retained ---- */

typedef struct gpt_leaves {
    amp_tensor *t[N_LEAVES]; /* block_leaves.h's */
} gpt_leaves;

/* The loss of the blocks; kept (may be NULL): layer 0's attention and GELU outputs, kept. */
static amp_tensor *gpt_loss(gpt_leaves *l, amp_tensor **kept) {
    amp_tensor *x = l->t[0];
    const amp_attention_options causal = {.causal = true};
    for (int i = 0; i < LAYERS; i++) {
        amp_tensor **p = &l->t[1 + 6 * i];
        amp_tensor *a = NULL, *qkv = NULL, *y = NULL, *z = NULL, *h = NULL;
        CHECK_OK(amp_norm(x, NULL, p[4], NULL, &(amp_norm_opts){.eps = 1e-5f, .out = AMP_NORM_OUT_FOR_LINEAR}, NULL, &a));
        CHECK_OK(amp_linear(a, p[0], NULL, &qkv));
        CHECK_OK(amp_reshape(qkv, 5, (const int64_t[]){B, T, 3, H, D}, &qkv));
        CHECK_OK(amp_scaled_dot_product_attention_qkvpacked(qkv, &causal, &y));
        if (i == 0 && kept) {
            CHECK_OK(amp_tensor_keep(y));
            kept[0] = y;
        }
        CHECK_OK(amp_reshape(y, 3, (const int64_t[]){B, T, C}, &y));
        CHECK_OK(amp_linear(y, p[1], NULL, &z));
        CHECK_OK(amp_add(x, z, &x));
        CHECK_OK(amp_norm(x, NULL, p[5], NULL, &(amp_norm_opts){.eps = 1e-5f, .out = AMP_NORM_OUT_FOR_LINEAR}, NULL, &a));
        /* In 2-D, so that h is the fused op's own output (a 3-D x gives a reshape of it). */
        CHECK_OK(amp_reshape(a, 2, (const int64_t[]){B * T, C}, &a));
        CHECK_OK(amp_linear_gelu(a, p[2], NULL, true, &h));
        if (i == 0 && kept) {
            CHECK_OK(amp_tensor_keep(h));
            kept[1] = h;
        }
        CHECK_OK(amp_linear(h, p[3], NULL, &z));
        CHECK_OK(amp_reshape(z, 3, (const int64_t[]){B, T, C}, &z));
        CHECK_OK(amp_add(x, z, &x));
    }
    amp_tensor *sq = NULL, *loss = NULL;
    CHECK_OK(amp_mul(x, x, &sq));
    CHECK_OK(amp_mean(sq, &loss));
    return loss;
}

/* Every leaf's gradient, one after another, as f32. */
static size_t grads_read(gpt_leaves *l, float *out) {
    size_t at = 0;
    for (int i = 0; i < N_LEAVES; i++) {
        amp_tensor *g = NULL;
        CHECK_OK(amp_tensor_get_grad(l->t[i], &g));
        CHECK_MSG(g != NULL, "leaf %d has no gradient", i);
        if (!g) continue;
        size_t n = (size_t)amp_tensor_numel(g);
        CHECK_OK(amp_tensor_to_host(g, out + at, n * sizeof *out));
        at += n;
    }
    return at;
}

enum { MAX_GRADS = B * T * C + LAYERS * (12 * C * C + 2 * C), KEPT_GRADS = 5 * B * T * C };

/* A kept tensor's gradient as f32 into out; its element count. */
static size_t kept_read(amp_tensor *t, float *out) {
    amp_tensor *g = NULL;
    CHECK_OK(amp_tensor_get_grad(t, &g));
    CHECK_MSG(g != NULL, "a kept output has no gradient");
    if (!g) return 0;
    size_t n = (size_t)amp_tensor_numel(g);
    if (amp_tensor_dtype(g) == AMP_F32) {
        CHECK_OK(amp_tensor_to_host(g, out, n * sizeof *out));
        return n;
    }
    uint16_t *half = malloc(n * sizeof *half);
    CHECK_OK(amp_tensor_to_host(g, half, n * sizeof *half));
    for (size_t i = 0; i < n; i++) out[i] = amp_bf16_bits_to_f32(half[i]);
    free(half);
    return n;
}

/* The kept tensors' gradients (layer 0's attention and GELU outputs) into kept_grad when
 * asked. */
static size_t gpt_grads(amp_device device, amp_dtype autocast, bool retain, float *out,
                        float *kept_grad) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 9}, &ctx));
    if (!ctx) return 0;
    gpt_leaves l;
    block_leaves_make(ctx, l.t);
    ctx->autocast.enabled = autocast != AMP_F32;
    ctx->autocast.half = autocast;
    amp_tensor *kept[2] = {NULL, NULL};
    amp_tensor *loss = gpt_loss(&l, kept_grad ? kept : NULL);
    ctx->autocast.enabled = false;
    CHECK_OK(amp_backward_with(loss, &(amp_backward_opts){.retain_graph = retain}));
    size_t n = grads_read(&l, out);
    if (kept_grad) {
        size_t at = kept_read(kept[0], kept_grad);
        kept_read(kept[1], kept_grad + at);
    }
    amp_ctx_reset_step(ctx);
    block_leaves_free(l.t);
    amp_ctx_free(ctx);
    return n;
}

static void test_values(amp_device device, amp_dtype autocast) {
    static float released[MAX_GRADS], retained[MAX_GRADS];
    static float kept_released[KEPT_GRADS], kept_retained[KEPT_GRADS];
    const char *what = autocast == AMP_F32 ? "f32" : "bf16 autocast";
    size_t n = gpt_grads(device, autocast, false, released, NULL);
    size_t m = gpt_grads(device, autocast, true, retained, NULL);
    CHECK(n == m && n == MAX_GRADS);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n && i < m; i++)
        if (memcmp(&released[i], &retained[i], sizeof *released) != 0 && bad++ == 0) first = i;
    CHECK_MSG(bad == 0, "%s: %zu of %zu gradients differ from the retained graph's (first at %zu:"
              " %.9g against %.9g)", what, bad, n, first, (double)released[first],
              (double)retained[first]);
    double norm = 0.0;
    for (size_t i = 0; i < n; i++) norm += (double)released[i] * released[i];
    CHECK_MSG(norm > 0.0 && isfinite(norm), "%s: gradients all zero or not finite", what);
    /* A kept intermediate's gradient is the same whether or not the graph was released. */
    gpt_grads(device, autocast, false, released, kept_released);
    gpt_grads(device, autocast, true, retained, kept_retained);
    CHECK_MSG(memcmp(kept_released, kept_retained, sizeof kept_released) == 0,
              "%s: the kept attention or GELU output's gradient differs from the retained graph's",
              what);
}

static void run_all(amp_device device) {
    test_memory(device);
    test_values(device, AMP_F32);
    test_values(device, AMP_BF16);
}

int main(void) {
    test_on_each_device(run_all);
    return test_summary(NAME);
}
