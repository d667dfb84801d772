/* amp_rope and amp_rope_table_create, on every device that answers:
 *  - the op against a float64 rotation by the table's cos and sin, and its gradient against
 *    float64 central differences (gradcheck_run.h), for the rotate-half and interleaved layouts,
 *    a packed q/k/v whose v is copied, and a position offset;
 *  - the table against float64 angles (Hugging Face's formulas in float64), for the default
 *    frequencies at theta 10 000 and 500 000 and for Llama 3.1's scaling, within the error its f32
 *    inverse frequencies carry (derived below);
 *  - a packed q/k/v rotated in one call equals q and k rotated apart, bit for bit, and the rows at
 *    an offset equal the whole sequence's rows there;
 *  - bad input refused, naming the call and the field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/half.h"
#include "gradcheck_run.h"
#include "test_devices.h"

/* y = rope(x) of x [B, T, H, D] with table [P, D/2, 2] in float64, heads [0, rot) rotated. */
static void ref_rope(const double *x, const double *tab, int64_t B, int64_t T, int64_t H,
                     int64_t D, int64_t rot, int64_t offset, bool interleaved, double *y) {
    int64_t half = D / 2;
    for (int64_t r = 0; r < B * T; r++) {
        int64_t t = r % T;
        for (int64_t h = 0; h < H; h++) {
            const double *xv = x + (r * H + h) * D;
            double *yv = y + (r * H + h) * D;
            if (h >= rot) {
                memcpy(yv, xv, (size_t)D * sizeof *yv);
                continue;
            }
            for (int64_t i = 0; i < half; i++) {
                int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
                double c = tab[((offset + t) * half + i) * 2], s = tab[((offset + t) * half + i) * 2 + 1];
                yv[ia] = xv[ia] * c - xv[ib] * s;
                yv[ib] = xv[ib] * c + xv[ia] * s;
            }
        }
    }
}

/* The cases: x [B, T, H, D] and a table of arbitrary values in [-1, 1] (the op reads only them). */
static amp_status lib_half(gc_case *c, amp_tensor **y) { return amp_rope(T(0), T(1), NULL, y); }
static void ref_half(const gc_case *c, double *y) {
    ref_rope(V(0), V(1), S(0, 0), S(0, 1), S(0, 2), S(0, 3), S(0, 2), 0, false, y);
}
static amp_status lib_inter(gc_case *c, amp_tensor **y) {
    return amp_rope(T(0), T(1), &(amp_rope_opts){.layout = AMP_ROPE_INTERLEAVED, .offset = 2}, y);
}
static void ref_inter(const gc_case *c, double *y) {
    ref_rope(V(0), V(1), S(0, 0), S(0, 1), S(0, 2), S(0, 3), S(0, 2), 2, true, y);
}
/* A packed q/k/v of 2 query heads and 1 key/value head: heads 0..2 rotated, head 3 (v) copied. */
static amp_status lib_packed(gc_case *c, amp_tensor **y) {
    return amp_rope(T(0), T(1), &(amp_rope_opts){.heads = 3, .offset = 1}, y);
}
static void ref_packed(const gc_case *c, double *y) {
    ref_rope(V(0), V(1), S(0, 0), S(0, 1), S(0, 2), S(0, 3), 3, 1, false, y);
}

static gc_case cases[] = {
    {OP("rope rotate-half [2, 3, 2, 8]", lib_half, ref_half),
     .in = {X_("x", 4, 2, 3, 2, 8), IN("table", 3, GC_UNIFORM, -1.0, 1.0, false, 3, 4, 2)},
     OUT(4, 2, 3, 2, 8)},
    {OP("rope interleaved, offset 2", lib_inter, ref_inter),
     .in = {X_("x", 4, 1, 4, 3, 6), IN("table", 3, GC_UNIFORM, -1.0, 1.0, false, 7, 3, 2)},
     OUT(4, 1, 4, 3, 6)},
    {OP("rope packed q/k/v, v copied, offset 1", lib_packed, ref_packed),
     .in = {X_("x", 4, 2, 2, 4, 4), IN("table", 3, GC_UNIFORM, -1.0, 1.0, false, 3, 2, 2)},
     OUT(4, 2, 2, 4, 4)},
};

/* Hugging Face's inverse frequencies in float64 (default, or Llama 3.1's scaling). */
static void ref_inv_freq(const amp_rope_config *c, double *inv) {
    int64_t half = c->head_dim / 2;
    for (int64_t i = 0; i < half; i++) inv[i] = 1.0 / pow((double)c->theta, 2.0 * (double)i / (double)c->head_dim);
    if (c->type != AMP_ROPE_LLAMA3) return;
    double old = (double)c->original_max_positions, lo = c->low_freq_factor, hi = c->high_freq_factor;
    for (int64_t i = 0; i < half; i++) {
        double wavelen = 2.0 * M_PI / inv[i];
        double scaled = wavelen > old / lo ? inv[i] / c->factor : inv[i];
        double smooth = (old / wavelen - lo) / (hi - lo);
        bool medium = !(wavelen < old / hi) && !(wavelen > old / lo);
        inv[i] = medium ? (1.0 - smooth) * scaled / c->factor + smooth * scaled : scaled;
    }
}

/* The table against float64. Its inverse frequencies are f32: the exponent 2i / D rounded
 * (2^-24 relative) moves theta^e by ln(theta) e 2^-24 relative (<= 8e-7 for theta 5e5), powf and
 * the division add 1.5 ulp, and Llama 3.1's blend up to a few more (its terms are f32 products of
 * those): below 2e-6 relative; the angle p * inv rounds once more. So cos and sin lie within
 * 2e-6 |angle| + 2^-23 of the float64 values for the default frequencies, 4e-6 |angle| + 2^-23
 * with the scaling, while a wrong exponent, factor or branch moves them by far more. */
static void test_table(amp_ctx *ctx, const amp_rope_config *cfg, double rel, const char *what) {
    amp_tensor *tab = NULL;
    CHECK_OK(amp_rope_table_create(ctx, cfg, &tab));
    if (!tab) return;
    int64_t half = cfg->head_dim / 2, n = cfg->max_positions * half * 2;
    float *got = malloc((size_t)n * sizeof *got);
    double *inv = malloc((size_t)half * sizeof *inv);
    if (!got || !inv) abort();
    CHECK_OK(amp_tensor_to_host(tab, got, (size_t)n * sizeof *got));
    ref_inv_freq(cfg, inv);
    double worst = 0.0;
    for (int64_t p = 0; p < cfg->max_positions; p++)
        for (int64_t i = 0; i < half; i++) {
            double angle = (double)p * inv[i], bound = rel * angle + 0x1p-23;
            double ec = fabs(got[(p * half + i) * 2] - cos(angle)) / bound;
            double es = fabs(got[(p * half + i) * 2 + 1] - sin(angle)) / bound;
            worst = fmax(worst, fmax(ec, es));
        }
    CHECK_MSG(worst <= 1.0, "%s: the table is %.3g of its bound off float64", what, worst);
    free(got);
    free(inv);
    amp_tensor_free(tab);
}

/* A tensor of dt with values in [-2, 2) from seed. */
static amp_tensor *host_tensor(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape,
                               uint64_t seed) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    float *v = malloc((size_t)n * sizeof *v);
    uint16_t *h = malloc((size_t)n * sizeof *h);
    if (!v || !h) abort();
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((double)(seed >> 11) * 0x1p-53 * 4.0 - 2.0);
        h[i] = dt == AMP_F16 ? amp_f32_to_f16_bits(v[i]) : amp_f32_to_bf16_bits(v[i]);
    }
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, dt, ndim, shape, dt == AMP_F32 ? (void *)v : (void *)h, &t));
    free(v);
    free(h);
    return t;
}

static bool same_bits(amp_tensor *a, amp_tensor *b) {
    size_t n = (size_t)amp_tensor_numel(a) * amp_dtype_size(amp_tensor_dtype(a));
    char *ha = malloc(n), *hb = malloc(n);
    if (!ha || !hb) abort();
    CHECK_OK(amp_tensor_to_host(a, ha, n));
    CHECK_OK(amp_tensor_to_host(b, hb, n));
    bool same = memcmp(ha, hb, n) == 0;
    free(ha);
    free(hb);
    return same;
}

/* A packed [B, T, 3, H, D] (as [B, T, 3H, D], heads = 2H) against q and k rotated apart, and rows
 * at an offset against the whole sequence's rows there, in bf16 with a Llama 3 table. */
static void test_packed_and_offset(amp_ctx *ctx) {
    enum { B = 2, TT = 9, H = 4, D = 32 };
    amp_rope_config rc = {.head_dim = D, .max_positions = 64, .theta = 500000.0f,
                          .type = AMP_ROPE_LLAMA3, .factor = 8.0f, .low_freq_factor = 1.0f,
                          .high_freq_factor = 4.0f, .original_max_positions = 16};
    amp_tensor *tab = NULL, *qkv = NULL, *y = NULL, *parts[3], *rq = NULL, *rk = NULL, *yp[3];
    CHECK_OK(amp_rope_table_create(ctx, &rc, &tab));
    qkv = host_tensor(ctx, AMP_BF16, 4, (const int64_t[]){B, TT, 3 * H, D}, 5);
    if (!tab || !qkv) return;
    CHECK_OK(amp_rope(qkv, tab, &(amp_rope_opts){.heads = 2 * H}, &y));
    CHECK_OK(amp_split(qkv, H, 2, parts, 3));
    CHECK_OK(amp_rope(parts[0], tab, NULL, &rq));
    CHECK_OK(amp_rope(parts[1], tab, NULL, &rk));
    CHECK_OK(amp_split(y, H, 2, yp, 3));
    CHECK_MSG(same_bits(yp[0], rq) && same_bits(yp[1], rk) && same_bits(yp[2], parts[2]),
              "the packed rotation differs from q and k rotated apart");
    /* the last 4 positions alone, at offset 5, against rows 5..8 of the whole */
    amp_tensor *tail = NULL, *ytail = NULL, *want = NULL;
    CHECK_OK(amp_narrow(qkv, 1, 5, 4, &tail));
    CHECK_OK(amp_rope(tail, tab, &(amp_rope_opts){.heads = 2 * H, .offset = 5}, &ytail));
    CHECK_OK(amp_narrow(y, 1, 5, 4, &want));
    CHECK_MSG(same_bits(ytail, want), "rows at offset 5 differ from the whole sequence's");
    amp_ctx_reset_step(ctx);
    amp_tensor_free(qkv);
    amp_tensor_free(tab);
}

static void test_bad_input(amp_ctx *ctx) {
    amp_tensor *tab = NULL, *x = NULL, *y = NULL, *odd = NULL;
    amp_rope_config rc = {.head_dim = 8, .max_positions = 4};
    CHECK_OK(amp_rope_table_create(ctx, &rc, &tab));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (const int64_t[]){1, 4, 2, 8}, &x));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (const int64_t[]){1, 4, 2, 6}, &odd));
    CHECK_FAILS(amp_rope(x, tab, &(amp_rope_opts){.offset = 1}, &y), AMP_ERR_INVALID_ARG,
                "amp_rope: positions 1 .. 4 are past the table's 4");
    CHECK_FAILS(amp_rope(odd, tab, NULL, &y), AMP_ERR_SHAPE, "amp_rope: the table is f32 [4, 4, 2]");
    CHECK_FAILS(amp_rope(x, tab, &(amp_rope_opts){.heads = 3}, &y), AMP_ERR_INVALID_ARG,
                "opts.heads = 3");
    CHECK_FAILS(amp_rope(x, tab, &(amp_rope_opts){.layout = 5}, &y), AMP_ERR_INVALID_ARG,
                "opts.layout = 5");
    CHECK_FAILS(amp_rope(x, x, NULL, &y), AMP_ERR_SHAPE, "amp_rope: table");
    amp_tensor *none = NULL;
    CHECK_FAILS(amp_rope_table_create(ctx, &(amp_rope_config){.head_dim = 7, .max_positions = 4}, &none),
                AMP_ERR_INVALID_ARG, "amp_rope_table_create: head_dim = 7");
    CHECK_FAILS(amp_rope_table_create(ctx, &(amp_rope_config){.head_dim = 8, .max_positions = 4, .theta = -1.0f}, &none),
                AMP_ERR_INVALID_ARG, "theta = -1");
    CHECK_FAILS(amp_rope_table_create(ctx, &(amp_rope_config){.head_dim = 8, .max_positions = 4, .type = 9}, &none),
                AMP_ERR_INVALID_ARG, "type = 9");
    CHECK_FAILS(amp_rope_table_create(ctx, &(amp_rope_config){.head_dim = 8, .max_positions = 4,
                                                              .type = AMP_ROPE_LLAMA3, .factor = 8.0f,
                                                              .low_freq_factor = 4.0f, .high_freq_factor = 1.0f,
                                                              .original_max_positions = 8}, &none),
                AMP_ERR_INVALID_ARG, "low_freq_factor < high_freq_factor");
    CHECK(none == NULL);
    amp_tensor_free(odd);
    amp_tensor_free(x);
    amp_tensor_free(tab);
}

static void run_all(amp_device device) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 3}, &ctx));
    if (!ctx) return;
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        int before = test_n_fail;
        gc_run(ctx, &cases[i], 7000 + (uint64_t)i);
        printf("%-48s %s\n", cases[i].name, test_n_fail == before ? "ok" : "FAILED");
    }
    test_table(ctx, &(amp_rope_config){.head_dim = 64, .max_positions = 257, .theta = 10000.0f},
               2e-6, "theta 1e4, head_dim 64");
    test_table(ctx, &(amp_rope_config){.head_dim = 128, .max_positions = 257, .theta = 500000.0f},
               2e-6, "theta 5e5, head_dim 128");
    test_table(ctx, &(amp_rope_config){.head_dim = 128, .max_positions = 257, .theta = 500000.0f,
                                       .type = AMP_ROPE_LLAMA3, .factor = 8.0f,
                                       .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                                       .original_max_positions = 8192},
               4e-6, "Llama 3.1 scaling");
    test_packed_and_offset(ctx);
    test_bad_input(ctx);
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(run_all);
    return test_summary("test_rope");
}
