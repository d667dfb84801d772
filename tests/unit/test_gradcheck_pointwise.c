/* Gradient check of the pointwise ops (exp, log, tanh, sigmoid, SiLU) and of sub and div, with
 * the runner of tests/gradcheck_run.h (forward against float64, gradients against float64
 * central differences, accumulation and zero_grad), on every device that answers (CUDA under
 * cudacpu too); then their autocast categories under O1-style autocast (exp and log in f32,
 * the others in their input's dtype) and bad input (a dtype, a shape). */
#include <math.h>
#include <stdio.h>

#include "amp/amp.h"
#include "core/ctx.h"
#include "gradcheck_run.h"
#include "test_devices.h"

static amp_status lib_exp(gc_case *c, amp_tensor **y) { return amp_exp(T(0), y); }
static amp_status lib_log(gc_case *c, amp_tensor **y) { return amp_log(T(0), y); }
static amp_status lib_tanh(gc_case *c, amp_tensor **y) { return amp_tanh(T(0), y); }
static amp_status lib_sigmoid(gc_case *c, amp_tensor **y) { return amp_sigmoid(T(0), y); }
static amp_status lib_silu(gc_case *c, amp_tensor **y) { return amp_silu(T(0), y); }
static amp_status lib_gelu(gc_case *c, amp_tensor **y) { return amp_gelu(T(0), false, y); }
static amp_status lib_gelu_tanh(gc_case *c, amp_tensor **y) { return amp_gelu(T(0), true, y); }
static amp_status lib_sub(gc_case *c, amp_tensor **y) { return amp_sub(T(0), T(1), y); }
static amp_status lib_div(gc_case *c, amp_tensor **y) { return amp_div(T(0), T(1), y); }

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

#define REF_UNARY(fn, expr)                                                                        \
    static void fn(const gc_case *c, double *y) {                                                  \
        for (int64_t i = 0; i < c->in[0].numel; i++) {                                            \
            double x = V(0)[i];                                                                    \
            y[i] = (expr);                                                                         \
        }                                                                                          \
    }
REF_UNARY(ref_exp, exp(x))
REF_UNARY(ref_log, log(x))
REF_UNARY(ref_tanh, tanh(x))
REF_UNARY(ref_sigmoid, sigmoid(x))
REF_UNARY(ref_silu, x *sigmoid(x))
REF_UNARY(ref_gelu, 0.5 * x * erfc(-x / sqrt(2.0)))
REF_UNARY(ref_gelu_tanh, 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))))

static void ref_sub(const gc_case *c, double *y) {
    for (int64_t i = 0; i < c->in[0].numel; i++) y[i] = V(0)[i] - V(1)[i];
}
static void ref_div(const gc_case *c, double *y) {
    for (int64_t i = 0; i < c->in[0].numel; i++) y[i] = V(0)[i] / V(1)[i];
}

/* tanh(x) / sigmoid(x) - exp(x) * silu(x): every op of the file on one graph, x used four times. */
static amp_status lib_chain(gc_case *c, amp_tensor **y) {
    amp_tensor *t, *s, *e, *l, *q, *p;
    amp_status st = amp_tanh(T(0), &t);
    if (!st) st = amp_sigmoid(T(0), &s);
    if (!st) st = amp_exp(T(0), &e);
    if (!st) st = amp_silu(T(0), &l);
    if (!st) st = amp_div(t, s, &q);
    if (!st) st = amp_mul(e, l, &p);
    return st ? st : amp_sub(q, p, y);
}
static void ref_chain(const gc_case *c, double *y) {
    for (int64_t i = 0; i < c->in[0].numel; i++) {
        double x = V(0)[i];
        y[i] = tanh(x) / sigmoid(x) - exp(x) * x * sigmoid(x);
    }
}

static gc_case cases[] = {
    {OP("exp", lib_exp, ref_exp), .in = {IN("x", 3, GC_UNIFORM, -2, 2, true, 3, 4, 5)},
     OUT(3, 3, 4, 5)},
    {OP("log", lib_log, ref_log), .in = {IN("x", 3, GC_UNIFORM, 0.3, 3, true, 3, 4, 5)},
     OUT(3, 3, 4, 5)},
    {OP("tanh", lib_tanh, ref_tanh), .in = {IN("x", 2, GC_UNIFORM, -2.5, 2.5, true, 6, 7)},
     OUT(2, 6, 7)},
    {OP("sigmoid", lib_sigmoid, ref_sigmoid), .in = {IN("x", 2, GC_UNIFORM, -4, 4, true, 6, 7)},
     OUT(2, 6, 7)},
    {OP("silu", lib_silu, ref_silu), .in = {IN("x", 4, GC_UNIFORM, -4, 4, true, 2, 3, 2, 5)},
     OUT(4, 2, 3, 2, 5)},
    {OP("gelu (exact)", lib_gelu, ref_gelu), .in = {IN("x", 2, GC_UNIFORM, -4, 4, true, 7, 9)},
     OUT(2, 7, 9)},
    {OP("gelu (tanh)", lib_gelu_tanh, ref_gelu_tanh),
     .in = {IN("x", 3, GC_UNIFORM, -4, 4, true, 2, 5, 7)}, OUT(3, 2, 5, 7)},
    {OP("sub", lib_sub, ref_sub), .in = {X_("a", 2, 5, 6), X_("b", 2, 5, 6)}, OUT(2, 5, 6)},
    {OP("div", lib_div, ref_div),
     .in = {X_("a", 2, 5, 6), IN("b", 2, GC_AWAY0, 0.5, 2, true, 5, 6)}, OUT(2, 5, 6)},
    {OP("div b without grad", lib_div, ref_div),
     .in = {X_("a", 1, 17), IN("b", 1, GC_AWAY0, 0.5, 2, false, 17)}, OUT(1, 17)},
    {OP("chain of all", lib_chain, ref_chain), .in = {IN("x", 2, GC_UNIFORM, -1.5, 1.5, true, 4, 9)},
     OUT(2, 4, 9)},
};

/* Autocast: under a bf16 autocast exp and log of a bf16 tensor come out f32, the others bf16;
 * without autocast every op keeps the input's dtype. */
static void test_autocast(amp_ctx *ctx) {
    amp_tensor *x = NULL, *y = NULL;
    uint16_t half[12];
    for (int i = 0; i < 12; i++) half[i] = 0x3f00; /* bf16 0.5 */
    CHECK_OK(amp_tensor_from_host(ctx, AMP_BF16, 2, (const int64_t[]){3, 4}, half, &x));
    amp_status (*fns[5])(amp_tensor *, amp_tensor **) = {amp_exp, amp_log, amp_tanh, amp_sigmoid,
                                                         amp_silu};
    for (int i = 0; i < 5; i++) {
        CHECK_OK(fns[i](x, &y));
        CHECK(y && amp_tensor_dtype(y) == AMP_BF16);
    }
    ctx->autocast.enabled = true;
    ctx->autocast.half = AMP_BF16;
    for (int i = 0; i < 5; i++) {
        CHECK_OK(fns[i](x, &y));
        CHECK_MSG(y && amp_tensor_dtype(y) == (i < 2 ? AMP_F32 : AMP_BF16), "op %d: dtype %d", i,
                  y ? (int)amp_tensor_dtype(y) : -1);
    }
    ctx->autocast.enabled = false;
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x);
}

static void test_bad_input(amp_ctx *ctx) {
    amp_tensor *i32 = NULL, *a = NULL, *b = NULL, *y = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 1, (const int64_t[]){4}, &i32));
    CHECK_FAILS(amp_exp(i32, &y), AMP_ERR_DTYPE, "amp_exp");
    CHECK_FAILS(amp_silu(NULL, &y), AMP_ERR_INVALID_ARG, "amp_silu");
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){4}, &a));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){5}, &b));
    CHECK_FAILS(amp_div(a, b, &y), AMP_ERR_SHAPE, "amp_div");
    CHECK_FAILS(amp_sub(a, b, &y), AMP_ERR_SHAPE, "amp_sub");
    amp_tensor_free(i32);
    amp_tensor_free(a);
    amp_tensor_free(b);
}

static void run_all(amp_device device) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 77}, &ctx));
    if (!ctx) return;
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        int before = test_n_fail;
        gc_run(ctx, &cases[i], 2000 + (uint64_t)i);
        printf("%-48s %s\n", cases[i].name, test_n_fail == before ? "ok" : "FAILED");
    }
    test_autocast(ctx);
    test_bad_input(ctx);
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(run_all);
    return test_summary("test_gradcheck_pointwise");
}
