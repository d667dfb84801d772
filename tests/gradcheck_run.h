/* The gradient-check runner of the nn ops tests (test_gradcheck.c, test_gradcheck_fused.c).
 *
 * A case is a library forward (lib) and an independent float64 forward (ref, gradcheck_ref.h)
 * over named leaves. gc_run makes the leaves from a seeded generator on the context's backend,
 * runs the library in f32, and checks: the forward against the reference; the gradient of
 * L = sum_i r_i * y_i (fixed random r, built in the library as mean(y * (n r)), so amp_backward
 * also runs through mul and mean) against float64 central differences of the reference
 * objective; that a second backward without zero_grad accumulates (2x) and that after
 * amp_tensor_zero_grad the next one overwrites.
 *
 * Tolerances: f32 sums over the few hundred terms used here err by ~1e-6 relative; the central
 * difference of the float64 reference (h = 1e-6 relative) by ~1e-9. An elementwise bound of 1e-3
 * (relative to |n| plus 1% of the largest |n| of the tensor) and 1e-4 on the norm of the error
 * leave two orders of margin, while a wrong term, factor, index or transpose shows as >= 1e-2. */
#ifndef AMP_TESTS_GRADCHECK_RUN_H
#define AMP_TESTS_GRADCHECK_RUN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/tensor_internal.h"
#include "gradcheck_ref.h"
#include "test_util.h"

#define GC_MAX_IN 9
#define GC_FWD_TOL 1e-4
#define GC_GRAD_TOL 1e-3
#define GC_NORM_TOL 1e-4
/* A second identical backward must give 2x the first; the kernels are deterministic, so only
 * the rounding of the final addition may differ (it is exact here: g + g). */
#define GC_ACCUM_TOL 1e-6

typedef enum gc_fill {
    GC_UNIFORM,  /* U[lo, hi) */
    GC_AWAY0,    /* random sign, magnitude U[lo, hi): away from relu's kink */
    GC_DISTINCT, /* a permutation of evenly spaced values in [lo, hi): no maxpool ties */
    GC_LABELS,   /* i32 class indices in [0, hi) */
} gc_fill;

typedef struct gc_in {
    const char *name;
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    gc_fill fill;
    double lo, hi;
    bool grad;
    /* set by the runner */
    int64_t numel;
    double *val; /* the f32-rounded values the library got, in float64 */
    amp_tensor *t;
} gc_in;

typedef struct gc_case gc_case;
struct gc_case {
    const char *name;
    amp_status (*lib)(gc_case *c, amp_tensor **y);
    void (*ref)(const gc_case *c, double *y);
    int n_in;
    gc_in in[GC_MAX_IN];
    int y_ndim;
    int64_t y_shape[AMP_MAX_DIMS];
    int kernel, stride, pad; /* conv2d (stride, pad) and maxpool2d */
    float p;                 /* dropout */
    bool rng_saved;          /* dropout: the RNG state of the first draw, replayed each pass */
    amp_rng_state rng;
};

#define T(i) (c->in[i].t)
#define V(i) (c->in[i].val)
#define S(i, d) (c->in[i].shape[d])


/* ---- the runner ---- */

static int64_t gc_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

static void gc_fill_values(gc_in *in, ref_rng *rng) {
    if (in->fill == GC_DISTINCT) {
        int64_t *perm = malloc((size_t)in->numel * sizeof *perm);
        for (int64_t i = 0; i < in->numel; i++) perm[i] = i;
        for (int64_t i = in->numel - 1; i > 0; i--) {
            int64_t j = ref_rng_below(rng, (int)(i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int64_t i = 0; i < in->numel; i++)
            in->val[i] = in->lo + (in->hi - in->lo) * ((double)perm[i] + 0.5) / (double)in->numel;
        free(perm);
        return;
    }
    for (int64_t i = 0; i < in->numel; i++) {
        switch (in->fill) {
        case GC_AWAY0:
            in->val[i] = ref_rng_uniform(rng, in->lo, in->hi) * (ref_rng_below(rng, 2) ? 1 : -1);
            break;
        case GC_LABELS: in->val[i] = ref_rng_below(rng, (int)in->hi); break;
        default: in->val[i] = ref_rng_uniform(rng, in->lo, in->hi); break;
        }
    }
}

static void gc_make_inputs(amp_ctx *ctx, gc_case *c, ref_rng *rng) {
    c->n_in = 0;
    while (c->n_in < GC_MAX_IN && c->in[c->n_in].name) c->n_in++;
    for (int i = 0; i < c->n_in; i++) {
        gc_in *in = &c->in[i];
        in->numel = gc_numel(in->ndim, in->shape);
        in->val = malloc((size_t)in->numel * sizeof *in->val);
        gc_fill_values(in, rng);
        void *host = malloc((size_t)in->numel * 4);
        float *f = host;
        int32_t *l = host;
        for (int64_t j = 0; j < in->numel; j++) {
            if (in->fill == GC_LABELS) l[j] = (int32_t)in->val[j];
            else in->val[j] = f[j] = (float)in->val[j];
        }
        CHECK_OK(amp_tensor_from_host(ctx, in->fill == GC_LABELS ? AMP_I32 : AMP_F32, in->ndim,
                                      in->shape, host, &in->t));
        if (in->grad) CHECK_OK(amp_tensor_set_requires_grad(in->t, true));
        free(host);
    }
}

/* Library a (f32) against reference n (f64): elementwise |a - n| <= tol * (|n| + 1% of
 * max(max |n|, scale)), and ||a - n|| <= norm_tol * (||n|| + 1% of scale per element). `scale` is
 * the magnitude of the other gradients of the same objective: a gradient that is zero in exact
 * arithmetic (a conv bias followed by batch norm) then only needs to be small next to them. */
static void gc_compare(const char *cs, const char *what, const float *a, const double *n,
                       int64_t cnt, double tol, double norm_tol, double scale) {
    double nmax = 0.0, d2 = 0.0, n2 = 0.0, worst = 0.0;
    int64_t wi = 0;
    bool nan = false;
    for (int64_t i = 0; i < cnt; i++) nmax = fmax(nmax, fabs(n[i]));
    double floor = 1e-2 * fmax(nmax, scale) + 1e-30;
    for (int64_t i = 0; i < cnt; i++) {
        double d = fabs((double)a[i] - n[i]), e = d / (fabs(n[i]) + floor);
        if (isnan(e)) nan = true;
        else if (e > worst) worst = e, wi = i;
        d2 += d * d;
        n2 += n[i] * n[i];
    }
    double rel = sqrt(d2) / (sqrt(n2) + 1e-2 * scale * sqrt((double)cnt) + 1e-30);
    CHECK_MSG(!nan && worst <= tol, "%s: %s[%lld]: library %.8g, reference %.8g (error %.3g > %.3g)",
              cs, what, (long long)wi, (double)a[wi], n[wi], worst, tol);
    CHECK_MSG(!nan && rel <= norm_tol, "%s: %s: relative error norm %.3g > %.3g", cs, what, rel,
              norm_tol);
}

static double gc_max_abs(const double *v, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(v[i]));
    return m;
}

/* y = lib(inputs); backward of mean(y * r). Copies y to y_host when not NULL. */
static bool gc_pass(gc_case *c, amp_tensor *r, float *y_host) {
    amp_tensor *y = NULL, *yr = NULL, *loss = NULL;
    amp_status s = c->lib(c, &y);
    CHECK_MSG(s == AMP_OK, "%s: forward: %s", c->name, amp_last_error());
    if (s != AMP_OK) return false;
    bool shape_ok = y->ndim == c->y_ndim;
    for (int d = 0; shape_ok && d < c->y_ndim; d++) shape_ok = y->shape[d] == c->y_shape[d];
    CHECK_MSG(shape_ok, "%s: output has %d dims [%lld, %lld, ...]", c->name, y->ndim,
              (long long)y->shape[0], (long long)y->shape[1]);
    if (!shape_ok) return false;
    if (y_host) CHECK_OK(amp_tensor_to_host(y, y_host, (size_t)y->numel * sizeof *y_host));
    s = amp_mul(y, r, &yr);
    if (s == AMP_OK) s = amp_mean(yr, &loss);
    if (s == AMP_OK) s = amp_backward(loss);
    CHECK_MSG(s == AMP_OK, "%s: objective or backward: %s", c->name, amp_last_error());
    return s == AMP_OK;
}

static double gc_ref_objective(const gc_case *c, const double *r, double *ytmp, int64_t ny) {
    c->ref(c, ytmp);
    double l = 0.0;
    for (int64_t i = 0; i < ny; i++) l += r[i] * ytmp[i];
    return l;
}

/* Float64 central differences of the reference objective with respect to input k. */
static void gc_numeric_grad(gc_case *c, int k, const double *r, double *ytmp, int64_t ny, double *g) {
    double *v = c->in[k].val;
    for (int64_t j = 0; j < c->in[k].numel; j++) {
        double x = v[j], h = 1e-6 * fmax(1.0, fabs(x));
        v[j] = x + h;
        double lp = gc_ref_objective(c, r, ytmp, ny);
        v[j] = x - h;
        double lm = gc_ref_objective(c, r, ytmp, ny);
        v[j] = x;
        g[j] = (lp - lm) / (2.0 * h);
    }
}

/* Every grad-requiring input's gradient against scale * want. */
static void gc_check_scaled(gc_case *c, float *const *want, float scale, const char *when) {
    for (int i = 0; i < c->n_in; i++) {
        if (!want[i]) continue;
        amp_tensor *g;
        amp_status s = amp_tensor_get_grad(c->in[i].t, &g);
        CHECK_MSG(s == AMP_OK, "%s: %s: %s has no gradient", c->name, when, c->in[i].name);
        if (s != AMP_OK) continue;
        int64_t n = c->in[i].numel;
        float *h = malloc((size_t)n * sizeof *h);
        CHECK_OK(amp_tensor_to_host(g, h, (size_t)n * sizeof *h));
        double gmax = 0.0, worst = 0.0;
        for (int64_t j = 0; j < n; j++) gmax = fmax(gmax, fabs((double)want[i][j]));
        for (int64_t j = 0; j < n; j++) worst = fmax(worst, fabs((double)h[j] - scale * (double)want[i][j]));
        CHECK_MSG(worst <= GC_ACCUM_TOL * gmax, "%s: %s: %s is off %g x the first gradient by %g",
                  c->name, when, c->in[i].name, (double)scale, worst);
        free(h);
    }
}

static void gc_run(amp_ctx *ctx, gc_case *c, uint64_t seed) {
    ref_rng rng = {seed};
    gc_make_inputs(ctx, c, &rng);
    int64_t ny = gc_numel(c->y_ndim, c->y_shape);
    float *rf = malloc((size_t)ny * sizeof *rf), *yl = malloc((size_t)ny * sizeof *yl);
    double *rd = malloc((size_t)ny * sizeof *rd), *yref = malloc((size_t)ny * sizeof *yref);
    for (int64_t i = 0; i < ny; i++) {
        rf[i] = (float)(ref_rng_uniform(&rng, -1.0, 1.0) * (double)ny);
        rd[i] = (double)rf[i] / (double)ny; /* mean(y * rf) = sum(y * rd) */
    }
    amp_tensor *r = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, c->y_ndim, c->y_shape, rf, &r));
    float *g1[GC_MAX_IN] = {0};
    double *num[GC_MAX_IN] = {0}, scale = 0.0;
    if (r && gc_pass(c, r, yl)) {
        c->ref(c, yref);
        gc_compare(c->name, "forward", yl, yref, ny, GC_FWD_TOL, GC_FWD_TOL, 0.0);
        for (int i = 0; i < c->n_in; i++) {
            gc_in *in = &c->in[i];
            if (in->fill == GC_LABELS) continue;
            amp_tensor *g;
            amp_status s = amp_tensor_get_grad(in->t, &g);
            if (!in->grad) {
                CHECK_MSG(s == AMP_ERR_STATE, "%s: %s needs no gradient but has one", c->name, in->name);
                continue;
            }
            CHECK_MSG(s == AMP_OK, "%s: no gradient for %s: %s", c->name, in->name, amp_last_error());
            if (s != AMP_OK) continue;
            g1[i] = malloc((size_t)in->numel * sizeof *g1[i]);
            CHECK_OK(amp_tensor_to_host(g, g1[i], (size_t)in->numel * sizeof *g1[i]));
            num[i] = malloc((size_t)in->numel * sizeof *num[i]);
            gc_numeric_grad(c, i, rd, yref, ny, num[i]);
            scale = fmax(scale, gc_max_abs(num[i], in->numel));
        }
        for (int i = 0; i < c->n_in; i++) {
            if (!g1[i]) continue;
            char what[64];
            snprintf(what, sizeof what, "d%s", c->in[i].name);
            gc_compare(c->name, what, g1[i], num[i], c->in[i].numel, GC_GRAD_TOL, GC_NORM_TOL, scale);
        }
        amp_ctx_reset_step(ctx);
        if (gc_pass(c, r, NULL)) gc_check_scaled(c, g1, 2.0f, "second backward without zero_grad");
        for (int i = 0; i < c->n_in; i++) {
            if (!g1[i]) continue;
            amp_tensor_zero_grad(c->in[i].t);
            amp_tensor *g;
            CHECK(amp_tensor_get_grad(c->in[i].t, &g) == AMP_ERR_STATE && g == NULL);
        }
        amp_ctx_reset_step(ctx);
        if (gc_pass(c, r, NULL)) gc_check_scaled(c, g1, 1.0f, "backward after zero_grad");
    }
    amp_ctx_reset_step(ctx);
    for (int i = 0; i < c->n_in; i++) {
        amp_tensor_free(c->in[i].t);
        free(c->in[i].val);
        free(g1[i]);
        free(num[i]);
    }
    amp_tensor_free(r);
    free(rf);
    free(yl);
    free(rd);
    free(yref);
}


/* ---- describing cases ---- */

#define OP(nm, l, r) .name = nm, .lib = l, .ref = r
#define OUT(nd, ...) .y_ndim = nd, .y_shape = {__VA_ARGS__}
#define IN(nm, nd, fl, a, b, g, ...) {.name = nm, .ndim = nd, .shape = {__VA_ARGS__}, .fill = fl, .lo = a, .hi = b, .grad = g}
#define X_(nm, nd, ...) IN(nm, nd, GC_UNIFORM, -1.0, 1.0, true, __VA_ARGS__)
#define W_(nm, nd, ...) IN(nm, nd, GC_UNIFORM, -0.5, 0.5, true, __VA_ARGS__)

#endif
