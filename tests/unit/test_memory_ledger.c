/* The context's memory ledger (amp/memory.h): every kind comes back to 0 once everything is
 * freed; each kind holds what hand counts from the model's parameter list say it holds, at O0..O3
 * with SGD (momentum) and Adam, for the MLP and the ConvNet; the peak split is the split at the
 * highest total; the table itself survives thousands of blocks freed in any order and pointers it
 * never saw. On the CPU backend, with one context alive, `total` is what the backend counts in
 * use (amp_ctx_memory), so nothing the library allocates escapes the ledger. */
#include <stdint.h>
#include <string.h>

#include "amp/amp.h"
#include "amp/memory.h"
#include "core/ctx.h"
#include "core/mem_ledger.h"
#include "kernels/math/scaler.h"
#include "test_util.h"
#include "core/tensor_internal.h"

#define BATCH 16
#define STEPS 3

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static void check_sum(const amp_mem_usage *u, const char *what) {
    size_t sum = 0;
    for (int k = 0; k < AMP_MEM_N_KINDS; k++) sum += u->bytes[k];
    CHECK_MSG(sum == u->total, "%s: kinds sum to %zu, total %zu", what, sum, u->total);
}

/* The split now; its total against the backend's own count (equal while this is the only
 * context: the allocator's rounding is WORKSPACE). */
static amp_mem_usage usage_now(const amp_ctx *ctx, const char *what) {
    amp_mem_usage u = {0};
    size_t in_use = SIZE_MAX;
    CHECK_OK(amp_ctx_memory_usage(ctx, &u, NULL));
    CHECK_OK(amp_ctx_memory(ctx, &in_use, NULL));
    CHECK_MSG(u.total == in_use, "%s: usage total %zu, backend in use %zu", what, u.total, in_use);
    check_sum(&u, what);
    return u;
}

static void check_kind(const amp_mem_usage *u, amp_mem_kind k, size_t want, const char *what) {
    CHECK_MSG(u->bytes[k] == want, "%s: %s holds %zu bytes, hand count %zu", what,
              amp_mem_kind_name(k), u->bytes[k], want);
}

/* ---- hand counts (include/amp/memory.h) ---- */

typedef struct run_cfg {
    bool convnet, adam;
    amp_opt_level level;
} run_cfg;

/* The dtype a cast gives a parameter or buffer: f16, but batch norm (a layer with running
 * statistics) stays f32 at O2 (keep_batchnorm_fp32). */
static amp_dtype cast_dtype(const run_cfg *c, const amp_model *m, const char *name) {
    if (c->level != AMP_O2) return AMP_F16;
    size_t layer = (size_t)(strrchr(name, '.') - name);
    for (int b = 0; b < amp_model_n_buffers(m); b++)
        if (strncmp(amp_model_buffer_name(m, b), name, layer + 1) == 0) return AMP_F32;
    return AMP_F16;
}

/* One block over the parameters (or buffers): f32 pads each tensor to 16 floats, a cast block
 * aligns each to 64 bytes in its dtype; an empty list holds a 4-byte f32 block. */
static size_t block_bytes(const run_cfg *c, const amp_model *m, bool buffers, bool cast) {
    int n = buffers ? amp_model_n_buffers(m) : amp_model_n_params(m);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const amp_tensor *t = buffers ? amp_model_buffer(m, i) : amp_model_param(m, i);
        const char *name = buffers ? amp_model_buffer_name(m, i) : amp_model_param_name(m, i);
        if (!cast) {
            total += align_up((size_t)t->numel, 16) * 4;
            continue;
        }
        amp_dtype dt = cast_dtype(c, m, name);
        CHECK_MSG(t->dtype == dt, "%s is %s, want %s", name, amp_dtype_name(t->dtype),
                  amp_dtype_name(dt));
        total += align_up((size_t)t->numel * amp_dtype_size(dt), 64);
    }
    return total ? total : 4;
}

/* The f32 model's parameter and buffer blocks. */
static size_t f32_model(const run_cfg *c, const amp_model *m) {
    return block_bytes(c, m, false, false) + block_bytes(c, m, true, false);
}

/* O1's kept half copies of the parameters autocast casts (core/cast_shadow.h): the weights of
 * the layers that run in half (linear and convolution; batch norm's and the biases stay f32),
 * 2 bytes an element, as asked (no padding). */
static size_t kept_casts(const run_cfg *c, const amp_model *m) {
    if (c->level != AMP_O1) return 0;
    size_t total = 0;
    for (int i = 0; i < amp_model_n_params(m); i++) {
        const char *name = amp_model_param_name(m, i);
        size_t len = strlen(name);
        if (len < 7 || strcmp(name + len - 7, ".weight") != 0) continue;
        bool norm = false;
        for (int b = 0; b < amp_model_n_buffers(m); b++)
            norm |= strncmp(amp_model_buffer_name(m, b), name, len - 6) == 0;
        if (!norm) total += (size_t)amp_model_param(m, i)->numel * 2;
    }
    return total;
}

static const size_t k_inputs = (size_t)BATCH * 784 * 4 + (size_t)BATCH * 4; /* x f32, y i32 */
static const size_t k_amp_scalars = sizeof(float) + sizeof(amp_scaler_dev); /* one loss */

/* After amp_initialize and some steps. */
static void check_attribution(const run_cfg *c, const amp_model *m, const amp_mem_usage *u,
                              const char *what) {
    bool cast = c->level == AMP_O2 || c->level == AMP_O3;
    size_t f32_params = block_bytes(c, m, false, false);
    check_kind(u, AMP_MEM_PARAMS,
               block_bytes(c, m, false, cast) + block_bytes(c, m, true, cast) + kept_casts(c, m),
               what);
    check_kind(u, AMP_MEM_GRADS, block_bytes(c, m, false, cast), what);
    check_kind(u, AMP_MEM_MASTERS, c->level == AMP_O2 ? 2 * f32_params : 0, what);
    check_kind(u, AMP_MEM_OPTIM_STATE,
               (c->adam ? 2 : 1) * f32_params + 8 * (size_t)amp_model_n_params(m), what);
    check_kind(u, AMP_MEM_OTHER, k_amp_scalars + k_inputs, what);
    CHECK_MSG(u->bytes[AMP_MEM_ACTIVATIONS] > 0, "%s: no activations after a step", what);
    /* The MLP against its raw parameter count P: 4 or 2 bytes a parameter, padding at most 64
     * bytes a tensor. */
    if (c->convnet) return;
    size_t P = (size_t)amp_model_numel(m), pad = 64 * (size_t)amp_model_n_params(m);
    size_t per = cast ? 2 : 4, g = u->bytes[AMP_MEM_GRADS], o = u->bytes[AMP_MEM_OPTIM_STATE];
    CHECK_MSG(g >= per * P && g <= per * P + pad, "%s: grads %zu, P = %zu", what, g, P);
    CHECK_MSG(o >= (c->adam ? 8 : 4) * P && o <= (c->adam ? 8 : 4) * P + 2 * pad,
              "%s: optimizer %zu, P = %zu", what, o, P);
    printf("  %-12s bytes/param: params %.3f grads %.3f masters %.3f optimizer %.3f; "
           "activations %.2f MiB\n", what, (double)u->bytes[AMP_MEM_PARAMS] / (double)P,
           (double)g / (double)P, (double)u->bytes[AMP_MEM_MASTERS] / (double)P,
           (double)o / (double)P, (double)u->bytes[AMP_MEM_ACTIVATIONS] / 1048576.0);
}

static void fill_batch(float *x, int32_t *y, uint32_t seed) {
    for (int i = 0; i < BATCH * 784; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    for (int i = 0; i < BATCH; i++) y[i] = (int32_t)((seed >> (i % 24)) % 10);
}

static amp_status train_step(amp_model *m, amp_optimizer *opt, amp_tensor *x, amp_tensor *y) {
    amp_tensor *logits = NULL, *loss = NULL;
    amp_status s = amp_model_forward(m, x, &logits);
    if (s == AMP_OK) s = amp_cross_entropy(logits, y, &loss);
    if (s == AMP_OK) s = amp_backward(loss);
    return s == AMP_OK ? amp_step(opt, NULL) : s;
}

/* (a) balance, (b) attribution and the training half of (c) for one model, optimizer, level. */
static void run_one(const run_cfg *c) {
    char what[64];
    snprintf(what, sizeof what, "%s/%s/O%d", c->convnet ? "convnet" : "mlp",
             c->adam ? "adam" : "sgd", (int)c->level);
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    amp_tensor *x = NULL, *y = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 7}, &ctx));
    if (!ctx) return;
    amp_status s = c->convnet ? amp_model_convnet_mnist(ctx, &m) : amp_model_mlp_mnist(ctx, &m);
    if (s == AMP_OK) s = amp_model_build(m);
    if (s == AMP_OK) { /* before amp: the f32 model alone */
        amp_mem_usage u = usage_now(ctx, what);
        check_kind(&u, AMP_MEM_PARAMS, f32_model(c, m), what);
        check_kind(&u, AMP_MEM_GRADS, block_bytes(c, m, false, false), what);
        check_kind(&u, AMP_MEM_OPTIM_STATE, 0, what);
    }
    if (s == AMP_OK)
        s = c->adam ? amp_adam_create(m, &(amp_adam_opts){.lr = 1e-3f}, &opt)
                    : amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.01f, .momentum = 0.9f}, &opt);
    if (s == AMP_OK)
        s = amp_initialize_ex(m, opt, &(amp_options){.opt_level = c->level, .quiet = true});
    float hx[BATCH * 784];
    int32_t hy[BATCH];
    fill_batch(hx, hy, 12345u);
    if (s == AMP_OK)
        s = amp_tensor_from_host(ctx, AMP_F32, 4, (int64_t[]){BATCH, 1, 28, 28}, hx, &x);
    if (s == AMP_OK) s = amp_tensor_from_host(ctx, AMP_I32, 1, (int64_t[]){BATCH}, hy, &y);
    amp_ctx_memory_reset_peak(ctx);
    size_t most = 0; /* the largest ledger total sampled between calls */
    for (int i = 0; s == AMP_OK && i < STEPS; i++) {
        s = train_step(m, opt, x, y);
        amp_mem_usage u = usage_now(ctx, what);
        size_t recorded = u.total - u.bytes[AMP_MEM_WORKSPACE]; /* no DDP: workspace is rounding */
        if (recorded > most) most = recorded;
        if (s == AMP_OK && i == STEPS - 1) check_attribution(c, m, &u, what);
        if (s == AMP_OK) s = amp_zero_grad(opt);
    }
    CHECK_MSG(s == AMP_OK, "%s: %s", what, amp_last_error());
    if (s == AMP_OK) { /* oneDNN's scratch and reorder arenas, kept between steps, are workspace */
        amp_mem_usage u = usage_now(ctx, what);
        CHECK_MSG(u.bytes[AMP_MEM_WORKSPACE] > 0, "%s: no workspace after training steps (the "
                  "CPU's oneDNN arenas are not reported)", what);
    }
    amp_mem_usage peak = {0};
    CHECK_OK(amp_ctx_memory_usage(ctx, NULL, &peak));
    check_sum(&peak, what);
    CHECK_MSG(peak.bytes[AMP_MEM_ACTIVATIONS] > 0, "%s: no activations at the peak", what);
    CHECK_MSG(peak.total - peak.bytes[AMP_MEM_WORKSPACE] >= most, "%s: peak %zu below %zu seen",
              what, peak.total - peak.bytes[AMP_MEM_WORKSPACE], most);

    if (!c->adam && s == AMP_OK) { /* amp_deinitialize first: back to the f32 model */
        CHECK_OK(amp_deinitialize(ctx));
        amp_mem_usage u = usage_now(ctx, what);
        check_kind(&u, AMP_MEM_PARAMS, f32_model(c, m), what);
        check_kind(&u, AMP_MEM_GRADS, block_bytes(c, m, false, false), what);
        check_kind(&u, AMP_MEM_MASTERS, 0, what);
        check_kind(&u, AMP_MEM_OTHER, k_inputs, what);
    }
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_optimizer_free(opt);
    amp_model_free(m);
    if (c->adam && s == AMP_OK) { /* freed under amp: only the amp layer's scalars are left */
        amp_mem_usage u = usage_now(ctx, what);
        check_kind(&u, AMP_MEM_OTHER, k_amp_scalars, what);
        CHECK_OK(amp_deinitialize(ctx));
    }
    CHECK_OK(amp_ctx_memory_trim(ctx));
    amp_mem_usage u = usage_now(ctx, what);
    for (int k = 0; k < AMP_MEM_N_KINDS; k++) check_kind(&u, (amp_mem_kind)k, 0, what);
    CHECK_MSG(u.total == 0, "%s: %zu bytes left", what, u.total);
    amp_ctx_free(ctx);
}

/* (c) The peak split is the split of the moment the total was highest; reset_peak starts over
 * from the split of its moment. */
static void test_peak(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx));
    if (!ctx) return;
    amp_tensor *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (int64_t[]){1000}, &a));
    amp_ctx_memory_reset_peak(ctx);
    amp_mem_usage now = usage_now(ctx, "peak"), peak = {0};
    CHECK_OK(amp_ctx_memory_usage(ctx, NULL, &peak));
    CHECK(memcmp(&now, &peak, sizeof now) == 0); /* reset: the peak is this moment */
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (int64_t[]){250000}, &b));
    amp_mem_usage highest = usage_now(ctx, "peak");
    check_kind(&highest, AMP_MEM_OTHER, 4000 + 1000000, "peak");
    amp_tensor_free(b);
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (int64_t[]){1000}, &c)); /* lower than before */
    CHECK_OK(amp_ctx_memory_usage(ctx, &now, &peak));
    check_kind(&now, AMP_MEM_OTHER, 8000, "peak now");
    CHECK_MSG(memcmp(&highest, &peak, sizeof peak) == 0, "at_peak %zu bytes (other %zu), the "
              "highest seen %zu (other %zu)", peak.total, peak.bytes[AMP_MEM_OTHER],
              highest.total, highest.bytes[AMP_MEM_OTHER]);
    amp_ctx_memory_reset_peak(ctx);
    CHECK_OK(amp_ctx_memory_usage(ctx, &now, &peak));
    CHECK(memcmp(&now, &peak, sizeof now) == 0 && peak.bytes[AMP_MEM_OTHER] == 8000);
    amp_tensor_free(a);
    amp_tensor_free(c);
    now = usage_now(ctx, "peak end");
    CHECK(now.total == 0);
    amp_ctx_free(ctx);
}

/* The table: thousands of blocks of every kind freed in a shuffled order (the deletions move
 * entries of a probe run back), a pointer it never saw, free(NULL), an unknown kind. */
static void test_table(void) {
    enum { N = 3000 };
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx));
    if (!ctx) return;
    static void *p[N];
    static int order[N];
    size_t want[AMP_MEM_N_KINDS] = {0};
    for (int i = 0; i < N; i++) {
        size_t nbytes = 1 + (size_t)(i * 37 % 500);
        CHECK_OK(amp_ledger_alloc(ctx, (amp_mem_kind)(i % AMP_MEM_N_KINDS), nbytes, &p[i]));
        want[i % AMP_MEM_N_KINDS] += nbytes;
        order[i] = i;
    }
    uint32_t r = 99;
    for (int i = N - 1; i > 0; i--) {
        r = r * 1664525u + 1013904223u;
        int j = (int)(r % (uint32_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int n = 0; n < N; n++) {
        int i = order[n];
        amp_ledger_free(ctx, p[i]);
        want[i % AMP_MEM_N_KINDS] -= 1 + (size_t)(i * 37 % 500);
        if (n % 500 != 0 && n != N - 1) continue;
        amp_mem_usage u = usage_now(ctx, "table");
        for (int k = 0; k < AMP_MEM_N_KINDS; k++)
            if (k != AMP_MEM_WORKSPACE) check_kind(&u, (amp_mem_kind)k, want[k], "table");
    }
    void *stranger = NULL; /* straight from the backend: freed, counted nowhere */
    CHECK_OK(ctx->backend->alloc(ctx->backend->dev, 256, &stranger));
    amp_ledger_free(ctx, stranger);
    amp_ledger_free(ctx, NULL);
    amp_mem_usage u = usage_now(ctx, "stranger");
    CHECK(u.total == 0);
    void *q = (void *)1;
    CHECK_FAILS(amp_ledger_alloc(ctx, AMP_MEM_N_KINDS, 64, &q), AMP_ERR_INVALID_ARG, "kind");
    CHECK(q == NULL);
    amp_ctx_free(ctx);
}

/* (d) */
static void test_bad_input(void) {
    amp_mem_usage u;
    CHECK_FAILS(amp_ctx_memory_usage(NULL, &u, &u), AMP_ERR_INVALID_ARG, "ctx");
    CHECK_FAILS(amp_ctx_memory_trim(NULL), AMP_ERR_INVALID_ARG, "ctx");
    const char *names[AMP_MEM_N_KINDS] = {"params", "grads", "masters", "optimizer",
                                          "activations", "workspace", "other", "recompute"};
    for (int k = 0; k < AMP_MEM_N_KINDS; k++)
        CHECK(strcmp(amp_mem_kind_name((amp_mem_kind)k), names[k]) == 0);
    CHECK(strcmp(amp_mem_kind_name(AMP_MEM_N_KINDS), "unknown") == 0);
    CHECK(strcmp(amp_mem_kind_name((amp_mem_kind)-1), "unknown") == 0);
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx));
    CHECK_OK(amp_ctx_memory_usage(ctx, NULL, NULL));
    amp_ctx_free(ctx);
}

int main(void) {
    test_bad_input();
    test_table();
    test_peak();
    for (int net = 0; net < 2; net++)
        for (int adam = 0; adam < 2; adam++)
            for (int level = 0; level < 4; level++)
                run_one(&(run_cfg){.convnet = net, .adam = adam, .level = (amp_opt_level)level});
    return test_summary("test_memory_ledger");
}
