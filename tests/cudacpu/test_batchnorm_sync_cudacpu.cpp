/* Runs kernels/cuda/sync_batchnorm.cu (synchronised batch norm: bn_channel_sums, bn_sync_stats,
 * bn_bwd_elemt) on the CPU under ../shared/cudacpu and checks it two ways:
 *  - against the CPU backend's own entries (kernels/cpu/sync_batchnorm.c, linked in): every
 *    output bit for bit (both sum a channel in batch norm's tile/lane order in double and round
 *    to f32 once, and round every product on its own);
 *  - against a plain long double reference written here from the contract in core/backend.h
 *    (the sums term by term; mean = center + s1 / N, var = s2 / N - (s1 / N)^2, PyTorch's
 *    momentum with the unbiased variance; dx = gamma * invstd * (dy - mean_dy - (x - mean) *
 *    invstd^2 * mean_dy_xmu)), within the roundings the kernels make. The sums fed into the
 *    statistics also give the data's own batch mean and biased variance (sums -> stats as one
 *    rank runs them).
 * The global count is twice the local one, with sums doubled (exact in f32), as if two ranks
 * held the same data: the entries must divide by `count`, not by n * hw.
 * Shapes with n = 1 and n > 1, hw = 1, odd hw, hw past one 4096-element tile, many tiles, past
 * the grid caps; f32, f16 and bf16; centred and uncentred sums; every optional pointer NULL in
 * turn; s2 NULL (mean only: the other outputs untouched); dx = dy; data whose sum depends on the
 * order (the CPU's order, not another, must be reproduced); a NaN in one channel stays in it; guard zones after every output; the argument errors. Run with CUDACPU_SCHEDULE=random:7 and
 * CUDACPU_STREAMS=random as well. */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ops_ref.h"

/* The CPU backend's entries and the one function they need from the rest of that backend,
 * written here over NVIDIA's conversions (round to nearest even, as memory.c's). */
extern "C" {
amp_status amp_cpu_bn_channel_sums(amp_device_ctx *dev, const amp_bn_desc *d, const void *x,
                                   const float *center, const void *dy, float *out1, float *out2);
amp_status amp_cpu_bn_sync_stats(amp_device_ctx *dev, const amp_bn_desc *d, int64_t count,
                                 const float *center, const float *s1, const float *s2, float *mean,
                                 float *var, float *invstd, float *running_mean,
                                 float *running_var);
amp_status amp_cpu_bn_bwd_elemt(amp_device_ctx *dev, const amp_bn_desc *d, int64_t count,
                                const void *x, const void *dy, const float *gamma,
                                const float *mean, const float *invstd, const float *sum_dy,
                                const float *sum_dy_xmu, void *dx);
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
}

/* The relative spacing of dt's values near 1 (one ulp). */
static double ulp_of(amp_dtype dt) {
    return dt == AMP_F32 ? 0x1p-23 : dt == AMP_F16 ? 0x1p-10 : 0x1p-7;
}

/* Leave these pointers NULL / run these variants. */
enum {
    NO_CENTER = 1,  /* center of the sums and of the stats */
    NO_AFFINE = 2,  /* gamma */
    NO_RUNNING = 4, /* running_mean, running_var */
    NO_VARINV = 8,  /* var, invstd */
    MEAN_ONLY = 16, /* s2 NULL: only mean written */
    IN_PLACE = 32,  /* dx = dy */
};

/* The ranks of the pretend job: count and sums are this many times the local ones. */
static const int RANKS = 2;

static dev_buf upload_vec(const void *src, size_t nbytes) {
    dev_buf b(nbytes);
    b.upload(src);
    return b;
}

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

/* Every element of channel ch, as its index. */
template <class F>
static void for_channel(const amp_bn_desc &d, int64_t ch, F f) {
    for (int64_t i = 0; i < d.n; i++)
        for (int64_t k = 0; k < d.hw; k++) f((i * d.c + ch) * d.hw + k);
}

static bool near(double got, double want, double tol) { return std::fabs(got - want) <= tol; }

/* Both channel sums on the device and on the CPU; returns the values that differ in bits and
 * checks the device's against the long double reference (center may be NULL, dy may be NULL). */
static int64_t check_sums(const amp_bn_desc &d, const std::vector<uint8_t> &x,
                          const std::vector<uint8_t> *dy, const float *center, dev_buf &xd,
                          dev_buf *dyd, dev_buf *cd, std::vector<float> &o1,
                          std::vector<float> &o2, const char *what) {
    int64_t c = d.c, count = d.n * d.hw;
    dev_buf a((size_t)c * 4), b((size_t)c * 4);
    CHECK_OK(amp_cuda_bn_channel_sums(amp_cuda_device(), &d, xd.ptr,
                                      cd ? cd->dev<float>() : nullptr, dyd ? dyd->ptr : nullptr,
                                      a.dev<float>(), b.dev<float>()));
    o1.assign(c, 0.f);
    o2.assign(c, 0.f);
    CHECK_OK(amp_cpu_bn_channel_sums(amp_cpu_device(), &d, x.data(), center,
                                     dy ? dy->data() : nullptr, o1.data(), o2.data()));
    CHECK(dev_sync());
    a.download();
    b.download();
    CHECK(a.guard_intact() && b.guard_intact());
    int64_t bad_cpu = diff_f32(a.h<float>(), o1.data(), c) + diff_f32(b.h<float>(), o2.data(), c);
    int64_t bad_ref = 0;
    for (int64_t ch = 0; ch < c; ch++) {
        long double cen = center ? center[ch] : 0.0f, r1 = 0, r2 = 0, abs1 = 0, abs2 = 0;
        for_channel(d, ch, [&](int64_t e) {
            long double xv = nv_load(x.data(), d.dtype, e), t1, t2;
            if (dy) {
                t1 = nv_load(dy->data(), d.dtype, e);
                t2 = t1 * (xv - cen);
            } else {
                t1 = xv - cen;
                t2 = t1 * t1;
            }
            r1 += t1, r2 += t2, abs1 += std::fabs(t1), abs2 += std::fabs(t2);
        });
        /* one f32 rounding of the result, and double accumulation over count terms */
        double acc = (double)count * 0x1p-52;
        bad_ref += !near(a.h<float>()[ch], (double)r1, 0x1p-24 * std::fabs((double)r1) +
                                                           acc * (double)abs1 + 1e-300);
        bad_ref += !near(b.h<float>()[ch], (double)r2, 0x1p-24 * std::fabs((double)r2) +
                                                           acc * (double)abs2 + 1e-300);
    }
    CHECK_MSG(bad_ref == 0, "bn_channel_sums %s %s [%lld, %lld, %lld]: %lld sums off the "
              "reference", what, amp_dtype_name(d.dtype), (long long)d.n, (long long)c,
              (long long)d.hw, (long long)bad_ref);
    return bad_cpu;
}

/* sums -> stats -> backward sums -> dx over one tensor, on both backends, with the given flags. */
static void run_case(amp_dtype dt, int64_t n, int64_t c, int64_t hw, int flags) {
    amp_bn_desc d = {n, c, hw, 1e-5f, 0.1f, dt, false};
    int64_t total = n * c * hw, local = n * hw, count = RANKS * local;
    size_t es = amp_dtype_size(dt), nbytes = (size_t)total * es, cb = (size_t)c * 4;
    std::vector<uint8_t> x(nbytes), dy(nbytes);
    for (int64_t i = 0; i < total; i++) {
        int64_t ch = (i / hw) % c;
        /* mean near 3 + ch, spread 1 + ch / 4: a mean large next to the spread */
        double v = 3.0 + (double)ch + (2 * rnd_uniform() - 1) * (1.0 + 0.25 * (double)ch);
        nv_store(x.data(), dt, i, (float)v);
        nv_store(dy.data(), dt, i, (float)(2 * rnd_uniform() - 1));
    }
    std::vector<float> center(c), gamma(c), rm(c), rv(c);
    for (int64_t ch = 0; ch < c; ch++) {
        center[ch] = (float)(3.0 + (double)ch + 0.3 * (2 * rnd_uniform() - 1)); /* near, not at */
        gamma[ch] = (float)(0.5 + rnd_uniform());
        rm[ch] = (float)(2 * rnd_uniform() - 1);
        rv[ch] = (float)(0.5 + 1.5 * rnd_uniform());
    }
    bool centred = !(flags & NO_CENTER), affine = !(flags & NO_AFFINE);
    bool running = !(flags & NO_RUNNING), varinv = !(flags & NO_VARINV);
    bool mean_only = flags & MEAN_ONLY, in_place = flags & IN_PLACE;
    const float *cen = centred ? center.data() : nullptr;
    dev_buf xd = upload_vec(x.data(), nbytes), dyd = upload_vec(dy.data(), nbytes);
    dev_buf cd = upload_vec(center.data(), cb), gd = upload_vec(gamma.data(), cb);
    char what[64];
    snprintf(what, sizeof what, "flags %d", flags);

    /* 1. Forward sums, doubled as the all-reduce over RANKS equal ranks would give them. */
    std::vector<float> s1, s2;
    int64_t bad_cpu = check_sums(d, x, nullptr, cen, xd, nullptr, centred ? &cd : nullptr, s1, s2,
                                 what);
    for (int64_t ch = 0; ch < c; ch++) s1[ch] *= RANKS, s2[ch] *= RANKS;

    /* 2. Statistics; var/invstd/running prefilled so that what is not written shows. */
    const float fill = 12345.0f;
    std::vector<float> fills(c, fill);
    dev_buf s1d = upload_vec(s1.data(), cb), s2d = upload_vec(s2.data(), cb);
    dev_buf md = upload_vec(fills.data(), cb), vd = upload_vec(fills.data(), cb);
    dev_buf id = upload_vec(fills.data(), cb);
    dev_buf rmd = upload_vec(rm.data(), cb), rvd = upload_vec(rv.data(), cb);
    std::vector<float> cm(fills), cv(fills), ci(fills), crm(rm), crv(rv);
    const float *s2p = mean_only ? nullptr : s2d.dev<float>();
    CHECK_OK(amp_cuda_bn_sync_stats(
            amp_cuda_device(), &d, count, centred ? cd.dev<float>() : nullptr, s1d.dev<float>(),
            s2p, md.dev<float>(), varinv ? vd.dev<float>() : nullptr,
            varinv ? id.dev<float>() : nullptr, running ? rmd.dev<float>() : nullptr,
            running ? rvd.dev<float>() : nullptr));
    CHECK_OK(amp_cpu_bn_sync_stats(amp_cpu_device(), &d, count, cen, s1.data(),
                                   mean_only ? nullptr : s2.data(), cm.data(),
                                   varinv ? cv.data() : nullptr, varinv ? ci.data() : nullptr,
                                   running ? crm.data() : nullptr, running ? crv.data() : nullptr));
    CHECK(dev_sync());
    for (dev_buf *b : {&md, &vd, &id, &rmd, &rvd}) b->download();
    bad_cpu += diff_f32(md.h<float>(), cm.data(), c) + diff_f32(vd.h<float>(), cv.data(), c) +
               diff_f32(id.h<float>(), ci.data(), c) + diff_f32(rmd.h<float>(), crm.data(), c) +
               diff_f32(rvd.h<float>(), crv.data(), c);
    /* Not written: the buffers keep their values (with s2 NULL, even where passed). */
    int64_t untouched = 0;
    if (!varinv || mean_only)
        untouched += diff_f32(vd.h<float>(), fills.data(), c) +
                     diff_f32(id.h<float>(), fills.data(), c);
    if (!running || mean_only)
        untouched += diff_f32(rmd.h<float>(), rm.data(), c) +
                     diff_f32(rvd.h<float>(), rv.data(), c);
    CHECK_MSG(untouched == 0, "bn_sync_stats flags %d: %lld outputs written that should not be",
              flags, (long long)untouched);

    /* The stats against the contract, from the sums, and against the data itself. */
    int64_t bad_stats = 0;
    const double eps = d.eps, mom = d.momentum, N = (double)count;
    for (int64_t ch = 0; ch < c && !mean_only; ch++) {
        long double cen_l = centred ? center[ch] : 0.0f, dm = (long double)s1[ch] / N;
        long double mean = cen_l + dm, var = (long double)s2[ch] / N - dm * dm;
        if (var < 0) var = 0;
        double m = md.h<float>()[ch];
        bad_stats += !near(m, (double)mean, 0x1p-24 * std::fabs((double)mean) + 1e-300);
        if (varinv) {
            double v = vd.h<float>()[ch], want_i = 1.0 / std::sqrt(v + eps);
            bad_stats += !near(v, (double)var, 0x1p-24 * (double)var +
                                                   0x1p-50 * (double)s2[ch] / N + 1e-300);
            bad_stats += !near(id.h<float>()[ch], want_i, 0x1p-23 * want_i);
        }
        if (running) {
            double want_rm = (1 - mom) * rm[ch] + mom * (double)mean;
            double want_rv = (1 - mom) * rv[ch] + mom * (double)var * N / (N - 1);
            bad_stats += !near(rmd.h<float>()[ch], want_rm, 0x1p-22 * (std::fabs(want_rm) + 1));
            bad_stats += !near(rvd.h<float>()[ch], want_rv, 0x1p-22 * (want_rv + 1));
        }
        /* The data's own batch mean and biased variance (the RANKS copies change neither). */
        long double sum = 0, sq = 0;
        for_channel(d, ch, [&](int64_t e) { sum += nv_load(x.data(), dt, e); });
        long double dmean = sum / local;
        for_channel(d, ch, [&](int64_t e) {
            long double dev = nv_load(x.data(), dt, e) - dmean;
            sq += dev * dev;
        });
        double dvar = (double)(sq / local);
        bad_stats += !near(m, (double)dmean, 0x1p-23 * std::fabs((double)dmean));
        /* s2 is rounded once, relative to itself: without a center it holds mean^2 too, which
         * the subtraction cancels. */
        if (varinv)
            bad_stats += !near(vd.h<float>()[ch], dvar, 0x1p-21 * (dvar + (double)s2[ch] / N));
    }
    CHECK_MSG(bad_stats == 0, "bn_sync_stats %s [%lld, %lld, %lld] flags %d: %lld statistics off "
              "the reference", amp_dtype_name(dt), (long long)n, (long long)c, (long long)hw,
              flags, (long long)bad_stats);
    if (mean_only) {
        CHECK_MSG(bad_cpu == 0, "flags %d: %lld values differ from the CPU backend", flags,
                  (long long)bad_cpu);
        return;
    }

    /* 3. Backward sums centred on the batch mean (the CPU's, so both backwards see the same),
     * doubled; then dx. The backward needs invstd: when it was not asked for, take the CPU's. */
    std::vector<float> mean_h(cm), invstd_h(c);
    if (!varinv)
        CHECK_OK(amp_cpu_bn_sync_stats(amp_cpu_device(), &d, count, cen, s1.data(), s2.data(),
                                       mean_h.data(), nullptr, invstd_h.data(), nullptr, nullptr));
    else
        invstd_h = ci;
    dev_buf meand = upload_vec(mean_h.data(), cb), invd = upload_vec(invstd_h.data(), cb);
    std::vector<float> sdy, sdot;
    bad_cpu += check_sums(d, x, &dy, centred ? mean_h.data() : nullptr, xd, &dyd,
                          centred ? &meand : nullptr, sdy, sdot, what);
    for (int64_t ch = 0; ch < c; ch++) sdy[ch] *= RANKS, sdot[ch] *= RANKS;
    dev_buf sdyd = upload_vec(sdy.data(), cb), sdotd = upload_vec(sdot.data(), cb);
    dev_buf dxd(nbytes);
    dev_buf &dxr = in_place ? dyd : dxd;
    const float *gp = affine ? gamma.data() : nullptr;
    CHECK_OK(amp_cuda_bn_bwd_elemt(
            amp_cuda_device(), &d, count, xd.ptr, dyd.ptr, affine ? gd.dev<float>() : nullptr,
            meand.dev<float>(), invd.dev<float>(), sdyd.dev<float>(), sdotd.dev<float>(), dxr.ptr));
    std::vector<uint8_t> cdx(dy);
    CHECK_OK(amp_cpu_bn_bwd_elemt(amp_cpu_device(), &d, count, x.data(),
                                  in_place ? cdx.data() : dy.data(), gp, mean_h.data(),
                                  invstd_h.data(), sdy.data(), sdot.data(), cdx.data()));
    CHECK(dev_sync());
    dxr.download();
    bad_cpu += diff_dt(dxr.host.data(), cdx.data(), dt, total);
    CHECK_MSG(bad_cpu == 0, "bn sync %s [%lld, %lld, %lld] flags %d: %lld values differ from the "
              "CPU backend", amp_dtype_name(dt), (long long)n, (long long)c, (long long)hw, flags,
              (long long)bad_cpu);
    bool guards = xd.guard_intact() && dyd.guard_intact() && dxd.guard_intact() &&
                  md.guard_intact() && vd.guard_intact() && id.guard_intact() &&
                  rmd.guard_intact() && rvd.guard_intact();
    CHECK(guards);

    /* dx against the reference; mean_dy_xmu is centred on mean: only with the center. */
    const double ulp = ulp_of(dt);
    int64_t bad_dx = 0;
    for (int64_t ch = 0; ch < c && centred; ch++) {
        long double m = mean_h[ch], is = invstd_h[ch], k = (affine ? gamma[ch] : 1.0f) * is;
        long double mdy = (long double)sdy[ch] / N, mdot = (long double)sdot[ch] / N;
        for_channel(d, ch, [&](int64_t e) {
            long double xv = nv_load(x.data(), dt, e), gv = nv_load(dy.data(), dt, e);
            long double xm = xv - m, want = k * (gv - mdy - xm * is * is * mdot);
            double tol = 0x1p-20 * (double)(std::fabs(k) * (std::fabs(gv) + std::fabs(mdy) +
                                                             std::fabs(xm * is * is * mdot))) +
                         ulp * std::fabs((double)want) + 0x1p-24;
            bad_dx += !near(nv_load(dxr.host.data(), dt, e), (double)want, tol);
        });
    }
    CHECK_MSG(bad_dx == 0, "bn_bwd_elemt %s [%lld, %lld, %lld] flags %d: %lld dx off the "
              "reference", amp_dtype_name(dt), (long long)n, (long long)c, (long long)hw, flags,
              (long long)bad_dx);
}

static void test_shapes(void) {
    const int64_t shapes[][3] = {
        {1, 3, 7},    /* n = 1 */
        {2, 1, 1},    /* hw = 1 */
        {37, 5, 1},   /* hw = 1: 37 one-element tiles per channel */
        {3, 4, 33},   /* odd hw */
        {5, 2, 49},   /* 7x7 planes */
        {2, 3, 4100}, /* two tiles per plane, the second of 4 elements */
        {300, 2, 5},  /* 300 tiles per channel: the tile grid has several blocks */
        {1, 2, 9000}, /* n = 1 with three tiles */
    };
    for (amp_dtype dt : float_dts)
        for (const auto &s : shapes) run_case(dt, s[0], s[1], s[2], 0);
    /* Past dx's grid cap (4096 blocks of 4 planes of 64): planes loop. */
    run_case(AMP_BF16, 64, 300, 64, 0);
    /* 420 tiles in each of 300 channels: the tile sums' grid is capped too, its warps loop. */
    run_case(AMP_F16, 420, 300, 1, 0);
}

static void test_optional_pointers(void) {
    const int variants[] = {NO_CENTER, NO_AFFINE, NO_RUNNING, NO_VARINV, MEAN_ONLY, IN_PLACE,
                            NO_CENTER | NO_AFFINE | NO_RUNNING | NO_VARINV | IN_PLACE};
    for (int f : variants) {
        run_case(AMP_F32, 3, 4, 33, f);
        run_case(AMP_F16, 2, 3, 4100, f);
    }
}

/* A NaN in channel 1 makes that channel's sums NaN and leaves the others as the CPU's. */
static void test_nan_channel(void) {
    amp_bn_desc d = {3, 3, 10, 1e-5f, 0.1f, AMP_F32, false};
    std::vector<float> x(90);
    for (int i = 0; i < 90; i++) x[i] = (float)(2 * rnd_uniform() - 1);
    x[(1 * 3 + 1) * 10 + 4] = NAN;
    dev_buf xd = upload_vec(x.data(), 360), a(12), b(12);
    CHECK_OK(amp_cuda_bn_channel_sums(amp_cuda_device(), &d, xd.ptr, nullptr, nullptr,
                                      a.dev<float>(), b.dev<float>()));
    std::vector<float> ca(3), cbv(3);
    CHECK_OK(amp_cpu_bn_channel_sums(amp_cpu_device(), &d, x.data(), nullptr, nullptr, ca.data(),
                                     cbv.data()));
    CHECK(dev_sync());
    a.download();
    b.download();
    CHECK(std::isnan(a.h<float>()[1]) && std::isnan(b.h<float>()[1]) &&
          !std::isnan(a.h<float>()[0]) && !std::isnan(b.h<float>()[2]));
    CHECK(diff_f32(a.h<float>(), ca.data(), 3) == 0 && diff_f32(b.h<float>(), cbv.data(), 3) == 0);
}

/* Data whose double sum depends on the order: 2^60, 1 and -2^60 in one channel give 0 when 1 is
 * added to 2^60 before -2^60 is (the CPU's order: lanes 0 and 1 before lanes 2 and 3; tiles in
 * order) and 1 in other orders: in lanes 0, 1, 2 of one tile against another butterfly, and 1,
 * 2^60, -2^60 in tiles 0, 1, 2 against another tile order (reversed, it would add 2^60 and -2^60
 * first). Equal bits with the CPU then show that the lanes, the butterfly tree
 * and the tile totals are combined in the CPU's order; random data rarely does (the final f32
 * rounding hides most double-order differences). */
static void test_order(void) {
    const int64_t hws[] = {8, 3 * 4096}; /* the three in lanes 0, 1, 2 of one tile; in 3 tiles */
    for (int64_t hw : hws) {
        amp_bn_desc d = {2, 2, hw, 1e-5f, 0.1f, AMP_F32, false};
        int64_t total = d.n * d.c * hw, step = hw == 8 ? 1 : 4096;
        std::vector<float> x(total, 0.0f), dy(total, 1.0f);
        for (int64_t ch = 0; ch < d.c; ch++) {
            float *p = &x[(size_t)(ch * hw)]; /* plane 0 of channel ch */
            if (step == 1) p[0] = 0x1p60f, p[1] = 1.0f, p[2] = -0x1p60f;
            else p[0] = 1.0f, p[step] = 0x1p60f, p[2 * step] = -0x1p60f;
        }
        std::vector<uint8_t> xb(total * 4), dyb(total * 4);
        memcpy(xb.data(), x.data(), xb.size());
        memcpy(dyb.data(), dy.data(), dyb.size());
        dev_buf xd = upload_vec(xb.data(), xb.size()), dyd = upload_vec(dyb.data(), dyb.size());
        std::vector<float> o1, o2;
        int64_t bad = check_sums(d, xb, nullptr, nullptr, xd, nullptr, nullptr, o1, o2, "order");
        CHECK_MSG(o1[0] == 0.0f, "order hw %lld: the CPU's sum(x) is %g, want 0 (its order)",
                  (long long)hw, (double)o1[0]);
        bad += check_sums(d, dyb, &xb, nullptr, dyd, &xd, nullptr, o1, o2, "order dy");
        CHECK_MSG(bad == 0, "order hw %lld: %lld sums differ from the CPU backend's",
                  (long long)hw, (long long)bad);
    }
}

static void test_errors(void) {
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8], m[2] = {0, 0}, v[2] = {1, 1};
    amp_bn_desc d = {2, 2, 2, 1e-5f, 0.1f, AMP_F32, false};
    CHECK_FAILS(amp_cuda_bn_channel_sums(amp_cuda_device(), nullptr, x, nullptr, nullptr, m, v),
                AMP_ERR_INVALID_ARG, "amp_cuda_bn_channel_sums: argument 'd' is NULL");
    CHECK_FAILS(amp_cuda_bn_channel_sums(amp_cuda_device(), &d, nullptr, nullptr, nullptr, m, v),
                AMP_ERR_INVALID_ARG, "amp_cuda_bn_channel_sums: argument 'x' is NULL");
    CHECK_FAILS(amp_cuda_bn_channel_sums(amp_cuda_device(), &d, x, nullptr, nullptr, m, nullptr),
                AMP_ERR_INVALID_ARG, "argument 'out2' is NULL");
    CHECK_FAILS(amp_cuda_bn_sync_stats(amp_cuda_device(), &d, 8, nullptr, nullptr, v, m, nullptr,
                                       nullptr, nullptr, nullptr),
                AMP_ERR_INVALID_ARG, "amp_cuda_bn_sync_stats: argument 's1' is NULL");
    CHECK_FAILS(amp_cuda_bn_sync_stats(amp_cuda_device(), &d, 8, nullptr, m, v, nullptr, nullptr,
                                       nullptr, nullptr, nullptr),
                AMP_ERR_INVALID_ARG, "argument 'mean' is NULL");
    CHECK_FAILS(amp_cuda_bn_sync_stats(amp_cuda_device(), &d, 1, nullptr, m, v, m, nullptr, nullptr,
                                       nullptr, nullptr),
                AMP_ERR_INVALID_ARG, "amp_cuda_bn_sync_stats: count 1 values per channel");
    CHECK_FAILS(amp_cuda_bn_bwd_elemt(amp_cuda_device(), &d, 0, x, x, nullptr, m, v, m, v, y),
                AMP_ERR_INVALID_ARG, "amp_cuda_bn_bwd_elemt: count 0");
    CHECK_FAILS(amp_cuda_bn_bwd_elemt(amp_cuda_device(), &d, 8, x, x, nullptr, m, v, nullptr, v, y),
                AMP_ERR_INVALID_ARG, "amp_cuda_bn_bwd_elemt: argument 'sum_dy' is NULL");
    CHECK_FAILS(amp_cuda_bn_bwd_elemt(amp_cuda_device(), &d, 8, x, x, nullptr, m, nullptr, m, v, y),
                AMP_ERR_INVALID_ARG, "argument 'invstd' is NULL");
    CHECK_FAILS(amp_cuda_bn_bwd_elemt(amp_cuda_device(), &d, 8, x, x, nullptr, m, v, m, v, nullptr),
                AMP_ERR_INVALID_ARG, "argument 'dx' is NULL");
    d.dtype = AMP_I32;
    CHECK_FAILS(amp_cuda_bn_channel_sums(amp_cuda_device(), &d, x, nullptr, nullptr, m, v),
                AMP_ERR_DTYPE, "amp_cuda_bn_channel_sums: dtype i32 is not a float type");
    d.dtype = AMP_F16;
    d.c = 0;
    CHECK_FAILS(amp_cuda_bn_sync_stats(amp_cuda_device(), &d, 8, nullptr, m, v, m, nullptr, nullptr,
                                       nullptr, nullptr),
                AMP_ERR_SHAPE, "empty dimension");
    /* One value per channel is enough for the mean (s2 NULL) and for the backward. */
    d.c = 2, d.n = 1, d.hw = 1;
    dev_buf s = upload_vec(x, 8), md(8);
    CHECK_OK(amp_cuda_bn_sync_stats(amp_cuda_device(), &d, 1, nullptr, s.dev<float>(), nullptr,
                                    md.dev<float>(), nullptr, nullptr, nullptr, nullptr));
    CHECK(dev_sync());
    md.download();
    CHECK(md.h<float>()[0] == 1.0f && md.h<float>()[1] == 2.0f);
}

int main(void) {
    test_shapes();
    test_optional_pointers();
    test_nan_channel();
    test_order();
    test_errors();
    return test_summary("test_batchnorm_sync_cudacpu");
}
