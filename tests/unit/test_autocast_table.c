/* The dtype every public op returns, with autocast off (O0, O2, O3: the inputs' dtype, or the
 * wider of two) and on (O1 with bf16 and with f16), for f32 and half inputs: torch.amp's CUDA
 * lists as README's O1 table states them. HALF ops (linear, matmul, conv2d, attention) run in the half
 * type under autocast; the fp32 list's ops (exp, log, sum over a dim) widen to f32 under
 * autocast; losses and mean return f32 always; the others keep their input's dtype (PROMOTE: the
 * wider of two). */
#include <stdio.h>
#include <string.h>

#include "amp/amp.h"
#include "core/ctx.h"
#include "test_util.h"

#define NAME "test_autocast_table"

typedef enum op_id {
    OP_LINEAR, OP_LINEAR_GELU, OP_MATMUL, OP_CONV, OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_EXP, OP_LOG, OP_TANH,
    OP_SIGMOID, OP_SILU, OP_GELU, OP_SOFTMAX, OP_LOG_SOFTMAX, OP_LAYER_NORM, OP_RMS_NORM, OP_EMBEDDING, OP_RELU, OP_SUM_DIM, OP_MEAN_DIM, OP_MAX_DIM, OP_NARROW, OP_PERMUTE,
    OP_CAT, OP_MEAN, OP_MSE, OP_XENT, OP_MUL_SCALAR, OP_DROPOUT, OP_RESHAPE, OP_ATTENTION, OP_WHERE, OP_MASKED_FILL,
    OP_ATTENTION_PACKED,
    OP_ADD_LAYER_NORM, OP_LN_FOR_LINEAR, OP_ADD_LN_FOR_LINEAR
} op_id;

typedef struct row {
    const char *name;
    op_id op;
    amp_dtype in;       /* the inputs' dtype (a second input: in2) */
    amp_dtype in2;
    amp_dtype off, on;  /* the output's dtype without and with a bf16 autocast */
} row;

#define F32 AMP_F32
#define BF16 AMP_BF16
#define F16 AMP_F16
static const row rows[] = {
    {"linear f32", OP_LINEAR, F32, F32, F32, BF16},
    {"linear bf16", OP_LINEAR, BF16, BF16, BF16, BF16},
    {"linear_gelu f32", OP_LINEAR_GELU, F32, F32, F32, BF16},
    {"linear_gelu f16", OP_LINEAR_GELU, F16, F16, F16, BF16},
    {"matmul f32", OP_MATMUL, F32, F32, F32, BF16},
    {"matmul batched f32", OP_MATMUL, F32, F32, F32, BF16},
    {"conv2d f32", OP_CONV, F32, F32, F32, BF16},
    {"add f32 + bf16", OP_ADD, F32, BF16, F32, F32},
    {"add bf16 + bf16", OP_ADD, BF16, BF16, BF16, BF16},
    {"sub f16 + bf16", OP_SUB, F16, BF16, F32, F32},
    {"mul bf16", OP_MUL, BF16, BF16, BF16, BF16},
    {"div f32 + bf16", OP_DIV, F32, BF16, F32, F32},
    {"exp bf16", OP_EXP, BF16, BF16, BF16, F32},
    {"log f16", OP_LOG, F16, F16, F16, F32},
    {"exp f32", OP_EXP, F32, F32, F32, F32},
    {"tanh bf16", OP_TANH, BF16, BF16, BF16, BF16},
    {"sigmoid f16", OP_SIGMOID, F16, F16, F16, F16},
    {"silu bf16", OP_SILU, BF16, BF16, BF16, BF16},
    {"gelu bf16", OP_GELU, BF16, BF16, BF16, BF16},
    {"softmax bf16", OP_SOFTMAX, BF16, BF16, BF16, F32},
    {"log_softmax f16", OP_LOG_SOFTMAX, F16, F16, F16, F32},
    {"layer_norm bf16", OP_LAYER_NORM, BF16, BF16, BF16, F32},
    {"rms_norm f32", OP_RMS_NORM, F32, F32, F32, F32},
    {"add_layer_norm f32 + bf16", OP_ADD_LAYER_NORM, F32, BF16, F32, F32},
    {"add_layer_norm bf16", OP_ADD_LAYER_NORM, BF16, BF16, BF16, F32},
    {"layer_norm_for_linear f32", OP_LN_FOR_LINEAR, F32, F32, F32, BF16},
    {"layer_norm_for_linear f16", OP_LN_FOR_LINEAR, F16, F16, F16, BF16},
    {"add_layer_norm_for_linear f32 + bf16", OP_ADD_LN_FOR_LINEAR, F32, BF16, F32, BF16},
    {"embedding bf16 table", OP_EMBEDDING, BF16, BF16, BF16, BF16},
    {"embedding f32 table", OP_EMBEDDING, F32, F32, F32, F32},
    {"relu bf16", OP_RELU, BF16, BF16, BF16, BF16},
    {"sum_dim bf16", OP_SUM_DIM, BF16, BF16, BF16, F32},
    {"mean_dim bf16", OP_MEAN_DIM, BF16, BF16, BF16, BF16},
    {"max_dim f16", OP_MAX_DIM, F16, F16, F16, F16},
    {"narrow bf16", OP_NARROW, BF16, BF16, BF16, BF16},
    {"permute f16", OP_PERMUTE, F16, F16, F16, F16},
    {"cat bf16", OP_CAT, BF16, BF16, BF16, BF16},
    {"mean bf16", OP_MEAN, BF16, BF16, F32, F32},
    {"mse_loss bf16", OP_MSE, BF16, BF16, F32, F32},
    {"cross_entropy bf16", OP_XENT, BF16, BF16, F32, F32},
    {"mul_scalar bf16", OP_MUL_SCALAR, BF16, BF16, BF16, BF16},
    {"dropout bf16", OP_DROPOUT, BF16, BF16, BF16, BF16},
    {"reshape f16", OP_RESHAPE, F16, F16, F16, F16},
    {"attention f32", OP_ATTENTION, F32, F32, F32, BF16},
    {"attention bf16", OP_ATTENTION, BF16, BF16, BF16, BF16},
    {"attention qkvpacked", OP_ATTENTION_PACKED, F32, F32, F32, BF16},
    {"where f32 + bf16", OP_WHERE, F32, BF16, F32, F32},
    {"where bf16", OP_WHERE, BF16, BF16, BF16, BF16},
    {"masked_fill bf16", OP_MASKED_FILL, BF16, BF16, BF16, BF16},
    {"masked_fill f32", OP_MASKED_FILL, F32, F32, F32, F32},
};

/* The row's caller-owned inputs, freed after it. */
static amp_tensor *g_made[16];
static int g_n_made;

static amp_tensor *make(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape) {
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_create(ctx, dt, ndim, shape, &t));
    g_made[g_n_made++] = t;
    return t;
}

static void free_made(void) {
    while (g_n_made > 0) amp_tensor_free(g_made[--g_n_made]);
}

static amp_status run(amp_ctx *ctx, const row *r, amp_tensor **y) {
    const int64_t s2[2] = {4, 6}, s3[3] = {2, 4, 6}, w2[2] = {6, 6}, w3[3] = {2, 6, 6};
    const int64_t s4[4] = {2, 3, 6, 6};
    const int64_t wc[4] = {2, 3, 3, 3}, lab[1] = {4};
    bool batched = strstr(r->name, "batched") != NULL;
    amp_tensor *a = make(ctx, r->in, batched ? 3 : 2, batched ? s3 : s2);
    amp_tensor *b = make(ctx, r->in2, 2, s2);
    switch (r->op) {
    case OP_LINEAR: return amp_linear(a, make(ctx, r->in2, 2, w2), NULL, y);
    case OP_LINEAR_GELU: return amp_linear_gelu(a, make(ctx, r->in2, 2, w2), NULL, true, y);
    case OP_MATMUL: return amp_matmul(a, make(ctx, r->in2, batched ? 3 : 2, batched ? w3 : w2), y);
    case OP_CONV: return amp_conv2d(make(ctx, r->in, 4, s4), make(ctx, r->in2, 4, wc), NULL, 1, 1, y);
    case OP_ADD: return amp_add(a, b, y);
    case OP_SUB: return amp_sub(a, b, y);
    case OP_MUL: return amp_mul(a, b, y);
    case OP_DIV: return amp_div(a, b, y);
    case OP_EXP: return amp_exp(a, y);
    case OP_LOG: return amp_log(a, y);
    case OP_TANH: return amp_tanh(a, y);
    case OP_SIGMOID: return amp_sigmoid(a, y);
    case OP_SILU: return amp_silu(a, y);
    case OP_GELU: return amp_gelu(a, true, y);
    case OP_SOFTMAX: return amp_softmax(a, -1, y);
    case OP_LOG_SOFTMAX: return amp_log_softmax(a, -1, y);
    case OP_LAYER_NORM: return amp_norm(a, NULL, NULL, NULL, &(amp_norm_opts){.eps = 1e-5f}, NULL, y);
    case OP_RMS_NORM: return amp_norm(a, NULL, NULL, NULL, &(amp_norm_opts){.kind = AMP_NORM_RMS, .eps = 1e-5f}, NULL, y);
    case OP_ADD_LAYER_NORM: {
        amp_tensor *sum = NULL;
        return amp_norm(a, b, NULL, NULL, &(amp_norm_opts){.eps = 1e-5f}, &sum, y);
    }
    case OP_LN_FOR_LINEAR: return amp_norm(a, NULL, NULL, NULL, &(amp_norm_opts){.eps = 1e-5f, .out = AMP_NORM_OUT_FOR_LINEAR}, NULL, y);
    case OP_ADD_LN_FOR_LINEAR: {
        amp_tensor *sum = NULL;
        CHECK_OK(amp_norm(a, b, NULL, NULL, &(amp_norm_opts){.eps = 1e-5f, .out = AMP_NORM_OUT_FOR_LINEAR}, &sum, y));
        CHECK(amp_tensor_dtype(sum) == F32); /* the stream stays f32, the half residual widened */
        return AMP_OK;
    }
    case OP_EMBEDDING: return amp_embedding(make(ctx, AMP_I32, 2, s2), make(ctx, r->in, 2, w2), y);
    case OP_RELU: return amp_relu(a, y);
    case OP_SUM_DIM: return amp_sum_dim(a, 1, false, y);
    case OP_MEAN_DIM: return amp_mean_dim(a, -1, true, y);
    case OP_MAX_DIM: return amp_max_dim(a, 0, false, y, NULL);
    case OP_NARROW: return amp_narrow(a, 1, 1, 2, y);
    case OP_PERMUTE: return amp_permute(a, (const int[]){1, 0}, y);
    case OP_CAT: {
        amp_tensor *pair[2] = {a, b};
        return amp_cat(pair, 2, 0, y);
    }
    case OP_MEAN: return amp_mean(a, y);
    case OP_MSE: return amp_mse_loss(a, b, y);
    case OP_XENT: {
        amp_tensor *l = make(ctx, AMP_I32, 1, lab);
        return amp_cross_entropy(a, l, y);
    }
    case OP_MUL_SCALAR: return amp_mul_scalar(a, 0.5f, y);
    case OP_DROPOUT: return amp_dropout(a, 0.5f, true, y);
    case OP_RESHAPE: return amp_reshape(a, 2, (const int64_t[]){6, 4}, y);
    case OP_WHERE: return amp_where(make(ctx, AMP_I32, 2, s2), a, b, y);
    case OP_MASKED_FILL: return amp_masked_fill(a, make(ctx, AMP_I32, 2, s2), -1.0f, y);
    case OP_ATTENTION: {
        amp_attention_options o = {.causal = true};
        return amp_scaled_dot_product_attention(make(ctx, r->in, 4, s4), make(ctx, r->in, 4, s4),
                                                make(ctx, r->in, 4, s4), &o, y);
    }
    case OP_ATTENTION_PACKED: {
        amp_attention_options o = {.causal = true};
        return amp_scaled_dot_product_attention_qkvpacked(
            make(ctx, r->in, 5, (const int64_t[]){2, 3, 3, 1, 4}), &o, y);
    }
    }
    return AMP_ERR_INVALID_ARG;
}

int main(void) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 5}, &ctx));
    if (!ctx) return test_summary(NAME);
    int n = (int)(sizeof rows / sizeof rows[0]);
    printf("%-22s %-6s %-6s %s\n", "op", "inputs", "O0", "O1 bf16");
    for (int i = 0; i < n; i++) {
        for (int on = 0; on < 2; on++) {
            ctx->autocast.enabled = on;
            ctx->autocast.half = AMP_BF16;
            amp_tensor *y = NULL;
            CHECK_OK(run(ctx, &rows[i], &y));
            amp_dtype want = on ? rows[i].on : rows[i].off;
            CHECK_MSG(y && amp_tensor_dtype(y) == want, "%s, autocast %s: %s, want %s",
                      rows[i].name, on ? "on" : "off", y ? amp_dtype_name(amp_tensor_dtype(y)) : "-",
                      amp_dtype_name(want));
        }
        printf("%-22s %-6s %-6s %s\n", rows[i].name, amp_dtype_name(rows[i].in),
               amp_dtype_name(rows[i].off), amp_dtype_name(rows[i].on));
        ctx->autocast.enabled = false;
        amp_ctx_reset_step(ctx);
        free_made();
    }
    amp_ctx_free(ctx);
    return test_summary(NAME);
}
