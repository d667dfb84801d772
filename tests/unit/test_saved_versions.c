/* Autograd's contract (DESIGN.md): a tensor an op saved for its backward and that was written
 * after the forward makes amp_backward refuse, naming the op and the input, as PyTorch's "one of
 * the variables needed for gradient computation has been modified by an inplace operation".
 *  - The six rewrites with amp_tensor_copy_from_host between a forward and its backward:
 *    attention's kv_len, attention's q, embedding ids, cross-entropy labels, x in x * x, a
 *    linear layer's input batch. Each: the backward is AMP_ERR_STATE and amp_last_error() names
 *    amp_backward, the input and the op; no gradient is written (none on a fresh leaf, a
 *    gradient of an earlier backward left bit for bit), and the graph stays (a second try is
 *    refused the same way) until the step ends. The same sequence without the rewrite gives the
 *    gradients of a plain double reference of the forward's values, and a forward after the
 *    write those of the new values.
 *  - retain_graph, amp_step, a second backward of the same loss (O0 and O2): refused, naming the
 *    stepped weight; gradients untouched; the graph's stale nodes stop no backward that does not
 *    reach them; amp_zero_grad then a fresh step works. Without the step the second backward
 *    runs and adds the same gradients again.
 *  - An output the backward reads (relu's) and a tensor the op saved and returned (max_dim's
 *    indices) are checked too; what a backward never reads (relu's input, embedding's weight)
 *    may be written without a refusal (PyTorch saves neither).
 * On the CPU, and on CUDA where a device answers (the CUDA backend under ../shared/cudacpu). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amp/amp.h"
#include "test_devices.h"
#include "test_util.h"

#define NAME "test_saved_versions"
#define MAX_T 6   /* tensors of a case */
#define MAX_N 256 /* elements of one tensor */

static void fill(float *h, int n, float seed) {
    for (int i = 0; i < n; i++) h[i] = 0.9f * sinf(0.37f * (float)i + seed);
}

static amp_tensor *make(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape,
                        const void *h, bool grad) {
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, dt, ndim, shape, h, &t));
    if (t && grad) CHECK_OK(amp_tensor_set_requires_grad(t, true));
    return t;
}

/* t's gradient as f32 into h; false (and h untouched) when it has none. */
static bool grad_of(const amp_tensor *t, float *h) {
    amp_tensor *g = NULL;
    if (amp_tensor_get_grad(t, &g) != AMP_OK || !g) return false;
    CHECK_OK(amp_tensor_to_host_f32(g, h, sizeof(float) * (size_t)amp_tensor_numel(g)));
    return true;
}

/* The refusal: AMP_ERR_STATE, a message that names amp_backward, the check and `what` (the
 * input and the op: "input 3 (kv_len) of scaled_dot_product_attention"). */
static void check_refused(amp_status s, const char *what) {
    const char *m = amp_last_error();
    CHECK_MSG(s == AMP_ERR_STATE && strncmp(m, "amp_backward: ", 14) == 0 &&
                  strstr(m, "modified after its forward") && strstr(m, what),
              "got status %d '%s', want AMP_ERR_STATE naming amp_backward and '%s'", (int)s, m,
              what);
}

/* ---- the six rewrites: one table row each ---- */

typedef struct vcase {
    const char *name, *what; /* the row, and the refusal's input and op */
    int n_leaves;            /* t[0..n_leaves) need gradients */
    /* t[0..MAX_T) on ctx, with the forward's values */
    void (*make)(amp_ctx *ctx, amp_tensor **t);
    amp_status (*forward)(amp_tensor *const *t, amp_tensor **loss);
    /* writes the rewritten (new) or the forward's values into the tensor the row rewrites */
    amp_status (*rewrite)(amp_tensor *const *t, bool new_values);
    /* worst error of the leaves' gradients against the reference for those values, relative
     * to the largest reference gradient */
    double (*grad_error)(amp_tensor *const *t, bool new_values);
} vcase;

/* Worst |got - want| over n, relative to max |want| (a reference of all zeros: absolute). */
static double rel_err(const float *got, const double *want, int n) {
    double worst = 0.0, scale = 0.0;
    for (int i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs((double)got[i] - want[i]));
    return scale > 0.0 ? worst / scale : worst;
}

/* Attention: q, k, v [2, 1, 8, 4] need gradients, kv_len {8, 5}; loss = mean(y * y). */
enum { AB = 2, AT = 8, AD = 4, AN = AB * AT * AD };
static const int32_t attn_len_old[AB] = {8, 5}, attn_len_new[AB] = {8, 2};

static void attn_make(amp_ctx *ctx, amp_tensor **t) {
    const int64_t shape[4] = {AB, 1, AT, AD}, two[1] = {AB};
    float h[AN];
    for (int i = 0; i < 3; i++) {
        fill(h, AN, 1.0f + (float)i);
        t[i] = make(ctx, AMP_F32, 4, shape, h, true);
    }
    t[3] = make(ctx, AMP_I32, 1, two, attn_len_old, false);
}

static amp_status attn_forward(amp_tensor *const *t, amp_tensor **loss) {
    amp_tensor *y, *sq;
    amp_attention_options o = {.kv_len = t[3]};
    amp_status s = amp_scaled_dot_product_attention(t[0], t[1], t[2], &o, &y);
    if (s == AMP_OK) s = amp_mul(y, y, &sq);
    return s == AMP_OK ? amp_mean(sq, loss) : s;
}

/* The gradients of mean(o * o), o = softmax(q k^T / sqrt(d), keys j < len[b]) v, in double. */
static void attn_ref(const float *q, const float *k, const float *v, const int32_t *len,
                     double *dq, double *dk, double *dv) {
    const double scale = 1.0 / sqrt((double)AD);
    memset(dq, 0, sizeof(double) * AN);
    memset(dk, 0, sizeof(double) * AN);
    memset(dv, 0, sizeof(double) * AN);
    for (int b = 0; b < AB; b++) {
        int L = len[b], base = b * AT * AD;
        for (int i = 0; i < AT; i++) {
            const float *qi = q + base + i * AD;
            double p[AT], dp[AT], o[AD] = {0}, mx = -INFINITY, sum = 0.0, pdp = 0.0;
            for (int j = 0; j < L; j++) {
                double s = 0.0;
                for (int c = 0; c < AD; c++) s += (double)qi[c] * k[base + j * AD + c];
                p[j] = s * scale;
                mx = fmax(mx, p[j]);
            }
            for (int j = 0; j < L; j++) sum += (p[j] = exp(p[j] - mx));
            for (int j = 0; j < L; j++) {
                p[j] /= sum;
                for (int c = 0; c < AD; c++) o[c] += p[j] * v[base + j * AD + c];
            }
            double dout[AD];
            for (int c = 0; c < AD; c++) dout[c] = 2.0 * o[c] / AN;
            for (int j = 0; j < L; j++) {
                dp[j] = 0.0;
                for (int c = 0; c < AD; c++) {
                    dv[base + j * AD + c] += p[j] * dout[c];
                    dp[j] += dout[c] * v[base + j * AD + c];
                }
                pdp += p[j] * dp[j];
            }
            for (int j = 0; j < L; j++) {
                double ds = p[j] * (dp[j] - pdp) * scale;
                for (int c = 0; c < AD; c++) {
                    dq[base + i * AD + c] += ds * k[base + j * AD + c];
                    dk[base + j * AD + c] += ds * qi[c];
                }
            }
        }
    }
}

/* The leaves' gradients against attn_ref of q, k and v as they are and kv_len as given. */
static double attn_error(amp_tensor *const *t, const int32_t *len) {
    float h[3][AN], g[AN];
    for (int i = 0; i < 3; i++) CHECK_OK(amp_tensor_to_host(t[i], h[i], sizeof h[i]));
    double want[3][AN], worst = 0.0;
    attn_ref(h[0], h[1], h[2], len, want[0], want[1], want[2]);
    for (int i = 0; i < 3; i++)
        worst = fmax(worst, grad_of(t[i], g) ? rel_err(g, want[i], AN) : 1.0);
    return worst;
}

static amp_status attn_len_rewrite(amp_tensor *const *t, bool new_values) {
    return amp_tensor_copy_from_host(t[3], new_values ? attn_len_new : attn_len_old,
                                     sizeof attn_len_old);
}

static double attn_len_error(amp_tensor *const *t, bool new_values) {
    return attn_error(t, new_values ? attn_len_new : attn_len_old);
}

/* q zeroed (then its values again: attn_make's). */
static amp_status attn_q_rewrite(amp_tensor *const *t, bool new_values) {
    float h[AN] = {0};
    if (!new_values) fill(h, AN, 1.0f);
    return amp_tensor_copy_from_host(t[0], h, sizeof h);
}

static double attn_q_error(amp_tensor *const *t, bool new_values) {
    (void)new_values; /* q as it is now */
    return attn_error(t, attn_len_old);
}

/* Embedding: weight [10, 4] needs a gradient, ids {1, 2, 3} (then {7, 8, 9}); loss =
 * mean(y * y), so row r's gradient is 2 weight[r] / 12 per id r. */
enum { EV = 10, ED = 4, EN = 3 };
static const int32_t emb_old[EN] = {1, 2, 3}, emb_new[EN] = {7, 8, 9};

static void emb_make(amp_ctx *ctx, amp_tensor **t) {
    float w[EV * ED];
    fill(w, EV * ED, 0.5f);
    t[0] = make(ctx, AMP_F32, 2, (const int64_t[]){EV, ED}, w, true);
    t[1] = make(ctx, AMP_I32, 1, (const int64_t[]){EN}, emb_old, false);
}

static amp_status emb_forward(amp_tensor *const *t, amp_tensor **loss) {
    amp_tensor *y, *sq;
    amp_status s = amp_embedding(t[1], t[0], &y);
    if (s == AMP_OK) s = amp_mul(y, y, &sq);
    return s == AMP_OK ? amp_mean(sq, loss) : s;
}

static amp_status emb_rewrite(amp_tensor *const *t, bool new_values) {
    return amp_tensor_copy_from_host(t[1], new_values ? emb_new : emb_old, sizeof emb_old);
}

static double emb_error(amp_tensor *const *t, bool new_values) {
    const int32_t *ids = new_values ? emb_new : emb_old;
    float w[EV * ED], g[EV * ED];
    double want[EV * ED] = {0};
    CHECK_OK(amp_tensor_to_host(t[0], w, sizeof w));
    for (int n = 0; n < EN; n++)
        for (int c = 0; c < ED; c++) want[ids[n] * ED + c] += 2.0 * w[ids[n] * ED + c] / (EN * ED);
    return grad_of(t[0], g) ? rel_err(g, want, EV * ED) : 1.0;
}

/* Cross-entropy: logits [4, 5] need a gradient, labels {0, 3, 1, 4} (then {2, 2, 2, 2}). */
enum { XR = 4, XC = 5 };
static const int32_t xent_old[XR] = {0, 3, 1, 4}, xent_new[XR] = {2, 2, 2, 2};

static void xent_make(amp_ctx *ctx, amp_tensor **t) {
    float l[XR * XC];
    fill(l, XR * XC, 0.25f);
    t[0] = make(ctx, AMP_F32, 2, (const int64_t[]){XR, XC}, l, true);
    t[1] = make(ctx, AMP_I32, 1, (const int64_t[]){XR}, xent_old, false);
}

static amp_status xent_forward(amp_tensor *const *t, amp_tensor **loss) {
    return amp_cross_entropy(t[0], t[1], loss);
}

static amp_status xent_rewrite(amp_tensor *const *t, bool new_values) {
    return amp_tensor_copy_from_host(t[1], new_values ? xent_new : xent_old, sizeof xent_old);
}

/* d mean_r(-log softmax(l_r)[y_r]) = (softmax(l_r) - onehot(y_r)) / rows. */
static double xent_error(amp_tensor *const *t, bool new_values) {
    const int32_t *y = new_values ? xent_new : xent_old;
    float l[XR * XC], g[XR * XC];
    double want[XR * XC];
    CHECK_OK(amp_tensor_to_host(t[0], l, sizeof l));
    for (int r = 0; r < XR; r++) {
        double mx = -INFINITY, sum = 0.0;
        for (int c = 0; c < XC; c++) mx = fmax(mx, l[r * XC + c]);
        for (int c = 0; c < XC; c++) sum += exp(l[r * XC + c] - mx);
        for (int c = 0; c < XC; c++)
            want[r * XC + c] = (exp(l[r * XC + c] - mx) / sum - (c == y[r])) / XR;
    }
    return grad_of(t[0], g) ? rel_err(g, want, XR * XC) : 1.0;
}

/* x * x: x [3, 8] needs a gradient (then rewritten to its negation plus 1); loss = mean(x * x),
 * dx = 2 x / 24 of the forward's x. */
enum { MN = 24 };

static void mul_values(float *h, bool new_values) {
    fill(h, MN, 2.0f);
    for (int i = 0; new_values && i < MN; i++) h[i] = 1.0f - h[i];
}

static void mul_make(amp_ctx *ctx, amp_tensor **t) {
    float h[MN];
    mul_values(h, false);
    t[0] = make(ctx, AMP_F32, 2, (const int64_t[]){3, 8}, h, true);
}

static amp_status mul_forward(amp_tensor *const *t, amp_tensor **loss) {
    amp_tensor *sq;
    amp_status s = amp_mul(t[0], t[0], &sq);
    return s == AMP_OK ? amp_mean(sq, loss) : s;
}

static amp_status mul_rewrite(amp_tensor *const *t, bool new_values) {
    float h[MN];
    mul_values(h, new_values);
    return amp_tensor_copy_from_host(t[0], h, sizeof h);
}

static double mul_error(amp_tensor *const *t, bool new_values) {
    float h[MN], g[MN];
    double want[MN];
    mul_values(h, new_values);
    for (int i = 0; i < MN; i++) want[i] = 2.0 * h[i] / MN;
    return grad_of(t[0], g) ? rel_err(g, want, MN) : 1.0;
}

/* linear: w [3, 5] and b [3] need gradients, the input batch x [4, 5] (a reused buffer: then the
 * next batch); loss = mean(y * y), y = x w^T + b. */
enum { LN = 4, LI = 5, LO = 3 };

static void lin_batch(float *x, bool new_values) { fill(x, LN * LI, new_values ? 4.0f : 3.0f); }

static void lin_make(amp_ctx *ctx, amp_tensor **t) {
    float w[LO * LI], b[LO], x[LN * LI];
    fill(w, LO * LI, 0.75f);
    fill(b, LO, 1.5f);
    lin_batch(x, false);
    t[0] = make(ctx, AMP_F32, 2, (const int64_t[]){LO, LI}, w, true);
    t[1] = make(ctx, AMP_F32, 1, (const int64_t[]){LO}, b, true);
    t[2] = make(ctx, AMP_F32, 2, (const int64_t[]){LN, LI}, x, false);
}

static amp_status lin_forward(amp_tensor *const *t, amp_tensor **loss) {
    amp_tensor *y, *sq;
    amp_status s = amp_linear(t[2], t[0], t[1], &y);
    if (s == AMP_OK) s = amp_mul(y, y, &sq);
    return s == AMP_OK ? amp_mean(sq, loss) : s;
}

static amp_status lin_rewrite(amp_tensor *const *t, bool new_values) {
    float x[LN * LI];
    lin_batch(x, new_values);
    return amp_tensor_copy_from_host(t[2], x, sizeof x);
}

static double lin_error(amp_tensor *const *t, bool new_values) {
    float w[LO * LI], b[LO], x[LN * LI], gw[LO * LI], gb[LO];
    double dw[LO * LI] = {0}, db[LO] = {0};
    CHECK_OK(amp_tensor_to_host(t[0], w, sizeof w));
    CHECK_OK(amp_tensor_to_host(t[1], b, sizeof b));
    lin_batch(x, new_values);
    for (int n = 0; n < LN; n++)
        for (int o = 0; o < LO; o++) {
            double y = b[o];
            for (int i = 0; i < LI; i++) y += (double)x[n * LI + i] * w[o * LI + i];
            double dy = 2.0 * y / (LN * LO);
            db[o] += dy;
            for (int i = 0; i < LI; i++) dw[o * LI + i] += dy * x[n * LI + i];
        }
    if (!grad_of(t[0], gw) || !grad_of(t[1], gb)) return 1.0;
    return fmax(rel_err(gw, dw, LO * LI), rel_err(gb, db, LO));
}

static const vcase cases[] = {
    {"attention kv_len {8, 5} -> {8, 2}", "input 3 (kv_len) of scaled_dot_product_attention", 3,
     attn_make, attn_forward, attn_len_rewrite, attn_len_error},
    {"attention q zeroed", "input 0 (q) of scaled_dot_product_attention", 3, attn_make,
     attn_forward, attn_q_rewrite, attn_q_error},
    {"embedding ids 1..3 -> 7..9", "input 0 (idx) of embedding", 1, emb_make, emb_forward,
     emb_rewrite, emb_error},
    {"cross-entropy labels", "input 1 (labels) of cross_entropy", 1, xent_make, xent_forward,
     xent_rewrite, xent_error},
    {"x * x, x rewritten", "input 0 (a) of mul", 1, mul_make, mul_forward, mul_rewrite,
     mul_error},
    {"linear's input batch rewritten", "input 0 (x) of linear", 2, lin_make, lin_forward,
     lin_rewrite, lin_error},
};

/* Every leaf's gradient (f32), and whether it has one. */
typedef struct grads {
    bool has[MAX_T];
    float v[MAX_T][MAX_N];
} grads;

static void snapshot(amp_tensor *const *t, int n, grads *g) {
    memset(g, 0, sizeof *g);
    for (int i = 0; i < n; i++) g->has[i] = grad_of(t[i], g->v[i]);
}

static void run_case(const vcase *c, amp_device device) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 5, .n_threads = 1}, &ctx));
    if (!ctx) return;
    amp_tensor *t[MAX_T] = {0}, *loss = NULL;
    c->make(ctx, t);
    /* 1. Rewritten before the first backward: refused, twice, and no leaf has a gradient. */
    CHECK_OK(c->forward(t, &loss));
    CHECK_OK(c->rewrite(t, true));
    check_refused(amp_backward(loss), c->what);
    check_refused(amp_backward(loss), c->what); /* the graph stayed */
    float scratch[MAX_N];
    for (int i = 0; i < c->n_leaves; i++)
        CHECK_MSG(!grad_of(t[i], scratch), "%s: leaf %d got a gradient from a refused backward",
                  c->name, i);
    amp_ctx_reset_step(ctx);
    /* 2. The control: the forward's values throughout, the reference's gradients. */
    CHECK_OK(c->rewrite(t, false));
    CHECK_OK(c->forward(t, &loss));
    CHECK_OK(amp_backward(loss));
    double e = c->grad_error(t, false);
    CHECK_MSG(e < 1e-5, "%s: without the rewrite the gradients are off by %.3g", c->name, e);
    /* 3. After a backward wrote gradients: a refusal leaves them as they were, bit for bit. */
    grads before, after;
    snapshot(t, c->n_leaves, &before);
    CHECK_OK(c->forward(t, &loss));
    CHECK_OK(c->rewrite(t, true));
    check_refused(amp_backward(loss), c->what);
    snapshot(t, c->n_leaves, &after);
    CHECK_MSG(!memcmp(&before, &after, sizeof before), "%s: a refused backward changed a gradient",
              c->name);
    /* 4. A forward after the write differentiates the new values. */
    amp_ctx_reset_step(ctx);
    for (int i = 0; i < c->n_leaves; i++) amp_tensor_zero_grad(t[i]);
    CHECK_OK(c->forward(t, &loss));
    CHECK_OK(amp_backward(loss));
    e = c->grad_error(t, true);
    CHECK_MSG(e < 1e-5, "%s: a forward after the write: gradients off by %.3g", c->name, e);
    for (int i = 0; i < MAX_T; i++) amp_tensor_free(t[i]);
    amp_ctx_free(ctx);
}

/* ---- a retained graph whose weights were stepped ---- */

enum { RB = 4, RI = 16, RH = 12, RO = 4 };

typedef struct net {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_tensor *x, *y;
} net;

/* fc1 Linear(16, 12) + ReLU + fc2 Linear(12, 4) under amp_initialize at `level` (bf16), SGD. */
static bool net_open(net *n, amp_device device, amp_opt_level level) {
    *n = (net){0};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 9, .n_threads = 1}, &n->ctx));
    if (!n->ctx) return false;
    CHECK_OK(amp_seq_create(n->ctx, &n->m));
    if (!n->m) return false;
    CHECK_OK(amp_seq_add_linear(n->m, "fc1", RI, RH, true));
    CHECK_OK(amp_seq_add_relu(n->m, "relu"));
    CHECK_OK(amp_seq_add_linear(n->m, "fc2", RH, RO, true));
    CHECK_OK(amp_sgd_create(n->m, &(amp_sgd_opts){.lr = 0.1f}, &n->opt));
    if (!n->opt) return false;
    amp_options o = {.opt_level = level, .half_type = AMP_HALF_BF16, .quiet = true};
    CHECK_OK(amp_initialize_ex(n->m, n->opt, &o));
    float x[RB * RI];
    const int32_t y[RB] = {0, 1, 2, 3};
    fill(x, RB * RI, 0.3f);
    n->x = make(n->ctx, AMP_F32, 2, (const int64_t[]){RB, RI}, x, false);
    n->y = make(n->ctx, AMP_I32, 1, (const int64_t[]){RB}, y, false);
    return n->x && n->y;
}

static void net_close(net *n) {
    amp_tensor_free(n->x);
    amp_tensor_free(n->y);
    amp_optimizer_free(n->opt);
    amp_model_free(n->m);
    amp_ctx_free(n->ctx);
}

static amp_status net_loss(net *n, amp_tensor **loss) {
    amp_tensor *logits;
    amp_status s = amp_model_forward(n->m, n->x, &logits);
    return s == AMP_OK ? amp_cross_entropy(logits, n->y, loss) : s;
}

/* Every parameter's gradient; fc1.weight is parameter 0. */
static void net_grads(net *n, grads *g) {
    int np = amp_model_n_params(n->m);
    CHECK(np == 4);
    amp_tensor *p[MAX_T];
    for (int i = 0; i < np && i < MAX_T; i++) p[i] = amp_model_param(n->m, i);
    snapshot(p, np < MAX_T ? np : MAX_T, g);
}

static void test_retained_step(amp_device device, amp_opt_level level) {
    net n;
    if (net_open(&n, device, level)) {
        amp_tensor *loss = NULL, *z = NULL, *zz = NULL, *l2 = NULL;
        bool stepped = false;
        CHECK(!strcmp(amp_model_param_name(n.m, 0), "fc1.weight"));
        CHECK_OK(net_loss(&n, &loss));
        CHECK_OK(amp_backward_with(loss, &(amp_backward_opts){.retain_graph = true}));
        CHECK_OK(amp_step(n.opt, &stepped));
        CHECK(stepped);
        grads before, after;
        net_grads(&n, &before);
        CHECK(before.has[0]);
        check_refused(amp_backward(loss), "input 1 (w) of linear");
        CHECK(strstr(amp_last_error(), "a parameter") != NULL);
        net_grads(&n, &after);
        CHECK_MSG(!memcmp(&before, &after, sizeof before), "O%d: a refused backward changed a "
                  "parameter's gradient", (int)level);
        /* The stale nodes stay on the tape but stop no backward that does not reach them. */
        float h[RI];
        fill(h, RI, 7.0f);
        z = make(n.ctx, AMP_F32, 1, (const int64_t[]){RI}, h, true);
        CHECK_OK(amp_mul(z, z, &zz));
        CHECK_OK(amp_mean(zz, &l2));
        CHECK_OK(amp_backward(l2));
        /* amp_zero_grad releases the graph; a fresh step works. */
        CHECK_OK(amp_zero_grad(n.opt));
        CHECK_OK(net_loss(&n, &loss));
        CHECK_OK(amp_backward(loss));
        CHECK_OK(amp_step(n.opt, &stepped));
        CHECK(stepped);
        CHECK_OK(amp_zero_grad(n.opt));
        amp_tensor_free(z);
    }
    net_close(&n);
    /* The control: no step between the two backwards, which add the same gradients twice. */
    if (net_open(&n, device, level)) {
        amp_tensor *loss = NULL;
        grads once, twice;
        CHECK_OK(net_loss(&n, &loss));
        CHECK_OK(amp_backward_with(loss, &(amp_backward_opts){.retain_graph = true}));
        net_grads(&n, &once);
        CHECK_OK(amp_backward(loss));
        net_grads(&n, &twice);
        int bad = 0;
        for (int i = 0; i < 4; i++) {
            amp_tensor *p = amp_model_param(n.m, i);
            bad += !once.has[i] || !twice.has[i];
            for (int64_t k = 0; p && k < amp_tensor_numel(p); k++)
                bad += twice.v[i][k] != 2.0f * once.v[i][k];
        }
        CHECK_MSG(bad == 0, "O%d: a retained graph's second backward: %d gradients are not twice "
                  "the first's", (int)level, bad);
    }
    net_close(&n);
}

/* ---- what else is checked, and what is not ---- */

static void test_other_tensors(amp_device device) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 3, .n_threads = 1}, &ctx));
    if (!ctx) return;
    float h[MN], zero[MN] = {0}, g[MN];
    mul_values(h, false);
    amp_tensor *x = make(ctx, AMP_F32, 2, (const int64_t[]){3, 8}, h, true), *y, *loss, *v, *idx;
    /* relu reads its output: a write to it is refused. */
    CHECK_OK(amp_relu(x, &y));
    CHECK_OK(amp_mean(y, &loss));
    CHECK_OK(amp_tensor_copy_from_host(y, zero, sizeof zero));
    check_refused(amp_backward(loss), "the output of relu");
    CHECK(!grad_of(x, g));
    amp_ctx_reset_step(ctx);
    /* ... but never its input: x rewritten, dx is still 1/24 where the forward's x > 0. */
    CHECK_OK(amp_relu(x, &y));
    CHECK_OK(amp_mean(y, &loss));
    CHECK_OK(amp_tensor_copy_from_host(x, zero, sizeof zero));
    CHECK_OK(amp_backward(loss));
    int bad = 0;
    if (grad_of(x, g))
        for (int i = 0; i < MN; i++) bad += g[i] != (h[i] > 0.0f ? 1.0f / MN : 0.0f);
    else bad = 1;
    CHECK_MSG(bad == 0, "relu's input rewritten: %d gradients wrong", bad);
    amp_ctx_reset_step(ctx);
    amp_tensor_zero_grad(x);
    CHECK_OK(amp_tensor_copy_from_host(x, h, sizeof h));
    /* max_dim's indices, returned and saved: a write to them is refused. */
    CHECK_OK(amp_max_dim(x, 1, false, &v, &idx));
    CHECK_OK(amp_mean(v, &loss));
    int32_t ids[3] = {0, 0, 0};
    CHECK_OK(amp_tensor_copy_from_host(idx, ids, sizeof ids));
    check_refused(amp_backward(loss), "the indices saved by max_dim");
    amp_ctx_reset_step(ctx);
    /* embedding never reads its weight: rewritten, dW is the forward's (dy = 1/12 per id). */
    amp_tensor *t[MAX_T] = {0};
    emb_make(ctx, t);
    amp_tensor *e;
    CHECK_OK(amp_embedding(t[1], t[0], &e));
    CHECK_OK(amp_mean(e, &loss));
    float w[EV * ED], gw[EV * ED];
    fill(w, EV * ED, 9.0f);
    CHECK_OK(amp_tensor_copy_from_host(t[0], w, sizeof w));
    CHECK_OK(amp_backward(loss));
    bad = 0;
    if (grad_of(t[0], gw))
        for (int r = 0; r < EV; r++)
            for (int c = 0; c < ED; c++)
                bad += gw[r * ED + c] != (r >= 1 && r <= 3 ? 1.0f / (EN * ED) : 0.0f);
    else bad = 1;
    CHECK_MSG(bad == 0, "embedding's weight rewritten: %d gradients wrong", bad);
    for (int i = 0; i < MAX_T; i++) amp_tensor_free(t[i]);
    amp_tensor_free(x);
    amp_ctx_free(ctx);
}

static void body(amp_device device) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        printf("  %s\n", cases[i].name);
        run_case(&cases[i], device);
    }
    printf("  retain_graph, amp_step, backward again (O0, O2)\n");
    test_retained_step(device, AMP_O0);
    test_retained_step(device, AMP_O2);
    printf("  outputs, saved indices, unread inputs\n");
    test_other_tensors(device);
}

int main(void) {
    test_on_each_device(body);
    return test_summary(NAME);
}
