/* Runs kernels/cuda/batchnorm.cu on the CPU under ../shared/cudacpu and checks it two ways:
 *  - against the CPU backend's own batch norm (kernels/cpu/batchnorm.c, linked in): y,
 *    save_mean/save_invstd, the running stats, dx, dgamma and dbeta bit for bit (both sum every
 *    channel in the same order and round every product on its own);
 *  - against a plain double reference written here from the contract in core/backend.h (batch
 *    mean, biased variance for the normalisation, unbiased for running_var, PyTorch's momentum;
 *    backward in the closed form dx = gamma * invstd / N * (N dy - sum(dy) - xhat sum(dy xhat)),
 *    a different arrangement from the kernels'), within the roundings the kernels make.
 * Shapes with n = 1 and n > 1, several channels, hw = 1, odd hw, hw past one 4096-element tile,
 * many tiles per channel, past the grid caps; f32, f16 and bf16; an offset mean (the
 * two-pass variance must not cancel); eval mode; every optional pointer NULL in turn; in place
 * (y = x, dx = dy); a NaN in one channel stays in it; guard zones after every output; the argument
 * errors. Run with CUDACPU_SCHEDULE=random:7 and CUDACPU_STREAMS=random as well. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ops_ref.h"

/* The CPU backend's batch norm and the functions it needs from the rest of that backend,
 * written here over NVIDIA's conversions (round to nearest even, as memory.c's). */
extern "C" {
amp_status amp_cpu_bn_fwd_train(amp_device_ctx *dev, const amp_bn_desc *d, const void *x,
                                const float *gamma, const float *beta, void *y, float *save_mean,
                                float *save_invstd, float *running_mean, float *running_var);
amp_status amp_cpu_bn_fwd_eval(amp_device_ctx *dev, const amp_bn_desc *d, const void *x,
                               const float *gamma, const float *beta, const float *running_mean,
                               const float *running_var, void *y);
amp_status amp_cpu_bn_bwd(amp_device_ctx *dev, const amp_bn_desc *d, const void *x, const void *dy,
                          const void *y, const float *gamma, const float *save_mean,
                          const float *save_invstd, void *dx, float *dgamma, float *dbeta);
amp_status amp_cpu_convert(void *dst, amp_dtype dst_dt, const void *src, amp_dtype src_dt,
                           int64_t n) {
    for (int64_t i = 0; i < n; i++) nv_store(dst, dst_dt, i, nv_load(src, src_dt, i));
    return AMP_OK;
}
void amp_cpu_widen_tile(float *dst, const uint16_t *src, amp_dtype half_dt, int64_t n) {
    (void)amp_cpu_convert(dst, AMP_F32, src, half_dt, n);
}
void amp_cpu_round_tile(uint16_t *dst, amp_dtype half_dt, const float *src, int64_t n) {
    (void)amp_cpu_convert(dst, half_dt, src, AMP_F32, n);
}
/* The thread's f32 arena (kernels/cpu/dnnl_util.h) that the f16/bf16 training entries widen a
 * channel into: one growing buffer, the linked-in kernels running serially here. */
amp_status amp_dnnl_arena(int id, size_t nbytes, void **out) {
    static std::vector<float> buf;
    (void)id;
    if (buf.size() * sizeof(float) < nbytes) buf.resize(nbytes / sizeof(float) + 16);
    *out = buf.data();
    return AMP_OK;
}
size_t amp_dnnl_f32_nbytes(int64_t n) { return ((size_t)n * sizeof(float) + 63) / 64 * 64; }
}

/* The relative spacing of dt's values near 1 (one ulp). */
static double ulp_of(amp_dtype dt) {
    return dt == AMP_F32 ? 0x1p-23 : dt == AMP_F16 ? 0x1p-10 : 0x1p-7;
}

/* Leave these pointers NULL. */
enum {
    NO_AFFINE = 1,  /* gamma, beta */
    NO_RUNNING = 2, /* running_mean, running_var */
    NO_SAVE = 4,    /* save_mean, save_invstd (forward only; the backward gets the CPU's) */
    NO_DX = 8,
    NO_DPARAM = 16, /* dgamma, dbeta */
    IN_PLACE = 32,  /* y = x, dx = dy */
    RELU = 64,      /* the ReLU fused in (amp_bn_desc.relu): the backward masks dy by y */
};

/* Host data of one case: x with per-channel offsets, dy, affine parameters, running stats. */
struct bn_data {
    amp_bn_desc d;
    std::vector<uint8_t> x, dy;
    std::vector<float> gamma, beta, rm, rv;
};

static bn_data make_data(amp_dtype dt, int64_t n, int64_t c, int64_t hw) {
    bn_data b;
    b.d = amp_bn_desc{n, c, hw, 1e-5f, 0.1f, dt, false};
    int64_t total = n * c * hw;
    size_t es = amp_dtype_size(dt);
    b.x.resize((size_t)total * es);
    b.dy.resize((size_t)total * es);
    for (int64_t i = 0; i < total; i++) {
        int64_t ch = (i / hw) % c;
        /* mean near 3 + ch, spread 1 + ch / 4: a mean large next to the spread */
        double v = 3.0 + (double)ch + (2 * rnd_uniform() - 1) * (1.0 + 0.25 * (double)ch);
        nv_store(b.x.data(), dt, i, (float)v);
        nv_store(b.dy.data(), dt, i, (float)(2 * rnd_uniform() - 1));
    }
    for (int64_t ch = 0; ch < c; ch++) {
        b.gamma.push_back((float)(0.5 + rnd_uniform()));
        b.beta.push_back((float)(2 * rnd_uniform() - 1));
        b.rm.push_back((float)(2 * rnd_uniform() - 1));
        b.rv.push_back((float)(0.5 + 1.5 * rnd_uniform()));
    }
    return b;
}

static dev_buf upload_vec(const void *src, size_t nbytes) {
    dev_buf b(nbytes);
    b.upload(src);
    return b;
}

/* Every element of the channels visited, as (element index, channel). */
template <class F>
static void for_channel(const amp_bn_desc &d, int64_t ch, F f) {
    for (int64_t i = 0; i < d.n; i++)
        for (int64_t k = 0; k < d.hw; k++) f((i * d.c + ch) * d.hw + k);
}

/* Same bits as the CPU backend: n_vals f32 values or n_vals elements of dt. */
static int64_t diff_f32(const float *a, const float *b, int64_t n_vals) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n_vals; i++) bad += !same_f32(a[i], b[i]);
    return bad;
}
static int64_t diff_dt(const void *a, const void *b, amp_dtype dt, int64_t n_vals) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n_vals; i++) bad += !same_f32(nv_load(a, dt, i), nv_load(b, dt, i));
    return bad;
}

/* One training forward + backward + eval with the given NULL pointers, against the CPU backend
 * bit for bit and (when every pointer is given) against the double reference. */
static void run_case(amp_dtype dt, int64_t n, int64_t c, int64_t hw, int flags) {
    bn_data b = make_data(dt, n, c, hw);
    amp_bn_desc d = b.d, dn = b.d; /* dn without the ReLU: the unfused chain's */
    d.relu = (flags & RELU) != 0;
    int64_t total = n * c * hw, count = n * hw;
    size_t nbytes = (size_t)total * amp_dtype_size(dt), cb = (size_t)c * 4;
    bool affine = !(flags & NO_AFFINE), running = !(flags & NO_RUNNING);
    bool save = !(flags & NO_SAVE), want_dx = !(flags & NO_DX), dparam = !(flags & NO_DPARAM);
    bool in_place = flags & IN_PLACE;

    dev_buf x = upload_vec(b.x.data(), nbytes), dy = upload_vec(b.dy.data(), nbytes);
    dev_buf g = upload_vec(b.gamma.data(), cb), be = upload_vec(b.beta.data(), cb);
    dev_buf rm = upload_vec(b.rm.data(), cb), rv = upload_vec(b.rv.data(), cb);
    dev_buf y(nbytes), sm(cb), si(cb), dx(nbytes), dg(cb), db(cb), ye(nbytes);
    const float *gp = affine ? g.dev<float>() : nullptr, *bp = affine ? be.dev<float>() : nullptr;
    void *yp = in_place ? x.ptr : y.ptr, *dxp = in_place ? dy.ptr : dx.ptr;
    CHECK_OK(amp_cuda_bn_fwd_train(
            amp_cuda_device(), &d, x.ptr, gp, bp, yp, save ? sm.dev<float>() : nullptr,
            save ? si.dev<float>() : nullptr, running ? rm.dev<float>() : nullptr,
            running ? rv.dev<float>() : nullptr));
    /* The CPU backend on host copies, with the same NULLs; its save_* feed both backwards. */
    std::vector<uint8_t> cy(nbytes), cdx(nbytes), cye(nbytes);
    std::vector<float> csm(c), csi(c), crm = b.rm, crv = b.rv, cdg(c), cdb(c);
    const float *cg = affine ? b.gamma.data() : nullptr, *cbeta = affine ? b.beta.data() : nullptr;
    CHECK_OK(amp_cpu_bn_fwd_train(amp_cpu_device(), &d, b.x.data(), cg, cbeta, cy.data(),
                                  save ? csm.data() : nullptr, save ? csi.data() : nullptr,
                                  running ? crm.data() : nullptr, running ? crv.data() : nullptr));
    if (!save) {
        CHECK_OK(amp_cpu_bn_fwd_train(amp_cpu_device(), &d, b.x.data(), cg, cbeta, cy.data(),
                                      csm.data(), csi.data(), nullptr, nullptr));
        sm.upload(csm.data());
        si.upload(csi.data());
    }
    /* x is y now when in place: the backward and eval read the original x again. */
    dev_buf x2 = upload_vec(b.x.data(), nbytes);
    CHECK_OK(amp_cuda_bn_bwd(amp_cuda_device(), &d, x2.ptr, dy.ptr, d.relu ? yp : nullptr, gp,
                             sm.dev<float>(), si.dev<float>(), want_dx ? dxp : nullptr,
                             dparam ? dg.dev<float>() : nullptr,
                             dparam ? db.dev<float>() : nullptr));
    CHECK_OK(amp_cpu_bn_bwd(amp_cpu_device(), &d, b.x.data(), b.dy.data(),
                            d.relu ? cy.data() : nullptr, cg, csm.data(), csi.data(), cdx.data(),
                            cdg.data(), cdb.data()));
    std::vector<float> erm = running ? crm : b.rm, erv = running ? crv : b.rv;
    dev_buf erm_d = upload_vec(erm.data(), cb), erv_d = upload_vec(erv.data(), cb);
    CHECK_OK(amp_cuda_bn_fwd_eval(amp_cuda_device(), &d, x2.ptr, gp, bp, erm_d.dev<float>(),
                                  erv_d.dev<float>(), ye.ptr));
    CHECK_OK(amp_cpu_bn_fwd_eval(amp_cpu_device(), &d, b.x.data(), cg, cbeta, erm.data(),
                                 erv.data(), cye.data()));
    CHECK(dev_sync());
    dev_buf &yr = in_place ? x : y, &dxr = in_place ? dy : dx;
    for (dev_buf *buf : {&yr, &sm, &si, &rm, &rv, &dxr, &dg, &db, &ye}) buf->download();

    int64_t bad_cpu = diff_dt(yr.host.data(), cy.data(), dt, total) +
                      diff_dt(ye.host.data(), cye.data(), dt, total);
    if (save)
        bad_cpu += diff_f32(sm.h<float>(), csm.data(), c) + diff_f32(si.h<float>(), csi.data(), c);
    if (running)
        bad_cpu += diff_f32(rm.h<float>(), crm.data(), c) + diff_f32(rv.h<float>(), crv.data(), c);
    else /* not tracked: the buffers were not passed and keep their values */
        bad_cpu +=
            diff_f32(rm.h<float>(), b.rm.data(), c) + diff_f32(rv.h<float>(), b.rv.data(), c);
    if (want_dx) bad_cpu += diff_dt(dxr.host.data(), cdx.data(), dt, total);
    if (dparam)
        bad_cpu += diff_f32(dg.h<float>(), cdg.data(), c) + diff_f32(db.h<float>(), cdb.data(), c);
    CHECK_MSG(bad_cpu == 0, "bn %s [%lld, %lld, %lld] flags %d: %lld values differ from the CPU "
              "backend", amp_dtype_name(dt), (long long)n, (long long)c, (long long)hw, flags,
              (long long)bad_cpu);
    bool guards = x.guard_intact() && y.guard_intact() && sm.guard_intact() &&
                  si.guard_intact() && rm.guard_intact() && rv.guard_intact() &&
                  dx.guard_intact() && dy.guard_intact() && dg.guard_intact() &&
                  db.guard_intact() && ye.guard_intact();
    CHECK(guards);
    if (d.relu) { /* the CPU's unfused forwards, then the ReLU: the same values (+0 for -0) */
        std::vector<uint8_t> py(nbytes), pye(nbytes);
        std::vector<float> prm = b.rm, prv = b.rv;
        CHECK_OK(amp_cpu_bn_fwd_train(amp_cpu_device(), &dn, b.x.data(), cg, cbeta, py.data(),
                                      nullptr, nullptr, prm.data(), prv.data()));
        CHECK_OK(amp_cpu_bn_fwd_eval(amp_cpu_device(), &dn, b.x.data(), cg, cbeta, erm.data(),
                                     erv.data(), pye.data()));
        int64_t bad_relu = 0, zeroed = 0;
        for (int64_t e = 0; e < total; e++) {
            float pv = nv_load(py.data(), dt, e), pe = nv_load(pye.data(), dt, e);
            bad_relu += nv_load(yr.host.data(), dt, e) != (pv < 0 ? 0.0f : pv);
            bad_relu += nv_load(ye.host.data(), dt, e) != (pe < 0 ? 0.0f : pe);
            zeroed += pv < 0;
        }
        CHECK_MSG(bad_relu == 0 && zeroed > 0 && zeroed < total,
                  "bn+relu %s [%lld, %lld, %lld]: %lld values differ from relu(bn), %lld of %lld "
                  "zeroed", amp_dtype_name(dt), (long long)n, (long long)c, (long long)hw,
                  (long long)bad_relu, (long long)zeroed, (long long)total);
        /* The backward: the CPU's on dy masked by relu's backward first, bit for bit. */
        std::vector<uint8_t> masked(nbytes), mdx(nbytes);
        std::vector<float> mdg(c), mdb(c);
        for (int64_t e = 0; e < total; e++) /* PyTorch's threshold_backward: y <= 0 ? 0 : dy */
            nv_store(masked.data(), dt, e,
                     nv_load(cy.data(), dt, e) <= 0.0f ? 0.0f : nv_load(b.dy.data(), dt, e));
        CHECK_OK(amp_cpu_bn_bwd(amp_cpu_device(), &dn, b.x.data(), masked.data(), nullptr, cg,
                                csm.data(), csi.data(), mdx.data(), mdg.data(), mdb.data()));
        int64_t bad_bwd = diff_dt(mdx.data(), cdx.data(), dt, total) +
                          diff_f32(mdg.data(), cdg.data(), c) + diff_f32(mdb.data(), cdb.data(), c);
        CHECK_MSG(bad_bwd == 0, "bn+relu bwd %s [%lld, %lld, %lld]: %lld values differ from bn's "
                  "backward on masked dy", amp_dtype_name(dt), (long long)n, (long long)c,
                  (long long)hw, (long long)bad_bwd);
    }
    if (flags) return;

    /* The double reference. */
    const double ulp = ulp_of(dt), eps = d.eps, mom = d.momentum;
    int64_t bad_stats = 0, bad_y = 0, bad_dx = 0, bad_param = 0, bad_eval = 0;
    const void *xh = b.x.data(), *dyh = b.dy.data();
    for (int64_t ch = 0; ch < c; ch++) {
        long double sum = 0, sq = 0;
        for_channel(d, ch, [&](int64_t e) { sum += nv_load(xh, dt, e); });
        double mean = (double)(sum / count);
        for_channel(d, ch, [&](int64_t e) {
            long double dev = (long double)nv_load(xh, dt, e) - mean;
            sq += dev * dev;
        });
        double var = (double)(sq / count), invstd = 1.0 / std::sqrt(var + eps);
        double want_rm = (1 - mom) * b.rm[ch] + mom * mean;
        double want_rv = (1 - mom) * b.rv[ch] + mom * (double)(sq / (count - 1));
        auto near = [](double got, double want, double tol) {
            return std::fabs(got - want) <= tol;
        };
        bad_stats += !near(sm.h<float>()[ch], mean, 0x1p-23 * std::fabs(mean));
        bad_stats += !near(si.h<float>()[ch], invstd, 0x1p-22 * invstd);
        bad_stats += !near(rm.h<float>()[ch], want_rm, 0x1p-22 * (std::fabs(mean) + 1));
        bad_stats += !near(rv.h<float>()[ch], want_rv, 0x1p-22 * (want_rv + 1));
        double s = b.gamma[ch] * invstd, shift = b.beta[ch] - mean * s;
        /* y's f32 steps: x * scale and + shift, each rounded, from rounded scale and shift. */
        double m_save = sm.h<float>()[ch], i_save = si.h<float>()[ch];
        double sum_dy = 0, dot = 0; /* against the saved statistics, as the backward sees them */
        for_channel(d, ch, [&](int64_t e) {
            double xv = nv_load(xh, dt, e), gv = nv_load(dyh, dt, e);
            double want = xv * s + shift, got = nv_load(yr.host.data(), dt, e);
            double tol = 0x1p-21 * (std::fabs(xv * s) + std::fabs(shift)) +
                         ulp * std::fabs(want) + 0x1p-24;
            bad_y += !near(got, want, tol);
            sum_dy += gv;
            dot += gv * (xv - m_save) * i_save;
        });
        double gm = b.gamma[ch];
        bad_param += !near(db.h<float>()[ch], sum_dy, 0x1p-23 * std::fabs(sum_dy) + 1e-12 * count);
        bad_param += !near(dg.h<float>()[ch], dot, 0x1p-22 * std::fabs(dot) + 1e-9 * count);
        for_channel(d, ch, [&](int64_t e) {
            double xv = nv_load(xh, dt, e), gv = nv_load(dyh, dt, e);
            double xhat = (xv - m_save) * i_save, k = gm * i_save;
            double want = k / count * (count * gv - sum_dy - xhat * dot);
            double tol = 0x1p-20 * std::fabs(k) *
                             (std::fabs(gv) + std::fabs(xhat * dot / count) +
                              std::fabs(sum_dy / count)) +
                         ulp * std::fabs(want) + 0x1p-24;
            bad_dx += !near(nv_load(dxr.host.data(), dt, e), want, tol);
        });
        double ei = 1.0 / std::sqrt((double)erv[ch] + eps), es = gm * ei;
        double eshift = b.beta[ch] - erm[ch] * es;
        for_channel(d, ch, [&](int64_t e) {
            double xv = nv_load(xh, dt, e), want = xv * es + eshift;
            double tol = 0x1p-21 * (std::fabs(xv * es) + std::fabs(eshift)) +
                         ulp * std::fabs(want) + 0x1p-24;
            bad_eval += !near(nv_load(ye.host.data(), dt, e), want, tol);
        });
    }
    CHECK_MSG(bad_stats + bad_y + bad_dx + bad_param + bad_eval == 0,
              "bn %s [%lld, %lld, %lld] vs the reference: %lld stats, %lld y, %lld dx, %lld "
              "dgamma/dbeta, %lld eval wrong", amp_dtype_name(dt), (long long)n, (long long)c,
              (long long)hw, (long long)bad_stats, (long long)bad_y, (long long)bad_dx,
              (long long)bad_param, (long long)bad_eval);
}

static void test_shapes(void) {
    const int64_t shapes[][3] = {
        {1, 3, 7},    /* n = 1 */
        {2, 1, 1},    /* hw = 1, the fewest values training accepts */
        {37, 5, 1},   /* hw = 1, a 1-d batch norm: 37 one-element tiles per channel */
        {3, 4, 33},   /* odd hw */
        {5, 2, 49},   /* 7x7 planes */
        {2, 3, 4100}, /* two tiles per plane, the second of 4 elements */
        {300, 2, 5},  /* 300 tiles per channel: the tile grid has several blocks */
        {1, 2, 9000}, /* n = 1 with three tiles */
    };
    for (amp_dtype dt : float_dts)
        for (const auto &s : shapes) run_case(dt, s[0], s[1], s[2], 0);
    /* Past the elementwise passes' grid cap (4096 blocks of 4 planes of 64): planes loop. */
    run_case(AMP_BF16, 64, 300, 64, 0);
    /* 420 tiles in each of 300 channels: the tile sums' grid is capped too, its warps loop. */
    run_case(AMP_F16, 420, 300, 1, 0);
}

static void test_optional_pointers(void) {
    const int variants[] = {NO_AFFINE,       NO_RUNNING, NO_SAVE, NO_DX, NO_DPARAM, IN_PLACE,
                            NO_AFFINE | NO_RUNNING | NO_SAVE | NO_DPARAM};
    for (int f : variants) {
        run_case(AMP_F32, 3, 4, 33, f);
        run_case(AMP_F16, 2, 3, 4100, f);
    }
    for (amp_dtype dt : float_dts) { /* the fused ReLU, alone, in place and with every NULL */
        run_case(dt, 5, 2, 49, RELU);
        run_case(dt, 2, 3, 4100, RELU | IN_PLACE);
        run_case(dt, 3, 4, 33, RELU | NO_AFFINE | NO_RUNNING | NO_SAVE | NO_DPARAM);
    }
}

/* A NaN in channel 1 makes that channel's statistics and outputs NaN and leaves the others
 * exact; bwd with every output NULL is a no-op that succeeds. */
static void test_nan_channel(void) {
    bn_data b = make_data(AMP_F32, 3, 3, 10);
    const amp_bn_desc &d = b.d;
    ((float *)b.x.data())[(1 * 3 + 1) * 10 + 4] = NAN;
    size_t nbytes = b.x.size();
    dev_buf x = upload_vec(b.x.data(), nbytes), y(nbytes), sm(12), si(12);
    CHECK_OK(amp_cuda_bn_fwd_train(amp_cuda_device(), &d, x.ptr, nullptr, nullptr, y.ptr,
                                   sm.dev<float>(), si.dev<float>(), nullptr, nullptr));
    std::vector<float> cy(90), csm(3), csi(3);
    CHECK_OK(amp_cpu_bn_fwd_train(amp_cpu_device(), &d, b.x.data(), nullptr, nullptr, cy.data(),
                                  csm.data(), csi.data(), nullptr, nullptr));
    CHECK_OK(amp_cuda_bn_bwd(amp_cuda_device(), &d, x.ptr, x.ptr, nullptr, nullptr, sm.dev<float>(),
                             si.dev<float>(), nullptr, nullptr, nullptr));
    CHECK(dev_sync());
    y.download();
    sm.download();
    int64_t nan_ok = 0;
    for (int64_t e = 0; e < 90; e++) nan_ok += std::isnan(y.h<float>()[e]) == ((e / 10) % 3 == 1);
    CHECK(nan_ok == 90 && std::isnan(sm.h<float>()[1]) && !std::isnan(sm.h<float>()[0]));
    CHECK(diff_f32(y.h<float>(), cy.data(), 90) == 0 &&
          diff_f32(sm.h<float>(), csm.data(), 3) == 0);
}

static void test_errors(void) {
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8], m[2] = {0, 0}, v[2] = {1, 1};
    amp_bn_desc d = {2, 2, 2, 1e-5f, 0.1f, AMP_F32, false};
    CHECK_FAILS(amp_cuda_bn_fwd_train(amp_cuda_device(), nullptr, x, nullptr, nullptr, y, m, v,
                                      nullptr, nullptr),
                AMP_ERR_INVALID_ARG, "amp_cuda_bn_fwd_train: argument 'd' is NULL");
    CHECK_FAILS(amp_cuda_bn_fwd_train(amp_cuda_device(), &d, nullptr, nullptr, nullptr, y, m, v,
                                      nullptr, nullptr),
                AMP_ERR_INVALID_ARG, "amp_cuda_bn_fwd_train: argument 'x' is NULL");
    CHECK_FAILS(amp_cuda_bn_fwd_train(amp_cuda_device(), &d, x, nullptr, nullptr, nullptr, m, v,
                                      nullptr, nullptr),
                AMP_ERR_INVALID_ARG, "argument 'y' is NULL");
    CHECK_FAILS(amp_cuda_bn_fwd_eval(amp_cuda_device(), &d, x, nullptr, nullptr, m, nullptr, y),
                AMP_ERR_INVALID_ARG, "amp_cuda_bn_fwd_eval: argument 'running_var' is NULL");
    CHECK_FAILS(amp_cuda_bn_bwd(amp_cuda_device(), &d, x, x, nullptr, nullptr, nullptr, v, y,
                                nullptr, nullptr),
                AMP_ERR_INVALID_ARG, "amp_cuda_bn_bwd: argument 'save_mean' is NULL");
    CHECK_FAILS(amp_cuda_bn_bwd(amp_cuda_device(), &d, x, nullptr, nullptr, nullptr, m, v, y,
                                nullptr, nullptr),
                AMP_ERR_INVALID_ARG, "argument 'dy' is NULL");
    d.relu = true; /* the backward masks dy by the forward's y: it must be given */
    CHECK_FAILS(amp_cuda_bn_bwd(amp_cuda_device(), &d, x, x, nullptr, nullptr, m, v, y, nullptr,
                                nullptr),
                AMP_ERR_INVALID_ARG, "amp_cuda_bn_bwd: argument 'y' is NULL; d->relu is set");
    d.relu = false;
    CHECK_FAILS(amp_cuda_bn_bwd(amp_cuda_device(), &d, x, x, x, nullptr, m, v, y, nullptr, nullptr),
                AMP_ERR_INVALID_ARG, "amp_cuda_bn_bwd: argument 'y' is given but d->relu is not");
    d.dtype = AMP_I32;
    CHECK_FAILS(amp_cuda_bn_bwd(amp_cuda_device(), &d, x, x, nullptr, nullptr, m, v, y, nullptr,
                                nullptr),
                AMP_ERR_DTYPE, "amp_cuda_bn_bwd: dtype i32 is not a float type");
    d.dtype = AMP_F16;
    d.n = 0;
    CHECK_FAILS(amp_cuda_bn_fwd_eval(amp_cuda_device(), &d, x, nullptr, nullptr, m, v, y),
                AMP_ERR_SHAPE, "[n 0, c 2, hw 2] has an empty dimension");
    d.n = -3;
    CHECK_FAILS(amp_cuda_bn_fwd_train(amp_cuda_device(), &d, x, nullptr, nullptr, y, m, v, nullptr,
                                      nullptr),
                AMP_ERR_SHAPE, "empty dimension");
    d.n = 1, d.hw = 0;
    CHECK_FAILS(amp_cuda_bn_bwd(amp_cuda_device(), &d, x, x, nullptr, nullptr, m, v, y, nullptr,
                                nullptr),
                AMP_ERR_SHAPE, "hw 0");
    d.hw = 1;
    CHECK_FAILS(amp_cuda_bn_fwd_train(amp_cuda_device(), &d, x, nullptr, nullptr, y, m, v, nullptr,
                                      nullptr),
                AMP_ERR_SHAPE, "amp_cuda_bn_fwd_train: 1 value per channel (n 1 x hw 1)");
    /* Eval and backward accept one value per channel. */
    dev_buf xd = upload_vec(x, 8), yd(8), md = upload_vec(m, 8), vd = upload_vec(v, 8);
    CHECK_OK(amp_cuda_bn_fwd_eval(amp_cuda_device(), &d, xd.ptr, nullptr, nullptr, md.dev<float>(),
                                  vd.dev<float>(), yd.ptr));
    CHECK(dev_sync());
}

int main(void) {
    test_shapes();
    test_optional_pointers();
    test_nan_channel();
    test_errors();
    return test_summary("test_batchnorm_cudacpu");
}
