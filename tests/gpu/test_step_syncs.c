/* The sync-free step on the CUDA backend: after warm-up, amp_step(opt, NULL) (with and without
 * amp_clip_grad_norm before it) and amp_backward issue no host synchronisation, and a whole
 * training step calls cudaMalloc 0 times. Asking amp_step for `stepped` costs exactly one
 * device-to-host copy.
 *
 * The CUDA runtime calls that make the host wait are counted by wrapping them at link time
 * (sync_count.h). Built where the CUDA backend is (the cudacpu build runs it on this CPU; a GPU
 * build on the device); without a device it reports SKIPPED. With AMP_CUDA_SYNC_DEBUG=1 (a second ctest) it checks the
 * opposite: every launch then waits for the stream, and the waits must show. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "amp/amp.h"
#include "sync_count.h"
#include "test_util.h"

static bool g_sync_debug; /* AMP_CUDA_SYNC_DEBUG=1: every launch waits, which must show here */

#define BATCH 32
#define WARMUP 3
#define MEASURED 4

typedef struct config {
    const char *name;
    amp_opt_level level;
    amp_half_type half;
    bool adam, clip;
} config;

typedef struct counts {
    long syncs, d2h, mallocs;
} counts;

static counts now(void) { return (counts){g_syncs, g_d2h, g_mallocs}; }
static counts since(counts c) { return (counts){g_syncs - c.syncs, g_d2h - c.d2h, g_mallocs - c.mallocs}; }

/* One configuration: MLP on random data; the step's phases measured after WARMUP steps. */
static void run(const config *cfg) {
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    amp_tensor *x = NULL, *y = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CUDA, .seed = 3}, &ctx));
    if (!ctx) return;
    CHECK_OK(amp_model_mlp_mnist(ctx, &m));
    if (cfg->adam) {
        CHECK_OK(amp_adam_create(m, &(amp_adam_opts){.lr = 1e-3f}, &opt));
    } else {
        CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.01f, .momentum = 0.9f}, &opt));
    }
    CHECK_OK(amp_initialize_ex(m, opt, &(amp_options){.opt_level = cfg->level,
                                                      .half_type = cfg->half, .quiet = true}));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (int64_t[]){BATCH, 1, 28, 28}, &x));
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 1, (int64_t[]){BATCH}, &y));
    static float hx[BATCH * 784];
    static int32_t hy[BATCH];
    for (int i = 0; i < BATCH * 784; i++) hx[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    for (int i = 0; i < BATCH; i++) hy[i] = i % 10;
    if (!x || !y) goto done;
    CHECK_OK(amp_tensor_copy_from_host(x, hx, sizeof hx));
    CHECK_OK(amp_tensor_copy_from_host(y, hy, sizeof hy));
    counts backward = {0}, step = {0}, clip = {0}, whole = {0};
    for (int i = 0; i < WARMUP + MEASURED; i++) {
        bool measured = i >= WARMUP;
        counts c0 = now();
        amp_tensor *logits = NULL, *loss = NULL;
        CHECK_OK(amp_model_forward(m, x, &logits));
        CHECK_OK(amp_cross_entropy(logits, y, &loss));
        counts c1 = now();
        CHECK_OK(amp_backward(loss));
        counts b = since(c1), c2 = now();
        if (cfg->clip) CHECK_OK(amp_clip_grad_norm(opt, 1.0f, NULL));
        counts cl = since(c2), c3 = now();
        CHECK_OK(amp_step(opt, NULL));
        counts st = since(c3);
        CHECK_OK(amp_zero_grad(opt));
        counts w = since(c0);
        if (!measured) continue;
        backward.syncs += b.syncs + b.d2h;
        clip.syncs += cl.syncs + cl.d2h;
        step.syncs += st.syncs + st.d2h;
        whole.mallocs += w.mallocs;
    }
    printf("%-22s per %d steps: backward %ld host waits, clip %ld, amp_step %ld; cudaMalloc %ld\n",
           cfg->name, MEASURED, backward.syncs, clip.syncs, step.syncs, whole.mallocs);
    if (g_sync_debug) { /* every launch waits: the counter sees them, so it can see a wait */
        CHECK_MSG(backward.syncs > 0 && step.syncs > 0,
                  "%s: AMP_CUDA_SYNC_DEBUG=1 but amp_backward waited %ld times, amp_step %ld",
                  cfg->name, backward.syncs, step.syncs);
    } else {
        CHECK_MSG(backward.syncs == 0, "%s: amp_backward waited for the device %ld times",
                  cfg->name, backward.syncs);
        CHECK_MSG(clip.syncs == 0, "%s: amp_clip_grad_norm(NULL) waited %ld times", cfg->name,
                  clip.syncs);
        CHECK_MSG(step.syncs == 0, "%s: amp_step(opt, NULL) waited %ld times", cfg->name,
                  step.syncs);
    }
    CHECK_MSG(whole.mallocs == 0, "%s: %ld cudaMalloc calls in the steady state", cfg->name,
              whole.mallocs);
    /* stepped: one wait, in which two copies come back: the 4-byte flag and the bad-index
     * record that every read back to the host brings with it (kernels/cuda/bad_index.h). */
    amp_tensor *logits = NULL, *loss = NULL;
    CHECK_OK(amp_model_forward(m, x, &logits));
    CHECK_OK(amp_cross_entropy(logits, y, &loss));
    CHECK_OK(amp_backward(loss));
    counts c = now();
    bool stepped = false;
    CHECK_OK(amp_step(opt, &stepped));
    counts st = since(c);
    CHECK_MSG((st.syncs == 1 && st.d2h == 2) || g_sync_debug,
              "%s: amp_step(opt, &stepped) waited %ld times and read %ld times from the device, "
              "want 1 and 2 (the flag and the bad-index record)", cfg->name, st.syncs, st.d2h);
    CHECK_MSG(stepped, "%s: a clean step was reported skipped", cfg->name);
    CHECK_OK(amp_zero_grad(opt));
done:
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

/* The sync-free step leaves the step counts on the device until something asks: amp_deinitialize
 * must settle them before it removes the amp layer, or the steps taken since the last read are
 * lost from amp_optimizer_step_count (and from a checkpoint made afterwards). */
static void test_deinitialize_settles(void) {
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    amp_tensor *x = NULL, *y = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CUDA, .seed = 5}, &ctx));
    if (!ctx) return;
    CHECK_OK(amp_model_mlp_mnist(ctx, &m));
    CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.01f}, &opt));
    CHECK_OK(amp_initialize_ex(m, opt, &(amp_options){.opt_level = AMP_O1, .quiet = true}));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (int64_t[]){BATCH, 1, 28, 28}, &x));
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 1, (int64_t[]){BATCH}, &y));
    enum { STEPS = 3 };
    for (int i = 0; x && y && i < STEPS; i++) {
        amp_tensor *logits = NULL, *loss = NULL;
        CHECK_OK(amp_model_forward(m, x, &logits));
        CHECK_OK(amp_cross_entropy(logits, y, &loss));
        CHECK_OK(amp_backward(loss));
        CHECK_OK(amp_step(opt, NULL));
        CHECK_OK(amp_zero_grad(opt));
    }
    CHECK_OK(amp_deinitialize(ctx));
    int64_t n = amp_optimizer_step_count(opt);
    CHECK_MSG(n == STEPS, "after amp_deinitialize the optimizer counts %lld steps, want %d",
              (long long)n, STEPS);
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

int main(void) {
    const char *debug = getenv("AMP_CUDA_SYNC_DEBUG");
    g_sync_debug = debug && *debug && strcmp(debug, "0") != 0;
    amp_ctx *probe = NULL;
    if (amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CUDA}, &probe) != AMP_OK) {
        printf("test_step_syncs: SKIPPED: %s\n", amp_last_error());
        return 77;
    }
    amp_ctx_free(probe);
    static const config configs[] = {
        {"O1 fp16 SGD", AMP_O1, AMP_HALF_F16, false, false},
        {"O1 fp16 SGD clip", AMP_O1, AMP_HALF_F16, false, true},
        {"O2 fp16 Adam", AMP_O2, AMP_HALF_F16, true, false},
        {"O2 fp16 Adam clip", AMP_O2, AMP_HALF_F16, true, true},
        {"O2 bf16 SGD clip", AMP_O2, AMP_HALF_BF16, false, true},
        {"O3 bf16 SGD clip", AMP_O3, AMP_HALF_BF16, false, true},
        {"O0 SGD clip", AMP_O0, AMP_HALF_F16, false, true},
    };
    /* With every launch waiting, two configurations show it; the rest would only take time. */
    size_t n = g_sync_debug ? 2 : sizeof configs / sizeof configs[0];
    for (size_t i = 0; i < n; i++) run(&configs[i]);
    if (!g_sync_debug) test_deinitialize_settles();
    return test_summary("test_step_syncs");
}
