/* Runs the CUDA convolution (kernels/cuda/conv.c over cuDNN, conv_bias.cu for the f32 bias)
 * on the CPU under ../shared/cudacpu, cuDNN emulated, against float64 direct loops written here
 * from the contract in core/backend.h (NCHW x OIHW cross-correlation, symmetric zero padding):
 *  - forward with and without bias, backward data, backward weight and the bias gradient on
 *    shapes with stride 1 and 2, padding 0, 1 and 2, kernels 1, 3, 5 and 5x3, non-square inputs,
 *    c_in != c_out, batch 1 and more, output planes larger than the bias gradient's block and
 *    batches larger than the planes it reads at once; f32, f16 and bf16. Tolerance: 1e-5 of the
 *    sum of |products| (f32 accumulation) plus one rounding to the output dtype (its unit
 *    roundoff times |result|; f16/bf16 forward with bias: plus one rounding of |bias|, which is
 *    rounded to the output's dtype before the convolution is added to it);
 *  - every output is overwritten (NaN-filled before), no bias gradient is written without dbias,
 *    and the guard zone after each output comes back untouched;
 *  - bad arguments (dtype, output size, stride, sizes, window, NULL pointers, sizes beyond int, a
 *    tensor cuDNN refuses) fail with the expected status and message and write nothing, and the
 *    next valid call works;
 *  - by default (the descriptor's allow_nondeterministic false) cuDNN's deterministic backward
 *    algorithms are picked and give identical bits on repeated runs; with it the emulation's
 *    first-listed ALGO_0, which cuDNN marks non-deterministic, is taken;
 *  - the descriptor's allow_tf32 reaches the math type: CUDNN_FMA_MATH for f32 by default,
 *    CUDNN_TENSOR_OP_MATH with it (and for f16/bf16 either way); the emulation computes every
 *    math type alike, so only the choice is checked here;
 *  - one algorithm search per shape, dtype, direction and mode: a second call reuses the plan
 *    (same bits), a mode switched back finds its plan again, amp_cuda_conv_shutdown forgets all.
 * Run with CUDACPU_SCHEDULE=random:7 and CUDACPU_STREAMS=random as well. */
#include "cudacpu_cudnn.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/cuda/conv_bias.h"
#include "ops_ref.h"

struct conv_shape {
    int64_t n, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw;
};

static const conv_shape shapes[] = {
    {1, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1},   /* batch 1, non-square, 3x3 "same" */
    {2, 4, 9, 6, 3, 5, 5, 2, 2, 1, 1},   /* 5x5, stride 2 */
    {3, 2, 6, 8, 5, 1, 1, 1, 1, 0, 0},   /* 1x1 */
    {2, 5, 8, 7, 2, 3, 3, 2, 2, 0, 0},   /* stride 2, no padding, odd width */
    {1, 1, 10, 4, 6, 5, 3, 1, 2, 0, 1},  /* 5x3 kernel, mixed stride and padding */
    {4, 3, 5, 5, 8, 3, 3, 1, 1, 1, 1},   /* batch 4 */
    {2, 2, 20, 20, 3, 3, 3, 1, 1, 1, 1}, /* 400-element planes: more than the dbias block */
    {70, 1, 4, 4, 2, 3, 3, 1, 1, 0, 0},  /* 2x2 planes, 70 of them: 64 read at once, then 6 */
    {2, 3, 6, 6, 2, 5, 5, 1, 1, 2, 2},   /* 5x5 "same" */
};

static amp_conv2d_desc make_desc(const conv_shape &s, amp_dtype dt) {
    amp_conv2d_desc d;
    memset(&d, 0, sizeof d);
    d.n = s.n, d.c_in = s.c_in, d.h_in = s.h, d.w_in = s.w, d.c_out = s.c_out;
    d.kh = s.kh, d.kw = s.kw, d.stride_h = s.sh, d.stride_w = s.sw, d.pad_h = s.ph, d.pad_w = s.pw;
    d.h_out = (s.h + 2 * s.ph - s.kh) / s.sh + 1;
    d.w_out = (s.w + 2 * s.pw - s.kw) / s.sw + 1;
    d.dtype = dt;
    return d;
}

static int64_t numel_x(const amp_conv2d_desc &d) { return d.n * d.c_in * d.h_in * d.w_in; }
static int64_t numel_w(const amp_conv2d_desc &d) { return d.c_out * d.c_in * d.kh * d.kw; }
static int64_t numel_y(const amp_conv2d_desc &d) { return d.n * d.c_out * d.h_out * d.w_out; }

/* The four outputs in double from the operands as stored (f16/bf16 widened exactly), and for each
 * element the sum of |terms| that bounds f32 accumulation error. */
struct conv_expect {
    std::vector<double> y, y_mag, dx, dx_mag, dw, dw_mag, db, db_mag;
};

static conv_expect reference(const amp_conv2d_desc &d, const dev_buf &x, const dev_buf &w,
                             const dev_buf &bias, const dev_buf &dy, bool with_bias) {
    conv_expect e;
    e.y.assign(numel_y(d), 0.0), e.y_mag.assign(numel_y(d), 0.0);
    e.dx.assign(numel_x(d), 0.0), e.dx_mag.assign(numel_x(d), 0.0);
    e.dw.assign(numel_w(d), 0.0), e.dw_mag.assign(numel_w(d), 0.0);
    e.db.assign(d.c_out, 0.0), e.db_mag.assign(d.c_out, 0.0);
    const amp_dtype dt = d.dtype;
    for (int64_t n = 0; n < d.n; n++)
        for (int64_t k = 0; k < d.c_out; k++)
            for (int64_t oh = 0; oh < d.h_out; oh++)
                for (int64_t ow = 0; ow < d.w_out; ow++) {
                    int64_t yi = ((n * d.c_out + k) * d.h_out + oh) * d.w_out + ow;
                    double g = nv_load(dy.host.data(), dt, yi);
                    e.db[k] += g, e.db_mag[k] += std::fabs(g);
                    for (int64_t c = 0; c < d.c_in; c++)
                        for (int64_t i = 0; i < d.kh; i++)
                            for (int64_t j = 0; j < d.kw; j++) {
                                int64_t ih = oh * d.stride_h - d.pad_h + i;
                                int64_t iw = ow * d.stride_w - d.pad_w + j;
                                if (ih < 0 || ih >= d.h_in || iw < 0 || iw >= d.w_in) continue;
                                int64_t xi = ((n * d.c_in + c) * d.h_in + ih) * d.w_in + iw;
                                int64_t wi = ((k * d.c_in + c) * d.kh + i) * d.kw + j;
                                double xv = nv_load(x.host.data(), dt, xi);
                                double wv = nv_load(w.host.data(), dt, wi);
                                e.y[yi] += xv * wv, e.y_mag[yi] += std::fabs(xv * wv);
                                e.dx[xi] += g * wv, e.dx_mag[xi] += std::fabs(g * wv);
                                e.dw[wi] += g * xv, e.dw_mag[wi] += std::fabs(g * xv);
                            }
                }
    if (with_bias)
        for (int64_t i = 0; i < numel_y(d); i++) {
            double b = ((const float *)bias.host.data())[(i / (d.h_out * d.w_out)) % d.c_out];
            e.y[i] += b, e.y_mag[i] += std::fabs(b);
        }
    return e;
}

/* Unit roundoff of a dtype: the relative error of one rounding to nearest. */
static double unit_roundoff(amp_dtype dt) {
    return dt == AMP_F16 ? 0x1p-11 : dt == AMP_BF16 ? 0x1p-8 : 0x1p-24;
}

/* How many elements of `got` (dtype dt) are farther from `want` than
 * 1e-5 * mag + u * (|want| + |twice|) + floor, u the dtype's unit roundoff, `twice` (may be NULL)
 * a value rounded to dt on the way; the first one is printed. */
static int64_t n_bad(const char *what, const amp_conv2d_desc &d, const dev_buf &got, amp_dtype dt,
                     const std::vector<double> &want, const std::vector<double> &mag,
                     const std::vector<double> *twice) {
    const double u = unit_roundoff(dt);
    /* f16 subnormals are spaced 2^-24 apart. */
    const double floor = dt == AMP_F16 ? 0x1p-24 : 1e-30;
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); i++) {
        double g = nv_load(got.host.data(), dt, (int64_t)i);
        double again = twice ? std::fabs((*twice)[i]) : 0.0;
        double tol = 1e-5 * mag[i] + u * (std::fabs(want[i]) + again) + floor;
        if (std::fabs(g - want[i]) <= tol) continue;
        if (bad++ == 0)
            fprintf(stderr, "  %s %s x [%lld, %lld, %lld, %lld] w %lldx%lld stride (%lld, %lld) "
                    "pad (%lld, %lld): [%zu] = %.9g, want %.9g (tol %.3g)\n",
                    what, amp_dtype_name(dt), (long long)d.n, (long long)d.c_in, (long long)d.h_in,
                    (long long)d.w_in, (long long)d.kh, (long long)d.kw, (long long)d.stride_h,
                    (long long)d.stride_w, (long long)d.pad_h, (long long)d.pad_w, i, g, want[i],
                    tol);
    }
    return bad;
}

/* NaN bytes in a buffer (an output that is read, or not overwritten, shows them), and the check
 * that they are all still there. */
static void poison(dev_buf &b) {
    memset(b.host.data(), 0xff, b.nbytes);
    b.upload();
}
static bool still_poisoned(dev_buf &b) {
    b.download();
    for (uint8_t v : b.host)
        if (v != 0xff) return false;
    return true;
}

/* Runs the three entries on random operands of shape s and checks them against the reference. */
static void check_shape(const conv_shape &s, amp_dtype dt, bool with_bias) {
    amp_conv2d_desc d = make_desc(s, dt);
    const size_t es = amp_dtype_size(dt);
    dev_buf x = random_buf(dt, numel_x(d), 1.0, false), w = random_buf(dt, numel_w(d), 1.0, false);
    dev_buf dy = random_buf(dt, numel_y(d), 1.0, false);
    dev_buf bias = random_buf(AMP_F32, d.c_out, 1.0, false);
    dev_buf y(numel_y(d) * es), dx(numel_x(d) * es), dw(numel_w(d) * es), db(d.c_out * 4);
    poison(y), poison(dx), poison(dw), poison(db);
    CHECK_OK(amp_cuda_conv2d_fwd(amp_cuda_device(), &d, x.ptr, w.ptr,
                                 with_bias ? bias.dev<float>() : nullptr, y.ptr));
    CHECK_OK(amp_cuda_conv2d_bwd_data(amp_cuda_device(), &d, dy.ptr, w.ptr, dx.ptr));
    CHECK_OK(amp_cuda_conv2d_bwd_weight(amp_cuda_device(), &d, x.ptr, dy.ptr, dw.ptr,
                                        with_bias ? db.dev<float>() : nullptr));
    CHECK(dev_sync());
    y.download(), dx.download(), dw.download();
    conv_expect e = reference(d, x, w, bias, dy, with_bias);
    /* f16/bf16 with a bias: the bias is rounded to the output's dtype before cuDNN adds the
     * convolution to it, one more rounding of |bias| (core/backend.h allows it). */
    bool twice = with_bias && dt != AMP_F32;
    std::vector<double> bias_abs(twice ? (size_t)numel_y(d) : 0);
    for (size_t i = 0; i < bias_abs.size(); i++)
        bias_abs[i] = std::fabs(((const float *)bias.host.data())[(i / (d.h_out * d.w_out)) % d.c_out]);
    int64_t bad_y = n_bad("y", d, y, dt, e.y, e.y_mag, twice ? &bias_abs : nullptr);
    int64_t bad_dx = n_bad("dx", d, dx, dt, e.dx, e.dx_mag, nullptr);
    int64_t bad_dw = n_bad("dw", d, dw, dt, e.dw, e.dw_mag, nullptr);
    int64_t bad_db = 0;
    if (with_bias) {
        db.download();
        for (int64_t k = 0; k < d.c_out; k++) {
            /* Summed in double and rounded once: an f32 rounding of the exact sum. */
            double g = db.h<float>()[k];
            bad_db += !(std::fabs(g - e.db[k]) <= 0x1p-23 * std::fabs(e.db[k]) +
                                                      0x1p-40 * e.db_mag[k]);
        }
    } else {
        CHECK_MSG(still_poisoned(db), "dbias written without being asked for");
    }
    CHECK_MSG(bad_y == 0 && bad_dx == 0 && bad_dw == 0 && bad_db == 0,
              "%s shape [%lld, %lld, %lld, %lld] -> %lld, k %lldx%lld%s: %lld y, %lld dx, %lld dw, "
              "%lld dbias wrong", amp_dtype_name(dt), (long long)s.n, (long long)s.c_in,
              (long long)s.h, (long long)s.w, (long long)s.c_out, (long long)s.kh, (long long)s.kw,
              with_bias ? " + bias" : "", (long long)bad_y, (long long)bad_dx, (long long)bad_dw,
              (long long)bad_db);
    CHECK(y.guard_intact() && dx.guard_intact() && dw.guard_intact() && db.guard_intact());
}

static void test_values(void) {
    for (amp_dtype dt : float_dts)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            check_shape(shapes[i], dt, true);
            if (i % 3 == 0) check_shape(shapes[i], dt, false);
        }
}

/* The outputs of one run of all three entries, copied to the host. */
struct conv_run {
    std::vector<uint8_t> y, dx, dw, db;
};

static conv_run run_all(const amp_conv2d_desc &d, const dev_buf &x, const dev_buf &w,
                        const dev_buf &dy, const dev_buf &bias) {
    const size_t es = amp_dtype_size(d.dtype);
    dev_buf y(numel_y(d) * es), dx(numel_x(d) * es), dw(numel_w(d) * es), db(d.c_out * 4);
    CHECK_OK(amp_cuda_conv2d_fwd(amp_cuda_device(), &d, x.ptr, w.ptr, bias.dev<float>(), y.ptr));
    CHECK_OK(amp_cuda_conv2d_bwd_data(amp_cuda_device(), &d, dy.ptr, w.ptr, dx.ptr));
    CHECK_OK(amp_cuda_conv2d_bwd_weight(amp_cuda_device(), &d, x.ptr, dy.ptr, dw.ptr,
                                        db.dev<float>()));
    CHECK(dev_sync());
    y.download(), dx.download(), dw.download(), db.download();
    return conv_run{y.host, dx.host, dw.host, db.host};
}

static bool same_bits(const conv_run &a, const conv_run &b) {
    return a.y == b.y && a.dx == b.dx && a.dw == b.dw && a.db == b.db;
}

static void test_deterministic(void) {
    amp_cuda_conv_stats st;
    for (amp_dtype dt : {AMP_F32, AMP_F16}) {
        amp_conv2d_desc d = make_desc({3, 4, 9, 7, 5, 3, 3, 1, 1, 1, 1}, dt);
        dev_buf x = random_buf(dt, numel_x(d), 1.0, false);
        dev_buf w = random_buf(dt, numel_w(d), 1.0, false);
        dev_buf dy = random_buf(dt, numel_y(d), 1.0, false);
        dev_buf bias = random_buf(AMP_F32, d.c_out, 1.0, false);
        /* The default mode: cuDNN's deterministic backward algorithms (no atomics). */
        conv_run a = run_all(d, x, w, dy, bias), b = run_all(d, x, w, dy, bias);
        CHECK_MSG(same_bits(a, b), "%s: two deterministic runs differ", amp_dtype_name(dt));
        amp_cuda_conv_stats_get(amp_cuda_device(), &st);
        CHECK_MSG(st.bwd_data_algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 &&
                      st.bwd_filter_algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 &&
                      st.bwd_filter_algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
                  "deterministic mode chose backward algorithms %d and %d", st.bwd_data_algo,
                  st.bwd_filter_algo);
        /* Allowed: the first runnable algorithm, which the emulation's heuristics list as ALGO_0
         * (it needs no workspace); the emulation computes every algorithm alike. */
        amp_conv2d_desc nd = d;
        nd.allow_nondeterministic = true;
        conv_run c = run_all(nd, x, w, dy, bias);
        amp_cuda_conv_stats_get(amp_cuda_device(), &st);
        CHECK(st.bwd_data_algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 &&
              st.bwd_filter_algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
        CHECK(c.y == a.y);
        conv_run e = run_all(d, x, w, dy, bias);
        CHECK(same_bits(a, e));
        amp_cuda_conv_stats_get(amp_cuda_device(), &st);
        CHECK(st.bwd_data_algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0);
    }
}

/* allow_tf32 picks the math type of the plan (tensor-op math for f32 only with it). */
static void test_tf32_math(void) {
    amp_cuda_conv_stats st;
    for (amp_dtype dt : {AMP_F32, AMP_BF16}) {
        for (bool tf32 : {false, true}) {
            amp_conv2d_desc d = make_desc({2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1}, dt);
            d.allow_tf32 = tf32;
            dev_buf x = random_buf(dt, numel_x(d), 1.0, false);
            dev_buf w = random_buf(dt, numel_w(d), 1.0, false);
            dev_buf y(numel_y(d) * amp_dtype_size(dt));
            CHECK_OK(amp_cuda_conv2d_fwd(amp_cuda_device(), &d, x.ptr, w.ptr, nullptr, y.ptr));
            amp_cuda_conv_stats_get(amp_cuda_device(), &st);
            int want = dt == AMP_F32 && !tf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
            CHECK_MSG(st.math_type == want, "%s, allow_tf32 %d: math type %d, want %d",
                      amp_dtype_name(dt), tf32, st.math_type, want);
            CHECK_OK(amp_cuda_conv2d_bwd_weight(amp_cuda_device(), &d, x.ptr, y.ptr, w.ptr,
                                                nullptr));
            amp_cuda_conv_stats_get(amp_cuda_device(), &st);
            CHECK(st.math_type == want);
            CHECK(dev_sync());
        }
    }
}

static int64_t searches(void) {
    amp_cuda_conv_stats st;
    amp_cuda_conv_stats_get(amp_cuda_device(), &st);
    return st.algo_searches;
}

/* One search per new plan; the second call of a shape reuses it with the same bits. */
static void test_cache(void) {
    amp_conv2d_desc d = make_desc({2, 3, 11, 13, 4, 3, 5, 2, 1, 2, 1}, AMP_F32);
    dev_buf x = random_buf(AMP_F32, numel_x(d), 1.0, false);
    dev_buf w = random_buf(AMP_F32, numel_w(d), 1.0, false);
    dev_buf dy = random_buf(AMP_F32, numel_y(d), 1.0, false);
    dev_buf y1(numel_y(d) * 4), y2(numel_y(d) * 4), dx(numel_x(d) * 4), dw(numel_w(d) * 4);
    int64_t s0 = searches();
    CHECK_OK(amp_cuda_conv2d_fwd(amp_cuda_device(), &d, x.ptr, w.ptr, nullptr, y1.ptr));
    CHECK(searches() == s0 + 1);
    CHECK_OK(amp_cuda_conv2d_fwd(amp_cuda_device(), &d, x.ptr, w.ptr, nullptr, y2.ptr));
    CHECK(searches() == s0 + 1);
    CHECK_OK(amp_cuda_conv2d_bwd_data(amp_cuda_device(), &d, dy.ptr, w.ptr, dx.ptr));
    CHECK_OK(amp_cuda_conv2d_bwd_data(amp_cuda_device(), &d, dy.ptr, w.ptr, dx.ptr));
    CHECK(searches() == s0 + 2);
    CHECK_OK(amp_cuda_conv2d_bwd_weight(amp_cuda_device(), &d, x.ptr, dy.ptr, dw.ptr, nullptr));
    CHECK_OK(amp_cuda_conv2d_bwd_weight(amp_cuda_device(), &d, x.ptr, dy.ptr, dw.ptr, nullptr));
    CHECK(searches() == s0 + 3);
    CHECK(dev_sync());
    y1.download(), y2.download();
    CHECK(y1.host == y2.host);

    /* Another dtype, and the other mode, are other plans; switching back finds the first again. */
    amp_conv2d_desc h = d;
    h.dtype = AMP_BF16;
    dev_buf xh = random_buf(AMP_BF16, numel_x(h), 1.0, false);
    dev_buf wh = random_buf(AMP_BF16, numel_w(h), 1.0, false), yh(numel_y(h) * 2);
    CHECK_OK(amp_cuda_conv2d_fwd(amp_cuda_device(), &h, xh.ptr, wh.ptr, nullptr, yh.ptr));
    CHECK(searches() == s0 + 4);
    amp_conv2d_desc nd = d;
    nd.allow_nondeterministic = true;
    CHECK_OK(amp_cuda_conv2d_fwd(amp_cuda_device(), &nd, x.ptr, w.ptr, nullptr, y2.ptr));
    CHECK(searches() == s0 + 5);
    CHECK_OK(amp_cuda_conv2d_fwd(amp_cuda_device(), &d, x.ptr, w.ptr, nullptr, y2.ptr));
    CHECK(searches() == s0 + 5);
    nd.allow_nondeterministic = false; /* TF32 is another plan for f32, not for bf16 */
    nd.allow_tf32 = true;
    CHECK_OK(amp_cuda_conv2d_fwd(amp_cuda_device(), &nd, x.ptr, w.ptr, nullptr, y2.ptr));
    CHECK(searches() == s0 + 6);
    h.allow_tf32 = true;
    CHECK_OK(amp_cuda_conv2d_fwd(amp_cuda_device(), &h, xh.ptr, wh.ptr, nullptr, yh.ptr));
    CHECK(searches() == s0 + 6);

    /* Shutdown forgets the plans and the handle; the next call makes both again. */
    amp_cuda_conv_shutdown(amp_cuda_device());
    poison(y2);
    CHECK_OK(amp_cuda_conv2d_fwd(amp_cuda_device(), &d, x.ptr, w.ptr, nullptr, y2.ptr));
    CHECK(searches() == s0 + 7);
    CHECK(dev_sync());
    y2.download();
    CHECK(y1.host == y2.host);
}

static void test_errors(void) {
    amp_conv2d_desc d = make_desc({1, 2, 5, 5, 3, 3, 3, 1, 1, 1, 1}, AMP_F32);
    dev_buf x(numel_x(d) * 4), w(numel_w(d) * 4), y(numel_y(d) * 4), db(d.c_out * 4);
    poison(y), poison(db);
    int64_t s0 = searches();
    amp_conv2d_desc bad = d;
    bad.dtype = AMP_I32;
    CHECK_FAILS(amp_cuda_conv2d_fwd(amp_cuda_device(), &bad, x.ptr, w.ptr, nullptr, y.ptr),
                AMP_ERR_UNSUPPORTED,
                "amp_cuda_conv2d_fwd: dtype i32: the convolution takes f32, f16 or bf16");
    bad = d;
    bad.h_out = 4;
    CHECK_FAILS(amp_cuda_conv2d_fwd(amp_cuda_device(), &bad, x.ptr, w.ptr, nullptr, y.ptr),
                AMP_ERR_SHAPE,
                "output 4x5, but input 5x5, kernel 3x3, stride (1, 1), pad (1, 1) give 5x5");
    CHECK_FAILS(amp_cuda_conv2d_bwd_data(amp_cuda_device(), &bad, y.ptr, w.ptr, x.ptr),
                AMP_ERR_SHAPE, "amp_cuda_conv2d_bwd_data: output 4x5");
    CHECK_FAILS(amp_cuda_conv2d_bwd_weight(amp_cuda_device(), &bad, x.ptr, y.ptr, w.ptr,
                                           db.dev<float>()),
                AMP_ERR_SHAPE, "amp_cuda_conv2d_bwd_weight: output 4x5");
    bad = d;
    bad.stride_w = 0;
    CHECK_FAILS(amp_cuda_conv2d_fwd(amp_cuda_device(), &bad, x.ptr, w.ptr, nullptr, y.ptr),
                AMP_ERR_SHAPE, "stride (1, 0) must be >= 1");
    bad = d;
    bad.c_out = 0;
    CHECK_FAILS(amp_cuda_conv2d_fwd(amp_cuda_device(), &bad, x.ptr, w.ptr, nullptr, y.ptr),
                AMP_ERR_SHAPE, "every size must be >= 1");
    bad = d;
    bad.kh = 9, bad.h_out = 0; /* a window taller than the padded input */
    CHECK_FAILS(amp_cuda_conv2d_fwd(amp_cuda_device(), &bad, x.ptr, w.ptr, nullptr, y.ptr),
                AMP_ERR_SHAPE, "kernel 9x3");
    CHECK_FAILS(amp_cuda_conv2d_fwd(amp_cuda_device(), &d, nullptr, w.ptr, nullptr, y.ptr),
                AMP_ERR_INVALID_ARG, "amp_cuda_conv2d_fwd: argument 'x' is NULL");
    CHECK_FAILS(amp_cuda_conv2d_fwd(amp_cuda_device(), &d, x.ptr, w.ptr, nullptr, nullptr),
                AMP_ERR_INVALID_ARG, "argument 'y' is NULL");
    CHECK_FAILS(amp_cuda_conv2d_bwd_data(amp_cuda_device(), &d, nullptr, w.ptr, x.ptr),
                AMP_ERR_INVALID_ARG, "argument 'dy' is NULL");
    CHECK_FAILS(amp_cuda_conv2d_bwd_weight(amp_cuda_device(), &d, x.ptr, y.ptr, nullptr, nullptr),
                AMP_ERR_INVALID_ARG, "argument 'dw' is NULL");
    CHECK_FAILS(
            amp_cuda_conv2d_bwd_weight(amp_cuda_device(), nullptr, x.ptr, y.ptr, w.ptr, nullptr),
            AMP_ERR_INVALID_ARG, "argument 'd' is NULL");
    /* Sizes beyond cuDNN's int descriptors. */
    bad = d;
    bad.c_in = (int64_t)1 << 31;
    CHECK_FAILS(amp_cuda_conv2d_fwd(amp_cuda_device(), &bad, x.ptr, w.ptr, nullptr, y.ptr),
                AMP_ERR_UNSUPPORTED, "cuDNN takes sizes up to 2147483647");
    CHECK(searches() == s0);
    /* A tensor of 2^32 elements, which cuDNN's legacy descriptors refuse: its status and message
     * come back (nothing runs, so the small buffers are never read). */
    amp_conv2d_desc huge = make_desc({65536, 1, 256, 256, 1, 1, 1, 1, 1, 0, 0}, AMP_F32);
    CHECK_FAILS(amp_cuda_conv2d_fwd(amp_cuda_device(), &huge, x.ptr, w.ptr, nullptr, y.ptr),
                AMP_ERR_BACKEND,
                "amp_cuda_conv2d_fwd: cudnnSetTensor4dDescriptor: CUDNN_STATUS_NOT_SUPPORTED: "
                "tensor larger than 2 Giga-elements");
    CHECK(dev_sync());
    CHECK(still_poisoned(y) && still_poisoned(db) && y.guard_intact());
    /* The failed plan left nothing behind: a valid call still works. */
    dev_buf xv = random_buf(AMP_F32, numel_x(d), 1.0, false);
    dev_buf wv = random_buf(AMP_F32, numel_w(d), 1.0, false);
    CHECK_OK(amp_cuda_conv2d_fwd(amp_cuda_device(), &d, xv.ptr, wv.ptr, nullptr, y.ptr));
    CHECK(dev_sync());
    CHECK(!still_poisoned(y));
}

int main(void) {
    test_values();
    test_deterministic();
    test_tf32_math();
    test_cache();
    test_errors();
    amp_cuda_conv_shutdown(amp_cuda_device());
    return test_summary("test_conv_cudacpu");
}
