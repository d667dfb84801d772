/* Runs the loss scaler's multi-tensor passes (kernels/cuda/unscale_multi.cu: unscale_multi,
 * nonfinite_multi, sum_squares_multi) on the CPU under ../shared/cudacpu, against plain
 * references written here. Run with CUDACPU_SCHEDULE=random:7 and CUDACPU_STREAMS=random as
 * well: a result that moves is a race or a missing synchronisation.
 *
 * Lists: an empty tensor first, last and in between plus one of two chunks; 120 small tensors
 * (more than one launch holds); lists of one tensor (the library checks and sums nothing else: a
 * single buffer is a list of one); for sum_squares also 329 chunks in five tensors, so that the
 * first launch is closed by its 320-block table in the middle of a tensor, which the next launch
 * carries on in its slot 0 (global block numbers continue across launches).
 * unscale_multi: every output equals (float)g * inv_scale bit for bit (g itself for inv_scale 1;
 * widened with NVIDIA's own conversions), f32 in place, the device scale replacing inv_scale; the
 * flag is raised exactly when an INPUT is inf/NaN (first element, middle of the long tensor, last
 * element), never cleared, never written for a clean list; guard bytes after every output.
 * nonfinite_multi: the same flag, nothing written. sum_squares_multi: bit for bit against a model
 * of the kernels' fixed order (per chunk: thread t sums elements t, t + 512, ... in double, warp
 * butterflies, the warp sums' butterfly; then the chunk partials in plan order, one rounding),
 * within the final f32 rounding of a long double sum; inf/NaN propagate; an empty list writes 0.
 * Errors: every argument check. */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ops_ref.h" /* library stubs, NVIDIA conversions, random data, scalars */

static const int64_t CHUNK = 65536, BLOCK = 512;

/* A list of n tensors of one dtype on the device (NULL addresses for empty ones), with f32
 * outputs when asked. Values: uniform in [-scale, scale) for small lists; the long list repeats
 * a table of 4096 random values (filling 21M elements one conversion at a time would dominate
 * the test). */
struct buf_list {
    std::vector<int64_t> numel;
    amp_dtype dt;
    std::vector<dev_buf> x, out;
    std::vector<void *> xp;
    std::vector<float *> op;

    buf_list(const std::vector<int64_t> &ns, amp_dtype d, double scale, bool with_out)
        : numel(ns), dt(d) {
        x.reserve(ns.size());
        out.reserve(ns.size());
        uint8_t table[4096 * 4];
        for (int k = 0; k < 4096; k++)
            nv_store(table, d, k, (float)((2 * rnd_uniform() - 1) * scale));
        size_t es = amp_dtype_size(d);
        for (size_t i = 0; i < ns.size(); i++) {
            int64_t k = ns[i];
            x.emplace_back((size_t)k * es);
            out.emplace_back(with_out ? (size_t)k * 4 : 0);
            uint8_t *h = x[i].host.data();
            if (k <= CHUNK)
                for (int64_t j = 0; j < k; j++)
                    nv_store(h, d, j, (float)((2 * rnd_uniform() - 1) * scale));
            else
                for (int64_t j = 0; j < k; j++)
                    memcpy(h + j * es, table + (j * 7919 % 4096) * es, es);
            x[i].upload();
            xp.push_back(k ? x[i].ptr : nullptr);
            op.push_back(k && with_out ? out[i].dev<float>() : nullptr);
        }
    }
    void set(size_t i, int64_t j, float v) {
        nv_store(x[i].host.data(), dt, j, v);
        x[i].upload();
    }
    float get(size_t i, int64_t j) const { return nv_load(x[i].host.data(), dt, j); }
};

static const std::vector<int64_t> mixed = {0, 1, 70000, 0, 513, 2048, 3, 0};

static std::vector<int64_t> many_small(void) {
    std::vector<int64_t> ns;
    for (int i = 0; i < 120; i++) ns.push_back(i % 17 == 5 ? 0 : (i * 37) % 300 + 1);
    return ns;
}

/* Outputs that differ from g * inv (g for inv 1), over the whole list; guards checked. */
static int64_t unscale_wrong(buf_list &L, float inv) {
    int64_t bad = 0;
    for (size_t i = 0; i < L.numel.size(); i++) {
        L.out[i].download();
        for (int64_t j = 0; j < L.numel[i]; j++) {
            float g = L.get(i, j), want = inv == 1.0f ? g : g * inv;
            bad += !same_f32(L.out[i].h<float>()[j], want);
        }
        bad += !L.out[i].guard_intact();
    }
    return bad;
}

static void test_unscale_values(void) {
    const float invs[] = {1.0f / 65536.0f, 1.0f, (float)(1.0 / 3000.0)};
    for (const std::vector<int64_t> &ns : {mixed, many_small()})
        for (amp_dtype dt : float_dts)
            for (float inv : invs) {
                buf_list L(ns, dt, dt == AMP_F16 ? 60000.0 : 1e6, true);
                dev_buf found(4);
                set_scalar(found, 7.5f); /* a clean list does not write the flag */
                CHECK_OK(amp_cuda_unscale_multi(amp_cuda_device(), dt, (int64_t)ns.size(),
                                                ns.data(), L.xp.data(), inv, L.op.data(),
                                                found.dev<float>(), NULL));
                CHECK(dev_sync());
                int64_t bad = unscale_wrong(L, inv);
                float flag = get_scalar(found);
                CHECK_MSG(bad == 0 && flag == 7.5f, "unscale_multi %s %zu tensors inv=%g: %lld "
                          "wrong, flag %g", amp_dtype_name(dt), ns.size(), (double)inv,
                          (long long)bad, (double)flag);
            }
}

/* An inf/NaN at the first element, in the middle of the long tensor, at the last element: the
 * flag is 1 and every output is still written; a clean pass afterwards does not clear it. The
 * device scale replaces inv_scale (given as 0 here, which is not even valid on its own). */
static void test_unscale_flags(void) {
    struct spot {
        size_t t;
        int64_t j;
        float v;
    } spots[] = {{1, 0, INFINITY}, {2, 35000, NAN}, {6, 2, -INFINITY}};
    for (amp_dtype dt : float_dts)
        for (const spot &sp : spots) {
            buf_list L(mixed, dt, 100.0, true);
            float keep = L.get(sp.t, sp.j);
            L.set(sp.t, sp.j, sp.v);
            dev_buf found(4), inv(4);
            set_scalar(found, 0.0f);
            set_scalar(inv, 0.25f);
            amp_step_scalars sc = {inv.dev<float>(), NULL};
            CHECK_OK(amp_cuda_unscale_multi(amp_cuda_device(), dt, (int64_t)mixed.size(),
                                            mixed.data(), L.xp.data(), 0.0f, L.op.data(),
                                            found.dev<float>(), &sc));
            CHECK(dev_sync());
            CHECK_MSG(get_scalar(found) == 1.0f && unscale_wrong(L, 0.25f) == 0,
                      "%s %g at tensor %zu[%lld]", amp_dtype_name(dt), (double)sp.v, sp.t,
                      (long long)sp.j);
            L.set(sp.t, sp.j, keep);
            CHECK_OK(amp_cuda_unscale_multi(amp_cuda_device(), dt, (int64_t)mixed.size(),
                                            mixed.data(), L.xp.data(), 0.5f, L.op.data(),
                                            found.dev<float>(), NULL));
            CHECK(dev_sync());
            CHECK(get_scalar(found) == 1.0f && unscale_wrong(L, 0.5f) == 0);
        }
}

static void test_unscale_in_place(void) {
    buf_list L(mixed, AMP_F32, 5e4, false);
    L.set(2, 69999, NAN);
    std::vector<std::vector<float>> before;
    for (auto &b : L.x) before.emplace_back(b.h<float>(), b.h<float>() + b.nbytes / 4);
    std::vector<float *> outs;
    for (void *p : L.xp) outs.push_back((float *)p);
    dev_buf found(4);
    set_scalar(found, 0.0f);
    CHECK_OK(amp_cuda_unscale_multi(amp_cuda_device(), AMP_F32, (int64_t)mixed.size(), mixed.data(),
                                    L.xp.data(), 1.0f / 1024.0f, outs.data(), found.dev<float>(),
                                    NULL));
    CHECK(dev_sync());
    int64_t bad = 0;
    for (size_t i = 0; i < L.x.size(); i++) {
        L.x[i].download();
        for (int64_t j = 0; j < mixed[i]; j++)
            bad += !same_f32(L.x[i].h<float>()[j], before[i][j] * (1.0f / 1024.0f));
        bad += !L.x[i].guard_intact();
    }
    CHECK(bad == 0 && get_scalar(found) == 1.0f);
    /* out overlapping grad without being it is refused, before any launch */
    float *gd = (float *)L.xp[2];
    outs[2] = gd + 1;
    CHECK_FAILS(amp_cuda_unscale_multi(amp_cuda_device(), AMP_F32, (int64_t)mixed.size(),
                                       mixed.data(), L.xp.data(), 0.5f, outs.data(),
                                       found.dev<float>(), NULL),
                AMP_ERR_INVALID_ARG, "out[2] overlaps grad[2] (f32)");
    buf_list H(mixed, AMP_BF16, 1.0, false);
    std::vector<float *> same;
    for (void *p : H.xp) same.push_back((float *)p);
    CHECK_FAILS(amp_cuda_unscale_multi(amp_cuda_device(), AMP_BF16, (int64_t)mixed.size(),
                                       mixed.data(), H.xp.data(), 0.5f, same.data(),
                                       found.dev<float>(), NULL),
                AMP_ERR_INVALID_ARG, "overlaps grad[1] (bf16)");
}

static void test_nonfinite(void) {
    const float specials[] = {INFINITY, NAN, -INFINITY, 65504.0f, 1e-40f};
    const size_t ts[] = {1, 2, 6};
    for (amp_dtype dt : float_dts)
        for (float v : specials)
            for (size_t t : ts) {
                buf_list L(mixed, dt, dt == AMP_F16 ? 60000.0 : 1e30, false);
                int64_t j = t == 2 ? 35001 : mixed[t] - 1;
                L.set(t, j, v);
                dev_buf found(4);
                set_scalar(found, 0.0f);
                CHECK_OK(amp_cuda_nonfinite_multi(amp_cuda_device(), dt, (int64_t)mixed.size(),
                                                  mixed.data(), L.xp.data(), found.dev<float>()));
                CHECK(dev_sync());
                bool want = !std::isfinite(L.get(t, j));
                float flag = get_scalar(found);
                CHECK_MSG((flag == 1.0f) == want && (flag == 0.0f || flag == 1.0f),
                          "nonfinite_multi %s: %g at tensor %zu: flag %g", amp_dtype_name(dt),
                          (double)v, t, (double)flag);
                set_scalar(found, 1.0f); /* never cleared */
                CHECK_OK(amp_cuda_nonfinite_multi(amp_cuda_device(), dt, (int64_t)mixed.size(),
                                                  mixed.data(), L.xp.data(), found.dev<float>()));
                CHECK(get_scalar(found) == 1.0f);
                for (auto &b : L.x) CHECK(b.guard_intact());
            }
    /* one tensor of three chunks and a tail: a special value at its first element, in its middle
     * and at its last (the library checks lists only; a single gradient is a list of one) */
    const int64_t n1 = 3 * CHUNK + 777;
    const int64_t where[] = {0, n1 / 2, n1 - 1};
    for (amp_dtype dt : float_dts) {
        buf_list L({n1}, dt, dt == AMP_F16 ? 60000.0 : 1e30, false);
        dev_buf found(4);
        for (float v : specials)
            for (int64_t j : where) {
                float keep = L.get(0, j);
                L.set(0, j, v);
                set_scalar(found, 0.0f);
                CHECK_OK(amp_cuda_nonfinite_multi(amp_cuda_device(), dt, 1, L.numel.data(),
                                                  L.xp.data(), found.dev<float>()));
                CHECK(dev_sync());
                bool want = !std::isfinite(L.get(0, j));
                float flag = get_scalar(found);
                CHECK_MSG((flag == 1.0f) == want && (flag == 0.0f || flag == 1.0f),
                          "nonfinite_multi %s, one tensor: %g at %lld: flag %g",
                          amp_dtype_name(dt), (double)v, (long long)j, (double)flag);
                L.set(0, j, keep);
            }
        CHECK(L.x[0].guard_intact());
    }
    std::vector<int64_t> ns = many_small();
    buf_list M(ns, AMP_BF16, 1.0, false);
    M.set(119, ns[119] - 1, NAN); /* the last tensor of the last launch */
    dev_buf found(4);
    set_scalar(found, 0.0f);
    CHECK_OK(amp_cuda_nonfinite_multi(amp_cuda_device(), AMP_BF16, (int64_t)ns.size(), ns.data(),
                                      M.xp.data(), found.dev<float>()));
    CHECK(get_scalar(found) == 1.0f);
}

/* ---- sum_squares_multi against the kernels' order ---- */

static double butterfly(const double *in) {
    double v[32], nv[32];
    memcpy(v, in, sizeof v);
    for (int k = 16; k >= 1; k >>= 1) {
        for (int l = 0; l < 32; l++) nv[l] = v[l] + v[l ^ k];
        memcpy(v, nv, sizeof v);
    }
    return v[0];
}

static float sum_squares_model(const buf_list &L) {
    double total = 0.0;
    std::vector<double> acc(BLOCK);
    for (size_t i = 0; i < L.numel.size(); i++)
        for (int64_t c = 0; c * CHUNK < L.numel[i]; c++) {
            int64_t n = std::min(CHUNK, L.numel[i] - c * CHUNK);
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t j = 0; j < n; j++) {
                double v = L.get(i, c * CHUNK + j);
                acc[j % BLOCK] += v * v;
            }
            double warps[32] = {0};
            for (int w = 0; w < BLOCK / 32; w++) warps[w] = butterfly(acc.data() + 32 * w);
            total += butterfly(warps);
        }
    return (float)total;
}

static void check_sum_squares(const char *what, const buf_list &L) {
    dev_buf out(4);
    set_scalar(out, -1.0f);
    CHECK_OK(amp_cuda_sum_squares_multi(amp_cuda_device(), L.dt, (int64_t)L.numel.size(),
                                        L.numel.data(), L.xp.data(), out.dev<float>(), NULL));
    CHECK(dev_sync());
    float got = get_scalar(out), model = sum_squares_model(L);
    long double ref = 0;
    for (size_t i = 0; i < L.numel.size(); i++)
        for (int64_t j = 0; j < L.numel[i]; j++) ref += (long double)L.get(i, j) * L.get(i, j);
    CHECK_MSG(same_f32(got, model), "%s %s: %.9g, order model %.9g", what, amp_dtype_name(L.dt),
              (double)got, (double)model);
    double want = (double)ref;
    CHECK_MSG(std::isnan(want) || std::fabs(got - want) <= 0x1p-24 * want * 1.0001 + 1e-37,
              "%s %s: %.9g vs %.12g", what, amp_dtype_name(L.dt), (double)got, want);
    CHECK(out.guard_intact());
}

static void test_sum_squares(void) {
    for (amp_dtype dt : float_dts) {
        check_sum_squares("mixed", buf_list(mixed, dt, 100.0, false));
        check_sum_squares("120 tensors", buf_list(many_small(), dt, 100.0, false));
    }
    /* 1 + 201 + 1 + 125 + 1 = 329 chunks: launch 1 ends with tensor 3's chunk 116, launch 2
     * carries its chunks 117..124 in slot 0, then tensor 4 */
    /* lists of one tensor, around a warp, a block and a chunk and over several chunks (the
     * library sums lists only; a single buffer is a list of one) */
    for (amp_dtype dt : float_dts)
        for (int64_t n : {(int64_t)1, (int64_t)255, (int64_t)513, CHUNK - 1, CHUNK + 1,
                          4 * CHUNK + 3001}) {
            char what[48];
            snprintf(what, sizeof what, "one tensor of %lld", (long long)n);
            check_sum_squares(what, buf_list({n}, dt, 100.0, false));
        }
    std::vector<int64_t> big = {1, 200 * CHUNK + 5, 3, 125 * CHUNK, 7};
    check_sum_squares("329 chunks", buf_list(big, AMP_F16, 30.0, false));
    buf_list S(mixed, AMP_F32, 1.0, false);
    S.set(2, 40000, -INFINITY);
    dev_buf out(4);
    CHECK_OK(amp_cuda_sum_squares_multi(amp_cuda_device(), AMP_F32, (int64_t)mixed.size(),
                                        mixed.data(), S.xp.data(), out.dev<float>(), NULL));
    CHECK(dev_sync());
    float got = get_scalar(out);
    CHECK(std::isinf(got) && got > 0);
    S.set(4, 0, NAN);
    CHECK_OK(amp_cuda_sum_squares_multi(amp_cuda_device(), AMP_F32, (int64_t)mixed.size(),
                                        mixed.data(), S.xp.data(), out.dev<float>(), NULL));
    CHECK(dev_sync());
    CHECK(std::isnan(get_scalar(out)));
    /* nothing to sum: 0 is written (no kernel) */
    int64_t zeros[] = {0, 0};
    void *nulls[] = {nullptr, nullptr};
    for (int64_t n : {0, 2}) {
        set_scalar(out, -1.0f);
        CHECK_OK(amp_cuda_sum_squares_multi(amp_cuda_device(), AMP_BF16, n, zeros, nulls,
                                            out.dev<float>(), NULL));
        CHECK(dev_sync());
        float z = get_scalar(out);
        CHECK(z == 0.0f && !std::signbit(z));
    }
}

static void test_errors(void) {
    buf_list L(mixed, AMP_F16, 1.0, true);
    int64_t n = (int64_t)mixed.size();
    dev_buf found(4);
    set_scalar(found, 0.0f);
    float *f = found.dev<float>();
    CHECK_FAILS(amp_cuda_unscale_multi(amp_cuda_device(), AMP_I32, n, mixed.data(), L.xp.data(),
                                       1.0f, L.op.data(), f, NULL),
                AMP_ERR_DTYPE, "amp_cuda_unscale_multi: dtype i32");
    for (float inv : {0.0f, -1.0f, NAN, INFINITY})
        CHECK_FAILS(amp_cuda_unscale_multi(amp_cuda_device(), AMP_F16, n, mixed.data(), L.xp.data(),
                                           inv, L.op.data(), f, NULL),
                    AMP_ERR_INVALID_ARG, "inv_scale");
    CHECK_FAILS(amp_cuda_unscale_multi(amp_cuda_device(), AMP_F16, n, mixed.data(), L.xp.data(),
                                       1.0f, L.op.data(), NULL, NULL),
                AMP_ERR_INVALID_ARG, "'found_inf'");
    CHECK_FAILS(amp_cuda_unscale_multi(amp_cuda_device(), AMP_F16, -1, mixed.data(), L.xp.data(),
                                       1.0f, L.op.data(), f, NULL),
                AMP_ERR_INVALID_ARG, "n = -1");
    CHECK_FAILS(amp_cuda_unscale_multi(amp_cuda_device(), AMP_F16, n, mixed.data(), NULL, 1.0f,
                                       L.op.data(), f, NULL),
                AMP_ERR_INVALID_ARG, "'grad'");
    CHECK_FAILS(amp_cuda_unscale_multi(amp_cuda_device(), AMP_F16, n, mixed.data(), L.xp.data(),
                                       1.0f, NULL, f, NULL),
                AMP_ERR_INVALID_ARG, "'out'");
    CHECK_FAILS(amp_cuda_unscale_multi(amp_cuda_device(), AMP_F16, n, NULL, L.xp.data(), 1.0f,
                                       L.op.data(), f, NULL),
                AMP_ERR_INVALID_ARG, "'numel'");
    std::vector<float *> outs = L.op;
    outs[4] = nullptr;
    CHECK_FAILS(amp_cuda_unscale_multi(amp_cuda_device(), AMP_F16, n, mixed.data(), L.xp.data(),
                                       1.0f, outs.data(), f, NULL),
                AMP_ERR_INVALID_ARG, "out[4] is NULL");
    std::vector<int64_t> neg = mixed;
    neg[3] = -7;
    CHECK_FAILS(amp_cuda_unscale_multi(amp_cuda_device(), AMP_F16, n, neg.data(), L.xp.data(), 1.0f,
                                       L.op.data(), f, NULL),
                AMP_ERR_INVALID_ARG, "numel[3] = -7 < 0");
    CHECK_OK(
            amp_cuda_unscale_multi(amp_cuda_device(), AMP_F16, 0, NULL, NULL, 1.0f, NULL, f, NULL));
    CHECK_FAILS(
            amp_cuda_nonfinite_multi(amp_cuda_device(), AMP_I32, n, mixed.data(), L.xp.data(), f),
            AMP_ERR_DTYPE, "amp_cuda_nonfinite_multi: dtype i32");
    CHECK_FAILS(amp_cuda_nonfinite_multi(amp_cuda_device(), AMP_F16, n, mixed.data(), L.xp.data(),
                                         NULL),
                AMP_ERR_INVALID_ARG, "'found_inf'");
    CHECK_FAILS(amp_cuda_nonfinite_multi(amp_cuda_device(), AMP_F16, n, mixed.data(), NULL, f),
                AMP_ERR_INVALID_ARG, "'x'");
    std::vector<void *> xs = L.xp;
    xs[2] = nullptr;
    CHECK_FAILS(amp_cuda_nonfinite_multi(amp_cuda_device(), AMP_F16, n, mixed.data(), xs.data(), f),
                AMP_ERR_INVALID_ARG, "x[2] is NULL (numel 70000)");
    CHECK_OK(amp_cuda_nonfinite_multi(amp_cuda_device(), AMP_F16, 0, NULL, NULL, f));
    CHECK_FAILS(
            amp_cuda_sum_squares_multi(amp_cuda_device(), AMP_I32, n, mixed.data(), L.xp.data(), f,
                                       NULL),
            AMP_ERR_DTYPE, "amp_cuda_sum_squares_multi: dtype i32");
    CHECK_FAILS(amp_cuda_sum_squares_multi(amp_cuda_device(), AMP_F16, n, mixed.data(), L.xp.data(),
                                           NULL, NULL),
                AMP_ERR_INVALID_ARG, "'out'");
    CHECK_FAILS(amp_cuda_sum_squares_multi(amp_cuda_device(), AMP_F16, -2, mixed.data(),
                                           L.xp.data(), f, NULL),
                AMP_ERR_INVALID_ARG, "n = -2");
    CHECK_FAILS(
            amp_cuda_sum_squares_multi(amp_cuda_device(), AMP_F16, n, mixed.data(), xs.data(), f,
                                       NULL),
            AMP_ERR_INVALID_ARG, "x[2] is NULL");
    CHECK(dev_sync());
    CHECK(get_scalar(found) == 0.0f); /* no failed call launched anything */
}

int main(void) {
    test_errors();
    test_unscale_values();
    test_unscale_flags();
    test_unscale_in_place();
    test_nonfinite();
    test_sum_squares();
    return test_summary("test_multi_scaler_cudacpu");
}
