/* Tensor lists on the device for the fused optimizers' test under cudacpu (test_optim_cudacpu.cpp):
 * per tensor a gradient, f32 parameters (not at O3), a half copy (O2) or half parameters (O3) and
 * two f32 state arrays, each a guarded dev_buf (ops_ref.h) with its host copy; the host copies
 * compared byte for byte. */
#ifndef TESTS_CUDACPU_OPT_LIST_H
#define TESTS_CUDACPU_OPT_LIST_H

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "ops_ref.h" /* library stubs, NVIDIA conversions, random data, scalars */

enum mode { M_F32, M_O2, M_O3 }; /* f32 params; + half copy; half params in place */

static float urand(double lo, double hi) { return (float)(lo + (hi - lo) * rnd_uniform()); }

/* Host copies of one tensor's buffers. */
struct host_t {
    std::vector<uint8_t> g, p, h, s1, s2;
};

/* A list of tensors on the device (empty tensors get NULL addresses) and its amp_opt_tensors. */
struct opt_list {
    std::vector<int64_t> numel;
    amp_dtype g_dt, h_dt;
    mode md;
    std::vector<dev_buf> g, p, h, s1, s2;
    std::vector<void *> gp, hp;
    std::vector<float *> pp, s1p, s2p;
    std::unique_ptr<dev_buf> stp; /* device step counts (amp_opt_tensors.steps), when used */
    amp_opt_tensors t;

    opt_list(const std::vector<int64_t> &ns, amp_dtype gd, mode m, amp_dtype hd, double gmax)
        : numel(ns), g_dt(gd), h_dt(hd), md(m) {
        size_t n = ns.size();
        for (auto *v : {&g, &p, &h, &s1, &s2}) v->reserve(n);
        for (size_t i = 0; i < n; i++) {
            int64_t k = ns[i];
            g.emplace_back((size_t)k * amp_dtype_size(gd));
            p.emplace_back(md == M_O3 ? 0 : (size_t)k * 4);
            h.emplace_back(md == M_F32 ? 0 : (size_t)k * 2);
            s1.emplace_back((size_t)k * 4);
            s2.emplace_back((size_t)k * 4);
            for (int64_t j = 0; j < k; j++) {
                nv_store(g[i].host.data(), gd, j, urand(-gmax, gmax));
                if (md != M_O3) p[i].h<float>()[j] = urand(-1, 1);
                if (md == M_O3) nv_store(h[i].host.data(), hd, j, urand(-1, 1));
                if (md == M_O2) h[i].h<uint16_t>()[j] = 0x5555; /* overwritten by the update */
                s1[i].h<float>()[j] = urand(-0.1, 0.1);
                s2[i].h<float>()[j] = urand(0, 0.01);
            }
            for (auto *v : {&g, &p, &h, &s1, &s2}) (*v)[i].upload();
            gp.push_back(k ? g[i].ptr : nullptr);
            pp.push_back(k && md != M_O3 ? p[i].dev<float>() : nullptr);
            hp.push_back(k && md != M_F32 ? h[i].ptr : nullptr);
            s1p.push_back(k ? s1[i].dev<float>() : nullptr);
            s2p.push_back(k ? s2[i].dev<float>() : nullptr);
        }
        t.n = (int64_t)n;
        t.numel = numel.data();
        t.grad = gp.data();
        t.grad_dtype = gd;
        t.param = md == M_O3 ? nullptr : pp.data();
        t.half = md == M_F32 ? nullptr : hp.data();
        t.half_dtype = hd;
        t.state1 = s1p.data();
        t.state2 = s2p.data();
        t.steps = nullptr;
    }
    /* Per-tensor step counts on the device, from here on. */
    void use_steps(const std::vector<int64_t> &init) {
        stp.reset(new dev_buf(init.size() * sizeof(int64_t)));
        memcpy(stp->host.data(), init.data(), stp->nbytes);
        stp->upload();
        t.steps = stp->dev<int64_t>();
    }
    /* Tensor i's step t for this update (0: the descriptor's). */
    int64_t step_of(size_t i) { return stp ? stp->h<int64_t>()[i] + 1 : 0; }
    std::vector<host_t> host() {
        std::vector<host_t> out(numel.size());
        for (size_t i = 0; i < numel.size(); i++)
            out[i] = {g[i].host, p[i].host, h[i].host, s1[i].host, s2[i].host};
        return out;
    }
    void upload() {
        for (size_t i = 0; i < numel.size(); i++)
            for (auto *v : {&g, &p, &h, &s1, &s2}) (*v)[i].upload();
    }
    std::vector<host_t> download() {
        for (size_t i = 0; i < numel.size(); i++)
            for (auto *v : {&g, &p, &h, &s1, &s2}) (*v)[i].download();
        return host();
    }
    bool guards() const {
        if (stp && !stp->guard_intact()) return false;
        for (size_t i = 0; i < numel.size(); i++)
            for (auto *v : {&g, &p, &h, &s1, &s2})
                if (!(*v)[i].guard_intact()) return false;
        return true;
    }
    float param(const host_t &x, int64_t j) const {
        return md == M_O3 ? nv_load(x.h.data(), h_dt, j) : ((const float *)x.p.data())[j];
    }
    void set_param(host_t &x, int64_t j, float v) const {
        if (md == M_O3) return nv_store(x.h.data(), h_dt, j, v);
        ((float *)x.p.data())[j] = v;
        if (md == M_O2) nv_store(x.h.data(), h_dt, j, v);
    }
};

/* Every buffer byte for byte; the first difference is printed. */
static bool same_host(const char *what, const std::vector<host_t> &got,
                      const std::vector<host_t> &want) {
    const char *names[] = {"grad", "param", "half", "state1", "state2"};
    for (size_t i = 0; i < got.size(); i++) {
        const std::vector<uint8_t> *a[] = {&got[i].g, &got[i].p, &got[i].h, &got[i].s1,
                                           &got[i].s2};
        const std::vector<uint8_t> *b[] = {&want[i].g, &want[i].p, &want[i].h, &want[i].s1,
                                           &want[i].s2};
        for (int k = 0; k < 5; k++) {
            if (*a[k] == *b[k]) continue;
            size_t at = 0;
            while (at < a[k]->size() && (*a[k])[at] == (*b[k])[at]) at++;
            fprintf(stderr, "%s: tensor %zu %s differs at byte %zu of %zu\n", what, i, names[k], at,
                    a[k]->size());
            return false;
        }
    }
    return true;
}

#endif
