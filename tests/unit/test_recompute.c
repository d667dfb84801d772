/* Activation recomputation (amp_model_set_recompute, nn/recompute.c) is the same computation:
 *  - the GPT (3 blocks) and the Llama (2 layers), dropout 0.1 (the Llama's attention dropout),
 *    at O0, O1-bf16, O1-fp16 with a first step that overflows (the scale starts at 2^40: the
 *    step is skipped, the scale backs off) and O2-bf16: 5 AdamW steps with every block
 *    recomputed, and with selective recomputation (the norms' outputs written again), equal 5
 *    steps without, bit for bit, in every loss, every gradient of every
 *    step, every weight after them and the loss scaler's state; also with 2 micro-batches
 *    accumulated per step, and with a second backward through a retained graph;
 *  - the replay runs in the forward's dtype: autocast switched to f16 between the forward and
 *    the backward changes no gradient bit (a control: switching it before the forward does);
 *  - a hand-written model whose recomputed child holds a batch norm: its running statistics and
 *    count are updated once, as without recomputation, and the gradients are the same;
 *  - evaluation (no-grad) gives the same logits with and without;
 *  - the tape holds one node per block; each block keeps its output only, and its transient is
 *    the recomputation arena's (amp_model_recompute_memory, AMP_MEM_RECOMPUTE);
 *  - misuse is refused, naming the call and why: the root, a container, a pending graph, a bad
 *    mode, a forward that writes its input or a buffer, a forward that draws another amount of
 *    random numbers when run again, a parameter written between the forward and the backward.
 * On the CPU and, when one answers, on CUDA (cudacpu here). */
#include <string.h>

#include "amp/amp.h"
#include "amp/models/gpt.h"
#include "amp/models/llama.h"
#include "core/ctx.h"
#include "core/error.h"
#include "nn/autograd.h"
#include "nn/model_internal.h"
#include "test_devices.h"
#include "test_util.h"

#define NAME "test_recompute"
enum { B = 2, T = 16, V = 64, STEPS = 5, MAX_PARAMS = 64, MICRO = 2 };

static const amp_gpt_config GPT = {.n_layer = 3, .n_head = 2, .n_embd = 32, .block_size = 16,
                                   .vocab_size = V, .dropout = 0.1f};
static const amp_llama_config LLAMA = {.vocab_size = V, .hidden_size = 32,
                                       .intermediate_size = 48, .num_hidden_layers = 2,
                                       .num_attention_heads = 4, .num_key_value_heads = 2,
                                       .max_position_embeddings = 16, .rms_norm_eps = 1e-5f,
                                       .attention_dropout = 0.1f};

typedef struct level {
    const char *name;
    bool amp;
    amp_options o;
    bool overflow; /* the first step overflows */
} level;

static level levels[4];

static void levels_init(void) {
    levels[0] = (level){.name = "O0"};
    levels[1] = (level){.name = "O1-bf16", .amp = true,
                        .o = {.opt_level = AMP_O1, .half_type = AMP_HALF_BF16, .quiet = true}};
    levels[2] = (level){.name = "O1-fp16", .amp = true, .overflow = true,
                        .o = {.opt_level = AMP_O1, .half_type = AMP_HALF_F16, .quiet = true,
                              .init_scale = 0x1p40f, .backoff_factor = 0x1p-30f}};
    levels[3] = (level){.name = "O2-bf16", .amp = true,
                        .o = {.opt_level = AMP_O2, .half_type = AMP_HALF_BF16, .quiet = true}};
}

typedef enum model_kind { KIND_GPT, KIND_LLAMA } model_kind;

/* What a run gave, bit for bit: FNV-1a of each tensor's bytes. */
typedef struct trace {
    uint32_t loss[STEPS][MICRO];
    uint64_t grad[STEPS][MAX_PARAMS];
    uint64_t weight[MAX_PARAMS];
    int n_params;
    amp_scaler_state scaler;
} trace;

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t tensor_hash(const amp_tensor *t) {
    size_t n = amp_tensor_nbytes(t);
    void *host = malloc(n);
    uint64_t h = 0;
    if (host && amp_tensor_to_host(t, host, n) == AMP_OK) h = fnv(host, n, 0xcbf29ce484222325ull);
    free(host);
    return h;
}

static uint32_t scalar_bits(const amp_tensor *t) {
    float f = 0;
    CHECK_OK(amp_tensor_to_host_f32(t, &f, sizeof f));
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

typedef struct run {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_tensor *idx[MICRO], *tg[MICRO];
    model_kind kind;
} run;

static amp_status set_recompute(run *r, amp_recompute mode) {
    return r->kind == KIND_GPT ? amp_gpt_set_recompute(r->m, mode)
                               : amp_llama_set_recompute(r->m, mode);
}

static bool run_make(run *r, model_kind kind, const level *lv, amp_recompute mode,
                     amp_device dev) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = dev, .seed = 7}, &r->ctx));
    if (!r->ctx) return false;
    CHECK_OK(kind == KIND_GPT ? amp_gpt_create(r->ctx, &GPT, &r->m)
                              : amp_llama_create(r->ctx, &LLAMA, &r->m));
    if (!r->m) return false;
    CHECK_OK(amp_model_build(r->m));
    CHECK_OK(amp_lm_adamw_create(r->m, 3e-3f, 0.1f, &r->opt));
    if (!r->opt) return false;
    if (lv->amp) CHECK_OK(amp_initialize_ex(r->m, r->opt, &lv->o));
    CHECK_OK(set_recompute(r, mode));
    amp_recompute blk_mode = mode == AMP_RECOMPUTE_FULL ? mode : AMP_RECOMPUTE_NONE;
    CHECK(amp_model_get_recompute(amp_model_child(amp_model_child(amp_model_child(r->m, 0),
                                                                  kind == KIND_GPT ? 2 : 1),
                                                  0)) == blk_mode);
    uint32_t x = 12345;
    for (int k = 0; k < MICRO; k++) {
        int32_t ids[B * T], next[B * T];
        for (int i = 0; i < B * T; i++) {
            x = x * 1664525u + 1013904223u;
            ids[i] = (int32_t)((x >> 8) % V);
        }
        for (int i = 0; i < B * T; i++) next[i] = ids[(i + 1) % (B * T)];
        const int64_t shape[2] = {B, T};
        CHECK_OK(amp_tensor_from_host(r->ctx, AMP_I32, 2, shape, ids, &r->idx[k]));
        CHECK_OK(amp_tensor_from_host(r->ctx, AMP_I32, 2, shape, next, &r->tg[k]));
    }
    return r->idx[MICRO - 1] && r->tg[MICRO - 1];
}

static void run_free(run *r) {
    for (int k = 0; k < MICRO; k++) {
        amp_tensor_free(r->idx[k]);
        amp_tensor_free(r->tg[k]);
    }
    amp_optimizer_free(r->opt);
    amp_model_free(r->m);
    amp_ctx_free(r->ctx);
}

static amp_status loss_of(run *r, int k, amp_tensor **loss) {
    return r->kind == KIND_GPT ? amp_gpt_loss(r->m, r->idx[k], r->tg[k], loss)
                               : amp_llama_loss(r->m, r->idx[k], r->tg[k], loss);
}

/* STEPS steps of `micro` micro-batches each; with `twice`, each micro-batch's loss is
 * back-propagated through a retained graph and then a second time. */
static void run_steps(run *r, const level *lv, int micro, bool twice, trace *tr) {
    memset(tr, 0, sizeof *tr);
    tr->n_params = amp_model_n_params(r->m);
    CHECK(tr->n_params <= MAX_PARAMS);
    for (int s = 0; s < STEPS; s++) {
        for (int k = 0; k < micro; k++) {
            amp_tensor *loss = NULL;
            CHECK_OK(loss_of(r, k, &loss));
            if (!loss) return;
            tr->loss[s][k] = scalar_bits(loss);
            if (twice)
                CHECK_OK(amp_backward_with(loss, &(amp_backward_opts){.retain_graph = true}));
            CHECK_OK(amp_backward(loss));
        }
        for (int i = 0; i < tr->n_params && i < MAX_PARAMS; i++) {
            amp_tensor *g = NULL;
            if (amp_tensor_get_grad(amp_model_param(r->m, i), &g) == AMP_OK)
                tr->grad[s][i] = tensor_hash(g);
        }
        bool stepped = true;
        if (lv->amp) CHECK_OK(amp_step(r->opt, &stepped));
        else CHECK_OK(amp_optimizer_step(r->opt));
        CHECK_OK(amp_zero_grad(r->opt));
    }
    for (int i = 0; i < tr->n_params && i < MAX_PARAMS; i++)
        tr->weight[i] = tensor_hash(amp_model_param(r->m, i));
    if (lv->amp) CHECK_OK(amp_scaler_get_state(r->opt, 0, &tr->scaler));
}

/* Both traces, compared; the first difference named. */
static void traces_equal(const char *label, const run *r, const trace *a, const trace *b,
                         int micro) {
    bool same = a->n_params == b->n_params;
    for (int s = 0; s < STEPS && same; s++) {
        for (int k = 0; k < micro && same; k++) {
            same = a->loss[s][k] == b->loss[s][k];
            CHECK_MSG(same, "%s: step %d micro-batch %d: loss bits %08x vs %08x", label, s, k,
                      a->loss[s][k], b->loss[s][k]);
        }
        for (int i = 0; i < a->n_params && same; i++) {
            same = a->grad[s][i] == b->grad[s][i];
            CHECK_MSG(same, "%s: step %d: the gradient of %s differs", label, s,
                      amp_model_param_name(r->m, i));
        }
    }
    for (int i = 0; i < a->n_params && same; i++) {
        same = a->weight[i] == b->weight[i];
        CHECK_MSG(same, "%s: %s differs after the steps", label, amp_model_param_name(r->m, i));
    }
    CHECK_MSG(memcmp(&a->scaler, &b->scaler, sizeof a->scaler) == 0,
              "%s: scaler scale %g/%g skipped %lld/%lld", label, (double)a->scaler.scale,
              (double)b->scaler.scale, (long long)a->scaler.skipped_steps,
              (long long)b->scaler.skipped_steps);
    if (same) printf("%s: %d steps, the same bits\n", label, STEPS);
}

static amp_device g_dev;

static void check_identity(model_kind kind, amp_recompute mode, const level *lv, int micro,
                           bool twice) {
    char label[128];
    snprintf(label, sizeof label, "%s %s, %s%s%s", kind == KIND_GPT ? "GPT" : "Llama", lv->name,
             mode == AMP_RECOMPUTE_FULL ? "full" : "selective",
             micro > 1 ? ", 2 micro-batches" : "", twice ? ", retained graph" : "");
    static trace plain, full;
    run a, b;
    if (run_make(&a, kind, lv, AMP_RECOMPUTE_NONE, g_dev)) run_steps(&a, lv, micro, twice, &plain);
    if (run_make(&b, kind, lv, mode, g_dev)) run_steps(&b, lv, micro, twice, &full);
    if (a.m && b.m) traces_equal(label, &a, &plain, &full, micro);
    if (lv->overflow) /* the premise: a step skipped, the others taken */
        CHECK_MSG(full.scaler.skipped_steps >= 1 && full.scaler.skipped_steps < STEPS,
                  "%s: %lld of %d steps skipped", label, (long long)full.scaler.skipped_steps,
                  STEPS);
    run_free(&a);
    run_free(&b);
}

/* The gradients of one forward and backward at O1-bf16, with autocast's half type switched to
 * f16 after the forward (after) or before it (before: the control). */
static void grads_with_switch(amp_recompute mode, bool before, bool after, trace *tr) {
    run r;
    memset(tr, 0, sizeof *tr);
    if (!run_make(&r, KIND_GPT, &levels[1], mode, g_dev)) return;
    amp_ctx *ctx = r.ctx;
    if (before) ctx->autocast.half = AMP_F16;
    amp_tensor *loss = NULL;
    CHECK_OK(loss_of(&r, 0, &loss));
    ctx->autocast.half = after || before ? AMP_F16 : AMP_BF16;
    if (loss) CHECK_OK(amp_backward(loss));
    ctx->autocast.half = AMP_BF16;
    tr->n_params = amp_model_n_params(r.m);
    for (int i = 0; i < tr->n_params && i < MAX_PARAMS; i++) {
        amp_tensor *g = NULL;
        if (amp_tensor_get_grad(amp_model_param(r.m, i), &g) == AMP_OK)
            tr->grad[0][i] = tensor_hash(g);
    }
    run_free(&r);
}

static void check_autocast_replayed(void) {
    trace plain, switched, control;
    grads_with_switch(AMP_RECOMPUTE_NONE, false, false, &plain);
    grads_with_switch(AMP_RECOMPUTE_FULL, false, true, &switched);
    grads_with_switch(AMP_RECOMPUTE_FULL, true, true, &control);
    CHECK(memcmp(plain.grad[0], switched.grad[0], sizeof plain.grad[0]) == 0);
    CHECK_MSG(memcmp(plain.grad[0], control.grad[0], sizeof plain.grad[0]) != 0,
              "f16 instead of bf16 in the forward changed no gradient: the check cannot fail");
}

/* The recomputation is real: after a forward the tape holds one node per block and none of
 * the blocks' own ops (fewer nodes than without), and the step's data arena holds less. */
static void check_tape(model_kind kind) {
    int nodes[2] = {0, 0}, children[2] = {0, 0};
    size_t peak[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        run r;
        if (run_make(&r, kind, &levels[1], k ? AMP_RECOMPUTE_FULL : AMP_RECOMPUTE_NONE, g_dev)) {
            amp_tensor *loss = NULL;
            CHECK_OK(loss_of(&r, 0, &loss));
            nodes[k] = r.ctx->n_tape;
            for (int i = 0; i < r.ctx->n_tape; i++)
                children[k] += strncmp(r.ctx->tape[i]->op, "recomputed child", 16) == 0;
            peak[k] = r.ctx->data_arena.step_peak;
            if (loss) CHECK_OK(amp_backward(loss));
            /* What the ledger says of it: each block kept its f32 output [B, T, C] and ran in
             * the recomputation arena, which holds more than that at its peak. */
            amp_model *blk = amp_model_child(amp_model_child(amp_model_child(r.m, 0),
                                                             kind == KIND_GPT ? 2 : 1), 0);
            amp_recompute_memory rm = {1, 1};
            CHECK_OK(amp_model_recompute_memory(blk, &rm));
            size_t out_bytes = (size_t)B * T * 32 * sizeof(float);
            amp_mem_usage at_peak;
            CHECK_OK(amp_ctx_memory_usage(r.ctx, NULL, &at_peak));
            if (k) {
                CHECK_MSG(rm.kept_bytes == out_bytes && rm.transient_bytes > out_bytes,
                          "kept %zu (want %zu), transient %zu", rm.kept_bytes, out_bytes,
                          rm.transient_bytes);
                CHECK(at_peak.bytes[AMP_MEM_RECOMPUTE] >= rm.transient_bytes);
            } else {
                CHECK(rm.kept_bytes == 0 && rm.transient_bytes == 0);
                CHECK(at_peak.bytes[AMP_MEM_RECOMPUTE] == 0);
            }
        }
        run_free(&r);
    }
    int layers = kind == KIND_GPT ? GPT.n_layer : (int)LLAMA.num_hidden_layers;
    CHECK_MSG(children[0] == 0 && children[1] == layers, "%d and %d recomputed children on the "
              "tape, want 0 and %d", children[0], children[1], layers);
    CHECK_MSG(nodes[1] < nodes[0] && peak[1] < peak[0], "tape %d vs %d nodes, forward data %zu vs "
              "%zu bytes", nodes[1], nodes[0], peak[1], peak[0]);
    printf("%s: forward tape %d -> %d nodes, data %zu -> %zu bytes\n",
           kind == KIND_GPT ? "GPT" : "Llama", nodes[0], nodes[1], peak[0], peak[1]);
}

/* Selective recomputation keeps less (the norms' outputs go at once), with the same tape. */
static void check_selective_memory(model_kind kind) {
    int nodes[2] = {0, 0};
    size_t peak[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        run r;
        if (run_make(&r, kind, &levels[1], k ? AMP_RECOMPUTE_SELECTIVE : AMP_RECOMPUTE_NONE,
                     g_dev)) {
            amp_tensor *loss = NULL;
            CHECK_OK(loss_of(&r, 0, &loss));
            nodes[k] = r.ctx->n_tape;
            peak[k] = r.ctx->data_arena.step_peak;
            if (loss) CHECK_OK(amp_backward(loss));
        }
        run_free(&r);
    }
    CHECK_MSG(nodes[1] == nodes[0] && peak[1] < peak[0], "selective: tape %d vs %d nodes, "
              "forward data %zu vs %zu bytes", nodes[1], nodes[0], peak[1], peak[0]);
    printf("%s selective: forward data %zu -> %zu bytes\n", kind == KIND_GPT ? "GPT" : "Llama",
           peak[0], peak[1]);
}

static void check_eval(void) {
    run a, b;
    uint64_t h[2] = {0, 1};
    for (int k = 0; k < 2; k++) {
        run *r = k ? &b : &a;
        if (!run_make(r, KIND_GPT, &levels[1], k ? AMP_RECOMPUTE_FULL : AMP_RECOMPUTE_NONE, g_dev))
            continue;
        CHECK_OK(amp_model_train(r->m, false));
        bool prev = amp_set_grad_enabled(r->ctx, false);
        amp_tensor *logits = NULL;
        CHECK_OK(amp_model_forward(r->m, r->idx[0], &logits));
        if (logits) h[k] = tensor_hash(logits);
        CHECK(r->ctx->n_tape == 0);
        amp_set_grad_enabled(r->ctx, prev);
    }
    CHECK_MSG(h[0] == h[1], "evaluation logits differ with recomputation set");
    run_free(&a);
    run_free(&b);
}

/* ---- a hand-written model: root = child(conv, batch norm, relu) then a mean ---- */

typedef struct bn_child {
    amp_model *conv, *bn;
} bn_child;

static amp_status bn_child_forward(amp_model *self, amp_tensor *const *in, int n, amp_tensor **y) {
    (void)n;
    bn_child *c = amp_model_user(self);
    amp_tensor *h;
    AMP_TRY(amp_model_forward(c->conv, in[0], &h));
    AMP_TRY(amp_model_forward(c->bn, h, &h));
    AMP_TRY(amp_dropout(h, 0.2f, amp_model_is_training(self), &h));
    return amp_relu(h, y);
}

static amp_status root_forward(amp_model *self, amp_tensor *const *in, int n, amp_tensor **y) {
    (void)n;
    amp_tensor *h;
    AMP_TRY(amp_model_forward(amp_model_child(self, 0), in[0], &h));
    return amp_mean(h, y);
}

static void check_batchnorm_once(void) {
    uint64_t h[2][8] = {{0}};
    int64_t tracked[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        amp_ctx *ctx = NULL;
        CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = g_dev, .seed = 3}, &ctx));
        bn_child *c = calloc(1, sizeof *c);
        amp_model *root = NULL, *child = NULL;
        CHECK_OK(amp_model_create(ctx, root_forward, NULL, NULL, &root));
        CHECK_OK(amp_model_create(ctx, bn_child_forward, c, free, &child));
        CHECK_OK(amp_module_conv2d(ctx, 2, 3, 3, 1, 1, true, &c->conv));
        CHECK_OK(amp_module_batchnorm2d(ctx, 3, &c->bn));
        CHECK_OK(amp_model_add_child(child, "conv", c->conv));
        CHECK_OK(amp_model_add_child(child, "bn", c->bn));
        CHECK_OK(amp_model_add_child(root, "block", child));
        CHECK_OK(amp_model_build(root));
        if (k) CHECK_OK(amp_model_set_recompute(child, AMP_RECOMPUTE_FULL));
        float x[4 * 2 * 5 * 5];
        for (int i = 0; i < 200; i++) x[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
        amp_tensor *xt = NULL, *loss = NULL;
        CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, (const int64_t[]){4, 2, 5, 5}, x, &xt));
        for (int step = 0; step < 2; step++) {
            CHECK_OK(amp_model_forward(root, xt, &loss));
            if (loss) CHECK_OK(amp_backward(loss));
        }
        for (int i = 0; i < amp_model_n_params(root); i++) {
            amp_tensor *g = NULL;
            if (amp_tensor_get_grad(amp_model_param(root, i), &g) == AMP_OK)
                h[k][i] = tensor_hash(g);
        }
        for (int i = 0; i < amp_model_n_buffers(root); i++)
            h[k][4 + i] = tensor_hash(amp_model_buffer(root, i));
        tracked[k] = c->bn->cfg.num_batches_tracked;
        amp_tensor_free(xt);
        amp_model_free(root);
        amp_ctx_free(ctx);
    }
    CHECK_MSG(memcmp(h[0], h[1], sizeof h[0]) == 0,
              "batch norm child: gradients or running statistics differ with recomputation");
    CHECK_MSG(tracked[0] == 2 && tracked[1] == 2, "num_batches_tracked %lld and %lld, want 2",
              (long long)tracked[0], (long long)tracked[1]);
}

/* ---- misuse ---- */

typedef struct bad_child {
    int mode; /* 0 writes its input, 1 writes its buffer, 2 draws only on its first run */
    int runs;
} bad_child;

static amp_status bad_forward(amp_model *self, amp_tensor *const *in, int n, amp_tensor **y) {
    (void)n;
    bad_child *b = amp_model_user(self);
    float v[4] = {1, 2, 3, 4};
    if (b->mode == 0) AMP_TRY(amp_tensor_copy_from_host(in[0], v, sizeof v));
    if (b->mode == 1) AMP_TRY(amp_tensor_copy_from_host(amp_model_buffer(self, 0), v, sizeof v));
    amp_tensor *h;
    AMP_TRY(amp_mul(in[0], amp_model_param(self, 0), &h));
    if (b->mode == 2 && b->runs++ == 0) AMP_TRY(amp_dropout(h, 0.5f, true, &h));
    return amp_mean(h, y);
}

static amp_status bad_root_forward(amp_model *self, amp_tensor *const *in, int n,
                                   amp_tensor **y) {
    (void)n;
    return amp_model_forward(amp_model_child(self, 0), in[0], y);
}

static void check_misuse_case(int mode, const char *needle, bool at_backward) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = g_dev, .seed = 1}, &ctx));
    bad_child *b = calloc(1, sizeof *b);
    b->mode = mode;
    amp_model *root = NULL, *child = NULL;
    CHECK_OK(amp_model_create(ctx, bad_root_forward, NULL, NULL, &root));
    CHECK_OK(amp_model_create(ctx, bad_forward, b, free, &child));
    CHECK_OK(amp_model_register_param(child, "w", 1, (const int64_t[]){4}, AMP_INIT_ONE_VALUES,
                                      NULL));
    CHECK_OK(amp_model_register_buffer(child, "state", 1, (const int64_t[]){4},
                                       AMP_INIT_ZERO_VALUES, NULL));
    CHECK_OK(amp_model_add_child(root, "bad", child));
    CHECK_OK(amp_model_build(root));
    CHECK_OK(amp_model_set_recompute(child, AMP_RECOMPUTE_FULL));
    amp_tensor *x = NULL, *y = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){4}, &x));
    CHECK_OK(amp_tensor_set_requires_grad(x, true));
    if (at_backward) {
        CHECK_OK(amp_model_forward(root, x, &y));
        if (mode == 3) { /* a parameter written between forward and backward */
            float v[4] = {5, 6, 7, 8};
            CHECK_OK(amp_tensor_copy_from_host(amp_model_param(child, 0), v, sizeof v));
        }
        if (y) CHECK_FAILS(amp_backward(y), AMP_ERR_STATE, needle);
    } else {
        CHECK_FAILS(amp_model_forward(root, x, &y), AMP_ERR_STATE, needle);
    }
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x);
    amp_model_free(root);
    amp_ctx_free(ctx);
}

static void check_misuse(void) {
    run r;
    if (run_make(&r, KIND_GPT, &levels[0], AMP_RECOMPUTE_NONE, g_dev)) {
        CHECK_FAILS(amp_model_set_recompute(r.m, AMP_RECOMPUTE_FULL), AMP_ERR_INVALID_ARG,
                    "root model");
        amp_model *tr = amp_model_child(r.m, 0);
        CHECK_FAILS(amp_model_set_recompute(tr, AMP_RECOMPUTE_FULL), AMP_ERR_INVALID_ARG,
                    "no forward function");
        amp_model *blk = amp_model_child(amp_model_child(tr, 2), 0);
        CHECK_FAILS(amp_model_set_recompute(blk, (amp_recompute)7), AMP_ERR_INVALID_ARG,
                    "is not an amp_recompute");
        CHECK_FAILS(amp_model_set_recompute(blk, AMP_RECOMPUTE_SELECTIVE), AMP_ERR_INVALID_ARG,
                    "a choice of ops");
        /* recompute_input on a tensor no op can write again: a leaf */
        amp_tensor *x = NULL, *y = NULL, *w = amp_model_param(blk, 2);
        CHECK_OK(amp_tensor_create(r.ctx, AMP_F32, 2, (const int64_t[]){3, 32}, &x));
        amp_linear_opts lo = {.recompute_input = true};
        CHECK_FAILS(amp_linear_ex(x, w, NULL, &lo, &y), AMP_ERR_INVALID_ARG,
                    "x is not the output of an op that can write it again");
        lo.activation = (amp_linear_act)9;
        CHECK_FAILS(amp_linear_ex(x, w, NULL, &lo, &y), AMP_ERR_INVALID_ARG, "opts.activation");
        amp_tensor_free(x);
        amp_tensor *loss = NULL;
        CHECK_OK(loss_of(&r, 0, &loss));
        CHECK_FAILS(amp_gpt_set_recompute(r.m, AMP_RECOMPUTE_FULL), AMP_ERR_STATE,
                    "a graph is pending");
        CHECK(amp_model_get_recompute(blk) == AMP_RECOMPUTE_NONE);
        CHECK_FAILS(amp_gpt_set_recompute(NULL, AMP_RECOMPUTE_FULL), AMP_ERR_INVALID_ARG,
                    "amp_gpt_set_recompute");
    }
    run_free(&r);
    check_misuse_case(0, "wrote its input 0 in place", false);
    check_misuse_case(1, "wrote its buffer 'bad.state' in place", false);
    check_misuse_case(2, "drew 0 random numbers where its forward drew", true);
    check_misuse_case(3, "parameter 0 of the child recomputed child 'bad'", true);
}

static void body(amp_device dev) {
    g_dev = dev;
    const amp_recompute modes[2] = {AMP_RECOMPUTE_FULL, AMP_RECOMPUTE_SELECTIVE};
    for (int m = 0; m < 2; m++) {
        for (int k = 0; k < 2; k++)
            for (int l = 0; l < 4; l++) check_identity((model_kind)k, modes[m], &levels[l], 1, false);
        check_identity(KIND_GPT, modes[m], &levels[1], MICRO, false);
        check_identity(KIND_LLAMA, modes[m], &levels[2], MICRO, false);
        check_identity(KIND_GPT, modes[m], &levels[1], 1, true);
    }
    check_selective_memory(KIND_GPT);
    check_selective_memory(KIND_LLAMA);
    check_tape(KIND_GPT);
    check_tape(KIND_LLAMA);
    check_autocast_replayed();
    check_eval();
    check_batchnorm_once();
    check_misuse();
}

int main(void) {
    levels_init();
    test_on_each_device(body);
    return test_summary(NAME);
}
