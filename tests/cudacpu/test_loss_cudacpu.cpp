/* Runs kernels/cuda/loss.cu on the CPU under ../shared/cudacpu against plain references written
 * here in double (long double for the sums) from the contract in core/backend.h:
 *  - xent_fwd: log-softmax within a few f32 ulps of the double one and the loss within an f32
 *    rounding, for f32/f16/bf16, rows past the block grid cap and class counts below, at and past
 *    the block size; a NaN logit makes its row (and the loss) NaN and no other; a row of equal
 *    zeros of both signs; 0 rows give a NaN loss;
 *  - xent_bwd: (softmax - onehot) * dloss / rows from the saved log-softmax;
 *  - labels out of range: xent_fwd fails with the CPU backend's message naming the first bad row
 *    and writes nothing; xent_bwd writes NaN into that gradient row and the next xent_fwd reports
 *    the row, once;
 *  - mse_fwd within an f32 rounding of a long double mean, NaN for n = 0; mse_bwd bit for bit
 *    ((a - b) * (2 / n)) * dloss, in place too;
 *  - guard zones after every output; the CPU backend's argument errors.
 * Run with CUDACPU_SCHEDULE=random:7 and CUDACPU_STREAMS=random as well. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "ops_ref.h"

/* The double log-softmax of row r of logits (dtype dt). */
static std::vector<double> ref_logsoftmax(const dev_buf &x, amp_dtype dt, int64_t r,
                                          int64_t classes) {
    std::vector<double> ls(classes);
    double m = -INFINITY;
    bool nan = false;
    for (int64_t j = 0; j < classes; j++) {
        double v = nv_load(x.host.data(), dt, r * classes + j);
        nan |= std::isnan(v);
        if (v > m) m = v;
    }
    long double s = 0;
    for (int64_t j = 0; j < classes; j++)
        s += std::exp((long double)nv_load(x.host.data(), dt, r * classes + j) - m);
    double lse = (double)std::log(s);
    for (int64_t j = 0; j < classes; j++)
        ls[j] = nan ? NAN : nv_load(x.host.data(), dt, r * classes + j) - m - lse;
    return ls;
}

static void upload_labels(dev_buf &lab, int64_t rows, int64_t classes) {
    for (int64_t r = 0; r < rows; r++) lab.h<int32_t>()[r] = (int32_t)(rnd_uniform() * classes);
    lab.upload();
}

static void test_xent(void) {
    /* 8200 rows: past xent_fwd's grid cap of 8192 blocks (rows loop), once, for f32. */
    const int64_t shapes[][2] = {{1, 1}, {5, 10}, {8200, 3}, {33, 256}, {7, 1000}, {3, 5000}};
    for (amp_dtype dt : float_dts)
        for (const auto &s : shapes) {
            int64_t rows = s[0], classes = s[1], n = rows * classes;
            if (rows > 1000 && dt != AMP_F32) continue;
            dev_buf x = random_buf(dt, n, 8.0, false);
            dev_buf lab((size_t)rows * 4), ls((size_t)n * 4), loss(4), dloss(4);
            upload_labels(lab, rows, classes);
            const int32_t *labels = lab.h<int32_t>();
            CHECK_OK(amp_cuda_xent_fwd(amp_cuda_device(), dt, rows, classes, x.ptr,
                                       lab.dev<int32_t>(), loss.dev<float>(), ls.dev<float>()));
            const float dl = 0.75f;
            set_scalar(dloss, dl);
            dev_buf g((size_t)n * amp_dtype_size(dt));
            CHECK_OK(amp_cuda_xent_bwd(amp_cuda_device(), dt, rows, classes, ls.dev<float>(),
                                       lab.dev<int32_t>(), dloss.dev<float>(), g.ptr));
            CHECK(dev_sync());
            ls.download();
            g.download();
            float got_loss = get_scalar(loss);
            long double ref_loss = 0;
            int64_t bad_ls = 0, bad_g = 0;
            double scale = (double)dl / (double)rows;
            for (int64_t r = 0; r < rows; r++) {
                std::vector<double> want = ref_logsoftmax(x, dt, r, classes);
                ref_loss -= want[labels[r]];
                for (int64_t j = 0; j < classes; j++) {
                    float got = ls.h<float>()[r * classes + j];
                    /* f32 steps (x - max) - log_sum: a few ulps of the larger term. */
                    double tol = 0x1p-21 * (std::fabs(want[j]) + 8.0 + std::log((double)classes));
                    bad_ls += !(std::fabs(got - want[j]) <= tol);
                    double gw = (std::exp((double)got) - (j == labels[r] ? 1.0 : 0.0)) * scale;
                    double gg = nv_load(g.host.data(), dt, r * classes + j);
                    double gtol = dt == AMP_F32 ? 0x1p-22 * std::fabs(scale)
                                  : (dt == AMP_F16 ? 0x1p-10 : 0x1p-7) * std::fabs(gw) +
                                        0x1p-22 * std::fabs(scale) + 1e-7;
                    bad_g += !(std::fabs(gg - gw) <= gtol);
                }
            }
            ref_loss /= rows;
            CHECK_MSG(bad_ls == 0 && bad_g == 0, "xent %s [%lld, %lld]: %lld log-softmax and %lld "
                      "gradients wrong", amp_dtype_name(dt), (long long)rows, (long long)classes,
                      (long long)bad_ls, (long long)bad_g);
            CHECK_MSG(std::fabs(got_loss - ref_loss) <= 0x1p-20L * (std::fabs(ref_loss) + 1),
                      "xent loss %s [%lld, %lld]: %.9g vs %.12Lg", amp_dtype_name(dt),
                      (long long)rows, (long long)classes, (double)got_loss, ref_loss);
            CHECK(ls.guard_intact() && loss.guard_intact() && g.guard_intact());
        }
}

/* A NaN logit: its row's log-softmax and the loss are NaN, other rows are finite. A row of zeros
 * of both signs with one class: log-softmax 0 of the scan's sign. 0 rows: NaN loss. */
static void test_xent_special(void) {
    const int64_t rows = 4, classes = 300, n = rows * classes;
    dev_buf x = random_buf(AMP_F32, n, 3.0, false);
    x.h<float>()[2 * classes + 299] = NAN;
    x.h<float>()[1 * classes + 7] = INFINITY; /* inf - inf: NaN row too, as torch */
    x.upload();
    dev_buf lab(rows * 4), ls(n * 4), loss(4);
    upload_labels(lab, rows, classes);
    CHECK_OK(amp_cuda_xent_fwd(amp_cuda_device(), AMP_F32, rows, classes, x.ptr, lab.dev<int32_t>(),
                               loss.dev<float>(), ls.dev<float>()));
    CHECK(dev_sync());
    ls.download();
    for (int64_t r = 0; r < rows; r++) {
        int64_t n_nan = 0;
        for (int64_t j = 0; j < classes; j++) n_nan += std::isnan(ls.h<float>()[r * classes + j]);
        CHECK_MSG(n_nan == (r == 1 || r == 2 ? classes : 0), "row %lld: %lld NaN", (long long)r,
                  (long long)n_nan);
    }
    CHECK(std::isnan(get_scalar(loss)) && ls.guard_intact());

    dev_buf z(2 * 4), lz(2 * 4), l1(2 * 4);
    z.h<float>()[0] = -0.0f, z.h<float>()[1] = 0.0f;
    z.upload();
    lz.upload(); /* labels 0 */
    CHECK_OK(amp_cuda_xent_fwd(amp_cuda_device(), AMP_F32, 2, 1, z.ptr, lz.dev<int32_t>(),
                               loss.dev<float>(), l1.dev<float>()));
    CHECK(dev_sync());
    l1.download();
    CHECK(l1.h<float>()[0] == 0.0f && l1.h<float>()[1] == 0.0f);
    float zero_loss = get_scalar(loss);
    CHECK(zero_loss == 0.0f);

    set_scalar(loss, 1.0f);
    CHECK_OK(amp_cuda_xent_fwd(amp_cuda_device(), AMP_BF16, 0, 10, nullptr, nullptr,
                               loss.dev<float>(), nullptr));
    CHECK(dev_sync());
    CHECK(std::isnan(get_scalar(loss)) && loss.guard_intact());
}

static void test_xent_labels(void) {
    const int64_t rows = 4001, classes = 5, n = rows * classes;
    dev_buf x = random_buf(AMP_F16, n, 2.0, false);
    dev_buf lab(rows * 4), ls(n * 4), loss(4), dloss(4), g(n * 2);
    upload_labels(lab, rows, classes);
    /* Bad labels in rows 3000 (5) and 4000 (-1): the first is named; nothing is written. */
    lab.h<int32_t>()[4000] = -1;
    lab.h<int32_t>()[3000] = 5;
    lab.upload();
    for (int64_t i = 0; i < n; i++) ls.h<float>()[i] = 42.0f;
    ls.upload();
    set_scalar(loss, 42.0f);
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), AMP_F16, rows, classes, x.ptr,
                                  lab.dev<int32_t>(), loss.dev<float>(), ls.dev<float>()),
                AMP_ERR_INVALID_ARG, "amp_cuda_xent_fwd: label 5 of row 3000 is outside [0, 5)");
    CHECK(dev_sync());
    ls.download();
    int64_t touched = 0;
    for (int64_t i = 0; i < n; i++) touched += ls.h<float>()[i] != 42.0f;
    CHECK(touched == 0 && get_scalar(loss) == 42.0f && ls.guard_intact());

    /* Backward does not wait: NaN rows, then the next forward names the lowest row, once. */
    set_scalar(dloss, 1.0f);
    CHECK_OK(amp_cuda_xent_bwd(amp_cuda_device(), AMP_F16, rows, classes, ls.dev<float>(),
                               lab.dev<int32_t>(), dloss.dev<float>(), g.ptr));
    CHECK(dev_sync());
    g.download();
    int64_t nan_rows = 0;
    for (int64_t r = 0; r < rows; r++) {
        bool all = true;
        for (int64_t j = 0; j < classes; j++)
            all &= std::isnan(nv_load(g.host.data(), AMP_F16, r * classes + j));
        nan_rows += all;
    }
    CHECK(nan_rows == 2 && std::isnan(nv_load(g.host.data(), AMP_F16, 3000 * classes)) &&
          g.guard_intact());
    lab.h<int32_t>()[4000] = 0;
    lab.h<int32_t>()[3000] = 4;
    lab.upload();
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), AMP_F16, rows, classes, x.ptr,
                                  lab.dev<int32_t>(), loss.dev<float>(), ls.dev<float>()),
                AMP_ERR_INVALID_ARG,
                "earlier amp_cuda_xent_bwd had a label outside [0, classes) "
                "in row 3000");
    CHECK_OK(amp_cuda_xent_fwd(amp_cuda_device(), AMP_F16, rows, classes, x.ptr, lab.dev<int32_t>(),
                               loss.dev<float>(), ls.dev<float>()));
    CHECK(dev_sync());
    CHECK(std::isfinite(get_scalar(loss)));
}

static void test_mse(void) {
    const int64_t ns[] = {0, 1, 257, 70001, BIG_N};
    for (amp_dtype dt : float_dts)
        for (int64_t n : ns) {
            dev_buf a = random_buf(dt, n, 4.0, false), b = random_buf(dt, n, 4.0, false);
            dev_buf loss(4), dloss(4), da((size_t)n * amp_dtype_size(dt));
            set_scalar(loss, -1.0f);
            CHECK_OK(amp_cuda_mse_fwd(amp_cuda_device(), dt, n, a.ptr, b.ptr, loss.dev<float>()));
            const float dl = 1.5f;
            set_scalar(dloss, dl);
            CHECK_OK(amp_cuda_mse_bwd(amp_cuda_device(), dt, n, a.ptr, b.ptr, dloss.dev<float>(),
                                      da.ptr));
            CHECK(dev_sync());
            float got = get_scalar(loss);
            da.download();
            long double ref = 0;
            float norm = (float)(2.0 / (double)n);
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float av = nv_load(a.host.data(), dt, i), bv = nv_load(b.host.data(), dt, i);
                long double d = (long double)av - bv;
                ref += d * d;
                volatile float t = (av - bv) * norm;
                bad += !same_f32(nv_load(da.host.data(), dt, i), nv_round(dt, t * dl));
            }
            if (n == 0) {
                CHECK(std::isnan(got));
            } else {
                ref /= n;
                CHECK_MSG(std::fabs(got - ref) <= 0x1p-23L * ref, "mse %s n=%lld: %.9g vs %.12Lg",
                          amp_dtype_name(dt), (long long)n, (double)got, ref);
            }
            CHECK_MSG(bad == 0, "mse_bwd %s n=%lld: %lld wrong", amp_dtype_name(dt), (long long)n,
                      (long long)bad);
            CHECK(loss.guard_intact() && da.guard_intact());
        }
    /* In place (da = a), with a NaN and an inf. */
    const int64_t n = 3001;
    dev_buf a = random_buf(AMP_F32, n, 1.0, true), b = random_buf(AMP_F32, n, 1.0, false);
    std::vector<float> want(n);
    float norm = (float)(2.0 / (double)n);
    for (int64_t i = 0; i < n; i++) {
        volatile float t = (a.h<float>()[i] - b.h<float>()[i]) * norm;
        want[i] = t * 2.0f;
    }
    dev_buf dloss(4), loss(4);
    set_scalar(dloss, 2.0f);
    CHECK_OK(amp_cuda_mse_fwd(amp_cuda_device(), AMP_F32, n, a.ptr, b.ptr, loss.dev<float>()));
    CHECK_OK(amp_cuda_mse_bwd(amp_cuda_device(), AMP_F32, n, a.ptr, b.ptr, dloss.dev<float>(),
                              a.ptr));
    CHECK(dev_sync());
    a.download();
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !same_f32(a.h<float>()[i], want[i]);
    CHECK(bad == 0 && a.guard_intact() && std::isnan(get_scalar(loss)));
}

static void test_errors(void) {
    float x[4] = {0}, o[4];
    int32_t lab[2] = {0, 0};
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), AMP_I32, 2, 2, x, lab, o, o), AMP_ERR_DTYPE,
                "amp_cuda_xent_fwd: dtype i32 is not a float type");
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), AMP_F32, 2, 0, x, lab, o, o), AMP_ERR_SHAPE,
                "logits [2, 0] need rows >= 0 and classes >= 1");
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), AMP_F32, 2, 2, x, nullptr, o, o),
                AMP_ERR_INVALID_ARG, "argument 'labels' is NULL");
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), AMP_F32, 2, 2, x, lab, nullptr, o),
                AMP_ERR_INVALID_ARG, "'loss' is NULL");
    CHECK_FAILS(amp_cuda_xent_bwd(amp_cuda_device(), AMP_F32, 2, 2, x, lab, nullptr, o),
                AMP_ERR_INVALID_ARG, "'dloss' is NULL");
    CHECK_FAILS(amp_cuda_mse_fwd(amp_cuda_device(), AMP_F32, 2, x, nullptr, o), AMP_ERR_INVALID_ARG,
                "amp_cuda_mse_fwd: argument 'b' is NULL");
    CHECK_FAILS(amp_cuda_mse_bwd(amp_cuda_device(), AMP_F32, -1, x, x, o, o), AMP_ERR_INVALID_ARG,
                "n = -1 < 0");
    CHECK_FAILS(amp_cuda_mse_bwd(amp_cuda_device(), AMP_F16, 2, x, x, o, nullptr),
                AMP_ERR_INVALID_ARG, "'da' is NULL");
}

int main(void) {
    test_xent();
    test_xent_special();
    test_xent_labels();
    test_mse();
    test_errors();
    return test_summary("test_loss_cudacpu");
}
