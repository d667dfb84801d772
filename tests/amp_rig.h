/* A model, its optimizer and a batch for the amp-layer tests (test_amp_options.c,
 * test_amp_misuse.c): TINY, a two-layer MLP, or the tutorial ConvNet; the same seed gives the same
 * weights and batch. snapshot() collects every byte a skipped step must leave alone. */
#ifndef AMP_TESTS_AMP_RIG_H
#define AMP_TESTS_AMP_RIG_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/half.h"
#include "optim/optimizer_internal.h"
#include "test_util.h"
#include "core/tensor_internal.h"

#define DYN AMP_LOSS_SCALE_DYNAMIC
#define BATCH 4

typedef enum model_kind { TINY, CONVNET } model_kind;

typedef struct rig {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_tensor *x, *y;
} rig;

static uint32_t g_lcg;
static inline float rand_unit(void) {
    g_lcg = g_lcg * 1664525u + 1013904223u;
    return (float)(g_lcg >> 8) / 16777216.0f;
}

/* TINY: Linear(16, 12) + ReLU + Linear(12, 4) on [4, 16]; CONVNET: the tutorial preset on
 * [4, 1, 28, 28]. Same seed, same weights and batch. Options NULL: no amp_initialize. */
static inline bool rig_make(rig *r, model_kind kind, bool adam, const amp_options *o,
                            uint64_t seed) {
    *r = (rig){0};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = seed}, &r->ctx));
    if (!r->ctx) return false;
    if (kind == CONVNET) {
        CHECK_OK(amp_model_convnet_mnist(r->ctx, &r->m));
    } else {
        CHECK_OK(amp_seq_create(r->ctx, &r->m));
        CHECK_OK(amp_seq_add_linear(r->m, "fc1", 16, 12, true));
        CHECK_OK(amp_seq_add_relu(r->m, "relu"));
        CHECK_OK(amp_seq_add_linear(r->m, "fc2", 12, 4, true));
    }
    if (!r->m) return false;
    if (adam)
        CHECK_OK(amp_adam_create(r->m, &(amp_adam_opts){.lr = 1e-3f}, &r->opt));
    else
        CHECK_OK(amp_sgd_create(r->m, &(amp_sgd_opts){.lr = 0.05f, .momentum = 0.9f}, &r->opt));
    if (!r->opt) return false;
    if (o) {
        amp_options q = *o;
        q.quiet = true;
        amp_status s = amp_initialize_ex(r->m, r->opt, &q);
        CHECK_MSG(s == AMP_OK, "amp_initialize_ex: %s", amp_last_error());
        if (s != AMP_OK) return false;
    }
    g_lcg = (uint32_t)seed * 2654435761u + 1;
    int64_t n = kind == CONVNET ? BATCH * 28 * 28 : BATCH * 16;
    float *xs = malloc((size_t)n * sizeof *xs);
    int32_t ys[BATCH];
    for (int64_t i = 0; xs && i < n; i++)
        xs[i] = kind == CONVNET ? rand_unit() : 2 * rand_unit() - 1;
    for (int i = 0; i < BATCH; i++)
        ys[i] = (int32_t)(rand_unit() * 4.0f);
    if (kind == CONVNET)
        CHECK_OK(
            amp_tensor_from_host(r->ctx, AMP_F32, 4, (int64_t[]){BATCH, 1, 28, 28}, xs, &r->x));
    else
        CHECK_OK(amp_tensor_from_host(r->ctx, AMP_F32, 2, (int64_t[]){BATCH, 16}, xs, &r->x));
    CHECK_OK(amp_tensor_from_host(r->ctx, AMP_I32, 1, (int64_t[]){BATCH}, ys, &r->y));
    free(xs);
    return r->x && r->y;
}

static inline void rig_free(rig *r) {
    amp_tensor_free(r->x);
    amp_tensor_free(r->y);
    amp_optimizer_free(r->opt);
    amp_model_free(r->m);
    amp_ctx_free(r->ctx);
    *r = (rig){0};
}

static inline amp_status forward_loss(rig *r, amp_tensor *x, amp_tensor **loss) {
    amp_tensor *logits;
    amp_status s = amp_model_forward(r->m, x, &logits);
    return s == AMP_OK ? amp_cross_entropy(logits, r->y, loss) : s;
}

static inline bool forward_backward(rig *r) {
    amp_tensor *loss = NULL;
    CHECK_OK(forward_loss(r, r->x, &loss));
    if (!loss) return false;
    amp_status s = amp_backward(loss);
    CHECK_OK(s);
    return s == AMP_OK;
}

static inline int n_params(const rig *r) { return amp_model_n_params(r->m); }
static inline amp_tensor *param(const rig *r, int i) { return amp_model_param(r->m, i); }

/* Every byte a skipped step must leave alone: parameters, masters, optimizer state (tensors,
 * has_state, Adam's steps). Caller frees. */
static inline uint8_t *snapshot(const rig *r, size_t *size) {
    size_t total = 0;
    *size = 0;
    int n_state = amp_optimizer_n_state(r->opt);
    for (int i = 0; i < n_params(r); i++) /* the parameter, then f32 master and state */
        total += amp_tensor_nbytes(param(r, i)) +
                 (size_t)param(r, i)->numel * 4 * (1 + (size_t)n_state) + 16;
    uint8_t *buf = calloc(total, 1), *p = buf;
    if (!buf) return NULL;
    for (int i = 0; i < n_params(r); i++) {
        const amp_tensor *t = param(r, i), *mw = amp_optimizer_master(r->opt, i);
        size_t f32_bytes = (size_t)t->numel * 4;
        amp_tensor_to_host(t, p, amp_tensor_nbytes(t));
        p += amp_tensor_nbytes(t);
        if (mw) amp_tensor_to_host(mw, p, f32_bytes);
        p += f32_bytes;
        for (int j = 0; j < n_state; j++) {
            amp_tensor *st = NULL;
            amp_optimizer_state_tensor(r->opt, i, amp_optimizer_state_name(r->opt, j), &st);
            if (st && st->dtype == AMP_F32 && st->numel == t->numel)
                amp_tensor_to_host(st, p, f32_bytes);
            p += f32_bytes;
        }
        int64_t step = -1;
        if (amp_optimizer_kind(r->opt) == AMP_OPTIM_ADAM)
            amp_optimizer_state_step(r->opt, i, &step);
        memcpy(p, &step, sizeof step);
        p[8] = amp_optimizer_has_state(r->opt, i);
        p += 16;
    }
    *size = total;
    return buf;
}

static inline float elem_f32(const amp_tensor *t, int64_t k) {
    if (t->dtype == AMP_F32) return ((const float *)t->data)[k]; /* CPU backend: host memory */
    uint16_t h = ((const uint16_t *)t->data)[k];
    return t->dtype == AMP_F16 ? amp_f16_bits_to_f32(h) : amp_bf16_bits_to_f32(h);
}

#endif
