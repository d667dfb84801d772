/* The CUDA backend through its table. Without a device (or without CUDA in the build) it checks
 * that amp_backend_cuda() says why in one line naming the CUDA error, then reports SKIPPED: the
 * rest needs a GPU. With a device: memory, copies, the caching allocator, cast and fill against
 * core/half.h and the CPU backend, and GEMM (every dtype, transpose, bias, beta, padded leading
 * dimensions) against a plain double-accumulation reference written here and the CPU backend.
 * The device is found by the backend's own probe, so the cudacpu build (AMP_CUDACPU=ON), where
 * ../shared/cudacpu answers as one device and emulates cuBLASLt, runs all of it on the CPU. */
#include <stdint.h>
#include <string.h>

#include "core/backend.h"
#include "core/half.h"
#include "test_util.h"

#define NAME "test_cuda_backend"

#ifndef AMP_HAVE_CUDA

int main(void) {
    CHECK(amp_backend_cuda() == NULL);
    CHECK(strstr(amp_last_error(), "no CUDA device") != NULL);
    if (test_n_fail) return test_summary(NAME);
    return test_skip(NAME, "libamp was built without the CUDA backend");
}

#else

#include "kernels/cuda/cuda_backend.h"

static const amp_backend *gpu, *cpu;

/* xorshift64: the same inputs on every run. */
static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float rnd_uniform(float lo, float hi) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 40) & 0xffffff) / 16777216.0f;
}

static void *dev_from_host(const void *host, size_t nbytes) {
    void *d = NULL;
    CHECK_OK(gpu->alloc(gpu->dev, nbytes, &d));
    if (d) CHECK_OK(gpu->copy_from_host(gpu->dev, d, host, nbytes));
    return d;
}

static void store_host(void *p, amp_dtype dt, size_t i, float v) {
    if (dt == AMP_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = dt == AMP_F16 ? amp_f32_to_f16_bits(v) : amp_f32_to_bf16_bits(v);
}

static float load_host(const void *p, amp_dtype dt, size_t i) {
    if (dt == AMP_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == AMP_F16 ? amp_f16_bits_to_f32(h) : amp_bf16_bits_to_f32(h);
}

static void test_memory(void) {
    void *a = NULL, *b = NULL;
    CHECK_OK(gpu->alloc(gpu->dev, 1000, &a));
    CHECK(a != NULL && ((uintptr_t)a & 63) == 0);
    size_t in_use = 0, cached = 0;
    amp_cuda_alloc_stats(amp_cuda_device(), &in_use, &cached);
    CHECK(in_use >= 1000);
    gpu->free(gpu->dev, a);
    /* Steady state: the same size comes back from the cache, not from cudaMalloc. */
    CHECK_OK(gpu->alloc(gpu->dev, 1000, &b));
    CHECK(b == a);
    gpu->free(gpu->dev, b);
    gpu->free(gpu->dev, NULL);

    enum { N = 5000 };
    static float h[N], back[N];
    for (int i = 0; i < N; i++) h[i] = (float)i * 0.5f - 7.0f;
    float *d1 = dev_from_host(h, sizeof h), *d2 = NULL;
    CHECK_OK(gpu->alloc(gpu->dev, sizeof h, (void **)&d2));
    CHECK_OK(gpu->copy(gpu->dev, d2, d1, sizeof h));
    CHECK_OK(gpu->copy_to_host(gpu->dev, back, d2, sizeof h));
    CHECK(memcmp(back, h, sizeof h) == 0);
    CHECK_OK(gpu->memset_zero(gpu->dev, d2 + 10, 100 * sizeof(float)));
    CHECK_OK(gpu->copy_to_host(gpu->dev, back, d2, sizeof h));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += back[i] != ((i >= 10 && i < 110) ? 0.0f : h[i]);
    CHECK_MSG(bad == 0, "memset_zero: %d wrong", bad);
    CHECK_OK(gpu->sync(gpu->dev));
    gpu->free(gpu->dev, d1);
    gpu->free(gpu->dev, d2);
}

/* Every conversion on random data and specials: bit-exact with core/half.h and the CPU backend. */
static void test_cast_fill(void) {
    enum { N = 4099 };
    static float src[N];
    static float out_gpu[N], out_cpu[N], mid[N]; /* room for N elements of any dtype */
    for (int i = 0; i < N; i++) src[i] = rnd_uniform(-70000.0f, 70000.0f) * (i % 3 ? 1e-4f : 1.0f);
    src[0] = 65520.0f;
    src[1] = -0.0f;
    src[2] = 1e-8f;
    const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 3; b++) {
            amp_dtype from = dts[a], to = dts[b];
            /* the source in `from`, made by the CPU backend */
            CHECK_OK(cpu->k.cast(cpu->dev, mid, from, src, AMP_F32, N));
            void *ds = dev_from_host(mid, N * amp_dtype_size(from)), *dd = NULL;
            CHECK_OK(gpu->alloc(gpu->dev, N * amp_dtype_size(to), &dd));
            CHECK_OK(gpu->k.cast(gpu->dev, dd, to, ds, from, N));
            CHECK_OK(gpu->copy_to_host(gpu->dev, out_gpu, dd, N * amp_dtype_size(to)));
            CHECK_OK(cpu->k.cast(cpu->dev, out_cpu, to, mid, from, N));
            CHECK_MSG(memcmp(out_gpu, out_cpu, N * amp_dtype_size(to)) == 0, "cast %s -> %s",
                      amp_dtype_name(from), amp_dtype_name(to));
            int bad = 0;
            for (int i = 0; i < N; i++) {
                float v = load_host(mid, from, (size_t)i);
                union { float f; uint16_t h; } want;
                store_host(&want, to, 0, v);
                bad += memcmp((uint8_t *)out_gpu + (size_t)i * amp_dtype_size(to), &want,
                              amp_dtype_size(to)) != 0;
            }
            CHECK_MSG(bad == 0, "cast %s -> %s: %d differ from core/half.h", amp_dtype_name(from),
                      amp_dtype_name(to), bad);
            gpu->free(gpu->dev, ds);
            gpu->free(gpu->dev, dd);
        }
        amp_dtype dt = dts[a];
        void *d = NULL;
        float *scalar = NULL, three = 3.0f;
        CHECK_OK(gpu->alloc(gpu->dev, N * 4, &d));
        CHECK_OK(gpu->k.fill(gpu->dev, d, dt, N, 0.1f));
        CHECK_OK(gpu->copy_to_host(gpu->dev, out_gpu, d, N * amp_dtype_size(dt)));
        CHECK_OK(cpu->k.fill(cpu->dev, out_cpu, dt, N, 0.1f));
        CHECK_MSG(memcmp(out_gpu, out_cpu, N * amp_dtype_size(dt)) == 0, "fill %s", amp_dtype_name(dt));
        scalar = dev_from_host(&three, sizeof three);
        CHECK_OK(gpu->k.fill_scalar(gpu->dev, d, dt, N, scalar, -0.25f));
        CHECK_OK(gpu->copy_to_host(gpu->dev, out_gpu, d, N * amp_dtype_size(dt)));
        CHECK(load_host(out_gpu, dt, 0) == -0.75f && load_host(out_gpu, dt, N - 1) == -0.75f);
        gpu->free(gpu->dev, scalar);
        gpu->free(gpu->dev, d);
    }
}

/* Plain reference: C = alpha op(A) op(B) + beta C + bias in double, then the bound on the
 * error the f32 accumulation and one rounding to c_dt may make (and, for a half C, the rounding
 * of the bias to it). The fused parts (epilogue, bias gradient, TF32) are test_cuda_gemm_fused's. */
typedef struct gemm_case {
    bool ta, tb;
    int m, n, k, pad;
    amp_dtype a_dt, b_dt, c_dt;
    float alpha, beta;
    bool bias;
} gemm_case;

static void test_gemm_case(gemm_case g) {
    int64_t lda = (g.ta ? g.m : g.k) + g.pad, ldb = (g.tb ? g.k : g.n) + g.pad, ldc = g.n + g.pad;
    int64_t a_rows = g.ta ? g.k : g.m, b_rows = g.tb ? g.n : g.k;
    size_t as = amp_dtype_size(g.a_dt), bs = amp_dtype_size(g.b_dt), cs = amp_dtype_size(g.c_dt);
    uint8_t *a = calloc((size_t)(a_rows * lda), as), *b = calloc((size_t)(b_rows * ldb), bs);
    uint8_t *c = calloc((size_t)(g.m * ldc), cs), *c_gpu = calloc((size_t)(g.m * ldc), cs);
    uint8_t *c_cpu = calloc((size_t)(g.m * ldc), cs);
    float *bias = calloc((size_t)g.n, sizeof(float));
    for (int64_t i = 0; i < a_rows * lda; i++) store_host(a, g.a_dt, (size_t)i, rnd_uniform(-1, 1));
    for (int64_t i = 0; i < b_rows * ldb; i++) store_host(b, g.b_dt, (size_t)i, rnd_uniform(-1, 1));
    for (int64_t i = 0; i < g.m * ldc; i++) store_host(c, g.c_dt, (size_t)i, rnd_uniform(-2, 2));
    for (int j = 0; j < g.n; j++) bias[j] = rnd_uniform(-3, 3);

    void *da = dev_from_host(a, (size_t)(a_rows * lda) * as);
    void *db = dev_from_host(b, (size_t)(b_rows * ldb) * bs);
    void *dc = dev_from_host(c, (size_t)(g.m * ldc) * cs);
    float *dbias = dev_from_host(bias, (size_t)g.n * sizeof(float));
    amp_gemm_desc d = {.trans_a = g.ta, .trans_b = g.tb, .m = g.m, .n = g.n, .k = g.k,
                       .alpha = g.alpha, .beta = g.beta, .a = da, .a_dtype = g.a_dt, .lda = lda,
                       .b = db, .b_dtype = g.b_dt, .ldb = ldb, .c = dc, .c_dtype = g.c_dt,
                       .ldc = ldc, .bias = g.bias ? dbias : NULL};
    CHECK_OK(gpu->k.gemm(gpu->dev, &d));
    CHECK_OK(gpu->copy_to_host(gpu->dev, c_gpu, dc, (size_t)(g.m * ldc) * cs));
    bool have_cpu = cpu->k.gemm != NULL;
    if (have_cpu) {
        memcpy(c_cpu, c, (size_t)(g.m * ldc) * cs);
        amp_gemm_desc dh = d;
        dh.a = a;
        dh.b = b;
        dh.c = c_cpu;
        dh.bias = g.bias ? bias : NULL;
        CHECK_OK(cpu->k.gemm(cpu->dev, &dh));
    }
    double unit = g.c_dt == AMP_F16 ? 0x1p-11 : g.c_dt == AMP_BF16 ? 0x1p-8 : 0x1p-24;
    double eps_ab = 1e-6 * g.k; /* f32 accumulation of k products */
    int bad = 0, bad_cpu = 0, pad_touched = 0;
    for (int i = 0; i < g.m; i++) {
        for (int64_t j = 0; j < ldc; j++) {
            size_t o = (size_t)(i * ldc + j);
            if (j >= g.n) { /* padding columns are not C */
                pad_touched += memcmp(c_gpu + o * cs, c + o * cs, cs) != 0;
                continue;
            }
            double acc = 0, mag = 0;
            for (int p = 0; p < g.k; p++) {
                double x = load_host(a, g.a_dt, (size_t)(g.ta ? p * lda + i : i * lda + p));
                double y = load_host(b, g.b_dt, (size_t)(g.tb ? j * ldb + p : p * ldb + j));
                acc += x * y;
                mag += fabs(x * y);
            }
            double c0 = load_host(c, g.c_dt, o), bj = g.bias ? bias[j] : 0;
            double want = g.alpha * acc + g.beta * c0 + bj;
            /* A half C's bias is rounded to its dtype first (core/backend.h): unit * |bias|. */
            double tol = eps_ab * fabs(g.alpha) * mag + unit * fabs(want) +
                         1e-6 * (fabs(g.beta * c0) + fabs(bj)) + unit * fabs(bj) + 1e-30;
            double got = load_host(c_gpu, g.c_dt, o);
            if (fabs(got - want) > tol && bad++ < 3)
                fprintf(stderr, "  [%d,%lld] got %.9g want %.9g (tol %.3g)\n", i, (long long)j, got,
                        want, tol);
            if (have_cpu && fabs(got - load_host(c_cpu, g.c_dt, o)) > 2 * tol) bad_cpu++;
        }
    }
    CHECK_MSG(bad == 0 && bad_cpu == 0 && pad_touched == 0,
              "gemm ta=%d tb=%d m=%d n=%d k=%d pad=%d %s x %s -> %s alpha=%g beta=%g bias=%d: %d "
              "off the reference, %d off the CPU backend, %d padding elements touched",
              g.ta, g.tb, g.m, g.n, g.k, g.pad, amp_dtype_name(g.a_dt), amp_dtype_name(g.b_dt),
              amp_dtype_name(g.c_dt),
              g.alpha, g.beta, g.bias, bad, bad_cpu, pad_touched);
    gpu->free(gpu->dev, da);
    gpu->free(gpu->dev, db);
    gpu->free(gpu->dev, dc);
    gpu->free(gpu->dev, dbias);
    free(a);
    free(b);
    free(c);
    free(c_gpu);
    free(c_cpu);
    free(bias);
}

static void test_gemm(void) {
    const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int t = 0; t < 3; t++) {
        for (int tr = 0; tr < 4; tr++) {
            for (int v = 0; v < 4; v++) {
                gemm_case g = {.ta = tr & 1, .tb = tr >> 1, .m = 33, .n = 48, .k = 72,
                               .pad = v & 1 ? 8 : 0, .a_dt = dts[t], .b_dt = dts[t], .c_dt = dts[t],
                               .alpha = 1.0f, .beta = v & 2 ? 0.5f : 0.0f, .bias = v >= 1};
                test_gemm_case(g);
                g.c_dt = AMP_F32; /* half inputs, f32 output */
                g.alpha = -0.75f;
                test_gemm_case(g);
            }
        }
    }
    /* Odd sizes (no vector alignment), a vector-matrix product, an empty inner dimension. */
    test_gemm_case((gemm_case){.m = 7, .n = 13, .k = 5, .pad = 1, .a_dt = AMP_F16, .b_dt = AMP_F16,
                               .c_dt = AMP_F16, .alpha = 1, .beta = 1, .bias = true});
    test_gemm_case((gemm_case){.tb = true, .m = 1, .n = 300, .k = 129, .a_dt = AMP_BF16,
                               .b_dt = AMP_BF16, .c_dt = AMP_BF16, .alpha = 2, .bias = true});
    test_gemm_case((gemm_case){.m = 5, .n = 6, .k = 0, .pad = 1, .a_dt = AMP_F32, .b_dt = AMP_F32,
                               .c_dt = AMP_F32, .alpha = 1, .beta = 0.5f, .bias = true});
    /* Mixed dtypes (the half operand is widened) and an output of the other half dtype. */
    test_gemm_case((gemm_case){.ta = true, .m = 20, .n = 24, .k = 40, .pad = 3, .a_dt = AMP_F16,
                               .b_dt = AMP_BF16, .c_dt = AMP_F16, .alpha = 1, .beta = 0.5f});
    test_gemm_case((gemm_case){.tb = true, .m = 20, .n = 24, .k = 40, .a_dt = AMP_F32,
                               .b_dt = AMP_F16, .c_dt = AMP_BF16, .alpha = 1, .bias = true});
    test_gemm_case((gemm_case){.m = 20, .n = 24, .k = 40, .a_dt = AMP_F16, .b_dt = AMP_F16,
                               .c_dt = AMP_BF16, .alpha = 1, .beta = 1});
    /* Again, now from the plan cache. */
    test_gemm_case((gemm_case){.m = 33, .n = 48, .k = 72, .a_dt = AMP_F16, .b_dt = AMP_F16,
                               .c_dt = AMP_F16, .alpha = 1, .bias = true});

    /* Refused before any pointer is used. */
    float dummy[4] = {0};
    amp_gemm_desc bad = {.m = 2, .n = 2, .k = 2, .a = dummy, .a_dtype = AMP_F16, .lda = 2,
                         .b = dummy, .b_dtype = AMP_I32, .ldb = 2, .c = dummy,
                         .c_dtype = AMP_F32, .ldc = 2, .alpha = 1};
    CHECK_FAILS(gpu->k.gemm(gpu->dev, &bad), AMP_ERR_UNSUPPORTED, "i32");
    bad.b_dtype = AMP_F16;
    bad.lda = 1;
    CHECK_FAILS(gpu->k.gemm(gpu->dev, &bad), AMP_ERR_SHAPE, "lda");
}

int main(void) {
    cpu = amp_backend_cpu();
    gpu = amp_backend_cuda();
    if (!gpu) {
        /* One line naming the CUDA error, the same on every call. */
        const char *why = amp_last_error();
        CHECK_MSG(strncmp(why, "no CUDA device: ", 16) == 0 && strstr(why, "(cudaError") != NULL &&
                      strchr(why, '\n') == NULL,
                  "message '%s'", why);
        char first[512];
        snprintf(first, sizeof first, "%s", why);
        CHECK(amp_backend_cuda() == NULL && strcmp(amp_last_error(), first) == 0);
        if (test_n_fail) return test_summary(NAME);
        printf("%s: amp_backend_cuda: %s\n", NAME, first);
        return test_skip(NAME, "no CUDA device");
    }
    CHECK(gpu->device == AMP_DEVICE_CUDA);
    CHECK(amp_backend_missing_entry(gpu) == NULL && gpu->coll != NULL); /* every entry filled */
    test_memory();
    test_cast_fill();
    test_gemm();
    return test_summary(NAME);
}

#endif
