/* The leaves of the small transformer blocks that test_grad_reuse.c and test_tensor_drop.c run
 * (pre-LayerNorm causal attention and a GELU MLP on [B, T, C]): f32 tensors that require grad,
 * filled with scale * sin(0.37 i + phase) so that every run gets the same values. */
#ifndef TESTS_UNIT_BLOCK_LEAVES_H
#define TESTS_UNIT_BLOCK_LEAVES_H

#include <math.h>
#include <stdlib.h>

#include "amp/amp.h"
#include "test_util.h"

enum { B = 2, T = 24, H = 2, D = 32, C = H * D, LAYERS = 2, N_LEAVES = 1 + 6 * LAYERS };

static amp_tensor *leaf(amp_ctx *ctx, int ndim, const int64_t *shape, float scale, float phase) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) h[i] = scale * sinf(0.37f * (float)i + phase);
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, ndim, shape, h, &t));
    CHECK_OK(amp_tensor_set_requires_grad(t, true));
    free(h);
    return t;
}

/* p[0] = x [B, T, C], then per layer: c_attn, c_proj, c_fc, mlp c_proj, ln_1, ln_2. */
static void block_leaves_make(amp_ctx *ctx, amp_tensor **p) {
    p[0] = leaf(ctx, 3, (const int64_t[]){B, T, C}, 1.0f, 0.1f);
    for (int i = 0; i < LAYERS; i++) {
        amp_tensor **q = &p[1 + 6 * i];
        float ph = (float)i;
        q[0] = leaf(ctx, 2, (const int64_t[]){3 * C, C}, 0.1f, ph + 0.2f);
        q[1] = leaf(ctx, 2, (const int64_t[]){C, C}, 0.1f, ph + 0.3f);
        q[2] = leaf(ctx, 2, (const int64_t[]){4 * C, C}, 0.1f, ph + 0.4f);
        q[3] = leaf(ctx, 2, (const int64_t[]){C, 4 * C}, 0.1f, ph + 0.5f);
        q[4] = leaf(ctx, 1, (const int64_t[]){C}, 0.2f, ph + 0.6f);
        q[5] = leaf(ctx, 1, (const int64_t[]){C}, 0.2f, ph + 0.7f);
    }
}

static void block_leaves_free(amp_tensor **p) {
    for (int i = 0; i < N_LEAVES; i++) amp_tensor_free(p[i]);
}

#endif
