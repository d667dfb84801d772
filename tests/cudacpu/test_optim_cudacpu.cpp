/* Runs the fused optimizers (kernels/cuda/optim.cu: SGD, Adam/AdamW; optim_lamb.cu: LAMB) on the
 * CPU under ../shared/cudacpu. Run with CUDACPU_SCHEDULE=random:7 and CUDACPU_STREAMS=random as
 * well: a result that moves is a race or a missing synchronisation.
 *
 * Bit for bit against the CPU's per-element math: the reference calls kernels/math/sgd.h, adam.h
 * and lamb.h on the host (this file is built with -ffp-contract=off, as the CPU backend is),
 * loads gradients as f32 times the scale (one rounding), and rounds half values with NVIDIA's own
 * __float2half_rn/__float2bfloat16_rn (not core/half.h). Every output buffer (parameter, state,
 * half copy or half parameter) must match byte for byte, the gradients must be untouched and the
 * guard bytes after every buffer intact. LAMB's norms are modelled in the kernels' fixed order
 * (each chunk: thread t sums elements t, t + 512, ... in double, warp butterflies, then the warp
 * sums; chunk partials in plan order), so its bits are exact too, under every schedule. (Sums
 * of squares in double almost never round to another f32 in another order: what the model pins
 * down is which elements reach which partial and which norm.)
 * Lists: an empty tensor among others and a tensor of 70000 elements (two chunks); 120 small
 * tensors, more than a launch holds at every depth (110/64/48/36/30 slots), for every depth the
 * optimizers use; all gradient dtypes; f32 parameters alone, with an f16/bf16 copy (O2), or half
 * parameters in place (O3); grad scale none, on the host, on the device (the host value then
 * ignored; a device 0 means none); found_inf absent, 0 (update), 1 or NaN (nothing written:
 * every byte as before); device step counts (amp_opt_tensors.steps: each tensor's own first step
 * or bias corrections, counts advanced for non-empty tensors only, kept by a skipped step).
 * Independently: torch.optim's own results (tests/ref/optim_ref.h, five steps, parameters that
 * miss gradients; the per-parameter first step / step count by grouping the calls, and by device
 * step counts with the missing parameters at numel 0), bit for bit for SGD and the "_ieee_sqrt"
 * Adam cases, 2 ulp for plain torch Adam (MKL's sqrt, see tests/unit/test_optim.c); and LAMB
 * against tests/ref/lamb_ref.h (float64 from the paper and Apex's conventions) within
 * test_lamb_math.c's tolerance, 1e-5 of each tensor's scale, plus its conventions exactly.
 * Errors: every argument check, before any launch (nothing written). */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/math/adam.h"
#include "kernels/math/lamb.h"
#include "kernels/math/sgd.h"
#include "opt_list.h"
#include "ops_ref.h" /* library stubs, NVIDIA conversions, random data, scalars */
#include "ref/lamb_ref.h"
#include "ref/optim_ref.h"

static const char *mode_name[] = {"f32", "O2", "O3"};
static const int64_t CHUNK = 65536, BLOCK = 512;

/* ---- references: the CPU's per-element math on the host ---- */

/* With device step counts, tensor i's coefficients come from its own t (L.step_of). */
static void ref_sgd(opt_list &L, std::vector<host_t> &hs, const amp_sgd_desc &d, float gs) {
    for (size_t i = 0; i < hs.size(); i++) {
        bool first = L.stp ? L.step_of(i) == 1 : d.first_step;
        amp_sgd_coefs c = amp_sgd_coefs_make(d.lr, d.momentum, d.dampening, d.weight_decay,
                                             d.nesterov, first);
        for (int64_t j = 0; j < L.numel[i]; j++) {
            float g = nv_load(hs[i].g.data(), L.g_dt, j) * gs;
            float p = L.param(hs[i], j);
            float *buf = d.momentum != 0.0f ? (float *)hs[i].s1.data() + j : NULL;
            amp_sgd_update_elem(&c, &p, g, buf);
            L.set_param(hs[i], j, p);
        }
    }
}

static void ref_adam(opt_list &L, std::vector<host_t> &hs, const amp_adam_desc &d, float gs) {
    for (size_t i = 0; i < hs.size(); i++) {
        amp_adam_coefs c = amp_adam_coefs_make(d.lr, d.beta1, d.beta2, d.eps, d.weight_decay,
                                               d.decoupled, L.stp ? L.step_of(i) : d.step);
        for (int64_t j = 0; j < L.numel[i]; j++) {
            float g = nv_load(hs[i].g.data(), L.g_dt, j) * gs;
            float p = L.param(hs[i], j);
            amp_adam_update_elem(&c, &p, g, (float *)hs[i].s1.data() + j,
                                 (float *)hs[i].s2.data() + j);
            L.set_param(hs[i], j, p);
        }
    }
}

/* The kernels' reduction order: butterflies over 32 lanes (lane l adds lane l ^ k, k = 16..1),
 * per warp, then over the warp sums (lanes past the 16 warps add 0). */
static double butterfly(const double *in) {
    double v[32], nv[32];
    memcpy(v, in, sizeof v);
    for (int k = 16; k >= 1; k >>= 1) {
        for (int l = 0; l < 32; l++) nv[l] = v[l] + v[l ^ k];
        memcpy(v, nv, sizeof v);
    }
    return v[0];
}

/* One chunk (n <= CHUNK values): thread t sums x[t], x[t + 512], ... squared, in order. */
static double chunk_sumsq(const float *x, int64_t n) {
    double acc[BLOCK] = {0}, warps[32] = {0};
    for (int64_t i = 0; i < n; i++) acc[i % BLOCK] += (double)x[i] * (double)x[i];
    for (int w = 0; w < BLOCK / 32; w++) warps[w] = butterfly(acc + 32 * w);
    return butterfly(warps);
}

/* A tensor's chunk partials added in order, onto `s`. */
static double tensor_sumsq(double s, const float *x, int64_t n) {
    for (int64_t c = 0; c * CHUNK < n; c++)
        s += chunk_sumsq(x + c * CHUNK, n - c * CHUNK < CHUNK ? n - c * CHUNK : CHUNK);
    return s;
}

static void ref_lamb(opt_list &L, std::vector<host_t> &hs, const amp_lamb_desc &d, float gs) {
    size_t n = hs.size();
    std::vector<std::vector<float>> G(n), X(n);
    for (size_t i = 0; i < n; i++)
        for (int64_t j = 0; j < L.numel[i]; j++) {
            G[i].push_back(nv_load(hs[i].g.data(), L.g_dt, j) * gs);
            X[i].push_back(L.param(hs[i], j));
        }
    float div = 1.0f;
    if (d.max_grad_norm > 0.0f) {
        double total = 0.0; /* one chain over every chunk of the list, in plan order */
        for (size_t i = 0; i < n; i++) total = tensor_sumsq(total, G[i].data(), L.numel[i]);
        div = amp_lamb_clip_divisor((float)std::sqrt(total), d.max_grad_norm);
    }
    for (size_t i = 0; i < n; i++) {
        amp_lamb_coefs c = amp_lamb_coefs_make(d.beta1, d.beta2, d.eps, d.weight_decay,
                                               d.decoupled, d.bias_correction, d.grad_averaging,
                                               L.stp ? L.step_of(i) : d.step);
        int64_t k = L.numel[i];
        std::vector<float> u(k);
        for (int64_t j = 0; j < k; j++)
            u[j] = amp_lamb_stage1_elem(&c, div, X[i][j], G[i][j], (float *)hs[i].s1.data() + j,
                                        (float *)hs[i].s2.data() + j);
        float step = d.lr;
        if (d.adapt_all || d.weight_decay != 0.0f) {
            float xn = (float)std::sqrt(tensor_sumsq(0.0, X[i].data(), k));
            float un = (float)std::sqrt(tensor_sumsq(0.0, u.data(), k));
            step = amp_lamb_step_size(d.lr, xn, un, d.weight_decay, d.adapt_all);
        }
        for (int64_t j = 0; j < k; j++) {
            float x = X[i][j];
            amp_lamb_stage2_elem(step, &x, u[j]);
            L.set_param(hs[i], j, x);
        }
    }
}

/* ---- one call against its reference ---- */

enum { GS_NONE, GS_HOST, GS_DEVICE, GS_DEVICE_0 }; /* grad scale: none, host, device, device 0 */
enum { FI_NONE, FI_ZERO, FI_SET, FI_NAN };    /* found_inf: absent, 0, 1, NaN */
static const float HOST_GS = (float)(1.0 / 3000.0), DEV_GS = 1.0f / 768.0f;

/* Builds the scalars, runs call(desc grad_scale, scalars), checks against ref(hosts, gs) or,
 * for a skipped step, against the bytes before the call. */
template <class Call, class Ref>
static void run_case(const char *what, opt_list &L, int gs_mode, int fi_mode, Call call, Ref ref) {
    dev_buf gs_buf(4), fi_buf(4);
    bool dev_gs = gs_mode == GS_DEVICE || gs_mode == GS_DEVICE_0;
    set_scalar(gs_buf, gs_mode == GS_DEVICE ? DEV_GS : 0.0f); /* device 0: used as it is */
    set_scalar(fi_buf, fi_mode == FI_SET ? 1.0f : fi_mode == FI_NAN ? NAN : 0.0f);
    amp_step_scalars sc = {dev_gs ? gs_buf.dev<float>() : nullptr,
                           fi_mode == FI_NONE ? nullptr : fi_buf.dev<float>()};
    /* the device scale replaces the host's: give the host a different one */
    float desc_gs = gs_mode == GS_HOST ? HOST_GS : dev_gs ? 5.0f : 0.0f;
    float gs = gs_mode == GS_HOST     ? HOST_GS
               : gs_mode == GS_DEVICE ? DEV_GS
               : gs_mode == GS_DEVICE_0 ? 0.0f
                                        : 1.0f;
    bool skipped = fi_mode == FI_SET || fi_mode == FI_NAN;
    std::vector<host_t> want = L.host();
    std::vector<int64_t> steps_want;
    if (L.stp) /* each non-empty tensor's count advances, unless the step is skipped */
        for (size_t i = 0; i < L.numel.size(); i++)
            steps_want.push_back(L.step_of(i) - (skipped || L.numel[i] == 0));
    if (!skipped) ref(want, gs);
    CHECK_OK(call(desc_gs, gs_mode == GS_NONE && fi_mode == FI_NONE ? nullptr : &sc));
    CHECK(dev_sync());
    std::vector<host_t> got = L.download();
    CHECK_MSG(same_host(what, got, want), "%s: gs %d found_inf %d", what, gs_mode, fi_mode);
    if (L.stp) {
        L.stp->download();
        CHECK_MSG(memcmp(L.stp->host.data(), steps_want.data(), L.stp->nbytes) == 0,
                  "%s: step counts", what);
    }
    CHECK_MSG(L.guards(), "%s: guard bytes", what);
    CHECK(get_scalar(fi_buf) == (fi_mode == FI_SET ? 1.0f : 0.0f) || fi_mode == FI_NAN);
}

static const amp_sgd_desc sgd_cfgs[] = {
    /* lr, momentum, dampening, wd, nesterov, first_step */
    {0.1f, 0.0f, 0.0f, 0.0f, false, false, NULL, AMP_F32, 0.0f},
    {0.05f, 0.9f, 0.0f, 0.01f, false, true, NULL, AMP_F32, 0.0f},
    {0.05f, 0.9f, 0.1f, 0.01f, false, false, NULL, AMP_F32, 0.0f},
    {0.02f, 0.8f, 0.0f, 0.001f, true, false, NULL, AMP_F32, 0.0f},
};
static const amp_adam_desc adam_cfgs[] = {
    /* lr, beta1, beta2, eps, wd, decoupled, step */
    {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, false, 1, NULL, AMP_F32, 0.0f},
    {1e-2f, 0.9f, 0.99f, 1e-6f, 0.01f, true, 7, NULL, AMP_F32, 0.0f},
    {5e-2f, 0.3f, 0.95f, 1e-8f, 0.0f, false, 3, NULL, AMP_F32, 0.0f}, /* lerp's other branch */
};
static const amp_lamb_desc lamb_cfgs[] = {
    /* lr, beta1, beta2, eps, wd, decoupled, bias_corr, grad_avg, adapt_all, max_norm, step */
    {1e-2f, 0.9f, 0.999f, 1e-6f, 0.01f, true, true, true, false, 1.0f, 1, 0.0f},
    {2e-2f, 0.8f, 0.99f, 1e-6f, 0.0f, true, true, true, true, 50.0f, 3, 0.0f},
    {5e-3f, 0.9f, 0.999f, 1e-6f, 0.0f, true, true, true, false, 0.0f, 2, 0.0f},
    {1e-2f, 0.85f, 0.995f, 1e-4f, 0.1f, false, false, false, false, 0.0f, 5, 0.0f},
};

static void sgd_case(const char *what, opt_list &L, const amp_sgd_desc &cfg, int gs_mode,
                     int fi_mode) {
    run_case(
            what, L, gs_mode, fi_mode,
            [&](float dgs, const amp_step_scalars *sc) {
                amp_sgd_desc d = cfg;
                d.grad_scale = dgs;
                return amp_cuda_sgd_multi(amp_cuda_device(), &d, &L.t, sc);
            },
            [&](std::vector<host_t> &w, float gs) { ref_sgd(L, w, cfg, gs); });
}

static void adam_case(const char *what, opt_list &L, const amp_adam_desc &cfg, int gs_mode,
                      int fi_mode) {
    run_case(
            what, L, gs_mode, fi_mode,
            [&](float dgs, const amp_step_scalars *sc) {
                amp_adam_desc d = cfg;
                d.grad_scale = dgs;
                return amp_cuda_adam_multi(amp_cuda_device(), &d, &L.t, sc);
            },
            [&](std::vector<host_t> &w, float gs) { ref_adam(L, w, cfg, gs); });
}

static void lamb_case(const char *what, opt_list &L, const amp_lamb_desc &cfg, int gs_mode,
                      int fi_mode) {
    run_case(
            what, L, gs_mode, fi_mode,
            [&](float dgs, const amp_step_scalars *sc) {
                amp_lamb_desc d = cfg;
                d.grad_scale = dgs;
                return amp_cuda_lamb_multi(amp_cuda_device(), &d, &L.t, sc);
            },
            [&](std::vector<host_t> &w, float gs) { ref_lamb(L, w, cfg, gs); });
}

/* An empty tensor first, last and in between, and one of two chunks. */
static const std::vector<int64_t> mixed = {0, 1, 70000, 0, 513, 2048, 3, 0};

/* 120 tensors of 1..300 elements, every 17th empty: two to four launches at every depth. */
static std::vector<int64_t> many_small(void) {
    std::vector<int64_t> ns;
    for (int i = 0; i < 120; i++) ns.push_back(i % 17 == 5 ? 0 : (i * 37) % 300 + 1);
    return ns;
}

struct storage {
    mode md;
    amp_dtype h_dt;
};
static const storage storages[] = {
    {M_F32, AMP_F16}, {M_O2, AMP_F16}, {M_O2, AMP_BF16}, {M_O3, AMP_F16}, {M_O3, AMP_BF16}};

/* Every gradient dtype x storage x configuration on the mixed list, with the grad scale and a
 * zero found_inf cycling through their modes. */
static void test_matrix(void) {
    int k = 0;
    for (amp_dtype g_dt : float_dts)
        for (const storage &st : storages) {
            char what[128];
            for (const amp_sgd_desc &cfg : sgd_cfgs) {
                opt_list L(mixed, g_dt, st.md, st.h_dt, 2.0);
                snprintf(what, sizeof what, "sgd %s %s/%s m=%g", amp_dtype_name(g_dt),
                         mode_name[st.md], amp_dtype_name(st.h_dt), (double)cfg.momentum);
                sgd_case(what, L, cfg, k % 4, k % 2 ? FI_ZERO : FI_NONE), k++;
            }
            for (const amp_adam_desc &cfg : adam_cfgs) {
                opt_list L(mixed, g_dt, st.md, st.h_dt, 2.0);
                snprintf(what, sizeof what, "adam %s %s/%s wd=%g decoupled=%d",
                         amp_dtype_name(g_dt), mode_name[st.md], amp_dtype_name(st.h_dt),
                         (double)cfg.weight_decay, (int)cfg.decoupled);
                adam_case(what, L, cfg, k % 4, k % 2 ? FI_ZERO : FI_NONE), k++;
            }
            for (const amp_lamb_desc &cfg : lamb_cfgs) {
                opt_list L(mixed, g_dt, st.md, st.h_dt, 2.0);
                snprintf(what, sizeof what, "lamb %s %s/%s wd=%g clip=%g adapt_all=%d",
                         amp_dtype_name(g_dt), mode_name[st.md], amp_dtype_name(st.h_dt),
                         (double)cfg.weight_decay, (double)cfg.max_grad_norm,
                         (int)cfg.adapt_all);
                lamb_case(what, L, cfg, k % 4, k % 2 ? FI_ZERO : FI_NONE), k++;
            }
        }
}

/* 120 tensors at every depth: SGD 2 (plain), 3 (momentum, or a copy), 4 (momentum + copy);
 * Adam 4 and 5 (copy); LAMB stage 1 at 4, stage 2 at 3 and 4. */
static void test_many_tensors(void) {
    std::vector<int64_t> ns = many_small();
    struct row {
        amp_dtype g_dt;
        storage st;
    } rows[] = {{AMP_F32, {M_F32, AMP_F16}}, {AMP_F16, {M_O2, AMP_F16}},
                {AMP_BF16, {M_O2, AMP_BF16}}, {AMP_F16, {M_O3, AMP_F16}}};
    for (const row &r : rows) {
        char what[96];
        snprintf(what, sizeof what, "120 tensors %s %s", amp_dtype_name(r.g_dt),
                 mode_name[r.st.md]);
        for (const amp_sgd_desc &cfg : {sgd_cfgs[0], sgd_cfgs[2]}) {
            opt_list L(ns, r.g_dt, r.st.md, r.st.h_dt, 1.0);
            sgd_case(what, L, cfg, GS_HOST, FI_ZERO);
        }
        opt_list La(ns, r.g_dt, r.st.md, r.st.h_dt, 1.0);
        adam_case(what, La, adam_cfgs[1], GS_DEVICE, FI_NONE);
        opt_list Ll(ns, r.g_dt, r.st.md, r.st.h_dt, 1.0);
        lamb_case(what, Ll, lamb_cfgs[0], GS_DEVICE, FI_ZERO);
    }
}

/* found_inf 1 or NaN when the kernels run: not one byte changes, for every optimizer and
 * storage (LAMB's norm pass and norm kernel included). */
static void test_skipped(void) {
    for (const storage &st : storages)
        for (int fi : {FI_SET, FI_NAN}) {
            char what[64];
            snprintf(what, sizeof what, "skipped %s/%s", mode_name[st.md],
                     amp_dtype_name(st.h_dt));
            opt_list L(mixed, AMP_F16, st.md, st.h_dt, 1.0);
            sgd_case(what, L, sgd_cfgs[2], GS_DEVICE, fi);
            adam_case(what, L, adam_cfgs[0], GS_HOST, fi);
            lamb_case(what, L, lamb_cfgs[0], GS_DEVICE, fi);
            lamb_case(what, L, lamb_cfgs[1], GS_NONE, fi);
        }
}

/* Device step counts: each tensor's own t (SGD's first step, Adam's and LAMB's bias
 * corrections), the descriptor's step and first_step unused (0 and a wrong value here), every
 * non-empty tensor's count advanced after its update, empty tensors' counts (1000) untouched,
 * all counts kept by a skipped step. The counts carry over from one call to the next. */
static void test_steps(void) {
    const std::vector<int64_t> init = {1000, 0, 3, 1000, 1, 0, 7, 1000};
    for (const storage &st : {storages[0], storages[1], storages[4]})
        for (int fi : {FI_ZERO, FI_SET, FI_NONE}) {
            char what[64];
            snprintf(what, sizeof what, "steps %s/%s found_inf %d", mode_name[st.md],
                     amp_dtype_name(st.h_dt), fi);
            opt_list L(mixed, AMP_BF16, st.md, st.h_dt, 1.0);
            L.use_steps(init);
            amp_sgd_desc sd = sgd_cfgs[2];
            sd.first_step = true;
            sgd_case(what, L, sd, GS_HOST, fi);
            amp_adam_desc ad = adam_cfgs[1];
            ad.step = 0;
            adam_case(what, L, ad, GS_DEVICE, fi);
            for (const amp_lamb_desc &cfg : {lamb_cfgs[0], lamb_cfgs[3]}) {
                amp_lamb_desc ld = cfg;
                ld.step = 0;
                lamb_case(what, L, ld, GS_NONE, fi);
            }
        }
    /* 120 tensors: counts indexed across several launches */
    std::vector<int64_t> ns = many_small(), init120;
    for (size_t i = 0; i < ns.size(); i++) init120.push_back((int64_t)(i % 5));
    opt_list L(ns, AMP_F16, M_O2, AMP_F16, 1.0);
    L.use_steps(init120);
    amp_adam_desc ad = adam_cfgs[0];
    ad.step = 0;
    adam_case("steps adam 120 tensors", L, ad, GS_HOST, FI_ZERO);
    amp_sgd_desc sd = sgd_cfgs[3];
    sgd_case("steps sgd 120 tensors", L, sd, GS_HOST, FI_NONE);
    lamb_case("steps lamb 120 tensors", L, lamb_cfgs[1], GS_DEVICE, FI_ZERO);
}

/* One tensor of two chunks, a list of one (the library steps one tensor no other way): every
 * storage and gradient dtype, O2 and O3 through the list's half pointers. */
static void test_one_tensor(void) {
    for (const storage &st : storages)
        for (amp_dtype g_dt : float_dts) {
            char what[64];
            snprintf(what, sizeof what, "one tensor %s %s/%s", amp_dtype_name(g_dt),
                     mode_name[st.md], amp_dtype_name(st.h_dt));
            opt_list L({70000}, g_dt, st.md, st.h_dt, 2.0);
            for (const amp_sgd_desc &cfg : {sgd_cfgs[0], sgd_cfgs[3]})
                sgd_case(what, L, cfg, GS_HOST, FI_NONE);
            adam_case(what, L, adam_cfgs[1], GS_NONE, FI_NONE);
        }
}

/* ---- independent references ---- */

static int64_t ulp_dist(float a, float b) {
    int32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    int64_t X = x < 0 ? (int64_t)INT32_MIN - x : x, Y = y < 0 ? (int64_t)INT32_MIN - y : y;
    return X > Y ? X - Y : Y - X;
}

/* The sub-list of the tensors in idx (their own addresses), for grouped calls. */
struct sub_list {
    std::vector<int64_t> numel;
    std::vector<void *> g, h;
    std::vector<float *> p, s1, s2;
    amp_opt_tensors t;
    sub_list(const opt_list &L, const std::vector<int> &idx) {
        for (int i : idx) {
            numel.push_back(L.numel[i]);
            g.push_back(L.gp[i]), h.push_back(L.hp[i]), p.push_back(L.pp[i]);
            s1.push_back(L.s1p[i]), s2.push_back(L.s2p[i]);
        }
        t = L.t;
        t.n = (int64_t)idx.size();
        t.numel = numel.data();
        t.grad = g.data();
        t.param = L.t.param ? p.data() : nullptr;
        t.half = L.t.half ? h.data() : nullptr;
        t.state1 = s1.data();
        t.state2 = s2.data();
    }
};

/* torch.optim's five steps (tests/ref/optim_ref.h): each step, the parameters with a gradient
 * are updated in groups of equal first_step (SGD) or step count (Adam), as torch's
 * per-parameter state implies; f32 parameters alone and with an f16 copy. */
static void test_torch_refs(void) {
    int64_t worst = 0;
    for (const optim_ref_case &rc : optim_ref_cases)
        for (mode md : {M_F32, M_O2}) {
            opt_list L({5, 3, 2}, AMP_F32, md, AMP_F16, 1.0);
            for (int i = 0, off = 0; i < OPTIM_REF_N_PARAMS; off += optim_ref_param_numel[i++])
                for (int j = 0; j < optim_ref_param_numel[i]; j++) {
                    L.p[i].h<float>()[j] = optim_ref_init[off + j];
                    L.s1[i].h<float>()[j] = L.s2[i].h<float>()[j] = 0.0f;
                }
            int64_t steps[OPTIM_REF_N_PARAMS] = {0};
            bool exact = rc.kind == OPTIM_REF_SGD || strstr(rc.name, "_ieee_sqrt");
            /* O2 runs one call per step over the whole list, with device step counts and the
             * parameters without a gradient at numel 0; f32 groups the calls by step count */
            bool dev_steps = md == M_O2;
            if (dev_steps) L.use_steps({0, 0, 0});
            for (int s = 0; s < OPTIM_REF_N_STEPS; s++) {
                for (int i = 0, off = 0; i < OPTIM_REF_N_PARAMS; off += optim_ref_param_numel[i++])
                    for (int j = 0; j < optim_ref_param_numel[i]; j++)
                        L.g[i].h<float>()[j] = optim_ref_grad[s][off + j];
                L.upload();
                if (dev_steps) {
                    int64_t ns[OPTIM_REF_N_PARAMS];
                    for (int i = 0; i < OPTIM_REF_N_PARAMS; i++)
                        ns[i] = optim_ref_grad_present[s][i] ? optim_ref_param_numel[i] : 0;
                    amp_opt_tensors t = L.t;
                    t.numel = ns;
                    if (rc.kind == OPTIM_REF_SGD) {
                        amp_sgd_desc d = {rc.lr, rc.momentum, rc.dampening, rc.weight_decay,
                                          (bool)rc.nesterov, false, NULL, AMP_F32, 0.0f};
                        CHECK_OK(amp_cuda_sgd_multi(amp_cuda_device(), &d, &t, NULL));
                    } else {
                        amp_adam_desc d = {rc.lr, rc.beta1, rc.beta2, rc.eps, rc.weight_decay,
                                           rc.kind == OPTIM_REF_ADAMW, 0, NULL, AMP_F32, 0.0f};
                        CHECK_OK(amp_cuda_adam_multi(amp_cuda_device(), &d, &t, NULL));
                    }
                }
                for (int64_t key = 0; key <= OPTIM_REF_N_STEPS && !dev_steps; key++) {
                    std::vector<int> idx;
                    for (int i = 0; i < OPTIM_REF_N_PARAMS; i++)
                        if (optim_ref_grad_present[s][i] && steps[i] == key) idx.push_back(i);
                    if (idx.empty()) continue;
                    sub_list sl(L, idx);
                    if (rc.kind == OPTIM_REF_SGD) {
                        amp_sgd_desc d = {rc.lr, rc.momentum, rc.dampening, rc.weight_decay,
                                          (bool)rc.nesterov, key == 0, NULL, AMP_F32, 0.0f};
                        CHECK_OK(amp_cuda_sgd_multi(amp_cuda_device(), &d, &sl.t, NULL));
                    } else {
                        amp_adam_desc d = {rc.lr, rc.beta1, rc.beta2, rc.eps, rc.weight_decay,
                                           rc.kind == OPTIM_REF_ADAMW, key + 1, NULL, AMP_F32,
                                           0.0f};
                        CHECK_OK(amp_cuda_adam_multi(amp_cuda_device(), &d, &sl.t, NULL));
                    }
                }
                for (int i = 0; i < OPTIM_REF_N_PARAMS; i++)
                    steps[i] += optim_ref_grad_present[s][i];
                CHECK(dev_sync());
                std::vector<host_t> got = L.download();
                if (dev_steps) {
                    L.stp->download();
                    for (int i = 0; i < OPTIM_REF_N_PARAMS; i++)
                        CHECK(L.stp->h<int64_t>()[i] == steps[i]);
                }
                for (int i = 0, off = 0; i < OPTIM_REF_N_PARAMS; off += optim_ref_param_numel[i++])
                    for (int j = 0; j < optim_ref_param_numel[i]; j++) {
                        float p = ((const float *)got[i].p.data())[j];
                        float a = ((const float *)got[i].s1.data())[j];
                        float b = ((const float *)got[i].s2.data())[j];
                        /* state torch does not hold is 0 there, and untouched (0) here */
                        int64_t d = std::max({ulp_dist(p, rc.param[s][off + j]),
                                              ulp_dist(a, rc.state_a[s][off + j]),
                                              ulp_dist(b, rc.state_b[s][off + j])});
                        worst = std::max(worst, exact ? 0 : d);
                        CHECK_MSG(d <= (exact ? 0 : 2), "%s %s step %d param %d[%d]: %lld ulp",
                                  rc.name, mode_name[md], s, i, j, (long long)d);
                        if (md == M_O2 && steps[i] > 0) /* the copy of an updated parameter */
                            CHECK(nv_load(got[i].h.data(), AMP_F16, j) == nv_round(AMP_F16, p));
                    }
            }
            CHECK(L.guards());
        }
    printf("torch references: plain Adam within %lld ulp\n", (long long)worst);
}

/* LAMB against the float64 reference of the paper with Apex's conventions, four steps of every
 * case; and bit for bit against the host model at each step. */
static void test_lamb_ref(void) {
    double worst = 0.0;
    for (const lamb_ref_case &rc : lamb_ref_cases) {
        std::vector<int64_t> ns(lamb_ref_numel, lamb_ref_numel + LAMB_REF_N_TENSORS);
        opt_list L(ns, AMP_F32, M_F32, AMP_F16, 1.0);
        for (int i = 0, off = 0; i < LAMB_REF_N_TENSORS; off += lamb_ref_numel[i++])
            for (int j = 0; j < lamb_ref_numel[i]; j++) {
                L.p[i].h<float>()[j] = lamb_ref_init[off + j];
                L.s1[i].h<float>()[j] = L.s2[i].h<float>()[j] = 0.0f;
            }
        for (int step = 1; step <= LAMB_REF_N_STEPS; step++) {
            for (int i = 0, off = 0; i < LAMB_REF_N_TENSORS; off += lamb_ref_numel[i++])
                for (int j = 0; j < lamb_ref_numel[i]; j++)
                    L.g[i].h<float>()[j] = lamb_ref_grad[step - 1][off + j];
            L.upload();
            amp_lamb_desc d = {rc.lr, rc.beta1, rc.beta2, rc.eps, rc.weight_decay,
                               (bool)rc.decoupled, (bool)rc.bias_correction,
                               (bool)rc.grad_averaging, (bool)rc.adapt_all, rc.max_grad_norm,
                               step, 0.0f};
            std::vector<host_t> want = L.host();
            ref_lamb(L, want, d, 1.0f);
            CHECK_OK(amp_cuda_lamb_multi(amp_cuda_device(), &d, &L.t, NULL));
            CHECK(dev_sync());
            std::vector<host_t> got = L.download();
            CHECK_MSG(same_host(rc.name, got, want), "%s step %d: model bits", rc.name, step);
            for (int i = 0, off = 0; i < LAMB_REF_N_TENSORS; off += lamb_ref_numel[i++]) {
                const float *q[] = {(const float *)got[i].p.data(),
                                    (const float *)got[i].s1.data(),
                                    (const float *)got[i].s2.data()};
                const double *r[] = {rc.param[step - 1] + off, rc.exp_avg[step - 1] + off,
                                     rc.exp_avg_sq[step - 1] + off};
                for (int k = 0; k < 3; k++) {
                    double big = 0.0, err = 0.0;
                    for (int j = 0; j < lamb_ref_numel[i]; j++)
                        big = std::max(big, std::fabs(r[k][j]));
                    for (int j = 0; j < lamb_ref_numel[i]; j++)
                        err = std::max(err, std::fabs((double)q[k][j] - r[k][j]));
                    err = big > 0.0 ? err / big : err;
                    worst = std::max(worst, err);
                    CHECK_MSG(err <= 1e-5, "%s step %d tensor %d quantity %d: %.3g of scale",
                              rc.name, step, i, k, err);
                }
                if (i == LAMB_REF_ZERO_GRAD && rc.weight_decay == 0.0f)
                    for (int j = 0; j < lamb_ref_numel[i]; j++)
                        CHECK(q[0][j] == lamb_ref_init[off + j] && q[1][j] == 0.0f &&
                              q[2][j] == 0.0f);
            }
        }
        CHECK(L.guards());
    }
    CHECK(worst > 0.0);
    printf("lamb reference: largest error %.3g of scale (tolerance 1e-5)\n", worst);
}

/* ---- errors: each before any launch ---- */

static void test_errors(void) {
    opt_list L({4, 0, 70000}, AMP_F16, M_O2, AMP_F16, 1.0);
    std::vector<host_t> before = L.host();
    amp_sgd_desc sd = sgd_cfgs[2];
    amp_adam_desc ad = adam_cfgs[0];
    amp_lamb_desc ld = lamb_cfgs[0];
    amp_opt_tensors t = L.t;
    CHECK_FAILS(amp_cuda_sgd_multi(amp_cuda_device(), NULL, &t, NULL), AMP_ERR_INVALID_ARG,
                "amp_cuda_sgd_multi: argument 'd'");
    CHECK_FAILS(amp_cuda_adam_multi(amp_cuda_device(), &ad, NULL, NULL), AMP_ERR_INVALID_ARG,
                "argument 't'");
    t.grad_dtype = AMP_I32;
    CHECK_FAILS(amp_cuda_lamb_multi(amp_cuda_device(), &ld, &t, NULL), AMP_ERR_DTYPE,
                "amp_cuda_lamb_multi: gradient dtype i32");
    t = L.t, t.half_dtype = AMP_F32;
    CHECK_FAILS(amp_cuda_sgd_multi(amp_cuda_device(), &sd, &t, NULL), AMP_ERR_DTYPE,
                "half_dtype f32");
    t = L.t;
    for (float bad : {-1.0f, NAN, INFINITY}) {
        sd.grad_scale = bad;
        CHECK_FAILS(amp_cuda_sgd_multi(amp_cuda_device(), &sd, &t, NULL), AMP_ERR_INVALID_ARG,
                    "grad_scale");
    }
    sd.grad_scale = 0.0f;
    t.n = -1;
    CHECK_FAILS(amp_cuda_adam_multi(amp_cuda_device(), &ad, &t, NULL), AMP_ERR_INVALID_ARG,
                "n = -1");
    t = L.t, t.param = nullptr, t.half = nullptr;
    CHECK_FAILS(amp_cuda_lamb_multi(amp_cuda_device(), &ld, &t, NULL), AMP_ERR_INVALID_ARG,
                "no parameter");
    t = L.t, t.grad = nullptr;
    CHECK_FAILS(amp_cuda_sgd_multi(amp_cuda_device(), &sd, &t, NULL), AMP_ERR_INVALID_ARG,
                "grad list is NULL");
    t = L.t, t.state1 = nullptr;
    CHECK_FAILS(amp_cuda_sgd_multi(amp_cuda_device(), &sd, &t, NULL), AMP_ERR_INVALID_ARG,
                "state1 list is NULL");
    CHECK_FAILS(amp_cuda_adam_multi(amp_cuda_device(), &ad, &t, NULL), AMP_ERR_INVALID_ARG,
                "state1 list is NULL");
    t = L.t, t.state2 = nullptr;
    CHECK_FAILS(amp_cuda_lamb_multi(amp_cuda_device(), &ld, &t, NULL), AMP_ERR_INVALID_ARG,
                "state2 list is NULL");
    t = L.t, t.numel = nullptr;
    CHECK_FAILS(amp_cuda_adam_multi(amp_cuda_device(), &ad, &t, NULL), AMP_ERR_INVALID_ARG,
                "'numel'");
    int64_t bad_numel[] = {4, -3, 70000};
    t = L.t, t.numel = bad_numel;
    CHECK_FAILS(amp_cuda_sgd_multi(amp_cuda_device(), &sd, &t, NULL), AMP_ERR_INVALID_ARG,
                "numel[1] = -3 < 0");
    int64_t huge[] = {4, 0, ((int64_t)1 << 41) + 1};
    t = L.t, t.numel = huge; /* refused before the planner, the workspace or a launch */
    CHECK_FAILS(amp_cuda_lamb_multi(amp_cuda_device(), &ld, &t, NULL), AMP_ERR_INVALID_ARG,
                "chunks of 65536");
    /* a NULL address in the last tensor: nothing of the first is written */
    std::vector<void *> g = L.gp;
    g[2] = nullptr;
    t = L.t, t.grad = g.data();
    CHECK_FAILS(amp_cuda_adam_multi(amp_cuda_device(), &ad, &t, NULL), AMP_ERR_INVALID_ARG,
                "grad[2] is NULL");
    std::vector<float *> s2 = L.s2p;
    s2[0] = nullptr;
    t = L.t, t.state2 = s2.data();
    CHECK_FAILS(amp_cuda_lamb_multi(amp_cuda_device(), &ld, &t, NULL), AMP_ERR_INVALID_ARG,
                "state2[0] is NULL");
    ad.step = 0, ld.step = 0;
    CHECK_FAILS(amp_cuda_adam_multi(amp_cuda_device(), &ad, &L.t, NULL), AMP_ERR_INVALID_ARG,
                "step = 0");
    CHECK_FAILS(amp_cuda_lamb_multi(amp_cuda_device(), &ld, &L.t, NULL), AMP_ERR_INVALID_ARG,
                "step = 0, want >= 1");
    ad.step = 1, ld.step = 1;
    ld.max_grad_norm = NAN;
    CHECK_FAILS(amp_cuda_lamb_multi(amp_cuda_device(), &ld, &L.t, NULL), AMP_ERR_INVALID_ARG,
                "max_grad_norm is NaN");
    ld.max_grad_norm = 1.0f;
    /* a list's half copies are t->half; the descriptor's per-tensor pointer is refused */
    sd.half_copy = L.hp[0], ad.half_copy = L.hp[0];
    CHECK_FAILS(amp_cuda_sgd_multi(amp_cuda_device(), &sd, &L.t, NULL), AMP_ERR_INVALID_ARG,
                "half_copy is set");
    CHECK_FAILS(amp_cuda_adam_multi(amp_cuda_device(), &ad, &L.t, NULL), AMP_ERR_INVALID_ARG,
                "half_copy is set");
    sd.half_copy = NULL, ad.half_copy = NULL;
    /* a list of one tensor (the library steps one tensor no other way): its own arrays checked */
    amp_opt_tensors one = L.t;
    one.n = 1;
    int64_t neg[] = {-2};
    t = one, t.numel = neg;
    CHECK_FAILS(amp_cuda_sgd_multi(amp_cuda_device(), &sd, &t, NULL), AMP_ERR_INVALID_ARG,
                "amp_cuda_sgd_multi: numel[0] = -2 < 0");
    t = one, t.param = nullptr, t.half = nullptr;
    CHECK_FAILS(amp_cuda_adam_multi(amp_cuda_device(), &ad, &t, NULL), AMP_ERR_INVALID_ARG,
                "amp_cuda_adam_multi: no parameter");
    void *no_grad[] = {nullptr};
    t = one, t.grad = no_grad;
    CHECK_FAILS(amp_cuda_adam_multi(amp_cuda_device(), &ad, &t, NULL), AMP_ERR_INVALID_ARG,
                "grad[0] is NULL");
    float *no_buf[] = {nullptr};
    t = one, t.state1 = no_buf; /* sd has momentum 0.9 */
    CHECK_FAILS(amp_cuda_sgd_multi(amp_cuda_device(), &sd, &t, NULL), AMP_ERR_INVALID_ARG,
                "state1[0] is NULL");
    t = one, t.grad_dtype = AMP_I32;
    CHECK_FAILS(amp_cuda_adam_multi(amp_cuda_device(), &ad, &t, NULL), AMP_ERR_DTYPE,
                "gradient dtype i32");
    CHECK(dev_sync());
    CHECK(same_host("after the errors", L.download(), before));
    /* nothing to do: n == 0 (the CPU backend's checks still want a parameter list), or only
     * empty tensors with NULL addresses */
    amp_opt_tensors none = {};
    none.grad_dtype = AMP_F32;
    CHECK_FAILS(amp_cuda_sgd_multi(amp_cuda_device(), &sd, &none, NULL), AMP_ERR_INVALID_ARG,
                "no parameter");
    none.param = L.pp.data();
    CHECK_OK(amp_cuda_sgd_multi(amp_cuda_device(), &sd, &none, NULL));
    CHECK_OK(amp_cuda_adam_multi(amp_cuda_device(), &ad, &none, NULL));
    CHECK_OK(amp_cuda_lamb_multi(amp_cuda_device(), &ld, &none, NULL));
    int64_t zeros[] = {0, 0, 0};
    void *nulls[3] = {nullptr, nullptr, nullptr};
    float *fnulls[3] = {nullptr, nullptr, nullptr};
    amp_opt_tensors empty = {3, zeros, nulls, AMP_F16, fnulls, nulls, AMP_BF16, fnulls, fnulls,
                             nullptr};
    CHECK_OK(amp_cuda_sgd_multi(amp_cuda_device(), &sd, &empty, NULL));
    CHECK_OK(amp_cuda_adam_multi(amp_cuda_device(), &ad, &empty, NULL));
    CHECK_OK(amp_cuda_lamb_multi(amp_cuda_device(), &ld, &empty, NULL));
    CHECK(dev_sync());
}

int main(void) {
    test_errors();
    test_torch_refs();
    test_lamb_ref();
    test_one_tensor();
    test_steps();
    test_skipped();
    test_many_tensors();
    test_matrix();
    return test_summary("test_optim_cudacpu");
}
