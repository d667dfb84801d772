/* Two device contexts of the CUDA backend share nothing (core/backend.h's amp_device_ctx): a
 * second table opened on the device has its own stream, allocator, cuBLASLt and cuDNN state;
 * memory allocated from one is counted by it alone and its freed blocks are reused only by it;
 * the same GEMM and convolution give the same bits on both, each context's plan caches and
 * statistics moving alone; closing the second leaves the default one working, and the default
 * is never closed. Without a device it reports SKIPPED. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/backend.h"
#include "kernels/cuda/conv_bias.h"
#include "kernels/cuda/cuda_backend.h"
#include "test_util.h"

#define NAME "test_cuda_device_contexts"

/* Device memory of `be` holding the n floats of host, rounded to dt (f32 or f16 here). */
static void *upload(const amp_backend *be, const float *host, int64_t n, amp_dtype dt) {
    void *f32 = NULL, *out = NULL;
    CHECK_OK(be->alloc(be->dev, (size_t)n * sizeof(float), &f32));
    CHECK_OK(be->copy_from_host(be->dev, f32, host, (size_t)n * sizeof(float)));
    CHECK_OK(be->alloc(be->dev, (size_t)n * amp_dtype_size(dt), &out));
    CHECK_OK(be->k.cast(be->dev, out, dt, f32, AMP_F32, n));
    CHECK_OK(be->sync(be->dev));
    be->free(be->dev, f32);
    return out;
}

static void test_memory_apart(const amp_backend *one, const amp_backend *two) {
    size_t one_before = 0, two_before = 0, use = 0;
    one->memory_stats(one->dev, &one_before, NULL);
    two->memory_stats(two->dev, &two_before, NULL);
    void *p = NULL, *q = NULL;
    CHECK_OK(two->alloc(two->dev, 1 << 20, &p));
    two->memory_stats(two->dev, &use, NULL);
    CHECK(use >= two_before + (1 << 20));
    one->memory_stats(one->dev, &use, NULL);
    CHECK_MSG(use == one_before, "the default context counts %zu bytes, %zu before", use,
              one_before);
    /* Freed into the second context's cache: the default context's next block of that size is
     * not it, the second context's is. */
    two->free(two->dev, p);
    CHECK_OK(one->alloc(one->dev, 1 << 20, &q));
    CHECK(q != p);
    one->free(one->dev, q);
    CHECK_OK(two->alloc(two->dev, 1 << 20, &q));
    CHECK(q == p);
    two->free(two->dev, q);
}

/* C = A B + bias with f16 A, B and f32 C: the result's bytes, and the context's GEMM statistics. */
static void gemm_on(const amp_backend *be, const float *a, const float *b, const float *bias,
                    float *c_out, int64_t m, int64_t n, int64_t k) {
    void *da = upload(be, a, m * k, AMP_F16), *db = upload(be, b, k * n, AMP_F16);
    void *dbias = upload(be, bias, n, AMP_F32), *dc = NULL;
    CHECK_OK(be->alloc(be->dev, (size_t)(m * n) * sizeof(float), &dc));
    amp_gemm_desc d = {.m = m, .n = n, .k = k, .alpha = 1.0f,
                       .a = da, .a_dtype = AMP_F16, .lda = k,
                       .b = db, .b_dtype = AMP_F16, .ldb = n,
                       .c = dc, .c_dtype = AMP_F32, .ldc = n, .bias = dbias};
    CHECK_OK(be->k.gemm(be->dev, &d));
    CHECK_OK(be->copy_to_host(be->dev, c_out, dc, (size_t)(m * n) * sizeof(float)));
    be->free(be->dev, da);
    be->free(be->dev, db);
    be->free(be->dev, dbias);
    be->free(be->dev, dc);
}

static void test_gemm_apart(const amp_backend *one, const amp_backend *two) {
    enum { M = 33, N = 17, K = 40 };
    static float a[M * K], b[K * N], bias[N], c1[M * N], c2[M * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)((i * 37) % 19) / 8.0f - 1.0f;
    for (int i = 0; i < K * N; i++) b[i] = (float)((i * 11) % 23) / 16.0f - 0.5f;
    for (int i = 0; i < N; i++) bias[i] = 0.25f * (float)i - 2.0f;
    amp_cuda_gemm_stats before, st;
    amp_cuda_gemm_stats_get(one->dev, &before);
    gemm_on(two, a, b, bias, c2, M, N, K);
    amp_cuda_gemm_stats_get(two->dev, &st);
    CHECK(st.compute >= 0); /* the second context ran a GEMM */
    amp_cuda_gemm_stats_get(one->dev, &st);
    CHECK(memcmp(&st, &before, sizeof st) == 0); /* the default one's statistics did not move */
    gemm_on(one, a, b, bias, c1, M, N, K);
    CHECK(memcmp(c1, c2, sizeof c1) == 0);
}

static void conv_on(const amp_backend *be, const amp_conv2d_desc *d, const float *x,
                    const float *w, float *y_out) {
    int64_t nx = d->n * d->c_in * d->h_in * d->w_in, nw = d->c_out * d->c_in * d->kh * d->kw;
    int64_t ny = d->n * d->c_out * d->h_out * d->w_out;
    void *dx = upload(be, x, nx, AMP_F32), *dw = upload(be, w, nw, AMP_F32), *dy = NULL;
    CHECK_OK(be->alloc(be->dev, (size_t)ny * sizeof(float), &dy));
    CHECK_OK(be->k.conv2d_fwd(be->dev, d, dx, dw, NULL, dy));
    CHECK_OK(be->copy_to_host(be->dev, y_out, dy, (size_t)ny * sizeof(float)));
    be->free(be->dev, dx);
    be->free(be->dev, dw);
    be->free(be->dev, dy);
}

static void test_conv_apart(const amp_backend *one, const amp_backend *two) {
    amp_conv2d_desc d = {.n = 2, .c_in = 3, .h_in = 6, .w_in = 5, .c_out = 4, .kh = 3, .kw = 3,
                         .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1, .h_out = 6,
                         .w_out = 5, .dtype = AMP_F32};
    static float x[2 * 3 * 6 * 5], w[4 * 3 * 3 * 3], y1[2 * 4 * 6 * 5], y2[2 * 4 * 6 * 5];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)((i * 7) % 13) / 4.0f - 1.5f;
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) w[i] = (float)((i * 5) % 11) / 8.0f - 0.6f;
    amp_cuda_conv_stats s1, s2;
    amp_cuda_conv_stats_get(one->dev, &s1);
    conv_on(two, &d, x, w, y2);
    amp_cuda_conv_stats_get(two->dev, &s2);
    CHECK_MSG(s2.algo_searches == 1, "second context: %lld algorithm searches, want 1",
              (long long)s2.algo_searches);
    int64_t one_searches = s1.algo_searches;
    amp_cuda_conv_stats_get(one->dev, &s1);
    CHECK(s1.algo_searches == one_searches);
    conv_on(one, &d, x, w, y1);
    amp_cuda_conv_stats_get(one->dev, &s1);
    CHECK(s1.algo_searches == one_searches + 1); /* its own cache had no plan for it */
    CHECK(memcmp(y1, y2, sizeof y1) == 0);
}

int main(void) {
    const amp_backend *one = amp_backend_cuda();
    if (!one) return test_skip(NAME, "no CUDA device");
    int ordinal = 0;
    CHECK(cudaGetDevice(&ordinal) == cudaSuccess);
    amp_backend *two = NULL;
    CHECK_OK(amp_cuda_device_open(ordinal, &two));
    if (!two) return test_summary(NAME);
    CHECK(two->dev != one->dev && two->dev->stream != one->dev->stream);
    CHECK(two->dev->alloc != one->dev->alloc && two->dev->gemm != one->dev->gemm &&
          two->dev->conv != one->dev->conv && two->dev->upload != one->dev->upload);
    CHECK(amp_backend_missing_entry(two) == NULL);
    test_memory_apart(one, two);
    test_gemm_apart(one, two);
    test_conv_apart(one, two);

    /* Each context now holds what the same work left it (its cuBLASLt workspace), no more. */
    size_t left_one = 0, left_two = 0;
    one->memory_stats(one->dev, &left_one, NULL);
    two->memory_stats(two->dev, &left_two, NULL);
    CHECK_MSG(left_two == left_one, "%zu bytes still allocated from the second context, %zu from "
              "the default one", left_two, left_one);
    amp_cuda_device_close(two);
    /* The default context after the other's close, and after a refused close of its own. */
    amp_cuda_device_close((amp_backend *)one);
    float host[3] = {1.5f, -2.0f, 3.25f}, back[3] = {0};
    void *p = upload(one, host, 3, AMP_F32);
    CHECK_OK(one->copy_to_host(one->dev, back, p, sizeof back));
    CHECK(memcmp(host, back, sizeof back) == 0);
    one->free(one->dev, p);
    return test_summary(NAME);
}
