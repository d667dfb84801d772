/* LayerNorm, GELU and softmax forward on the CPU against the memory bandwidth of a copy of the
 * same bytes: `rowops_cpu [rows cols [reps]]` (default 16384 x 768 f32, 50 MB a tensor, past
 * every cache) prints each op's GB/s (one read and one write of the tensor, as the copy) and
 * its fraction of the copy's: a plain loop between two buffers of the tensor's size, on the
 * same threads, storing as the ops store (glibc's memcpy switches to non-temporal stores at
 * this size, and measured 42 or 83 GB/s from run to run here). Results: bench/RESULTS.md. */
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

/* to[i] = from[i] in the threads' static split, kept a loop of plain stores (GCC would call
 * memcpy, which switches to non-temporal stores at this size). */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) static void
copy_floats(const float *from, float *to, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) to[i] = from[i];
}

enum { OP_COPY, OP_LAYER_NORM, OP_GELU, OP_SOFTMAX, N_OPS };
static const char *names[N_OPS] = {"copy", "layer_norm", "gelu (tanh)", "softmax"};

static double median_seconds(amp_ctx *ctx, int op, amp_tensor *x, amp_tensor *g, amp_tensor *b,
                             void *src, void *dst, size_t bytes, int reps) {
    double t[64];
    for (int r = 0; r <= reps; r++) { /* the first is a warm-up */
        amp_tensor *y = NULL;
        double t0 = now();
        amp_status s = AMP_OK;
        switch (op) {
        case OP_COPY: copy_floats(src, dst, bytes / sizeof(float)); break;
        case OP_LAYER_NORM: s = amp_norm(x, NULL, g, b, &(amp_norm_opts){.eps = 1e-5f}, NULL, &y); break;
        case OP_GELU: s = amp_gelu(x, true, &y); break;
        default: s = amp_softmax(x, -1, &y); break;
        }
        t[r] = now() - t0;
        if (s != AMP_OK) {
            fprintf(stderr, "rowops_cpu: %s\n", amp_last_error());
            exit(1);
        }
        amp_ctx_reset_step(ctx);
    }
    qsort(t + 1, (size_t)reps, sizeof *t, cmp);
    return t[1 + reps / 2];
}

int main(int argc, char **argv) {
    int64_t rows = argc > 2 ? atoll(argv[1]) : 16384, cols = argc > 2 ? atoll(argv[2]) : 768;
    int reps = argc > 3 ? atoi(argv[3]) : 9;
    if (argc == 2 || argc > 4 || rows < 1 || cols < 1 || reps < 1 || reps > 63) {
        fprintf(stderr, "usage: rowops_cpu [rows cols [reps]]: rows and cols at least 1, reps "
                        "1 to 63 (default 16384 768 9)\n");
        return 2;
    }
    amp_ctx *ctx;
    if (amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &ctx) != AMP_OK) {
        fprintf(stderr, "rowops_cpu: %s\n", amp_last_error());
        return 1;
    }
    amp_set_grad_enabled(ctx, false);
    size_t n = (size_t)(rows * cols), bytes = n * sizeof(float);
    float *host = malloc(bytes), *dst = malloc(bytes), *ones = malloc((size_t)cols * sizeof *ones);
    for (size_t i = 0; i < n; i++) host[i] = (float)(i % 977) * 0.01f - 4.0f;
    for (int64_t j = 0; j < cols; j++) ones[j] = 1.0f;
    memset(dst, 0, bytes);
    amp_tensor *x, *g, *b;
    const int64_t shape[2] = {rows, cols};
    if (amp_tensor_from_host(ctx, AMP_F32, 2, shape, host, &x) != AMP_OK ||
        amp_tensor_from_host(ctx, AMP_F32, 1, &cols, ones, &g) != AMP_OK ||
        amp_tensor_from_host(ctx, AMP_F32, 1, &cols, ones, &b) != AMP_OK) {
        fprintf(stderr, "rowops_cpu: %s\n", amp_last_error());
        return 1;
    }
    double copy = 0.0;
    printf("rowops_cpu f32 [%lld, %lld] (%.1f MB a tensor), median of %d:\n", (long long)rows,
           (long long)cols, (double)bytes / 1e6, reps);
    for (int op = 0; op < N_OPS; op++) {
        double s = median_seconds(ctx, op, x, g, b, host, dst, bytes, reps);
        double gbs = 2.0 * (double)bytes / s / 1e9;
        if (op == OP_COPY) copy = gbs;
        printf("  %-14s %7.3f ms  %6.1f GB/s  %5.1f %% of the copy\n", names[op], 1e3 * s, gbs,
               100.0 * gbs / copy);
    }
    amp_tensor_free(x);
    amp_tensor_free(g);
    amp_tensor_free(b);
    amp_ctx_free(ctx);
    free(host);
    free(dst);
    free(ones);
    return 0;
}
