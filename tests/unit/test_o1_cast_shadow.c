/* O1's half copies of f32 parameters kept from step to step (core/cast_shadow.h): autocast casts
 * a weight once, hands the copy out in later steps, and the optimizer writes it in its update's
 * pass.
 *  - Training: SGD with momentum, Adam, LAMB (with and without clipping), bf16 and f16, gives the
 *    bits of training where every step casts afresh (the copies made stale before each forward),
 *    loss by loss and weight by weight; after each step the copy is current and holds the weight
 *    rounded to half, and the next forward's cast reads it without a cast into the step arena.
 *  - A step skipped for an overflow leaves weight and copy as they were, still current.
 *  - Writes to a weight other than the update make the copy stale: amp_tensor_copy_from_host and
 *    amp_checkpoint_load; the next cast gives the new values. A copy already handed out in the
 *    step is not overwritten (its tape reads it): the cast after such a write is a fresh one.
 *  - The handed-out copy is read-only: amp_accumulate and amp_tensor_copy_from_host refuse it,
 *    also through a reshape; a write through a reshape of the weight makes the copy stale.
 *  - A graph kept for a second backward (retain_graph) keeps the copy it read: the optimizer does
 *    not write it then (it goes stale), and the second backward sees the forward's values.
 *  - Only model parameters get copies: a tensor marked requires_grad for one step and freed
 *    gets none (a later tensor at the same address would have read it).
 *  - A model freed in the middle of a step keeps its handed-out copies until the step ends.
 *  - Every public write path (host copy, load, DDP broadcast, step, model cast, in-place ops)
 *    moves the weight's version, and the next forward casts what the weight holds now.
 *  - No cap: 100 weights keep 100 copies.
 * On the CPU, and on CUDA where a device answers (the CUDA backend under ../shared/cudacpu). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "amp/memory.h"
#include "core/ctx.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor_internal.h"
#include "nn/model_internal.h"
#include "test_devices.h"
#include "test_util.h"

#define B 16
#define IN 40
#define HID 24
#define OUT 10
#define STEPS 6

static amp_device g_device = AMP_DEVICE_CPU;

typedef enum optim_kind { OPT_SGD, OPT_ADAM, OPT_LAMB, OPT_LAMB_CLIP } optim_kind;

typedef struct rig {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_tensor *x, *y;
    amp_dtype half;
} rig;

static bool rig_setup(rig *r, optim_kind kind, amp_half_type ht, float x_scale) {
    *r = (rig){.half = ht == AMP_HALF_F16 ? AMP_F16 : AMP_BF16};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = g_device, .seed = 11}, &r->ctx));
    if (!r->ctx) return false;
    CHECK_OK(amp_seq_create(r->ctx, &r->m));
    if (!r->m) return false;
    CHECK_OK(amp_seq_add_linear(r->m, "fc1", IN, HID, true));
    CHECK_OK(amp_seq_add_relu(r->m, "relu"));
    CHECK_OK(amp_seq_add_linear(r->m, "fc2", HID, OUT, true));
    CHECK_OK(amp_model_build(r->m));
    amp_status s;
    if (kind == OPT_SGD)
        s = amp_sgd_create(r->m, &(amp_sgd_opts){.lr = 0.05f, .momentum = 0.9f}, &r->opt);
    else if (kind == OPT_ADAM)
        s = amp_adam_create(r->m, &(amp_adam_opts){.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f,
                                                   .eps = 1e-8f},
                            &r->opt);
    else
        s = amp_lamb_create(r->m, &(amp_lamb_opts){.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f,
                                                   .eps = 1e-6f, .weight_decay = 0.01f,
                                                   .max_grad_norm = kind == OPT_LAMB_CLIP ? 1 : 0,
                                                   .decoupled = true, .bias_correction = true,
                                                   .grad_averaging = true, .exact = true},
                            &r->opt);
    CHECK_OK(s);
    if (!r->opt) return false;
    CHECK_OK(amp_initialize_ex(r->m, r->opt, &(amp_options){.opt_level = AMP_O1, .half_type = ht,
                                                            .quiet = true}));
    float xs[B * IN];
    int32_t ys[B];
    uint32_t g = 99u;
    for (int i = 0; i < B * IN; i++) {
        g = g * 1664525u + 1013904223u;
        xs[i] = ((float)(g >> 8) / 16777216.0f - 0.5f) * x_scale;
    }
    for (int i = 0; i < B; i++) ys[i] = i % OUT;
    CHECK_OK(amp_tensor_from_host(r->ctx, AMP_F32, 2, (int64_t[]){B, IN}, xs, &r->x));
    CHECK_OK(amp_tensor_from_host(r->ctx, AMP_I32, 1, (int64_t[]){B}, ys, &r->y));
    return r->x && r->y;
}

static void rig_close(rig *r) {
    amp_tensor_free(r->x);
    amp_tensor_free(r->y);
    amp_optimizer_free(r->opt);
    amp_model_free(r->m);
    amp_ctx_free(r->ctx);
}

/* rig_setup, closed again when it fails (the failure already counted). */
static bool rig_open(rig *r, optim_kind kind, amp_half_type ht, float x_scale) {
    if (rig_setup(r, kind, ht, x_scale)) return true;
    rig_close(r);
    return false;
}

/* The weights (the parameters autocast casts): fc1.weight and fc2.weight. */
static amp_tensor *weight(rig *r, int j) { return amp_model_param(r->m, 2 * j); }

/* n elements of backend memory p (dtype dt) as host bytes. */
static void read_back(const rig *r, const void *p, size_t nbytes, void *host) {
    CHECK_OK(r->ctx->backend->copy_to_host(r->ctx->backend->dev, host, p, nbytes));
}

/* Whether the half bits at `data` are w's values rounded to half. */
static bool holds_rounded(rig *r, const amp_tensor *w, const void *data) {
    size_t n = (size_t)w->numel;
    float *f = malloc(n * 4);
    uint16_t *h = malloc(n * 2);
    CHECK_OK(amp_tensor_to_host(w, f, n * 4));
    read_back(r, data, n * 2, h);
    bool same = true;
    for (size_t i = 0; i < n; i++)
        same &= h[i] == (r->half == AMP_F16 ? amp_f32_to_f16_bits(f[i]) : amp_f32_to_bf16_bits(f[i]));
    free(f), free(h);
    return same;
}

static amp_status train_step(rig *r, float *loss_out, bool *stepped) {
    amp_tensor *logits, *loss;
    AMP_TRY(amp_model_forward(r->m, r->x, &logits));
    AMP_TRY(amp_cross_entropy(logits, r->y, &loss));
    AMP_TRY(amp_tensor_item(loss, loss_out));
    AMP_TRY(amp_backward(loss));
    AMP_TRY(amp_step(r->opt, stepped));
    return amp_zero_grad(r->opt);
}

static const char *kind_name(optim_kind k) {
    static const char *names[] = {"sgd", "adam", "lamb", "lamb+clip"};
    return names[k];
}

/* Kept copies against fresh casts every step (the copies dropped before each forward, so that
 * it casts from the weight as torch.autocast does): the same losses and weights, bit for bit. */
static void test_training(optim_kind kind, amp_half_type ht) {
    rig kept, fresh;
    if (!rig_open(&kept, kind, ht, 4.0f)) return;
    if (!rig_open(&fresh, kind, ht, 4.0f)) {
        rig_close(&kept);
        return;
    }
    const char *name = kind_name(kind), *half = amp_dtype_name(kept.half);
    for (int step = 0; step < STEPS; step++) {
        for (int j = 0; j < 2; j++) amp_cast_shadow_forget(weight(&fresh, j));
        float lk = 0, lf = 0;
        bool sk = false, sf = false;
        CHECK_OK(train_step(&kept, &lk, &sk));
        CHECK_OK(train_step(&fresh, &lf, &sf));
        CHECK_MSG(memcmp(&lk, &lf, sizeof lk) == 0 && sk == sf,
                  "%s %s step %d: loss %.9g kept, %.9g fresh", name, half, step, (double)lk,
                  (double)lf);
        for (int j = 0; j < 2; j++) {
            amp_tensor *w = weight(&kept, j);
            amp_cast_shadow *sh = amp_cast_shadow_find(kept.ctx, w, kept.half);
            CHECK_MSG(sh != NULL, "%s %s: weight %d has no kept copy", name, half, j);
            if (!sh) continue;
            /* LAMB's clipping keeps the step in one call: its copies are recast instead. */
            CHECK_MSG(amp_cast_shadow_current(sh) == (kind != OPT_LAMB_CLIP), "%s %s step %d: weight %d's copy "
                      "%s after the update", name, half, step, j, amp_cast_shadow_current(sh) ? "current" : "stale");
            if (amp_cast_shadow_current(sh))
                CHECK_MSG(holds_rounded(&kept, w, sh->data), "%s %s step %d: weight %d's copy "
                          "is not the updated weight rounded", name, half, step, j);
        }
    }
    for (int j = 0; j < 2; j++) {
        amp_tensor *a = weight(&kept, j), *b = weight(&fresh, j);
        size_t n = (size_t)a->numel;
        float *fa = malloc(n * 4), *fb = malloc(n * 4);
        CHECK_OK(amp_tensor_to_host(a, fa, n * 4));
        CHECK_OK(amp_tensor_to_host(b, fb, n * 4));
        CHECK_MSG(memcmp(fa, fb, n * 4) == 0, "%s %s: weight %d differs after %d steps", name,
                  half, j, STEPS);
        free(fa), free(fb);
    }
    /* The next forward's cast reads the copy: no cast into the step arena. */
    if (kind != OPT_LAMB_CLIP) {
        amp_tensor *w = weight(&kept, 0), *c = NULL;
        size_t before = amp_ctx_arena_bytes(kept.ctx, NULL);
        CHECK_OK(amp_cast(w, kept.half, &c));
        amp_cast_shadow *sh = amp_cast_shadow_find(kept.ctx, w, kept.half);
        CHECK(c && sh && c->data == sh->data && (c->flags & AMP_TENSOR_SHARED));
        CHECK_MSG(amp_ctx_arena_bytes(kept.ctx, NULL) - before < (size_t)w->numel * 2,
                  "%s %s: the cast took step memory for the weight", name, half);
    }
    rig_close(&kept), rig_close(&fresh);
}

/* An overflow skips the step: weight and copy unchanged, the copy still current. */
static void test_skipped_step(void) {
    rig r;
    if (!rig_open(&r, OPT_SGD, AMP_HALF_F16, 4.0f)) return;
    float loss;
    bool stepped = false;
    CHECK_OK(train_step(&r, &loss, &stepped)); /* makes the copies */
    float big[B * IN];
    for (int i = 0; i < B * IN; i++) big[i] = 60000.0f; /* f16 activations overflow */
    CHECK_OK(amp_tensor_copy_from_host(r.x, big, sizeof big));
    amp_tensor *w = weight(&r, 0);
    float before[HID * IN], after[HID * IN];
    CHECK_OK(amp_tensor_to_host(w, before, sizeof before));
    CHECK_OK(train_step(&r, &loss, &stepped));
    CHECK_MSG(!stepped, "the step with overflowing activations was taken");
    CHECK_OK(amp_tensor_to_host(w, after, sizeof after));
    CHECK(memcmp(before, after, sizeof before) == 0);
    amp_cast_shadow *sh = amp_cast_shadow_find(r.ctx, w, AMP_F16);
    CHECK(sh && amp_cast_shadow_current(sh) && holds_rounded(&r, w, sh->data));
    rig_close(&r);
}

/* Writes other than the update: the copy goes stale, the next cast gives the new values; a copy
 * already handed out this step is left alone. */
static void test_other_writes(void) {
    rig r;
    if (!rig_open(&r, OPT_ADAM, AMP_HALF_BF16, 1.0f)) return;
    float loss;
    bool stepped;
    CHECK_OK(train_step(&r, &loss, &stepped));
    amp_tensor *w = weight(&r, 0), *c1 = NULL, *c2 = NULL;
    float v[HID * IN], old[HID * IN];
    CHECK_OK(amp_tensor_to_host(w, old, sizeof old));
    for (int i = 0; i < HID * IN; i++) v[i] = (float)i / 7.0f - 50.0f;
    CHECK_OK(amp_cast(w, AMP_BF16, &c1)); /* handed out in this step */
    CHECK_OK(amp_tensor_copy_from_host(w, v, sizeof v));
    amp_cast_shadow *sh = amp_cast_shadow_find(r.ctx, w, AMP_BF16);
    CHECK(sh && !amp_cast_shadow_current(sh));
    amp_ctx_reset_step(r.ctx); /* the per-step cache would return c1 again */
    CHECK_OK(amp_cast(w, AMP_BF16, &c2));
    CHECK(c2 && sh && c2->data == sh->data && holds_rounded(&r, w, c2->data));
    /* In one step: the copy handed out keeps the values it had. */
    CHECK_OK(amp_tensor_copy_from_host(w, old, sizeof old));
    r.ctx->autocast.n_cache = 0;
    amp_tensor *c3 = NULL;
    CHECK_OK(amp_cast(w, AMP_BF16, &c3));
    CHECK_MSG(c3 && c2 && c3->data != c2->data, "a cast after a write reused the copy this step "
              "already handed out");
    CHECK(c3 && holds_rounded(&r, w, c3->data));
    uint16_t h[HID * IN];
    read_back(&r, c2->data, sizeof h, h);
    bool kept_v = true;
    for (int i = 0; i < HID * IN; i++) kept_v &= h[i] == amp_f32_to_bf16_bits(v[i]);
    CHECK_MSG(kept_v, "the copy handed out earlier in the step was overwritten");
    /* Read-only. */
    CHECK_FAILS(amp_accumulate(c2, c3), AMP_ERR_STATE, "read-only");
    CHECK_FAILS(amp_tensor_copy_from_host(c2, v, HID * IN * 2), AMP_ERR_STATE, "read-only");
    /* A checkpoint load writes the weights: stale, then recast from the loaded values. */
    const char *tmp = getenv("AMP_TEST_TMP");
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/o1_cast_shadow_%d", tmp ? tmp : "/tmp", (int)g_device);
    amp_ctx_reset_step(r.ctx);
    CHECK_OK(train_step(&r, &loss, &stepped));
    CHECK_OK(amp_checkpoint_save(dir, 1, r.m, r.opt, NULL, path, sizeof path));
    float saved[HID * IN];
    CHECK_OK(amp_tensor_to_host(w, saved, sizeof saved));
    CHECK_OK(train_step(&r, &loss, &stepped));
    CHECK(sh && amp_cast_shadow_current(sh));
    CHECK_OK(amp_checkpoint_load(path, r.m, r.opt, NULL, NULL));
    CHECK(sh && !amp_cast_shadow_current(sh));
    amp_tensor *c4 = NULL;
    CHECK_OK(amp_cast(w, AMP_BF16, &c4));
    float now[HID * IN];
    CHECK_OK(amp_tensor_to_host(w, now, sizeof now));
    CHECK(memcmp(now, saved, sizeof now) == 0);
    CHECK(c4 && holds_rounded(&r, w, c4->data));
    rig_close(&r);
}

/* The review's cases: reshapes, retain_graph, temporary leaves, a model freed mid-step. */
static void test_edges(void) {
    rig r;
    if (!rig_open(&r, OPT_SGD, AMP_HALF_BF16, 1.0f)) return;
    float loss;
    bool stepped;
    CHECK_OK(train_step(&r, &loss, &stepped));
    amp_tensor *w = weight(&r, 0), *c = NULL, *cv = NULL, *wv = NULL;
    amp_cast_shadow *sh = amp_cast_shadow_find(r.ctx, w, AMP_BF16);
    CHECK(sh && amp_cast_shadow_current(sh));
    /* Through a reshape: the copy stays read-only, and a write to the weight stales it. */
    CHECK_OK(amp_cast(w, AMP_BF16, &c));
    CHECK_OK(amp_reshape(c, 1, (int64_t[]){HID * IN}, &cv));
    if (cv) CHECK_FAILS(amp_accumulate(cv, cv), AMP_ERR_STATE, "read-only");
    float v[HID * IN];
    for (int i = 0; i < HID * IN; i++) v[i] = 0.25f * (float)(i % 13) - 1.0f;
    CHECK_OK(amp_reshape(w, 1, (int64_t[]){HID * IN}, &wv));
    if (wv) CHECK_OK(amp_tensor_copy_from_host(wv, v, sizeof v));
    CHECK(sh && !amp_cast_shadow_current(sh));
    amp_ctx_reset_step(r.ctx);
    CHECK_OK(amp_cast(w, AMP_BF16, &c));
    CHECK(c && holds_rounded(&r, w, c->data));
    amp_ctx_reset_step(r.ctx);

    /* retain_graph: the second backward reads what the forward read. */
    amp_tensor *logits = NULL, *l = NULL;
    CHECK_OK(amp_model_forward(r.m, r.x, &logits));
    CHECK_OK(amp_cross_entropy(logits, r.y, &l));
    uint16_t before[HID * IN], after[HID * IN];
    read_back(&r, sh->data, sizeof before, before);
    CHECK_OK(amp_backward_with(l, &(amp_backward_opts){.retain_graph = true}));
    CHECK_OK(amp_step(r.opt, &stepped));
    CHECK_MSG(sh && !amp_cast_shadow_current(sh), "the optimizer wrote a copy a kept graph still reads");
    read_back(&r, sh->data, sizeof after, after);
    CHECK(memcmp(before, after, sizeof before) == 0);
    CHECK_OK(amp_backward_with(l, &(amp_backward_opts){0}));
    CHECK_OK(amp_zero_grad(r.opt));
    CHECK_OK(train_step(&r, &loss, &stepped));
    CHECK(sh && amp_cast_shadow_current(sh) && holds_rounded(&r, w, sh->data));

    /* A leaf marked requires_grad for one step: no copy, so no stale read at a reused address. */
    for (int it = 0; it < 4; it++) {
        float t[IN];
        for (int i = 0; i < IN; i++) t[i] = (float)(it * IN + i) * 0.37f;
        amp_tensor *leaf = NULL, *lc = NULL;
        CHECK_OK(amp_tensor_from_host(r.ctx, AMP_F32, 1, (int64_t[]){IN}, t, &leaf));
        if (!leaf) break;
        CHECK_OK(amp_tensor_set_requires_grad(leaf, true));
        CHECK_OK(amp_cast(leaf, AMP_BF16, &lc));
        CHECK(amp_cast_shadow_find(r.ctx, leaf, AMP_BF16) == NULL);
        CHECK(lc && holds_rounded(&r, leaf, lc->data));
        amp_tensor_free(leaf);
        amp_ctx_reset_step(r.ctx);
    }

    /* The model freed mid-step: the copies handed out stay until the step ends. */
    CHECK_OK(amp_cast(w, AMP_BF16, &c));
    size_t copies = (size_t)(HID * IN + OUT * HID) * 2;
    amp_optimizer_free(r.opt);
    r.opt = NULL;
    amp_model_free(r.m);
    r.m = NULL;
    amp_mem_usage u;
    CHECK_OK(amp_ctx_memory_usage(r.ctx, &u, NULL));
    CHECK_MSG(u.bytes[AMP_MEM_PARAMS] >= 2 * HID * IN, "a handed-out copy was freed mid-step");
    CHECK(u.bytes[AMP_MEM_PARAMS] <= copies);
    amp_ctx_reset_step(r.ctx);
    CHECK_OK(amp_ctx_memory_usage(r.ctx, &u, NULL));
    CHECK_MSG(u.bytes[AMP_MEM_PARAMS] == 0, "%zu bytes of copies left after the step",
              u.bytes[AMP_MEM_PARAMS]);
    rig_close(&r);
}

/* Every public way to write a weight, each after a step left its kept copy current: a copy from
 * the host, a checkpoint load, DDP's broadcast of rank 0's weights, an optimizer step, a model
 * cast, an in-place op on the weight and on a reshape of it. Afterwards the weight's version has
 * moved, the next cast holds the weight as it is now (rounded), and the forward's logits are
 * those of the same model whose copies were dropped (a fresh cast). No writer calls anything of
 * the cache: the version does it. */
typedef enum write_path {
    W_HOST, W_LOAD, W_DDP, W_STEP, W_MODEL_CAST, W_ACCUMULATE, W_RESHAPED, W_N
} write_path;

static void write_weight(rig *r, write_path path, const char *ckpt) {
    amp_tensor *w = weight(r, 0), *wv = NULL, *d = NULL;
    float v[HID * IN];
    for (int i = 0; i < HID * IN; i++) v[i] = 0.01f * (float)(i % 29) - 0.1f;
    float loss;
    bool stepped;
    switch (path) {
    case W_HOST: CHECK_OK(amp_tensor_copy_from_host(w, v, sizeof v)); break;
    case W_LOAD: CHECK_OK(amp_checkpoint_load(ckpt, r->m, r->opt, NULL, NULL)); break;
    case W_DDP: {
        amp_ddp *ddp = NULL;
        CHECK_OK(amp_ddp_create(r->m, r->opt, NULL, &ddp));
        amp_ddp_free(ddp);
        break;
    }
    case W_STEP: CHECK_OK(train_step(r, &loss, &stepped)); break;
    case W_MODEL_CAST: CHECK_OK(amp_model_cast(r->m, AMP_F32, false)); break;
    case W_ACCUMULATE:
    case W_RESHAPED:
        CHECK_OK(amp_tensor_from_host(r->ctx, AMP_F32, 2, (int64_t[]){HID, IN}, v, &d));
        if (path == W_RESHAPED) {
            CHECK_OK(amp_reshape(w, 1, (int64_t[]){HID * IN}, &wv));
            amp_tensor *dv = NULL;
            CHECK_OK(amp_reshape(d, 1, (int64_t[]){HID * IN}, &dv));
            if (wv && dv) CHECK_OK(amp_accumulate(wv, dv));
        } else if (d) {
            CHECK_OK(amp_accumulate(w, d));
        }
        amp_tensor_free(d);
        break;
    case W_N: break;
    }
}

static void test_write_paths(void) {
    static const char *names[W_N] = {"copy from host", "checkpoint load", "DDP broadcast",
                                     "optimizer step", "model cast", "amp_accumulate",
                                     "amp_accumulate on a reshape"};
    const char *tmp = getenv("AMP_TEST_TMP");
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/o1_write_paths_%d", tmp ? tmp : "/tmp", (int)g_device);
    for (int p = 0; p < W_N; p++) {
        rig r;
        if (!rig_open(&r, OPT_SGD, AMP_HALF_BF16, 1.0f)) return;
        float loss;
        bool stepped;
        CHECK_OK(train_step(&r, &loss, &stepped));
        if (p == W_LOAD) CHECK_OK(amp_checkpoint_save(dir, 1, r.m, r.opt, NULL, path, sizeof path));
        CHECK_OK(train_step(&r, &loss, &stepped)); /* the weights move past the saved ones */
        amp_tensor *w = weight(&r, 0);
        amp_cast_shadow *sh = amp_cast_shadow_find(r.ctx, w, AMP_BF16);
        CHECK_MSG(sh && amp_cast_shadow_current(sh), "%s: no current copy before the write", names[p]);
        uint64_t version = *w->version;
        write_weight(&r, (write_path)p, path);
        CHECK_MSG(*w->version > version, "%s: the weight's version did not move", names[p]);
        amp_ctx_reset_step(r.ctx);
        amp_tensor *c = NULL, *kept = NULL, *fresh = NULL;
        CHECK_OK(amp_cast(w, AMP_BF16, &c));
        CHECK_MSG(c && holds_rounded(&r, w, c->data), "%s: the cast after the write holds other "
                  "values than the weight's", names[p]);
        amp_ctx_reset_step(r.ctx);
        float lk[B * OUT], lf[B * OUT];
        CHECK_OK(amp_model_forward(r.m, r.x, &kept));
        CHECK_OK(amp_tensor_to_host_f32(kept, lk, sizeof lk));
        amp_ctx_reset_step(r.ctx);
        for (int j = 0; j < 2; j++) amp_cast_shadow_forget(weight(&r, j));
        CHECK_OK(amp_model_forward(r.m, r.x, &fresh));
        CHECK_OK(amp_tensor_to_host_f32(fresh, lf, sizeof lf));
        CHECK_MSG(memcmp(lk, lf, sizeof lk) == 0, "%s: logits through the kept copies differ from "
                  "a fresh cast's", names[p]);
        amp_ctx_reset_step(r.ctx);
        rig_close(&r);
    }
}

/* No cap on the kept copies (GPT-2 medium has 98 weight matrices): 100 linear layers, every
 * weight gets its copy, and the second step casts none of them afresh. */
static void test_many_weights(void) {
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = g_device, .seed = 3}, &ctx));
    CHECK_OK(amp_seq_create(ctx, &m));
    for (int l = 0; l < 100; l++) CHECK_OK(amp_seq_add_linear(m, NULL, 8, 8, false));
    CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.01f}, &opt));
    CHECK_OK(amp_initialize_ex(m, opt, &(amp_options){.opt_level = AMP_O1,
                                                      .half_type = AMP_HALF_BF16, .quiet = true}));
    amp_tensor *x = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (int64_t[]){4, 8}, &x));
    for (int step = 0; step < 2; step++) {
        amp_tensor *y, *loss;
        CHECK_OK(amp_model_forward(m, x, &y));
        CHECK_OK(amp_mean(y, &loss));
        CHECK_OK(amp_backward(loss));
        CHECK_OK(amp_step(opt, NULL));
        CHECK_OK(amp_zero_grad(opt));
    }
    int current = 0;
    for (int i = 0; i < amp_model_n_params(m); i++) {
        amp_cast_shadow *sh = amp_cast_shadow_find(ctx, amp_model_param(m, i), AMP_BF16);
        current += sh && amp_cast_shadow_current(sh);
    }
    CHECK_MSG(ctx->autocast.n_shadows == 100 && current == 100, "%d kept copies, %d current, of "
              "100 weights", ctx->autocast.n_shadows, current);
    amp_tensor_free(x);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

static void run_on(amp_device device) {
    g_device = device;
    for (optim_kind k = OPT_SGD; k <= OPT_LAMB_CLIP; k++) {
        test_training(k, AMP_HALF_BF16);
        test_training(k, AMP_HALF_F16);
    }
    test_skipped_step();
    test_other_writes();
    test_edges();
    test_write_paths();
    test_many_weights();
}

int main(void) {
    test_on_each_device(run_on);
    return test_summary("test_o1_cast_shadow");
}
