/* Peak backend memory of a few training steps of the MNIST MLP (5.8M parameters, SGD with
 * momentum, batch 64) at O0..O3 with f16 and bf16, from the backend's own counters
 * (amp_ctx_memory). Apex's O3 is pure half: no f32 copy of the weights or their gradients at any
 * time, so it must hold the least; O2 holds f32 masters and master gradients beside the half model.
 * The figures are exact byte counts of what the library allocates, not timings: the same on every
 * run, so the order is asserted. */
#include <stdio.h>

#include "amp/amp.h"
#include "test_util.h"

#define BATCH 64
#define STEPS 3

/* Peak bytes of STEPS training steps (model, optimizer, amp state and step memory), or 0 on
 * failure; *init_peak: the peak of building and amp_initialize, where a cast model briefly holds
 * its f32 and its half blocks together. */
static size_t peak_of(amp_opt_level level, amp_half_type half, size_t *init_peak) {
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    amp_tensor *x = NULL, *y = NULL;
    size_t peak = 0;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &ctx));
    if (!ctx) return 0;
    amp_ctx_memory_reset_peak(ctx);
    amp_status s = amp_model_mlp_mnist(ctx, &m);
    if (s == AMP_OK) s = amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.01f, .momentum = 0.9f}, &opt);
    if (s == AMP_OK)
        s = amp_initialize_ex(m, opt, &(amp_options){.opt_level = level, .half_type = half,
                                                     .quiet = true});
    if (s == AMP_OK) s = amp_tensor_create(ctx, AMP_F32, 4, (int64_t[]){BATCH, 1, 28, 28}, &x);
    if (s == AMP_OK) s = amp_tensor_create(ctx, AMP_I32, 1, (int64_t[]){BATCH}, &y);
    if (s == AMP_OK) CHECK_OK(amp_ctx_memory(ctx, NULL, init_peak));
    amp_ctx_memory_reset_peak(ctx); /* from here: what training holds */
    for (int i = 0; s == AMP_OK && i < STEPS; i++) {
        amp_tensor *logits, *loss;
        s = amp_model_forward(m, x, &logits);
        if (s == AMP_OK) s = amp_cross_entropy(logits, y, &loss);
        if (s == AMP_OK) s = amp_backward(loss);
        if (s == AMP_OK) s = amp_step(opt, NULL);
        if (s == AMP_OK) s = amp_zero_grad(opt);
    }
    CHECK_MSG(s == AMP_OK, "O%d: %s", (int)level, amp_last_error());
    if (s == AMP_OK) CHECK_OK(amp_ctx_memory(ctx, NULL, &peak));
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
    return s == AMP_OK ? peak : 0;
}

int main(void) {
    const amp_half_type halves[2] = {AMP_HALF_F16, AMP_HALF_BF16};
    printf("MLP (5.8M parameters), SGD momentum, batch %d: peak backend MiB of %d training "
           "steps (of building + amp_initialize)\n", BATCH, STEPS);
    for (int h = 0; h < 2; h++) {
        size_t peak[4], init[4] = {0};
        for (int l = 0; l < 4; l++) peak[l] = peak_of((amp_opt_level)l, halves[h], &init[l]);
        printf("  %-4s", h ? "bf16" : "f16");
        for (int l = 0; l < 4; l++)
            printf("  O%d %.1f (%.1f)", l, peak[l] / 1048576.0, init[l] / 1048576.0);
        printf("\n");
        for (int l = 0; l < 3; l++)
            CHECK_MSG(peak[3] > 0 && peak[3] < peak[l], "%s: O3 peak %zu bytes, O%d %zu",
                      h ? "bf16" : "f16", peak[3], l, peak[l]);
    }
    return test_summary("test_amp_memory");
}
