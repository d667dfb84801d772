/* Sampling from the README's default Llama (4 layers, 256 wide, 8 heads over 2 key/value heads,
 * intermediate 704, vocabulary 256), random weights: `lm_sample [N [prompt [reps]]]` draws N
 * tokens (default 256) after a prompt of `prompt` tokens (default 16) with the key/value cache
 * and by full forwards of the window (amp_llama_generate), on the CPU with this machine's
 * threads, and prints the median time of each, their ratio and whether the two drew the same
 * tokens. Results: bench/results/. */
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

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 256, np = argc > 2 ? atol(argv[2]) : 16;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    if (argc > 4 || n < 1 || np < 1 || reps < 1 || n + np > 4096) {
        fprintf(stderr, "usage: lm_sample [N [prompt [reps]]]: N, prompt, reps >= 1, N + prompt "
                        "<= 4096 (default 256 16 3)\n");
        return 2;
    }
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    amp_llama_config cfg = {.vocab_size = 256, .hidden_size = 256, .intermediate_size = 704,
                            .num_hidden_layers = 4, .num_attention_heads = 8,
                            .num_key_value_heads = 2, .max_position_embeddings = n + np,
                            .rms_norm_eps = 1e-5f};
    int32_t *prompt = malloc((size_t)np * sizeof *prompt), *a = malloc((size_t)n * sizeof *a),
            *b = malloc((size_t)n * sizeof *b);
    double tc[16], tf[16];
    if (reps > 16) reps = 16;
    for (long i = 0; i < np; i++) prompt[i] = (int32_t)((i * 37 + 11) % 256);
    amp_status s = amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &ctx);
    if (s == AMP_OK) s = amp_llama_create(ctx, &cfg, &m);
    if (s == AMP_OK) s = amp_model_build(m);
    amp_lm_sample_opts o = {.temperature = 1.0f, .seed = 3};
    for (int r = 0; r < reps && s == AMP_OK; r++) {
        double t0 = now();
        s = amp_llama_generate(m, prompt, np, n, &o, true, a);
        tc[r] = now() - t0;
        t0 = now();
        if (s == AMP_OK) s = amp_llama_generate(m, prompt, np, n, &o, false, b);
        tf[r] = now() - t0;
    }
    if (s != AMP_OK) {
        fprintf(stderr, "lm_sample: %s\n", amp_last_error());
        return 1;
    }
    qsort(tc, (size_t)reps, sizeof *tc, cmp);
    qsort(tf, (size_t)reps, sizeof *tf, cmp);
    double c = tc[reps / 2], f = tf[reps / 2];
    printf("lm_sample: %ld tokens after %ld: with the cache %.1f ms (%.2f ms a token), by full "
           "forwards %.1f ms (%.2f ms a token): %.1fx; the same tokens: %s (median of %d)\n", n,
           np, 1e3 * c, 1e3 * c / (double)n, 1e3 * f, 1e3 * f / (double)n, f / c,
           memcmp(a, b, (size_t)n * sizeof *a) ? "no" : "yes", reps);
    amp_model_free(m);
    amp_ctx_free(ctx);
    free(prompt);
    free(a);
    free(b);
    return 0;
}
