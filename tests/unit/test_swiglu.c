/* amp_swiglu and amp_linear_swiglu, on every device that answers:
 *  - forward against float64 and gradients against float64 central differences
 *    (gradcheck_run.h): the op on gu, the linear form with separate weights (two GEMMs) and with
 *    the weights one block (one GEMM of 2F outputs);
 *  - the fused op against amp_silu then amp_mul on gu's halves, bit for bit forward and in gu's
 *    gradient, in f32, bf16 and f16 (the roundings it promises to keep), and with gates down to
 *    -100, where the CPU's vector tiles give way to the scalar function;
 *  - the linear form with separate weights against amp_linear twice, amp_silu and amp_mul, bit
 *    for bit forward and in x's and both weights' gradients (the same GEMMs, the same order);
 *  - bad input refused, naming the call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "gradcheck_run.h"
#include "test_devices.h"
#include "test_tensors.h"

static double silu(double a) { return a / (1.0 + exp(-a)); }

static amp_status lib_swiglu(gc_case *c, amp_tensor **y) { return amp_swiglu(T(0), y); }
static void ref_swiglu(const gc_case *c, double *y) {
    int64_t f = S(0, c->in[0].ndim - 1) / 2, rows = c->in[0].numel / (2 * f);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < f; j++)
            y[r * f + j] = silu(V(0)[r * 2 * f + j]) * V(0)[r * 2 * f + f + j];
}

/* x [.., in], w_gate, w_up [f, in] (two leaves), or w [2f, in] narrowed into the two (kernel 1). */
static amp_status lib_lswiglu(gc_case *c, amp_tensor **y) {
    if (c->kernel != 1) return amp_linear_swiglu(T(0), T(1), T(2), y);
    int64_t f = S(1, 0) / 2;
    amp_tensor *wg, *wu;
    amp_status s = amp_narrow(T(1), 0, 0, f, &wg);
    if (s == AMP_OK) s = amp_narrow(T(1), 0, f, f, &wu);
    return s == AMP_OK ? amp_linear_swiglu(T(0), wg, wu, y) : s;
}
static void ref_lswiglu(const gc_case *c, double *y) {
    int64_t in = S(0, c->in[0].ndim - 1), rows = c->in[0].numel / in;
    int64_t f = c->kernel == 1 ? S(1, 0) / 2 : S(1, 0);
    const double *wg = V(1), *wu = c->kernel == 1 ? V(1) + f * in : V(2);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < f; j++) {
            double g = 0.0, u = 0.0;
            for (int64_t e = 0; e < in; e++) {
                g += V(0)[r * in + e] * wg[j * in + e];
                u += V(0)[r * in + e] * wu[j * in + e];
            }
            y[r * f + j] = silu(g) * u;
        }
}

static gc_case cases[] = {
    {OP("swiglu [2, 3, 2 x 5]", lib_swiglu, ref_swiglu),
     .in = {IN("gu", 3, GC_UNIFORM, -3.0, 3.0, true, 2, 3, 10)}, OUT(3, 2, 3, 5)},
    {OP("linear_swiglu, two weights", lib_lswiglu, ref_lswiglu),
     .in = {X_("x", 3, 2, 3, 6), W_("w_gate", 2, 7, 6), W_("w_up", 2, 7, 6)}, OUT(3, 2, 3, 7)},
    {OP("linear_swiglu, weights one block", lib_lswiglu, ref_lswiglu),
     .in = {X_("x", 2, 5, 4), W_("w", 2, 6, 4)}, OUT(2, 5, 3), .kernel = 1},
};

static amp_tensor *leaf(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape, double a,
                        double scale) {
    return test_sin_leaf(ctx, dt, ndim, shape, a, scale, 0.0);
}

static void same(amp_tensor *a, amp_tensor *b, const char *what, const char *cs) {
    size_t n = (size_t)amp_tensor_numel(a) * amp_dtype_size(amp_tensor_dtype(a));
    char *ha = malloc(n), *hb = malloc(n);
    if (!ha || !hb) abort();
    CHECK_OK(amp_tensor_to_host(a, ha, n));
    CHECK_OK(amp_tensor_to_host(b, hb, n));
    CHECK_MSG(memcmp(ha, hb, n) == 0, "%s: %s differs from the unfused ops'", cs, what);
    free(ha);
    free(hb);
}

static amp_tensor *grad_of(amp_tensor *t) {
    amp_tensor *g = NULL;
    CHECK_OK(amp_tensor_get_grad(t, &g));
    return g;
}

/* mean((y0 + y1) * w) back-propagated: both graphs get the same dy. */
static void backward_both(amp_ctx *ctx, amp_tensor *y0, amp_tensor *y1) {
    int64_t n = amp_tensor_numel(y0);
    float *w = malloc((size_t)n * sizeof *w);
    for (int64_t i = 0; i < n; i++) w[i] = (float)cos(0.3 * (double)i) * 4.0f;
    amp_tensor *wt = NULL, *a = NULL, *b = NULL, *loss = NULL;
    int64_t shape[AMP_MAX_DIMS];
    for (int d = 0; d < amp_tensor_ndim(y0); d++) shape[d] = amp_tensor_dim(y0, d);
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, amp_tensor_ndim(y0), shape, w, &wt));
    CHECK_OK(amp_mul(y0, wt, &a));
    CHECK_OK(amp_mul(y1, wt, &b));
    CHECK_OK(amp_add(a, b, &a));
    CHECK_OK(amp_mean(a, &loss));
    CHECK_OK(amp_backward(loss));
    free(w);
    amp_tensor_free(wt);
}

/* amp_swiglu(gu) against amp_silu(gate) * up, gate and up narrowed out of a copy of gu. */
static void fused_vs_unfused(amp_ctx *ctx, amp_dtype dt, double scale) {
    const int64_t R = 7, F = 45;
    char cs[64];
    snprintf(cs, sizeof cs, "swiglu %s, values up to %g", amp_dtype_name(dt), scale);
    amp_tensor *gu[2], *y[2], *gate, *up, *s;
    for (int c = 0; c < 2; c++) gu[c] = leaf(ctx, dt, 2, (const int64_t[]){R, 2 * F}, 0.41, scale);
    CHECK_OK(amp_swiglu(gu[0], &y[0]));
    CHECK_OK(amp_narrow(gu[1], 1, 0, F, &gate));
    CHECK_OK(amp_narrow(gu[1], 1, F, F, &up));
    CHECK_OK(amp_silu(gate, &s));
    CHECK_OK(amp_mul(s, up, &y[1]));
    same(y[0], y[1], "y", cs);
    backward_both(ctx, y[0], y[1]);
    same(grad_of(gu[0]), grad_of(gu[1]), "dgu", cs);
    amp_ctx_reset_step(ctx);
    amp_tensor_free(gu[0]);
    amp_tensor_free(gu[1]);
}

/* amp_linear_swiglu with separate weights against amp_linear twice, amp_silu and amp_mul. */
static void linear_vs_unfused(amp_ctx *ctx, amp_dtype dt) {
    const int64_t B = 3, T_ = 5, C = 48, F = 40;
    char cs[48];
    snprintf(cs, sizeof cs, "linear_swiglu %s", amp_dtype_name(dt));
    /* The weights are rows 0..F-1 and F+1..2F of one leaf: never adjacent, so two GEMMs (a
     * backend's allocator may place two leaves back to back, which would join them). */
    amp_tensor *x[2], *w[2], *wg[2], *wu[2], *y[2], *g, *u, *s;
    for (int c = 0; c < 2; c++) {
        x[c] = leaf(ctx, dt, 3, (const int64_t[]){B, T_, C}, 0.31, 1.0);
        w[c] = leaf(ctx, dt, 2, (const int64_t[]){2 * F + 1, C}, 0.17, 0.3);
        CHECK_OK(amp_narrow(w[c], 0, 0, F, &wg[c]));
        CHECK_OK(amp_narrow(w[c], 0, F + 1, F, &wu[c]));
    }
    CHECK_OK(amp_linear_swiglu(x[0], wg[0], wu[0], &y[0]));
    CHECK_OK(amp_linear(x[1], wg[1], NULL, &g));
    CHECK_OK(amp_linear(x[1], wu[1], NULL, &u));
    CHECK_OK(amp_silu(g, &s));
    CHECK_OK(amp_mul(s, u, &y[1]));
    same(y[0], y[1], "y", cs);
    backward_both(ctx, y[0], y[1]);
    same(grad_of(x[0]), grad_of(x[1]), "dx", cs);
    same(grad_of(w[0]), grad_of(w[1]), "dw_gate and dw_up", cs);
    amp_ctx_reset_step(ctx);
    for (int c = 0; c < 2; c++) {
        amp_tensor_free(x[c]);
        amp_tensor_free(w[c]);
    }
}

static void bad_input(amp_ctx *ctx) {
    amp_tensor *odd = NULL, *x = NULL, *w = NULL, *w2 = NULL, *h = NULL, *y = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){3, 7}, &odd));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){3, 8}, &x));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){5, 8}, &w));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){6, 8}, &w2));
    CHECK_OK(amp_tensor_create(ctx, AMP_BF16, 2, (const int64_t[]){5, 8}, &h));
    CHECK_FAILS(amp_swiglu(odd, &y), AMP_ERR_SHAPE, "amp_swiglu: gu [3, 7] must end in an even dim");
    CHECK_FAILS(amp_linear_swiglu(x, w, w2, &y), AMP_ERR_SHAPE,
                "amp_linear_swiglu: x [3, 8], w_gate [5, 8] and w_up [6, 8]");
    CHECK_FAILS(amp_linear_swiglu(odd, w, w, &y), AMP_ERR_SHAPE, "in x's last dim");
    CHECK_FAILS(amp_linear_swiglu(x, w, h, &y), AMP_ERR_DTYPE, "amp_linear_swiglu");
    CHECK_FAILS(amp_linear_swiglu(x, w, NULL, &y), AMP_ERR_INVALID_ARG, "w_up");
    amp_tensor_free(odd);
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(w2);
    amp_tensor_free(h);
}

static void run_all(amp_device device) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 5}, &ctx));
    if (!ctx) return;
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        int before = test_n_fail;
        gc_run(ctx, &cases[i], 9300 + (uint64_t)i);
        printf("%-48s %s\n", cases[i].name, test_n_fail == before ? "ok" : "FAILED");
    }
    const amp_dtype dts[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int i = 0; i < 3; i++) {
        fused_vs_unfused(ctx, dts[i], 4.0);
        linear_vs_unfused(ctx, dts[i]);
    }
    /* rows with gates below -80 (amp_siluf's own range, the scalar way) beside rows without */
    fused_vs_unfused(ctx, AMP_F32, 100.0);
    bad_input(ctx);
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(run_all);
    return test_summary("test_swiglu");
}
