/* Runs kernels/cuda/pool.cu on the CPU under ../shared/cudacpu and checks it two ways:
 *  - against the CPU backend's own max pooling (kernels/cpu/pool.c, linked in): y and dx bit
 *    for bit;
 *  - against a plain reference written here from the contract (PyTorch's max_pool2d): y is the
 *    window's maximum, the argmax (h * w_in + w in the input plane) the first maximum in row-major
 *    order, or the last NaN when the window holds one (NaN propagates); padding never wins; dx[i]
 *    is the sum over the outputs whose argmax is i of their dy (double, within the f32 sum's and
 *    the dtype's rounding), 0 where none is. The backward finds the argmax again from x
 *    (core/backend.h), so the reference's argmax is checked through dx.
 * Windows k = 2 stride 2, k = 3 stride 1 pad 1, k = 3 stride 2 pad 1, stride > k (inputs in no
 * window), 1x1, non-square planes, past the grid cap; f32, f16 and bf16; data of few distinct
 * values (ties everywhere, +0 and -0 among them) with NaN, inf and -inf; windows of -inf only and
 * of NaN only; guard zones after every output; the argument errors. Run with CUDACPU_SCHEDULE=random:7 and
 * CUDACPU_STREAMS=random as well. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ops_ref.h"

/* The CPU backend's max pooling and the one function it needs from the rest of that backend,
 * written here over NVIDIA's conversions (round to nearest even, as memory.c's). */
extern "C" {
amp_status amp_cpu_maxpool_fwd(amp_device_ctx *dev, const amp_pool_desc *d, const void *x, void *y);
amp_status amp_cpu_maxpool_bwd(amp_device_ctx *dev, const amp_pool_desc *d, const void *dy,
                               const void *x, void *dx);
amp_status amp_cpu_convert(void *dst, amp_dtype dst_dt, const void *src, amp_dtype src_dt,
                           int64_t n) {
    for (int64_t i = 0; i < n; i++) nv_store(dst, dst_dt, i, nv_load(src, src_dt, i));
    return AMP_OK;
}
}

static amp_pool_desc pool_desc(amp_dtype dt, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                               int64_t s, int64_t pad) {
    return amp_pool_desc{n, c, h, w, (h + 2 * pad - k) / s + 1, (w + 2 * pad - k) / s + 1,
                         k, s, pad, dt};
}

/* Input element offsets of output o's window (row-major, clipped to the plane): the window starts
 * at (oh * stride - pad, ow * stride - pad) and spans k x k. */
static std::vector<int64_t> window_of(const amp_pool_desc &d, int64_t oh, int64_t ow) {
    std::vector<int64_t> in;
    for (int64_t ih = oh * d.stride - d.pad; ih < oh * d.stride - d.pad + d.k; ih++)
        for (int64_t iw = ow * d.stride - d.pad; iw < ow * d.stride - d.pad + d.k; iw++)
            if (ih >= 0 && ih < d.h_in && iw >= 0 && iw < d.w_in) in.push_back(ih * d.w_in + iw);
    return in;
}

/* Values from {-2, -1, -0, +0, 1, 2} (ties in most windows), with a few NaN, inf and -inf. */
static std::vector<uint8_t> tie_data(amp_dtype dt, int64_t n) {
    static const float levels[] = {-2.0f, -1.0f, -0.0f, 0.0f, 1.0f, 2.0f};
    std::vector<uint8_t> v((size_t)n * amp_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        double u = rnd_uniform();
        float x = levels[(int)(rnd_uniform() * 6)];
        if (u < 0.02) x = NAN;
        else if (u < 0.03) x = INFINITY;
        else if (u < 0.05) x = -INFINITY;
        nv_store(v.data(), dt, i, x);
    }
    return v;
}

static dev_buf upload_vec(const void *src, size_t nbytes) {
    dev_buf b(nbytes);
    b.upload(src);
    return b;
}

/* The reference's y and argmax of output (p, oh, ow): PyTorch's rule, written as a definition
 * rather than a scan. */
static void ref_window(const amp_pool_desc &d, const void *x, int64_t p, int64_t oh, int64_t ow,
                       float *y, int32_t *am) {
    std::vector<int64_t> in = window_of(d, oh, ow);
    int64_t base = p * d.h_in * d.w_in, last_nan = -1;
    float mx = -INFINITY;
    for (int64_t i : in) {
        float v = nv_load(x, d.dtype, base + i);
        if (std::isnan(v)) last_nan = i;
        else mx = std::fmax(mx, v);
    }
    if (last_nan >= 0) {
        *y = NAN, *am = (int32_t)last_nan;
        return;
    }
    for (int64_t i : in)
        if (nv_load(x, d.dtype, base + i) == mx) {
            *y = nv_load(x, d.dtype, base + i), *am = (int32_t)i; /* its sign of zero */
            return;
        }
}

/* Forward, then backward (which finds each window's argmax again from x); CUDA against the CPU
 * backend and the reference. */
static void run_case(amp_dtype dt, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                     int64_t s, int64_t pad) {
    amp_pool_desc d = pool_desc(dt, n, c, h, w, k, s, pad);
    int64_t planes = n * c, in_sz = h * w, out_sz = d.h_out * d.w_out;
    int64_t n_in = planes * in_sz, n_out = planes * out_sz;
    size_t es = amp_dtype_size(dt);
    std::vector<uint8_t> xh = tie_data(dt, n_in), dyh((size_t)n_out * es);
    for (int64_t o = 0; o < n_out; o++) /* dy: distinct values, so sums show their order */
        nv_store(dyh.data(), dt, o, (float)(2 * rnd_uniform() - 1));
    dev_buf x = upload_vec(xh.data(), xh.size()), y((size_t)n_out * es);
    dev_buf dy = upload_vec(dyh.data(), dyh.size()), dx((size_t)n_in * es);
    CHECK_OK(amp_cuda_maxpool_fwd(amp_cuda_device(), &d, x.ptr, y.ptr));
    std::vector<uint8_t> cy((size_t)n_out * es), cdx((size_t)n_in * es);
    CHECK_OK(amp_cpu_maxpool_fwd(amp_cpu_device(), &d, xh.data(), cy.data()));
    /* dx starts as garbage: it must be overwritten everywhere. */
    std::vector<uint8_t> junk((size_t)n_in * es, 0x7b);
    dx.upload(junk.data());
    CHECK_OK(amp_cuda_maxpool_bwd(amp_cuda_device(), &d, dy.ptr, x.ptr, dx.ptr));
    CHECK_OK(amp_cpu_maxpool_bwd(amp_cpu_device(), &d, dyh.data(), xh.data(), cdx.data()));
    CHECK(dev_sync());
    y.download();
    dx.download();

    int64_t bad_cpu = 0, bad_ref = 0;
    for (int64_t o = 0; o < n_out; o++)
        bad_cpu += !same_f32(nv_load(y.host.data(), dt, o), nv_load(cy.data(), dt, o));
    for (int64_t i = 0; i < n_in; i++)
        bad_cpu += !same_f32(nv_load(dx.host.data(), dt, i), nv_load(cdx.data(), dt, i));
    std::vector<double> want_dx((size_t)n_in, 0.0), abs_dx((size_t)n_in, 0.0);
    for (int64_t p = 0; p < planes; p++)
        for (int64_t oh = 0; oh < d.h_out; oh++)
            for (int64_t ow = 0; ow < d.w_out; ow++) {
                int64_t o = (p * d.h_out + oh) * d.w_out + ow;
                float ry = 0.0f;
                int32_t ram = -1;
                ref_window(d, xh.data(), p, oh, ow, &ry, &ram);
                bad_ref += !same_f32(nv_load(y.host.data(), dt, o), ry);
                double g = nv_load(dyh.data(), dt, o);
                want_dx[(size_t)(p * in_sz + ram)] += g;
                abs_dx[(size_t)(p * in_sz + ram)] += std::fabs(g);
            }
    double ulp = dt == AMP_F32 ? 0x1p-23 : dt == AMP_F16 ? 0x1p-10 : 0x1p-7;
    for (int64_t i = 0; i < n_in; i++) {
        double got = nv_load(dx.host.data(), dt, i), want = want_dx[(size_t)i];
        double tol = 0x1p-21 * abs_dx[(size_t)i] + ulp * std::fabs(want);
        bad_ref += !(std::fabs(got - want) <= tol);
    }
    CHECK_MSG(bad_cpu == 0 && bad_ref == 0,
              "maxpool %s [%lld, %lld, %lld, %lld] k %lld stride %lld pad %lld: %lld values "
              "differ from the CPU backend, %lld from the reference", amp_dtype_name(dt),
              (long long)n, (long long)c, (long long)h, (long long)w, (long long)k, (long long)s,
              (long long)pad, (long long)bad_cpu, (long long)bad_ref);
    CHECK(x.guard_intact() && y.guard_intact() && dy.guard_intact() && dx.guard_intact());
}

static void test_shapes(void) {
    const int64_t shapes[][7] = {
        /* n, c, h, w, k, stride, pad */
        {1, 1, 4, 4, 2, 2, 0},
        {2, 3, 8, 8, 2, 2, 0},
        {2, 3, 7, 5, 3, 1, 1},  /* overlapping windows, non-square */
        {2, 2, 9, 8, 3, 2, 1},  /* ResNet's stem pool on an odd and an even side */
        {1, 3, 6, 11, 2, 2, 0}, /* the last column is in no window */
        {3, 2, 7, 7, 2, 3, 0},  /* stride > k: rows and columns in no window */
        {2, 2, 1, 1, 1, 1, 0},  /* 1x1 */
        {1, 2, 5, 4, 3, 3, 1},
        {2, 4, 33, 47, 3, 2, 1},
    };
    for (amp_dtype dt : float_dts)
        for (const auto &s : shapes) run_case(dt, s[0], s[1], s[2], s[3], s[4], s[5], s[6]);
    /* Past the grid cap (4096 x 256 threads) in both passes: threads loop. */
    run_case(AMP_F32, 2, 8, 256, 260, 3, 1, 1);
}

/* Windows of -inf only give -inf at their first element; windows of NaN only, NaN at their
 * last; a NaN after a larger value still wins; ties keep the first, +0 before -0 included. The
 * argmax is seen through the backward: dy = 1, 2, 3, 4 must land on those elements alone. */
static void test_special_windows(void) {
    amp_pool_desc d = pool_desc(AMP_F32, 1, 1, 2, 8, 2, 2, 0);
    const float x[16] = {-INFINITY, -INFINITY, NAN, NAN,  5.0f, NAN, 0.0f, -0.0f,
                         -INFINITY, -INFINITY, NAN, NAN,  1.0f, 2.0f, -0.0f, 0.0f};
    const float dyv[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    dev_buf xd = upload_vec(x, sizeof x), yd(16), dyd = upload_vec(dyv, sizeof dyv), dxd(64);
    CHECK_OK(amp_cuda_maxpool_fwd(amp_cuda_device(), &d, xd.ptr, yd.ptr));
    CHECK_OK(amp_cuda_maxpool_bwd(amp_cuda_device(), &d, dyd.ptr, xd.ptr, dxd.ptr));
    CHECK(dev_sync());
    yd.download();
    dxd.download();
    const float *y = yd.h<float>(), *dx = dxd.h<float>();
    CHECK(y[0] == -INFINITY && std::isnan(y[1]) && std::isnan(y[2]));
    CHECK(y[3] == 0.0f && !std::signbit(y[3]));
    float want[16] = {0};
    want[0] = 1.0f, want[11] = 2.0f, want[5] = 3.0f, want[6] = 4.0f;
    CHECK(memcmp(dx, want, sizeof want) == 0);
}

static void test_errors(void) {
    float x[16] = {0}, y[4];
    amp_pool_desc d = pool_desc(AMP_F32, 1, 1, 4, 4, 2, 2, 0);
    CHECK_FAILS(amp_cuda_maxpool_fwd(amp_cuda_device(), nullptr, x, y), AMP_ERR_INVALID_ARG,
                "amp_cuda_maxpool_fwd: argument 'd' is NULL");
    CHECK_FAILS(amp_cuda_maxpool_fwd(amp_cuda_device(), &d, nullptr, y), AMP_ERR_INVALID_ARG,
                "amp_cuda_maxpool_fwd: argument 'x' is NULL");
    CHECK_FAILS(amp_cuda_maxpool_fwd(amp_cuda_device(), &d, x, nullptr), AMP_ERR_INVALID_ARG,
                "argument 'y' is NULL");
    CHECK_FAILS(amp_cuda_maxpool_bwd(amp_cuda_device(), &d, y, x, nullptr), AMP_ERR_INVALID_ARG,
                "amp_cuda_maxpool_bwd: argument 'dx' is NULL");
    CHECK_FAILS(amp_cuda_maxpool_bwd(amp_cuda_device(), &d, nullptr, x, x), AMP_ERR_INVALID_ARG,
                "argument 'dy' is NULL");
    CHECK_FAILS(amp_cuda_maxpool_bwd(amp_cuda_device(), &d, y, nullptr, x), AMP_ERR_INVALID_ARG,
                "amp_cuda_maxpool_bwd: argument 'x' is NULL");
    amp_pool_desc e = d;
    e.dtype = AMP_I32;
    CHECK_FAILS(amp_cuda_maxpool_fwd(amp_cuda_device(), &e, x, y), AMP_ERR_DTYPE,
                "amp_cuda_maxpool_fwd: dtype i32 is not a float type");
    e = d, e.n = 0;
    CHECK_FAILS(amp_cuda_maxpool_bwd(amp_cuda_device(), &e, y, x, x), AMP_ERR_SHAPE,
                "has an empty dimension");
    e = d, e.stride = 0;
    CHECK_FAILS(amp_cuda_maxpool_fwd(amp_cuda_device(), &e, x, y), AMP_ERR_INVALID_ARG, "stride 0");
    e = pool_desc(AMP_F16, 1, 1, 4, 4, 3, 1, 1), e.pad = 2;
    CHECK_FAILS(amp_cuda_maxpool_fwd(amp_cuda_device(), &e, x, y), AMP_ERR_INVALID_ARG, "pad 2");
    e = d, e.h_out = 3;
    CHECK_FAILS(amp_cuda_maxpool_fwd(amp_cuda_device(), &e, x, y), AMP_ERR_SHAPE, "output 3 x 2");
    e = pool_desc(AMP_BF16, 1, 1, 65536, 65536, 2, 2, 0);
    CHECK_FAILS(amp_cuda_maxpool_fwd(amp_cuda_device(), &e, x, y), AMP_ERR_SHAPE,
                "does not fit an i32 plane index");
}

int main(void) {
    test_shapes();
    test_special_windows();
    test_errors();
    return test_summary("test_pool_cudacpu");
}
