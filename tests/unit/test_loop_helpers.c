/* What a training loop needs beside the model, as a PyTorch loop writes it:
 *  - a tensor and a number (amp_mul_scalar, amp_add_scalar, amp_div_scalar): the input's dtype
 *    kept at O1 as without amp (a scalar does not promote), x / s a true division (not x * 1/s),
 *    NaN and inf through;
 *  - gradient accumulation with `loss / K`: K micro-batches of a batch give the gradients of the
 *    whole batch's mean loss;
 *  - one loop for fp32 and mixed precision: amp_initialize(O0) trains bit for bit as the plain
 *    loop does (torch's GradScaler(enabled=False)), and amp_step without amp_initialize says so;
 *  - amp_tensor_argmax_rows for an accuracy: torch.argmax's answer in every dtype (ties to the
 *    first, NaN the largest), and a wrong row count refused. */
#include <math.h>
#include <string.h>

#include "amp/amp.h"
#include "core/half.h"
#include "test_util.h"
#include "core/tensor_internal.h"

#define NAME "test_loop_helpers"

static void test_scalar_ops(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx));
    if (!ctx) return;
    float xs[6] = {1.0f, -2.5f, 0.1f, NAN, INFINITY, 7.0f}, got[6];
    amp_tensor *x = NULL, *h = NULL, *y = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, (int64_t[]){6}, xs, &x));
    CHECK_OK(amp_div_scalar(x, 3.0f, &y));
    CHECK_OK(amp_tensor_to_host(y, got, sizeof got));
    int bad = 0;
    for (int i = 0; i < 6; i++) {
        float want = xs[i] / 3.0f; /* not xs[i] * (1.0f / 3.0f), which differs for -2.5 and 7 */
        bad += !(got[i] == want || (isnan(got[i]) && isnan(want)));
    }
    CHECK_MSG(bad == 0 && got[5] != xs[5] * (1.0f / 3.0f), "x / 3: %d values not a true division",
              bad);
    CHECK_OK(amp_add_scalar(x, 0.5f, &y));
    CHECK_OK(amp_tensor_to_host(y, got, sizeof got));
    CHECK(got[0] == 1.5f && got[1] == -2.0f && isnan(got[3]) && isinf(got[4]));
    /* A half tensor stays half, f32 stays f32, with autocast on (O1's PASS). */
    CHECK_OK(amp_cast(x, AMP_BF16, &h));
    CHECK_OK(amp_mul_scalar(h, 0.5f, &y));
    CHECK(y->dtype == AMP_BF16);
    CHECK_OK(amp_tensor_to_host_f32(y, got, sizeof got));
    CHECK(got[0] == 0.5f && got[1] == -1.25f && got[5] == 3.5f);
    CHECK_FAILS(amp_mul_scalar(NULL, 2.0f, &y), AMP_ERR_INVALID_ARG, "amp_mul_scalar");
    amp_tensor *ids = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 1, (int64_t[]){2}, &ids));
    CHECK_FAILS(amp_div_scalar(ids, 2.0f, &y), AMP_ERR_DTYPE, "amp_div_scalar");
    amp_tensor_free(ids);
    amp_tensor_free(x);
    amp_ctx_free(ctx);
}

enum { IN = 6, OUT = 3, BIG = 8, K = 4 };

typedef struct net {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_tensor *inputs[64]; /* each loss's x and y, alive until its backward has run */
    int n_inputs;
} net;

static bool net_make(net *n, const amp_options *o) {
    *n = (net){0};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 12}, &n->ctx));
    if (!n->ctx) return false;
    CHECK_OK(amp_seq_create(n->ctx, &n->m));
    CHECK_OK(amp_seq_add_linear(n->m, "fc1", IN, 8, true));
    CHECK_OK(amp_seq_add_relu(n->m, "relu"));
    CHECK_OK(amp_seq_add_linear(n->m, "fc2", 8, OUT, true));
    CHECK_OK(amp_sgd_create(n->m, &(amp_sgd_opts){.lr = 0.1f, .momentum = 0.9f}, &n->opt));
    if (o) CHECK_OK(amp_initialize_ex(n->m, n->opt, o));
    return n->opt != NULL;
}

static void net_free(net *n) {
    for (int i = 0; i < n->n_inputs; i++) amp_tensor_free(n->inputs[i]);
    amp_optimizer_free(n->opt);
    amp_model_free(n->m);
    amp_ctx_free(n->ctx);
}

/* The loss of rows [first, first + rows) of a fixed batch, divided by div (1: none). */
static amp_tensor *net_loss(net *n, int first, int rows, float div) {
    float xs[BIG * IN];
    int32_t ys[BIG];
    for (int i = 0; i < BIG * IN; i++) xs[i] = (float)cos(0.3 * i);
    for (int i = 0; i < BIG; i++) ys[i] = i % OUT;
    amp_tensor *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    CHECK_OK(amp_tensor_from_host(n->ctx, AMP_F32, 2, (int64_t[]){rows, IN}, xs + first * IN, &x));
    CHECK_OK(amp_tensor_from_host(n->ctx, AMP_I32, 1, (int64_t[]){rows}, ys + first, &y));
    CHECK_OK(amp_model_forward(n->m, x, &out));
    CHECK_OK(amp_cross_entropy(out, y, &loss));
    if (div != 1.0f) CHECK_OK(amp_div_scalar(loss, div, &loss));
    if (n->n_inputs + 2 <= 64) {
        n->inputs[n->n_inputs++] = x;
        n->inputs[n->n_inputs++] = y;
    }
    return loss;
}

static double param_diff(const net *a, const net *b) {
    double worst = 0;
    for (int i = 0; i < amp_model_n_params(a->m); i++) {
        amp_tensor *pa = amp_model_param(a->m, i), *pb = amp_model_param(b->m, i);
        float va[64], vb[64];
        CHECK_OK(amp_tensor_to_host_f32(pa, va, (size_t)pa->numel * sizeof(float)));
        CHECK_OK(amp_tensor_to_host_f32(pb, vb, (size_t)pb->numel * sizeof(float)));
        for (int64_t k = 0; k < pa->numel; k++) worst = fmax(worst, fabs((double)va[k] - vb[k]));
    }
    return worst;
}

/* K micro-batches of loss / K against one batch of the mean loss: the same step up to rounding. */
static void test_accumulation(void) {
    net big, acc;
    amp_options o = {.opt_level = AMP_O0, .quiet = true};
    if (net_make(&big, &o) && net_make(&acc, &o)) {
        CHECK_OK(amp_backward(net_loss(&big, 0, BIG, 1.0f)));
        CHECK_OK(amp_step(big.opt, NULL));
        for (int k = 0; k < K; k++) CHECK_OK(amp_backward(net_loss(&acc, k * BIG / K, BIG / K, K)));
        CHECK_OK(amp_step(acc.opt, NULL));
        double d = param_diff(&big, &acc);
        CHECK_MSG(d < 1e-6, "K micro-batches of loss / K differ from the whole batch by %g", d);
    }
    net_free(&big);
    net_free(&acc);
}

/* amp_initialize(O0) and the plain loop: the same bits after three steps. */
static void test_o0_is_plain(void) {
    net plain, o0;
    if (net_make(&plain, NULL) && net_make(&o0, &(amp_options){.opt_level = AMP_O0, .quiet = true})) {
        bool stepped = false;
        CHECK_FAILS(amp_step(plain.opt, &stepped), AMP_ERR_STATE, "amp_initialize(model, opt, AMP_O0)");
        for (int s = 0; s < 3; s++) {
            CHECK_OK(amp_backward(net_loss(&plain, 0, BIG, 1.0f)));
            CHECK_OK(amp_optimizer_step(plain.opt));
            CHECK_OK(amp_zero_grad(plain.opt));
            CHECK_OK(amp_backward(net_loss(&o0, 0, BIG, 1.0f)));
            CHECK_OK(amp_step(o0.opt, &stepped));
            CHECK_OK(amp_zero_grad(o0.opt));
            CHECK(stepped);
        }
        CHECK_MSG(param_diff(&plain, &o0) == 0, "O0 differs from the plain loop by %g",
                  param_diff(&plain, &o0));
    }
    net_free(&plain);
    net_free(&o0);
}

static void test_argmax(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx));
    if (!ctx) return;
    /* Rows: a clear max, a tie (the first wins), a NaN (it wins), all -inf (position 0). */
    const float v[4][4] = {{0.1f, 2.0f, -1.0f, 1.5f}, {3.0f, 1.0f, 3.0f, 0.0f},
                           {1.0f, NAN, 9.0f, 2.0f}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY}};
    const int32_t want[4] = {1, 0, 1, 0};
    amp_tensor *t = NULL, *c = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (int64_t[]){4, 4}, v, &t));
    const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int k = 0; t && k < 3; k++) {
        CHECK_OK(amp_cast(t, dts[k], &c));
        int32_t idx[4] = {-1, -1, -1, -1};
        CHECK_OK(amp_tensor_argmax_rows(c, idx, 4));
        CHECK_MSG(!memcmp(idx, want, sizeof want), "%s: argmax %d %d %d %d",
                  amp_dtype_name(dts[k]), idx[0], idx[1], idx[2], idx[3]);
    }
    int32_t idx[4];
    CHECK_FAILS(amp_tensor_argmax_rows(t, idx, 3), AMP_ERR_SHAPE, "n_rows 3");
    CHECK_FAILS(amp_tensor_argmax_rows(t, NULL, 4), AMP_ERR_INVALID_ARG, "idx");
    amp_tensor_free(t);
    amp_ctx_free(ctx);
}

int main(void) {
    test_scalar_ops();
    test_accumulation();
    test_o0_is_plain();
    test_argmax();
    return test_summary(NAME);
}
