/* The CPU backend's multi-tensor entries (optim.c, optim_lamb.c, unscale_multi.c).
 *
 * SGD and Adam/AdamW: one multi call over a list gives, for every tensor, the bits of the tensor
 * updated alone (a one-tensor list, tests/one_tensor.h; test_optim.c checks the numerics against
 * torch), for f32/f16/bf16
 * gradients, f32 parameters alone, with an f16/bf16 half copy (O2) and with half parameters
 * updated in place (O3, param list NULL), with and without momentum, weight decay and grad
 * scale. Lists: a mixed one (empty tensors with NULL pointers, 1 element, a piece boundary, one
 * whole chunk, tensors over one chunk) and 121 small tensors (more than a launch holds at depth
 * 4: 36 slots). Every buffer has a guard after it that must come back untouched.
 *
 * LAMB: against tests/ref/lamb_ref.h, which tests/ref/gen_lamb_ref.py computes in float64 from
 * the paper's Algorithm 2 and Apex FusedLAMB's conventions (not from this code); with f32
 * parameters and with a half copy, which must be the rounding of the f32 result bit for bit.
 * Tolerance: LAMB_TOL = 1e-5 of each tensor's scale, test_lamb_math.c's, for its reason: the
 * entry runs that test's per-element math in f32 (about a dozen roundings per element and step,
 * four steps) and hands the norms over as f64 sums rounded once to f32, as that test does, so
 * the distance to the float64 reference is the same rounding drift (a few 1e-7, printed), while
 * a formula slip is 1e-3 and more. Then bit for bit against a plain loop written here over
 * kernels/math/lamb.h that keeps u in a buffer between the stages (the entry recomputes it) and
 * sums the norms in one sequential f64 sum: the entry's f64 sums run in another order, which
 * could move a norm's f32 rounding only for a sum within ~1e-14 relative of a rounding
 * boundary; the data is fixed, so that was checked once and holds.
 *
 * Loss scaler: unscale_multi equals the per-tensor unscale (values and flag), in place for f32,
 * with the device-scalar scale; nonfinite_multi flags an inf/NaN in any tensor, in the last
 * launch too, and never clears the flag; sum_squares_multi against a long double sum (only the
 * final f32 rounding is allowed).
 *
 * Everywhere: a set found_inf leaves every byte as it was; *scalars->grad_scale gives the bits of
 * desc.grad_scale (and 0 there multiplies by 0, where the descriptor's 0 means none); per-tensor
 * step counts (amp_opt_tensors.steps) equal one-tensor calls at those steps and advance only
 * when the update ran; 1 and 2 threads give the same bits; bad arguments fail naming the entry
 * and write nothing. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/lamb.h"
#include "one_tensor.h"
#include "optim_bank.h"
#include "ref/lamb_ref.h"
#include "test_data.h"
#include "test_util.h"

#define LAMB_TOL 1e-5

static const char *const mode_name[] = {"f32", "O2", "O3"};
static const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};

/* The lists of the tests: a mixed one and one of more tensors than a launch holds. */
static const int64_t mixed_numel[] = {0, 1, 7, 4096, 4097, 65536, 70001, 3, 0, 150000};
#define N_MIXED ((int64_t)(sizeof mixed_numel / sizeof mixed_numel[0]))
#define N_MANY 121
static int64_t many_numel[N_MANY];

/* ---- SGD and Adam: multi == per tensor. ----------------------------------------------------- */

static void sgd_per_tensor(const amp_sgd_desc *d0, bank *b) {
    for (int64_t i = 0; i < b->n; i++) {
        amp_sgd_desc d = *d0;
        d.half_copy = b->half ? b->half[i] : NULL;
        d.half_dtype = b->h_dt;
        CHECK_OK(one_tensor_sgd(&d, b->numel[i], b->param ? b->param[i] : NULL, b->grad[i],
                                    b->g_dt, b->s1 ? b->s1[i] : NULL));
    }
}

static void adam_per_tensor(const amp_adam_desc *d0, bank *b) {
    for (int64_t i = 0; i < b->n; i++) {
        amp_adam_desc d = *d0;
        d.half_copy = b->half ? b->half[i] : NULL;
        d.half_dtype = b->h_dt;
        CHECK_OK(one_tensor_adam(&d, b->numel[i], b->param ? b->param[i] : NULL, b->grad[i],
                                     b->g_dt, b->s1[i], b->s2[i]));
    }
}

static const amp_sgd_desc sgd_cases[] = {
    {.lr = 0.05f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 1e-2f, .nesterov = true,
     .grad_scale = 1.0f / 1024.0f},
    {.lr = 0.1f, .momentum = 0.5f, .first_step = true},
    {.lr = 0.01f, .weight_decay = 0.0f, .grad_scale = 0.0f},
};
static const amp_adam_desc adam_cases[] = {
    {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-2f,
     .step = 3, .grad_scale = 1.0f / 1024.0f},
    {.lr = 2e-3f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.1f,
     .decoupled = true, .step = 1},
};

/* One list, one optimizer case: multi and per tensor on clones of the same data. */
static void check_one(int op, int c, int64_t n, const int64_t *numel, amp_dtype g_dt, int mode,
                      amp_dtype h_dt) {
    bool momentum = op == 0 && sgd_cases[c].momentum != 0.0f;
    float gs = op == 0 ? sgd_cases[c].grad_scale : adam_cases[c].grad_scale;
    bank orig = bank_make(n, numel, g_dt, mode, h_dt, op == 0 ? (momentum ? 1 : 0) : 2,
                          gs > 0.0f ? 1.0f / gs : 1.0f);
    bank per = bank_clone(&orig), multi = bank_clone(&orig);
    amp_opt_tensors t = bank_list(&multi);
    if (op == 0) {
        sgd_per_tensor(&sgd_cases[c], &per);
        CHECK_OK(amp_cpu_sgd_multi(amp_cpu_device(), &sgd_cases[c], &t, NULL));
    } else {
        adam_per_tensor(&adam_cases[c], &per);
        CHECK_OK(amp_cpu_adam_multi(amp_cpu_device(), &adam_cases[c], &t, NULL));
    }
    CHECK_MSG(bank_same(&per, &multi) && bank_guards_ok(&multi),
              "%s case %d, %lld tensors, grad %s, %s (half %s): multi != per tensor",
              op == 0 ? "sgd" : "adam", c, (long long)n, amp_dtype_name(g_dt), mode_name[mode],
              amp_dtype_name(h_dt));
    CHECK(!bank_same(&orig, &multi)); /* it did update */
    bank_free(&orig), bank_free(&per), bank_free(&multi);
}

static void test_equals_per_tensor(void) {
    for (int list = 0; list < 2; list++)
        for (int g = 0; g < 3; g++)
            for (int mode = 0; mode < 3; mode++) {
                amp_dtype h_dt = (g + mode) % 2 ? AMP_F16 : AMP_BF16;
                int64_t n = list == 0 ? N_MIXED : N_MANY;
                const int64_t *numel = list == 0 ? mixed_numel : many_numel;
                for (int c = 0; c < 3; c++) check_one(0, c, n, numel, dts[g], mode, h_dt);
                for (int c = 0; c < 2; c++) check_one(1, c, n, numel, dts[g], mode, h_dt);
            }
    /* Two lists of different dtypes, one call each (an O3 model with f32 batch norm). */
    bank a = bank_make(N_MIXED, mixed_numel, AMP_F16, MODE_O3, AMP_F16, 2, 1.0f);
    bank b = bank_make(N_MANY, many_numel, AMP_F32, MODE_F32, AMP_F32, 2, 1.0f);
    bank a2 = bank_clone(&a), b2 = bank_clone(&b);
    amp_opt_tensors ta = bank_list(&a), tb = bank_list(&b);
    CHECK_OK(amp_cpu_adam_multi(amp_cpu_device(), &adam_cases[1], &ta, NULL));
    CHECK_OK(amp_cpu_adam_multi(amp_cpu_device(), &adam_cases[1], &tb, NULL));
    adam_per_tensor(&adam_cases[1], &a2);
    adam_per_tensor(&adam_cases[1], &b2);
    CHECK(bank_same(&a, &a2) && bank_same(&b, &b2));
    bank_free(&a), bank_free(&b), bank_free(&a2), bank_free(&b2);
}

/* ---- LAMB. ----------------------------------------------------------------------------------- */

static amp_lamb_desc lamb_desc_of(const lamb_ref_case *rc, int64_t step) {
    return (amp_lamb_desc){.lr = rc->lr, .beta1 = rc->beta1, .beta2 = rc->beta2, .eps = rc->eps,
                           .weight_decay = rc->weight_decay, .decoupled = rc->decoupled,
                           .bias_correction = rc->bias_correction,
                           .grad_averaging = rc->grad_averaging, .adapt_all = rc->adapt_all,
                           .max_grad_norm = rc->max_grad_norm, .step = step};
}

/* The largest error of got[] against ref[] over one tensor, in units of the tensor's scale. */
static double tensor_err(const float *got, const double *ref, int64_t n) {
    double big = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) big = fmax(big, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)got[i] - ref[i]));
    return big > 0.0 ? worst / big : worst;
}

/* Four steps of one reference case; mode MODE_F32 or MODE_O2 (half copy of h_dt). */
static double lamb_ref_run(const lamb_ref_case *rc, int mode, amp_dtype h_dt) {
    int64_t numel[LAMB_REF_N_TENSORS];
    for (int k = 0; k < LAMB_REF_N_TENSORS; k++) numel[k] = lamb_ref_numel[k];
    bank b = bank_make(LAMB_REF_N_TENSORS, numel, AMP_F32, mode, h_dt, 2, 1.0f);
    for (int k = 0, off = 0; k < LAMB_REF_N_TENSORS; off += lamb_ref_numel[k++]) {
        memcpy(b.param[k], lamb_ref_init + off, (size_t)numel[k] * 4);
        memset(b.s1[k], 0, (size_t)numel[k] * 4);
        memset(b.s2[k], 0, (size_t)numel[k] * 4);
    }
    double worst = 0.0;
    for (int step = 1; step <= LAMB_REF_N_STEPS; step++) {
        for (int k = 0, off = 0; k < LAMB_REF_N_TENSORS; off += lamb_ref_numel[k++])
            memcpy(b.grad[k], lamb_ref_grad[step - 1] + off, (size_t)numel[k] * 4);
        bank before = bank_clone(&b);
        amp_lamb_desc d = lamb_desc_of(rc, step);
        amp_opt_tensors t = bank_list(&b);
        CHECK_OK(amp_cpu_lamb_multi(amp_cpu_device(), &d, &t, NULL));
        for (int k = 0, off = 0; k < LAMB_REF_N_TENSORS; off += lamb_ref_numel[k++]) {
            double e = fmax(tensor_err(b.param[k], rc->param[step - 1] + off, numel[k]),
                            fmax(tensor_err(b.s1[k], rc->exp_avg[step - 1] + off, numel[k]),
                                 tensor_err(b.s2[k], rc->exp_avg_sq[step - 1] + off, numel[k])));
            CHECK_MSG(e <= LAMB_TOL, "lamb %s (%s) step %d tensor %d: error %.3g of scale",
                      rc->name, mode_name[mode], step, k, e);
            worst = fmax(worst, e);
            /* the conventions, exactly: no gradient and no decay, no move and no moments */
            if (k == LAMB_REF_ZERO_GRAD && rc->weight_decay == 0.0f) {
                CHECK(memcmp(b.param[k], before.param[k], (size_t)numel[k] * 4) == 0);
                for (int64_t j = 0; j < numel[k]; j++) CHECK(b.s1[k][j] == 0 && b.s2[k][j] == 0);
            }
            for (int64_t j = 0; b.half && j < numel[k]; j++) {
                uint16_t want = h_dt == AMP_F16 ? amp_f32_to_f16_bits(b.param[k][j])
                                                : amp_f32_to_bf16_bits(b.param[k][j]);
                CHECK(((uint16_t *)b.half[k])[j] == want);
            }
        }
        CHECK(bank_guards_ok(&b));
        bank_free(&before);
    }
    bank_free(&b);
    return worst;
}

static void test_lamb_ref(void) {
    double worst = 0.0;
    for (int i = 0; i < LAMB_REF_N_CASES; i++) {
        double e = lamb_ref_run(&lamb_ref_cases[i], MODE_F32, AMP_F32);
        printf("lamb_multi %-24s largest error %.3g of scale (tolerance %g)\n",
               lamb_ref_cases[i].name, e, LAMB_TOL);
        worst = fmax(worst, e);
        lamb_ref_run(&lamb_ref_cases[i], MODE_O2, i % 2 ? AMP_F16 : AMP_BF16);
    }
    CHECK(worst > 0.0); /* f32 against float64 cannot agree everywhere: the comparison ran */
}

/* LAMB in plain loops over kernels/math/lamb.h, u stored between the stages; tensor i at step
 * steps[i] + 1 when steps is given, else d->step. */
static void lamb_plain(const amp_lamb_desc *d, bank *b, const int64_t *steps) {
    float gs = d->grad_scale == 0.0f ? 1.0f : d->grad_scale;
    float divisor = 1.0f;
    if (d->max_grad_norm > 0.0f) {
        double s = 0.0;
        for (int64_t i = 0; i < b->n; i++)
            for (int64_t j = 0; j < b->numel[i]; j++) {
                float g = test_load(b->grad[i], b->g_dt, j) * gs;
                s += (double)g * (double)g;
            }
        divisor = amp_lamb_clip_divisor((float)sqrt(s), d->max_grad_norm);
    }
    for (int64_t i = 0; i < b->n; i++) {
        amp_lamb_coefs c = amp_lamb_coefs_make(d->beta1, d->beta2, d->eps, d->weight_decay,
                                               d->decoupled, d->bias_correction,
                                               d->grad_averaging, steps ? steps[i] + 1 : d->step);
        int64_t n = b->numel[i];
        float *x = malloc((size_t)n * 4 + 4), *u = malloc((size_t)n * 4 + 4);
        for (int64_t j = 0; j < n; j++)
            x[j] = b->param ? b->param[i][j] : test_load(b->half[i], b->h_dt, j);
        double sx = 0.0, su = 0.0;
        for (int64_t j = 0; j < n; j++) {
            float g = test_load(b->grad[i], b->g_dt, j) * gs;
            u[j] = amp_lamb_stage1_elem(&c, divisor, x[j], g, &b->s1[i][j], &b->s2[i][j]);
            sx += (double)x[j] * (double)x[j];
            su += (double)u[j] * (double)u[j];
        }
        float step = amp_lamb_step_size(d->lr, (float)sqrt(sx), (float)sqrt(su), d->weight_decay,
                                        d->adapt_all);
        for (int64_t j = 0; j < n; j++) {
            amp_lamb_stage2_elem(step, &x[j], u[j]);
            if (b->param) b->param[i][j] = x[j];
            if (b->half) test_store(b->half[i], b->h_dt, j, x[j]);
        }
        free(x), free(u);
    }
}

static const amp_lamb_desc lamb_cases[] = {
    {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = 0.01f,
     .decoupled = true, .bias_correction = true, .grad_averaging = true, .max_grad_norm = 1.0f,
     .step = 2, .grad_scale = 1.0f / 256.0f},
    {.lr = 2e-2f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-4f, .weight_decay = 0.1f,
     .decoupled = false, .adapt_all = true, .max_grad_norm = 0.0f, .step = 5},
    {.lr = 5e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .bias_correction = true,
     .grad_averaging = true, .max_grad_norm = 1e9f, .step = 1},
};

static void test_lamb_plain(void) {
    for (int list = 0; list < 2; list++)
        for (int g = 0; g < 3; g++)
            for (int mode = 0; mode < 3; mode++)
                for (int c = 0; c < 3; c++) {
                    amp_dtype h_dt = (g + mode + c) % 2 ? AMP_F16 : AMP_BF16;
                    float gs = lamb_cases[c].grad_scale;
                    bank a = list == 0 ? bank_make(N_MIXED, mixed_numel, dts[g], mode, h_dt, 2,
                                                   gs > 0.0f ? 1.0f / gs : 1.0f)
                                       : bank_make(N_MANY, many_numel, dts[g], mode, h_dt, 2,
                                                   gs > 0.0f ? 1.0f / gs : 1.0f);
                    bank b = bank_clone(&a);
                    amp_opt_tensors t = bank_list(&a);
                    CHECK_OK(amp_cpu_lamb_multi(amp_cpu_device(), &lamb_cases[c], &t, NULL));
                    lamb_plain(&lamb_cases[c], &b, NULL);
                    CHECK_MSG(bank_same(&a, &b) && bank_guards_ok(&a),
                              "lamb case %d list %d grad %s %s: multi != plain loop", c, list,
                              amp_dtype_name(dts[g]), mode_name[mode]);
                    bank_free(&a), bank_free(&b);
                }
}

/* ---- found_inf, the device-scalar scale, threads. ------------------------------------------- */

/* Runs optimizer op (0 SGD, 1 Adam, 2 LAMB) case 0 over b. */
static amp_status run_op(int op, bank *b, float desc_scale, const amp_step_scalars *sc) {
    amp_opt_tensors t = bank_list(b);
    if (op == 0) {
        amp_sgd_desc d = sgd_cases[0];
        d.grad_scale = desc_scale;
        return amp_cpu_sgd_multi(amp_cpu_device(), &d, &t, sc);
    }
    if (op == 1) {
        amp_adam_desc d = adam_cases[0];
        d.grad_scale = desc_scale;
        return amp_cpu_adam_multi(amp_cpu_device(), &d, &t, sc);
    }
    amp_lamb_desc d = lamb_cases[0];
    d.grad_scale = desc_scale;
    return amp_cpu_lamb_multi(amp_cpu_device(), &d, &t, sc);
}

static void test_scalars_and_threads(void) {
    for (int op = 0; op < 3; op++)
        for (int mode = 0; mode < 3; mode++) {
            bank orig = bank_make(N_MIXED, mixed_numel, AMP_BF16, mode, AMP_F16, op == 0 ? 1 : 2,
                                  512.0f);
            const float gs = 1.0f / 512.0f, one = 1.0f, zero = 0.0f, nan = NAN;
            /* found_inf set: nothing written, whatever the scale scalar holds */
            bank a = bank_clone(&orig);
            amp_step_scalars skip = {.grad_scale = &nan, .found_inf = &one};
            CHECK_OK(run_op(op, &a, gs, &skip));
            CHECK_MSG(bank_same(&a, &orig), "op %d %s: found_inf set, but bytes changed", op,
                      mode_name[mode]);
            /* the scale from the scalar (the descriptor's is then ignored) == from desc */
            bank b = bank_clone(&orig);
            amp_step_scalars dev = {.grad_scale = &gs, .found_inf = &zero};
            CHECK_OK(run_op(op, &a, gs, NULL));
            CHECK_OK(run_op(op, &b, 3.0f, &dev));
            CHECK_MSG(bank_same(&a, &b), "op %d %s: device-scalar grad_scale differs", op,
                      mode_name[mode]);
            CHECK(!bank_same(&a, &orig));
            /* 1 and 2 threads */
            bank c = bank_clone(&orig);
            omp_set_num_threads(1);
            CHECK_OK(run_op(op, &c, gs, NULL));
            omp_set_num_threads(2);
            CHECK_MSG(bank_same(&a, &c), "op %d %s: 1 and 2 threads differ", op, mode_name[mode]);
            bank_free(&orig), bank_free(&a), bank_free(&b), bank_free(&c);
        }
}

/* A device scale of 0 multiplies the gradients by 0, as the contract and the CUDA kernels read
 * it; only the descriptor's 0 means "none". Plain SGD without decay then leaves the parameters. */
static void test_scalar_zero(void) {
    bank a = bank_make(N_MIXED, mixed_numel, AMP_F32, MODE_F32, AMP_F32, 0, 1.0f);
    bank b = bank_clone(&a), orig = bank_clone(&a);
    amp_opt_tensors ta = bank_list(&a), tb = bank_list(&b);
    const float zero = 0.0f;
    amp_step_scalars sc = {.grad_scale = &zero};
    CHECK_OK(amp_cpu_sgd_multi(amp_cpu_device(), &sgd_cases[2], &ta, &sc));
    CHECK(bank_same(&a, &orig));
    CHECK_OK(amp_cpu_sgd_multi(amp_cpu_device(), &sgd_cases[2], &tb,
                               NULL)); /* desc.grad_scale 0: none */
    CHECK(!bank_same(&b, &orig));
    bank_free(&a), bank_free(&b), bank_free(&orig);
}

/* Per-tensor step counts (amp_opt_tensors.steps): tensor i at step steps[i] + 1 (SGD: first
 * step when 0), the descriptor's step not read, each non-empty tensor's count advanced, an empty
 * tensor's neither read nor touched, and nothing advanced on a skipped step. */
static void test_step_counts(void) {
    for (int op = 0; op < 3; op++)
        for (int mode = 0; mode < 3; mode++) {
            bank orig = bank_make(N_MIXED, mixed_numel, AMP_F16, mode, AMP_BF16, op == 0 ? 1 : 2,
                                  1024.0f);
            int64_t steps0[N_MIXED], steps[N_MIXED];
            for (int64_t i = 0; i < N_MIXED; i++) steps0[i] = i % 3 == 1 ? 0 : 2 * i + 1;
            steps0[0] = -5; /* an empty tensor's count is not read */
            memcpy(steps, steps0, sizeof steps);
            bank multi = bank_clone(&orig), ref = bank_clone(&orig);
            amp_opt_tensors t = bank_list(&multi);
            t.steps = steps;
            const float one = 1.0f;
            amp_step_scalars skip = {.found_inf = &one};
            if (op == 0) {
                amp_sgd_desc d = sgd_cases[0];
                d.first_step = true; /* not read */
                CHECK_OK(amp_cpu_sgd_multi(amp_cpu_device(), &d, &t, &skip));
                CHECK(memcmp(steps, steps0, sizeof steps) == 0 && bank_same(&multi, &orig));
                CHECK_OK(amp_cpu_sgd_multi(amp_cpu_device(), &d, &t, NULL));
                for (int64_t i = 0; i < N_MIXED; i++) {
                    amp_sgd_desc di = sgd_cases[0];
                    di.first_step = steps0[i] == 0;
                    di.half_copy = ref.half ? ref.half[i] : NULL;
                    di.half_dtype = ref.h_dt;
                    CHECK_OK(one_tensor_sgd(&di, ref.numel[i], ref.param ? ref.param[i] : NULL,
                                                ref.grad[i], ref.g_dt, ref.s1[i]));
                }
            } else if (op == 1) {
                amp_adam_desc d = adam_cases[0];
                d.step = 0; /* not read */
                CHECK_OK(amp_cpu_adam_multi(amp_cpu_device(), &d, &t, &skip));
                CHECK(memcmp(steps, steps0, sizeof steps) == 0 && bank_same(&multi, &orig));
                CHECK_OK(amp_cpu_adam_multi(amp_cpu_device(), &d, &t, NULL));
                for (int64_t i = 0; i < N_MIXED; i++) {
                    amp_adam_desc di = adam_cases[0];
                    di.step = ref.numel[i] > 0 ? steps0[i] + 1 : 1;
                    di.half_copy = ref.half ? ref.half[i] : NULL;
                    di.half_dtype = ref.h_dt;
                    CHECK_OK(one_tensor_adam(&di, ref.numel[i],
                                                 ref.param ? ref.param[i] : NULL, ref.grad[i],
                                                 ref.g_dt, ref.s1[i], ref.s2[i]));
                }
            } else {
                amp_lamb_desc d = lamb_cases[0];
                d.step = 0; /* not read */
                CHECK_OK(amp_cpu_lamb_multi(amp_cpu_device(), &d, &t, &skip));
                CHECK(memcmp(steps, steps0, sizeof steps) == 0 && bank_same(&multi, &orig));
                CHECK_OK(amp_cpu_lamb_multi(amp_cpu_device(), &d, &t, NULL));
                lamb_plain(&d, &ref, steps0);
            }
            CHECK_MSG(bank_same(&multi, &ref), "op %d %s: per-tensor steps differ", op,
                      mode_name[mode]);
            for (int64_t i = 0; i < N_MIXED; i++)
                CHECK(steps[i] == steps0[i] + (mixed_numel[i] > 0));
            bank_free(&orig), bank_free(&multi), bank_free(&ref);
        }
}

/* ---- Loss scaler. ---------------------------------------------------------------------------- */

static void test_unscale_multi(void) {
    for (int list = 0; list < 2; list++)
        for (int g = 0; g < 3; g++) {
            amp_dtype dt = dts[g];
            int64_t n = list == 0 ? N_MIXED : N_MANY;
            const int64_t *numel = list == 0 ? mixed_numel : many_numel;
            bank a = bank_make(n, numel, dt, MODE_F32, AMP_F32, 0, 1000.0f); /* out: param */
            bank b = bank_clone(&a);
            const float inv = 1.0f / 1024.0f;
            float fa = 0.25f, fb = 0.25f; /* a clean list leaves the flag as it is */
            CHECK_OK(amp_cpu_unscale_multi(amp_cpu_device(), dt, n, numel,
                                           (const void *const *)a.grad, inv, a.param, &fa, NULL));
            for (int64_t i = 0; i < n; i++)
                CHECK_OK(amp_cpu_unscale(amp_cpu_device(), dt, numel[i], b.grad[i], inv, b.param[i],
                                         &fb));
            CHECK(bank_same(&a, &b) && bank_guards_ok(&a) && fa == 0.25f && fb == 0.25f);
            /* an inf in the last tensor (in the last launch of the long list), then a NaN in the
             * middle of a multi-chunk tensor: the flag is set, values as per tensor */
            int64_t at_t = n - 1, at_j = numel[n - 1] - 1;
            for (int k = 0; k < 2; k++) {
                if (k == 1 && list == 0) at_t = 6, at_j = 65537;
                test_store(a.grad[at_t], dt, at_j, k == 0 ? INFINITY : NAN);
                test_store(b.grad[at_t], dt, at_j, k == 0 ? INFINITY : NAN);
                fa = 0.0f, fb = 0.0f;
                float dev = inv;
                amp_step_scalars sc = {.grad_scale = &dev, .found_inf = &(float){1.0f}};
                /* the scale from the scalar; found_inf in scalars is not a skip here */
                CHECK_OK(amp_cpu_unscale_multi(amp_cpu_device(), dt, n, numel,
                                               (const void *const *)a.grad, 7.0f, a.param, &fa,
                                               &sc));
                for (int64_t i = 0; i < n; i++)
                    CHECK_OK(amp_cpu_unscale(amp_cpu_device(), dt, numel[i], b.grad[i], inv,
                                             b.param[i], &fb));
                CHECK(fa == 1.0f && fb == 1.0f && bank_same(&a, &b));
            }
            bank_free(&a), bank_free(&b);
        }
    /* f32 in place, and 1 vs 2 threads */
    bank a = bank_make(N_MIXED, mixed_numel, AMP_F32, MODE_F32, AMP_F32, 0, 1000.0f);
    bank b = bank_clone(&a), orig = bank_clone(&a);
    float f = 0.0f, f2 = 0.0f;
    omp_set_num_threads(1);
    CHECK_OK(amp_cpu_unscale_multi(amp_cpu_device(), AMP_F32, N_MIXED, mixed_numel,
                                   (const void *const *)a.grad, 0.5f, (float *const *)a.grad, &f,
                                   NULL));
    omp_set_num_threads(2);
    CHECK_OK(amp_cpu_unscale_multi(amp_cpu_device(), AMP_F32, N_MIXED, mixed_numel,
                                   (const void *const *)b.grad, 0.5f, (float *const *)b.grad, &f2,
                                   NULL));
    CHECK(bank_same(&a, &b) && bank_guards_ok(&a) && f == 0.0f && f2 == 0.0f);
    int64_t wrong = 0;
    for (int64_t i = 0; i < N_MIXED; i++)
        for (int64_t j = 0; j < mixed_numel[i]; j++)
            wrong += ((float *)a.grad[i])[j] != ((float *)orig.grad[i])[j] * 0.5f;
    CHECK_MSG(wrong == 0, "unscale_multi in place: %lld values wrong", (long long)wrong);
    bank_free(&a), bank_free(&b), bank_free(&orig);
    CHECK_OK(amp_cpu_unscale_multi(amp_cpu_device(), AMP_F16, 0, NULL, NULL, 1.0f, NULL, &f, NULL));
}

static void test_nonfinite_multi(void) {
    for (int g = 0; g < 3; g++) {
        amp_dtype dt = dts[g];
        bank a = bank_make(N_MANY, many_numel, dt, MODE_F32, AMP_F32, 0, 1000.0f);
        float found = 0.5f;
        CHECK_OK(amp_cpu_nonfinite_multi(amp_cpu_device(), dt, N_MANY, many_numel,
                                         (const void *const *)a.grad, &found));
        CHECK(found == 0.5f);
        const int64_t where[] = {0, 60, N_MANY - 1}; /* first, middle, the last launch */
        for (int w = 0; w < 3; w++)
            for (int s = 0; s < 3; s++) {
                int64_t t = where[w], j = many_numel[t] - 1;
                float keep = test_load(a.grad[t], dt, j);
                test_store(a.grad[t], dt, j, s == 0 ? INFINITY : s == 1 ? -INFINITY : NAN);
                found = 0.0f;
                CHECK_OK(amp_cpu_nonfinite_multi(amp_cpu_device(), dt, N_MANY, many_numel,
                                                 (const void *const *)a.grad, &found));
                CHECK_MSG(found == 1.0f, "nonfinite_multi %s: tensor %lld not flagged",
                          amp_dtype_name(dt), (long long)t);
                test_store(a.grad[t], dt, j, keep);
                CHECK_OK(amp_cpu_nonfinite_multi(amp_cpu_device(), dt, N_MANY, many_numel,
                                                 (const void *const *)a.grad, &found));
                CHECK(found == 1.0f); /* never cleared */
            }
        CHECK(bank_guards_ok(&a));
        bank_free(&a);
    }
}

static void test_sum_squares_multi(void) {
    for (int list = 0; list < 2; list++)
        for (int g = 0; g < 3; g++) {
            amp_dtype dt = dts[g];
            int64_t n = list == 0 ? N_MIXED : N_MANY;
            const int64_t *numel = list == 0 ? mixed_numel : many_numel;
            bank a = bank_make(n, numel, dt, MODE_F32, AMP_F32, 0, 100.0f);
            long double ref = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < numel[i]; j++) {
                    long double v = test_load(a.grad[i], dt, j);
                    ref += v * v;
                }
            float got = -1.0f, t1 = -1.0f;
            CHECK_OK(amp_cpu_sum_squares_multi(amp_cpu_device(), dt, n, numel,
                                               (const void *const *)a.grad, &got, NULL));
            double want = (double)ref;
            CHECK_MSG(fabs(got - want) <= 0x1p-24 * want * 1.0001,
                      "sum_squares_multi %s list %d: %.9g vs %.12g", amp_dtype_name(dt), list,
                      (double)got, want);
            omp_set_num_threads(1);
            CHECK_OK(amp_cpu_sum_squares_multi(amp_cpu_device(), dt, n, numel,
                                               (const void *const *)a.grad, &t1, NULL));
            omp_set_num_threads(2);
            CHECK(amp_f32_bits(t1) == amp_f32_bits(got));
            /* out_lo carries what the rounding to f32 dropped: out + out_lo is the f64 total
             * to well within an f32 ulp of out's (to f32's rounding of the remainder). */
            float lo = -1.0f;
            CHECK_OK(amp_cpu_sum_squares_multi(amp_cpu_device(), dt, n, numel,
                                               (const void *const *)a.grad, &t1, &lo));
            double two = (double)t1 + (double)lo;
            CHECK_MSG(amp_f32_bits(t1) == amp_f32_bits(got) && fabs(lo) <= 0x1p-24 * want &&
                      fabsl((long double)two - ref) <= 0x1p-44L * ref,
                      "sum_squares_multi %s list %d: out %.9g + lo %.9g = %.17g vs %.17Lg",
                      amp_dtype_name(dt), list, (double)t1, (double)lo, two, ref);
            bank_free(&a);
        }
    float out = -1.0f, v[3] = {1.0f, NAN, 2.0f};
    const void *x[1] = {v};
    int64_t nv[1] = {3};
    CHECK_OK(amp_cpu_sum_squares_multi(amp_cpu_device(), AMP_F32, 1, nv, x, &out, NULL));
    CHECK(isnan(out));
    CHECK_OK(amp_cpu_sum_squares_multi(amp_cpu_device(), AMP_F32, 0, NULL, NULL, &out, NULL));
    CHECK(out == 0.0f);
}

/* ---- Empty lists, the table, errors. -------------------------------------------------------- */

static void test_empty_and_table(void) {
    amp_opt_tensors none = {.n = 0, .grad_dtype = AMP_F16, .param = NULL,
                            .half = (void *const *)&none, .half_dtype = AMP_BF16};
    CHECK_OK(amp_cpu_sgd_multi(amp_cpu_device(), &sgd_cases[0], &none, NULL));
    CHECK_OK(amp_cpu_adam_multi(amp_cpu_device(), &adam_cases[0], &none, NULL));
    CHECK_OK(amp_cpu_lamb_multi(amp_cpu_device(), &lamb_cases[0], &none, NULL));
    int64_t zeros[3] = {0, 0, 0};
    bank e = bank_make(3, zeros, AMP_F32, MODE_O2, AMP_F16, 2, 1.0f); /* all pointers NULL */
    for (int op = 0; op < 3; op++) CHECK_OK(run_op(op, &e, 0.0f, NULL));
    float found = 0.0f, out = -1.0f;
    CHECK_OK(amp_cpu_nonfinite_multi(amp_cpu_device(), AMP_F32, 3, zeros,
                                     (const void *const *)e.grad, &found));
    CHECK_OK(amp_cpu_sum_squares_multi(amp_cpu_device(), AMP_F32, 3, zeros,
                                       (const void *const *)e.grad, &out, NULL));
    CHECK(found == 0.0f && out == 0.0f);
    bank_free(&e);

    const amp_backend *cpu = amp_backend_cpu();
    CHECK(cpu->k.sgd_multi == amp_cpu_sgd_multi && cpu->k.adam_multi == amp_cpu_adam_multi &&
          cpu->k.lamb_multi == amp_cpu_lamb_multi && cpu->k.unscale_multi == amp_cpu_unscale_multi &&
          cpu->k.nonfinite_multi == amp_cpu_nonfinite_multi &&
          cpu->k.sum_squares_multi == amp_cpu_sum_squares_multi);
}

static void test_errors(void) {
    const int64_t numel[3] = {5, 6, 7};
    bank b = bank_make(3, numel, AMP_F16, MODE_O2, AMP_BF16, 2, 1.0f);
    bank orig = bank_clone(&b);
    amp_opt_tensors t = bank_list(&b), u;
    const amp_sgd_desc *sgd = &sgd_cases[0];
    const amp_adam_desc *adam = &adam_cases[0];
    const amp_lamb_desc *lamb = &lamb_cases[0];
    CHECK_FAILS(amp_cpu_sgd_multi(amp_cpu_device(), NULL, &t, NULL), AMP_ERR_INVALID_ARG, "'d'");
    CHECK_FAILS(amp_cpu_adam_multi(amp_cpu_device(), adam, NULL, NULL), AMP_ERR_INVALID_ARG,
                "amp_cpu_adam_multi: the tensor list is NULL");
    u = t, u.n = -1;
    CHECK_FAILS(amp_cpu_sgd_multi(amp_cpu_device(), sgd, &u, NULL), AMP_ERR_INVALID_ARG, "n = -1");
    u = t, u.grad_dtype = AMP_I32;
    CHECK_FAILS(amp_cpu_lamb_multi(amp_cpu_device(), lamb, &u, NULL), AMP_ERR_DTYPE,
                "amp_cpu_lamb_multi: gradient dtype i32");
    u = t, u.half_dtype = AMP_F32;
    CHECK_FAILS(amp_cpu_adam_multi(amp_cpu_device(), adam, &u, NULL), AMP_ERR_DTYPE,
                "half_dtype f32");
    u = t, u.param = NULL, u.half = NULL;
    CHECK_FAILS(amp_cpu_sgd_multi(amp_cpu_device(), sgd, &u, NULL), AMP_ERR_INVALID_ARG,
                "no parameters");
    u = t, u.numel = NULL;
    CHECK_FAILS(amp_cpu_sgd_multi(amp_cpu_device(), sgd, &u, NULL), AMP_ERR_INVALID_ARG,
                "numel is NULL");
    u = t, u.grad = NULL;
    CHECK_FAILS(amp_cpu_lamb_multi(amp_cpu_device(), lamb, &u, NULL), AMP_ERR_INVALID_ARG,
                "grad is NULL");
    u = t, u.state1 = NULL;
    CHECK_FAILS(amp_cpu_sgd_multi(amp_cpu_device(), sgd, &u, NULL), AMP_ERR_INVALID_ARG,
                "momentum buffer");
    u = t, u.state2 = NULL;
    CHECK_FAILS(amp_cpu_adam_multi(amp_cpu_device(), adam, &u, NULL), AMP_ERR_INVALID_ARG,
                "exp_avg_sq");
    int64_t bad_numel[3] = {5, -3, 7};
    u = t, u.numel = bad_numel;
    CHECK_FAILS(amp_cpu_adam_multi(amp_cpu_device(), adam, &u, NULL), AMP_ERR_INVALID_ARG,
                "tensor 1 has numel -3");
    /* a bad last tensor: the first two must not have moved */
    void *grads[3] = {b.grad[0], b.grad[1], NULL};
    u = t, u.grad = grads;
    CHECK_FAILS(amp_cpu_sgd_multi(amp_cpu_device(), sgd, &u, NULL), AMP_ERR_INVALID_ARG,
                "tensor 2 (7 elements)");
    float *s1[3] = {b.s1[0], NULL, b.s1[2]};
    u = t, u.state1 = s1;
    CHECK_FAILS(amp_cpu_lamb_multi(amp_cpu_device(), lamb, &u, NULL), AMP_ERR_INVALID_ARG,
                "has no exp_avg (NULL)");
    amp_adam_desc ad = *adam;
    ad.step = 0;
    CHECK_FAILS(amp_cpu_adam_multi(amp_cpu_device(), &ad, &t, NULL), AMP_ERR_INVALID_ARG,
                "step = 0");
    ad = *adam, ad.grad_scale = NAN;
    CHECK_FAILS(amp_cpu_adam_multi(amp_cpu_device(), &ad, &t, NULL), AMP_ERR_INVALID_ARG,
                "grad_scale = nan");
    ad = *adam, ad.half_copy = b.half[0];
    CHECK_FAILS(amp_cpu_adam_multi(amp_cpu_device(), &ad, &t, NULL), AMP_ERR_INVALID_ARG,
                "half_copy is set");
    const float neg = -1.0f;
    amp_step_scalars sc = {.grad_scale = &neg};
    CHECK_FAILS(amp_cpu_sgd_multi(amp_cpu_device(), sgd, &t, &sc), AMP_ERR_INVALID_ARG,
                "*scalars->grad_scale = -1");
    amp_lamb_desc ld = *lamb;
    ld.max_grad_norm = NAN;
    CHECK_FAILS(amp_cpu_lamb_multi(amp_cpu_device(), &ld, &t, NULL), AMP_ERR_INVALID_ARG,
                "max_grad_norm is NaN");
    ld = *lamb, ld.step = -2;
    CHECK_FAILS(amp_cpu_lamb_multi(amp_cpu_device(), &ld, &t, NULL), AMP_ERR_INVALID_ARG,
                "step = -2");
    int64_t steps[3] = {0, 4, -1};
    u = t, u.steps = steps;
    CHECK_FAILS(amp_cpu_adam_multi(amp_cpu_device(), adam, &u, NULL), AMP_ERR_INVALID_ARG,
                "tensor 2 has step count -1");
    CHECK(steps[0] == 0 && steps[1] == 4);
    CHECK(bank_same(&b, &orig)); /* no failing call wrote anything */

    /* the loss scaler's entries */
    float *out[3] = {b.param[0], b.param[1], b.param[2]}, found = 0.0f, sum = 0.0f;
    const void *const *g = (const void *const *)b.grad;
    CHECK_FAILS(
            amp_cpu_unscale_multi(amp_cpu_device(), AMP_I32, 3, numel, g, 1.0f, out, &found, NULL),
            AMP_ERR_DTYPE, "amp_cpu_unscale_multi: dtype i32");
    CHECK_FAILS(
            amp_cpu_unscale_multi(amp_cpu_device(), AMP_F16, 3, numel, g, 0.0f, out, &found, NULL),
            AMP_ERR_INVALID_ARG, "inv_scale = 0");
    CHECK_FAILS(
            amp_cpu_unscale_multi(amp_cpu_device(), AMP_F16, 3, numel, g, 1.0f, out, NULL, NULL),
            AMP_ERR_INVALID_ARG, "'found_inf'");
    CHECK_FAILS(
            amp_cpu_unscale_multi(amp_cpu_device(), AMP_F16, 3, numel, g, 1.0f, NULL, &found, NULL),
            AMP_ERR_INVALID_ARG, "out is NULL");
    CHECK_FAILS(
            amp_cpu_unscale_multi(amp_cpu_device(), AMP_F16, -1, numel, g, 1.0f, out, &found, NULL),
            AMP_ERR_INVALID_ARG, "n = -1");
    CHECK_FAILS(
            amp_cpu_unscale_multi(amp_cpu_device(), AMP_F16, 3, numel, g, 1.0f, out, &found, &sc),
            AMP_ERR_INVALID_ARG, "*scalars->grad_scale = -1");
    float *overlap[3] = {b.param[0], (float *)b.grad[1], b.param[2]}; /* f16 grad under f32 out */
    CHECK_FAILS(amp_cpu_unscale_multi(amp_cpu_device(), AMP_F16, 3, numel, g, 1.0f, overlap, &found,
                                      NULL),
                AMP_ERR_INVALID_ARG, "tensor 1: out overlaps grad");
    CHECK_FAILS(amp_cpu_nonfinite_multi(amp_cpu_device(), AMP_F32, 3, numel, NULL, &found),
                AMP_ERR_INVALID_ARG, "amp_cpu_nonfinite_multi: x is NULL");
    const void *xs[3] = {b.grad[0], NULL, b.grad[2]};
    CHECK_FAILS(amp_cpu_nonfinite_multi(amp_cpu_device(), AMP_F16, 3, numel, xs, &found),
                AMP_ERR_INVALID_ARG, "tensor 1 (6 elements): x[1] is NULL");
    CHECK_FAILS(amp_cpu_sum_squares_multi(amp_cpu_device(), AMP_F16, 3, numel, g, NULL, NULL),
                AMP_ERR_INVALID_ARG, "amp_cpu_sum_squares_multi: argument 'out'");
    CHECK_FAILS(amp_cpu_sum_squares_multi(amp_cpu_device(), AMP_F16, 3, bad_numel, g, &sum, NULL),
                AMP_ERR_INVALID_ARG, "tensor 1 has numel -3");
    CHECK(bank_same(&b, &orig) && found == 0.0f && sum == 0.0f);
    bank_free(&b), bank_free(&orig);
}

int main(void) {
    test_rng_seed(0x6a09e667f3bcc909ull);
    for (int i = 0; i < N_MANY; i++) /* tensor 40 empty */
        many_numel[i] = i == 40 ? 0 : 1 + (int64_t)(test_uniform() * 3000);
    omp_set_num_threads(2);
    test_equals_per_tensor();
    test_lamb_ref();
    test_lamb_plain();
    test_scalars_and_threads();
    test_step_counts();
    test_scalar_zero();
    test_unscale_multi();
    test_nonfinite_multi();
    test_sum_squares_multi();
    test_empty_and_table();
    test_errors();
    return test_summary("test_optim_multi");
}
