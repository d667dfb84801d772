/* Gradients handed back instead of copied (amp_grad_pass, nn/autograd.c): reshape and add give
 * their output's gradient memory to an input, as PyTorch hands a view's gradient back.
 *  - memory: a chain of 8 reshapes and 8 adds costs no more step memory than one of each (each
 *    cost a copy of the gradient before: 16 x 256 KiB);
 *  - values: an intermediate read by a reshape and by a product, the reshape's backward first
 *    and second; x + x; a kept intermediate's gradient stays its own (the product's share added
 *    into the input's gradient must not reach it); a retained graph back-propagated twice (no
 *    hand-over while the graph stays) equals twice one backward;
 * on every device that answers. */
#include <math.h>
#include <stdio.h>

#include "amp/amp.h"
#include "core/ctx.h"
#include "test_devices.h"
#include "test_util.h"

#define NAME "test_grad_pass"
enum { R = 256, C = 256 };

static amp_tensor *leaf(amp_ctx *ctx) {
    static float h[R * C];
    for (int i = 0; i < R * C; i++) h[i] = sinf(0.013f * (float)i);
    amp_tensor *x = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){R, C}, h, &x));
    CHECK_OK(amp_tensor_set_requires_grad(x, true));
    return x;
}

/* The data arena's peak over a backward of mean(chain(x * 2)^2) with `links` reshapes and adds. */
static size_t chain_peak(amp_device device, int links) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 3}, &ctx));
    if (!ctx) return 0;
    amp_tensor *x = leaf(ctx), *c = leaf(ctx), *y = NULL, *sq = NULL, *loss = NULL;
    CHECK_OK(amp_mul_scalar(x, 2.0f, &y));
    for (int i = 0; i < links; i++) {
        int64_t shape[3] = {R / 4, 4, C};
        CHECK_OK(amp_reshape(y, i % 2 ? 2 : 3, i % 2 ? (const int64_t[]){R, C} : shape, &y));
        CHECK_OK(amp_reshape(y, 2, (const int64_t[]){R, C}, &y));
        CHECK_OK(amp_add(y, c, &y));
    }
    CHECK_OK(amp_mul(y, y, &sq));
    CHECK_OK(amp_mean(sq, &loss));
    CHECK_OK(amp_backward(loss));
    size_t peak = ctx->data_arena.peak;
    amp_tensor *g = NULL;
    CHECK_OK(amp_tensor_get_grad(c, &g)); /* the adds' second inputs got theirs too */
    amp_tensor_free(x);
    amp_tensor_free(c);
    amp_ctx_free(ctx);
    return peak;
}

static void test_memory(amp_device device) {
    size_t one = chain_peak(device, 1), eight = chain_peak(device, 8);
    size_t tensor = (size_t)R * C * sizeof(float);
    printf("  chain of 1: %zu KiB, of 8: %zu KiB\n", one >> 10, eight >> 10);
    /* The forward's 7 more adds each make a tensor; their backwards' copies would add 14 more. */
    CHECK_MSG(eight <= one + 7 * tensor + tensor / 2,
              "8 links peak at %zu KiB, 1 link at %zu KiB: the backward copies gradients", eight >> 10,
              one >> 10);
}

static void read_grad(amp_tensor *t, float *h) {
    amp_tensor *g = NULL;
    CHECK_OK(amp_tensor_get_grad(t, &g));
    if (g) CHECK_OK(amp_tensor_to_host(g, h, sizeof(float) * R * C));
}

/* mean over elements of (reshape(y) + y * y) with y = 1.5 x0: d/dx0 = 1.5 (1 + 2 y) / n. The
 * reshape recorded after the product (its backward first: it hands its gradient to y, the
 * product's adds into it) or before. */
static void test_shared_input(amp_ctx *ctx, bool reshape_last) {
    amp_tensor *x0 = leaf(ctx), *y = NULL, *v = NULL, *p = NULL, *s = NULL, *loss = NULL;
    CHECK_OK(amp_mul_scalar(x0, 1.5f, &y));
    if (!reshape_last) CHECK_OK(amp_reshape(y, 3, (const int64_t[]){R, C / 2, 2}, &v));
    CHECK_OK(amp_mul(y, y, &p));
    if (reshape_last) CHECK_OK(amp_reshape(y, 3, (const int64_t[]){R, C / 2, 2}, &v));
    CHECK_OK(amp_reshape(v, 2, (const int64_t[]){R, C}, &v));
    CHECK_OK(amp_add(v, p, &s));
    CHECK_OK(amp_mean(s, &loss));
    CHECK_OK(amp_backward(loss));
    static float h[R * C], gx[R * C];
    CHECK_OK(amp_tensor_to_host(x0, h, sizeof h));
    read_grad(x0, gx);
    double worst = 0.0, n = (double)R * C;
    for (int i = 0; i < R * C; i++) {
        double want = 1.5 * (1.0 + 2.0 * 1.5 * h[i]) / n;
        worst = fmax(worst, fabs(gx[i] - want) * n); /* in units of 1/n; |want| n <= 6 */
    }
    CHECK_MSG(worst < 1e-5, "reshape %s: x0's gradient off by %g / n",
              reshape_last ? "last" : "first", worst);
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x0);
}

/* mean(x + x) with x = 3 x0: d/dx0 = 6 / n. */
static void test_self_add(amp_ctx *ctx) {
    amp_tensor *x0 = leaf(ctx), *x = NULL, *s = NULL, *loss = NULL;
    CHECK_OK(amp_mul_scalar(x0, 3.0f, &x));
    CHECK_OK(amp_add(x, x, &s));
    CHECK_OK(amp_mean(s, &loss));
    CHECK_OK(amp_backward(loss));
    static float gx[R * C];
    read_grad(x0, gx);
    float want = 6.0f / (float)(R * C);
    int bad = 0;
    for (int i = 0; i < R * C; i++) bad += fabsf(gx[i] - want) > 1e-6f * want;
    CHECK_MSG(bad == 0, "x + x: %d gradients differ from 6/n", bad);
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x0);
}

/* u = reshape(y) kept, loss = mean(u) + mean(y * y) with the reshape last: u's gradient stays
 * 1/n while y's collects the product's share too. */
static void test_kept_output(amp_ctx *ctx) {
    amp_tensor *x0 = leaf(ctx), *y = NULL, *u = NULL, *p = NULL, *m1 = NULL, *m2 = NULL,
               *loss = NULL;
    CHECK_OK(amp_mul_scalar(x0, 1.0f, &y));
    CHECK_OK(amp_mul(y, y, &p));
    CHECK_OK(amp_reshape(y, 1, (const int64_t[]){R * C}, &u));
    CHECK_OK(amp_tensor_keep(u));
    CHECK_OK(amp_mean(u, &m1));
    CHECK_OK(amp_mean(p, &m2));
    CHECK_OK(amp_add(m1, m2, &loss));
    CHECK_OK(amp_backward(loss));
    static float gu[R * C];
    read_grad(u, gu);
    float want = 1.0f / (float)(R * C);
    int bad = 0;
    for (int i = 0; i < R * C; i++) bad += gu[i] != want;
    CHECK_MSG(bad == 0, "kept reshape: %d of its gradients changed after its backward", bad);
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x0);
}

/* Two backwards of a retained graph, the first retaining: x0's gradient twice one backward's. */
static void test_retained(amp_ctx *ctx) {
    static float once[R * C], twice[R * C];
    for (int round = 0; round < 2; round++) {
        amp_tensor *x0 = leaf(ctx), *y = NULL, *v = NULL, *p = NULL, *loss = NULL;
        CHECK_OK(amp_mul_scalar(x0, 2.0f, &y));
        CHECK_OK(amp_reshape(y, 1, (const int64_t[]){R * C}, &v));
        CHECK_OK(amp_mul(v, v, &p));
        CHECK_OK(amp_add(p, v, &p));
        CHECK_OK(amp_mean(p, &loss));
        if (round == 1) CHECK_OK(amp_backward_with(loss, &(amp_backward_opts){.retain_graph = true}));
        CHECK_OK(amp_backward(loss));
        read_grad(x0, round ? twice : once);
        amp_ctx_reset_step(ctx);
        amp_tensor_free(x0);
    }
    int bad = 0;
    for (int i = 0; i < R * C; i++) bad += twice[i] != 2.0f * once[i];
    CHECK_MSG(bad == 0, "retained graph: %d gradients are not twice one backward's", bad);
}

static void run_all(amp_device device) {
    test_memory(device);
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 5}, &ctx));
    if (!ctx) return;
    test_shared_input(ctx, true);
    test_shared_input(ctx, false);
    test_self_add(ctx);
    test_kept_output(ctx);
    test_retained(ctx);
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(run_all);
    return test_summary(NAME);
}
