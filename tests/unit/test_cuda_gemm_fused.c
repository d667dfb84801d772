/* The fields of amp_gemm_desc after the plain GEMM (epilogue, bias_grad, allow_tf32) and the
 * direct half output with a bias, on the CUDA backend (kernels/cuda/gemm.c) through its
 * table, against plain double references written here and against the CPU backend:
 *  - allow_tf32: an f32 GEMM gives the product of its inputs rounded to TF32 (to nearest even at
 *    10 explicit mantissa bits, written here with frexp/ldexp), accumulated in f32, which is not
 *    the default's true-f32 result; without it the result is true f32; half inputs and the CPU
 *    backend ignore it (the same bits either way);
 *  - what was fused (amp_cuda_gemm_stats): the epilogue cuBLASLt ran (bias, the bias gradient:
 *    BGRADB for an f32 C with true-f32 inputs and alpha = 1, else none; never its ReLU), whether
 *    it wrote C itself (f32 C, or C of the inputs' dtype) and the compute type (TF32 for f32
 *    inputs with allow_tf32), as gemm.c's header states the routes;
 *  - the ReLU epilogue on every route of the GEMM (f32 C, half C written directly, the f32
 *    scratch of a half C of the other dtype, mixed operands widened), with bias, alpha and beta;
 *    a NaN before the epilogue stays NaN (cuBLASLt's own ReLU would make it +0) and -0 becomes
 *    +0, on both backends;
 *  - the GELU epilogues (tanh and erf): the pre-activation in aux with the plain GEMM's bits, C
 *    cuBLASLt's GELU_AUX[_BIAS] (stats) within core/backend.h's bound or, where the GELU runs
 *    as a pass, amp_gelu's bits;
 *  - the bias gradient (column sums of dY for dW = dY^T X): fused into the GEMM (f32 C, dense and
 *    padded A) and in its own pass (half C, alpha != 1, TF32, mixed operands), also with n = 0
 *    and k = 0;
 *  - a half C with a bias takes no f32 scratch of m x n from the allocator (the peak stays far
 *    below m n 4 bytes);
 *  - the new fields' argument errors, the same on both backends;
 *  - amp_ctx_opts.allow_tf32 and .allow_nondeterministic reach the descriptors nn/ fills: a
 *    matmul and a linear_relu of a TF32 context give the TF32 product, a default context's the
 *    true f32 one; a convolution's backward of a context that allows nondeterministic
 *    algorithms runs cuDNN's ALGO_0 (the emulation's first listed, non-deterministic), a
 *    default context's a deterministic one; TF32 picks tensor-op math for f32 convolutions.
 * Without a device it reports SKIPPED; the cudacpu build (AMP_CUDACPU=ON) runs it on the CPU with
 * cuBLASLt and cuDNN emulated. */
#include <stdint.h>
#include <string.h>

#include "amp/amp.h"
#include "core/backend.h"
#include "core/half.h"
#include "test_util.h"

#define NAME "test_cuda_gemm_fused"

#ifndef AMP_HAVE_CUDA

int main(void) { return test_skip(NAME, "libamp was built without the CUDA backend"); }

#else

#include <cublasLt.h>
#include <cudnn.h>

#include "kernels/cuda/conv_bias.h"
#include "kernels/cuda/cuda_backend.h"

static const amp_backend *gpu, *cpu;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rnd(float lo, float hi) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 40) & 0xffffff) / 16777216.0f;
}

static void store_host(void *p, amp_dtype dt, size_t i, float v) {
    if (dt == AMP_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = dt == AMP_F16 ? amp_f32_to_f16_bits(v) : amp_f32_to_bf16_bits(v);
}
static float load_host(const void *p, amp_dtype dt, size_t i) {
    if (dt == AMP_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == AMP_F16 ? amp_f16_bits_to_f32(h) : amp_bf16_bits_to_f32(h);
}

/* TF32: 1 + 10 significant bits, round to nearest even (nearbyint in the default mode). */
static float tf32f(float x) {
    if (!isfinite(x) || x == 0.0f) return x;
    int e;
    double m = frexp((double)x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
    return (float)ldexp(nearbyint(ldexp(m, 11)), e - 11);
}

/* v rounded to dt (f32: itself). */
static float round_to(amp_dtype dt, float v) {
    uint32_t buf = 0;
    store_host(&buf, dt, 0, v);
    return load_host(&buf, dt, 0);
}

/* Device memory of nbytes (at least 1) holding host's bytes, when host is given. */
static void *dev_copy(const void *host, size_t nbytes) {
    void *d = NULL;
    CHECK_OK(gpu->alloc(gpu->dev, nbytes ? nbytes : 1, &d));
    if (d && host && nbytes) CHECK_OK(gpu->copy_from_host(gpu->dev, d, host, nbytes));
    return d;
}

/* One problem, its host operands, and what each backend wrote. */
typedef struct gcase {
    bool ta, tb, bias, relu, bias_grad, tf32;
    int m, n, k, pad;
    amp_dtype a_dt, b_dt, c_dt;
    float alpha, beta;
} gcase;

typedef struct gdata {
    int64_t lda, ldb, ldc, a_rows, b_rows;
    uint8_t *a, *b, *c0;
    float *bias;
    uint8_t *c[2];   /* gpu, cpu */
    float *bg[2];
} gdata;

static void gdata_make(const gcase *g, gdata *d) {
    d->lda = (g->ta ? g->m : g->k) + g->pad;
    d->ldb = (g->tb ? g->k : g->n) + g->pad;
    d->ldc = g->n + g->pad;
    d->a_rows = g->ta ? g->k : g->m;
    d->b_rows = g->tb ? g->n : g->k;
    size_t as = amp_dtype_size(g->a_dt), bs = amp_dtype_size(g->b_dt), cs = amp_dtype_size(g->c_dt);
    d->a = calloc((size_t)(d->a_rows * d->lda) + 1, as);
    d->b = calloc((size_t)(d->b_rows * d->ldb) + 1, bs);
    d->c0 = calloc((size_t)(g->m * d->ldc) + 1, cs);
    d->bias = calloc((size_t)g->n + 1, sizeof(float));
    for (int i = 0; i < 2; i++) {
        d->c[i] = calloc((size_t)(g->m * d->ldc) + 1, cs);
        d->bg[i] = calloc((size_t)g->m + 1, sizeof(float));
    }
    for (int64_t i = 0; i < d->a_rows * d->lda; i++) store_host(d->a, g->a_dt, (size_t)i, rnd(-1, 1));
    for (int64_t i = 0; i < d->b_rows * d->ldb; i++) store_host(d->b, g->b_dt, (size_t)i, rnd(-1, 1));
    for (int64_t i = 0; i < g->m * d->ldc; i++) store_host(d->c0, g->c_dt, (size_t)i, rnd(-2, 2));
    for (int j = 0; j < g->n; j++) d->bias[j] = rnd(-1, 1);
}

static void gdata_free(gdata *d) {
    free(d->a), free(d->b), free(d->c0), free(d->bias);
    for (int i = 0; i < 2; i++) free(d->c[i]), free(d->bg[i]);
}

static amp_gemm_desc desc_of(const gcase *g, const gdata *d, const void *a, const void *b, void *c,
                             const float *bias, float *bg) {
    return (amp_gemm_desc){.trans_a = g->ta, .trans_b = g->tb, .m = g->m, .n = g->n, .k = g->k,
                           .alpha = g->alpha, .beta = g->beta, .a = a, .a_dtype = g->a_dt,
                           .lda = d->lda, .b = b, .b_dtype = g->b_dt, .ldb = d->ldb, .c = c,
                           .c_dtype = g->c_dt, .ldc = d->ldc, .bias = g->bias ? bias : NULL,
                           .epilogue = g->relu ? AMP_GEMM_EPILOGUE_RELU : AMP_GEMM_EPILOGUE_NONE,
                           .bias_grad = g->bias_grad ? bg : NULL, .allow_tf32 = g->tf32};
}

/* Runs the case on both backends into d->c[] and d->bg[] (C starts as c0 on both). */
static void gdata_run(const gcase *g, gdata *d) {
    size_t an = (size_t)(d->a_rows * d->lda) * amp_dtype_size(g->a_dt);
    size_t bn = (size_t)(d->b_rows * d->ldb) * amp_dtype_size(g->b_dt);
    size_t cn = (size_t)(g->m * d->ldc) * amp_dtype_size(g->c_dt);
    void *da = dev_copy(d->a, an), *db = dev_copy(d->b, bn), *dc = dev_copy(d->c0, cn);
    float *dbias = dev_copy(d->bias, (size_t)g->n * 4), *dbg = dev_copy(NULL, (size_t)g->m * 4);
    amp_gemm_desc dd = desc_of(g, d, da, db, dc, dbias, dbg);
    CHECK_OK(gpu->k.gemm(gpu->dev, &dd));
    CHECK_OK(gpu->copy_to_host(gpu->dev, d->c[0], dc, cn));
    CHECK_OK(gpu->copy_to_host(gpu->dev, d->bg[0], dbg, (size_t)g->m * 4));
    memcpy(d->c[1], d->c0, cn);
    amp_gemm_desc dh = desc_of(g, d, d->a, d->b, d->c[1], d->bias, d->bg[1]);
    CHECK_OK(cpu->k.gemm(cpu->dev, &dh));
    gpu->free(gpu->dev, da), gpu->free(gpu->dev, db), gpu->free(gpu->dev, dc),
            gpu->free(gpu->dev, dbias), gpu->free(gpu->dev, dbg);
}

static double op_a(const gcase *g, const gdata *d, int i, int p, bool round_tf32) {
    float v = load_host(d->a, g->a_dt, (size_t)(g->ta ? p * d->lda + i : i * d->lda + p));
    return round_tf32 ? tf32f(v) : v;
}
static double op_b(const gcase *g, const gdata *d, int p, int j, bool round_tf32) {
    float v = load_host(d->b, g->b_dt, (size_t)(g->tb ? j * d->ldb + p : p * d->ldb + j));
    return round_tf32 ? tf32f(v) : v;
}

/* Elements of backend r's C off the reference (inputs rounded to TF32 when tf32_ref; a half C's
 * bias rounded to C's dtype, as both backends must), with the f32 accumulation's bound and one
 * rounding to C's dtype; the padding columns must keep c0. The first few are printed, with
 * `what`, unless it is NULL. */
static int c_errors(const gcase *g, const gdata *d, int r, bool tf32_ref, const char *what) {
    double unit = g->c_dt == AMP_F16 ? 0x1p-11 : g->c_dt == AMP_BF16 ? 0x1p-8 : 0x1p-24;
    size_t cs = amp_dtype_size(g->c_dt);
    int bad = 0;
    for (int i = 0; i < g->m; i++)
        for (int64_t j = 0; j < d->ldc; j++) {
            size_t o = (size_t)(i * d->ldc + j);
            if (j >= g->n) {
                bad += memcmp(d->c[r] + o * cs, d->c0 + o * cs, cs) != 0;
                continue;
            }
            double acc = 0, mag = 0;
            for (int p = 0; p < g->k; p++) {
                double x = op_a(g, d, i, p, tf32_ref) * op_b(g, d, p, (int)j, tf32_ref);
                acc += x;
                mag += fabs(x);
            }
            double c0 = load_host(d->c0, g->c_dt, o), bj = g->bias ? round_to(g->c_dt, d->bias[j]) : 0;
            double v = g->alpha * acc + g->beta * c0 + bj;
            double want = g->relu ? (v > 0 ? v : 0) : v;
            double tol = 2e-7 * (g->k + 2) * (fabs(g->alpha) * mag + fabs(g->beta * c0) + fabs(bj)) +
                         unit * fabs(want) + 1e-30;
            double got = load_host(d->c[r], g->c_dt, o);
            if (!(fabs(got - want) <= tol) && bad++ < 3 && what)
                fprintf(stderr, "  %s %s [%d,%lld]: got %.9g want %.9g (tol %.3g)\n", what,
                        r ? "cpu" : "gpu", i, (long long)j, got, want, tol);
        }
    return bad;
}

/* Elements of backend r's bias gradient off the double column sums of op(A) (unrounded). */
static int bg_errors(const gcase *g, const gdata *d, int r) {
    int bad = 0;
    for (int i = 0; i < g->m; i++) {
        double s = 0, mag = 0;
        for (int p = 0; p < g->k; p++) s += op_a(g, d, i, p, false), mag += fabs(op_a(g, d, i, p, false));
        double tol = 2e-7 * (g->k + 1) * mag + 1e-30;
        if (!(fabs(d->bg[r][i] - s) <= tol) && bad++ < 3)
            fprintf(stderr, "  bias_grad %s [%d]: got %.9g want %.9g\n", r ? "cpu" : "gpu", i,
                    (double)d->bg[r][i], s);
    }
    return bad;
}

static const char *dn(amp_dtype dt) { return amp_dtype_name(dt); }

/* The route gemm.c takes for g (its header comment): what the stats must show. */
static void check_fused(const gcase *g) {
    amp_dtype ab = g->a_dt == g->b_dt ? g->a_dt : AMP_F32;
    bool tf32 = g->tf32 && ab == AMP_F32;
    bool direct = g->c_dt == AMP_F32 || g->c_dt == ab;
    bool fuse_bg = g->bias_grad && g->c_dt == AMP_F32 && !tf32 && g->alpha == 1.0f;
    int epi = g->bias ? CUBLASLT_EPILOGUE_BIAS
              : fuse_bg ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
    int compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    amp_cuda_gemm_stats st;
    amp_cuda_gemm_stats_get(amp_cuda_device(), &st);
    CHECK_MSG(st.epilogue == epi && st.direct == direct && st.compute == compute,
              "%s x %s -> %s bias=%d relu=%d bias_grad=%d tf32=%d alpha=%g: ran epilogue %d, "
              "direct %d, compute %d; want %d, %d, %d", dn(g->a_dt), dn(g->b_dt), dn(g->c_dt),
              g->bias, g->relu, g->bias_grad, g->tf32, (double)g->alpha, st.epilogue, st.direct,
              st.compute, epi, direct, compute);
}

static void check_case(gcase g) {
    gdata d;
    gdata_make(&g, &d);
    gdata_run(&g, &d);
    if (g.m > 0 && g.n > 0 && g.k > 0) check_fused(&g);
    for (int r = 0; r < 2; r++) {
        /* The CPU computes true f32 whatever allow_tf32 says; CUDA rounds f32 inputs. */
        bool tf32_ref = r == 0 && g.tf32 && g.a_dt == AMP_F32 && g.b_dt == AMP_F32;
        int bc = c_errors(&g, &d, r, tf32_ref, "C");
        int bb = g.bias_grad ? bg_errors(&g, &d, r) : 0;
        CHECK_MSG(bc == 0 && bb == 0,
                  "%s: ta=%d tb=%d m=%d n=%d k=%d pad=%d %s x %s -> %s alpha=%g beta=%g bias=%d "
                  "relu=%d bias_grad=%d tf32=%d: %d of C, %d of the bias gradient wrong",
                  r ? "cpu" : "gpu", g.ta, g.tb, g.m, g.n, g.k, g.pad, dn(g.a_dt), dn(g.b_dt),
                  dn(g.c_dt), (double)g.alpha, (double)g.beta, g.bias, g.relu, g.bias_grad, g.tf32,
                  bc, bb);
    }
    gdata_free(&d);
}

/* GELU epilogues on every route: aux (the pre-activation) has the bits the same GEMM writes to C
 * without the epilogue; C is the unary GELU kernel of aux bit for bit where the GELU runs as a
 * pass (the erf form, a padded ldc, a half C of the other dtype), and cuBLASLt's GELU_AUX_BIAS
 * (the stats say so) within core/backend.h's 2^-p (2 |C| + 2 |aux|) elsewhere. */
static void test_gelu(void) {
    static const struct {
        amp_dtype ab, c;
        bool tanh_form, bias;
        int pad;
        bool cublaslt; /* the route gemm.c takes */
    } cases[] = {
        {AMP_F32, AMP_F32, true, true, 0, true},    {AMP_BF16, AMP_BF16, true, true, 0, true},
        {AMP_F16, AMP_F16, true, false, 0, true},   {AMP_BF16, AMP_F32, true, true, 0, true},
        {AMP_F16, AMP_F16, false, true, 0, false},  {AMP_F32, AMP_F32, true, true, 3, false},
        {AMP_F16, AMP_BF16, true, true, 0, false},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        gcase g = {.tb = true, .bias = cases[t].bias, .m = 24, .n = 40, .k = 56,
                   .pad = cases[t].pad, .a_dt = cases[t].ab, .b_dt = cases[t].ab,
                   .c_dt = cases[t].c, .alpha = 1, .beta = 0};
        gdata d;
        gdata_make(&g, &d);
        size_t an = (size_t)(d.a_rows * d.lda) * amp_dtype_size(g.a_dt);
        size_t bn = (size_t)(d.b_rows * d.ldb) * amp_dtype_size(g.b_dt);
        size_t cn = (size_t)(g.m * d.ldc) * amp_dtype_size(g.c_dt);
        void *da = dev_copy(d.a, an), *db = dev_copy(d.b, bn), *dc = dev_copy(d.c0, cn);
        void *daux = dev_copy(d.c0, cn), *dplain = dev_copy(d.c0, cn);
        float *dbias = dev_copy(d.bias, (size_t)g.n * 4);
        amp_gemm_desc dd = desc_of(&g, &d, da, db, dplain, dbias, NULL);
        CHECK_OK(gpu->k.gemm(gpu->dev, &dd));
        dd.c = dc;
        dd.aux = daux;
        dd.epilogue = cases[t].tanh_form ? AMP_GEMM_EPILOGUE_GELU_TANH : AMP_GEMM_EPILOGUE_GELU_ERF;
        CHECK_OK(gpu->k.gemm(gpu->dev, &dd));
        amp_cuda_gemm_stats st;
        amp_cuda_gemm_stats_get(amp_cuda_device(), &st);
        int want_epi = cases[t].cublaslt ? (g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                   : CUBLASLT_EPILOGUE_GELU_AUX)
                                         : (g.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
        CHECK_MSG(st.epilogue == want_epi, "gelu case %zu: cuBLASLt ran epilogue %d, want %d", t,
                  st.epilogue, want_epi);
        uint8_t *c = malloc(cn), *aux = malloc(cn), *plain = malloc(cn), *ref = malloc(cn);
        CHECK_OK(gpu->copy_to_host(gpu->dev, c, dc, cn));
        CHECK_OK(gpu->copy_to_host(gpu->dev, aux, daux, cn));
        CHECK_OK(gpu->copy_to_host(gpu->dev, plain, dplain, cn));
        CHECK_MSG(memcmp(aux, plain, cn) == 0, "gelu case %zu: aux differs from the plain GEMM's C", t);
        memcpy(ref, aux, cn); /* the padding stays as both buffers had it */
        CHECK_OK(cpu->k.unary(cpu->dev, cases[t].tanh_form ? AMP_UNARY_GELU_TANH : AMP_UNARY_GELU_ERF,
                              g.c_dt, g.m * d.ldc, aux, 1.0f, ref));
        double u = g.c_dt == AMP_F32 ? 0x1p-23 : g.c_dt == AMP_BF16 ? 0x1p-7 : 0x1p-10;
        int bad = 0, inexact = 0;
        for (int i = 0; i < g.m; i++)
            for (int64_t j = 0; j < d.ldc; j++) {
                size_t o = (size_t)(i * d.ldc + j);
                float got = load_host(c, g.c_dt, o), want = load_host(ref, g.c_dt, o);
                if (j >= g.n) {
                    bad += memcmp(c + o * amp_dtype_size(g.c_dt), d.c0 + o * amp_dtype_size(g.c_dt),
                                  amp_dtype_size(g.c_dt)) != 0;
                    continue;
                }
                float z = load_host(aux, g.c_dt, o);
                inexact += got != want;
                double bound = cases[t].cublaslt ? u * (2.0 * fabs(want) + 2.0 * fabs(z)) : 0.0;
                bad += !(fabs((double)got - want) <= bound);
            }
        CHECK_MSG(bad == 0, "gelu case %zu (%s -> %s, %s, pad %d): %d elements of C off", t,
                  dn(g.a_dt), dn(g.c_dt), cases[t].tanh_form ? "tanh" : "erf", cases[t].pad, bad);
        if (cases[t].cublaslt && g.c_dt == AMP_F32) /* cuBLASLt's own GELU, not a copy of ours */
            CHECK_MSG(inexact > 0, "gelu case %zu: cuBLASLt's GELU gave amp_gelu's bits everywhere", t);
        free(c), free(aux), free(plain), free(ref);
        gpu->free(gpu->dev, da), gpu->free(gpu->dev, db), gpu->free(gpu->dev, dc);
        gpu->free(gpu->dev, daux), gpu->free(gpu->dev, dplain), gpu->free(gpu->dev, dbias);
        gdata_free(&d);
    }
}

/* TF32: the rounded product on CUDA, not the true one; true f32 without it; half inputs and
 * the CPU unaffected. */
static void test_tf32(void) {
    gcase g = {.tb = true, .m = 24, .n = 20, .k = 96, .a_dt = AMP_F32, .b_dt = AMP_F32,
               .c_dt = AMP_F32, .alpha = 1, .tf32 = true};
    gdata d;
    gdata_make(&g, &d);
    gdata_run(&g, &d);
    check_fused(&g);
    CHECK_MSG(c_errors(&g, &d, 0, true, "tf32") == 0, "CUDA with allow_tf32: not the TF32 product");
    int far = c_errors(&g, &d, 0, false, NULL);
    CHECK_MSG(far > g.m * g.n / 4, "CUDA with allow_tf32: only %d of %d elements off the true-f32 "
              "result (TF32 not applied?)", far, g.m * g.n);
    CHECK_MSG(c_errors(&g, &d, 1, false, "cpu tf32") == 0, "CPU with allow_tf32: not true f32");
    uint8_t *with = malloc((size_t)(g.m * d.ldc) * 4), *with_cpu = malloc((size_t)(g.m * d.ldc) * 4);
    memcpy(with, d.c[0], (size_t)(g.m * d.ldc) * 4);
    memcpy(with_cpu, d.c[1], (size_t)(g.m * d.ldc) * 4);
    g.tf32 = false;
    gdata_run(&g, &d);
    CHECK_MSG(c_errors(&g, &d, 0, false, "f32") == 0, "CUDA without allow_tf32: not true f32");
    CHECK_MSG(memcmp(with, d.c[0], (size_t)(g.m * d.ldc) * 4) != 0,
              "CUDA: allow_tf32 changed nothing");
    CHECK_MSG(memcmp(with_cpu, d.c[1], (size_t)(g.m * d.ldc) * 4) == 0,
              "CPU: allow_tf32 changed the result");
    free(with), free(with_cpu);
    gdata_free(&d);
    /* Half inputs: the same bits with and without. */
    gcase h = {.m = 16, .n = 24, .k = 40, .a_dt = AMP_BF16, .b_dt = AMP_BF16, .c_dt = AMP_F32,
               .alpha = 1, .tf32 = true};
    gdata e;
    gdata_make(&h, &e);
    gdata_run(&h, &e);
    uint8_t *keep = malloc((size_t)(h.m * e.ldc) * 4);
    memcpy(keep, e.c[0], (size_t)(h.m * e.ldc) * 4);
    h.tf32 = false;
    gdata_run(&h, &e);
    CHECK_MSG(memcmp(keep, e.c[0], (size_t)(h.m * e.ldc) * 4) == 0,
              "CUDA: allow_tf32 changed a bf16 GEMM");
    free(keep);
    gdata_free(&e);
}

static void test_relu(void) {
    const amp_dtype F32 = AMP_F32, F16 = AMP_F16, BF16 = AMP_BF16;
    const gcase cases[] = {
        {.tb = true, .bias = true, .relu = true, .m = 33, .n = 40, .k = 72, .a_dt = F32, .b_dt = F32, .c_dt = F32, .alpha = 1},
        {.tb = true, .bias = true, .relu = true, .m = 33, .n = 40, .k = 72, .pad = 3, .a_dt = F16, .b_dt = F16, .c_dt = F16, .alpha = 1, .beta = 0.5f},
        {.relu = true, .m = 20, .n = 36, .k = 48, .a_dt = BF16, .b_dt = BF16, .c_dt = BF16, .alpha = -1},
        {.ta = true, .bias = true, .relu = true, .m = 24, .n = 32, .k = 40, .a_dt = F16, .b_dt = F16, .c_dt = BF16, .alpha = 1},
        {.ta = true, .tb = true, .bias = true, .relu = true, .m = 17, .n = 29, .k = 31, .pad = 2, .a_dt = BF16, .b_dt = BF16, .c_dt = F32, .alpha = 2, .beta = 1},
        {.tb = true, .bias = true, .relu = true, .m = 12, .n = 20, .k = 24, .a_dt = F16, .b_dt = F32, .c_dt = F16, .alpha = 1},
        {.tb = true, .bias = true, .relu = true, .m = 12, .n = 20, .k = 64, .a_dt = F32, .b_dt = F32, .c_dt = F32, .alpha = 1, .tf32 = true},
        {.bias = true, .relu = true, .m = 5, .n = 6, .k = 0, .pad = 1, .a_dt = F32, .b_dt = F32, .c_dt = BF16, .alpha = 1, .beta = 0.5f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(cases[i]);

    /* NaN and -0 before the epilogue: NaN and +0 on both backends. Row 0 of A holds a NaN; row 1
     * is zero and alpha = -1, so the product there is -1 * (+0) = -0 before the epilogue. */
    for (int t = 0; t < 3; t++) {
        amp_dtype dt = t == 0 ? F32 : t == 1 ? F16 : BF16;
        gcase g = {.relu = true, .m = 4, .n = 9, .k = 7, .a_dt = dt, .b_dt = dt, .c_dt = dt,
                   .alpha = -1};
        gdata d;
        gdata_make(&g, &d);
        store_host(d.a, dt, 3, NAN);
        for (int p = 0; p < g.k; p++) store_host(d.a, dt, (size_t)(d.lda + p), 0.0f);
        gdata_run(&g, &d);
        size_t cs = amp_dtype_size(dt);
        int not_nan[2] = {0, 0}, not_zero[2] = {0, 0};
        for (int r = 0; r < 2; r++)
            for (int64_t j = 0; j < g.n; j++) {
                uint32_t bits = 0;
                memcpy(&bits, d.c[r] + (size_t)(d.ldc + j) * cs, cs);
                not_zero[r] += bits != 0;
                not_nan[r] += !isnan(load_host(d.c[r], dt, (size_t)j));
            }
        CHECK_MSG(not_nan[0] == 0 && not_nan[1] == 0 && not_zero[0] == 0 && not_zero[1] == 0,
                  "%s: NaN and -0 before the ReLU epilogue: %d (gpu) and %d (cpu) not NaN, %d and "
                  "%d not +0", dn(dt), not_nan[0], not_nan[1], not_zero[0], not_zero[1]);
        gdata_free(&d);
    }
}

static void test_bias_grad(void) {
    const amp_dtype F32 = AMP_F32, F16 = AMP_F16, BF16 = AMP_BF16;
    const gcase cases[] = {
        {.ta = true, .bias_grad = true, .m = 40, .n = 24, .k = 56, .a_dt = F32, .b_dt = F32, .c_dt = F32, .alpha = 1},
        {.ta = true, .bias_grad = true, .m = 33, .n = 20, .k = 45, .pad = 4, .a_dt = F32, .b_dt = F32, .c_dt = F32, .alpha = 1},
        {.ta = true, .bias_grad = true, .m = 48, .n = 64, .k = 32, .a_dt = F16, .b_dt = F16, .c_dt = F32, .alpha = 1, .beta = 1},
        {.ta = true, .bias_grad = true, .m = 64, .n = 40, .k = 36, .a_dt = BF16, .b_dt = BF16, .c_dt = BF16, .alpha = 1},
        {.ta = true, .bias_grad = true, .m = 30, .n = 18, .k = 50, .pad = 2, .a_dt = F16, .b_dt = F16, .c_dt = F16, .alpha = 1},
        {.ta = true, .bias_grad = true, .m = 24, .n = 40, .k = 33, .pad = 1, .a_dt = F32, .b_dt = F32, .c_dt = F32, .alpha = 2, .beta = 0.5f},
        {.ta = true, .bias_grad = true, .m = 32, .n = 48, .k = 64, .a_dt = F32, .b_dt = F32, .c_dt = F32, .alpha = 1, .tf32 = true},
        {.ta = true, .tb = true, .bias_grad = true, .m = 20, .n = 12, .k = 28, .pad = 3, .a_dt = F16, .b_dt = BF16, .c_dt = F32, .alpha = 1},
        {.ta = true, .bias_grad = true, .m = 5, .n = 0, .k = 7, .pad = 1, .a_dt = F32, .b_dt = F32, .c_dt = F32, .alpha = 1},
        {.ta = true, .bias_grad = true, .m = 6, .n = 4, .k = 0, .a_dt = F32, .b_dt = F32, .c_dt = F32, .alpha = 1, .beta = 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(cases[i]);
}

/* A half C with a bias is written directly: the call's allocations stay far below the m x n
 * f32 scratch the other route takes (the bias's half copy is n elements). */
static void test_half_bias_direct(void) {
    if (!gpu->memory_stats || !gpu->memory_reset_peak) return;
    for (int t = 0; t < 2; t++) {
        gcase g = {.tb = true, .bias = true, .relu = t == 1, .m = 128, .n = 128, .k = 64,
                   .a_dt = AMP_BF16, .b_dt = AMP_BF16, .c_dt = AMP_BF16, .alpha = 1};
        gdata d;
        gdata_make(&g, &d);
        size_t an = (size_t)(d.a_rows * d.lda) * 2, bn = (size_t)(d.b_rows * d.ldb) * 2;
        size_t cn = (size_t)(g.m * d.ldc) * 2;
        void *da = dev_copy(d.a, an), *db = dev_copy(d.b, bn), *dc = dev_copy(d.c0, cn);
        float *dbias = dev_copy(d.bias, (size_t)g.n * 4);
        amp_gemm_desc dd = desc_of(&g, &d, da, db, dc, dbias, NULL);
        CHECK_OK(gpu->k.gemm(gpu->dev, &dd)); /* the plan and cuBLASLt's workspace, made once */
        CHECK_OK(gpu->sync(gpu->dev));
        size_t in_use = 0, peak = 0;
        gpu->memory_stats(gpu->dev, &in_use, &peak);
        gpu->memory_reset_peak(gpu->dev);
        CHECK_OK(gpu->k.gemm(gpu->dev, &dd));
        check_fused(&g);
        CHECK_OK(gpu->sync(gpu->dev));
        size_t in_use2 = 0, peak2 = 0;
        gpu->memory_stats(gpu->dev, &in_use2, &peak2);
        CHECK_MSG(peak2 - in_use < (size_t)(g.m * g.n) * 4 / 8,
                  "half C with a bias (relu %d): the call took %zu bytes (an m x n f32 scratch "
                  "is %d)", g.relu, peak2 - in_use, g.m * g.n * 4);
        CHECK(in_use2 == in_use);
        CHECK_OK(gpu->copy_to_host(gpu->dev, d.c[0], dc, cn));
        CHECK_MSG(c_errors(&g, &d, 0, false, "direct") == 0, "half C with a bias: wrong values");
        gpu->free(gpu->dev, da), gpu->free(gpu->dev, db), gpu->free(gpu->dev, dc),
                gpu->free(gpu->dev, dbias);
        gdata_free(&d);
    }
}

static void test_errors(void) {
    float dummy[16] = {0}, bg[4];
    const amp_backend *bes[2] = {gpu, cpu};
    for (int i = 0; i < 2; i++) {
        void *a = NULL, *g = NULL;
        CHECK_OK(bes[i]->alloc(bes[i]->dev, sizeof dummy, &a));
        CHECK_OK(bes[i]->alloc(bes[i]->dev, sizeof bg, &g));
        amp_gemm_desc d = {.trans_a = true, .m = 2, .n = 2, .k = 2, .alpha = 1, .a = a,
                           .a_dtype = AMP_F32, .lda = 2, .b = a, .b_dtype = AMP_F32, .ldb = 2,
                           .c = a, .c_dtype = AMP_F32, .ldc = 2, .epilogue = (amp_gemm_epilogue)7};
        const char *who = i ? "amp_cpu_gemm" : "amp_cuda_gemm";
        char want[96];
        snprintf(want, sizeof want, "%s: unknown epilogue 7", who);
        CHECK_FAILS(bes[i]->k.gemm(bes[i]->dev, &d), AMP_ERR_INVALID_ARG, want);
        d.epilogue = AMP_GEMM_EPILOGUE_NONE;
        d.bias_grad = g;
        d.trans_a = false;
        CHECK_FAILS(bes[i]->k.gemm(bes[i]->dev, &d), AMP_ERR_INVALID_ARG,
                    "bias_grad needs trans_a");
        d.trans_a = true;
        d.bias = g;
        CHECK_FAILS(bes[i]->k.gemm(bes[i]->dev, &d), AMP_ERR_INVALID_ARG,
                    "cannot be combined with a bias");
        d.bias = NULL;
        d.epilogue = AMP_GEMM_EPILOGUE_RELU;
        CHECK_FAILS(bes[i]->k.gemm(bes[i]->dev, &d), AMP_ERR_INVALID_ARG, "or an epilogue");
        d.bias_grad = NULL;
        d.epilogue = AMP_GEMM_EPILOGUE_GELU_TANH;
        CHECK_FAILS(bes[i]->k.gemm(bes[i]->dev, &d), AMP_ERR_INVALID_ARG,
                    "a GELU epilogue needs aux");
        d.aux = g;
        d.beta = 1.0f;
        CHECK_FAILS(bes[i]->k.gemm(bes[i]->dev, &d), AMP_ERR_INVALID_ARG,
                    "a GELU epilogue with beta 1");
        d.beta = 0.0f;
        d.aux = NULL;
        d.bias_grad = g;
        d.epilogue = AMP_GEMM_EPILOGUE_NONE;
        CHECK_OK(bes[i]->k.gemm(bes[i]->dev, &d));
        CHECK_OK(bes[i]->sync(bes[i]->dev));
        bes[i]->free(bes[i]->dev, a);
        bes[i]->free(bes[i]->dev, g);
    }
}

/* y = x @ w (or relu(x @ w^T + b)) on a CUDA context: the TF32 product with allow_tf32, the
 * true f32 one without (both within the f32 accumulation's bound). */
static void ctx_gemm(bool tf32, bool fused) {
    enum { M = 8, K = 64, N = 12 };
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CUDA, .allow_tf32 = tf32}, &ctx));
    if (!ctx) return;
    float a[M * K], b[K * N], bias[N], y[M * N];
    for (int i = 0; i < M * K; i++) a[i] = rnd(-1, 1);
    for (int i = 0; i < K * N; i++) b[i] = rnd(-1, 1);
    for (int i = 0; i < N; i++) bias[i] = rnd(-1, 1);
    amp_tensor *ta = NULL, *tb = NULL, *tbias = NULL, *ty = NULL;
    /* matmul: b is [K, N]; linear_relu: the same numbers as w [N, K] (w^T = b). */
    float wt[N * K];
    for (int p = 0; p < K; p++)
        for (int j = 0; j < N; j++) wt[j * K + p] = b[p * N + j];
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){M, K}, a, &ta));
    if (fused)
        CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){N, K}, wt, &tb));
    else
        CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){K, N}, b, &tb));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, (const int64_t[]){N}, bias, &tbias));
    if (fused) CHECK_OK(amp_linear_relu(ta, tb, tbias, &ty));
    else CHECK_OK(amp_matmul(ta, tb, &ty));
    if (ty) CHECK_OK(amp_tensor_to_host(ty, y, sizeof y));
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = fused ? bias[j] : 0.0, mag = fused ? fabs(bias[j]) : 0.0;
            for (int p = 0; p < K; p++) {
                double x = tf32 ? (double)tf32f(a[i * K + p]) * tf32f(b[p * N + j])
                                : (double)a[i * K + p] * b[p * N + j];
                acc += x;
                mag += fabs(x);
            }
            double want = fused && acc < 0 ? 0.0 : acc;
            bad += !(fabs(y[i * N + j] - want) <= 2e-7 * (K + 2) * mag + 1e-30);
        }
    CHECK_MSG(bad == 0, "%s on a context with allow_tf32 = %d: %d of %d off the %s product",
              fused ? "linear_relu" : "matmul", tf32, bad, M * N, tf32 ? "TF32" : "true f32");
    amp_tensor_free(ta);
    amp_tensor_free(tb);
    amp_tensor_free(tbias);
    amp_ctx_free(ctx);
}

/* A convolution forward and backward on a CUDA context: the backward algorithms and the math
 * type the context's switches lead to. */
static void ctx_conv(bool nondet, bool tf32) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CUDA, .allow_tf32 = tf32,
                                            .allow_nondeterministic = nondet},
                            &ctx));
    if (!ctx) return;
    enum { NX = 2 * 3 * 9 * 9, NW = 4 * 3 * 3 * 3 };
    float xv[NX], wv[NW];
    for (int i = 0; i < NX; i++) xv[i] = rnd(-1, 1);
    for (int i = 0; i < NW; i++) wv[i] = rnd(-1, 1);
    amp_tensor *x = NULL, *w = NULL, *y = NULL, *loss = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, (const int64_t[]){2, 3, 9, 9}, xv, &x));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, (const int64_t[]){4, 3, 3, 3}, wv, &w));
    if (x) CHECK_OK(amp_tensor_set_requires_grad(x, true));
    if (w) CHECK_OK(amp_tensor_set_requires_grad(w, true));
    CHECK_OK(amp_conv2d(x, w, NULL, 1, 1, &y));
    if (y) CHECK_OK(amp_mean(y, &loss));
    if (loss) CHECK_OK(amp_backward(loss));
    CHECK_OK(gpu->sync(gpu->dev));
    amp_cuda_conv_stats st;
    amp_cuda_conv_stats_get(amp_cuda_device(), &st);
    bool algo0 = st.bwd_data_algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 &&
                 st.bwd_filter_algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
    bool det = st.bwd_data_algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 &&
               st.bwd_filter_algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 &&
               st.bwd_filter_algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
    CHECK_MSG(nondet ? algo0 : det,
              "context with allow_nondeterministic = %d: backward algorithms %d (data) and %d "
              "(filter)", nondet, st.bwd_data_algo, st.bwd_filter_algo);
    int want = tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    CHECK_MSG(st.math_type == want, "context with allow_tf32 = %d: math type %d, want %d", tf32,
              st.math_type, want);
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_ctx_free(ctx);
}

int main(void) {
    cpu = amp_backend_cpu();
    gpu = amp_backend_cuda();
    if (!gpu) return test_skip(NAME, "no CUDA device");
    test_tf32();
    test_relu();
    test_bias_grad();
    test_half_bias_direct();
    test_gelu();
    test_errors();
    for (int t = 0; t < 4; t++) ctx_gemm(t & 1, t & 2);
    for (int t = 0; t < 4; t++) ctx_conv(t & 1, t & 2);
    return test_summary(NAME);
}

#endif
