/* Runs kernels/cuda/unscale.cu on the CPU under ../shared/cudacpu against plain references
 * written here. Run with CUDACPU_SCHEDULE=random:7 as well: a result that moves is a race.
 *
 * unscale: every output equals (float)g * inv_scale bit for bit (g when inv_scale is 1); the flag
 * is set exactly when an INPUT is inf/NaN (torch's rule), at the start, the middle or the end of
 * a tensor longer than the grid (so grid-stride iterations are covered), is never cleared, and is
 * not written at all for a clean tensor; f32 in place; guard words after each output; argument
 * errors. (The lists' passes, nonfinite and sum_squares among them, are
 * test_multi_scaler_cudacpu.cpp's.) Host code reaches device memory through cudaMemcpy only
 * (dev_buffer.h), as on a GPU; run with CUDACPU_STREAMS=random as well. */
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
}

int main(void) {
    test_unscale_values();
    test_unscale_flags();
    test_unscale_in_place();
    test_errors();
    return test_summary("test_unscale_cudacpu");
}
