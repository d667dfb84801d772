/* The CUDA backend's host side: the probe and table (cuda_backend.c: every entry of
 * core/backend.h filled), the caching allocator (cuda_alloc.c), copies, and cast/fill through the
 * table. Built where the CUDA backend is (the cudacpu build runs it on this CPU, also with
 * CUDACPU_STREAMS=random); SKIPPED without a device. Host code reaches device memory through the
 * runtime's memset/copies only, as on a GPU; device work goes on the backend's stream
 * (non-blocking), which the backend's copy_to_host waits for. */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "test_util.h"

static const amp_backend *gpu;

/* Sets n bytes of a block to `byte` on the backend's stream: the allocator hands a freed block
 * again safely only to work on that stream (cuda_alloc.c). */
static void device_memset(void *p, uint8_t byte, size_t n) {
    CHECK(cudaMemsetAsync(p, byte, n, amp_cuda_device()->stream) == cudaSuccess);
}

/* Bytes of p[0, n) that do not hold `byte`, read back through copy_to_host (which waits for the
 * stream). */
static size_t count_not(const void *p, uint8_t byte, size_t n) {
    std::vector<uint8_t> h(n);
    CHECK_OK(gpu->copy_to_host(gpu->dev, h.data(), p, n));
    size_t bad = 0;
    for (uint8_t b : h) bad += b != byte;
    return bad;
}

static void test_table(void) {
    CHECK(gpu != nullptr);
    CHECK(amp_backend_cuda() == gpu); /* probed once */
    CHECK(strcmp(gpu->name, "cuda") == 0 && gpu->device == AMP_DEVICE_CUDA);
    const char *missing = amp_backend_missing_entry(gpu);
    CHECK_MSG(missing == nullptr, "the CUDA backend has no '%s' entry", missing ? missing : "");
    CHECK(gpu->k.unary != nullptr && gpu->k.sum_rows != nullptr && gpu->coll != nullptr);
    CHECK(amp_cuda_device()->stream != nullptr);
}

/* Requests of each kind of size class: in_use grows by the class size, a freed block comes back
 * for the next request of its class, release_cached empties the cache. */
static void test_allocator_classes(void) {
    struct { size_t ask, cls; } cases[] = {
        {0, 512}, {1, 512}, {512, 512}, {513, 1024}, {(1u << 20), (1u << 20)},
        {(1u << 20) + 1, (5u << 18)}, {(3u << 20), (3u << 20)}, {(3u << 20) + 1, (7u << 19)},
        {(100u << 20), (112u << 20)},
    };
    CHECK_OK(amp_cuda_alloc_release_cached(amp_cuda_device()));
    size_t base_use = 0, cached = 0;
    amp_cuda_alloc_stats(amp_cuda_device(), &base_use, &cached);
    CHECK(cached == 0);
    for (auto c : cases) {
        void *p = nullptr, *q = nullptr;
        CHECK_OK(gpu->alloc(gpu->dev, c.ask, &p));
        CHECK(p != nullptr && ((uintptr_t)p & 63) == 0);
        size_t use = 0;
        amp_cuda_alloc_stats(amp_cuda_device(), &use, &cached);
        CHECK_MSG(use - base_use == c.cls, "alloc(%zu): class %zu, want %zu", c.ask, use - base_use, c.cls);
        if (c.ask) { /* the whole request is usable: set and read back, all of it */
            device_memset(p, 0xab, c.ask);
            CHECK_MSG(count_not(p, 0xab, c.ask) == 0, "alloc(%zu): block lost a byte", c.ask);
        }
        gpu->free(gpu->dev, p);
        amp_cuda_alloc_stats(amp_cuda_device(), &use, &cached);
        CHECK(use == base_use && cached == c.cls);
        CHECK_OK(gpu->alloc(gpu->dev, c.ask, &q));
        CHECK_MSG(q == p, "alloc(%zu) after free did not reuse the cached block", c.ask);
        gpu->free(gpu->dev, q);
        CHECK_OK(amp_cuda_alloc_release_cached(amp_cuda_device()));
        amp_cuda_alloc_stats(amp_cuda_device(), &use, &cached);
        CHECK(cached == 0);
    }
}

/* Random interleaved alloc/free: live blocks never overlap (each keeps its fill pattern) and the
 * statistics add up. */
static void test_allocator_random(void) {
    struct live { uint8_t *p; size_t n; uint8_t tag; };
    std::vector<live> blocks;
    uint64_t s = 12345;
    auto rnd = [&s]() { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; };
    size_t corrupt = 0;
    for (int it = 0; it < 2000; it++) {
        if (blocks.empty() || rnd() % 3) {
            size_t n = rnd() % 25 == 0 ? (size_t)(rnd() % (2u << 20)) : (size_t)(rnd() % 5000);
            void *p = nullptr;
            CHECK_OK(gpu->alloc(gpu->dev, n, &p));
            uint8_t tag = (uint8_t)(it | 1);
            device_memset(p, tag, n);
            blocks.push_back({(uint8_t *)p, n, tag});
        } else {
            size_t k = (size_t)(rnd() % blocks.size());
            corrupt += count_not(blocks[k].p, blocks[k].tag, blocks[k].n);
            gpu->free(gpu->dev, blocks[k].p);
            blocks[k] = blocks.back();
            blocks.pop_back();
        }
    }
    for (auto &b : blocks) {
        corrupt += count_not(b.p, b.tag, b.n);
        gpu->free(gpu->dev, b.p);
    }
    CHECK_MSG(corrupt == 0, "%zu bytes of live blocks were overwritten", corrupt);
    size_t use = 0, cached = 0;
    amp_cuda_alloc_stats(amp_cuda_device(), &use, &cached);
    CHECK(use == 0);
    CHECK_OK(amp_cuda_alloc_release_cached(amp_cuda_device()));
    /* A pointer the allocator never made: logged and ignored. */
    int x;
    gpu->free(gpu->dev, &x);
    amp_cuda_alloc_stats(amp_cuda_device(), &use, &cached);
    CHECK(use == 0 && cached == 0);
}

static void test_copies_and_casts(void) {
    enum { N = 3000 };
    std::vector<float> h(N), back(N);
    for (int i = 0; i < N; i++) h[i] = (float)i / 7.0f - 100.0f;
    void *d1 = nullptr, *d2 = nullptr, *d16 = nullptr;
    CHECK_OK(gpu->alloc(gpu->dev, N * 4, &d1));
    CHECK_OK(gpu->alloc(gpu->dev, N * 4, &d2));
    CHECK_OK(gpu->alloc(gpu->dev, N * 2, &d16));
    CHECK_OK(gpu->copy_from_host(gpu->dev, d1, h.data(), N * 4));
    CHECK_OK(gpu->copy(gpu->dev, d2, d1, N * 4));
    CHECK_OK(gpu->memset_zero(gpu->dev, (float *)d2 + 100, 50 * 4));
    CHECK_OK(gpu->copy_to_host(gpu->dev, back.data(), d2, N * 4));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += back[i] != (i >= 100 && i < 150 ? 0.0f : h[i]);
    CHECK_MSG(bad == 0, "copy/memset: %d wrong", bad);
    CHECK_OK(gpu->k.cast(gpu->dev, d16, AMP_BF16, d1, AMP_F32, N));
    CHECK_OK(gpu->k.cast(gpu->dev, d2, AMP_F32, d16, AMP_BF16, N));
    CHECK_OK(gpu->copy_to_host(gpu->dev, back.data(), d2, N * 4));
    bad = 0;
    for (int i = 0; i < N; i++) bad += back[i] != amp_bf16_bits_to_f32(amp_f32_to_bf16_bits(h[i]));
    CHECK_MSG(bad == 0, "f32 -> bf16 -> f32: %d wrong", bad);
    CHECK_OK(gpu->k.fill(gpu->dev, d16, AMP_F16, N, -2.0f));
    std::vector<uint16_t> h16(N);
    CHECK_OK(gpu->copy_to_host(gpu->dev, h16.data(), d16, N * 2));
    bad = 0;
    for (int i = 0; i < N; i++) bad += h16[i] != 0xc000;
    CHECK_MSG(bad == 0, "fill f16 -2: %d wrong", bad);
    CHECK_OK(gpu->sync(gpu->dev));
    CHECK_OK(gpu->copy(gpu->dev, nullptr, nullptr, 0));
    CHECK_FAILS(gpu->copy_to_host(gpu->dev, nullptr, d1, 4), AMP_ERR_INVALID_ARG, "'host'");
    CHECK_FAILS(gpu->k.gemm(gpu->dev, nullptr), AMP_ERR_INVALID_ARG, "'d' is NULL");
    gpu->free(gpu->dev, d1);
    gpu->free(gpu->dev, d2);
    gpu->free(gpu->dev, d16);
}

/* AMP_CUDA_NO_CACHING=1 (a second ctest run): each request is a cudaMalloc of exactly its size,
 * each free gives the block back at once, and nothing is ever cached. */
static void test_allocator_no_caching(void) {
    const size_t asks[] = {0, 1, 513, (1u << 20) + 1, (3u << 20) + 1};
    size_t base_use = 0, cached = 0;
    amp_cuda_alloc_stats(amp_cuda_device(), &base_use, &cached);
    CHECK(cached == 0);
    for (size_t ask : asks) {
        uint64_t mallocs = amp_cuda_malloc_count(amp_cuda_device());
        void *p = nullptr, *q = nullptr;
        CHECK_OK(gpu->alloc(gpu->dev, ask, &p));
        size_t use = 0;
        amp_cuda_alloc_stats(amp_cuda_device(), &use, &cached);
        size_t want = ask ? ask : 1;
        CHECK_MSG(use - base_use == want, "alloc(%zu): %zu bytes in use, want exactly %zu", ask,
                  use - base_use, want);
        device_memset(p, 0xcd, want);
        CHECK(count_not(p, 0xcd, want) == 0);
        gpu->free(gpu->dev, p);
        amp_cuda_alloc_stats(amp_cuda_device(), &use, &cached);
        CHECK_MSG(use == base_use && cached == 0, "free(%zu): %zu in use, %zu cached", ask, use,
                  cached);
        CHECK_OK(gpu->alloc(gpu->dev, ask, &q));
        CHECK_MSG(amp_cuda_malloc_count(amp_cuda_device()) == mallocs + 2,
                  "alloc(%zu) twice: %llu cudaMalloc calls, "
                  "want 2",
                  ask, (unsigned long long)(amp_cuda_malloc_count(amp_cuda_device()) - mallocs));
        gpu->free(gpu->dev, q);
    }
}

/* AMP_CUDA_TRY's message: function, call text, the runtime's description and name. */
static amp_status free_twice(void *p) {
    AMP_CUDA_TRY(cudaFree(p));
    AMP_CUDA_TRY(cudaFree(p));
    return AMP_OK;
}

static void test_check_macro(void) {
    void *p = nullptr;
    CHECK(cudaMalloc(&p, 16) == cudaSuccess);
    CHECK_FAILS(free_twice(p), AMP_ERR_BACKEND, "free_twice: cudaFree(p): ");
    CHECK(strstr(amp_last_error(), "(cudaErrorInvalidValue)") != nullptr);
    (void)cudaGetLastError();
}

int main(void) {
    gpu = amp_backend_cuda();
    if (!gpu) {
        printf("test_cuda_backend_host: SKIPPED: %s\n", amp_last_error());
        return 77;
    }
    test_table();
    if (getenv("AMP_CUDA_NO_CACHING")) {
        test_allocator_no_caching();
    } else {
        test_allocator_classes();
    }
    test_allocator_random();
    test_copies_and_casts();
    test_check_macro();
    return test_summary("test_cuda_backend_host");
}
