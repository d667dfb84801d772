/* Streams on the CUDA backend: the caching allocator with a second stream (PyTorch's
 * recordStream), and batches staged on the copy stream (amp_stager) while compute runs.
 * Meant for CUDACPU_STREAMS=random (the cudacpu build runs it so, see tests/gpu/CMakeLists.txt),
 * where work on unordered streams runs in a random order at each sync point: a missing event
 * shows as a wrong byte. Without a device it reports SKIPPED. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "amp/amp.h"
#include "kernels/cuda/cuda_backend.h"
#include "test_util.h"

#define BLOCK_BYTES 4096
#define ROUNDS 64

/* Bytes of n at device p that are not `byte`. */
static size_t count_not(const void *p, unsigned char byte, size_t n) {
    unsigned char *h = malloc(n);
    size_t bad = n;
    if (h && cudaMemcpy(h, p, n, cudaMemcpyDeviceToHost) == cudaSuccess) {
        bad = 0;
        for (size_t i = 0; i < n; i++) bad += h[i] != byte;
    }
    free(h);
    return bad;
}

/* A block written on a side stream, freed, and allocated again for work on the backend's
 * stream: with record_stream the new owner's writes land after the side stream's, always. */
static size_t reuse_rounds(cudaStream_t side, bool record) {
    size_t corrupted = 0;
    for (int r = 0; r < ROUNDS; r++) {
        void *p = NULL, *q = NULL;
        CHECK_OK(amp_cuda_alloc(amp_cuda_device(), BLOCK_BYTES, &p));
        CHECK(cudaMemsetAsync(p, 0xAB, BLOCK_BYTES, side) == cudaSuccess);
        if (record) CHECK_OK(amp_cuda_record_stream(amp_cuda_device(), p, side));
        amp_cuda_free(amp_cuda_device(), p);
        CHECK_OK(amp_cuda_alloc(amp_cuda_device(), BLOCK_BYTES, &q));
        CHECK(cudaMemsetAsync(q, 0x00, BLOCK_BYTES, amp_cuda_device()->stream) == cudaSuccess);
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        corrupted += count_not(q, 0x00, BLOCK_BYTES) != 0;
        amp_cuda_free(amp_cuda_device(), q);
    }
    return corrupted;
}

static void test_record_stream(void) {
    cudaStream_t side;
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
    size_t bad = reuse_rounds(side, true);
    CHECK_MSG(bad == 0, "with record_stream, %zu of %d reused blocks held the side stream's "
              "bytes", bad, ROUNDS);
    /* The same without record_stream is a race; where streams interleave at random it must show,
     * or the check above proves nothing. */
    const char *mode = getenv("CUDACPU_STREAMS");
    if (mode && !strncmp(mode, "random", 6)) {
        size_t raced = reuse_rounds(side, false);
        printf("without record_stream: %zu of %d reused blocks corrupted (the race this guards "
               "against)\n", raced, ROUNDS);
        CHECK_MSG(raced > 0, "the deliberate race was never observed in %d rounds", ROUNDS);
    }
    CHECK(cudaStreamDestroy(side) == cudaSuccess);
    CHECK_FAILS(amp_cuda_record_stream(amp_cuda_device(), (void *)(uintptr_t)0x1000, side),
                AMP_ERR_INVALID_ARG, "not a live block");
}

/* Batches through the stager, each read by a queued op before the next puts: every step sees
 * its own batch, whatever order the copy and compute streams run in. */
static void test_stager(void) {
    amp_ctx *ctx = NULL;
    amp_stager *st = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CUDA, .seed = 1}, &ctx));
    if (!ctx) return;
    CHECK_OK(amp_stager_create(ctx, &st));
    enum { N = 8, C = 1, H = 4, W = 4, PIX = C * H * W, BATCHES = 12 };
    float hx[N * PIX];
    int32_t hy[N];
    for (int k = 0; k < BATCHES; k++) {
        int64_t n = k == BATCHES - 1 ? N / 2 : N; /* a short last batch re-makes a pair */
        for (int i = 0; i < n * PIX; i++) hx[i] = (float)(k * 1000 + i);
        for (int i = 0; i < n; i++) hy[i] = k * 10 + i;
        amp_batch b = {.x = hx, .y = hy, .n = n, .shape = {n, C, H, W}, .epoch = 0, .index = k};
        amp_tensor *x = NULL, *y = NULL, *m = NULL;
        CHECK_OK(amp_stager_put(st, &b, &x, &y));
        /* The caller's buffers are free at once: scribble over them. */
        memset(hx, 0xFF, sizeof hx);
        memset(hy, 0xFF, sizeof hy);
        if (!x) break;
        CHECK_OK(amp_mean(x, &m));
        float got = 0, want = 0;
        for (int i = 0; i < n * PIX; i++) want += (float)(k * 1000 + i);
        want /= (float)(n * PIX);
        CHECK_OK(amp_tensor_item(m, &got));
        CHECK_MSG(got == want, "batch %d: mean %g, want %g", k, (double)got, (double)want);
        int32_t labels[N];
        CHECK_OK(amp_tensor_to_host(y, labels, sizeof(int32_t) * (size_t)n));
        for (int i = 0; i < n; i++) CHECK(labels[i] == k * 10 + i);
        amp_ctx_reset_step(ctx);
    }
    amp_batch end = {0};
    amp_tensor *x, *y;
    CHECK_FAILS(amp_stager_put(st, &end, &x, &y), AMP_ERR_INVALID_ARG, "end-of-epoch");
    amp_stager_free(st);
    amp_ctx_free(ctx);
}

/* A pair the stager makes new takes blocks from the caching allocator, which orders a block's
 * reuse only on the compute stream: compute queued before the put may still write them (here a
 * block written on the compute stream and freed at once, and the zero fill of the new tensors).
 * The copy must wait for that compute, or the batch is overwritten after it lands. One fresh
 * stager per round, so that every put makes its pair; under CUDACPU_STREAMS=random a copy that
 * waited only on an older mark shows as a wrong batch within a few rounds. */
static void test_stager_fresh_pair(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CUDA, .seed = 1}, &ctx));
    if (!ctx) return;
    enum { N = 8, C = 1, H = 8, W = 8, PIX = C * H * W };
    float hx[N * PIX];
    int32_t hy[N];
    int wrong = 0;
    for (int r = 0; r < ROUNDS; r++) {
        void *p = NULL;
        CHECK_OK(amp_cuda_alloc(amp_cuda_device(), sizeof hx,
                                &p)); /* the class the batch's x will take */
        CHECK(cudaMemsetAsync(p, 0xFF, sizeof hx, amp_cuda_device()->stream) == cudaSuccess);
        amp_cuda_free(amp_cuda_device(), p);
        amp_stager *st = NULL;
        CHECK_OK(amp_stager_create(ctx, &st));
        for (int i = 0; i < N * PIX; i++) hx[i] = (float)(r + i % 7);
        for (int i = 0; i < N; i++) hy[i] = r + i;
        amp_batch b = {.x = hx, .y = hy, .n = N, .shape = {N, C, H, W}, .index = r};
        amp_tensor *x = NULL, *y = NULL, *m = NULL;
        CHECK_OK(amp_stager_put(st, &b, &x, &y));
        if (x) CHECK_OK(amp_mean(x, &m));
        float got = 0, want = 0;
        for (int i = 0; i < N * PIX; i++) want += hx[i];
        want /= (float)(N * PIX);
        int32_t labels[N] = {0};
        if (m) CHECK_OK(amp_tensor_item(m, &got));
        if (y) CHECK_OK(amp_tensor_to_host(y, labels, sizeof labels));
        bool ok = got == want;
        for (int i = 0; i < N; i++) ok = ok && labels[i] == r + i;
        wrong += !ok;
        amp_ctx_reset_step(ctx);
        amp_stager_free(st);
    }
    CHECK_MSG(wrong == 0, "%d of %d batches copied into a new pair were overwritten by compute "
              "queued before the put", wrong, ROUNDS);
    amp_ctx_free(ctx);
}

int main(void) {
    if (!amp_backend_cuda()) {
        printf("test_cuda_streams: SKIPPED: %s\n", amp_last_error());
        return 77;
    }
    test_record_stream();
    test_stager();
    test_stager_fresh_pair();
    return test_summary("test_cuda_streams");
}
