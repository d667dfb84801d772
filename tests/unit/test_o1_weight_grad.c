/* O1's weight gradients come straight out of the weight-gradient GEMM in f32: the GEMM multiplies
 * the half operands (the per-step half cast of the weight's input side, and the half output
 * gradient), accumulates in f32 and writes the f32 parameter's gradient, with no half gradient
 * of the cast weight in between (nn/ops_linear.c, amp_gemm_grad).
 *
 * Set-up: Linear(K, OUT) under O1 with a static loss scale of 1, batch B, loss = mean of the
 * output, so the output gradient is 1 / (B * OUT) = 2^-9 in every element, exact in half, and
 * dW[o][k] = 2^-9 * sum_b half(x[b][k]) for every o. The products are exact; the reference sums
 * them in double. An f32 sum is within B * 2^-24 of it relative to sum |x|; a gradient rounded to
 * half (the torch.autocast and Apex path: a half gradient of the cast, widened) is off by up to
 * 2^-9 (bf16) or 2^-12 (f16) relative, and is representable in half everywhere. Then: the same
 * weight used twice in one step (the second contribution accumulated by the GEMM, beta 1), two
 * backwards into one step (gradient accumulation), and an f16 weight gradient beyond f16's range
 * that stays finite in f32, so the dynamic scaler takes the step. On the CPU, and on CUDA where a
 * device answers (the CUDA backend under ../shared/cudacpu included). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "amp/amp.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor_internal.h"
#include "test_devices.h"
#include "test_util.h"

#define B 64
#define K 48
#define OUT 8

static uint32_t g_lcg = 777u;
static float rand_unit(void) {
    g_lcg = g_lcg * 1664525u + 1013904223u;
    return (float)(g_lcg >> 8) / 16777216.0f;
}

static float to_half_and_back(float v, amp_dtype dt) {
    return dt == AMP_F16 ? amp_f16_bits_to_f32(amp_f32_to_f16_bits(v))
                         : amp_bf16_bits_to_f32(amp_f32_to_bf16_bits(v));
}

typedef struct rig {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_tensor *x;
    float xs[B * K];
} rig;

static amp_device g_device = AMP_DEVICE_CPU;

static bool rig_open(rig *r, amp_half_type half, float loss_scale, float x_magnitude) {
    *r = (rig){0};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = g_device, .seed = 5}, &r->ctx));
    if (!r->ctx) return false;
    CHECK_OK(amp_seq_create(r->ctx, &r->m));
    if (r->m) CHECK_OK(amp_seq_add_linear(r->m, "fc", K, OUT, true));
    if (r->m) CHECK_OK(amp_sgd_create(r->m, &(amp_sgd_opts){.lr = 1e-6f}, &r->opt));
    if (!r->opt) return false;
    CHECK_OK(amp_initialize_ex(r->m, r->opt, &(amp_options){.opt_level = AMP_O1, .half_type = half,
                                                            .loss_scale = loss_scale,
                                                            .quiet = true}));
    for (int i = 0; i < B * K; i++) r->xs[i] = (rand_unit() - 0.5f) * x_magnitude;
    CHECK_OK(amp_tensor_from_host(r->ctx, AMP_F32, 2, (int64_t[]){B, K}, r->xs, &r->x));
    return r->x != NULL;
}

static void rig_close(rig *r) {
    amp_tensor_free(r->x);
    amp_optimizer_free(r->opt);
    amp_model_free(r->m);
    amp_ctx_free(r->ctx);
}

/* The loss of `uses` applications of the layer to x (their means added). */
static amp_status forward_loss(rig *r, int uses, amp_tensor **loss) {
    amp_tensor *w = amp_model_param(r->m, 0), *b = amp_model_param(r->m, 1), *sum = NULL;
    for (int u = 0; u < uses; u++) {
        amp_tensor *h, *mean;
        AMP_TRY(amp_linear(r->x, w, b, &h));
        AMP_TRY(amp_mean(h, &mean));
        if (sum) AMP_TRY(amp_add(sum, mean, &sum));
        else sum = mean;
    }
    *loss = sum;
    return AMP_OK;
}

/* The weight's gradient against `copies` times the f32-accumulated reference; returns the worst
 * error in units of the f32 bound, and counts the elements exactly representable in half. */
static double check_grad(rig *r, amp_dtype half, int copies, int *representable) {
    amp_tensor *w = amp_model_param(r->m, 0), *g = NULL;
    CHECK_OK(amp_tensor_get_grad(w, &g));
    if (!g) return INFINITY;
    CHECK(g->dtype == AMP_F32);
    float dw[OUT * K];
    CHECK_OK(amp_tensor_to_host(g, dw, sizeof dw));
    /* The bias gradient comes out of the same GEMM (its bias_grad, a fused epilogue on CUDA, also
     * when the GEMM accumulates into dW): copies * B * 2^-9, exact. */
    amp_tensor *gb = NULL;
    CHECK_OK(amp_tensor_get_grad(amp_model_param(r->m, 1), &gb));
    float db[OUT] = {0};
    if (gb) CHECK_OK(amp_tensor_to_host(gb, db, sizeof db));
    for (int o = 0; o < OUT; o++)
        CHECK_MSG(db[o] == copies * B / 512.0f, "bias gradient %d: %g, want %g", o, (double)db[o],
                  copies * B / 512.0);
    double worst = 0;
    *representable = 0;
    for (int k = 0; k < K; k++) {
        double ref = 0, mag = 0;
        for (int b = 0; b < B; b++) {
            double xh = to_half_and_back(r->xs[b * K + k], half);
            ref += xh;
            mag += fabs(xh);
        }
        ref *= copies / 512.0;
        double bound = copies * (mag / 512.0) * B * 0x1p-24 + 1e-30;
        for (int o = 0; o < OUT; o++) {
            double e = fabs(dw[o * K + k] - ref) / bound;
            if (e > worst) worst = e;
            *representable += to_half_and_back(dw[o * K + k], half) == dw[o * K + k];
        }
    }
    return worst;
}

static void test_f32_weight_grad(amp_half_type ht, amp_dtype half) {
    const char *name = amp_dtype_name(half);
    rig r;
    if (rig_open(&r, ht, 1.0f, 1.0f)) {
        amp_tensor *loss = NULL;
        CHECK_OK(forward_loss(&r, 1, &loss));
        if (loss) CHECK_OK(amp_backward(loss));
        int rep = 0;
        double worst = check_grad(&r, half, 1, &rep);
        CHECK_MSG(worst <= 1.0, "%s: weight gradient off the f32 sum by %.3g bounds", name, worst);
        /* A half-rounded gradient would be representable everywhere. */
        CHECK_MSG(rep < OUT * K / 4, "%s: %d of %d weight-gradient elements are half values", name,
                  rep, OUT * K);

        /* A second backward into the same step accumulates (beta 1 on the f32 gradient). */
        CHECK_OK(forward_loss(&r, 1, &loss));
        if (loss) CHECK_OK(amp_backward(loss));
        worst = check_grad(&r, half, 2, &rep);
        CHECK_MSG(worst <= 2.0, "%s: two backwards: off by %.3g bounds", name, worst);
        bool stepped = false;
        CHECK_OK(amp_step(r.opt, &stepped));
        CHECK(stepped);
        CHECK_OK(amp_zero_grad(r.opt));

        /* The weight used twice in one forward: one cast, two GEMM contributions. */
        CHECK_OK(forward_loss(&r, 2, &loss));
        if (loss) CHECK_OK(amp_backward(loss));
        worst = check_grad(&r, half, 2, &rep);
        CHECK_MSG(worst <= 2.0, "%s: weight used twice: off by %.3g bounds", name, worst);
    }
    rig_close(&r);
}

/* f16 with the dynamic scale (65536 at the start): the output gradient is 2^16 / 512 = 128, and
 * with |x| up to 600 a weight gradient reaches 128 * 64 * 300 ~ 2.5e6, beyond f16's 65504, where
 * the input gradient (x needs none here) and the forward stay in range. In f32 it is finite, so
 * nothing overflowed: the step is taken and the scale kept. */
static void test_f16_weight_grad_beyond_range(void) {
    rig r;
    if (rig_open(&r, AMP_HALF_F16, 0.0f, 1200.0f)) {
        for (int i = 0; i < B * K; i++) r.xs[i] = fabsf(r.xs[i]); /* sums that grow */
        CHECK_OK(amp_tensor_copy_from_host(r.x, r.xs, sizeof r.xs));
        amp_scaler_state before, after;
        CHECK_OK(amp_scaler_get_state(r.opt, 0, &before));
        amp_tensor *loss = NULL;
        CHECK_OK(forward_loss(&r, 1, &loss));
        if (loss) CHECK_OK(amp_backward(loss));
        amp_tensor *g = NULL;
        CHECK_OK(amp_tensor_get_grad(amp_model_param(r.m, 0), &g));
        float dw[OUT * K], big = 0;
        if (g) CHECK_OK(amp_tensor_to_host(g, dw, sizeof dw));
        for (int i = 0; g && i < OUT * K; i++) big = fmaxf(big, fabsf(dw[i]));
        CHECK_MSG(isfinite(big) && big > 65504.0f, "largest scaled weight gradient %g: want "
                  "finite and beyond f16's range (else the test proves nothing)", (double)big);
        bool stepped = false;
        CHECK_OK(amp_step(r.opt, &stepped));
        CHECK_MSG(stepped, "the step was skipped for a weight gradient that is finite in f32");
        CHECK_OK(amp_scaler_get_state(r.opt, 0, &after));
        CHECK(after.scale == before.scale);
    }
    rig_close(&r);
}

static void run_on(amp_device device) {
    g_device = device;
    test_f32_weight_grad(AMP_HALF_BF16, AMP_BF16);
    test_f32_weight_grad(AMP_HALF_F16, AMP_F16);
    test_f16_weight_grad_beyond_range();
}

int main(void) {
    test_on_each_device(run_on);
    return test_summary("test_o1_weight_grad");
}
