/* A NaN in the input reaches the loss at every opt level, whatever is fused (a Sequential MLP runs
 * Linear + ReLU as one GEMM with a ReLU epilogue, whose cuBLASLt form turns NaN into +0): PyTorch
 * prints nan there, and so must libamp. Through the public API, on every device that answers
 * (the CPU, and the CUDA backend on a GPU or under cudacpu):
 *  - the step whose batch holds one NaN has a NaN loss at O0, O1, O2 and O3, f16 and bf16;
 *  - at O0 (no inf checks, as Apex's and PyTorch's O0) that step writes NaN into the weights, and
 *    no later loss is finite: a network that lost its weights says so;
 *  - with a dynamic f16 scaler (O1, O2) the step is skipped: the weights stay finite and the next
 *    clean batch's loss is finite again;
 *  - the logits of the NaN sample are NaN and the other samples' are not. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "amp/amp.h"
#include "test_devices.h"
#include "test_util.h"

#define NAME "test_nan_loss"
enum { BATCH = 8, IN = 20, HID = 24, OUT = 5 };

static amp_model *mlp(amp_ctx *ctx) {
    amp_model *m = NULL;
    CHECK_OK(amp_seq_create(ctx, &m));
    CHECK_OK(amp_seq_add_linear(m, "fc1", IN, HID, true));
    CHECK_OK(amp_seq_add_relu(m, "relu1"));
    CHECK_OK(amp_seq_add_linear(m, "fc2", HID, HID, true));
    CHECK_OK(amp_seq_add_relu(m, "relu2"));
    CHECK_OK(amp_seq_add_linear(m, "fc3", HID, OUT, true));
    return m;
}

/* The loss of one step on x (nan_at >= 0: x[nan_at] is NaN), the logits copied to host. */
static float step(amp_ctx *ctx, amp_model *m, amp_optimizer *opt, int nan_at, int seed,
                  float logits[BATCH * OUT], bool *stepped) {
    float xs[BATCH * IN];
    int32_t ys[BATCH];
    for (int i = 0; i < BATCH * IN; i++) xs[i] = (float)sin(0.37 * i + seed);
    for (int i = 0; i < BATCH; i++) ys[i] = (i + seed) % OUT;
    if (nan_at >= 0) xs[nan_at] = NAN;
    amp_tensor *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (int64_t[]){BATCH, IN}, xs, &x));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (int64_t[]){BATCH}, ys, &y));
    CHECK_OK(amp_model_forward(m, x, &out));
    CHECK_OK(amp_cross_entropy(out, y, &loss));
    float l = 0;
    CHECK_OK(amp_tensor_item(loss, &l));
    CHECK_OK(amp_tensor_to_host_f32(out, logits, sizeof(float) * BATCH * OUT));
    CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_step(opt, stepped));
    CHECK_OK(amp_zero_grad(opt));
    amp_tensor_free(x);
    amp_tensor_free(y);
    return l;
}

/* Non-finite values among fc1's weights (the model's own, half at O2 and O3). */
static int nonfinite_weights(amp_model *m) {
    float host[HID * IN];
    amp_tensor *w = NULL;
    CHECK_OK(amp_model_find(m, "fc1.weight", &w));
    if (!w) return -1;
    CHECK_OK(amp_tensor_to_host_f32(w, host, sizeof host));
    int n = 0;
    for (int i = 0; i < HID * IN; i++) n += !isfinite(host[i]);
    return n;
}

static void run_level(amp_device device, amp_opt_level level, amp_half_type half) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 3}, &ctx));
    amp_model *m = mlp(ctx);
    amp_optimizer *opt = NULL;
    CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.05f, .momentum = 0.9f}, &opt));
    amp_options o = {.opt_level = level, .half_type = half, .quiet = true};
    CHECK_OK(amp_initialize_ex(m, opt, &o));
    const char *levels[] = {"O0", "O1", "O2", "O3"};
    const char *what = levels[level], *hn = half == AMP_HALF_BF16 ? "bf16" : "f16";

    float logits[BATCH * OUT];
    bool stepped = false;
    float clean = step(ctx, m, opt, -1, 0, logits, &stepped);
    CHECK_MSG(isfinite(clean), "%s %s: a clean batch's loss is %g", what, hn, (double)clean);

    /* Sample 2 holds the NaN. */
    float l = step(ctx, m, opt, 2 * IN + 7, 1, logits, &stepped);
    CHECK_MSG(isnan(l), "%s %s: the loss of a batch with a NaN input is %g, want nan", what, hn,
              (double)l);
    int nan_rows = 0, other = 0;
    for (int i = 0; i < BATCH; i++)
        for (int j = 0; j < OUT; j++) {
            bool bad = isnan(logits[i * OUT + j]);
            if (i == 2) nan_rows += bad;
            else other += bad;
        }
    CHECK_MSG(nan_rows == OUT && other == 0, "%s %s: NaN logits: %d of the NaN sample's %d, %d "
              "elsewhere", what, hn, nan_rows, OUT, other);

    if (level == AMP_O0) {
        /* No inf checks at O0: the NaN reaches the weights, and every later loss says so. */
        CHECK_MSG(stepped && nonfinite_weights(m) > 0,
                  "%s: the NaN step did not reach fc1's weights (stepped %d)", what, stepped);
        for (int s = 2; s < 5; s++) {
            float later = step(ctx, m, opt, -1, s, logits, &stepped);
            CHECK_MSG(!isfinite(later), "%s: loss %g on clean batch %d after NaN weights", what,
                      (double)later, s);
        }
    } else {
        CHECK_MSG(!stepped, "%s %s: the NaN step was not skipped", what, hn);
        CHECK_MSG(nonfinite_weights(m) == 0, "%s %s: the skipped step changed the weights", what,
                  hn);
        float later = step(ctx, m, opt, -1, 2, logits, &stepped);
        CHECK_MSG(isfinite(later), "%s %s: loss %g on the clean batch after a skipped step", what,
                  hn, (double)later);
    }
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

static void body(amp_device device) {
    run_level(device, AMP_O0, AMP_HALF_F16);
    for (int half = AMP_HALF_F16; half <= AMP_HALF_BF16; half++)
        for (int level = AMP_O1; level <= AMP_O3; level++)
            run_level(device, (amp_opt_level)level, (amp_half_type)half);
}

int main(void) {
    test_on_each_device(body);
    return test_summary(NAME);
}
