/* amp_tensor_drop (core/step_regions.c), Python's `del` for a step tensor, on every device that
 * answers:
 *  - memory: two transformer blocks on [B, T, C] that drop each residual branch output once its
 *    add has read it end their forward with less step memory than the same blocks without drops:
 *    each dropped output (a view of linear's [B T, C] result) goes back with the result behind
 *    it, and the next tensors of its size take its place;
 *  - safety: dropping every intermediate right after its last use in the forward, the ones the
 *    backward reads too (a linear's input, the attention's packed input and its output, a GELU's
 *    output, the product a mean reads), views and their bases, gives the gradients of the run
 *    without drops bit for bit, in f32 and under bf16 autocast. A reader missed would let a later
 *    op overwrite what the backward reads;
 *  - a base dropped while a view of it lives keeps its data for the view, and gives it back (the
 *    next tensor of its size gets it) once the view is dropped too;
 *  - an add's own f32 cast of a bf16 operand under autocast goes back after the add;
 *  - errors, each leaving the tensor as it was: NULL, a caller-owned tensor, a kept one, one
 *    dropped already, one a release point freed; and any use of a dropped tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "block_leaves.h"
#include "core/ctx.h"
#include "core/tensor_internal.h"
#include "test_devices.h"
#include "test_util.h"

#define NAME "test_tensor_drop"

enum { MAX_GRADS = B * T * C + LAYERS * (12 * C * C + 2 * C) }; /* the leaves' numel */

enum drops { DROP_NONE, DROP_BRANCHES, DROP_ALL };

static void drop_if(bool yes, amp_tensor *t) {
    if (yes) CHECK_OK(amp_tensor_drop(t));
}

/* Pre-LayerNorm blocks of causal attention and a GELU MLP, loss mean(x^2); `drops` says which
 * tensors are dropped after their last use (never the leaf x). */
static amp_tensor *blocks_loss(amp_tensor *const *p, enum drops drops) {
    const amp_attention_options causal = {.causal = true};
    bool all = drops == DROP_ALL, branches = drops != DROP_NONE;
    amp_tensor *x = p[0];
    for (int i = 0; i < LAYERS; i++) {
        amp_tensor *const *q = &p[1 + 6 * i];
        amp_tensor *a = NULL, *qkv = NULL, *qkv5 = NULL, *y = NULL, *y3 = NULL, *z = NULL;
        amp_tensor *x2 = NULL, *h = NULL, *x3 = NULL;
        CHECK_OK(amp_norm(x, NULL, q[4], NULL, &(amp_norm_opts){.eps = 1e-5f, .out = AMP_NORM_OUT_FOR_LINEAR}, NULL, &a));
        CHECK_OK(amp_linear(a, q[0], NULL, &qkv));
        drop_if(all, a);
        CHECK_OK(amp_reshape(qkv, 5, (const int64_t[]){B, T, 3, H, D}, &qkv5));
        drop_if(all, qkv); /* the view lives on */
        CHECK_OK(amp_scaled_dot_product_attention_qkvpacked(qkv5, &causal, &y));
        drop_if(all, qkv5);
        CHECK_OK(amp_reshape(y, 3, (const int64_t[]){B, T, C}, &y3));
        drop_if(all, y);
        CHECK_OK(amp_linear(y3, q[1], NULL, &z));
        drop_if(all, y3);
        CHECK_OK(amp_add(x, z, &x2));
        drop_if(branches, z);
        if (x != p[0]) drop_if(all, x);
        /* The MLP in 2-D, so that h and z2 are the fused op's and linear's own outputs. */
        amp_tensor *a2 = NULL, *z2 = NULL;
        CHECK_OK(amp_norm(x2, NULL, q[5], NULL, &(amp_norm_opts){.eps = 1e-5f, .out = AMP_NORM_OUT_FOR_LINEAR}, NULL, &a));
        CHECK_OK(amp_reshape(a, 2, (const int64_t[]){B * T, C}, &a2));
        drop_if(all, a);
        CHECK_OK(amp_linear_gelu(a2, q[2], NULL, true, &h));
        drop_if(all, a2);
        CHECK_OK(amp_linear(h, q[3], NULL, &z2));
        drop_if(all, h);
        CHECK_OK(amp_reshape(z2, 3, (const int64_t[]){B, T, C}, &z));
        drop_if(branches, z2);
        CHECK_OK(amp_add(x2, z, &x3));
        drop_if(branches, z);
        drop_if(all, x2);
        x = x3;
    }
    amp_tensor *sq = NULL, *loss = NULL;
    CHECK_OK(amp_mul(x, x, &sq));
    drop_if(all, x);
    CHECK_OK(amp_mean(sq, &loss));
    drop_if(all, sq);
    return loss;
}

/* Every leaf's gradient into out (f32), in leaf order; the forward's step memory into *forward. */
static size_t blocks_grads(amp_device device, amp_dtype autocast, enum drops drops, float *out,
                           size_t *forward) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 5}, &ctx));
    if (!ctx) return 0;
    amp_tensor *p[N_LEAVES];
    block_leaves_make(ctx, p);
    ctx->autocast.enabled = autocast != AMP_F32;
    ctx->autocast.half = autocast;
    amp_tensor *loss = blocks_loss(p, drops);
    ctx->autocast.enabled = false;
    if (forward) *forward = ctx->data_arena.peak;
    CHECK_OK(amp_backward(loss));
    size_t n = 0;
    for (int i = 0; i < N_LEAVES; i++) {
        amp_tensor *g = NULL;
        CHECK_OK(amp_tensor_get_grad(p[i], &g));
        size_t k = g ? (size_t)amp_tensor_numel(g) : 0;
        if (g && n + k <= MAX_GRADS)
            CHECK_OK(amp_tensor_to_host_f32(g, out + n, k * sizeof *out));
        n += k;
    }
    block_leaves_free(p);
    amp_ctx_free(ctx);
    return n;
}

static void test_memory_and_values(amp_device device, amp_dtype autocast) {
    static float none[MAX_GRADS], branches[MAX_GRADS], all[MAX_GRADS];
    const char *what = autocast == AMP_F32 ? "f32" : "bf16 autocast";
    size_t fwd_none = 0, fwd_branches = 0, fwd_all = 0;
    size_t n = blocks_grads(device, autocast, DROP_NONE, none, &fwd_none);
    size_t m = blocks_grads(device, autocast, DROP_BRANCHES, branches, &fwd_branches);
    size_t k = blocks_grads(device, autocast, DROP_ALL, all, &fwd_all);
    CHECK(n == MAX_GRADS && m == n && k == n);
    CHECK_MSG(memcmp(none, branches, sizeof none) == 0,
              "%s: dropping the branch outputs changed the gradients", what);
    CHECK_MSG(memcmp(none, all, sizeof none) == 0,
              "%s: dropping every tensor after its last use changed the gradients: a tensor the "
              "backward reads was given back", what);
    double norm = 0.0;
    for (size_t i = 0; i < n; i++) norm += (double)none[i] * none[i];
    CHECK_MSG(norm > 0.0 && isfinite(norm), "%s: gradients all zero or not finite", what);
    /* Each layer's two branch outputs ([B T, C], the residual stream's dtype under autocast as
     * without it: c_proj's output is f32 or bf16, the size of one f32 or half row block). */
    size_t branch = (size_t)B * T * C * (autocast == AMP_F32 ? 4 : 2);
    printf("  %s: forward step memory %zu KiB, dropping branches %zu, dropping all %zu; one "
           "branch output %zu KiB\n", what, fwd_none >> 10, fwd_branches >> 10, fwd_all >> 10,
           branch >> 10);
    /* In f32 every later f32 tensor of the stream's size fits the gap; under autocast the bf16
     * gaps fit the LayerNorms' bf16 outputs that follow, one a layer. */
    int reused = autocast == AMP_F32 ? 2 * LAYERS - 1 : LAYERS;
    CHECK_MSG(fwd_branches + (size_t)reused * branch <= fwd_none,
              "%s: the forward dropping %d branch outputs holds %zu KiB, without drops %zu KiB: "
              "want at least %d of them (%zu KiB each) reused", what, 2 * LAYERS,
              fwd_branches >> 10, fwd_none >> 10, reused, branch >> 10);
    CHECK(fwd_all <= fwd_branches);
}

static void test_views_and_reuse(amp_device device) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 1}, &ctx));
    if (!ctx) return;
    enum { N = 4096 };
    amp_tensor *u = leaf(ctx, 1, (const int64_t[]){N}, 1.0f, 0.0f);
    amp_tensor *v = leaf(ctx, 1, (const int64_t[]){N}, 1.0f, 1.0f);
    bool prev = amp_set_grad_enabled(ctx, false);
    /* Without a graph a dropped tensor goes at once: the next of its size takes its memory. */
    amp_tensor *t = NULL, *t2 = NULL, *view = NULL;
    CHECK_OK(amp_mul(u, v, &t));
    void *at = t->data;
    CHECK_OK(amp_tensor_drop(t));
    CHECK_OK(amp_mul(u, v, &t2));
    CHECK_MSG(t2->data == at, "a dropped tensor's memory was not reused by the next of its size");
    /* A base dropped under a live view keeps its data until the view goes too. */
    CHECK_OK(amp_reshape(t2, 2, (const int64_t[]){64, 64}, &view));
    CHECK_OK(amp_tensor_drop(t2));
    amp_tensor *other = NULL;
    CHECK_OK(amp_add(u, v, &other)); /* of t2's size: must not land on it */
    CHECK_MSG(other->data != at, "a dropped base's memory was reused while its view lives");
    static float got[N], want[N], hu[N], hv[N];
    CHECK_OK(amp_tensor_to_host_f32(view, got, sizeof got));
    CHECK_OK(amp_tensor_to_host_f32(u, hu, sizeof hu));
    CHECK_OK(amp_tensor_to_host_f32(v, hv, sizeof hv));
    for (int i = 0; i < N; i++) want[i] = hu[i] * hv[i];
    CHECK_MSG(memcmp(got, want, sizeof got) == 0, "the view of a dropped base reads other values");
    CHECK_OK(amp_tensor_drop(view));
    amp_tensor *t3 = NULL;
    CHECK_OK(amp_mul(u, v, &t3));
    CHECK_MSG(t3->data == at, "the dropped base did not go back once its view was dropped");
    amp_set_grad_enabled(ctx, prev);
    /* Under autocast, u + a bf16 tensor casts it to f32 for the add; the cast is the add's alone
     * and its backward does not read it, so the next f32 tensor of its size takes its memory
     * and the arena does not grow. */
    amp_tensor *half = NULL, *sum = NULL, *next = NULL, *w = NULL;
    CHECK_OK(amp_mul(u, v, &w)); /* an intermediate: its cast is never cached */
    ctx->autocast.enabled = true;
    ctx->autocast.half = AMP_BF16;
    CHECK_OK(amp_cast(w, AMP_BF16, &half));
    CHECK_OK(amp_add(u, half, &sum));
    size_t in_use = ctx->data_arena.in_use;
    CHECK_OK(amp_mul(u, v, &next));
    CHECK_MSG(ctx->data_arena.in_use == in_use,
              "the add's f32 cast of its bf16 operand was not given back (the arena grew by %zu "
              "bytes)", ctx->data_arena.in_use - in_use);
    ctx->autocast.enabled = false;
    amp_tensor_free(u);
    amp_tensor_free(v);
    amp_ctx_free(ctx);
}

static void test_errors(amp_device device) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 1}, &ctx));
    if (!ctx) return;
    amp_tensor *u = leaf(ctx, 1, (const int64_t[]){16}, 1.0f, 0.0f);
    amp_tensor *t = NULL, *k = NULL, *r = NULL, *sq = NULL, *loss = NULL;
    CHECK_FAILS(amp_tensor_drop(NULL), AMP_ERR_INVALID_ARG, "NULL");
    CHECK_FAILS(amp_tensor_drop(u), AMP_ERR_INVALID_ARG, "amp_tensor_free");
    CHECK_OK(amp_mul(u, u, &k));
    CHECK_OK(amp_tensor_keep(k));
    CHECK_FAILS(amp_tensor_drop(k), AMP_ERR_STATE, "amp_tensor_keep");
    CHECK_OK(amp_add(k, k, &r)); /* the refused drop left it as it was */
    CHECK_OK(amp_mul(u, u, &t));
    CHECK_OK(amp_tensor_drop(t));
    CHECK_FAILS(amp_tensor_drop(t), AMP_ERR_STATE, "amp_tensor_drop");
    CHECK_FAILS(amp_add(t, u, &r), AMP_ERR_STATE, "dropped");
    float f;
    CHECK_FAILS(amp_tensor_item(t, &f), AMP_ERR_STATE, "dropped");
    /* One made before a backward is released with its graph: dropping it then is refused. */
    CHECK_OK(amp_mul(u, u, &t));
    CHECK_OK(amp_mul(t, t, &sq));
    CHECK_OK(amp_mean(sq, &loss));
    CHECK_OK(amp_backward(loss));
    CHECK_FAILS(amp_tensor_drop(t), AMP_ERR_STATE, "release point");
    amp_tensor_free(u);
    amp_ctx_free(ctx);
}

static void run_all(amp_device device) {
    test_memory_and_values(device, AMP_F32);
    test_memory_and_values(device, AMP_BF16);
    test_views_and_reuse(device);
    test_errors(device);
}

int main(void) {
    test_on_each_device(run_all);
    return test_summary(NAME);
}
