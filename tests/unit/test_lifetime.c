/* Lifetimes in whatever order a C user frees things (run under ASan in CI, where a use after free
 * or a leak fails the test):
 *  - the model freed before its optimizer: amp_step, amp_optimizer_step, amp_zero_grad, a
 *    checkpoint and a DDP over it are refused, naming what was freed; freeing the optimizer then
 *    is fine; a parameter tensor freed under an optimizer made from a list likewise;
 *  - the context freed first, then the model, optimizer, tensors, stager and DDP: each free is
 *    safe, the amp layer's state included, and the context goes with the last of them;
 *  - DDP whose model was freed stops watching backward: another model's backward on the context
 *    runs, and the DDP's calls say what was freed;
 *  - a caller-owned tensor the graph reads freed before backward: backward refuses, saying so,
 *    instead of reading freed memory (it read garbage into the gradients before); the next step
 *    works;
 *  - the accessors that return no status answer NULL without a crash, leaving a message. */
#include <string.h>

#include "amp/amp.h"
#include "optim/optimizer_internal.h"
#include "test_util.h"

#define NAME "test_lifetime"

typedef struct parts {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_tensor *x, *y;
} parts;

static bool parts_make(parts *p, bool amp) {
    *p = (parts){0};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 2}, &p->ctx));
    if (!p->ctx) return false;
    CHECK_OK(amp_seq_create(p->ctx, &p->m));
    CHECK_OK(amp_seq_add_linear(p->m, "fc1", 6, 5, true));
    CHECK_OK(amp_seq_add_relu(p->m, "relu"));
    CHECK_OK(amp_seq_add_linear(p->m, "fc2", 5, 3, true));
    CHECK_OK(amp_adam_create(p->m, &(amp_adam_opts){.lr = 1e-3f}, &p->opt));
    if (amp) CHECK_OK(amp_initialize_ex(p->m, p->opt, &(amp_options){.opt_level = AMP_O1,
                                                                      .quiet = true}));
    float xs[12] = {0.5f, -1, 2, 0, 1, -0.5f, 1, 1, -2, 0.25f, 0, 3};
    int32_t ys[2] = {0, 2};
    CHECK_OK(amp_tensor_from_host(p->ctx, AMP_F32, 2, (int64_t[]){2, 6}, xs, &p->x));
    CHECK_OK(amp_tensor_from_host(p->ctx, AMP_I32, 1, (int64_t[]){2}, ys, &p->y));
    return p->opt && p->x && p->y;
}

static void backward(parts *p) {
    amp_tensor *out = NULL, *loss = NULL;
    CHECK_OK(amp_model_forward(p->m, p->x, &out));
    CHECK_OK(amp_cross_entropy(out, p->y, &loss));
    CHECK_OK(amp_backward(loss));
}

/* The model goes first: every later use of its optimizer is refused, freeing it is not. */
static void test_model_freed_first(void) {
    for (int with_amp = 0; with_amp < 2; with_amp++) {
        parts p;
        if (parts_make(&p, with_amp)) {
            backward(&p);
            CHECK_OK(with_amp ? amp_step(p.opt, NULL) : amp_optimizer_step(p.opt));
            CHECK_OK(amp_zero_grad(p.opt));
            backward(&p);
            amp_model_free(p.m);
            p.m = NULL;
            bool stepped = true;
            if (with_amp)
                CHECK_FAILS(amp_step(p.opt, &stepped), AMP_ERR_STATE, "optimizer's model was freed");
            CHECK_FAILS(amp_optimizer_step(p.opt), AMP_ERR_STATE, "optimizer's model was freed");
            CHECK_FAILS(amp_zero_grad(p.opt), AMP_ERR_STATE, "optimizer's model was freed");
            CHECK_FAILS(amp_optimizer_zero_grad(p.opt), AMP_ERR_STATE, "model was freed");
            CHECK(amp_optimizer_step_count(p.opt) == 1);
        }
        amp_optimizer_free(p.opt);
        amp_tensor_free(p.x);
        amp_tensor_free(p.y);
        amp_ctx_free(p.ctx);
    }
}

/* An optimizer made from a tensor list hears of its parameters' frees. */
static void test_param_freed(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx));
    if (!ctx) return;
    amp_tensor *w = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (int64_t[]){4}, &w));
    CHECK_OK(amp_tensor_set_requires_grad(w, true));
    amp_optimizer *opt = NULL;
    CHECK_OK(amp_sgd_create_params(&w, NULL, 1, &(amp_sgd_opts){.lr = 0.1f}, &opt));
    amp_tensor_free(w);
    CHECK_FAILS(amp_optimizer_step(opt), AMP_ERR_STATE, "optimizer's parameter tensor was freed");
    amp_optimizer_free(opt);
    amp_ctx_free(ctx);
}

/* The context goes first; everything made on it is freed afterwards, in an odd order. */
static void test_ctx_freed_first(void) {
    for (int with_amp = 0; with_amp < 2; with_amp++) {
        parts p;
        amp_stager *st = NULL;
        amp_ddp *ddp = NULL;
        if (parts_make(&p, with_amp)) {
            CHECK_OK(amp_stager_create(p.ctx, &st));
            backward(&p);
            CHECK_OK(with_amp ? amp_step(p.opt, NULL) : amp_optimizer_step(p.opt));
            CHECK_OK(amp_zero_grad(p.opt));
            CHECK_OK(amp_ddp_create(p.m, p.opt, NULL, &ddp));
        }
        amp_ctx_free(p.ctx);
        amp_ctx_free(p.ctx); /* twice: the second is a no-op while objects still hold it */
        /* Still usable until the last object goes. */
        if (p.m) backward(&p);
        amp_tensor_free(p.x);
        amp_model_free(p.m);
        amp_stager_free(st);
        amp_ddp_free(ddp);
        amp_tensor_free(p.y);
        amp_optimizer_free(p.opt); /* the last: the context goes with it */
    }
}

/* DDP's model freed: it stops watching backward, and its calls say why they fail. */
static void test_ddp_model_freed(void) {
    parts p, q;
    amp_ddp *ddp = NULL;
    if (parts_make(&p, false)) {
        CHECK_OK(amp_ddp_create(p.m, p.opt, NULL, &ddp));
        /* A second model on the same context, trained after the first is gone. */
        CHECK_OK(amp_seq_create(p.ctx, &q.m));
        CHECK_OK(amp_seq_add_linear(q.m, "fc", 6, 3, true));
        CHECK_OK(amp_sgd_create(q.m, &(amp_sgd_opts){.lr = 0.1f}, &q.opt));
        q.ctx = p.ctx, q.x = p.x, q.y = p.y;
        amp_optimizer_free(p.opt);
        amp_model_free(p.m);
        if (ddp) {
            CHECK_FAILS(amp_ddp_checkpoint_save(ddp, "/nonexistent", 1, NULL, NULL, 0), AMP_ERR_STATE,
                        "DDP's optimizer was freed");
            backward(&q); /* no DDP observer left to read the freed model */
            CHECK_OK(amp_optimizer_step(q.opt));
        }
        amp_ddp_free(ddp);
        amp_optimizer_free(q.opt);
        amp_model_free(q.m);
    }
    amp_tensor_free(p.x);
    amp_tensor_free(p.y);
    amp_ctx_free(p.ctx);
}

/* Accessors without a status: NULL answered with 0, false or NULL, and a message. */
static void test_null_accessors(void) {
    CHECK(amp_model_n_params(NULL) == 0 && strstr(amp_last_error(), "amp_model_n_params"));
    CHECK(amp_model_numel(NULL) == 0 && strstr(amp_last_error(), "amp_model_numel"));
    CHECK(amp_model_n_buffers(NULL) == 0 && strstr(amp_last_error(), "amp_model_n_buffers"));
    CHECK(!amp_model_param(NULL, 0) && strstr(amp_last_error(), "amp_model_param"));
    CHECK(!amp_model_param_name(NULL, 0) && strstr(amp_last_error(), "amp_model_param_name"));
    CHECK(!amp_model_buffer(NULL, 0) && !amp_model_buffer_name(NULL, 0));
    CHECK(!amp_model_is_training(NULL) && !amp_model_ctx(NULL));
    CHECK_FAILS(amp_model_train(NULL, false), AMP_ERR_INVALID_ARG, "amp_model_train");
    CHECK(amp_tensor_nbytes(NULL) == 0 && strstr(amp_last_error(), "amp_tensor_nbytes"));
    CHECK(!amp_set_grad_enabled(NULL, true) && strstr(amp_last_error(), "amp_set_grad_enabled"));
    CHECK(!strcmp(amp_ctx_backend_name(NULL), "none") && amp_ctx_device(NULL) == AMP_DEVICE_AUTO);
    size_t peak = 1;
    CHECK(amp_ctx_arena_bytes(NULL, &peak) == 0 && peak == 0);
    amp_tensor_zero_grad(NULL);
    amp_trace_enable(NULL, true);
    amp_ctx_memory_reset_peak(NULL);
    amp_ctx_reset_step(NULL);
    CHECK(amp_optimizer_lr(NULL) == 0.0f && amp_optimizer_step_count(NULL) == 0 &&
          !amp_optimizer_model(NULL));
}

static void test_graph_input_freed(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &ctx));
    if (!ctx) return;
    const int64_t shape[1] = {4};
    const float ones[4] = {1, 1, 1, 1};
    for (int round = 0; round < 2; round++) {
        amp_tensor *x = NULL, *w = NULL, *y = NULL, *loss = NULL, *g = NULL;
        CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, shape, ones, &x));
        CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, shape, ones, &w));
        CHECK_OK(amp_tensor_set_requires_grad(x, true));
        CHECK_OK(amp_mul(x, w, &y));
        CHECK_OK(amp_mean(y, &loss));
        if (round == 0) { /* w freed while mul's backward still needs it */
            amp_tensor_free(w);
            CHECK_FAILS(amp_backward(loss), AMP_ERR_STATE, "freed (amp_tensor_free) before backward");
            amp_ctx_reset_step(ctx);
        } else { /* the next step's graph is whole again */
            CHECK_OK(amp_backward(loss));
            float gx[4] = {0};
            CHECK_OK(amp_tensor_get_grad(x, &g));
            CHECK_OK(amp_tensor_to_host(g, gx, sizeof gx));
            CHECK(gx[0] == 0.25f && gx[3] == 0.25f);
            amp_ctx_reset_step(ctx);
            amp_tensor_free(w);
        }
        amp_tensor_free(x);
    }
    amp_ctx_free(ctx);
}

int main(void) {
    test_graph_input_freed();
    test_model_freed_first();
    test_param_freed();
    test_ctx_freed_first();
    test_ddp_model_freed();
    test_null_accessors();
    return test_summary(NAME);
}
