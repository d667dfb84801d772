/* Gradient check of the ops on dims (broadcast add/sub/mul/div, where and masked_fill,
 * sum/mean/max over a dim, narrow, split, chunk, permute, transpose, cat, linear over [B, T, C])
 * with the runner of
 * tests/gradcheck_run.h, on every device that answers (CUDA under cudacpu too), up to 6-D; then
 * the views that cost nothing (a leading-dim narrow shares its input's memory) and bad input. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amp/amp.h"
#include "gradcheck_run.h"
#include "test_devices.h"

/* The flat index into an input of shape in[0..nd_in) of the element of the broadcast output at
 * flat index i (shapes aligned at the last dim, extent-1 dims repeated). */
static int64_t bidx(int nd_out, const int64_t *out, int64_t i, int nd_in, const int64_t *in) {
    int64_t idx = 0, stride = 1;
    for (int k = nd_out - 1; k >= 0; k--) {
        int64_t ik = i % out[k];
        i /= out[k];
        int kin = k - (nd_out - nd_in);
        if (kin < 0) continue;
        if (in[kin] != 1) idx += ik * stride;
        stride *= in[kin];
    }
    return idx;
}

static double apply(int op, double a, double b) {
    return op == 0 ? a + b : op == 1 ? a - b : op == 2 ? a * b : a / b;
}

static amp_status lib_bcast(gc_case *c, amp_tensor **y) {
    amp_status (*fns[4])(amp_tensor *, amp_tensor *, amp_tensor **) = {amp_add, amp_sub, amp_mul,
                                                                      amp_div};
    return fns[c->kernel](T(0), T(1), y);
}
static void ref_bcast(const gc_case *c, double *y) {
    int64_t n = gc_numel(c->y_ndim, c->y_shape);
    for (int64_t i = 0; i < n; i++) {
        double a = V(0)[bidx(c->y_ndim, c->y_shape, i, c->in[0].ndim, c->in[0].shape)];
        double b = V(1)[bidx(c->y_ndim, c->y_shape, i, c->in[1].ndim, c->in[1].shape)];
        y[i] = apply(c->kernel, a, b);
    }
}

/* where(cond, a, b) (kernel 0) or masked_fill(a, cond, 2.5) (kernel 1); cond is input 0. */
static amp_status lib_where(gc_case *c, amp_tensor **y) {
    if (c->kernel == 1) return amp_masked_fill(T(1), T(0), 2.5f, y);
    return amp_where(T(0), T(1), T(2), y);
}
static void ref_where(const gc_case *c, double *y) {
    int64_t n = gc_numel(c->y_ndim, c->y_shape);
    for (int64_t i = 0; i < n; i++) {
        double m = V(0)[bidx(c->y_ndim, c->y_shape, i, c->in[0].ndim, c->in[0].shape)];
        double a = V(1)[bidx(c->y_ndim, c->y_shape, i, c->in[1].ndim, c->in[1].shape)];
        double b = c->kernel == 1 ? 0.0
                                  : V(2)[bidx(c->y_ndim, c->y_shape, i, c->in[2].ndim, c->in[2].shape)];
        y[i] = c->kernel == 1 ? (m != 0 ? 2.5 : a) : (m != 0 ? a : b);
    }
}

/* c->kernel: 0 sum, 1 mean, 2 max; c->stride: the dim. */
static amp_status lib_reduce(gc_case *c, amp_tensor **y) {
    if (c->kernel == 0) return amp_sum_dim(T(0), c->stride, false, y);
    if (c->kernel == 1) return amp_mean_dim(T(0), c->stride, true, y);
    return amp_max_dim(T(0), c->stride, false, y, NULL);
}
static void ref_reduce(const gc_case *c, double *y) {
    int dim = c->stride < 0 ? c->stride + c->in[0].ndim : c->stride;
    int64_t outer = 1, n = S(0, dim), inner = 1;
    for (int k = 0; k < dim; k++) outer *= S(0, k);
    for (int k = dim + 1; k < c->in[0].ndim; k++) inner *= S(0, k);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0.0, m = -INFINITY;
            for (int64_t j = 0; j < n; j++) {
                double v = V(0)[(o * n + j) * inner + i];
                s += v;
                m = v > m ? v : m;
            }
            y[o * inner + i] = c->kernel == 0 ? s : c->kernel == 1 ? s / (double)n : m;
        }
}

/* y = x permuted by perm (c->pad digits, dim 0 first, of c->in[0].ndim dims); transpose when
 * c->kernel is set (dims 1 and 3). */
static void perm_of(const gc_case *c, int *perm) {
    int nd = c->in[0].ndim, code = c->pad;
    for (int k = nd - 1; k >= 0; k--, code /= 10) perm[k] = code % 10;
}
static amp_status lib_permute(gc_case *c, amp_tensor **y) {
    if (c->kernel) return amp_transpose(T(0), 1, -1, y);
    int perm[8];
    perm_of(c, perm);
    return amp_permute(T(0), perm, y);
}
static void ref_permute(const gc_case *c, double *y) {
    int nd = c->in[0].ndim, perm[8];
    if (c->kernel) {
        for (int k = 0; k < nd; k++) perm[k] = k == 1 ? nd - 1 : k == nd - 1 ? 1 : k;
    } else {
        perm_of(c, perm);
    }
    int64_t xs[8], s = 1;
    for (int k = nd - 1; k >= 0; k--) {
        xs[k] = s;
        s *= S(0, k);
    }
    for (int64_t i = 0; i < c->in[0].numel; i++) {
        int64_t r = i, off = 0;
        for (int k = nd - 1; k >= 0; k--) { /* y's dim k has extent x's perm[k] */
            int64_t e = S(0, perm[k]), ik = r % e;
            r /= e;
            off += ik * xs[perm[k]];
        }
        y[i] = V(0)[off];
    }
}

/* x [2, 3, 8] split into 3 pieces along dim 2 (3, 3, 2), cat back along dim 2 as [p2, p0, p1];
 * then times a narrow of itself along dim 1 (rows 1..2, not contiguous). */
static amp_status lib_split_cat(gc_case *c, amp_tensor **y) {
    amp_tensor *p[3], *q, *nar, *sub;
    amp_status s = amp_split(T(0), 3, 2, p, 3);
    amp_tensor *order[3] = {p[2], p[0], p[1]};
    if (!s) s = amp_cat(order, 3, -1, &q);
    if (!s) s = amp_narrow(q, 1, 1, 2, &nar);
    if (!s) s = amp_narrow(T(0), 1, 0, 2, &sub);
    return s ? s : amp_mul(nar, sub, y);
}
static void ref_split_cat(const gc_case *c, double *y) {
    static const int from[8] = {6, 7, 0, 1, 2, 3, 4, 5};
    for (int i = 0; i < 2; i++)
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < 8; j++)
                y[(i * 2 + r) * 8 + j] =
                    V(0)[(i * 3 + r + 1) * 8 + from[j]] * V(0)[(i * 3 + r) * 8 + j];
}

/* x [4, 6] in two chunks along dim 1, multiplied; and a leading-dim narrow (a view). */
static amp_status lib_chunk(gc_case *c, amp_tensor **y) {
    amp_tensor *p[2], *m, *v;
    amp_status s = amp_chunk(T(0), 2, 1, p);
    if (!s) s = amp_mul(p[0], p[1], &m);
    if (!s) s = amp_narrow(m, 0, 1, 3, &v);
    return s ? s : amp_add(v, v, y);
}
static void ref_chunk(const gc_case *c, double *y) {
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            y[i * 3 + j] = 2.0 * V(0)[(i + 1) * 6 + j] * V(0)[(i + 1) * 6 + j + 3];
}

/* x [3, 2, 4] chunked along dim 0 (contiguous pieces: their gradients go straight into x's, the
 * first zeroing it), the middle piece narrowed a second time (its range added to again):
 * p0 p1 + p2 p2 + n1. */
static amp_status lib_chunk0(gc_case *c, amp_tensor **y) {
    amp_tensor *p[3], *a, *b, *n;
    amp_status s = amp_chunk(T(0), 3, 0, p);
    if (!s) s = amp_mul(p[0], p[1], &a);
    if (!s) s = amp_mul(p[2], p[2], &b);
    if (!s) s = amp_add(a, b, &a);
    if (!s) s = amp_narrow(T(0), 0, 1, 1, &n);
    return s ? s : amp_add(a, n, y);
}
static void ref_chunk0(const gc_case *c, double *y) {
    for (int i = 0; i < 8; i++)
        y[i] = V(0)[i] * V(0)[8 + i] + V(0)[16 + i] * V(0)[16 + i] + V(0)[8 + i];
}

static amp_status lib_linear3(gc_case *c, amp_tensor **y) { return amp_linear(T(0), T(1), T(2), y); }
static void ref_linear3(const gc_case *c, double *y) {
    ref_linear(S(0, 0) * S(0, 1), S(0, 2), S(1, 0), V(0), V(1), V(2), y);
}

/* matmul with a batch: a [..., m, k] (or [m, k], shared) @ b [..., k, n] (or [k, n]). */
static amp_status lib_matmul_b(gc_case *c, amp_tensor **y) { return amp_matmul(T(0), T(1), y); }
static void ref_matmul_b(const gc_case *c, double *y) {
    int na = c->in[0].ndim, nb = c->in[1].ndim;
    int64_t m = S(0, na - 2), k = S(0, na - 1), n = S(1, nb - 1);
    int64_t batch = gc_numel(c->y_ndim, c->y_shape) / (m * n);
    bool shared_a = na == 2, shared_b = nb == 2;
    for (int64_t bt = 0; bt < batch; bt++)
        ref_matmul(m, k, n, V(0) + (shared_a ? 0 : bt * m * k), V(1) + (shared_b ? 0 : bt * k * n),
                   y + bt * m * n);
}

/* softmax (c->kernel 0) or log_softmax (1) over dim c->stride. */
static amp_status lib_softmax(gc_case *c, amp_tensor **y) {
    return c->kernel ? amp_log_softmax(T(0), c->stride, y) : amp_softmax(T(0), c->stride, y);
}
static void ref_softmax(const gc_case *c, double *y) {
    int nd = c->in[0].ndim, dim = c->stride < 0 ? c->stride + nd : c->stride;
    int64_t outer = 1, n = S(0, dim), inner = 1;
    for (int k = 0; k < dim; k++) outer *= S(0, k);
    for (int k = dim + 1; k < nd; k++) inner *= S(0, k);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double m = -INFINITY, s = 0.0;
            for (int64_t j = 0; j < n; j++) m = fmax(m, V(0)[(o * n + j) * inner + i]);
            for (int64_t j = 0; j < n; j++) s += exp(V(0)[(o * n + j) * inner + i] - m);
            for (int64_t j = 0; j < n; j++) {
                double v = V(0)[(o * n + j) * inner + i] - m;
                y[(o * n + j) * inner + i] = c->kernel ? v - log(s) : exp(v) / s;
            }
        }
}

/* tokens [2, 5] into a [7, 4] table, twice (token and position tables summed, as GPT's). */
static amp_status lib_embedding(gc_case *c, amp_tensor **y) {
    amp_tensor *a, *b;
    amp_status s = amp_embedding(T(0), T(1), &a);
    if (!s) s = amp_embedding(T(2), T(3), &b);
    return s ? s : amp_add(a, b, y);
}
static void ref_embedding(const gc_case *c, double *y) {
    int64_t dim = S(1, 1);
    for (int64_t i = 0; i < c->in[0].numel; i++)
        for (int64_t k = 0; k < dim; k++)
            y[i * dim + k] = V(1)[(int64_t)V(0)[i] * dim + k] + V(3)[(int64_t)V(2)[i] * dim + k];
}

#define BC(nm, op, a, b, out) {OP(nm, lib_bcast, ref_bcast), .in = {a, b}, out, .kernel = op}

static gc_case cases[] = {
    BC("add bias [C] over [B, T, C]", 0, X_("x", 3, 2, 3, 5), X_("b", 1, 5), OUT(3, 2, 3, 5)),
    BC("add both repeat", 0, X_("a", 3, 4, 1, 5), X_("b", 2, 3, 1), OUT(3, 4, 3, 5)),
    BC("sub mask over heads", 1, X_("a", 4, 2, 3, 4, 4), X_("m", 4, 1, 1, 4, 4), OUT(4, 2, 3, 4, 4)),
    BC("mul scale per row", 2, X_("a", 2, 6, 7), X_("s", 2, 6, 1), OUT(2, 6, 7)),
    BC("mul both repeat 5-D", 2, X_("a", 5, 2, 1, 3, 1, 2), X_("b", 4, 2, 1, 4, 1),
       OUT(5, 2, 2, 3, 4, 2)),
    BC("div by a [1] scalar", 3, X_("a", 2, 3, 4), IN("s", 1, GC_AWAY0, 0.5, 2, true, 1), OUT(2, 3, 4)),
    BC("div rows by a column", 3, X_("a", 2, 5, 4), IN("b", 2, GC_AWAY0, 0.5, 2, true, 5, 1),
       OUT(2, 5, 4)),
    {OP("where, all three broadcast", lib_where, ref_where),
     .in = {IN("cond", 3, GC_LABELS, 0, 2, false, 2, 1, 5), X_("a", 2, 3, 5), X_("b", 3, 2, 3, 1)},
     OUT(3, 2, 3, 5)},
    {OP("masked_fill, a causal-style mask over heads", lib_where, ref_where),
     .in = {IN("mask", 2, GC_LABELS, 0, 2, false, 4, 4), X_("x", 4, 2, 3, 4, 4)},
     OUT(4, 2, 3, 4, 4), .kernel = 1},
    {OP("sum over dim 1", lib_reduce, ref_reduce), .in = {X_("x", 3, 3, 4, 5)}, OUT(2, 3, 5),
     .kernel = 0, .stride = 1},
    {OP("sum over the last dim", lib_reduce, ref_reduce), .in = {X_("x", 2, 6, 9)}, OUT(1, 6),
     .kernel = 0, .stride = -1},
    {OP("mean over dim -2 keepdim", lib_reduce, ref_reduce), .in = {X_("x", 4, 2, 3, 4, 5)},
     OUT(4, 2, 3, 1, 5), .kernel = 1, .stride = -2},
    {OP("max over dim 0", lib_reduce, ref_reduce),
     .in = {IN("x", 3, GC_DISTINCT, -2, 2, true, 4, 3, 5)}, OUT(2, 3, 5), .kernel = 2, .stride = 0},
    {OP("max over the last dim", lib_reduce, ref_reduce),
     .in = {IN("x", 2, GC_DISTINCT, -2, 2, true, 7, 6)}, OUT(1, 7), .kernel = 2, .stride = 1},
    {OP("permute [B, T, H, D] -> [B, H, T, D]", lib_permute, ref_permute),
     .in = {X_("x", 4, 2, 5, 3, 4)}, OUT(4, 2, 3, 5, 4), .pad = 213},
    {OP("permute 6-D", lib_permute, ref_permute), .in = {X_("x", 6, 2, 1, 3, 2, 2, 3)},
     OUT(6, 2, 3, 2, 1, 2, 3), .pad = 53142},
    {OP("transpose 1 and -1", lib_permute, ref_permute), .in = {X_("x", 3, 2, 3, 4)},
     OUT(3, 2, 4, 3), .kernel = 1},
    {OP("split, cat, narrow", lib_split_cat, ref_split_cat), .in = {X_("x", 3, 2, 3, 8)},
     OUT(3, 2, 2, 8)},
    {OP("chunk and a view", lib_chunk, ref_chunk), .in = {X_("x", 2, 4, 6)}, OUT(2, 3, 3)},
    {OP("chunk along dim 0, a piece narrowed twice", lib_chunk0, ref_chunk0),
     .in = {X_("x", 3, 3, 2, 4)}, OUT(3, 1, 2, 4)},
    {OP("matmul batched [B, H, T, D] @ [B, H, D, T]", lib_matmul_b, ref_matmul_b),
     .in = {X_("q", 4, 2, 3, 4, 5), X_("k", 4, 2, 3, 5, 4)}, OUT(4, 2, 3, 4, 4)},
    {OP("matmul shared a @ batched b", lib_matmul_b, ref_matmul_b),
     .in = {X_("a", 2, 4, 5), X_("b", 3, 3, 5, 6)}, OUT(3, 3, 4, 6)},
    {OP("matmul batched a @ shared b", lib_matmul_b, ref_matmul_b),
     .in = {X_("a", 3, 2, 3, 4), X_("b", 2, 4, 5)}, OUT(3, 2, 3, 5)},
    {OP("softmax over the last dim", lib_softmax, ref_softmax),
     .in = {IN("x", 3, GC_UNIFORM, -3, 3, true, 2, 3, 7)}, OUT(3, 2, 3, 7), .stride = -1},
    {OP("softmax over dim 1", lib_softmax, ref_softmax),
     .in = {IN("x", 3, GC_UNIFORM, -3, 3, true, 2, 5, 3)}, OUT(3, 2, 5, 3), .stride = 1},
    {OP("log_softmax over the last dim", lib_softmax, ref_softmax),
     .in = {IN("x", 2, GC_UNIFORM, -3, 3, true, 6, 11)}, OUT(2, 6, 11), .kernel = 1, .stride = 1},
    {OP("embedding, token and position", lib_embedding, ref_embedding),
     .in = {IN("tokens", 2, GC_LABELS, 0, 7, false, 2, 5), X_("wte", 2, 7, 4),
            IN("pos", 2, GC_LABELS, 0, 5, false, 2, 5), X_("wpe", 2, 5, 4)},
     OUT(3, 2, 5, 4)},
    {OP("linear over [B, T, C]", lib_linear3, ref_linear3),
     .in = {X_("x", 3, 2, 3, 6), W_("w", 2, 5, 6), W_("b", 1, 5)}, OUT(3, 2, 3, 5)},
};

/* A narrow of the leading dim is x's memory; one of an inner dim is a copy. Splits and cats of
 * misfit shapes are refused naming the op. */
/* A fully masked row (all -inf): softmax 0 and log_softmax -inf, gradients 0, never NaN; a row
 * with some -inf: 0 there. */
static void test_masked_rows(amp_ctx *ctx) {
    float host[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, 1.0f, -INFINITY, 2.0f, 0.5f};
    amp_tensor *x = NULL, *y = NULL, *l = NULL, *loss = NULL, *g = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){2, 4}, host, &x));
    CHECK_OK(amp_tensor_set_requires_grad(x, true));
    CHECK_OK(amp_softmax(x, -1, &y));
    CHECK_OK(amp_log_softmax(x, -1, &l));
    float back[8], lb[8];
    CHECK_OK(amp_tensor_to_host(y, back, sizeof back));
    CHECK_OK(amp_tensor_to_host(l, lb, sizeof lb));
    CHECK(back[0] == 0.0f && back[3] == 0.0f && back[5] == 0.0f && back[4] > 0.0f);
    CHECK(lb[0] == -INFINITY && lb[5] == -INFINITY && isfinite(lb[4]));
    CHECK_OK(amp_mean(y, &loss));
    CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_tensor_get_grad(x, &g));
    CHECK_OK(amp_tensor_to_host(g, back, sizeof back));
    for (int i = 0; i < 8; i++) CHECK_MSG(isfinite(back[i]), "gradient %d is %g", i, back[i]);
    CHECK(back[0] == 0.0f && back[5] == 0.0f);
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x);
}

/* An id out of range: refused naming it on the CPU; on CUDA its row is NaN and the cross-entropy
 * that follows names it. */
static void test_embedding_bad_id(amp_ctx *ctx) {
    int32_t ids[3] = {0, 9, 1}, labels[3] = {0, 1, 2};
    float w[20] = {0};
    amp_tensor *idx = NULL, *wt = NULL, *lab = NULL, *y = NULL, *loss = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (const int64_t[]){3}, ids, &idx));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (const int64_t[]){3}, labels, &lab));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){5, 4}, w, &wt));
    if (amp_ctx_device(ctx) == AMP_DEVICE_CPU) {
        CHECK_FAILS(amp_embedding(idx, wt, &y), AMP_ERR_INVALID_ARG, "idx[1] = 9");
    } else {
        CHECK_OK(amp_embedding(idx, wt, &y));
        CHECK_FAILS(amp_cross_entropy(y, lab, &loss), AMP_ERR_INVALID_ARG, "position 1");
    }
    amp_ctx_reset_step(ctx);
    amp_tensor_free(idx);
    amp_tensor_free(lab);
    amp_tensor_free(wt);
}

static void test_views_and_errors(amp_ctx *ctx) {
    float host[24];
    for (int i = 0; i < 24; i++) host[i] = (float)i;
    amp_tensor *x = NULL, *v = NULL, *w = NULL, *p[4];
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 3, (const int64_t[]){1, 4, 6}, host, &x));
    CHECK_OK(amp_narrow(x, 1, 1, 2, &v));
    float back[12];
    CHECK_OK(amp_tensor_to_host(v, back, sizeof back));
    CHECK(back[0] == 6.0f && back[11] == 17.0f);
    CHECK_OK(amp_narrow(x, 2, 2, 3, &w));
    CHECK_OK(amp_tensor_to_host(w, back, 4 * 3 * sizeof(float)));
    CHECK(back[0] == 2.0f && back[3] == 8.0f);
    CHECK_FAILS(amp_narrow(x, 2, 4, 3, &w), AMP_ERR_SHAPE, "amp_narrow");
    CHECK_FAILS(amp_narrow(x, 3, 0, 1, &w), AMP_ERR_INVALID_ARG, "dim 3");
    CHECK_FAILS(amp_chunk(x, 4, 2, p), AMP_ERR_SHAPE, "equal chunks");
    CHECK_FAILS(amp_split(x, 4, 2, p, 3), AMP_ERR_SHAPE, "make 2 tensors");
    CHECK_FAILS(amp_permute(x, (const int[]){0, 1, 1}, &w), AMP_ERR_INVALID_ARG, "twice");
    amp_tensor *pair[2] = {x, v};
    CHECK_FAILS(amp_cat(pair, 2, 2, &w), AMP_ERR_SHAPE, "amp_cat");
    amp_tensor *a = NULL, *b = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){3, 4}, &a));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){2, 4}, &b));
    CHECK_FAILS(amp_add(a, b, &w), AMP_ERR_SHAPE, "do not broadcast");
    CHECK_FAILS(amp_sum_dim(a, 2, false, &w), AMP_ERR_INVALID_ARG, "amp_sum_dim");
    amp_tensor *m = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_I32, 1, (const int64_t[]){3}, &m));
    CHECK_FAILS(amp_where(a, a, a, &w), AMP_ERR_DTYPE, "amp_where: cond has dtype f32, want i32");
    CHECK_FAILS(amp_masked_fill(a, m, 0.0f, &w), AMP_ERR_SHAPE,
                "amp_masked_fill: mask [3] does not broadcast");
    CHECK_FAILS(amp_where(m, a, b, &w), AMP_ERR_SHAPE, "do not broadcast");
    int64_t seven[7] = {1, 1, 1, 1, 1, 1, 2}, nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 2};
    amp_tensor *t7 = NULL, *t9 = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 7, seven, &t7));
    CHECK_FAILS(amp_tensor_create(ctx, AMP_F32, 9, nine, &t9), AMP_ERR_SHAPE, "1..8");
    amp_ctx_reset_step(ctx);
    amp_tensor_free(t7);
    amp_tensor_free(m);
    amp_tensor_free(a);
    amp_tensor_free(b);
    amp_tensor_free(x);
}

static void run_all(amp_device device) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 99}, &ctx));
    if (!ctx) return;
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        int before = test_n_fail;
        gc_run(ctx, &cases[i], 3000 + (uint64_t)i);
        printf("%-48s %s\n", cases[i].name, test_n_fail == before ? "ok" : "FAILED");
    }
    test_views_and_errors(ctx);
    test_masked_rows(ctx);
    test_embedding_bad_id(ctx);
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(run_all);
    return test_summary("test_gradcheck_dims");
}
