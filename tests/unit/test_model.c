/* The model presets and the sequential builder: parameter and buffer names, shapes and order as
 * PyTorch's modules report them, parameter counts, PyTorch's default initialisation, seeding,
 * forward shapes and values (float64 reference, tests/gradcheck_ref.h) in training and eval
 * mode, running statistics, amp_model_find, and the one-block parameter layout.
 *
 * The PyTorch side (torch 2.15.0) was read with:
 *   python3 -c "import torch.nn as nn
 *   class ConvNet(nn.Module):
 *       def __init__(s):
 *           super().__init__()
 *           s.layer1 = nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
 *           s.layer2 = nn.Sequential(nn.Conv2d(16, 32, 5, padding=2), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
 *           s.fc = nn.Linear(7 * 7 * 32, 10)
 *   class MLP(nn.Module):
 *       def __init__(s):
 *           super().__init__()
 *           s.fc1, s.fc2, s.fc3 = nn.Linear(784, 2048), nn.Linear(2048, 2048), nn.Linear(2048, 10)
 *   for M in (ConvNet, MLP):
 *       m = M(); print(sum(p.numel() for p in m.parameters()))
 *       for n, p in m.named_parameters(): print(n, list(p.shape))
 *       for n, b in m.named_buffers(): print(n, list(b.shape))"
 * which prints 29034 and 5824522 parameters and the names and shapes in the tables below (the
 * buffers also list num_batches_tracked, which libamp does not keep: momentum is always set).
 * Also: amp_model_cast is all or nothing when an allocation or a conversion fails. */
#include <stdint.h>
#include <string.h>

#include "amp/amp.h"
#include "core/backend.h"
#include "core/ctx.h"
#include "core/error.h"
#include "nn/model_internal.h"
#include "gradcheck_ref.h"
#include "flaky_backend.h"
#include "test_util.h"
#include "core/tensor_internal.h"

#define TORCH_CONVNET_NUMEL 29034
#define TORCH_MLP_NUMEL 5824522

typedef struct named_shape {
    const char *name;
    int ndim;
    int64_t shape[4];
} named_shape;

static const named_shape convnet_params[] = {
    {"layer1.0.weight", 4, {16, 1, 5, 5}}, {"layer1.0.bias", 1, {16}},
    {"layer1.1.weight", 1, {16}},          {"layer1.1.bias", 1, {16}},
    {"layer2.0.weight", 4, {32, 16, 5, 5}}, {"layer2.0.bias", 1, {32}},
    {"layer2.1.weight", 1, {32}},          {"layer2.1.bias", 1, {32}},
    {"fc.weight", 2, {10, 1568}},          {"fc.bias", 1, {10}},
};
static const named_shape convnet_buffers[] = {
    {"layer1.1.running_mean", 1, {16}}, {"layer1.1.running_var", 1, {16}},
    {"layer2.1.running_mean", 1, {32}}, {"layer2.1.running_var", 1, {32}},
};
static const named_shape mlp_params[] = {
    {"fc1.weight", 2, {2048, 784}}, {"fc1.bias", 1, {2048}}, {"fc2.weight", 2, {2048, 2048}},
    {"fc2.bias", 1, {2048}},        {"fc3.weight", 2, {10, 2048}}, {"fc3.bias", 1, {10}},
};

static amp_ctx *new_ctx(uint64_t seed) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = seed}, &ctx));
    return ctx;
}

static bool same_shape(const amp_tensor *t, const named_shape *want) {
    if (!t || t->ndim != want->ndim) return false;
    for (int d = 0; d < want->ndim; d++)
        if (t->shape[d] != want->shape[d]) return false;
    return true;
}

/* Names, shapes, order and count; parameters are f32 and require grad, buffers do not; and
 * parameters are consecutive, 64-byte aligned views of one block (nn/model_internal.h). */
static void check_layout(const char *what, amp_model *m, const named_shape *params, int n_params,
                         const named_shape *buffers, int n_buffers, int64_t torch_numel) {
    CHECK_MSG(amp_model_n_params(m) == n_params, "%s: %d parameters", what, amp_model_n_params(m));
    CHECK_MSG(amp_model_n_buffers(m) == n_buffers, "%s: %d buffers", what, amp_model_n_buffers(m));
    int64_t numel = 0;
    for (int i = 0; i < n_params && i < amp_model_n_params(m); i++) {
        amp_tensor *t = amp_model_param(m, i), *found = NULL;
        CHECK_MSG(strcmp(amp_model_param_name(m, i), params[i].name) == 0, "%s: parameter %d is %s, want %s",
                  what, i, amp_model_param_name(m, i), params[i].name);
        CHECK_MSG(same_shape(t, &params[i]), "%s: %s shape", what, params[i].name);
        CHECK(t->dtype == AMP_F32 && t->requires_grad);
        CHECK_OK(amp_model_find(m, params[i].name, &found));
        CHECK(found == t);
        numel += t->numel;
        CHECK(((uintptr_t)t->data & 63) == 0);
        if (i > 0) {
            amp_tensor *prev = amp_model_param(m, i - 1);
            CHECK((char *)t->data >= (char *)prev->data + prev->numel * 4);
            CHECK((char *)t->data < (char *)prev->data + prev->numel * 4 + 64);
        }
    }
    for (int i = 0; i < n_buffers && i < amp_model_n_buffers(m); i++) {
        amp_tensor *t = amp_model_buffer(m, i), *found = NULL;
        CHECK_MSG(strcmp(amp_model_buffer_name(m, i), buffers[i].name) == 0, "%s: buffer %d is %s, want %s",
                  what, i, amp_model_buffer_name(m, i), buffers[i].name);
        CHECK(same_shape(t, &buffers[i]) && t->dtype == AMP_F32 && !t->requires_grad);
        CHECK_OK(amp_model_find(m, buffers[i].name, &found));
        CHECK(found == t);
    }
    CHECK_MSG(numel == torch_numel, "%s: %lld parameters from the shapes, torch has %lld", what,
              (long long)numel, (long long)torch_numel);
    CHECK(amp_model_numel(m) == torch_numel);
}

static void test_layouts(void) {
    amp_ctx *ctx = new_ctx(1);
    amp_model *m;
    CHECK_OK(amp_model_convnet_mnist(ctx, &m));
    check_layout("convnet", m, convnet_params, 10, convnet_buffers, 4, TORCH_CONVNET_NUMEL);
    CHECK(amp_model_ctx(m) == ctx && amp_model_is_training(m));
    amp_tensor *t;
    CHECK_FAILS(amp_model_find(m, "layer3.0.weight", &t), AMP_ERR_INVALID_ARG, "'layer3.0.weight'");
    CHECK_FAILS(amp_model_find(m, "fc", &t), AMP_ERR_INVALID_ARG, "'fc'");
    amp_model_free(m);
    CHECK_OK(amp_model_mlp_mnist(ctx, &m));
    check_layout("mlp", m, mlp_params, 6, NULL, 0, TORCH_MLP_NUMEL);
    amp_model_free(m);

    /* Unnamed layers are named by index, as in nn.Sequential(Conv2d(1, 2, 3, bias=False),
     * BatchNorm2d(2), ReLU(), Flatten(), Linear(18, 4)) for 5x5 inputs: parameters 0.weight,
     * 1.weight, 1.bias, 4.weight, 4.bias; buffers 1.running_mean, 1.running_var. */
    static const named_shape seq_params[] = {{"0.weight", 4, {2, 1, 3, 3}}, {"1.weight", 1, {2}},
                                             {"1.bias", 1, {2}}, {"4.weight", 2, {4, 18}},
                                             {"4.bias", 1, {4}}};
    static const named_shape seq_buffers[] = {{"1.running_mean", 1, {2}}, {"1.running_var", 1, {2}}};
    CHECK_OK(amp_seq_create(ctx, &m));
    CHECK_OK(amp_seq_add_conv2d(m, NULL, 1, 2, 3, 1, 0, false));
    CHECK_OK(amp_seq_add_batchnorm2d(m, NULL, 2));
    CHECK_OK(amp_seq_add_relu(m, NULL));
    CHECK_OK(amp_seq_add_flatten(m, NULL));
    CHECK_OK(amp_seq_add_linear(m, NULL, 18, 4, true));
    CHECK_OK(amp_model_build(m));
    check_layout("sequential", m, seq_params, 5, seq_buffers, 2, 18 + 2 + 2 + 72 + 4);
    amp_tensor *x = NULL, *y;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 4, (const int64_t[]){3, 1, 5, 5}, &x));
    CHECK_OK(amp_model_forward(m, x, &y));
    CHECK(y->ndim == 2 && y->shape[0] == 3 && y->shape[1] == 4);
    amp_tensor_free(x);
    amp_model_free(m);
    amp_ctx_reset_step(ctx);
    amp_ctx_free(ctx);
}

static void read_f32(const amp_tensor *t, float *host) {
    CHECK_OK(amp_tensor_to_host(t, host, (size_t)t->numel * sizeof *host));
}

/* torch.nn.Linear/Conv2d reset_parameters: weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in));
 * BatchNorm2d: weight 1, bias 0, running_mean 0, running_var 1. */
static void check_init(const char *what, amp_model *m) {
    for (int i = 0; i < amp_model_n_params(m); i++) {
        amp_tensor *t = amp_model_param(m, i);
        const char *name = amp_model_param_name(m, i);
        float *v = malloc((size_t)t->numel * sizeof *v);
        read_f32(t, v);
        bool is_bn = strstr(name, "layer") && strstr(name, ".1."); /* the ConvNet's BatchNorm2d */
        if (is_bn) {
            float want = strstr(name, "weight") ? 1.0f : 0.0f;
            int bad = 0;
            for (int64_t j = 0; j < t->numel; j++) bad += v[j] != want;
            CHECK_MSG(bad == 0, "%s: %s is not all %g", what, name, (double)want);
            free(v);
            continue;
        }
        /* The weight of this layer is the parameter itself or the one before the bias. */
        amp_tensor *w = strstr(name, "bias") ? amp_model_param(m, i - 1) : t;
        int64_t fan_in = w->numel / w->shape[0];
        double bound = 1.0 / sqrt((double)fan_in), mx = 0.0, sum = 0.0, sq = 0.0;
        for (int64_t j = 0; j < t->numel; j++) {
            mx = fmax(mx, fabs(v[j]));
            sum += v[j];
            sq += (double)v[j] * v[j];
        }
        double n = (double)t->numel, mean = sum / n, var = sq / n - mean * mean;
        CHECK_MSG(mx <= bound * (1 + 1e-6), "%s: %s: max |w| %g > 1/sqrt(%lld)", what, name, mx,
                  (long long)fan_in);
        if (t->numel >= 100) { /* U(-b, b): max near b, mean 0 (sd b/sqrt(3n)), variance b^2/3 */
            CHECK_MSG(mx >= 0.9 * bound, "%s: %s: max |w| %g, bound %g", what, name, mx, bound);
            CHECK_MSG(fabs(mean) <= 5 * bound / sqrt(3 * n), "%s: %s: mean %g", what, name, mean);
            CHECK_MSG(fabs(var / (bound * bound / 3) - 1) < 0.2, "%s: %s: variance %g, want %g", what,
                      name, var, bound * bound / 3);
        }
        free(v);
    }
    for (int i = 0; i < amp_model_n_buffers(m); i++) {
        amp_tensor *t = amp_model_buffer(m, i);
        float v[32];
        read_f32(t, v);
        float want = strstr(amp_model_buffer_name(m, i), "running_var") ? 1.0f : 0.0f;
        for (int64_t j = 0; j < t->numel; j++) CHECK(v[j] == want);
    }
}

/* Bits of every parameter of a model built from seed. */
static float *param_bits(amp_model *(*make)(amp_ctx *), uint64_t seed, int64_t *numel) {
    amp_ctx *ctx = new_ctx(seed);
    amp_model *m = make(ctx);
    *numel = amp_model_numel(m);
    float *all = malloc((size_t)*numel * sizeof *all), *at = all;
    for (int i = 0; i < amp_model_n_params(m); i++) {
        read_f32(amp_model_param(m, i), at);
        at += amp_model_param(m, i)->numel;
    }
    amp_model_free(m);
    amp_ctx_free(ctx);
    return all;
}

static amp_model *make_convnet(amp_ctx *ctx) {
    amp_model *m = NULL;
    CHECK_OK(amp_model_convnet_mnist(ctx, &m));
    return m;
}
static amp_model *make_mlp(amp_ctx *ctx) {
    amp_model *m = NULL;
    CHECK_OK(amp_model_mlp_mnist(ctx, &m));
    return m;
}

static void test_init_and_seed(void) {
    amp_ctx *ctx = new_ctx(7);
    amp_model *m = make_convnet(ctx);
    check_init("convnet", m);
    amp_model_free(m);
    m = make_mlp(ctx);
    check_init("mlp", m);
    amp_model_free(m);
    amp_ctx_free(ctx);

    amp_model *(*makers[2])(amp_ctx *) = {make_convnet, make_mlp};
    for (int k = 0; k < 2; k++) {
        int64_t n1, n2, n3;
        float *a = param_bits(makers[k], 42, &n1), *b = param_bits(makers[k], 42, &n2);
        float *c = param_bits(makers[k], 43, &n3);
        CHECK(n1 == n2 && n1 == n3);
        CHECK_MSG(memcmp(a, b, (size_t)n1 * sizeof *a) == 0, "model %d: same seed, different bits", k);
        int64_t same = 0;
        for (int64_t i = 0; i < n1; i++) same += a[i] == c[i];
        /* Only the batch-norm constants (96 in the ConvNet) may agree across seeds. */
        CHECK_MSG(same <= 96 + n1 / 1000, "model %d: seeds 42 and 43 agree on %lld of %lld values", k,
                  (long long)same, (long long)n1);
        free(a);
        free(b);
        free(c);
    }
}

/* The model's parameters and buffers as float64 arrays, in the reference's order. */
static void model_to_ref(amp_model *m, double **p, double **buf) {
    for (int i = 0; i < amp_model_n_params(m); i++) {
        amp_tensor *t = amp_model_param(m, i);
        float *v = malloc((size_t)t->numel * sizeof *v);
        read_f32(t, v);
        p[i] = malloc((size_t)t->numel * sizeof *p[i]);
        for (int64_t j = 0; j < t->numel; j++) p[i][j] = v[j];
        free(v);
    }
    for (int i = 0; i < amp_model_n_buffers(m); i++) {
        amp_tensor *t = amp_model_buffer(m, i);
        float v[32];
        read_f32(t, v);
        buf[i] = malloc((size_t)t->numel * sizeof *buf[i]);
        for (int64_t j = 0; j < t->numel; j++) buf[i][j] = v[j];
    }
}

/* |a - b| <= tol * (|b| + 1% of max |b|) everywhere. */
static void check_close(const char *what, const float *a, const double *b, int64_t n, double tol) {
    double bmax = 0.0, worst = 0.0;
    int64_t wi = 0;
    for (int64_t i = 0; i < n; i++) bmax = fmax(bmax, fabs(b[i]));
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / (fabs(b[i]) + 1e-2 * bmax + 1e-30);
        if (!(e <= worst)) worst = e, wi = i;
    }
    CHECK_MSG(worst <= tol, "%s[%lld]: %.8g vs reference %.8g (error %.3g)", what, (long long)wi,
              (double)a[wi], b[wi], worst);
}

static void set_random(amp_tensor *t, ref_rng *rng, double lo, double hi) {
    float v[32];
    for (int64_t j = 0; j < t->numel; j++) v[j] = (float)ref_rng_uniform(rng, lo, hi);
    CHECK_OK(amp_tensor_copy_from_host(t, v, (size_t)t->numel * sizeof *v));
}

/* ConvNet forward in training mode (batch statistics, running ones updated as PyTorch does) and
 * in eval mode (running statistics, none updated, each sample independent of the batch). */
static void test_convnet_forward(void) {
    enum { N = 3, NX = N * 784 };
    amp_ctx *ctx = new_ctx(21);
    amp_model *m = make_convnet(ctx);
    ref_rng rng = {5};
    /* Non-trivial batch-norm affine parameters and running statistics. */
    for (int blk = 0; blk < 2; blk++) {
        set_random(amp_model_param(m, blk * 4 + 2), &rng, 0.5, 1.5);
        set_random(amp_model_param(m, blk * 4 + 3), &rng, -0.5, 0.5);
        set_random(amp_model_buffer(m, blk * 2), &rng, -0.3, 0.3);
        set_random(amp_model_buffer(m, blk * 2 + 1), &rng, 0.5, 2.0);
    }
    static float xf[NX];
    static double xd[NX];
    for (int i = 0; i < NX; i++) xd[i] = xf[i] = (float)ref_rng_uniform(&rng, 0, 1);
    amp_tensor *x = NULL, *x0 = NULL, *y;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, (const int64_t[]){N, 1, 28, 28}, xf, &x));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, (const int64_t[]){1, 1, 28, 28}, xf, &x0));
    double *p[10], *buf[4], ld[N * 10];
    float lf[N * 10], l0[10];
    model_to_ref(m, p, buf);

    /* Eval, grads off (eval batch norm does not record). */
    amp_model_train(m, false);
    CHECK(!amp_model_is_training(m));
    bool prev = amp_set_grad_enabled(ctx, false);
    CHECK_OK(amp_model_forward(m, x, &y));
    CHECK(y->ndim == 2 && y->shape[0] == N && y->shape[1] == 10);
    read_f32(y, lf);
    ref_convnet_forward(N, xd, p, buf, false, ld);
    check_close("eval logits", lf, ld, N * 10, 1e-4);
    CHECK_OK(amp_model_forward(m, x0, &y));
    read_f32(y, l0);
    check_close("eval logits of sample 0 alone", l0, ld, 10, 1e-4);
    for (int i = 0; i < 4; i++) { /* running statistics untouched */
        float v[32];
        read_f32(amp_model_buffer(m, i), v);
        for (int64_t j = 0; j < amp_model_buffer(m, i)->numel; j++) CHECK(v[j] == (float)buf[i][j]);
    }
    amp_set_grad_enabled(ctx, prev);
    amp_ctx_reset_step(ctx);

    /* Training: batch statistics; running ones move by momentum 0.1 with the unbiased variance. */
    amp_model_train(m, true);
    CHECK_OK(amp_model_forward(m, x, &y));
    read_f32(y, lf);
    ref_convnet_forward(N, xd, p, buf, true, ld);
    check_close("train logits", lf, ld, N * 10, 1e-4);
    for (int i = 0; i < 4; i++) {
        float v[32];
        read_f32(amp_model_buffer(m, i), v);
        check_close(amp_model_buffer_name(m, i), v, buf[i], amp_model_buffer(m, i)->numel, 1e-4);
    }
    /* A training step leaves a gradient in every parameter and none in the buffers. */
    amp_tensor *lab = NULL, *loss, *g;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (const int64_t[]){N}, (const int32_t[]){3, 0, 9}, &lab));
    CHECK_OK(amp_cross_entropy(y, lab, &loss));
    CHECK_OK(amp_backward(loss));
    for (int i = 0; i < amp_model_n_params(m); i++)
        CHECK_MSG(amp_tensor_get_grad(amp_model_param(m, i), &g) == AMP_OK, "%s has no gradient",
                  amp_model_param_name(m, i));
    for (int i = 0; i < amp_model_n_buffers(m); i++)
        CHECK(amp_tensor_get_grad(amp_model_buffer(m, i), &g) == AMP_ERR_STATE);
    amp_ctx_reset_step(ctx);
    for (int i = 0; i < 10; i++) free(p[i]);
    for (int i = 0; i < 4; i++) free(buf[i]);
    amp_tensor_free(lab);
    amp_tensor_free(x);
    amp_tensor_free(x0);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

/* MLP: flattens [n, 1, 28, 28] (and takes [n, 784] as is); logits against the reference. */
static void test_mlp_forward(void) {
    enum { N = 2, NX = N * 784 };
    amp_ctx *ctx = new_ctx(8);
    amp_model *m = make_mlp(ctx);
    ref_rng rng = {6};
    static float xf[NX];
    static double xd[NX];
    for (int i = 0; i < NX; i++) xd[i] = xf[i] = (float)ref_rng_uniform(&rng, 0, 1);
    amp_tensor *x4 = NULL, *x2 = NULL, *y;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, (const int64_t[]){N, 1, 28, 28}, xf, &x4));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){N, 784}, xf, &x2));
    double *p[6], *h1 = malloc(N * 2048 * sizeof *h1), *h2 = malloc(N * 2048 * sizeof *h2), ld[N * 10];
    model_to_ref(m, p, NULL);
    ref_linear(N, 784, 2048, xd, p[0], p[1], h1);
    ref_relu(N * 2048, h1, h1);
    ref_linear(N, 2048, 2048, h1, p[2], p[3], h2);
    ref_relu(N * 2048, h2, h2);
    ref_linear(N, 2048, 10, h2, p[4], p[5], ld);
    float lf[N * 10], l2[N * 10];
    CHECK_OK(amp_model_forward(m, x4, &y));
    CHECK(y->ndim == 2 && y->shape[0] == N && y->shape[1] == 10);
    read_f32(y, lf);
    check_close("mlp logits", lf, ld, N * 10, 1e-4);
    CHECK_OK(amp_model_forward(m, x2, &y));
    read_f32(y, l2);
    CHECK(memcmp(lf, l2, sizeof lf) == 0);
    amp_ctx_reset_step(ctx);
    for (int i = 0; i < 6; i++) free(p[i]);
    free(h1);
    free(h2);
    amp_tensor_free(x4);
    amp_tensor_free(x2);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

/* ---- amp_model_cast: all or nothing ---- */

/* Everything amp_model_cast may change: blocks, and per tensor its data, dtype, gradient and
 * values (bytes as stored). */
#define CAST_SNAP_MAX 8
#define CAST_SNAP_BYTES 1024
typedef struct cast_snapshot {
    void *param_block, *grad_block, *buffer_block;
    void *data[CAST_SNAP_MAX], *grad_data[CAST_SNAP_MAX];
    amp_dtype dtype[CAST_SNAP_MAX], grad_dtype[CAST_SNAP_MAX];
    const amp_tensor *tensor[CAST_SNAP_MAX], *grad[CAST_SNAP_MAX];
    bool grad_written[CAST_SNAP_MAX];
    unsigned char values[CAST_SNAP_BYTES];
} cast_snapshot;

static void cast_snap(const amp_model *m, cast_snapshot *sn) {
    memset(sn, 0, sizeof *sn);
    sn->param_block = m->param_block;
    sn->grad_block = m->grad_block;
    sn->buffer_block = m->buffer_block;
    size_t at = 0;
    for (int i = 0; i < m->n_params + m->n_buffers && i < CAST_SNAP_MAX; i++) {
        const amp_tensor *t = i < m->n_params ? m->params[i].t : m->buffers[i - m->n_params].t;
        sn->tensor[i] = t;
        sn->data[i] = t->data;
        sn->dtype[i] = t->dtype;
        sn->grad[i] = t->grad;
        sn->grad_data[i] = t->grad ? t->grad->data : NULL;
        sn->grad_dtype[i] = t->grad ? t->grad->dtype : AMP_F32;
        sn->grad_written[i] = t->grad_written;
        size_t nb = (size_t)t->numel * amp_dtype_size(t->dtype);
        CHECK(at + nb <= CAST_SNAP_BYTES);
        if (at + nb <= CAST_SNAP_BYTES) CHECK_OK(amp_tensor_to_host(t, sn->values + at, nb));
        at += nb;
    }
}

/* A small model with both parameters and batch-norm buffers (parameters then buffers are what
 * amp_model_cast moves, in that order), its buffers and gradients set to values of their own. */
static amp_model *make_cast_model(amp_ctx *ctx) {
    amp_model *m = NULL;
    CHECK_OK(amp_seq_create(ctx, &m));
    if (!m) return NULL;
    CHECK_OK(amp_seq_add_conv2d(m, NULL, 1, 2, 3, 1, 0, true));
    CHECK_OK(amp_seq_add_batchnorm2d(m, NULL, 2));
    CHECK_OK(amp_seq_add_flatten(m, NULL));
    CHECK_OK(amp_seq_add_linear(m, NULL, 18, 4, true));
    CHECK_OK(amp_model_build(m));
    for (int i = 0; i < m->n_buffers; i++) {
        float v[2] = {0.25f * (float)(i + 1), -1.5f + (float)i};
        CHECK_OK(amp_tensor_copy_from_host(m->buffers[i].t, v, sizeof v));
    }
    m->params[0].t->grad_written = true;
    return m;
}

/* Every allocation and every conversion of amp_model_cast is made to fail in turn, the buffers'
 * included (they come after the parameters): each failure must leave every tensor as it was
 * and give back exactly the blocks it took; the first call that gets through casts it all. */
static void test_cast_all_or_nothing(void) {
    amp_ctx *ctx = new_ctx(3);
    if (!ctx) return;
    amp_backend flaky = flaky_backend();
    for (int what = 0; what < 2; what++) { /* 0: an alloc fails, 1: a cast fails */
        amp_model *m = make_cast_model(ctx);
        if (!m) break;
        int n_tensors = m->n_params + m->n_buffers, failures = 0;
        cast_snapshot before, after;
        cast_snap(m, &before);
        const amp_backend *cpu = ctx->backend;
        ctx->backend = &flaky;
        for (int k = 1; k <= 64; k++) {
            g_flaky = (flaky_state){0};
            if (what == 0) g_flaky.fail_alloc_at = k;
            else g_flaky.fail_cast_at = k;
            amp_status s = amp_model_cast(m, AMP_F16, false);
            if (s == AMP_OK) break;
            failures++;
            CHECK_MSG(s == (what == 0 ? AMP_ERR_OOM : AMP_ERR_BACKEND) &&
                          strstr(amp_last_error(), "amp_model_cast") != NULL,
                      "failing %s %d: status %d, '%s'", what == 0 ? "alloc" : "cast", k, (int)s,
                      amp_last_error());
            cast_snap(m, &after);
            CHECK_MSG(memcmp(&before, &after, sizeof before) == 0,
                      "a failing %s %d left the model changed", what == 0 ? "alloc" : "cast", k);
            CHECK_MSG(g_flaky.n_free == g_flaky.n_alloc,
                      "a failing %s %d: %d blocks allocated, %d freed",
                      what == 0 ? "alloc" : "cast", k, g_flaky.n_alloc, g_flaky.n_free);
        }
        ctx->backend = cpu;
        /* Three blocks (parameters, gradients, buffers); one conversion per tensor. */
        CHECK_MSG(failures == (what == 0 ? 3 : n_tensors), "%d failure points, want %d",
                  failures, what == 0 ? 3 : n_tensors);
        CHECK(g_flaky.n_alloc == 3 && g_flaky.n_free == 3);
        for (int i = 0; i < m->n_params; i++)
            CHECK(m->params[i].t->dtype == AMP_F16 && m->params[i].t->grad->dtype == AMP_F16);
        for (int i = 0; i < m->n_buffers; i++) CHECK(m->buffers[i].t->dtype == AMP_F16);
        amp_model_free(m);
    }
    amp_ctx_free(ctx);
}

int main(void) {
    test_layouts();
    test_init_and_seed();
    test_convnet_forward();
    test_mlp_forward();
    test_cast_all_or_nothing();
    return test_summary("test_model");
}
