/* The dtypes of every tensor under each opt level, checked against Apex's documented semantics.
 *
 * For each row of an expectation table (O0..O3 and overrides, f16 and bf16) and each preset model
 * with SGD (momentum 0.9) and Adam, one training step runs (forward of a batch of 4, cross-
 * entropy, amp_backward, amp_step) with ctx->trace recording every op's input and output dtypes.
 * The table is written from Apex (apex/amp/frontend.py O0..O3, _initialize.py, the O1 lists in
 * lists/torch_overrides.py and functional_overrides.py), not from libamp's code:
 *  - cast_model_type half (O2, O3) converts every parameter and buffer to half, except batch
 *    norm's (weight, bias, running statistics) under keep_batchnorm_fp32 (Apex convert_network);
 *    the input is cast to half on entry and the model's output to f32 (the default
 *    cast_model_outputs of _initialize's output_caster);
 *  - O1 leaves the weights f32 and casts the inputs of linear and conv2d to half (FP16_FUNCS);
 *    batch norm (which "handles fp16 in/out with fp32 weights", functional_overrides.py), relu
 *    and max-pool are on no list, so they run in their input's dtype; cross_entropy is an
 *    FP32_FUNC: the loss is f32. An O1 model's output is not cast (no output caster) unless
 *    cast_model_outputs is given (_initialize's elif branch);
 *  - gradients have their parameter's dtype; f32 master weights exist only with master_weights
 *    (O2); the loss is f32 at every level.
 * The op sequence of each preset (without casts) is written here too, so that a missing layer
 * cannot make a check pass vacuously. Then: O1 casts each weight once per step (torch autocast's
 * weight cache), and O2's masters start at the f32 weights and round onto the half weights. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/ctx.h"
#include "core/half.h"
#include "optim/optimizer_internal.h"
#include "test_util.h"
#include "core/tensor_internal.h"

#define F32 AMP_F32
#define F16 AMP_F16
#define BF16 AMP_BF16
#define BATCH 4
#define MAX_TRACE 64
#define MAX_TRIES 8 /* a dynamic scale of 65536 may overflow the first steps (Apex logs it) */

/* ---- the trace ---- */

typedef struct traced_op {
    const char *op;
    int n_in;
    const amp_tensor *in[3];
    amp_dtype in_dt[3];
    const amp_tensor *out;
    amp_dtype out_dt;
} traced_op;

typedef struct trace_log {
    traced_op ops[MAX_TRACE];
    int n;
    bool overflow;
} trace_log;

static void trace_record(void *user, const char *op, const amp_tensor *const *in, int n_in,
                         const amp_tensor *out) {
    trace_log *log = user;
    if (log->n == MAX_TRACE) {
        log->overflow = true;
        return;
    }
    traced_op *t = &log->ops[log->n++];
    *t = (traced_op){.op = op, .n_in = n_in > 3 ? 3 : n_in, .out = out, .out_dt = out->dtype};
    for (int i = 0; i < t->n_in; i++) {
        t->in[i] = in[i];
        t->in_dt[i] = in[i] ? in[i]->dtype : AMP_I32;
    }
}

/* ---- the presets, as written in nn/presets.c's comments (PyTorch module names) ---- */

#define MAX_PARAMS 10
#define MAX_OPS 12

typedef struct preset {
    const char *name;
    amp_status (*make)(amp_ctx *, amp_model **);
    int n_params;
    const char *params[MAX_PARAMS];
    bool is_bn[MAX_PARAMS];     /* batch-norm weight or bias */
    bool is_weight[MAX_PARAMS]; /* conv/linear weight: what O1 casts per op */
    int n_buffers;
    const char *buffers[4];
    const char *ops[MAX_OPS]; /* the forward and loss, casts left out */
    int n_ops;
} preset;

static const preset g_convnet = {
    .name = "convnet",
    .make = amp_model_convnet_mnist,
    .n_params = 10,
    .params = {"layer1.0.weight", "layer1.0.bias", "layer1.1.weight", "layer1.1.bias",
               "layer2.0.weight", "layer2.0.bias", "layer2.1.weight", "layer2.1.bias", "fc.weight",
               "fc.bias"},
    .is_bn = {false, false, true, true, false, false, true, true, false, false},
    .is_weight = {true, false, false, false, true, false, false, false, true, false},
    .n_buffers = 4,
    .buffers = {"layer1.1.running_mean", "layer1.1.running_var", "layer2.1.running_mean",
                "layer2.1.running_var"},
    /* A batch norm followed by a ReLU runs as one fused op (nn/sequential.c). */
    .ops = {"conv2d", "batchnorm2d_relu", "maxpool2d", "conv2d", "batchnorm2d_relu", "maxpool2d",
            "reshape", "linear", "cross_entropy"},
    .n_ops = 9,
};

static const preset g_mlp = {
    .name = "mlp",
    .make = amp_model_mlp_mnist,
    .n_params = 6,
    .params = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"},
    .is_weight = {true, false, true, false, true, false},
    /* A linear layer followed by a ReLU runs as one fused op (nn/sequential.c). */
    .ops = {"reshape", "linear_relu", "linear_relu", "linear", "cross_entropy"},
    .n_ops = 5,
};

/* ---- the expectation table ---- */

typedef struct expect {
    amp_dtype weight;  /* conv/linear weights and biases */
    amp_dtype bn;      /* batch-norm weight, bias, running_mean, running_var */
    amp_dtype compute; /* output of conv/linear/batchnorm/relu/maxpool */
    amp_dtype logits;  /* what amp_model_forward returns */
    bool io_cast;      /* the input cast to half on entry (cast_model_type half) */
    bool per_op_cast;  /* O1: GEMM/conv inputs cast by autocast */
    bool masters;
    bool dynamic; /* loss scaler */
    float scale;
    bool check_overflow;
} expect;

typedef struct row {
    const char *name;
    amp_options opts;
    expect e;
} row;

#define DYN AMP_LOSS_SCALE_DYNAMIC
/* f16 scaling follows the level (Apex); bf16 defaults to a static scale of 1 without checks
 * (include/amp/mixed_precision.h), like torch.autocast bf16 which needs no scaler. A static
 * scale checks for overflow with f16 (amp/initialize.c: libamp's choice; Apex's static scaler
 * checks nothing) and not with bf16 (Apex). */
static const row g_rows[] = {
    {"O0", {.opt_level = AMP_O0}, {F32, F32, F32, F32, false, false, false, false, 1.0f, false}},
    {"O0 loss_scale=dynamic",
     {.opt_level = AMP_O0, .loss_scale = DYN},
     {F32, F32, F32, F32, false, false, false, true, 65536.0f, true}},
    {"O1 f16",
     {.opt_level = AMP_O1, .half_type = AMP_HALF_F16},
     {F32, F32, F16, F16, false, true, false, true, 65536.0f, true}},
    {"O1 bf16",
     {.opt_level = AMP_O1, .half_type = AMP_HALF_BF16},
     {F32, F32, BF16, BF16, false, true, false, false, 1.0f, false}},
    {"O1 f16 loss_scale=128",
     {.opt_level = AMP_O1, .loss_scale = 128.0f},
     {F32, F32, F16, F16, false, true, false, false, 128.0f, true}},
    {"O1 bf16 loss_scale=128",
     {.opt_level = AMP_O1, .half_type = AMP_HALF_BF16, .loss_scale = 128.0f},
     {F32, F32, BF16, BF16, false, true, false, false, 128.0f, false}},
    /* Apex's _initialize casts the output of a model it does not cast too (its elif branch). */
    {"O1 f16 cast_model_outputs=f32",
     {.opt_level = AMP_O1, .cast_model_outputs = AMP_CAST_F32},
     {F32, F32, F16, F32, false, true, false, true, 65536.0f, true}},
    {"O2 f16",
     {.opt_level = AMP_O2},
     {F16, F32, F16, F32, true, false, true, true, 65536.0f, true}},
    {"O2 bf16",
     {.opt_level = AMP_O2, .half_type = AMP_HALF_BF16},
     {BF16, F32, BF16, F32, true, false, true, false, 1.0f, false}},
    {"O2 f16 keep_batchnorm_fp32=False",
     {.opt_level = AMP_O2, .keep_batchnorm_fp32 = AMP_OPT_FALSE},
     {F16, F16, F16, F32, true, false, true, true, 65536.0f, true}},
    {"O2 bf16 keep_batchnorm_fp32=False",
     {.opt_level = AMP_O2, .half_type = AMP_HALF_BF16, .keep_batchnorm_fp32 = AMP_OPT_FALSE},
     {BF16, BF16, BF16, F32, true, false, true, false, 1.0f, false}},
    {"O2 f16 master_weights=False",
     {.opt_level = AMP_O2, .master_weights = AMP_OPT_FALSE},
     {F16, F32, F16, F32, true, false, false, true, 65536.0f, true}},
    {"O2 bf16 master_weights=False",
     {.opt_level = AMP_O2, .half_type = AMP_HALF_BF16, .master_weights = AMP_OPT_FALSE},
     {BF16, F32, BF16, F32, true, false, false, false, 1.0f, false}},
    {"O3 f16", {.opt_level = AMP_O3}, {F16, F16, F16, F32, true, false, false, false, 1.0f, false}},
    {"O3 bf16",
     {.opt_level = AMP_O3, .half_type = AMP_HALF_BF16},
     {BF16, BF16, BF16, F32, true, false, false, false, 1.0f, false}},
    {"O3 f16 keep_batchnorm_fp32=True",
     {.opt_level = AMP_O3, .keep_batchnorm_fp32 = AMP_OPT_TRUE},
     {F16, F32, F16, F32, true, false, false, false, 1.0f, false}},
    {"O3 bf16 keep_batchnorm_fp32=True",
     {.opt_level = AMP_O3, .half_type = AMP_HALF_BF16, .keep_batchnorm_fp32 = AMP_OPT_TRUE},
     {BF16, F32, BF16, F32, true, false, false, false, 1.0f, false}},
};
#define N_ROWS ((int)(sizeof g_rows / sizeof g_rows[0]))

/* ---- one run ---- */

static uint32_t g_lcg = 12345u;
static float rand_unit(void) {
    g_lcg = g_lcg * 1664525u + 1013904223u;
    return (float)(g_lcg >> 8) / 16777216.0f;
}

static void make_batch(amp_ctx *ctx, amp_tensor **x, amp_tensor **y) {
    static float xs[BATCH * 28 * 28];
    int32_t ys[BATCH];
    for (int i = 0; i < BATCH * 28 * 28; i++)
        xs[i] = rand_unit();
    for (int i = 0; i < BATCH; i++)
        ys[i] = (int32_t)(rand_unit() * 10.0f) % 10;
    *x = *y = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, F32, 4, (int64_t[]){BATCH, 1, 28, 28}, xs, x));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (int64_t[]){BATCH}, ys, y));
}

static bool is_param(const amp_model *m, const amp_tensor *t, int *index) {
    for (int i = 0; i < amp_model_n_params(m); i++)
        if (amp_model_param(m, i) == t) {
            if (index) *index = i;
            return true;
        }
    return false;
}

static bool is_compute_op(const char *op) {
    return !strcmp(op, "conv2d") || !strcmp(op, "linear") || !strcmp(op, "linear_relu") ||
           !strcmp(op, "batchnorm2d") || !strcmp(op, "batchnorm2d_relu") || !strcmp(op, "relu") ||
           !strcmp(op, "maxpool2d");
}

/* Parameters and buffers: names in registration order and the table's dtypes. */
static void check_storage(const char *cfg, const preset *p, const amp_model *m, const expect *e) {
    CHECK_MSG(amp_model_n_params(m) == p->n_params, "%s: %d params", cfg, amp_model_n_params(m));
    for (int i = 0; i < p->n_params && i < amp_model_n_params(m); i++) {
        const amp_tensor *t = amp_model_param(m, i);
        amp_dtype want = p->is_bn[i] ? e->bn : e->weight;
        CHECK_MSG(!strcmp(amp_model_param_name(m, i), p->params[i]), "%s: param %d is %s", cfg, i,
                  amp_model_param_name(m, i));
        CHECK_MSG(t->dtype == want, "%s: %s is %s, want %s", cfg, p->params[i],
                  amp_dtype_name(t->dtype), amp_dtype_name(want));
    }
    CHECK_MSG(amp_model_n_buffers(m) == p->n_buffers, "%s: %d buffers", cfg,
              amp_model_n_buffers(m));
    for (int i = 0; i < p->n_buffers && i < amp_model_n_buffers(m); i++) {
        const amp_tensor *t = amp_model_buffer(m, i);
        CHECK_MSG(!strcmp(amp_model_buffer_name(m, i), p->buffers[i]), "%s: buffer %d is %s", cfg,
                  i, amp_model_buffer_name(m, i));
        CHECK_MSG(t->dtype == e->bn, "%s: %s is %s, want %s", cfg, p->buffers[i],
                  amp_dtype_name(t->dtype), amp_dtype_name(e->bn));
    }
}

/* Every op of the step: the sequence, compute dtypes, casts at the boundary and per op. */
static void check_trace(const char *cfg, const preset *p, const amp_model *m, const trace_log *log,
                        const amp_tensor *x, const amp_tensor *logits, const amp_tensor *loss,
                        const expect *e) {
    CHECK_MSG(!log->overflow, "%s: more than %d ops", cfg, MAX_TRACE);
    amp_dtype half = e->compute;
    int k = 0, n_param_casts = 0, n_other_casts = 0;
    bool weight_cast[MAX_PARAMS] = {false};
    for (int i = 0; i < log->n; i++) {
        const traced_op *t = &log->ops[i];
        if (!strcmp(t->op, "cast")) {
            int pi;
            if (is_param(m, t->in[0], &pi)) {
                n_param_casts++;
                /* O1 casts a weight once per step however often it is used (torch autocast's
                 * weight cache); here each is used once, so a second cast is a second copy. */
                if (e->per_op_cast) {
                    CHECK_MSG(pi < MAX_PARAMS && p->is_weight[pi] && !weight_cast[pi],
                              "%s: cast of %s (weights only, once)", cfg,
                              amp_model_param_name(m, pi));
                    if (pi < MAX_PARAMS) weight_cast[pi] = true;
                    CHECK_MSG(t->out_dt == half, "%s: %s cast to %s", cfg,
                              amp_model_param_name(m, pi), amp_dtype_name(t->out_dt));
                }
            } else {
                n_other_casts++;
            }
            continue;
        }
        CHECK_MSG(k < p->n_ops && !strcmp(t->op, p->ops[k]), "%s: op %d is %s, want %s", cfg, k,
                  t->op, k < p->n_ops ? p->ops[k] : "(end)");
        if (k >= p->n_ops) break;
        k++;
        if (is_compute_op(t->op)) {
            CHECK_MSG(t->out_dt == half, "%s: %s output %s, want %s", cfg, t->op,
                      amp_dtype_name(t->out_dt), amp_dtype_name(half));
            CHECK_MSG(t->in_dt[0] == half, "%s: %s input %s, want %s", cfg, t->op,
                      amp_dtype_name(t->in_dt[0]), amp_dtype_name(half));
        }
        if (!strcmp(t->op, "conv2d") || !strcmp(t->op, "linear") || !strcmp(t->op, "linear_relu"))
            CHECK_MSG(t->in_dt[1] == half, "%s: %s weight operand %s, want %s", cfg, t->op,
                      amp_dtype_name(t->in_dt[1]), amp_dtype_name(half));
        if (!strcmp(t->op, "batchnorm2d") || !strcmp(t->op, "batchnorm2d_relu") ||
            !strcmp(t->op, "relu") ||
            !strcmp(t->op, "maxpool2d") || !strcmp(t->op, "reshape"))
            CHECK_MSG(t->out_dt == t->in_dt[0], "%s: %s %s -> %s, want its input's dtype", cfg,
                      t->op, amp_dtype_name(t->in_dt[0]), amp_dtype_name(t->out_dt));
        if (!strcmp(t->op, "cross_entropy")) {
            CHECK_MSG(t->out_dt == F32, "%s: loss %s", cfg, amp_dtype_name(t->out_dt));
            CHECK(t->out == loss);
            CHECK(t->in[0] == logits);
        }
    }
    CHECK_MSG(k == p->n_ops, "%s: %d of %d ops ran", cfg, k, p->n_ops);
    CHECK_MSG(logits->dtype == e->logits, "%s: logits %s, want %s", cfg,
              amp_dtype_name(logits->dtype), amp_dtype_name(e->logits));
    CHECK_MSG(loss->dtype == F32, "%s: loss %s", cfg, amp_dtype_name(loss->dtype));
    bool out_cast = e->logits != half;
    if (half == F32)
        CHECK_MSG(n_param_casts + n_other_casts == 0, "%s: %d casts in f32", cfg,
                  n_param_casts + n_other_casts);
    if (e->per_op_cast) {
        /* Each conv/linear weight once, the input once (before the first GEMM), the output once
         * when cast_model_outputs asks for it. */
        int n_weights = 0;
        for (int i = 0; i < p->n_params; i++)
            n_weights += p->is_weight[i];
        CHECK_MSG(n_param_casts == n_weights, "%s: %d weight casts, want %d", cfg, n_param_casts,
                  n_weights);
        CHECK_MSG(n_other_casts == 1 + out_cast, "%s: %d activation casts, want %d", cfg,
                  n_other_casts, 1 + out_cast);
    }
    if (e->io_cast) { /* Apex's input_caster: the first op casts the batch to half */
        const traced_op *t = &log->ops[0];
        CHECK_MSG(log->n > 0 && !strcmp(t->op, "cast") && t->in[0] == x && t->out_dt == half,
                  "%s: first op %s is not the input cast", cfg, log->n ? t->op : "(none)");
    }
    if (out_cast) { /* Apex's output_caster: the logits are a cast of the last layer's output */
        bool found = false;
        for (int i = 0; i < log->n; i++)
            if (log->ops[i].out == logits)
                found = !strcmp(log->ops[i].op, "cast") && log->ops[i].in_dt[0] == half;
        CHECK_MSG(found, "%s: the logits do not come from a cast of the %s output", cfg,
                  amp_dtype_name(half));
    }
}

static void check_grads(const char *cfg, const amp_model *m) {
    for (int i = 0; i < amp_model_n_params(m); i++) {
        const amp_tensor *t = amp_model_param(m, i);
        CHECK_MSG(t->grad && t->grad_written, "%s: %s has no gradient", cfg,
                  amp_model_param_name(m, i));
        if (t->grad)
            CHECK_MSG(t->grad->dtype == t->dtype, "%s: grad of %s is %s, param %s", cfg,
                      amp_model_param_name(m, i), amp_dtype_name(t->grad->dtype),
                      amp_dtype_name(t->dtype));
    }
}

/* Masters: f32 views shaped like the parameters with master_weights, none otherwise. Optimizer
 * state: f32 at every level. Apex O3 (and O2 without master weights) keeps torch.optim's state
 * in the parameters' dtype, fp16; libamp deliberately keeps it f32 (one layout, what the fused
 * kernel reads; optim/optimizer_internal.h documents it). */
static void check_optimizer(const char *cfg, const amp_model *m, const amp_optimizer *opt,
                            const expect *e) {
    CHECK_MSG(amp_optimizer_has_masters(opt) == e->masters, "%s: has_masters %d", cfg,
              (int)amp_optimizer_has_masters(opt));
    for (int i = 0; i < amp_model_n_params(m); i++) {
        const amp_tensor *mw = amp_optimizer_master(opt, i), *p = amp_model_param(m, i);
        if (!e->masters) {
            CHECK_MSG(mw == NULL, "%s: a master for %s", cfg, amp_model_param_name(m, i));
            continue;
        }
        CHECK_MSG(mw && mw->dtype == F32 && mw->numel == p->numel, "%s: master of %s", cfg,
                  amp_model_param_name(m, i));
        CHECK(mw && mw != p && mw->data != p->data);
    }
    int n_state = amp_optimizer_n_state(opt);
    CHECK(n_state >= 1);
    for (int i = 0; i < amp_model_n_params(m); i++) {
        CHECK_MSG(amp_optimizer_has_state(opt, i), "%s: %s has no state", cfg,
                  amp_model_param_name(m, i));
        for (int j = 0; j < n_state; j++) {
            amp_tensor *st = NULL;
            CHECK_OK(amp_optimizer_state_tensor(opt, i, amp_optimizer_state_name(opt, j), &st));
            CHECK_MSG(st && st->dtype == F32 && st->numel == amp_model_param(m, i)->numel,
                      "%s: %s of %s is %s", cfg, amp_optimizer_state_name(opt, j),
                      amp_model_param_name(m, i), st ? amp_dtype_name(st->dtype) : "missing");
        }
    }
}

static void print_table(const char *cfg, const amp_model *m, const amp_optimizer *opt,
                        const trace_log *log) {
    printf("observed dtypes, %s:\n  ops:\n", cfg);
    for (int i = 0; i < log->n; i++) {
        const traced_op *t = &log->ops[i];
        printf("    %-14s", t->op);
        for (int j = 0; j < t->n_in; j++)
            if (t->in[j]) printf("%s%s", j ? ", " : "", amp_dtype_name(t->in_dt[j]));
        printf(" -> %s\n", amp_dtype_name(t->out_dt));
    }
    printf("  %-24s %-6s %-6s %-6s %s\n", "parameter", "param", "grad", "master", "state");
    for (int i = 0; i < amp_model_n_params(m); i++) {
        const amp_tensor *p = amp_model_param(m, i), *mw = amp_optimizer_master(opt, i);
        amp_tensor *st = NULL;
        amp_optimizer_state_tensor(opt, i, amp_optimizer_state_name(opt, 0), &st);
        printf("  %-24s %-6s %-6s %-6s %s\n", amp_model_param_name(m, i), amp_dtype_name(p->dtype),
               p->grad ? amp_dtype_name(p->grad->dtype) : "-", mw ? amp_dtype_name(mw->dtype) : "-",
               st ? amp_dtype_name(st->dtype) : "-");
    }
    for (int i = 0; i < amp_model_n_buffers(m); i++)
        printf("  %-24s %-6s\n", amp_model_buffer_name(m, i),
               amp_dtype_name(amp_model_buffer(m, i)->dtype));
}

static void run_row(const row *r, const preset *p, bool adam, bool print) {
    char cfg[128];
    snprintf(cfg, sizeof cfg, "%s, %s, %s", r->name, p->name, adam ? "Adam" : "SGD momentum 0.9");
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 7}, &ctx));
    if (!ctx) return;
    CHECK_OK(p->make(ctx, &m));
    if (adam)
        CHECK_OK(amp_adam_create(m, &(amp_adam_opts){.lr = 1e-3f}, &opt));
    else
        CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.01f, .momentum = 0.9f}, &opt));
    amp_options o = r->opts;
    o.quiet = true;
    amp_status s = opt ? amp_initialize_ex(m, opt, &o) : AMP_ERR_STATE;
    CHECK_MSG(s == AMP_OK, "%s: amp_initialize_ex: %s", cfg, amp_last_error());
    if (s != AMP_OK) goto done;
    check_storage(cfg, p, m, &r->e);
    amp_scaler_state sc;
    CHECK_OK(amp_scaler_get_state(opt, 0, &sc));
    CHECK_MSG(sc.dynamic == r->e.dynamic && sc.scale == r->e.scale &&
                  sc.check_overflow == r->e.check_overflow,
              "%s: scaler dynamic %d scale %g check %d", cfg, (int)sc.dynamic, (double)sc.scale,
              (int)sc.check_overflow);
    amp_tensor *x, *y;
    make_batch(ctx, &x, &y);
    static trace_log log;
    bool stepped = false;
    for (int tries = 0; tries < MAX_TRIES && !stepped && x && y; tries++) {
        amp_tensor *logits = NULL, *loss = NULL;
        log.n = 0;
        log.overflow = false;
        ctx->trace = trace_record;
        ctx->trace_user = &log;
        CHECK_OK(amp_model_forward(m, x, &logits));
        if (logits) CHECK_OK(amp_cross_entropy(logits, y, &loss));
        ctx->trace = NULL;
        if (!loss) break;
        float l;
        CHECK_OK(amp_tensor_item(loss, &l));
        CHECK_MSG(isfinite(l), "%s: loss %g", cfg, (double)l);
        if (tries == 0) check_trace(cfg, p, m, &log, x, logits, loss, &r->e);
        CHECK_OK(amp_backward(loss));
        if (tries == 0) check_grads(cfg, m);
        CHECK_OK(amp_step(opt, &stepped));
        if (stepped && print) print_table(cfg, m, opt, &log);
        CHECK_OK(amp_zero_grad(opt));
    }
    CHECK_MSG(stepped, "%s: no clean step in %d tries", cfg, MAX_TRIES);
    CHECK_MSG(amp_optimizer_step_count(opt) == 1, "%s: step count %lld", cfg,
              (long long)amp_optimizer_step_count(opt));
    check_storage(cfg, p, m, &r->e); /* the step keeps every dtype */
    check_optimizer(cfg, m, opt, &r->e);
    amp_tensor_free(x);
    amp_tensor_free(y);
done:
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

static void test_table(void) {
    const preset *presets[2] = {&g_convnet, &g_mlp};
    for (int r = 0; r < N_ROWS; r++)
        for (int p = 0; p < 2; p++)
            for (int a = 0; a < 2; a++)
                run_row(&g_rows[r], presets[p], a,
                        !strcmp(g_rows[r].name, "O2 f16") && p == 0 && !a);
}

/* ---- O1's weight cast: once per step ---- */

/* A model that reuses nothing: Linear(6, 5) + ReLU + Linear(5, 3). The casts are exactly its two
 * weights and the input (biases stay f32: the GEMM epilogue adds them in f32). Then one weight
 * used twice in a step is cast once, and a new step casts the updated weight again. */
static void test_o1_cast_count(void) {
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 3}, &ctx));
    if (!ctx) return;
    CHECK_OK(amp_seq_create(ctx, &m));
    CHECK_OK(amp_seq_add_linear(m, "a", 6, 5, true));
    CHECK_OK(amp_seq_add_relu(m, "r"));
    CHECK_OK(amp_seq_add_linear(m, "b", 5, 3, true));
    CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.1f}, &opt));
    CHECK_OK(amp_initialize_ex(m, opt, &(amp_options){.opt_level = AMP_O1, .quiet = true}));
    float xs[4 * 6];
    for (int i = 0; i < 24; i++)
        xs[i] = rand_unit() - 0.5f;
    amp_tensor *x = NULL, *out = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, F32, 2, (int64_t[]){4, 6}, xs, &x));
    static trace_log log;
    log.n = 0;
    ctx->trace = trace_record;
    ctx->trace_user = &log;
    CHECK_OK(amp_model_forward(m, x, &out));
    ctx->trace = NULL;
    int casts = 0, weight_casts = 0;
    for (int i = 0; i < log.n; i++) {
        if (strcmp(log.ops[i].op, "cast")) continue;
        casts++;
        weight_casts +=
            log.ops[i].in[0] == amp_model_param(m, 0) || log.ops[i].in[0] == amp_model_param(m, 2);
    }
    CHECK_MSG(casts == 3 && weight_casts == 2, "%d casts, %d of weights", casts, weight_casts);
    CHECK_OK(amp_zero_grad(opt));

    /* One weight used twice: a model holding one square Linear(6, 6), applied twice per step. */
    amp_model *sq = NULL;
    amp_optimizer *sq_opt = NULL;
    amp_ctx *ctx2 = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 4}, &ctx2));
    if (ctx2) CHECK_OK(amp_seq_create(ctx2, &sq));
    if (sq) CHECK_OK(amp_seq_add_linear(sq, "w", 6, 6, true));
    if (sq) CHECK_OK(amp_sgd_create(sq, &(amp_sgd_opts){.lr = 0.5f}, &sq_opt));
    if (sq_opt)
        CHECK_OK(amp_initialize_ex(sq, sq_opt, &(amp_options){.opt_level = AMP_O1, .quiet = true}));
    amp_tensor *x2 = NULL;
    if (ctx2) CHECK_OK(amp_tensor_from_host(ctx2, F32, 2, (int64_t[]){4, 6}, xs, &x2));
    uint16_t prev_half[36] = {0}; /* step 0's cast weight */
    for (int step = 0; step < 2 && sq_opt && x2; step++) {
        amp_tensor *w = amp_model_param(sq, 0), *b = amp_model_param(sq, 1);
        amp_tensor *h1 = NULL, *h2 = NULL, *h3 = NULL, *loss = NULL;
        log.n = 0;
        ctx2->trace = trace_record;
        ctx2->trace_user = &log;
        CHECK_OK(amp_linear(x2, w, b, &h1));
        if (h1) CHECK_OK(amp_relu(h1, &h2));
        if (h2) CHECK_OK(amp_linear(h2, w, b, &h3));
        if (h3) CHECK_OK(amp_mean(h3, &loss));
        ctx2->trace = NULL;
        if (!loss) break;
        int n_cast = 0, n_w = 0;
        const amp_tensor *w_half[2] = {NULL, NULL};
        for (int i = 0; i < log.n; i++) {
            const traced_op *t = &log.ops[i];
            if (!strcmp(t->op, "cast")) {
                n_cast++;
                n_w += t->in[0] == w;
            }
            if (!strcmp(t->op, "linear") && w_half[0])
                w_half[1] = t->in[1];
            else if (!strcmp(t->op, "linear"))
                w_half[0] = t->in[1];
        }
        CHECK_MSG(n_cast == 2 && n_w == 1, "step %d: %d casts, %d of the weight (want 2, 1)", step,
                  n_cast, n_w);
        CHECK(w_half[0] && w_half[0] == w_half[1] && w_half[0]->dtype == F16);
        if (w_half[0]) { /* this step's cast holds the rounding of this step's weight */
            float wv[36];
            uint16_t hv[36];
            CHECK_OK(amp_tensor_to_host(w, wv, sizeof wv));
            CHECK_OK(amp_tensor_to_host(w_half[0], hv, sizeof hv));
            int bad = 0;
            for (int i = 0; i < 36; i++)
                bad += hv[i] != amp_f32_to_f16_bits(wv[i]);
            CHECK_MSG(bad == 0, "step %d: %d cast weights differ from the rounded weights", step,
                      bad);
            if (step == 1) /* the update moved the weight: a stale cast would fail above */
                CHECK(memcmp(prev_half, hv, sizeof hv) != 0);
            memcpy(prev_half, hv, sizeof hv);
        }
        CHECK_OK(amp_backward(loss));
        bool stepped = false;
        CHECK_OK(amp_step(sq_opt, &stepped));
        CHECK(stepped);
        CHECK_OK(amp_zero_grad(sq_opt));
    }
    amp_tensor_free(x2);
    amp_optimizer_free(sq_opt);
    amp_model_free(sq);
    amp_ctx_free(ctx2);
    amp_tensor_free(x);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

/* ---- O2's master weights ---- */

static uint16_t round_half(float v, amp_dtype dt) {
    return dt == F16 ? amp_f32_to_f16_bits(v) : amp_f32_to_bf16_bits(v);
}

/* Parameter i against f32 reference values: an f32 parameter equal bit for bit, a half one
 * their round-to-nearest-even. Returns the elements that are not. */
static int64_t count_not_rounding(const amp_tensor *p, const float *ref, amp_dtype half) {
    int64_t bad = 0;
    for (int64_t k = 0; k < p->numel; k++)
        bad += p->dtype == F32 ? ((const float *)p->data)[k] != ref[k] /* CPU: host memory */
                               : ((const uint16_t *)p->data)[k] != round_half(ref[k], half);
    return bad;
}

/* The masters start at the model's f32 values before the cast, bit for bit (libamp copies them
 * before casting, amp/initialize.c; Apex copies them from the already-cast model, so its
 * masters start rounded), and the half weights are their rounding. After a step every half
 * weight is the rounding of its new master and batch norm's f32 weights equal their masters. */
static void test_o2_masters(amp_half_type half_type) {
    amp_dtype half = half_type == AMP_HALF_BF16 ? BF16 : F16;
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    amp_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    float *before[MAX_PARAMS] = {0};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 21}, &ctx));
    if (ctx) CHECK_OK(amp_model_convnet_mnist(ctx, &m));
    if (m) CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.05f, .momentum = 0.9f}, &opt));
    if (!opt) goto done;
    int n = amp_model_n_params(m);
    CHECK(n == g_convnet.n_params);
    for (int i = 0; i < n && i < MAX_PARAMS; i++) {
        size_t nbytes = amp_tensor_nbytes(amp_model_param(m, i));
        before[i] = malloc(nbytes);
        if (before[i]) CHECK_OK(amp_tensor_to_host(amp_model_param(m, i), before[i], nbytes));
    }
    amp_options o = {
        .opt_level = AMP_O2, .half_type = half_type, .init_scale = 1024.0f, .quiet = true};
    CHECK_OK(amp_initialize_ex(m, opt, &o));
    for (int i = 0; i < n && i < MAX_PARAMS && before[i]; i++) {
        const amp_tensor *p = amp_model_param(m, i), *mw = amp_optimizer_master(opt, i);
        CHECK_MSG(mw && memcmp(mw->data, before[i], (size_t)p->numel * 4) == 0,
                  "%s: the master is not the f32 weight", amp_model_param_name(m, i));
        int64_t bad = count_not_rounding(p, before[i], half);
        CHECK_MSG(bad == 0, "%s: %lld elements are not the rounding of the f32 weights",
                  amp_model_param_name(m, i), (long long)bad);
    }
    make_batch(ctx, &x, &y);
    bool stepped = false;
    if (x && y) CHECK_OK(amp_model_forward(m, x, &logits));
    if (logits) CHECK_OK(amp_cross_entropy(logits, y, &loss));
    if (loss) CHECK_OK(amp_backward(loss));
    if (loss) CHECK_OK(amp_step(opt, &stepped));
    CHECK(stepped);
    int moved = 0;
    for (int i = 0; i < n && i < MAX_PARAMS && before[i]; i++) {
        const amp_tensor *p = amp_model_param(m, i), *mw = amp_optimizer_master(opt, i);
        if (!mw) continue;
        moved += memcmp(mw->data, before[i], (size_t)p->numel * 4) != 0;
        int64_t bad = count_not_rounding(p, mw->data, half);
        CHECK_MSG(bad == 0, "after the step, %s: %lld elements are not the rounding of the master",
                  amp_model_param_name(m, i), (long long)bad);
    }
    CHECK_MSG(moved == n, "%d of %d masters moved", moved, n);
done:
    for (int i = 0; i < MAX_PARAMS; i++) free(before[i]);
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

int main(void) {
    test_table();
    test_o1_cast_count();
    test_o2_masters(AMP_HALF_F16);
    test_o2_masters(AMP_HALF_BF16);
    return test_summary("test_opt_levels");
}
