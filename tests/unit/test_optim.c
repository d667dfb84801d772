/* SGD, Adam and AdamW against torch.optim (tests/ref/optim_ref.h, written by
 * tests/ref/gen_optim_ref.py with torch, foreach=False) and against plain double references
 * written here; gradient dtypes, the parallel CPU loop, skipped parameters, option checks, the
 * edges of torch's ranges (lr 0, betas 0, eps 0, a negative dampening) and the state accessors
 * that checkpoints use.
 *
 * Tolerance against torch: the math headers spell out the fused multiply-adds that ATen performs
 * and leave no other a*b+c for a compiler to contract, so SGD must match torch bit for bit, and so
 * must the "_ieee_sqrt" Adam cases (torch's Adam with only Tensor.sqrt made correctly rounded).
 * Plain torch Adam may differ by OPTIM_REF_ADAM_MAX_ULP: torch's CPU sqrt of a float tensor goes
 * through MKL's vsSqrt, which is not correctly rounded (1 ulp off on ~15% of inputs, measured),
 * while libamp uses the IEEE sqrtf (as CUDA's default sqrtf is); five steps may carry such a last
 * bit one ulp further. The largest distance is printed (1 ulp when this was written). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp/optim.h"
#include "core/half.h"
#include "core/tensor_internal.h"
#include "kernels/cpu/cpu_backend.h"
#include "one_tensor.h"
#include "optim/optimizer_internal.h"
#include "ref/optim_ref.h"
#include "test_util.h"

#define OPTIM_REF_ADAM_MAX_ULP 2

static amp_ctx *g_ctx;
static const char *const g_names[OPTIM_REF_N_PARAMS] = {"a.weight", "a.bias", "b.weight"};

/* Distance in units in the last place between two finite floats. */
static int64_t ulp_diff(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    int64_t oa = ia < 0 ? (int64_t)INT32_MIN - ia : ia;
    int64_t ob = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return oa > ob ? oa - ob : ob - oa;
}

static int64_t param_offset(int i) {
    int64_t off = 0;
    for (int k = 0; k < i; k++) off += optim_ref_param_numel[k];
    return off;
}

/* The three reference parameters, each with a gradient tensor of grad_dt attached. */
static void make_params(amp_dtype grad_dt, amp_tensor *params[OPTIM_REF_N_PARAMS]) {
    for (int i = 0; i < OPTIM_REF_N_PARAMS; i++) {
        int64_t shape[1] = {optim_ref_param_numel[i]};
        CHECK_OK(amp_tensor_from_host(g_ctx, AMP_F32, 1, shape, optim_ref_init + param_offset(i),
                                      &params[i]));
        CHECK_OK(amp_tensor_create(g_ctx, grad_dt, 1, shape, &params[i]->grad));
        params[i]->requires_grad = true;
    }
}

static void free_params(amp_tensor *params[OPTIM_REF_N_PARAMS]) {
    for (int i = 0; i < OPTIM_REF_N_PARAMS; i++) amp_tensor_free(params[i]);
}

/* Writes step s's gradients (those present) the way backward would: values and grad_written. */
static void write_grads(amp_tensor *params[OPTIM_REF_N_PARAMS], int s) {
    for (int i = 0; i < OPTIM_REF_N_PARAMS; i++) {
        amp_tensor *g = params[i]->grad;
        if (!optim_ref_grad_present[s][i] || !g) continue;
        const float *src = optim_ref_grad[s] + param_offset(i);
        if (g->dtype == AMP_F32) {
            CHECK_OK(amp_tensor_copy_from_host(g, src, amp_tensor_nbytes(g)));
        } else {
            uint16_t bits[8];
            for (int64_t k = 0; k < g->numel; k++)
                bits[k] = g->dtype == AMP_F16 ? amp_f32_to_f16_bits(src[k])
                                              : amp_f32_to_bf16_bits(src[k]);
            CHECK_OK(amp_tensor_copy_from_host(g, bits, amp_tensor_nbytes(g)));
        }
        g->grad_written = true;
        params[i]->grad_written = true;
    }
}

static const optim_ref_case *find_case(const char *name) {
    for (size_t c = 0; c < sizeof optim_ref_cases / sizeof optim_ref_cases[0]; c++)
        if (strcmp(optim_ref_cases[c].name, name) == 0) return &optim_ref_cases[c];
    fprintf(stderr, "no reference case %s\n", name);
    exit(1);
}

/* A case's values are torch.optim's arguments, so they are taken as written (.exact): a zero
 * beta or eps is a zero, not a default. */
static amp_status create_for_case(const optim_ref_case *rc, amp_tensor *params[],
                                  amp_optimizer **opt) {
    if (rc->kind == OPTIM_REF_SGD) {
        amp_sgd_opts o = {.lr = rc->lr, .momentum = rc->momentum, .dampening = rc->dampening,
                          .weight_decay = rc->weight_decay, .nesterov = rc->nesterov,
                          .exact = true};
        return amp_sgd_create_params(params, g_names, OPTIM_REF_N_PARAMS, &o, opt);
    }
    amp_adam_opts o = {.lr = rc->lr, .beta1 = rc->beta1, .beta2 = rc->beta2, .eps = rc->eps,
                       .weight_decay = rc->weight_decay, .decoupled = rc->kind == OPTIM_REF_ADAMW,
                       .exact = true};
    return amp_adam_create_params(params, g_names, OPTIM_REF_N_PARAMS, &o, opt);
}

/* Reads every parameter and state tensor back, concatenated like the reference arrays. */
static void read_all(amp_optimizer *opt, amp_tensor *params[], float *p, float *a, float *b) {
    for (int i = 0; i < OPTIM_REF_N_PARAMS; i++) {
        int64_t off = param_offset(i);
        size_t nb = amp_tensor_nbytes(params[i]);
        CHECK_OK(amp_tensor_to_host(params[i], p + off, nb));
        memset(a + off, 0, nb);
        memset(b + off, 0, nb);
        for (int j = 0; j < amp_optimizer_n_state(opt); j++) {
            amp_tensor *st;
            CHECK_OK(amp_optimizer_state_tensor(opt, i, amp_optimizer_state_name(opt, j), &st));
            if (st) CHECK_OK(amp_tensor_to_host(st, (j == 0 ? a : b) + off, nb));
        }
    }
}

static int64_t check_close_ulp(const char *what, const char *name, int s, const float *got,
                               const float *want, int64_t max_ulp) {
    int64_t worst = 0;
    for (int k = 0; k < OPTIM_REF_NUMEL; k++) {
        int64_t d = ulp_diff(got[k], want[k]);
        if (d > worst) worst = d;
        CHECK_MSG(d <= max_ulp, "%s step %d %s[%d]: got %.9g, torch %.9g (%lld ulp)",
                  name, s, what, k, (double)got[k], (double)want[k], (long long)d);
    }
    return worst;
}

/* Every case of the torch reference, gradients in f32. Returns the largest ulp distance. */
static int64_t test_against_torch(void) {
    int64_t worst = 0;
    int n_cases = (int)(sizeof optim_ref_cases / sizeof optim_ref_cases[0]);
    for (int c = 0; c < n_cases; c++) {
        const optim_ref_case *rc = &optim_ref_cases[c];
        amp_tensor *params[OPTIM_REF_N_PARAMS];
        amp_optimizer *opt = NULL;
        make_params(AMP_F32, params);
        CHECK_OK(create_for_case(rc, params, &opt));
        if (!opt) continue;
        for (int s = 0; s < OPTIM_REF_N_STEPS; s++) {
            CHECK_OK(amp_zero_grad(opt));
            write_grads(params, s);
            CHECK_OK(amp_optimizer_step(opt));
            float p[OPTIM_REF_NUMEL], a[OPTIM_REF_NUMEL], b[OPTIM_REF_NUMEL];
            read_all(opt, params, p, a, b);
            bool exact = rc->kind == OPTIM_REF_SGD || strstr(rc->name, "_ieee_sqrt") != NULL;
            int64_t tol = exact ? 0 : OPTIM_REF_ADAM_MAX_ULP;
            int64_t w = check_close_ulp("param", rc->name, s, p, rc->param[s], tol);
            if (w > worst) worst = w;
            w = check_close_ulp("state_a", rc->name, s, a, rc->state_a[s], tol);
            if (w > worst) worst = w;
            w = check_close_ulp("state_b", rc->name, s, b, rc->state_b[s], tol);
            if (w > worst) worst = w;
            for (int i = 0; i < OPTIM_REF_N_PARAMS; i++) {
                CHECK_MSG(amp_optimizer_has_state(opt, i) == (bool)rc->has_state[s][i],
                          "%s step %d param %d has_state", rc->name, s, i);
                int64_t st = -1;
                if (rc->kind == OPTIM_REF_SGD) {
                    CHECK_FAILS(amp_optimizer_state_step(opt, i, &st), AMP_ERR_INVALID_ARG, "step");
                } else {
                    CHECK_OK(amp_optimizer_state_step(opt, i, &st));
                    CHECK_MSG(st == rc->step[s][i], "%s step %d param %d: step %lld, torch %d",
                              rc->name, s, i, (long long)st, rc->step[s][i]);
                }
            }
        }
        CHECK(amp_optimizer_step_count(opt) == OPTIM_REF_N_STEPS);
        amp_optimizer_free(opt);
        free_params(params);
    }
    return worst;
}

/* ---- an independent reference: the textbook formulas in double ---- */

typedef struct dref {
    double p[OPTIM_REF_NUMEL], a[OPTIM_REF_NUMEL], b[OPTIM_REF_NUMEL];
    int has[OPTIM_REF_N_PARAMS];
    int64_t t[OPTIM_REF_N_PARAMS];
} dref;

static void dref_step(const optim_ref_case *rc, dref *r, int s) {
    for (int i = 0; i < OPTIM_REF_N_PARAMS; i++) {
        if (!optim_ref_grad_present[s][i]) continue;
        int64_t off = param_offset(i);
        int64_t t = ++r->t[i];
        for (int k = 0; k < optim_ref_param_numel[i]; k++) {
            double *p = &r->p[off + k], *a = &r->a[off + k], *b = &r->b[off + k];
            double g = optim_ref_grad[s][off + k];
            if (rc->kind == OPTIM_REF_SGD) {
                g += (double)rc->weight_decay * *p;
                if (rc->momentum != 0.0f) {
                    *a = r->has[i] ? rc->momentum * *a + (1.0 - rc->dampening) * g : g;
                    g = rc->nesterov ? g + rc->momentum * *a : *a;
                }
                *p -= (double)rc->lr * g;
            } else {
                if (rc->kind == OPTIM_REF_ADAMW) *p *= 1.0 - (double)rc->lr * rc->weight_decay;
                else g += (double)rc->weight_decay * *p;
                *a = rc->beta1 * *a + (1.0 - rc->beta1) * g;
                *b = rc->beta2 * *b + (1.0 - rc->beta2) * g * g;
                double bc1 = 1.0 - pow(rc->beta1, (double)t), bc2 = 1.0 - pow(rc->beta2, (double)t);
                *p -= rc->lr / bc1 * *a / (sqrt(*b) / sqrt(bc2) + rc->eps);
            }
        }
        r->has[i] = rc->kind != OPTIM_REF_SGD || rc->momentum != 0.0f;
    }
}

static void check_close_rel(const char *what, const char *name, int s, const float *got,
                            const double *want) {
    for (int k = 0; k < OPTIM_REF_NUMEL; k++) {
        double tol = 1e-5 * fabs(want[k]) + 1e-7;
        CHECK_MSG(fabs(got[k] - want[k]) <= tol, "%s step %d %s[%d]: got %.9g, double ref %.9g",
                  name, s, what, k, (double)got[k], want[k]);
    }
}

/* One case (only its options are read) against the double reference, every step. */
static void check_case_double(const optim_ref_case *rc) {
    amp_tensor *params[OPTIM_REF_N_PARAMS];
    amp_optimizer *opt = NULL;
    dref r = {0};
    for (int k = 0; k < OPTIM_REF_NUMEL; k++) r.p[k] = optim_ref_init[k];
    make_params(AMP_F32, params);
    CHECK_OK(create_for_case(rc, params, &opt));
    for (int s = 0; opt && s < OPTIM_REF_N_STEPS; s++) {
        CHECK_OK(amp_zero_grad(opt));
        write_grads(params, s);
        CHECK_OK(amp_optimizer_step(opt));
        dref_step(rc, &r, s);
        float p[OPTIM_REF_NUMEL], a[OPTIM_REF_NUMEL], b[OPTIM_REF_NUMEL];
        read_all(opt, params, p, a, b);
        check_close_rel("param", rc->name, s, p, r.p);
        check_close_rel("state_a", rc->name, s, a, r.a);
        check_close_rel("state_b", rc->name, s, b, r.b);
    }
    amp_optimizer_free(opt);
    free_params(params);
}

static void test_against_double_reference(void) {
    int n_cases = (int)(sizeof optim_ref_cases / sizeof optim_ref_cases[0]);
    for (int c = 0; c < n_cases; c++) check_case_double(&optim_ref_cases[c]);
}

/* Values torch.optim accepts that a zero-means-default reading would hide: Adam's betas
 * (0, 0.99) as GANs use them (exp_avg is then the gradient), betas (0, 0) (the update is
 * lr * g / |g|), AdamW with beta1 0, and SGD with a negative dampening (torch checks none). */
static void test_edge_values_double(void) {
    static const optim_ref_case cases[] = {
        {.name = "adam_beta1_zero", .kind = OPTIM_REF_ADAM, .lr = 0.01f, .beta1 = 0.0f,
         .beta2 = 0.99f, .eps = 1e-8f},
        {.name = "adam_betas_zero", .kind = OPTIM_REF_ADAM, .lr = 0.01f, .beta1 = 0.0f,
         .beta2 = 0.0f, .eps = 1e-8f},
        {.name = "adamw_beta1_zero", .kind = OPTIM_REF_ADAMW, .lr = 0.02f, .beta1 = 0.0f,
         .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.05f},
        {.name = "sgd_negative_dampening", .kind = OPTIM_REF_SGD, .lr = 0.05f, .momentum = 0.8f,
         .dampening = -0.5f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) check_case_double(&cases[c]);
}

/* eps = 0, which torch accepts. Gradients of about 1e-9 make sqrt(v) about 1e-9, so an eps of
 * 1e-8 in its place would shrink the update a hundredfold; an element whose gradient is 0 has
 * m = v = 0 and gets 0 / 0 = NaN, as torch's addcdiv gives it. Double reference per element. */
static void test_adam_eps_zero(void) {
    enum { N = 4, STEPS = 3 };
    static const float init[N] = {0.5f, -1.0f, 0.25f, 2.0f};
    static const float grad[STEPS][N] = {{1e-9f, -3e-10f, 2e-9f, 0.0f},
                                         {-2e-9f, 5e-10f, 1e-9f, 0.0f},
                                         {4e-10f, -1e-9f, 3e-9f, 0.0f}};
    amp_tensor *p = NULL;
    amp_optimizer *opt = NULL;
    CHECK_OK(amp_tensor_from_host(g_ctx, AMP_F32, 1, (int64_t[]){N}, init, &p));
    if (!p) return;
    CHECK_OK(amp_tensor_create(g_ctx, AMP_F32, 1, (int64_t[]){N}, &p->grad));
    p->requires_grad = true;
    amp_adam_opts o = amp_adam_defaults();
    o.lr = 0.01f;
    o.eps = 0.0f;
    CHECK_OK(amp_adam_create_params(&p, NULL, 1, &o, &opt));
    double rp[N], ra[N] = {0}, rb[N] = {0};
    for (int k = 0; k < N; k++) rp[k] = init[k];
    for (int s = 0; opt && s < STEPS; s++) {
        CHECK_OK(amp_tensor_copy_from_host(p->grad, grad[s], sizeof grad[s]));
        p->grad_written = p->grad->grad_written = true;
        CHECK_OK(amp_optimizer_step(opt));
        double t = s + 1, bc1 = 1.0 - pow((double)0.9f, t), bc2 = 1.0 - pow((double)0.999f, t);
        float got[N];
        CHECK_OK(amp_tensor_to_host(p, got, sizeof got));
        for (int k = 0; k < N; k++) {
            double g = grad[s][k];
            ra[k] = (double)0.9f * ra[k] + (1.0 - (double)0.9f) * g;
            rb[k] = (double)0.999f * rb[k] + (1.0 - (double)0.999f) * g * g;
            if (g == 0.0) {
                CHECK_MSG(isnan(got[k]), "eps 0, zero gradient: step %d [%d] = %g, want NaN", s,
                          k, (double)got[k]);
                continue;
            }
            rp[k] -= 0.01 / bc1 * ra[k] / (sqrt(rb[k]) / sqrt(bc2));
            CHECK_MSG(fabs(got[k] - rp[k]) <= 1e-5 * fabs(rp[k]),
                      "eps 0: step %d [%d] = %.9g, double ref %.9g", s, k, (double)got[k], rp[k]);
        }
    }
    amp_optimizer_free(opt);
    amp_tensor_free(p);
}

/* Steps one case's gradients with lr 0 and checks that the parameters keep their bits while
 * the state advances as in torch's run `torch_case` of the same momentum or betas: without
 * (L2) weight decay neither SGD's momentum buffer nor Adam's moments and step counts depend on
 * lr, so they must equal torch's bit for bit. */
static void check_zero_lr(const char *what, amp_optimizer *opt, amp_tensor *params[],
                          const optim_ref_case *torch_case) {
    for (int s = 0; opt && s < OPTIM_REF_N_STEPS; s++) {
        CHECK_OK(amp_zero_grad(opt));
        write_grads(params, s);
        CHECK_OK(amp_optimizer_step(opt));
        float p[OPTIM_REF_NUMEL], a[OPTIM_REF_NUMEL], b[OPTIM_REF_NUMEL];
        read_all(opt, params, p, a, b);
        CHECK_MSG(memcmp(p, optim_ref_init, sizeof p) == 0, "%s: lr 0 moved a parameter on step %d",
                  what, s);
        check_close_ulp("state_a", what, s, a, torch_case->state_a[s], 0);
        check_close_ulp("state_b", what, s, b, torch_case->state_b[s], 0);
        for (int i = 0; i < OPTIM_REF_N_PARAMS; i++) {
            int64_t st = 0;
            CHECK(amp_optimizer_has_state(opt, i) == (bool)torch_case->has_state[s][i]);
            if (torch_case->kind != OPTIM_REF_SGD) {
                CHECK_OK(amp_optimizer_state_step(opt, i, &st));
                CHECK_MSG(st == torch_case->step[s][i], "%s step %d param %d: step %lld", what,
                          s, i, (long long)st);
            }
        }
    }
    amp_optimizer_free(opt);
    free_params(params);
}

/* A learning rate of 0 (the first step of a warm-up, the last of a cosine schedule), at
 * creation through the exact form and later through amp_optimizer_set_lr. */
static void test_zero_lr(void) {
    amp_tensor *params[OPTIM_REF_N_PARAMS];
    amp_optimizer *opt = NULL;

    amp_adam_opts ao = amp_adam_defaults();
    ao.lr = 0.0f;
    make_params(AMP_F32, params);
    CHECK_OK(amp_adam_create_params(params, g_names, OPTIM_REF_N_PARAMS, &ao, &opt));
    check_zero_lr("adam lr 0", opt, params, find_case("adam_default_ieee_sqrt"));

    /* AdamW: the decay factor is 1 - 0 * wd = 1, and decoupled decay leaves the moments alone. */
    ao.decoupled = true;
    ao.weight_decay = 0.1f;
    make_params(AMP_F32, params);
    CHECK_OK(amp_adam_create_params(params, g_names, OPTIM_REF_N_PARAMS, &ao, &opt));
    check_zero_lr("adamw lr 0", opt, params, find_case("adam_default_ieee_sqrt"));

    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.0f;
    so.momentum = 0.9f;
    make_params(AMP_F32, params);
    CHECK_OK(amp_sgd_create_params(params, g_names, OPTIM_REF_N_PARAMS, &so, &opt));
    check_zero_lr("sgd lr 0", opt, params, find_case("sgd_momentum"));

    /* Created with lr 0.1 (the shorthand), then set to 0 by a schedule. */
    make_params(AMP_F32, params);
    CHECK_OK(amp_sgd_create_params(params, g_names, OPTIM_REF_N_PARAMS,
                                   &(amp_sgd_opts){.lr = 0.1f, .momentum = 0.9f}, &opt));
    CHECK_OK(amp_optimizer_set_lr(opt, 0.0f));
    CHECK(amp_optimizer_lr(opt) == 0.0f);
    check_zero_lr("sgd set_lr 0", opt, params, find_case("sgd_momentum"));
}

/* The two ways to fill options (include/amp/optim.h): defaults, exact zeros, the shorthand. */
static void test_option_forms(void) {
    amp_adam_opts ad = amp_adam_defaults();
    CHECK(ad.lr == 1e-3f && ad.beta1 == 0.9f && ad.beta2 == 0.999f && ad.eps == 1e-8f);
    CHECK(ad.weight_decay == 0.0f && !ad.decoupled && ad.exact);
    amp_sgd_opts sd = amp_sgd_defaults();
    CHECK(sd.lr == 1e-3f && sd.momentum == 0.0f && sd.dampening == 0.0f);
    CHECK(sd.weight_decay == 0.0f && !sd.nesterov && sd.exact);

    amp_tensor *params[OPTIM_REF_N_PARAMS];
    amp_optimizer *opt = NULL, *again = NULL;
    const int n = OPTIM_REF_N_PARAMS;
    make_params(AMP_F32, params);
    /* Exact: every zero is kept (torch.optim.Adam(lr=0, betas=(0, 0), eps=0) is valid). */
    CHECK_OK(amp_adam_create_params(params, g_names, n, &(amp_adam_opts){.exact = true}, &opt));
    if (opt) {
        const amp_adam_opts *o = amp_optimizer_adam_opts(opt);
        CHECK(o->lr == 0.0f && o->beta1 == 0.0f && o->beta2 == 0.0f && o->eps == 0.0f);
    }
    amp_optimizer_free(opt);
    opt = NULL;
    /* The shorthand is resolved and kept exact: options read back create the same optimizer. */
    CHECK_OK(amp_adam_create_params(params, g_names, n, &(amp_adam_opts){.lr = 0.01f}, &opt));
    if (opt) {
        CHECK(amp_optimizer_adam_opts(opt)->exact);
        CHECK_OK(amp_adam_create_params(params, g_names, n, amp_optimizer_adam_opts(opt), &again));
        if (again)
            CHECK(memcmp(amp_optimizer_adam_opts(opt), amp_optimizer_adam_opts(again),
                         sizeof(amp_adam_opts)) == 0);
    }
    amp_optimizer_free(again);
    amp_optimizer_free(opt);
    opt = NULL;
    /* SGD: an exact zero rate is accepted, a forgotten one is refused and says how to ask. */
    CHECK_OK(amp_sgd_create_params(params, g_names, n, &(amp_sgd_opts){.exact = true}, &opt));
    CHECK(opt && amp_optimizer_lr(opt) == 0.0f);
    amp_optimizer_free(opt);
    opt = NULL;
    CHECK_FAILS(amp_sgd_create_params(params, g_names, n, &(amp_sgd_opts){.momentum = 0.9f},
                                      &opt),
                AMP_ERR_INVALID_ARG, "exact");
    CHECK_FAILS(amp_sgd_create_params(params, g_names, n, &(amp_sgd_opts){.lr = 0.0f}, &opt),
                AMP_ERR_INVALID_ARG, "amp_sgd_defaults()");
    CHECK(opt == NULL);
    free_params(params);
}

/* f16/bf16 gradients are widened exactly, so they must give the very bits that f32 gradients
 * holding the same (rounded) values give. */
static void test_half_grads(void) {
    const amp_dtype dts[2] = {AMP_F16, AMP_BF16};
    const char *const cases[2] = {"sgd_momentum", "adam_wd"};
    for (int d = 0; d < 2; d++) {
        for (int c = 0; c < 2; c++) {
            const optim_ref_case *rc = find_case(cases[c]);
            amp_tensor *ph[OPTIM_REF_N_PARAMS], *pf[OPTIM_REF_N_PARAMS];
            amp_optimizer *oh = NULL, *of = NULL;
            make_params(dts[d], ph);
            make_params(AMP_F32, pf);
            CHECK_OK(create_for_case(rc, ph, &oh));
            CHECK_OK(create_for_case(rc, pf, &of));
            if (!oh || !of) continue;
            for (int s = 0; s < OPTIM_REF_N_STEPS; s++) {
                CHECK_OK(amp_zero_grad(oh));
                CHECK_OK(amp_zero_grad(of));
                write_grads(ph, s);
                write_grads(pf, s);
                /* f32 grads rounded through the half type, widened back. */
                for (int i = 0; i < OPTIM_REF_N_PARAMS; i++) {
                    float v[8];
                    CHECK_OK(amp_tensor_to_host(pf[i]->grad, v, amp_tensor_nbytes(pf[i]->grad)));
                    for (int64_t k = 0; k < pf[i]->numel; k++)
                        v[k] = dts[d] == AMP_F16 ? amp_f16_bits_to_f32(amp_f32_to_f16_bits(v[k]))
                                                 : amp_bf16_bits_to_f32(amp_f32_to_bf16_bits(v[k]));
                    CHECK_OK(amp_tensor_copy_from_host(pf[i]->grad, v,
                                                       amp_tensor_nbytes(pf[i]->grad)));
                }
                CHECK_OK(amp_optimizer_step(oh));
                CHECK_OK(amp_optimizer_step(of));
            }
            float p1[OPTIM_REF_NUMEL], a1[OPTIM_REF_NUMEL], b1[OPTIM_REF_NUMEL];
            float p2[OPTIM_REF_NUMEL], a2[OPTIM_REF_NUMEL], b2[OPTIM_REF_NUMEL];
            read_all(oh, ph, p1, a1, b1);
            read_all(of, pf, p2, a2, b2);
            CHECK_MSG(memcmp(p1, p2, sizeof p1) == 0 && memcmp(a1, a2, sizeof a1) == 0 &&
                          memcmp(b1, b2, sizeof b1) == 0,
                      "%s with %s grads differs from f32 grads of the same values", rc->name,
                      amp_dtype_name(dts[d]));
            amp_optimizer_free(oh);
            amp_optimizer_free(of);
            free_params(ph);
            free_params(pf);
        }
    }
}

/* Above AMP_CPU_PARALLEL_MIN the CPU loops run on every thread: the bits must equal those of
 * the same update done in small (single-thread) pieces, and agree with a double reference. */
static void test_parallel_loop(void) {
    const int64_t n = 3 * AMP_CPU_PARALLEL_MIN + 17, piece = 1000;
    float *buf = malloc((size_t)n * 10 * sizeof(float));
    CHECK(buf != NULL);
    if (!buf) return;
    float *p1 = buf, *p2 = buf + n, *g = buf + 2 * n, *m1 = buf + 3 * n, *m2 = buf + 4 * n;
    float *a1 = buf + 5 * n, *a2 = buf + 6 * n, *v1 = buf + 7 * n, *v2 = buf + 8 * n;
    double max_err = 0.0;
    for (int64_t k = 0; k < n; k++) {
        p1[k] = p2[k] = (float)sin(0.001 * (double)k);
        g[k] = (float)cos(0.0037 * (double)k) * 0.1f;
        m1[k] = m2[k] = (float)(0.01 * sin(0.02 * (double)k));
        a1[k] = a2[k] = 0.0f;
        v1[k] = v2[k] = 0.0f;
    }
    amp_sgd_desc sd = {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 1e-4f};
    CHECK_OK(one_tensor_sgd(&sd, n, p1, g, AMP_F32, m1));
    for (int64_t k = 0; k < n; k += piece)
        CHECK_OK(one_tensor_sgd(&sd, k + piece < n ? piece : n - k, p2 + k, g + k, AMP_F32,
                                    m2 + k));
    CHECK(memcmp(p1, p2, (size_t)n * sizeof(float)) == 0);
    CHECK(memcmp(m1, m2, (size_t)n * sizeof(float)) == 0);
    amp_adam_desc ad = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                        .weight_decay = 0.01f, .decoupled = true, .step = 3};
    for (int64_t k = 0; k < n; k++) p2[k] = p1[k];
    float *p0 = buf + 9 * n;
    memcpy(p0, p1, (size_t)n * sizeof(float));
    CHECK_OK(one_tensor_adam(&ad, n, p1, g, AMP_F32, a1, v1));
    for (int64_t k = 0; k < n; k += piece)
        CHECK_OK(one_tensor_adam(&ad, k + piece < n ? piece : n - k, p2 + k, g + k, AMP_F32,
                                     a2 + k, v2 + k));
    CHECK(memcmp(p1, p2, (size_t)n * sizeof(float)) == 0);
    CHECK(memcmp(a1, a2, (size_t)n * sizeof(float)) == 0);
    CHECK(memcmp(v1, v2, (size_t)n * sizeof(float)) == 0);
    for (int64_t k = 0; k < n; k++) { /* from zero moments at step 3 */
        double p = p0[k] * (1.0 - 1e-3 * 0.01), gg = g[k];
        double a = 0.1 * gg, v = 0.001 * gg * gg;
        double upd = 1e-3 / (1.0 - pow(0.9, 3)) * a / (sqrt(v) / sqrt(1.0 - pow(0.999, 3)) + 1e-8);
        double err = fabs((p - upd) - p1[k]);
        if (err > max_err) max_err = err;
    }
    CHECK_MSG(max_err < 1e-6, "parallel Adam vs double reference: max error %g", max_err);
    free(buf);
}

static void test_bad_options(void) {
    amp_tensor *params[OPTIM_REF_N_PARAMS];
    amp_optimizer *opt = NULL;
    make_params(AMP_F32, params);
    const int n = OPTIM_REF_N_PARAMS;
    CHECK_FAILS(amp_sgd_create_params(params, g_names, n, &(amp_sgd_opts){.lr = 0.0f}, &opt),
                AMP_ERR_INVALID_ARG, "opts.lr = 0 without opts.exact");
    CHECK_FAILS(amp_sgd_create_params(params, g_names, n, &(amp_sgd_opts){.lr = NAN}, &opt),
                AMP_ERR_INVALID_ARG, "opts.lr");
    CHECK_FAILS(amp_sgd_create_params(params, g_names, n,
                                      &(amp_sgd_opts){.lr = -0.1f, .exact = true}, &opt),
                AMP_ERR_INVALID_ARG, "opts.lr = -0.1");
    CHECK_FAILS(amp_sgd_create_params(params, g_names, n,
                                      &(amp_sgd_opts){.lr = 0.1f, .momentum = -0.5f}, &opt),
                AMP_ERR_INVALID_ARG, "opts.momentum = -0.5");
    CHECK_FAILS(amp_sgd_create_params(params, g_names, n,
                                      &(amp_sgd_opts){.lr = 0.1f, .dampening = INFINITY}, &opt),
                AMP_ERR_INVALID_ARG, "opts.dampening = inf");
    CHECK_FAILS(amp_sgd_create_params(params, g_names, n,
                                      &(amp_sgd_opts){.lr = 0.1f, .weight_decay = -0.01f}, &opt),
                AMP_ERR_INVALID_ARG, "opts.weight_decay");
    CHECK_FAILS(amp_sgd_create_params(params, g_names, n,
                                      &(amp_sgd_opts){.lr = 0.1f, .nesterov = true}, &opt),
                AMP_ERR_INVALID_ARG, "opts.nesterov");
    CHECK_FAILS(amp_sgd_create_params(params, g_names, n,
                                      &(amp_sgd_opts){.lr = 0.1f, .momentum = 0.9f,
                                                      .dampening = 0.1f, .nesterov = true},
                                      &opt),
                AMP_ERR_INVALID_ARG, "dampening = 0.1");
    CHECK(opt == NULL);
    CHECK_FAILS(amp_adam_create_params(params, g_names, n, &(amp_adam_opts){.lr = -1e-3f}, &opt),
                AMP_ERR_INVALID_ARG, "opts.lr = -0.001");
    CHECK_FAILS(amp_adam_create_params(params, g_names, n, &(amp_adam_opts){.beta1 = 1.0f}, &opt),
                AMP_ERR_INVALID_ARG, "opts.beta1 = 1");
    CHECK_FAILS(amp_adam_create_params(params, g_names, n, &(amp_adam_opts){.beta1 = -0.1f}, &opt),
                AMP_ERR_INVALID_ARG, "opts.beta1");
    CHECK_FAILS(amp_adam_create_params(params, g_names, n, &(amp_adam_opts){.beta2 = 1.5f}, &opt),
                AMP_ERR_INVALID_ARG, "opts.beta2 = 1.5");
    CHECK_FAILS(amp_adam_create_params(params, g_names, n, &(amp_adam_opts){.eps = -1e-8f}, &opt),
                AMP_ERR_INVALID_ARG, "opts.eps");
    CHECK_FAILS(amp_adam_create_params(params, g_names, n,
                                       &(amp_adam_opts){.lr = NAN, .exact = true}, &opt),
                AMP_ERR_INVALID_ARG, "opts.lr = nan");
    CHECK_FAILS(amp_adam_create_params(params, g_names, n,
                                       &(amp_adam_opts){.beta2 = 1.0f, .exact = true}, &opt),
                AMP_ERR_INVALID_ARG, "opts.beta2 = 1");
    CHECK_FAILS(amp_adam_create_params(params, g_names, n,
                                       &(amp_adam_opts){.weight_decay = -1.0f}, &opt),
                AMP_ERR_INVALID_ARG, "opts.weight_decay");
    CHECK_FAILS(amp_adam_create_params(params, g_names, n, NULL, &opt), AMP_ERR_INVALID_ARG,
                "opts");
    CHECK(opt == NULL);

    /* Parameter lists: empty, duplicated, not f32. */
    amp_sgd_opts ok = {.lr = 0.1f};
    CHECK_FAILS(amp_sgd_create_params(params, g_names, 0, &ok, &opt), AMP_ERR_INVALID_ARG,
                "empty parameter list");
    amp_tensor *dup[2] = {params[0], params[0]};
    CHECK_FAILS(amp_sgd_create_params(dup, NULL, 2, &ok, &opt), AMP_ERR_INVALID_ARG,
                "appears twice");
    amp_tensor *half;
    CHECK_OK(amp_tensor_create(g_ctx, AMP_F16, 1, (int64_t[]){4}, &half));
    amp_tensor *with_half[2] = {params[0], half};
    const char *half_names[2] = {"x", "half.weight"};
    CHECK_FAILS(amp_sgd_create_params(with_half, half_names, 2, &ok, &opt), AMP_ERR_DTYPE,
                "half.weight");
    amp_tensor_free(half);
    CHECK(opt == NULL);

    /* Adam's zeros are PyTorch's defaults; set_lr checks its value. */
    CHECK_OK(amp_adam_create_params(params, g_names, n, &(amp_adam_opts){0}, &opt));
    if (opt) {
        CHECK(amp_optimizer_lr(opt) == 1e-3f);
        CHECK(amp_optimizer_adam_opts(opt)->beta1 == 0.9f);
        CHECK(amp_optimizer_adam_opts(opt)->beta2 == 0.999f);
        CHECK(amp_optimizer_adam_opts(opt)->eps == 1e-8f);
        CHECK(amp_optimizer_sgd_opts(opt) == NULL);
        CHECK_FAILS(amp_optimizer_set_lr(opt, -1.0f), AMP_ERR_INVALID_ARG, "lr = -1");
        CHECK_FAILS(amp_optimizer_set_lr(opt, NAN), AMP_ERR_INVALID_ARG, "lr = nan");
        CHECK_FAILS(amp_optimizer_set_lr(opt, INFINITY), AMP_ERR_INVALID_ARG, "lr = inf");
        CHECK(amp_optimizer_lr(opt) == 1e-3f);
        CHECK_OK(amp_optimizer_set_lr(opt, 0.0f));
        CHECK(amp_optimizer_lr(opt) == 0.0f);
        CHECK_OK(amp_optimizer_set_lr(opt, 0.5f));
        CHECK(amp_optimizer_lr(opt) == 0.5f);
        CHECK_FAILS(amp_optimizer_state_tensor(opt, 0, "momentum_buffer", &(amp_tensor *){0}),
                    AMP_ERR_INVALID_ARG, "momentum_buffer");
        CHECK_FAILS(amp_optimizer_state_tensor(opt, 3, "exp_avg", &(amp_tensor *){0}),
                    AMP_ERR_INVALID_ARG, "index 3");
    }
    amp_optimizer_free(opt);
    amp_optimizer_free(NULL);
    free_params(params);
}

/* Parameters without a gradient are skipped; a bad gradient fails before anything moves; a
 * backend without the kernel says so. */
static void test_skip_and_errors(void) {
    amp_tensor *params[OPTIM_REF_N_PARAMS];
    amp_optimizer *opt = NULL;
    make_params(AMP_F32, params);
    amp_tensor_free(params[2]->grad);
    params[2]->grad = NULL; /* backward never reached it */
    CHECK_OK(amp_sgd_create_params(params, g_names, OPTIM_REF_N_PARAMS,
                                   &(amp_sgd_opts){.lr = 0.1f, .momentum = 0.9f}, &opt));
    if (!opt) {
        free_params(params);
        return;
    }
    float before[OPTIM_REF_NUMEL], after[OPTIM_REF_NUMEL], a[OPTIM_REF_NUMEL], b[OPTIM_REF_NUMEL];
    read_all(opt, params, before, a, b);
    write_grads(params, 0); /* params 0 and 1 have gradients on step 0, param 2 none */
    params[1]->grad_written = false; /* as after amp_zero_grad: skipped */
    CHECK_OK(amp_optimizer_step(opt));
    read_all(opt, params, after, a, b);
    CHECK(memcmp(before + 5, after + 5, 5 * sizeof(float)) == 0);
    CHECK(memcmp(before, after, 5 * sizeof(float)) != 0);
    CHECK(amp_optimizer_has_state(opt, 0) && !amp_optimizer_has_state(opt, 1));
    CHECK(amp_optimizer_step_count(opt) == 1);

    /* A grad of the wrong shape (on param 1) fails, naming it, and param 0 does not move. */
    amp_tensor *good = params[1]->grad, *bad;
    CHECK_OK(amp_tensor_create(g_ctx, AMP_F32, 1, (int64_t[]){4}, &bad));
    params[1]->grad = bad;
    params[0]->grad_written = params[1]->grad_written = true;
    read_all(opt, params, before, a, b);
    CHECK_FAILS(amp_optimizer_step(opt), AMP_ERR_SHAPE, "'a.bias'");
    read_all(opt, params, after, a, b);
    CHECK(memcmp(before, after, sizeof before) == 0);
    params[1]->grad = good;
    amp_tensor_free(bad);
    CHECK_OK(amp_tensor_create(g_ctx, AMP_I32, 1, (int64_t[]){3}, &bad));
    params[1]->grad = bad;
    CHECK_FAILS(amp_optimizer_step(opt), AMP_ERR_DTYPE, "i32");
    params[1]->grad = good;
    amp_tensor_free(bad);
    CHECK(amp_optimizer_step_count(opt) == 1);

    /* amp_zero_grad marks every gradient empty: a step then changes nothing. */
    CHECK_OK(amp_zero_grad(opt));
    for (int i = 0; i < OPTIM_REF_N_PARAMS; i++) CHECK(!params[i]->grad_written);
    read_all(opt, params, before, a, b);
    CHECK_OK(amp_optimizer_step(opt));
    read_all(opt, params, after, a, b);
    CHECK(memcmp(before, after, sizeof before) == 0);
    CHECK(amp_optimizer_step_count(opt) == 2);

    /* A backend without the fused SGD (what the optimizer calls). */
    amp_backend holey = *amp_backend_cpu();
    holey.name = "holey";
    holey.k.sgd_multi = NULL;
    opt->backend = &holey;
    for (int i = 0; i < 2; i++) {
        params[i]->backend = &holey;
        params[i]->grad->backend = &holey;
    }
    write_grads(params, 1);
    CHECK_FAILS(amp_optimizer_step(opt), AMP_ERR_UNSUPPORTED, "sgd_multi");
    for (int i = 0; i < 2; i++) {
        params[i]->backend = amp_backend_cpu();
        params[i]->grad->backend = amp_backend_cpu();
    }
    opt->backend = amp_backend_cpu();

    /* Checkpoint hooks: restore flags and counts. */
    CHECK_OK(amp_optimizer_state_restore(opt, 1, true, 0));
    CHECK(amp_optimizer_has_state(opt, 1));
    CHECK_OK(amp_optimizer_set_step_count(opt, 42));
    CHECK(amp_optimizer_step_count(opt) == 42);
    CHECK_FAILS(amp_optimizer_set_step_count(opt, -1), AMP_ERR_INVALID_ARG, "n_steps");
    amp_optimizer_free(opt);
    free_params(params);
}

/* Adam's state hooks: a restored state continues exactly like the uninterrupted run. */
static void test_adam_restore(void) {
    const optim_ref_case *rc = find_case("adam_default_ieee_sqrt");
    amp_tensor *pa[OPTIM_REF_N_PARAMS], *pb[OPTIM_REF_N_PARAMS];
    amp_optimizer *oa = NULL, *ob = NULL;
    make_params(AMP_F32, pa);
    make_params(AMP_F32, pb);
    CHECK_OK(create_for_case(rc, pa, &oa));
    if (!oa) return;
    for (int s = 0; s < 3; s++) {
        CHECK_OK(amp_zero_grad(oa));
        write_grads(pa, s);
        CHECK_OK(amp_optimizer_step(oa));
    }
    /* Copy params and state into a fresh optimizer, as a checkpoint load would. */
    CHECK_OK(create_for_case(rc, pb, &ob));
    if (!ob) return;
    for (int i = 0; i < OPTIM_REF_N_PARAMS; i++) {
        float tmp[8];
        CHECK_OK(amp_tensor_to_host(pa[i], tmp, amp_tensor_nbytes(pa[i])));
        CHECK_OK(amp_tensor_copy_from_host(pb[i], tmp, amp_tensor_nbytes(pb[i])));
        for (int j = 0; j < 2; j++) {
            amp_tensor *src, *dst;
            const char *name = amp_optimizer_state_name(oa, j);
            CHECK_OK(amp_optimizer_state_tensor(oa, i, name, &src));
            CHECK_OK(amp_optimizer_state_tensor(ob, i, name, &dst));
            CHECK(src != dst && src->numel == pa[i]->numel && dst->dtype == AMP_F32);
            CHECK_OK(amp_tensor_to_host(src, tmp, amp_tensor_nbytes(src)));
            CHECK_OK(amp_tensor_copy_from_host(dst, tmp, amp_tensor_nbytes(dst)));
        }
        int64_t step;
        CHECK_OK(amp_optimizer_state_step(oa, i, &step));
        CHECK_OK(amp_optimizer_state_restore(ob, i, amp_optimizer_has_state(oa, i), step));
    }
    CHECK_FAILS(amp_optimizer_state_restore(ob, 0, true, 0), AMP_ERR_INVALID_ARG, "step = 0");
    for (int s = 3; s < OPTIM_REF_N_STEPS; s++) {
        CHECK_OK(amp_zero_grad(oa));
        CHECK_OK(amp_zero_grad(ob));
        write_grads(pa, s);
        write_grads(pb, s);
        CHECK_OK(amp_optimizer_step(oa));
        CHECK_OK(amp_optimizer_step(ob));
    }
    float p1[OPTIM_REF_NUMEL], a1[OPTIM_REF_NUMEL], b1[OPTIM_REF_NUMEL];
    float p2[OPTIM_REF_NUMEL], a2[OPTIM_REF_NUMEL], b2[OPTIM_REF_NUMEL];
    read_all(oa, pa, p1, a1, b1);
    read_all(ob, pb, p2, a2, b2);
    CHECK(memcmp(p1, p2, sizeof p1) == 0 && memcmp(a1, a2, sizeof a1) == 0 &&
          memcmp(b1, b2, sizeof b1) == 0);
    check_close_ulp("resumed param", rc->name, OPTIM_REF_N_STEPS - 1, p2,
                    rc->param[OPTIM_REF_N_STEPS - 1], 0);
    amp_optimizer_free(oa);
    amp_optimizer_free(ob);
    free_params(pa);
    free_params(pb);
}

int main(void) {
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &g_ctx));
    if (!g_ctx) return test_summary("test_optim");
    int64_t worst = test_against_torch();
    printf("test_optim: largest distance to torch.optim: %lld ulp\n", (long long)worst);
    test_against_double_reference();
    test_edge_values_double();
    test_adam_eps_zero();
    test_zero_lr();
    test_option_forms();
    test_half_grads();
    test_parallel_loop();
    test_bad_options();
    test_skip_and_errors();
    test_adam_restore();
    amp_ctx_free(g_ctx);
    return test_summary("test_optim");
}
