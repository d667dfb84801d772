/* Fused causal attention on the CPU, forward + backward through the public API, against the
 * same shape in PyTorch (bench/attention_torch.py, F.scaled_dot_product_attention(is_causal=True)
 * with the same threads): `attention_cpu [B H T D [reps [f32|bf16|f16 [KV]]]]` (KV: key/value
 * heads of grouped-query attention, default H) prints the median
 * time of a forward and backward, its FLOP rate (FlashAttention's convention: 2 B H T^2 D
 * forward causal, 2.5 times that backward), the ledger's peak above the inputs, and the saved
 * state plus workspace beside the B H T^2 f32 probabilities a naive attention keeps (the CPU is
 * synchronous: the time is the work), and the ledger's bytes of the inputs and of the peak, whose
 * difference between KV = H and KV < H is what k, v and their gradients save. Results:
 * bench/RESULTS.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amp/amp.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((call) != AMP_OK) {                                                                    \
            fprintf(stderr, "attention_cpu: %s\n", amp_last_error());                              \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    int64_t shape[4] = {8, 8, 1024, 64};
    for (int i = 0; i < 4 && i + 1 < argc; i++) shape[i] = atoll(argv[i + 1]);
    int reps = argc > 5 ? atoi(argv[5]) : 5;
    const char *dname = argc > 6 ? argv[6] : "f32";
    amp_dtype dt = !strcmp(dname, "bf16") ? AMP_BF16 : !strcmp(dname, "f16") ? AMP_F16 : AMP_F32;
    if (dt == AMP_F32 && strcmp(dname, "f32")) {
        fprintf(stderr, "attention_cpu: dtype %s is not f32, bf16 or f16\n", dname);
        return 2;
    }
    int64_t kv = argc > 7 ? atoll(argv[7]) : shape[1];
    if (argc > 8 || kv < 1 || shape[1] % kv != 0 || shape[0] < 1 || shape[1] < 1 || shape[2] < 1 || shape[3] < 1 || reps < 1) {
        fprintf(stderr, "usage: attention_cpu [B H T D [reps [f32|bf16|f16 [KV]]]]: each at least "
                        "1, KV dividing H (default 8 8 1024 64 5 f32 8)\n");
        return 2;
    }
    int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    const int64_t kv_shape[4] = {shape[0], kv, shape[2], shape[3]};
    amp_ctx *ctx;
    TRY(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &ctx));
    float *host = malloc((size_t)n * sizeof *host);
    amp_tensor *x[3];
    for (int a = 0; a < 3; a++) {
        const int64_t *sh = a ? kv_shape : shape;
        int64_t na = a ? n / shape[1] * kv : n;
        for (int64_t i = 0; i < na; i++) host[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        TRY(amp_tensor_from_host(ctx, AMP_F32, 4, sh, host, &x[a]));
        if (dt != AMP_F32) { /* the inputs in the half type, rounded by a cast */
            amp_tensor *h = NULL;
            TRY(amp_cast(x[a], dt, &h));
            TRY(amp_tensor_to_host(h, host, (size_t)na * 2));
            amp_ctx_reset_step(ctx);
            amp_tensor_free(x[a]);
            TRY(amp_tensor_from_host(ctx, dt, 4, sh, host, &x[a]));
        }
        TRY(amp_tensor_set_requires_grad(x[a], true));
    }
    double *t = malloc((size_t)(reps + 1) * sizeof *t), *tf = malloc((size_t)(reps + 1) * sizeof *tf);
    /* The peak over every run (the first, a warm-up, grows the step arena and the threads' tile
     * arenas, which the others reuse) above what the inputs held. */
    amp_mem_usage before, peak;
    TRY(amp_ctx_memory_usage(ctx, &before, NULL));
    amp_ctx_memory_reset_peak(ctx);
    for (int r = 0; r <= reps; r++) {
        double t0 = now();
        amp_tensor *y, *loss;
        amp_attention_options o = {.causal = true};
        TRY(amp_scaled_dot_product_attention(x[0], x[1], x[2], &o, &y));
        tf[r] = now() - t0;
        TRY(amp_mean(y, &loss));
        TRY(amp_backward(loss));
        t[r] = now() - t0;
        amp_ctx_reset_step(ctx);
        for (int a = 0; a < 3; a++) amp_tensor_zero_grad(x[a]);
    }
    TRY(amp_ctx_memory_usage(ctx, NULL, &peak));
    qsort(t + 1, (size_t)reps, sizeof *t, cmp);
    qsort(tf + 1, (size_t)reps, sizeof *tf, cmp);
    double med = t[1 + reps / 2], med_fwd = tf[1 + reps / 2];
    double flops = 3.5 * 2.0 * (double)shape[0] * (double)shape[1] * (double)shape[2] *
                   (double)shape[2] * (double)shape[3];
    double saved = 2.0 * 4.0 * (double)shape[0] * (double)shape[1] * (double)shape[2];
    double probs = 4.0 * (double)shape[0] * (double)shape[1] * (double)shape[2] * (double)shape[2];
    printf("attention_cpu %s causal [%lld, %lld, %lld, %lld] kv_heads %lld: forward+backward %.1f "
           "ms (forward %.1f; median of %d), %.1f GFLOP/s; inputs %.1f MB, peak %.1f MB above them "
           "(outputs and gradients included); saved state + workspace %.1f MB (the logsumexp and "
           "delta, %.1f MB, and the ledger's workspace at the peak); naive probabilities %.1f MB\n",
           dname, (long long)shape[0], (long long)shape[1], (long long)shape[2], (long long)shape[3],
           (long long)kv, 1e3 * med, 1e3 * med_fwd, reps, flops / med / 1e9,
           (double)before.total / 1e6, (double)(peak.total - before.total) / 1e6,
           (saved + (double)peak.bytes[AMP_MEM_WORKSPACE]) / 1e6, saved / 1e6, probs / 1e6);
    for (int a = 0; a < 3; a++) amp_tensor_free(x[a]);
    amp_ctx_free(ctx);
    free(host);
    free(t);
    free(tf);
    return 0;
}
