/* Master weights (optim/masters.c) and the half copy of the CPU update kernels.
 *
 * The amp layer is emulated here: parameters are built f32, amp_optimizer_make_masters copies
 * them, then cast_like_amp swaps a parameter's storage for a half block (data, dtype, grad) the
 * way amp_initialize does, and the test writes the f32 master gradients the unscale pass would.
 * References are independent of the code under test's master path:
 *  - O2 (persistent): an f32-only optimizer over plain f32 copies of the parameters, stepped with
 *    the same f32 gradients; its parameters must equal the masters bit for bit, its state the
 *    state, and every half parameter must be core/half.h's rounding of its master;
 *  - O3 (no masters: the half parameters are updated in place from their half gradients, which
 *    the update unscales as it loads them): the same f32-only optimizer, its parameters reset
 *    before each step to the widened half values and its gradients the widened half gradients
 *    times the unscale factor, then rounded: one f32 update from the half value per step;
 *  - the kernels' half copy: the scalar core/half.h conversion of the updated f32 values, which
 *    themselves must not change when the copy is asked for. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "amp/optim.h"
#include "core/half.h"
#include "core/tensor_internal.h"
#include "kernels/cpu/cpu_backend.h"
#include "one_tensor.h"
#include "optim/optimizer_internal.h"
#include "test_util.h"

#define N_PARAMS 3
#define N_STEPS 6
#define BN_PARAM 1 /* stays f32, like batch norm under keep_batchnorm_fp32 */

static amp_ctx *g_ctx;
static const char *const g_names[N_PARAMS] = {"fc1.weight", "bn.weight", "fc2.weight"};
static const int g_ndim[N_PARAMS] = {2, 1, 4};
static const int64_t g_shape[N_PARAMS][4] = {{6, 7}, {5}, {3, 1, 1, 1367}};

/* Whether parameter i has a gradient on step s: param 2 none on its first step (its state and
 * Adam step lag), param 1 none on step 2, param 0 none on step 4. */
static bool grad_present(int s, int i) {
    return !((i == 2 && s == 0) || (i == 1 && s == 2) || (i == 0 && s == 4));
}

static uint16_t round_half(float v, amp_dtype dt) {
    return dt == AMP_F16 ? amp_f32_to_f16_bits(v) : amp_f32_to_bf16_bits(v);
}

static float widen_half(uint16_t h, amp_dtype dt) {
    return dt == AMP_F16 ? amp_f16_bits_to_f32(h) : amp_bf16_bits_to_f32(h);
}

/* Values over several binades, so that rounding to half drops bits. */
static float init_value(int i, int64_t k) {
    return (float)(sin(0.37 * (double)k + 1.3 * i) * ldexp(1.0, (int)(k % 11) - 5));
}

static float grad_value(int s, int i, int64_t k) {
    return (float)(cos(0.113 * (double)k + 0.7 * s + 2.1 * i) * 0.05 * (1 + (k % 3)));
}

static void make_params(amp_tensor *params[N_PARAMS]) {
    for (int i = 0; i < N_PARAMS; i++) {
        params[i] = NULL;
        CHECK_OK(amp_tensor_create(g_ctx, AMP_F32, g_ndim[i], g_shape[i], &params[i]));
        if (!params[i]) continue;
        float *p = params[i]->data;
        for (int64_t k = 0; k < params[i]->numel; k++) p[k] = init_value(i, k);
        CHECK_OK(amp_tensor_create(g_ctx, AMP_F32, g_ndim[i], g_shape[i], &params[i]->grad));
        params[i]->requires_grad = true;
    }
}

static void free_params(amp_tensor *params[N_PARAMS]) {
    for (int i = 0; i < N_PARAMS; i++) amp_tensor_free(params[i]);
}

/* What amp_initialize does to a parameter it casts: the data becomes a half block holding the
 * rounded values, the dtype follows, and the gradient becomes a half tensor. */
static void cast_like_amp(amp_tensor *t, amp_dtype dt) {
    uint16_t *half = NULL;
    CHECK_OK(t->backend->alloc(t->backend->dev, (size_t)t->numel * sizeof(uint16_t),
                               (void **)&half));
    if (!half) return;
    const float *f = t->data;
    for (int64_t k = 0; k < t->numel; k++) half[k] = round_half(f[k], dt);
    t->backend->free(t->backend->dev, t->data);
    t->data = half;
    t->dtype = dt;
    amp_tensor_free(t->grad);
    t->grad = NULL;
    CHECK_OK(amp_tensor_create(g_ctx, dt, t->ndim, t->shape, &t->grad));
}

static amp_status create_opt(int kind, amp_tensor *params[N_PARAMS], amp_optimizer **out) {
    switch (kind) {
    case 0:
        return amp_sgd_create_params(params, g_names, N_PARAMS,
                                     &(amp_sgd_opts){.lr = 0.1f, .momentum = 0.9f,
                                                     .dampening = 0.1f, .weight_decay = 1e-3f},
                                     out);
    case 1:
        return amp_sgd_create_params(
            params, g_names, N_PARAMS,
            &(amp_sgd_opts){.lr = 0.05f, .momentum = 0.9f, .nesterov = true}, out);
    case 2:
        return amp_adam_create_params(params, g_names, N_PARAMS,
                                      &(amp_adam_opts){.lr = 1e-2f, .weight_decay = 0.01f}, out);
    default:
        return amp_adam_create_params(
            params, g_names, N_PARAMS,
            &(amp_adam_opts){.lr = 1e-2f, .weight_decay = 0.05f, .decoupled = true}, out);
    }
}
static const char *const g_kind_names[4] = {"sgd", "sgd_nesterov", "adam", "adamw"};

/* Step s's gradients: f32 into the reference's .grad, the same values into the master
 * gradients (as the unscale pass writes them); absent ones leave grad_written false. */
static void write_grads(amp_optimizer *masters_opt, amp_tensor *mp[N_PARAMS],
                        amp_tensor *rp[N_PARAMS], int s) {
    for (int i = 0; i < N_PARAMS; i++) {
        float *mg = amp_optimizer_master_grad(masters_opt, i);
        float *rg = rp[i]->grad->data;
        bool present = grad_present(s, i);
        for (int64_t k = 0; k < rp[i]->numel; k++) {
            rg[k] = grad_value(s, i, k);
            /* an absent gradient's buffer holds stale values the step must not read */
            mg[k] = present ? rg[k] : 1e30f;
        }
        mp[i]->grad_written = rp[i]->grad_written = present;
    }
}

static bool same_bits(const void *a, const void *b, size_t nbytes) { return !memcmp(a, b, nbytes); }

/* Every state tensor of parameter i equal in both optimizers, with the same has_state. */
static bool same_state(amp_optimizer *a, amp_optimizer *b, int i) {
    if (amp_optimizer_has_state(a, i) != amp_optimizer_has_state(b, i)) return false;
    for (int j = 0; j < amp_optimizer_n_state(a); j++) {
        amp_tensor *sa = NULL, *sb = NULL;
        const char *name = amp_optimizer_state_name(a, j);
        CHECK_OK(amp_optimizer_state_tensor(a, i, name, &sa));
        CHECK_OK(amp_optimizer_state_tensor(b, i, name, &sb));
        if (!sa || !sb || !same_bits(sa->data, sb->data, amp_tensor_nbytes(sa))) return false;
    }
    if (amp_optimizer_kind(a) == AMP_OPTIM_ADAM) {
        int64_t ta = -1, tb = -2;
        CHECK_OK(amp_optimizer_state_step(a, i, &ta));
        CHECK_OK(amp_optimizer_state_step(b, i, &tb));
        if (ta != tb) return false;
    }
    return true;
}

/* Whether the half parameter holds exactly the rounding of `f32` (n values). */
static bool is_rounding_of(const amp_tensor *p, const float *f32) {
    const uint16_t *h = p->data;
    for (int64_t k = 0; k < p->numel; k++)
        if (h[k] != round_half(f32[k], p->dtype)) return false;
    return true;
}

/* ---- the kernels' half copy ---- */

/* Parameter values that exercise the rounding: ties to even, the f16 overflow threshold,
 * half subnormals, NaN (from a NaN gradient) and ordinary values. Gradient 0 and no weight
 * decay keep a value unchanged by the update (SGD: fmaf(0, -lr, p) = p; Adam from zero moments
 * adds -0), so the ties reach the rounding exactly. */
static void special_values(float *p, float *g, int64_t n) {
    static const float ties[] = {
        1.0f + 0x1p-11f,  1.0f + 3 * 0x1p-11f, /* f16 ties: down to even, up to even */
        1.0f + 0x1p-8f,   1.0f + 3 * 0x1p-8f,  /* bf16 ties */
        65519.0f,         65520.0f,            /* f16: largest finite after rounding, inf */
        3.0e-6f,          -2.0e-7f,            /* f16 subnormals */
        1.0e-40f,         -0.0f,               /* f32 subnormal, signed zero */
        INFINITY,         -3.4e38f,            /* inf; bf16 overflow to -inf */
    };
    const int n_ties = (int)(sizeof ties / sizeof ties[0]);
    for (int64_t k = 0; k < n; k++) {
        p[k] = (float)(sin(0.01 * (double)k) * ldexp(1.0, (int)(k % 9) - 3));
        g[k] = (float)(cos(0.0037 * (double)k) * 0.1);
        int64_t r = k % 97;
        if (r < n_ties) {
            p[k] = ties[r];
            g[k] = 0.0f;
        } else if (r == n_ties) {
            g[k] = NAN;
        }
    }
}

#define GUARD 8
#define GUARD_BITS 0xabcdu

/* One kernel call with and without the half copy: identical f32 results, the copy equal to the
 * scalar rounding of every updated value, the guard after it untouched. */
static void check_kernel_case(bool adam, int64_t n, amp_dtype half_dt, amp_dtype grad_dt) {
    float *buf = malloc((size_t)n * 7 * sizeof(float));
    uint16_t *half = malloc((size_t)(n + GUARD) * sizeof(uint16_t));
    uint16_t *ghalf = malloc((size_t)n * sizeof(uint16_t));
    CHECK(buf && half && ghalf);
    if (!buf || !half || !ghalf) goto done;
    float *p1 = buf, *p2 = buf + n, *g = buf + 2 * n, *a1 = buf + 3 * n, *a2 = buf + 4 * n;
    float *b1 = buf + 5 * n, *b2 = buf + 6 * n;
    special_values(p1, g, n);
    memcpy(p2, p1, (size_t)n * sizeof(float));
    for (int64_t k = 0; k < n; k++) {
        a1[k] = a2[k] = 0.0f;
        b1[k] = b2[k] = 0.0f;
        ghalf[k] = round_half(g[k], grad_dt == AMP_F32 ? AMP_F16 : grad_dt);
    }
    for (int64_t k = 0; k < n + GUARD; k++) half[k] = GUARD_BITS;
    const void *grad = grad_dt == AMP_F32 ? (const void *)g : (const void *)ghalf;
    if (adam) {
        amp_adam_desc d = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 1};
        CHECK_OK(one_tensor_adam(&d, n, p1, grad, grad_dt, a1, b1));
        d.half_copy = half;
        d.half_dtype = half_dt;
        CHECK_OK(one_tensor_adam(&d, n, p2, grad, grad_dt, a2, b2));
    } else {
        amp_sgd_desc d = {.lr = 0.1f, .momentum = 0.9f, .first_step = true};
        CHECK_OK(one_tensor_sgd(&d, n, p1, grad, grad_dt, a1));
        d.half_copy = half;
        d.half_dtype = half_dt;
        CHECK_OK(one_tensor_sgd(&d, n, p2, grad, grad_dt, a2));
    }
    size_t nb = (size_t)n * sizeof(float);
    CHECK_MSG(same_bits(p1, p2, nb) && same_bits(a1, a2, nb) && same_bits(b1, b2, nb),
              "%s n=%lld: the half copy changed the f32 update", adam ? "adam" : "sgd",
              (long long)n);
    int64_t bad = -1;
    for (int64_t k = 0; k < n && bad < 0; k++)
        if (half[k] != round_half(p2[k], half_dt)) bad = k;
    CHECK_MSG(bad < 0, "%s n=%lld %s: half[%lld] = 0x%04x, round(%.9g) = 0x%04x",
              adam ? "adam" : "sgd", (long long)n, amp_dtype_name(half_dt), (long long)bad,
              bad < 0 ? 0 : half[bad], bad < 0 ? 0.0 : (double)p2[bad],
              bad < 0 ? 0 : round_half(p2[bad], half_dt));
    bool guard_ok = true;
    for (int k = 0; k < GUARD; k++) guard_ok = guard_ok && half[n + k] == GUARD_BITS;
    CHECK_MSG(guard_ok, "n=%lld: the half copy wrote past its end", (long long)n);
done:
    free(buf);
    free(half);
    free(ghalf);
}

static void test_kernel_half_copy(void) {
    /* Tails around the 8-lane F16C loop and the 4096-element chunk; the last one runs threaded. */
    const int64_t sizes[] = {1, 7, 13, 97, 4095, 4097, 3 * AMP_CPU_PARALLEL_MIN + 13};
    const int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    int n_threads[2] = {1, 2};
#ifdef _OPENMP
    int saved_threads = omp_get_max_threads();
#endif
    for (int t = 0; t < 2; t++) {
#ifdef _OPENMP
        omp_set_num_threads(n_threads[t]);
#else
        (void)n_threads;
#endif
        for (int z = 0; z < n_sizes; z++)
            for (int h = 0; h < 2; h++)
                for (int adam = 0; adam < 2; adam++) {
                    amp_dtype hdt = h ? AMP_BF16 : AMP_F16;
                    check_kernel_case(adam, sizes[z], hdt, AMP_F32);
                    if (z == n_sizes - 1) check_kernel_case(adam, sizes[z], hdt, AMP_BF16);
                }
    }
#ifdef _OPENMP
    omp_set_num_threads(saved_threads);
#endif
    /* The copy's dtype must be a half type; an empty update with a copy is fine. */
    float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    uint32_t not_half = 0;
    amp_sgd_desc sd = {.lr = 0.1f, .half_copy = &not_half, .half_dtype = AMP_F32};
    CHECK_FAILS(one_tensor_sgd(&sd, 1, &p, &g, AMP_F32, NULL), AMP_ERR_DTYPE, "half_dtype f32");
    amp_adam_desc ad = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .step = 1,
                        .half_copy = &not_half, .half_dtype = AMP_I32};
    CHECK_FAILS(one_tensor_adam(&ad, 1, &p, &g, AMP_F32, &m, &v), AMP_ERR_DTYPE, "i32");
    CHECK(p == 1.0f && not_half == 0);
    sd.half_dtype = AMP_BF16;
    CHECK_OK(one_tensor_sgd(&sd, 0, NULL, NULL, AMP_F32, NULL));
}

/* ---- O2: persistent masters ---- */

static void test_o2(int kind, amp_dtype half_dt) {
    amp_tensor *mp[N_PARAMS], *rp[N_PARAMS];
    amp_optimizer *mo = NULL, *ro = NULL;
    make_params(mp);
    make_params(rp);
    CHECK_OK(create_opt(kind, mp, &mo));
    CHECK_OK(create_opt(kind, rp, &ro));
    if (!mo || !ro) goto done;
    CHECK(!amp_optimizer_has_masters(mo) && amp_optimizer_master(mo, 0) == NULL);
    CHECK(amp_optimizer_master_grad(mo, 0) == NULL);
    CHECK_OK(amp_optimizer_make_masters(mo));
    CHECK(amp_optimizer_has_masters(mo));
    for (int i = 0; i < N_PARAMS; i++)
        if (i != BN_PARAM) cast_like_amp(mp[i], half_dt);

    /* The masters keep the f32 values the model had before the cast, not their rounding. */
    for (int i = 0; i < N_PARAMS; i++) {
        amp_tensor *m = amp_optimizer_master(mo, i);
        float *mg = amp_optimizer_master_grad(mo, i);
        CHECK(m && m->dtype == AMP_F32 && m->numel == rp[i]->numel && amp_same_shape(m, rp[i]));
        CHECK(mg && ((uintptr_t)mg % 64) == 0 && ((uintptr_t)m->data % 64) == 0);
        if (!m || !mg) goto done;
        CHECK(same_bits(m->data, rp[i]->data, amp_tensor_nbytes(m)));
        CHECK(m->data != mp[i]->data);
        if (i != BN_PARAM) CHECK(is_rounding_of(mp[i], m->data));
    }
    CHECK(amp_optimizer_master(mo, N_PARAMS) == NULL && amp_optimizer_master(mo, -1) == NULL);
    CHECK(amp_optimizer_master_grad(mo, N_PARAMS) == NULL);

    for (int s = 0; s < N_STEPS; s++) {
        CHECK_OK(amp_zero_grad(mo));
        CHECK_OK(amp_zero_grad(ro));
        write_grads(mo, mp, rp, s);
        uint16_t before[4101];
        float master_before[4101];
        for (int i = 0; i < N_PARAMS; i++)
            if (!grad_present(s, i)) {
                memcpy(before, mp[i]->data, amp_tensor_nbytes(mp[i]));
                memcpy(master_before, amp_optimizer_master(mo, i)->data,
                       (size_t)mp[i]->numel * sizeof(float));
            }
        CHECK_OK(amp_optimizer_step(mo));
        CHECK_OK(amp_optimizer_step(ro));
        for (int i = 0; i < N_PARAMS; i++) {
            const float *master = amp_optimizer_master(mo, i)->data;
            size_t nb = (size_t)rp[i]->numel * sizeof(float);
            CHECK_MSG(same_bits(master, rp[i]->data, nb),
                      "%s %s step %d: master of %s differs from the f32 run", g_kind_names[kind],
                      amp_dtype_name(half_dt), s, g_names[i]);
            CHECK_MSG(same_state(mo, ro, i), "%s %s step %d: state of %s differs",
                      g_kind_names[kind], amp_dtype_name(half_dt), s, g_names[i]);
            if (i == BN_PARAM)
                CHECK_MSG(mp[i]->dtype == AMP_F32 && same_bits(mp[i]->data, master, nb),
                          "%s step %d: f32 parameter is not its master", g_kind_names[kind], s);
            else
                CHECK_MSG(is_rounding_of(mp[i], master),
                          "%s %s step %d: %s is not the rounding of its master",
                          g_kind_names[kind], amp_dtype_name(half_dt), s, g_names[i]);
            if (!grad_present(s, i)) {
                CHECK(same_bits(before, mp[i]->data, amp_tensor_nbytes(mp[i])));
                CHECK(same_bits(master_before, master, nb));
            }
        }
    }
    CHECK(amp_optimizer_step_count(mo) == N_STEPS);

    /* A checkpoint load writes masters, then rebuilds the model from them. */
    for (int i = 0; i < N_PARAMS; i++) {
        float *m = amp_optimizer_master(mo, i)->data;
        for (int64_t k = 0; k < mp[i]->numel; k++) m[k] = init_value(i + 5, k);
        memset(mp[i]->data, 0xff, amp_tensor_nbytes(mp[i]));
    }
    CHECK_OK(amp_optimizer_masters_to_params(mo));
    for (int i = 0; i < N_PARAMS; i++) {
        const float *m = amp_optimizer_master(mo, i)->data;
        if (i == BN_PARAM) CHECK(same_bits(mp[i]->data, m, amp_tensor_nbytes(mp[i])));
        else CHECK(is_rounding_of(mp[i], m));
    }
done:
    amp_optimizer_free(mo);
    amp_optimizer_free(ro);
    free_params(mp);
    free_params(rp);
}

/* ---- O3: no master weights, one f32 update from the half value ---- */

static void test_o3(int kind, amp_dtype half_dt) {
    amp_tensor *mp[N_PARAMS], *rp[N_PARAMS];
    amp_optimizer *mo = NULL, *ro = NULL;
    make_params(mp);
    make_params(rp);
    CHECK_OK(create_opt(kind, mp, &mo));
    CHECK_OK(create_opt(kind, rp, &ro));
    if (!mo || !ro) goto done;
    CHECK(!amp_optimizer_has_masters(mo) && amp_optimizer_master_grad(mo, 0) == NULL);
    CHECK_FAILS(amp_optimizer_masters_to_params(mo), AMP_ERR_STATE, "no master weights");
    for (int i = 0; i < N_PARAMS; i++)
        if (i != BN_PARAM) cast_like_amp(mp[i], half_dt);
    const float scale = 1024.0f, inv = 1.0f / 1024.0f; /* the loss scale, unscaled by the update */

    for (int s = 0; s < N_STEPS; s++) {
        CHECK_OK(amp_zero_grad(mo));
        CHECK_OK(amp_zero_grad(ro));
        amp_optim_inputs in = AMP_OPTIM_INPUTS_NONE;
        in.half_grad_scale = inv; /* the amp layer's input for O3's scaled half gradients */
        for (int i = 0; i < N_PARAMS; i++) {
            bool present = grad_present(s, i);
            float *rg = rp[i]->grad->data, *r = rp[i]->data;
            for (int64_t k = 0; k < rp[i]->numel; k++) {
                float g = grad_value(s, i, k);
                if (i == BN_PARAM) { /* an f32 gradient: read as is */
                    ((float *)mp[i]->grad->data)[k] = rg[k] = g;
                    continue;
                }
                uint16_t h = present ? round_half(g * scale, half_dt) : 0x7e00; /* stale: NaN */
                ((uint16_t *)mp[i]->grad->data)[k] = h;
                rg[k] = widen_half(h, half_dt) * inv;
                r[k] = widen_half(((const uint16_t *)mp[i]->data)[k], half_dt);
            }
            mp[i]->grad_written = rp[i]->grad_written = present;
        }
        uint16_t before[4101];
        for (int i = 0; i < N_PARAMS; i++)
            if (!grad_present(s, i) && i != BN_PARAM)
                memcpy(before, mp[i]->data, amp_tensor_nbytes(mp[i]));
        CHECK_OK(amp_optimizer_apply(mo, &in));
        CHECK_OK(amp_optimizer_step(ro));
        for (int i = 0; i < N_PARAMS; i++) {
            CHECK_MSG(same_state(mo, ro, i), "O3 %s step %d: state of %s differs",
                      g_kind_names[kind], s, g_names[i]);
            if (i == BN_PARAM)
                CHECK_MSG(same_bits(mp[i]->data, rp[i]->data, amp_tensor_nbytes(rp[i])),
                          "O3 %s step %d: f32 parameter differs", g_kind_names[kind], s);
            else
                CHECK_MSG(is_rounding_of(mp[i], rp[i]->data),
                          "O3 %s %s step %d: %s is not round(f32 update of its half value)",
                          g_kind_names[kind], amp_dtype_name(half_dt), s, g_names[i]);
            if (!grad_present(s, i) && i != BN_PARAM)
                CHECK(same_bits(before, mp[i]->data, amp_tensor_nbytes(mp[i])));
        }
    }
done:
    amp_optimizer_free(mo);
    amp_optimizer_free(ro);
    free_params(mp);
    free_params(rp);
}

/* ---- misuse ---- */

static void test_errors(void) {
    amp_tensor *p[N_PARAMS];
    amp_optimizer *opt = NULL;
    make_params(p);
    CHECK_OK(create_opt(0, p, &opt));
    if (!opt) goto done;

    /* Without masters there is nothing to rebuild, and an i32 parameter cannot be stepped. */
    CHECK_FAILS(amp_optimizer_masters_to_params(opt), AMP_ERR_STATE, "no master weights");
    p[0]->dtype = AMP_I32;
    p[0]->grad_written = true;
    CHECK_FAILS(amp_optimizer_step(opt), AMP_ERR_DTYPE, "'fc1.weight' is i32");
    p[0]->dtype = AMP_F32;
    cast_like_amp(p[0], AMP_F16);
    /* make_masters after the cast: refused, naming the parameter, the optimizer unchanged. */
    CHECK_FAILS(amp_optimizer_make_masters(opt), AMP_ERR_DTYPE, "'fc1.weight' is already f16");
    CHECK(!amp_optimizer_has_masters(opt) && amp_optimizer_master_grad(opt, 0) == NULL);
    amp_optimizer_free(opt);
    opt = NULL;
    free_params(p);

    make_params(p);
    CHECK_OK(create_opt(2, p, &opt));
    if (!opt) goto done;
    CHECK_OK(amp_optimizer_make_masters(opt));
    CHECK_FAILS(amp_optimizer_make_masters(opt), AMP_ERR_STATE, "already");
    CHECK(amp_optimizer_has_masters(opt));
    amp_optimizer_drop_masters(opt);
    CHECK(!amp_optimizer_has_masters(opt) && amp_optimizer_master(opt, 0) == NULL);
    CHECK_OK(amp_optimizer_make_masters(opt));
    CHECK(amp_optimizer_has_masters(opt) && amp_optimizer_master_grad(opt, 2) != NULL);
    cast_like_amp(p[0], AMP_BF16);
    cast_like_amp(p[2], AMP_BF16);
    for (int i = 0; i < N_PARAMS; i++) {
        float *g = amp_optimizer_master_grad(opt, i);
        for (int64_t k = 0; k < p[i]->numel; k++) g[k] = 0.25f;
        p[i]->grad_written = true;
    }
    /* A parameter whose shape no longer matches its master fails before anything moves. */
    uint16_t h0[42];
    float m0[42];
    memcpy(h0, p[0]->data, sizeof h0);
    memcpy(m0, amp_optimizer_master(opt, 0)->data, sizeof m0);
    int64_t saved = p[2]->shape[3];
    p[2]->shape[3] = 1366;
    p[2]->numel = 3 * 1366;
    CHECK_FAILS(amp_optimizer_step(opt), AMP_ERR_SHAPE, "'fc2.weight'");
    CHECK_FAILS(amp_optimizer_masters_to_params(opt), AMP_ERR_SHAPE, "'fc2.weight'");
    p[2]->shape[3] = saved;
    p[2]->numel = 3 * saved;
    p[1]->dtype = AMP_I32;
    CHECK_FAILS(amp_optimizer_step(opt), AMP_ERR_DTYPE, "'bn.weight' is i32");
    p[1]->dtype = AMP_F32;
    CHECK(same_bits(h0, p[0]->data, sizeof h0));
    CHECK(same_bits(m0, amp_optimizer_master(opt, 0)->data, sizeof m0));
    CHECK(!amp_optimizer_has_state(opt, 0) && amp_optimizer_step_count(opt) == 0);
    /* A gradient-less .grad does not matter with masters: grad_written decides. */
    amp_tensor_free(p[1]->grad);
    p[1]->grad = NULL;
    CHECK_OK(amp_optimizer_step(opt));
    CHECK(amp_optimizer_has_state(opt, 1) && amp_optimizer_step_count(opt) == 1);
    CHECK(is_rounding_of(p[0], amp_optimizer_master(opt, 0)->data));
    CHECK(!same_bits(m0, amp_optimizer_master(opt, 0)->data, sizeof m0));
    /* Dropping the masters (a failed amp_initialize) leaves an optimizer that can make them
     * again once the model is f32 again, and steps its parameters from .grad meanwhile (a bf16
     * one in place). */
    amp_optimizer_drop_masters(opt);
    CHECK(!amp_optimizer_has_masters(opt) && amp_optimizer_master_grad(opt, 0) == NULL);
    CHECK_OK(amp_optimizer_step(opt));
    amp_optimizer_drop_masters(opt);
    amp_optimizer_drop_masters(NULL);
    CHECK_FAILS(amp_optimizer_make_masters(opt), AMP_ERR_DTYPE, "already bf16");
    CHECK_FAILS(amp_optimizer_make_masters(NULL), AMP_ERR_INVALID_ARG, "opt");
    CHECK(!amp_optimizer_has_masters(NULL) && amp_optimizer_master_grad(NULL, 0) == NULL);
done:
    amp_optimizer_free(opt);
    free_params(p);
}

int main(void) {
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &g_ctx));
    if (!g_ctx) return test_summary("test_optim_masters");
    test_kernel_half_copy();
    for (int kind = 0; kind < 4; kind++) {
        test_o2(kind, AMP_F16);
        test_o2(kind, AMP_BF16);
        test_o3(kind, AMP_F16);
        test_o3(kind, AMP_BF16);
    }
    test_errors();
    amp_ctx_free(g_ctx);
    return test_summary("test_optim_masters");
}
