/* Runs kernels/cuda/xent.cu on the CPU under ../shared/cudacpu against a long double reference
 * written here from the contract in core/backend_kernels.def (the bits against the CPU
 * backend's are the op table's, tests/gpu/test_backend_ops.c):
 *  - loss, logsumexp, count and gradient for f32/f16/bf16, one class to a GPT-2 vocabulary, rows
 *    past the forward's grid (4096 blocks of 8 rows) and the backward's (4096 rows), ignored
 *    rows, label smoothing and the sum;
 *  - all rows ignored: NaN and zero gradients; 0 rows: NaN (the mean) with nothing launched on
 *    the rows;
 *  - labels out of range: xent_fwd fails with the CPU backend's message naming the first bad row
 *    and writes nothing; xent_bwd writes NaN into that gradient row and the next xent_fwd
 *    reports the row, once; a label equal to ignore_index is not bad;
 *  - guard zones after every output; the argument errors.
 * Run with CUDACPU_SCHEDULE=random:7 and CUDACPU_STREAMS=random as well. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "ops_ref.h"

struct ref_rows {
    long double total = 0;
    int64_t count = 0;
    std::vector<double> lse;
};

static ref_rows reference(const amp_xent_desc &d, const dev_buf &x, const int32_t *labels) {
    ref_rows out;
    out.lse.assign(d.rows, 0.0);
    for (int64_t r = 0; r < d.rows; r++) {
        if (labels[r] == d.ignore_index) continue;
        long double m = -INFINITY, s = 0, sx = 0;
        for (int64_t j = 0; j < d.classes; j++)
            m = std::fmax(m, (long double)nv_load(x.host.data(), d.dt, r * d.classes + j));
        for (int64_t j = 0; j < d.classes; j++) {
            long double v = nv_load(x.host.data(), d.dt, r * d.classes + j);
            s += std::exp(v - m);
            sx += v;
        }
        long double lse = m + std::log(s), eps = d.label_smoothing;
        long double nll = lse - nv_load(x.host.data(), d.dt, r * d.classes + labels[r]);
        out.total += (1 - eps) * nll + eps * (lse - sx / d.classes);
        out.lse[r] = (double)lse;
        out.count++;
    }
    return out;
}

static void check_case(amp_dtype dt, int64_t rows, int64_t classes, float eps, bool sum,
                       int ignore_every) {
    amp_xent_desc d = {rows, classes, dt, -1, eps, sum, 0};
    int64_t n = rows * classes;
    dev_buf x = random_buf(dt, n, 8.0, false);
    dev_buf lab((size_t)rows * 4), stats((size_t)(2 * rows + 1) * 4), loss(4), dloss(4);
    dev_buf g((size_t)n * amp_dtype_size(dt));
    for (int64_t r = 0; r < rows; r++)
        lab.h<int32_t>()[r] = ignore_every && r % ignore_every == 1 ? -1
                                                                   : (int32_t)(rnd_uniform() *
                                                                               classes);
    lab.upload();
    CHECK_OK(amp_cuda_xent_fwd(amp_cuda_device(), &d, x.ptr, lab.dev<int32_t>(),
                               stats.dev<float>(), loss.dev<float>()));
    const float dl = 0.75f;
    set_scalar(dloss, dl);
    CHECK_OK(amp_cuda_xent_bwd(amp_cuda_device(), &d, x.ptr, lab.dev<int32_t>(),
                               stats.dev<float>(), dloss.dev<float>(), g.ptr));
    CHECK(dev_sync());
    stats.download();
    g.download();
    const int32_t *labels = lab.h<int32_t>();
    ref_rows ref = reference(d, x, labels);
    long double want = sum ? ref.total : ref.total / ref.count;
    float got = get_scalar(loss);
    CHECK_MSG(std::fabs(got - want) <= 1e-5L * std::fabs(want) + 1e-6L,
              "xent %s [%lld, %lld] eps %g: loss %.9g vs %.12Lg", amp_dtype_name(dt),
              (long long)rows, (long long)classes, (double)eps, (double)got, want);
    CHECK(stats.h<float>()[2 * rows] == (float)ref.count);
    double scale = sum ? dl : (double)dl / (double)ref.count;
    double ulp = dt == AMP_F32 ? 0x1p-23 : dt == AMP_F16 ? 0x1p-10 : 0x1p-7;
    int64_t bad_lse = 0, bad_g = 0;
    for (int64_t r = 0; r < rows; r++) {
        double lse = ref.lse[r];
        bad_lse += !(std::fabs(stats.h<float>()[r] - lse) <= 0x1p-21 * (std::fabs(lse) + 8));
        for (int64_t j = 0; j < classes; j++) {
            double gg = nv_load(g.host.data(), dt, r * classes + j);
            if (labels[r] == -1) {
                bad_g += gg != 0.0;
                continue;
            }
            double xv = nv_load(x.host.data(), dt, r * classes + j);
            double p = std::exp(xv - lse), target = (j == labels[r]) * (1.0 - eps) + eps / classes;
            double gw = (p - target) * scale;
            double tol = (p * 0x1p-22 * (std::fabs(xv) + std::fabs(lse) + 2) + 0x1p-22 * target) *
                             scale + ulp * std::fabs(gw) + 0x1p-24;
            bad_g += !(std::fabs(gg - gw) <= tol);
        }
    }
    CHECK_MSG(bad_lse == 0 && bad_g == 0, "xent %s [%lld, %lld] eps %g: %lld logsumexps and %lld "
              "gradients wrong", amp_dtype_name(dt), (long long)rows, (long long)classes,
              (double)eps, (long long)bad_lse, (long long)bad_g);
    CHECK(stats.guard_intact() && loss.guard_intact() && g.guard_intact());
}

static void test_values(void) {
    for (amp_dtype dt : float_dts) {
        check_case(dt, 1, 1, 0.0f, false, 0);
        check_case(dt, 5, 10, 0.0f, false, 0);
        check_case(dt, 33, 1000, 0.1f, false, 3);
        check_case(dt, 7, 257, 0.0f, true, 2);
        check_case(dt, 3, 50257, 0.0f, false, 0);
    }
    /* Past the forward's grid of 4096 blocks of 8 rows, and the backward's of 4096 rows. */
    check_case(AMP_F32, 4096 * 8 + 9, 3, 0.1f, false, 5);
}

/* All rows ignored: NaN (0 / 0) and zero gradients; the sum 0; 0 rows: NaN. */
static void test_ignored(void) {
    const int64_t rows = 4, classes = 30, n = rows * classes;
    amp_xent_desc d = {rows, classes, AMP_BF16, 7, 0.0f, false, 0};
    dev_buf x = random_buf(AMP_BF16, n, 3.0, false);
    dev_buf lab(rows * 4), stats((2 * rows + 1) * 4), loss(4), dloss(4), g(n * 2);
    for (int64_t r = 0; r < rows; r++) lab.h<int32_t>()[r] = 7;
    lab.upload();
    set_scalar(dloss, 1.0f);
    CHECK_OK(amp_cuda_xent_fwd(amp_cuda_device(), &d, x.ptr, lab.dev<int32_t>(),
                               stats.dev<float>(), loss.dev<float>()));
    CHECK_OK(amp_cuda_xent_bwd(amp_cuda_device(), &d, x.ptr, lab.dev<int32_t>(),
                               stats.dev<float>(), dloss.dev<float>(), g.ptr));
    CHECK(dev_sync());
    g.download();
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; i++) nonzero += nv_load(g.host.data(), AMP_BF16, i) != 0.0f;
    CHECK(std::isnan(get_scalar(loss)) && nonzero == 0 && g.guard_intact());
    d.sum = true;
    CHECK_OK(amp_cuda_xent_fwd(amp_cuda_device(), &d, x.ptr, lab.dev<int32_t>(),
                               stats.dev<float>(), loss.dev<float>()));
    CHECK(dev_sync() && get_scalar(loss) == 0.0f);
    d.sum = false;
    d.rows = 0;
    CHECK_OK(amp_cuda_xent_fwd(amp_cuda_device(), &d, nullptr, nullptr, stats.dev<float>(),
                               loss.dev<float>()));
    CHECK(dev_sync() && std::isnan(get_scalar(loss)) && stats.guard_intact());
}

static void test_labels(void) {
    const int64_t rows = 4001, classes = 5, n = rows * classes;
    amp_xent_desc d = {rows, classes, AMP_F16, -100, 0.0f, false, 0};
    dev_buf x = random_buf(AMP_F16, n, 2.0, false);
    dev_buf lab(rows * 4), stats((2 * rows + 1) * 4), loss(4), dloss(4), g(n * 2);
    for (int64_t r = 0; r < rows; r++) lab.h<int32_t>()[r] = (int32_t)(rnd_uniform() * classes);
    /* Bad labels in rows 3000 (5) and 4000 (-1); row 10 ignored (-100): the first bad is named,
     * nothing is written. */
    lab.h<int32_t>()[4000] = -1;
    lab.h<int32_t>()[3000] = 5;
    lab.h<int32_t>()[10] = -100;
    lab.upload();
    for (int64_t i = 0; i < 2 * rows + 1; i++) stats.h<float>()[i] = 42.0f;
    stats.upload();
    set_scalar(loss, 42.0f);
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), &d, x.ptr, lab.dev<int32_t>(),
                                  stats.dev<float>(), loss.dev<float>()),
                AMP_ERR_INVALID_ARG, "amp_cuda_xent_fwd: label 5 of row 3000 is outside [0, 5)");
    CHECK(dev_sync());
    stats.download();
    int64_t touched = 0;
    for (int64_t i = 0; i < 2 * rows + 1; i++) touched += stats.h<float>()[i] != 42.0f;
    CHECK(touched == 0 && get_scalar(loss) == 42.0f && stats.guard_intact());

    /* Backward does not wait: NaN rows, then the next forward names the lowest row, once. */
    set_scalar(dloss, 1.0f);
    CHECK_OK(amp_cuda_xent_bwd(amp_cuda_device(), &d, x.ptr, lab.dev<int32_t>(),
                               stats.dev<float>(), dloss.dev<float>(), g.ptr));
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
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), &d, x.ptr, lab.dev<int32_t>(),
                                  stats.dev<float>(), loss.dev<float>()),
                AMP_ERR_INVALID_ARG,
                "an earlier backward of cross_entropy had label 5 in row 3000");
    CHECK_OK(amp_cuda_xent_fwd(amp_cuda_device(), &d, x.ptr, lab.dev<int32_t>(),
                               stats.dev<float>(), loss.dev<float>()));
    CHECK(dev_sync());
    stats.download();
    CHECK(std::isfinite(get_scalar(loss)) && stats.h<float>()[2 * rows] == (float)(rows - 1));
}

static void test_errors(void) {
    float x[4] = {0}, o[4];
    int32_t lab[2] = {0, 0};
    amp_xent_desc d = {2, 2, AMP_I32, -100, 0.0f, false, 0};
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), &d, x, lab, o, o), AMP_ERR_DTYPE,
                "amp_cuda_xent_fwd: dtype i32 is not a float type");
    d.dt = AMP_F32;
    d.classes = 0;
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), &d, x, lab, o, o), AMP_ERR_SHAPE,
                "logits [2, 0 + 0 padding] need rows >= 0, classes >= 1");
    d.classes = 2;
    d.padding = -1;
    CHECK_FAILS(amp_cuda_xent_bwd(amp_cuda_device(), &d, x, lab, o, o, o), AMP_ERR_SHAPE,
                "logits [2, 2 + -1 padding] need rows >= 0, classes >= 1 and padding >= 0");
    d.padding = 0;
    d.label_smoothing = -0.5f;
    CHECK_FAILS(amp_cuda_xent_bwd(amp_cuda_device(), &d, x, lab, o, o, o), AMP_ERR_INVALID_ARG,
                "label_smoothing = -0.5 is outside [0, 1]");
    d.label_smoothing = 0.0f;
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), &d, x, nullptr, o, o), AMP_ERR_INVALID_ARG,
                "argument 'labels' is NULL");
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), &d, x, lab, o, nullptr), AMP_ERR_INVALID_ARG,
                "'loss' is NULL");
    CHECK_FAILS(amp_cuda_xent_fwd(amp_cuda_device(), &d, x, lab, nullptr, o), AMP_ERR_INVALID_ARG,
                "'stats' is NULL");
    CHECK_FAILS(amp_cuda_xent_bwd(amp_cuda_device(), &d, x, lab, o, nullptr, o),
                AMP_ERR_INVALID_ARG, "'dloss' is NULL");
}

int main(void) {
    test_values();
    test_ignored();
    test_labels();
    test_errors();
    return test_summary("test_xent_cudacpu");
}
