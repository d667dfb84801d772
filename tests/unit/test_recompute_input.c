/* Selective recomputation at the op level (amp_linear_ex's and amp_linear_swiglu_ex's
 * recompute_input, nn/gemm.c), on every device that answers, in f32 and bf16:
 *  - a GPT MLP (LayerNorm, a linear with a GELU, both GELU forms, a linear; the norm through
 *    amp_reshape) and a Llama MLP (RMSNorm, the SwiGLU projections as one GEMM and as two, a
 *    linear) with every GEMM input dropped after its consumer and written again in backward
 *    give the same output and the same gradients of every leaf, bit for bit, as with the inputs
 *    kept;
 *  - misuse is refused, naming the call and why: a producer that cannot write its output again
 *    (amp_linear_gelu, a leaf), an input written in place since its producer ran (directly or
 *    seen through amp_reshape), an activation given to amp_linear_swiglu_ex. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/error.h"
#include "test_devices.h"
#include "test_tensors.h"
#include "test_util.h"

#define NAME "test_recompute_input"
enum { B = 3, T = 5, C = 24, F = 40, N_LEAVES = 8 };



typedef enum mlp_kind { MLP_GPT, MLP_GPT_TANH, MLP_LLAMA, MLP_LLAMA_SPLIT } mlp_kind;
static const char *const mlp_names[] = {"GPT MLP (erf GELU)", "GPT MLP (tanh GELU)",
                                        "Llama MLP (one gate-up GEMM)", "Llama MLP (two GEMMs)"};

/* The leaves of one MLP: x, the norm's gamma (and beta), the weights and biases. */
typedef struct mlp {
    amp_tensor *leaf[N_LEAVES];
    int n_leaves;
} mlp;

static amp_tensor *add_leaf(mlp *m, amp_tensor *t) { return m->leaf[m->n_leaves++] = t; }

static void mlp_make(amp_ctx *ctx, mlp_kind kind, amp_dtype dt, mlp *m) {
    memset(m, 0, sizeof *m);
    add_leaf(m, test_sin_leaf(ctx, dt, 3, (const int64_t[]){B, T, C}, 0.31, 1.5, 0.2));
    add_leaf(m, test_sin_leaf(ctx, AMP_F32, 1, (const int64_t[]){C}, 0.7, 0.2, 1.0));
    if (kind == MLP_GPT || kind == MLP_GPT_TANH) {
        add_leaf(m, test_sin_leaf(ctx, AMP_F32, 1, (const int64_t[]){C}, 0.9, 0.1, 0.0));
        add_leaf(m, test_sin_leaf(ctx, dt, 2, (const int64_t[]){F, C}, 0.17, 0.4, 0.0));
        add_leaf(m, test_sin_leaf(ctx, dt, 1, (const int64_t[]){F}, 0.23, 0.3, 0.0));
        add_leaf(m, test_sin_leaf(ctx, dt, 2, (const int64_t[]){C, F}, 0.19, 0.3, 0.0));
        add_leaf(m, test_sin_leaf(ctx, dt, 1, (const int64_t[]){C}, 0.29, 0.1, 0.0));
    } else {
        /* gate rows 0..F-1, up rows F.. (one GEMM) or F+1.. (never adjacent: two GEMMs) */
        add_leaf(m, test_sin_leaf(ctx, dt, 2, (const int64_t[]){2 * F + 1, C}, 0.17, 0.4, 0.0));
        add_leaf(m, test_sin_leaf(ctx, dt, 2, (const int64_t[]){C, F}, 0.19, 0.3, 0.0));
    }
}

static void mlp_free(mlp *m) {
    for (int i = 0; i < m->n_leaves; i++) amp_tensor_free(m->leaf[i]);
}

/* The MLP's output, each GEMM's input dropped after its consumer when recompute. */
static amp_status mlp_forward(mlp_kind kind, mlp *m, bool recompute, amp_tensor **y) {
    amp_tensor **L = m->leaf, *h = NULL, *a = NULL;
    bool gpt = kind == MLP_GPT || kind == MLP_GPT_TANH;
    amp_norm_opts no = {.kind = gpt ? AMP_NORM_LAYER : AMP_NORM_RMS, .eps = 1e-5f};
    amp_linear_opts first = {.recompute_input = recompute}, second = first;
    AMP_TRY(amp_norm(L[0], NULL, L[1], gpt ? L[2] : NULL, &no, NULL, &h));
    if (gpt) {
        amp_tensor *h2 = NULL;
        AMP_TRY(amp_reshape(h, 2, (const int64_t[]){B * T, C}, &h2));
        first.activation = kind == MLP_GPT ? AMP_LINEAR_GELU : AMP_LINEAR_GELU_TANH;
        AMP_TRY(amp_linear_ex(h2, L[3], L[4], &first, &a));
        if (recompute) AMP_TRY(amp_tensor_drop(h2));
        if (recompute) AMP_TRY(amp_tensor_drop(h));
        AMP_TRY(amp_linear_ex(a, L[5], L[6], &second, y));
    } else {
        amp_tensor *wg = NULL, *wu = NULL;
        AMP_TRY(amp_narrow(L[2], 0, 0, F, &wg));
        AMP_TRY(amp_narrow(L[2], 0, kind == MLP_LLAMA ? F : F + 1, F, &wu));
        AMP_TRY(amp_linear_swiglu_ex(h, wg, wu, &first, &a));
        if (recompute) AMP_TRY(amp_tensor_drop(h));
        AMP_TRY(amp_linear_ex(a, L[3], NULL, &second, y));
    }
    if (recompute) AMP_TRY(amp_tensor_drop(a));
    return AMP_OK;
}

/* mean(y * w), w fixed: every run gets the same dy. */
static void backward_of(amp_ctx *ctx, amp_tensor *y) {
    int64_t n = amp_tensor_numel(y);
    float *w = malloc((size_t)n * sizeof *w);
    if (!w) abort();
    for (int64_t i = 0; i < n; i++) w[i] = (float)cos(0.3 * (double)i) * 4.0f;
    amp_tensor *wt = NULL, *p = NULL, *loss = NULL;
    int64_t shape[AMP_MAX_DIMS];
    for (int d = 0; d < amp_tensor_ndim(y); d++) shape[d] = amp_tensor_dim(y, d);
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, amp_tensor_ndim(y), shape, w, &wt));
    CHECK_OK(amp_mul(y, wt, &p));
    CHECK_OK(amp_mean(p, &loss));
    CHECK_OK(amp_backward(loss));
    free(w);
    amp_tensor_free(wt);
}

static void check_bits(amp_ctx *ctx, mlp_kind kind, amp_dtype dt) {
    uint64_t out[2] = {0, 0}, grad[2][N_LEAVES];
    int n_leaves = 0;
    for (int r = 0; r < 2; r++) {
        mlp m;
        mlp_make(ctx, kind, dt, &m);
        amp_tensor *y = NULL;
        CHECK_OK(mlp_forward(kind, &m, r == 1, &y));
        if (y) {
            out[r] = test_tensor_hash(y);
            backward_of(ctx, y);
        }
        n_leaves = m.n_leaves;
        for (int i = 0; i < m.n_leaves; i++) {
            amp_tensor *g = NULL;
            CHECK_OK(amp_tensor_get_grad(m.leaf[i], &g));
            CHECK_MSG(g != NULL, "%s %s: leaf %d has no gradient", mlp_names[kind],
                      amp_dtype_name(dt), i);
            grad[r][i] = test_tensor_hash(g);
        }
        amp_ctx_reset_step(ctx);
        mlp_free(&m);
    }
    CHECK_MSG(out[0] == out[1], "%s %s: the output differs with its inputs recomputed",
              mlp_names[kind], amp_dtype_name(dt));
    for (int i = 0; i < n_leaves; i++)
        CHECK_MSG(grad[0][i] == grad[1][i], "%s %s: leaf %d's gradient differs with the GEMM "
                  "inputs written again in backward", mlp_names[kind], amp_dtype_name(dt), i);
}

static void check_misuse(amp_ctx *ctx) {
    mlp m;
    mlp_make(ctx, MLP_GPT, AMP_F32, &m);
    amp_tensor **L = m.leaf, *h = NULL, *h2 = NULL, *a = NULL, *y = NULL;
    amp_linear_opts ro = {.recompute_input = true};
    const char *cannot = "x is not the output of an op that can write it again";
    /* amp_linear_gelu may fuse its GELU into the GEMM: no exact rewrite of its output */
    CHECK_OK(amp_norm(L[0], NULL, L[1], L[2], NULL, NULL, &h));
    CHECK_OK(amp_linear_gelu(h, L[3], L[4], false, &a));
    CHECK_FAILS(amp_linear_ex(a, L[5], L[6], &ro, &y), AMP_ERR_INVALID_ARG, cannot);
    CHECK_FAILS(amp_linear_ex(L[0], L[3], NULL, &ro, &y), AMP_ERR_INVALID_ARG, cannot);
    /* a norm output written in place after the norm, and the same seen through a reshape */
    CHECK_OK(amp_reshape(h, 2, (const int64_t[]){B * T, C}, &h2));
    CHECK_OK(amp_accumulate(h, h));
    CHECK_FAILS(amp_linear_ex(h, L[3], L[4], &ro, &y), AMP_ERR_INVALID_ARG,
                "amp_linear_ex: opts.recompute_input: x was written in place after the layer_norm");
    amp_tensor *h3 = NULL;
    CHECK_OK(amp_reshape(h, 2, (const int64_t[]){B * T, C}, &h3));
    CHECK_FAILS(amp_linear_ex(h3, L[3], L[4], &ro, &y), AMP_ERR_INVALID_ARG, cannot);
    CHECK_FAILS(amp_linear_ex(h2, L[3], L[4], &ro, &y), AMP_ERR_INVALID_ARG, "written in place");
    /* the SwiGLU is amp_linear_swiglu_ex's activation */
    amp_tensor *wg = NULL, *wu = NULL;
    CHECK_OK(amp_narrow(L[3], 0, 0, F / 2, &wg));
    CHECK_OK(amp_narrow(L[3], 0, F / 2, F / 2, &wu));
    amp_linear_opts act = {.activation = AMP_LINEAR_GELU};
    CHECK_FAILS(amp_linear_swiglu_ex(L[0], wg, wu, &act, &y), AMP_ERR_INVALID_ARG,
                "amp_linear_swiglu_ex: opts.activation");
    CHECK_FAILS(amp_linear_swiglu_ex(L[0], wg, wu, &ro, &y), AMP_ERR_INVALID_ARG, cannot);
    CHECK(y == NULL);
    amp_ctx_reset_step(ctx);
    mlp_free(&m);
}

static void body(amp_device dev) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = dev, .seed = 1}, &ctx));
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    for (int k = 0; k < 4; k++)
        for (int d = 0; d < 2; d++) check_bits(ctx, (mlp_kind)k, dts[d]);
    check_misuse(ctx);
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(body);
    return test_summary(NAME);
}
