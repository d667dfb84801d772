/* Runs kernels/cuda/unscale.cu on the CPU under ../shared/cudacpu against plain references
 * written here. Run with CUDACPU_SCHEDULE=random:7 as well: a result that moves is a race.
 *
 * unscale: every output equals (float)g * inv_scale bit for bit (g when inv_scale is 1); the flag
 * is set exactly when an INPUT is inf/NaN (torch's rule), at the start, the middle or the end of
 * a tensor longer than the grid (so grid-stride iterations are covered), is never cleared, and is
 * not written at all for a clean tensor; f32 in place; guard words after each output.
 * sum_squares: bit-exact against a model of the kernels' fixed order (grid from n, per-thread
 * index-order sums, warp butterflies, cross-warp step, one final block), which must not move with
 * the schedule, and within the final f32 rounding of a long double sum; inf/NaN propagate.
 * Host code reaches device memory through cudaMemcpy only (dev_buffer.h), as on a GPU; run with
 * CUDACPU_STREAMS=random as well. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ops_ref.h" /* library stubs, NVIDIA conversions, random data, scalars */

/* A device buffer of n random gradients over 20 binades below max_abs, uploaded; the mirror
 * keeps them for the references. */
static dev_buf random_grads(amp_dtype dt, int64_t n, double max_abs) {
    dev_buf b((size_t)n * amp_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        double m = max_abs * std::exp2(-20.0 * rnd_uniform());
        nv_store(b.host.data(), dt, i, (float)(rnd_uniform() < 0.5 ? -m : m));
    }
    b.upload();
    return b;
}

/* Outputs that differ from the plain reference. */
static int64_t count_wrong(const void *g, amp_dtype dt, int64_t n, float inv, const float *out) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float x = nv_load(g, dt, i);
        float want = inv == 1.0f ? x : x * inv;
        bool same =
            amp_f32_bits(out[i]) == amp_f32_bits(want) || (std::isnan(out[i]) && std::isnan(want));
        bad += !same;
    }
    return bad;
}

static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};

static void test_unscale_values(void) {
    const int64_t ns[] = {1, 255, 1000, 70001};
    const float invs[] = {1.0f / 65536.0f, 1.0f, (float)(1.0 / 3000.0)};
    for (amp_dtype dt : dts)
        for (int64_t n : ns)
            for (float inv : invs) {
                dev_buf g = random_grads(dt, n, dt == AMP_F16 ? 60000.0 : 1e6);
                dev_buf out((size_t)n * 4), found(4);
                set_scalar(found, 0.0f);
                CHECK_OK(amp_cuda_unscale(amp_cuda_device(), dt, n, g.ptr, inv, out.dev<float>(),
                                          found.dev<float>()));
                CHECK(dev_sync());
                out.download();
                float flag = get_scalar(found);
                int64_t bad = count_wrong(g.host.data(), dt, n, inv, out.h<float>());
                CHECK_MSG(bad == 0 && amp_f32_bits(flag) == 0, "unscale %s n=%lld inv=%g: %lld "
                          "wrong, found_inf %g", amp_dtype_name(dt), (long long)n, (double)inv,
                          (long long)bad, (double)flag);
                CHECK(out.guard_intact());
            }
}

/* Past AMP_CUDA_MAX_BLOCKS * AMP_CUDA_BLOCK elements, so threads loop; one inf/NaN at the start,
 * the middle and the last element (the last grid-stride iteration of one thread). */
static void test_unscale_flags(void) {
    const int64_t n = (int64_t)AMP_CUDA_MAX_BLOCKS * AMP_CUDA_BLOCK + 777;
    const int64_t where[] = {0, n / 2, n - 1};
    const float poison[] = {INFINITY, NAN, -INFINITY};
    for (amp_dtype dt : {AMP_F16, AMP_F32}) {
        dev_buf g = random_grads(dt, n, 1000.0);
        dev_buf out((size_t)n * 4), found(4);
        for (int w = 0; w < 3; w++) {
            float keep = nv_load(g.host.data(), dt, where[w]);
            nv_store(g.host.data(), dt, where[w], poison[w]);
            g.upload();
            set_scalar(found, 0.0f);
            CHECK_OK(amp_cuda_unscale(amp_cuda_device(), dt, n, g.ptr, 0.5f, out.dev<float>(),
                                      found.dev<float>()));
            CHECK(dev_sync());
            out.download();
            float flag = get_scalar(found);
            int64_t bad = count_wrong(g.host.data(), dt, n, 0.5f, out.h<float>());
            CHECK_MSG(flag == 1.0f && bad == 0, "%s %g at %lld: found_inf %g, %lld wrong",
                      amp_dtype_name(dt), (double)poison[w], (long long)where[w], (double)flag,
                      (long long)bad);
            /* Never cleared by a clean tensor afterwards (the flag is not re-uploaded). */
            nv_store(g.host.data(), dt, where[w], keep);
            g.upload();
            CHECK_OK(amp_cuda_unscale(amp_cuda_device(), dt, n, g.ptr, 0.5f, out.dev<float>(),
                                      found.dev<float>()));
            CHECK(dev_sync());
            CHECK(get_scalar(found) == 1.0f);
        }
        CHECK(out.guard_intact());
    }
    /* Clean: the flag is not written (any value stays). Input tested, not the product. */
    dev_buf g(3 * 4), out(3 * 4), found(4);
    float *gh = g.h<float>();
    const float *oh = out.h<float>();
    gh[0] = 3e38f, gh[1] = -1.0f, gh[2] = 0.0f;
    g.upload();
    set_scalar(found, 7.5f);
    CHECK_OK(amp_cuda_unscale(amp_cuda_device(), AMP_F32, 3, g.ptr, 4.0f, out.dev<float>(),
                              found.dev<float>()));
    CHECK(dev_sync());
    out.download();
    CHECK(get_scalar(found) == 7.5f && std::isinf(oh[0]) && oh[1] == -4.0f && oh[2] == 0.0f);
    gh[2] = INFINITY;
    g.upload();
    CHECK_OK(amp_cuda_unscale(amp_cuda_device(), AMP_F32, 3, g.ptr, 1.0f, out.dev<float>(),
                              found.dev<float>()));
    CHECK(dev_sync());
    out.download();
    CHECK(get_scalar(found) == 1.0f && std::isinf(oh[2]));
}

static void test_unscale_in_place(void) {
    const int64_t n = 50001;
    dev_buf g = random_grads(AMP_F32, n, 5e4);
    g.h<float>()[123] = NAN;
    g.upload();
    std::vector<float> copy(g.h<float>(), g.h<float>() + n);
    dev_buf found(4);
    set_scalar(found, 0.0f);
    float *gd = g.dev<float>();
    CHECK_OK(amp_cuda_unscale(amp_cuda_device(), AMP_F32, n, gd, 1.0f / 1024.0f, gd,
                              found.dev<float>()));
    CHECK(dev_sync());
    g.download();
    CHECK(count_wrong(copy.data(), AMP_F32, n, 1.0f / 1024.0f, g.h<float>()) == 0 &&
          get_scalar(found) == 1.0f);
    CHECK(g.guard_intact());
    /* Rejected before any launch: the pointers are compared, not read. */
    CHECK_FAILS(
            amp_cuda_unscale(amp_cuda_device(), AMP_F32, 100, gd, 0.5f, gd + 1, found.dev<float>()),
            AMP_ERR_INVALID_ARG, "out overlaps grad (f32)");
    CHECK_FAILS(
            amp_cuda_unscale(amp_cuda_device(), AMP_BF16, 100, gd, 0.5f, gd, found.dev<float>()),
            AMP_ERR_INVALID_ARG, "out overlaps grad (bf16)");
}

/* The kernels' order, written out: per-thread grid-stride sums, then in each block the warp
 * butterfly (lane l adds lane l ^ k, k = 16..1), lane 0 per warp, and the same butterfly over the
 * warp sums in warp 0; the partials summed by one block the same way. */
static const int BLOCK = 256, WARPS = BLOCK / 32;

static double butterfly(const double *in) {
    double v[32], nv[32];
    memcpy(v, in, sizeof v);
    for (int k = 16; k >= 1; k >>= 1) {
        for (int l = 0; l < 32; l++) nv[l] = v[l] + v[l ^ k];
        memcpy(v, nv, sizeof v);
    }
    return v[0];
}

static double block_sum_model(const double *acc) {
    double warp_sums[32] = {0};
    for (int w = 0; w < WARPS; w++) warp_sums[w] = butterfly(acc + 32 * w);
    return butterfly(warp_sums);
}

static float sum_squares_model(const void *x, amp_dtype dt, int64_t n) {
    int64_t blocks = (n + BLOCK - 1) / BLOCK;
    blocks = blocks < 1 ? 1 : blocks > 1024 ? 1024 : blocks;
    int64_t threads = blocks * BLOCK;
    std::vector<double> partial(blocks), acc(BLOCK);
    for (int64_t b = 0; b < blocks; b++) {
        for (int t = 0; t < BLOCK; t++) {
            double a = 0.0;
            for (int64_t i = b * BLOCK + t; i < n; i += threads) {
                double v = nv_load(x, dt, i);
                a += v * v;
            }
            acc[t] = a;
        }
        partial[b] = block_sum_model(acc.data());
    }
    for (int t = 0; t < BLOCK; t++) {
        double a = 0.0;
        for (int64_t i = t; i < blocks; i += BLOCK) a += partial[i];
        acc[t] = a;
    }
    return (float)block_sum_model(acc.data());
}

static void test_sum_squares(void) {
    const int64_t ns[] = {0, 1, 255, 256, 257, 70001, 1024 * 256 + 3001};
    for (amp_dtype dt : dts)
        for (int64_t n : ns) {
            dev_buf x = random_grads(dt, n, 100.0);
            dev_buf out(4);
            set_scalar(out, -1.0f);
            CHECK_OK(amp_cuda_sum_squares(amp_cuda_device(), dt, n, x.ptr, out.dev<float>()));
            CHECK(dev_sync());
            float got = get_scalar(out);
            float model = sum_squares_model(x.host.data(), dt, n);
            long double ref = 0;
            for (int64_t i = 0; i < n; i++) {
                long double v = nv_load(x.host.data(), dt, i);
                ref += v * v;
            }
            CHECK_MSG(amp_f32_bits(got) == amp_f32_bits(model),
                      "sum_squares %s n=%lld: %.9g, order model %.9g",
                      amp_dtype_name(dt), (long long)n, (double)got, (double)model);
            double want = (double)ref;
            CHECK_MSG(std::fabs(got - want) <= 0x1p-24 * want * 1.0001 + 1e-37,
                      "sum_squares %s n=%lld: %.9g vs %.12g", amp_dtype_name(dt), (long long)n,
                      (double)got, want);
            CHECK(out.guard_intact());
            int64_t want_blocks = n == 0 ? 1 : (n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024;
            CHECK(amp_cuda_sum_squares_blocks(n) == want_blocks);
        }
    dev_buf v(4 * 4), out(4);
    float *vh = v.h<float>();
    vh[0] = 1.0f, vh[1] = -INFINITY, vh[2] = 2.0f, vh[3] = 0.0f;
    v.upload();
    CHECK_OK(amp_cuda_sum_squares(amp_cuda_device(), AMP_F32, 4, v.dev<float>(), out.dev<float>()));
    CHECK(dev_sync());
    float got = get_scalar(out);
    CHECK(std::isinf(got) && got > 0);
    vh[2] = NAN;
    v.upload();
    CHECK_OK(amp_cuda_sum_squares(amp_cuda_device(), AMP_F32, 4, v.dev<float>(), out.dev<float>()));
    CHECK(dev_sync());
    CHECK(std::isnan(get_scalar(out)));
}

/* nonfinite: the flag of unscale without its writes, for every dtype, past the grid (threads
 * loop), one special value at the start, the middle and the end; never cleared. */
static void test_nonfinite(void) {
    const int64_t n = (int64_t)AMP_CUDA_MAX_BLOCKS * AMP_CUDA_BLOCK + 777;
    const int64_t where[] = {0, n / 2, n - 1};
    const float specials[] = {INFINITY, NAN, -INFINITY, 65504.0f, 1e-40f};
    for (amp_dtype dt : dts) {
        dev_buf g = random_grads(dt, n, dt == AMP_F16 ? 60000.0 : 1e30);
        dev_buf found(4);
        for (float v : specials)
            for (int w = 0; w < 3; w++) {
                float keep = nv_load(g.host.data(), dt, where[w]);
                nv_store(g.host.data(), dt, where[w], v);
                g.upload();
                set_scalar(found, 0.0f);
                CHECK_OK(amp_cuda_nonfinite(amp_cuda_device(), dt, n, g.ptr, found.dev<float>()));
                CHECK(dev_sync());
                bool want = !std::isfinite(nv_load(g.host.data(), dt, where[w]));
                float flag = get_scalar(found);
                CHECK_MSG((flag == 1.0f) == want && (flag == 0.0f || flag == 1.0f),
                          "nonfinite %s: %g at %lld: flag %g", amp_dtype_name(dt), (double)v,
                          (long long)where[w], (double)flag);
                nv_store(g.host.data(), dt, where[w], keep);
                g.upload();
                set_scalar(found, 1.0f);
                CHECK_OK(amp_cuda_nonfinite(amp_cuda_device(), dt, n, g.ptr, found.dev<float>()));
                CHECK(get_scalar(found) == 1.0f);
            }
        CHECK(g.guard_intact());
    }
    float x = 0.0f, f = 0.0f;
    CHECK_FAILS(amp_cuda_nonfinite(amp_cuda_device(), AMP_I32, 1, &x, &f), AMP_ERR_DTYPE,
                "dtype i32");
    CHECK_FAILS(amp_cuda_nonfinite(amp_cuda_device(), AMP_F32, 1, &x, nullptr), AMP_ERR_INVALID_ARG,
                "'found_inf'");
    CHECK_OK(amp_cuda_nonfinite(amp_cuda_device(), AMP_F16, 0, nullptr, &f));
}

static void test_errors(void) {
    float x[4] = {0}, o[4], found = 0.0f;
    CHECK_FAILS(amp_cuda_unscale(amp_cuda_device(), AMP_I32, 4, x, 1.0f, o, &found), AMP_ERR_DTYPE,
                "amp_cuda_unscale: gradient dtype i32");
    CHECK_FAILS(amp_cuda_unscale(amp_cuda_device(), AMP_F32, -1, x, 1.0f, o, &found),
                AMP_ERR_INVALID_ARG, "n = -1");
    CHECK_FAILS(amp_cuda_unscale(amp_cuda_device(), AMP_F32, 4, x, 0.0f, o, &found),
                AMP_ERR_INVALID_ARG, "inv_scale = 0, want a finite value > 0");
    CHECK_FAILS(amp_cuda_unscale(amp_cuda_device(), AMP_F32, 4, x, NAN, o, &found),
                AMP_ERR_INVALID_ARG, "inv_scale = nan");
    CHECK_FAILS(amp_cuda_unscale(amp_cuda_device(), AMP_F32, 4, nullptr, 1.0f, o, &found),
                AMP_ERR_INVALID_ARG, "'grad'");
    CHECK_FAILS(amp_cuda_unscale(amp_cuda_device(), AMP_F32, 4, x, 1.0f, nullptr, &found),
                AMP_ERR_INVALID_ARG, "'out'");
    CHECK_FAILS(amp_cuda_unscale(amp_cuda_device(), AMP_F32, 4, x, 1.0f, o, nullptr),
                AMP_ERR_INVALID_ARG, "'found_inf'");
    CHECK_OK(amp_cuda_unscale(amp_cuda_device(), AMP_F16, 0, nullptr, 1.0f, nullptr, &found));
    CHECK_FAILS(amp_cuda_sum_squares(amp_cuda_device(), AMP_I32, 4, x, o), AMP_ERR_DTYPE,
                "input dtype i32");
    CHECK_FAILS(amp_cuda_sum_squares(amp_cuda_device(), AMP_F32, -3, x, o), AMP_ERR_INVALID_ARG,
                "n = -3");
    CHECK_FAILS(amp_cuda_sum_squares(amp_cuda_device(), AMP_F32, 4, x, nullptr),
                AMP_ERR_INVALID_ARG, "'out'");
    CHECK_FAILS(amp_cuda_sum_squares(amp_cuda_device(), AMP_F32, 4, nullptr, o),
                AMP_ERR_INVALID_ARG, "'x'");
}

int main(void) {
    test_nonfinite();
    test_unscale_values();
    test_unscale_flags();
    test_unscale_in_place();
    test_sum_squares();
    test_errors();
    return test_summary("test_unscale_cudacpu");
}
