/* The op profile (amp/profile.h): every backend entry an op calls is counted once, in its
 * category, with the FLOPs its sizes give by hand (the formulas of amp/profile.h, written out
 * here from the shapes); a training step of the MLP and of the ConvNet counts the GEMM and
 * convolution FLOPs that their layer shapes give; timing adds time only when asked; a failed
 * call counts nothing. Each entry is called on the CPU backend with small buffers. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amp/amp.h"
#include "core/tensor_internal.h"
#include "kernels/math/scaler.h"
#include "test_util.h"

static const amp_backend *be;
static float b0[8192], b1[8192], b2[8192], b3[8192], b4[8192], s0[64], s1[64], s2[64], s3[64];
static uint8_t mask[4096];
static int32_t labels[64];

/* One call counted once in `cat`, nothing elsewhere, with `flops`. */
static void check_one(const char *what, amp_status s, const amp_op_profile *p, amp_op_category cat,
                      double flops) {
    CHECK_MSG(s == AMP_OK, "%s: %s", what, amp_last_error());
    for (int c = 0; c < AMP_OPCAT_N; c++) {
        uint64_t want_calls = c == (int)cat ? 1 : 0;
        double want_flops = c == (int)cat ? flops : 0.0;
        CHECK_MSG(p->calls[c] == want_calls && p->flops[c] == want_flops && p->seconds[c] == 0.0,
                  "%s: category %s counted %llu call(s), %.0f FLOPs, %g s; want %llu, %.0f, 0",
                  what, amp_op_category_name((amp_op_category)c), (unsigned long long)p->calls[c],
                  p->flops[c], p->seconds[c], (unsigned long long)want_calls, want_flops);
    }
}

#define EXPECT_THROUGH(call, cat, flops, entry, ...)                                                             \
    do {                                                                                           \
        amp_profile_begin(false);                                                                  \
        amp_status s_ = call(be, entry, __VA_ARGS__);                                            \
        amp_op_profile p_;                                                                         \
        amp_profile_end(&p_);                                                                      \
        check_one(#entry " (" #flops ")", s_, &p_, (cat), (double)(flops));                        \
    } while (0)
/* A kernel (core/backend_kernels.def) and the device's copy, which ops count too. */
#define EXPECT(cat, flops, entry, ...) EXPECT_THROUGH(AMP_BE, cat, flops, entry, __VA_ARGS__)
#define EXPECT_DEV(cat, flops, entry, ...) EXPECT_THROUGH(AMP_DEV, cat, flops, entry, __VA_ARGS__)

static void gemm_and_conv(void) {
    amp_gemm_desc g = {.m = 8, .n = 6, .k = 5, .alpha = 1.0f, .a = b0, .a_dtype = AMP_F32,
                       .lda = 5, .b = b1, .b_dtype = AMP_F32, .ldb = 6, .c = b2,
                       .c_dtype = AMP_F32, .ldc = 6};
    EXPECT(AMP_OPCAT_GEMM_CONV, 2 * 8 * 6 * 5, gemm, &g);
    g.bias = s0;
    EXPECT(AMP_OPCAT_GEMM_CONV, 2 * 8 * 6 * 5 + 8 * 6, gemm, &g);
    g.bias = NULL;
    g.trans_a = true; /* A stored [k, m] */
    g.lda = 8;
    g.bias_grad = s1;
    EXPECT(AMP_OPCAT_GEMM_CONV, 2 * 8 * 6 * 5 + 8 * 5, gemm, &g);
    /* A GELU epilogue: one FLOP per output element more, as the unary GELU counts it. */
    amp_gemm_desc ge = {.m = 8, .n = 6, .k = 5, .alpha = 1.0f, .a = b0, .a_dtype = AMP_F32,
                        .lda = 5, .b = b1, .b_dtype = AMP_F32, .ldb = 6, .c = b2,
                        .c_dtype = AMP_F32, .ldc = 6, .bias = s0,
                        .epilogue = AMP_GEMM_EPILOGUE_GELU_TANH, .aux = b3};
    EXPECT(AMP_OPCAT_GEMM_CONV, 2 * 8 * 6 * 5 + 2 * 8 * 6, gemm, &ge);
    /* A strided batch counts every product (bmm's B m n k 2). */
    amp_gemm_desc gb = {.m = 4, .n = 3, .k = 5, .alpha = 1.0f, .a = b0, .a_dtype = AMP_F32,
                        .lda = 5, .b = b1, .b_dtype = AMP_F32, .ldb = 3, .c = b2,
                        .c_dtype = AMP_F32, .ldc = 3, .batch = 3, .stride_a = 20,
                        .stride_b = 15, .stride_c = 12};
    EXPECT(AMP_OPCAT_GEMM_CONV, 3 * 2 * 4 * 3 * 5, gemm, &gb);

    amp_conv2d_desc c = {.n = 2, .c_in = 3, .h_in = 6, .w_in = 6, .c_out = 4, .kh = 3, .kw = 3,
                         .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1, .h_out = 6,
                         .w_out = 6, .dtype = AMP_F32};
    const double macs2 = 2.0 * 2 * 4 * 6 * 6 * 3 * 3 * 3, outs = 2 * 4 * 6 * 6;
    EXPECT(AMP_OPCAT_GEMM_CONV, macs2, conv2d_fwd, &c, b0, b1, NULL, b2);
    EXPECT(AMP_OPCAT_GEMM_CONV, macs2 + outs, conv2d_fwd, &c, b0, b1, s0, b2);
    EXPECT(AMP_OPCAT_GEMM_CONV, macs2, conv2d_bwd_data, &c, b2, b1, b3);
    EXPECT(AMP_OPCAT_GEMM_CONV, macs2, conv2d_bwd_weight, &c, b0, b2, b3, NULL);
    EXPECT(AMP_OPCAT_GEMM_CONV, macs2 + outs, conv2d_bwd_weight, &c, b0, b2, b3, s0);
}

static void norm(void) {
    amp_bn_desc d = {.n = 2, .c = 3, .hw = 16, .eps = 1e-5f, .momentum = 0.1f, .dtype = AMP_F32};
    const int e = 2 * 3 * 16;
    for (int i = 0; i < 3; i++) s3[i] = 1.0f; /* running variance, gamma */
    EXPECT(AMP_OPCAT_NORM, 8 * e, bn_fwd_train, &d, b0, s3, s0, b1, s1, s2, s0, s3);
    EXPECT(AMP_OPCAT_NORM, 4 * e, bn_fwd_eval, &d, b0, s3, s0, s0, s3, b1);
    d.relu = true; /* the ReLU fused in: one comparison more per element */
    EXPECT(AMP_OPCAT_NORM, 9 * e, bn_fwd_train, &d, b0, s3, s0, b1, s1, s2, s0, s3);
    EXPECT(AMP_OPCAT_NORM, 5 * e, bn_fwd_eval, &d, b0, s3, s0, s0, s3, b1);
    EXPECT(AMP_OPCAT_NORM, 11 * e, bn_bwd, &d, b0, b1, b3, s3, s1, s2, b2, s0 + 8, s0 + 16);
    d.relu = false;
    EXPECT(AMP_OPCAT_NORM, 10 * e, bn_bwd, &d, b0, b1, NULL, s3, s1, s2, b2, s0 + 8, s0 + 16);
    EXPECT(AMP_OPCAT_NORM, 4 * e, bn_channel_sums, &d, b0, s1, NULL, s0 + 8, s0 + 16);
    EXPECT(AMP_OPCAT_NORM, 4 * 3, bn_sync_stats, &d, 96, s1, s0 + 8, s3, s2, s2 + 8, s2 + 16,
           s0 + 24, s3 + 24);
    for (int i = 0; i < 3; i++) s2[16 + i] = 1.0f; /* invstd */
    EXPECT(AMP_OPCAT_NORM, 6 * e, bn_bwd_elemt, &d, 96, b0, b1, s3, s2, s2 + 16, s0 + 8, s0 + 16,
           b2);
}

static void elementwise(void) {
    amp_pool_desc p = {.n = 2, .c = 3, .h_in = 4, .w_in = 4, .h_out = 2, .w_out = 2, .k = 2,
                       .stride = 2, .pad = 0, .dtype = AMP_F32};
    EXPECT(AMP_OPCAT_ELEMENTWISE, 2 * 3 * 2 * 2 * (2 * 2), maxpool_fwd, &p, b0, b1);
    /* the backward scans each window again (4 comparisons) and adds one dy */
    EXPECT(AMP_OPCAT_ELEMENTWISE, 2 * 3 * 2 * 2 * (2 * 2 + 1), maxpool_bwd, &p, b1, b0, b2);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 100, unary, AMP_UNARY_RELU, AMP_F32, 100, b0, 0.0f, b1);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 100, unary, AMP_UNARY_SCALE, AMP_F32, 100, b0, 2.0f, b1);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 0, unary, AMP_UNARY_COPY, AMP_F32, 100, b0, 0.0f, b1);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 100, binary, AMP_BINARY_ADD, AMP_F32, 100, b0, b1, b2);
    amp_where_desc wd = {.dt = AMP_F32, .ndim = 1, .shape = {100}, .cond_stride = {1},
                         .a_stride = {1}, .b_stride = {1}};
    EXPECT(AMP_OPCAT_ELEMENTWISE, 0, where, &wd, (const int32_t *)b3, b0, b1, b2);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 100, binary, AMP_BINARY_RELU_BWD, AMP_F32, 100, b0, b1, b2);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 2 * 100, axpy, AMP_F32, 100, 0.5f, b0, b1);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 100, sum, AMP_F32, 100, b0, 1.0f, s0);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 10 * 7, sum_rows, AMP_F32, 10, 7, b0, s0);
    /* Attention: 4 B H T^2 D (two products over every pair), half that causal; the backward's
     * five products 2.5 times that. */
    amp_attn_desc ad = {.batch = 1, .heads = 2, .seq = 3, .head_dim = 4, .dt = AMP_F32,
                        .scale = 0.5f};
    EXPECT(AMP_OPCAT_GEMM_CONV, 4 * 2 * 3 * 3 * 4, attn_fwd, &ad, b0, b1, b2, NULL, b3, s2);
    EXPECT(AMP_OPCAT_GEMM_CONV, 10 * 2 * 3 * 3 * 4, attn_bwd, &ad, b0, b1, b2, NULL, b3, b4, s2,
           s3, b2 + 1024, b2 + 2048, b2 + 4096);
    ad.causal = true;
    EXPECT(AMP_OPCAT_GEMM_CONV, 2 * 2 * 3 * 3 * 4, attn_fwd, &ad, b0, b1, b2, NULL, b3, s2);
    amp_xent_desc xd = {.rows = 4, .classes = 10, .dt = AMP_F32, .ignore_index = -100};
    EXPECT(AMP_OPCAT_ELEMENTWISE, 4 * 4 * 10, xent_fwd, &xd, b0, labels, b1, s0);
    s1[0] = 1.0f;
    EXPECT(AMP_OPCAT_ELEMENTWISE, 4 * 4 * 10, xent_bwd, &xd, b0, labels, b1, s1, b2);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 3 * 50, mse_fwd, AMP_F32, 50, b0, b1, s0);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 2 * 50, mse_bwd, AMP_F32, 50, b0, b1, s1, b2);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 64, dropout_fwd, AMP_F32, 64, b0, 0.5f, 7, 0, b1, mask);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 64, dropout_bwd, AMP_F32, 64, b1, mask, 0.5f, b2);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 0, fill, b0, AMP_F32, 10, 1.0f);
    EXPECT(AMP_OPCAT_ELEMENTWISE, 10, fill_scalar, b0, AMP_F32, 10, s1, 2.0f);
    EXPECT_DEV(AMP_OPCAT_ELEMENTWISE, 0, copy, b1, b0, 40 * sizeof(float));
    EXPECT(AMP_OPCAT_CAST, 0, cast, b1, AMP_BF16, b0, AMP_F32, 100);
}

static void optimizers(void) {
    const int64_t numel[2] = {30, 20};
    void *grad[2] = {b0, b0 + 30};
    float *param[2] = {b1, b1 + 30}, *m1[2] = {b2, b2 + 30}, *m2[2] = {b3, b3 + 30};
    amp_opt_tensors t = {.n = 2, .numel = numel, .grad = grad, .grad_dtype = AMP_F32,
                         .param = param, .state1 = m1, .state2 = m2};
    amp_sgd_desc sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .first_step = true};
    EXPECT(AMP_OPCAT_OPTIMIZER, (3 + 2 + 2) * 50, sgd_multi, &sgd, &t, NULL);
    sgd.weight_decay = 0.0f;
    EXPECT(AMP_OPCAT_OPTIMIZER, (3 + 2) * 50, sgd_multi, &sgd, &t, NULL);
    sgd.momentum = 0.0f;
    t.state1 = NULL;
    EXPECT(AMP_OPCAT_OPTIMIZER, 3 * 50, sgd_multi, &sgd, &t, NULL);
    t.state1 = m1;
    amp_adam_desc adam = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 1};
    EXPECT(AMP_OPCAT_OPTIMIZER, 12 * 50, adam_multi, &adam, &t, NULL);
    amp_lamb_desc lamb = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f,
                          .weight_decay = 0.01f, .decoupled = true, .bias_correction = true,
                          .grad_averaging = true, .max_grad_norm = 1.0f, .step = 1};
    EXPECT(AMP_OPCAT_OPTIMIZER, 16 * 50, lamb_multi, &lamb, &t, NULL);
    s0[0] = 0.0f;
    EXPECT(AMP_OPCAT_OPTIMIZER, 2 * 40, unscale, AMP_F32, 40, b0, 0.5f, b4, s0);
    float *outs[2] = {b4, b4 + 30};
    EXPECT(AMP_OPCAT_OPTIMIZER, 2 * 50, unscale_multi, AMP_F32, 2, numel, (const void *const *)grad,
           0.5f, outs, s0, NULL);
    EXPECT(AMP_OPCAT_OPTIMIZER, 50, nonfinite_multi, AMP_F32, 2, numel, (const void *const *)grad,
           s0);
    EXPECT(AMP_OPCAT_OPTIMIZER, 2 * 50, sum_squares_multi, AMP_F32, 2, numel,
           (const void *const *)grad, s1, NULL);

    amp_scaler_dev dev = {.scale = 65536.0f};
    amp_scaler_params sp = {.growth_factor = 2.0f, .backoff_factor = 0.5f, .floor = 1.0f,
                            .max_scale = 16777216.0f, .growth_interval = 2000, .hysteresis = 1,
                            .dynamic = 1, .check_overflow = 1};
    s0[0] = 0.0f;
    s1[0] = s1[1] = 1.0f;
    EXPECT(AMP_OPCAT_OPTIMIZER, 0, scaler_seed, &dev, 65504.0f);
    EXPECT(AMP_OPCAT_OPTIMIZER, 0, scaler_clip, &dev, s1, s1 + 1, 0.0f);
    EXPECT(AMP_OPCAT_OPTIMIZER, 0, scaler_update, &dev, &sp, s0, true, false);
}

/* Timing adds time to the timed call's category only; a failing call counts nothing. */
static void timing_and_failure(void) {
    amp_profile_begin(true);
    CHECK_OK(AMP_BE(be, axpy, AMP_F32, 4096, 0.5f, b0, b1));
    amp_op_profile p;
    amp_profile_read(&p);
    CHECK(p.seconds[AMP_OPCAT_ELEMENTWISE] > 0.0 && p.seconds[AMP_OPCAT_GEMM_CONV] == 0.0);
    CHECK_FAILS(AMP_BE(be, cast, b1, AMP_I32, b0, AMP_F32, -1), AMP_ERR_INVALID_ARG, "");
    amp_profile_end(&p);
    CHECK(p.calls[AMP_OPCAT_ELEMENTWISE] == 1 && p.calls[AMP_OPCAT_CAST] == 0);
    /* After the end nothing is counted, and the last profile stays readable. */
    CHECK_OK(AMP_BE(be, axpy, AMP_F32, 16, 0.5f, b0, b1));
    amp_profile_read(&p);
    CHECK(p.calls[AMP_OPCAT_ELEMENTWISE] == 1);
    CHECK(amp_op_category_name(AMP_OPCAT_GEMM_CONV) && !amp_op_category_name(AMP_OPCAT_N));
}

/* One O0 training step (SGD with momentum) counted: GEMM/conv FLOPs by hand from the layers. */
static double step_gemm_flops(bool convnet, int64_t batch, amp_op_profile *p) {
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    amp_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &ctx));
    CHECK_OK(convnet ? amp_model_convnet_mnist(ctx, &m) : amp_model_mlp_mnist(ctx, &m));
    CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.01f, .momentum = 0.9f}, &opt));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (int64_t[]){batch, 1, 28, 28}, &x));
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 1, (int64_t[]){batch}, &y));
    if (!opt || !x || !y) return -1.0;
    CHECK_OK(amp_tensor_copy_from_host(y, labels, (size_t)batch * sizeof(int32_t)));
    amp_profile_begin(false);
    CHECK_OK(amp_model_forward(m, x, &logits));
    CHECK_OK(amp_cross_entropy(logits, y, &loss));
    CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_optimizer_step(opt));
    amp_profile_end(p);
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
    return p->flops[AMP_OPCAT_GEMM_CONV];
}

/* A linear layer's GEMMs in a step: forward (+ bias), weight gradient (+ bias gradient) and,
 * unless its input is the data, the input gradient. */
static double linear_flops(double b, double in, double out, bool dx) {
    return (2 * b * in * out + b * out) + (2 * b * in * out + b * out) + (dx ? 2 * b * in * out : 0);
}

/* A 5x5 'same' convolution with bias on an hw x hw image, likewise. */
static double conv_flops(double b, double cin, double cout, double hw, bool dx) {
    double macs2 = 2 * b * cout * hw * hw * cin * 25, outs = b * cout * hw * hw;
    return (macs2 + outs) + (macs2 + outs) + (dx ? macs2 : 0);
}

static void model_steps(void) {
    const int64_t b = 16;
    amp_op_profile p;
    double mlp = step_gemm_flops(false, b, &p);
    double want = linear_flops(b, 784, 2048, false) + linear_flops(b, 2048, 2048, true) +
                  linear_flops(b, 2048, 10, true);
    CHECK_MSG(mlp == want, "MLP step: %.0f GEMM FLOPs counted, %.0f by hand", mlp, want);
    CHECK(p.calls[AMP_OPCAT_OPTIMIZER] >= 1 && p.flops[AMP_OPCAT_OPTIMIZER] > 0);
    double conv = step_gemm_flops(true, b, &p);
    want = conv_flops(b, 1, 16, 28, false) + conv_flops(b, 16, 32, 14, true) +
           linear_flops(b, 7 * 7 * 32, 10, true);
    CHECK_MSG(conv == want, "ConvNet step: %.0f GEMM/conv FLOPs counted, %.0f by hand", conv, want);
    /* Batch norm: training forward with the ReLU after it fused in (nn/sequential.c) and
     * backward with the ReLU's mask, over both layers' outputs. */
    double bn = 9.0 * b * (16 * 28 * 28 + 32 * 14 * 14) + 11.0 * b * (16 * 28 * 28 + 32 * 14 * 14);
    CHECK_MSG(p.flops[AMP_OPCAT_NORM] == bn, "ConvNet step: %.0f norm FLOPs, %.0f by hand",
              p.flops[AMP_OPCAT_NORM], bn);
}

int main(void) {
    be = amp_backend_cpu();
    for (int i = 0; i < 64; i++) labels[i] = i % 10;
    for (int i = 0; i < 8192; i++) b0[i] = b1[i] = 0.25f * (float)((i % 7) - 3);
    gemm_and_conv();
    norm();
    elementwise();
    optimizers();
    timing_and_failure();
    model_steps();
    return test_summary("test_op_flops");
}
