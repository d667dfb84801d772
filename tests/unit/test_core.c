/* Core pieces: the step arena (alignment, growth, coalescing, peak, blocks handed back and
 * reused), the RNG (reproducible, state
 * save/restore exact, uniform range and mean), the context's CUDA fallback, tensor host round trips,
 * block layouts past 4 GiB, the backend's memory counters, step tensors refused once their step
 * has ended. */
#include <stdint.h>
#include <string.h>

#include "amp/amp.h"
#include "core/arena.h"
#include "core/ctx.h"
#include "core/rng.h"
#include "core/tensor_internal.h"
#include "test_util.h"

static int n_allocs;
static amp_status counting_alloc(size_t n, void **out) {
    n_allocs++;
    *out = aligned_alloc(64, (n + 63) & ~(size_t)63);
    return *out ? AMP_OK : AMP_ERR_OOM;
}

static void test_arena(void) {
    amp_arena a;
    amp_arena_init(&a, counting_alloc, free);
    void *p[100];
    for (int i = 0; i < 100; i++) {
        CHECK_OK(amp_arena_alloc(&a, 100000 + (size_t)i, &p[i]));
        CHECK(((uintptr_t)p[i] & 63) == 0);
        memset(p[i], i, 100000); /* ASan/valgrind would flag an overlap or overrun */
    }
    CHECK(a.n_chunks > 1);
    size_t peak = a.peak;
    CHECK(peak >= 100 * 100000);
    amp_arena_reset(&a);
    CHECK(a.n_chunks == 1 && a.in_use == 0);
    int before = n_allocs;
    for (int i = 0; i < 100; i++) CHECK_OK(amp_arena_alloc(&a, 100000 + (size_t)i, &p[i]));
    CHECK_MSG(n_allocs == before, "steady-state step allocated %d chunks", n_allocs - before);
    CHECK(a.peak == peak);
    amp_arena_destroy(&a);
}

/* Blocks handed back: the smallest that fits is reused (its rest stays a spare), neighbours
 * merge, the extent (in_use) never shrinks, and a reset or reset_to forgets them. */
static void test_arena_give_back(void) {
    amp_arena a;
    amp_arena_init(&a, counting_alloc, free);
    char *p[4];
    for (int i = 0; i < 4; i++) CHECK_OK(amp_arena_alloc(&a, 4096, (void **)&p[i]));
    CHECK(p[1] == p[0] + 4096 && p[3] == p[2] + 4096); /* one chunk, bumped */
    size_t extent = a.in_use;
    amp_arena_give_back(&a, p[3], 4096);
    amp_arena_give_back(&a, p[1], 4000); /* rounded up to the 64-byte alignment: 4032 */
    CHECK(a.n_spares == 2 && a.in_use == extent);
    void *q;
    CHECK_OK(amp_arena_alloc(&a, 4000, &q));
    CHECK_MSG(q == p[1], "the smallest spare that fits (p[1]'s 4032 bytes) was not taken");
    CHECK_OK(amp_arena_alloc(&a, 1000, &q));
    CHECK_MSG(q == p[3], "p[3]'s spare was not taken for a smaller block");
    CHECK(a.n_spares == 1 && a.spares[0].base == p[3] + 1024 && a.spares[0].size == 4096 - 1024);
    CHECK(a.in_use == extent);
    amp_arena_give_back(&a, p[3], 1000); /* merges with its own rest */
    CHECK(a.n_spares == 1 && a.spares[0].base == p[3] && a.spares[0].size == 4096);
    amp_arena_give_back(&a, p[1], 4096);
    amp_arena_give_back(&a, p[2], 4096); /* joins p[1]'s spare and p[3]'s into one */
    CHECK_MSG(a.n_spares == 1 && a.spares[0].base == p[1] && a.spares[0].size == 3 * 4096,
              "%d spares, the first %zu bytes: neighbours not merged", a.n_spares,
              a.spares[0].size);
    CHECK_OK(amp_arena_alloc(&a, 8192, &q));
    CHECK(q == p[1] && a.in_use == extent);
    CHECK_OK(amp_arena_alloc(&a, 16384, &q)); /* fits no spare: new memory */
    CHECK(q == p[3] + 4096 && a.in_use == extent + 16384);
    amp_arena_mark m = amp_arena_get_mark(&a);
    amp_arena_give_back(&a, p[0], 4096);
    amp_arena_reset_to(&a, m);
    CHECK(a.n_spares == 0);
    amp_arena_give_back(&a, p[0], 4096);
    amp_arena_reset(&a);
    CHECK(a.n_spares == 0);
    CHECK_OK(amp_arena_alloc(&a, 64, &q));
    CHECK(q == p[0]);
    amp_arena_destroy(&a);
}

static void test_rng(void) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 42}, &ctx));
    amp_rng_state s0;
    CHECK_OK(amp_rng_get_state(ctx, &s0));
    CHECK(s0.seed == 42 && s0.counter == 0);
    double sum = 0;
    float first[16];
    for (int i = 0; i < 100000; i++) {
        float u = amp_rng_uniform(&ctx->rng, -1.0f, 1.0f);
        CHECK_MSG(u >= -1.0f && u < 1.0f, "draw %d = %g", i, (double)u);
        if (i < 16) first[i] = u;
        sum += u;
    }
    CHECK_MSG(fabs(sum / 100000) < 0.01, "mean %g", sum / 100000);
    amp_rng_state mid;
    CHECK_OK(amp_rng_get_state(ctx, &mid));
    float next = amp_rng_uniform(&ctx->rng, 0, 1);
    CHECK_OK(amp_rng_set_state(ctx, &s0));
    for (int i = 0; i < 16; i++) CHECK(amp_rng_uniform(&ctx->rng, -1.0f, 1.0f) == first[i]);
    CHECK_OK(amp_rng_set_state(ctx, &mid));
    CHECK(amp_rng_uniform(&ctx->rng, 0, 1) == next);
    int counts[7] = {0};
    for (int i = 0; i < 70000; i++) counts[amp_rng_below(&ctx->rng, 7)]++;
    for (int k = 0; k < 7; k++) CHECK_MSG(counts[k] > 9500 && counts[k] < 10500, "bucket %d: %d", k, counts[k]);
    CHECK_FAILS(amp_rng_set_state(ctx, NULL), AMP_ERR_INVALID_ARG, "state");
    amp_ctx_free(ctx);
}

static void test_ctx_and_tensor(void) {
    amp_ctx *ctx = NULL;
    /* No GPU here: AUTO falls back to the CPU, an explicit CUDA request fails and says why. */
    CHECK_OK(amp_ctx_create(NULL, &ctx));
    CHECK(amp_ctx_device(ctx) == AMP_DEVICE_CPU || amp_ctx_device(ctx) == AMP_DEVICE_CUDA);
    amp_ctx_free(ctx);
    amp_ctx *cuda = NULL;
    amp_status s = amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CUDA}, &cuda);
    if (s != AMP_OK) {
        CHECK(s == AMP_ERR_NO_DEVICE && strstr(amp_last_error(), "CUDA") != NULL);
        CHECK(cuda == NULL);
    }
    amp_ctx_free(cuda);
    CHECK_FAILS(amp_ctx_create(&(amp_ctx_opts){.device = 7}, &ctx), AMP_ERR_INVALID_ARG, "device");

    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx));
    amp_trace_enable(ctx, true); /* AMP_TRACE's switch: every op then reports to the logger */
    CHECK(ctx->trace != NULL);
    amp_trace_enable(ctx, false);
    CHECK(ctx->trace == NULL);
    float host[6] = {1, -2, 3.5f, 0, 1e-3f, 65504};
    amp_tensor *t;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (int64_t[]){2, 3}, host, &t));
    float back[6];
    CHECK_OK(amp_tensor_to_host(t, back, sizeof back));
    CHECK(memcmp(back, host, sizeof host) == 0);
    float item;
    CHECK_OK(amp_tensor_item(t, &item));
    CHECK(item == 1.0f);
    CHECK_FAILS(amp_tensor_to_host(t, back, 5), AMP_ERR_SHAPE, "bytes");
    amp_tensor_free(t);
    uint16_t h = 0x3c00; /* 1.0 in f16 */
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F16, 1, (int64_t[]){1}, &h, &t));
    CHECK_OK(amp_tensor_item(t, &item));
    CHECK(item == 1.0f);
    amp_tensor_free(t);
    CHECK_FAILS(amp_tensor_create(ctx, AMP_F32, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, &t),
                AMP_ERR_SHAPE, "ndim");
    CHECK_FAILS(amp_tensor_create(ctx, AMP_F32, 2, (int64_t[]){3, 0}, &t), AMP_ERR_SHAPE, "dimension 1");
    CHECK_FAILS(amp_tensor_create(ctx, (amp_dtype)9, 1, (int64_t[]){3}, &t), AMP_ERR_DTYPE, "dtype");
    CHECK_FAILS(amp_tensor_create(NULL, AMP_F32, 1, (int64_t[]){3}, &t), AMP_ERR_INVALID_ARG, "ctx");
    amp_tensor_free(NULL);
    amp_ctx_free(ctx);
}

/* Views of 2^30 f32 each (4 GiB): offsets past 2^31 and 2^32 exact (an int offset wraps at the
 * first), nothing allocated. */
static void test_block_layout(void) {
    const int64_t numel[4] = {(int64_t)1 << 30, 1, (int64_t)1 << 30, 17};
    size_t off[4];
    size_t total = amp_block_layout(numel, 4, sizeof(float), 64, off);
    CHECK(off[0] == 0 && off[1] == ((size_t)1 << 32) && off[2] == ((size_t)1 << 32) + 64);
    CHECK(off[3] == ((size_t)1 << 33) + 64 && total == off[3] + 128);
    CHECK(amp_block_layout(numel, 0, 4, 64, NULL) == 0);
}

/* amp_ctx_memory: a tensor's bytes show in use and in the peak; freeing returns them; a reset
 * brings the peak down to what is in use. */
static void test_memory_counters(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx));
    if (!ctx) return;
    size_t use0, peak0, use1, peak1;
    amp_ctx_memory_reset_peak(ctx);
    CHECK_OK(amp_ctx_memory(ctx, &use0, &peak0));
    CHECK(peak0 == use0);
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (int64_t[]){1000, 1000}, &t));
    CHECK_OK(amp_ctx_memory(ctx, &use1, &peak1));
    CHECK(use1 >= use0 + 4000000 && use1 < use0 + 4100000 && peak1 == use1);
    amp_tensor_free(t);
    CHECK_OK(amp_ctx_memory(ctx, &use1, &peak1));
    CHECK(use1 == use0 && peak1 >= use0 + 4000000);
    amp_ctx_memory_reset_peak(ctx);
    CHECK_OK(amp_ctx_memory(ctx, NULL, &peak1));
    CHECK(peak1 == use0);
    CHECK_FAILS(amp_ctx_memory(NULL, &use1, NULL), AMP_ERR_INVALID_ARG, "ctx");
    amp_ctx_free(ctx);
}

/* A step tensor after amp_ctx_reset_step: refused by ops and copies with AMP_ERR_STATE, also
 * after the next step made tensors of its own; caller-owned tensors are not affected. */
static void test_stale_step_tensors(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx));
    if (!ctx) return;
    amp_tensor *x = NULL, *y = NULL, *z = NULL, *w = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, (int64_t[]){3}, (float[]){1, -2, 3}, &x));
    CHECK_OK(amp_relu(x, &y));
    amp_ctx_reset_step(ctx);
    CHECK_OK(amp_relu(x, &z)); /* the new step's first tensor */
    float v[3];
    CHECK_FAILS(amp_tensor_to_host(y, v, sizeof v), AMP_ERR_STATE, "step that has ended");
    CHECK_FAILS(amp_relu(y, &w), AMP_ERR_STATE, "amp_relu: x was made in a step that has ended");
    CHECK_OK(amp_tensor_to_host(z, v, sizeof v));
    CHECK(v[0] == 1 && v[1] == 0 && v[2] == 3);
    amp_tensor_free(x);
    amp_ctx_free(ctx);
}

int main(void) {
    test_block_layout();
    test_memory_counters();
    test_stale_step_tensors();
    test_arena();
    test_arena_give_back();
    test_rng();
    test_ctx_and_tensor();
    return test_summary("test_core");
}
