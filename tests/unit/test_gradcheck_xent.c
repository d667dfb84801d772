/* Gradient check of the cross-entropy with its options (ignore_index, label smoothing, the sum,
 * a padded row whose last columns are not classes) against float64 finite differences, on every
 * device that answers; PyTorch's defaults (a label of -100 ignored); the padded loss equal to
 * the unpadded one bit for bit, NaN in the padding never read, its gradient 0; bad input refused
 * naming the culprit. */
#include <math.h>
#include <stdio.h>

#include "amp/amp.h"
#include "gradcheck_run.h"
#include "test_devices.h"

/* A case's options: p is the label smoothing, kernel the ignore index, stride 1 for the sum, pad
 * the padding columns after the classes. */
static amp_xent_options options_of(const gc_case *c) {
    return (amp_xent_options){.ignore_index = c->kernel, .label_smoothing = c->p,
                              .sum = c->stride == 1, .classes = c->pad ? S(0, 1) - c->pad : 0};
}

static amp_status lib_xent(gc_case *c, amp_tensor **y) {
    amp_xent_options o = options_of(c);
    return amp_cross_entropy_ex(T(0), T(1), &o, y);
}

/* PyTorch's cross_entropy in float64: the counted rows' (1 - eps) nll + eps mean(-log p). */
static void ref_xent(const gc_case *c, double *y) {
    amp_xent_options o = options_of(c);
    int64_t rows = S(0, 0), width = S(0, 1), classes = width - c->pad, count = 0;
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        int label = (int)V(1)[r];
        if (label == o.ignore_index) continue;
        const double *z = V(0) + r * width;
        double m = z[0], s = 0.0, sz = 0.0;
        for (int64_t j = 1; j < classes; j++) m = z[j] > m ? z[j] : m;
        for (int64_t j = 0; j < classes; j++) s += exp(z[j] - m), sz += z[j];
        double lse = m + log(s);
        total += (1.0 - o.label_smoothing) * (lse - z[label]) +
                 o.label_smoothing * (lse - sz / (double)classes);
        count++;
    }
    y[0] = o.sum ? total : total / (double)count;
}

/* Labels in [0, 3) with ignore index 0: about a third of the rows ignored. */
static gc_case cases[] = {
    {OP("cross_entropy ignore 0, smoothing 0.1", lib_xent, ref_xent),
     .in = {IN("logits", 2, GC_UNIFORM, -2, 2, true, 9, 7), IN("labels", 1, GC_LABELS, 0, 3, false, 9)},
     OUT(1, 1), .p = 0.1f, .kernel = 0},
    {OP("cross_entropy sum, smoothing 0.3", lib_xent, ref_xent),
     .in = {IN("logits", 2, GC_UNIFORM, -3, 3, true, 6, 11), IN("labels", 1, GC_LABELS, 0, 11, false, 6)},
     OUT(1, 1), .p = 0.3f, .kernel = -100, .stride = 1},
    {OP("cross_entropy [B*T, V] defaults", lib_xent, ref_xent),
     .in = {IN("logits", 2, GC_UNIFORM, -2, 2, true, 16, 50), IN("labels", 1, GC_LABELS, 0, 50, false, 16)},
     OUT(1, 1), .kernel = -100},
    {OP("cross_entropy 13 classes + 3 padding, smoothing 0.2", lib_xent, ref_xent),
     .in = {IN("logits", 2, GC_UNIFORM, -2, 2, true, 8, 16), IN("labels", 1, GC_LABELS, 0, 13, false, 8)},
     OUT(1, 1), .p = 0.2f, .kernel = -100, .pad = 3},
};

static amp_tensor *labels_tensor(amp_ctx *ctx, const int32_t *v, int64_t n) {
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, &n, v, &t));
    return t;
}

/* amp_cross_entropy ignores -100 (PyTorch's default) and equals the options' call bit for bit. */
static void test_defaults(amp_ctx *ctx) {
    const float z[8] = {0.5f, -1.0f, 2.0f, 0.25f, 1.0f, 3.0f, -2.0f, 0.0f};
    amp_tensor *logits = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){4, 2}, z, &logits));
    amp_tensor *lab = labels_tensor(ctx, (const int32_t[]){1, -100, 0, -100}, 4);
    amp_tensor *a = NULL, *b = NULL;
    CHECK_OK(amp_cross_entropy(logits, lab, &a));
    amp_xent_options o = amp_xent_defaults();
    CHECK(o.ignore_index == -100 && o.label_smoothing == 0.0f && !o.sum);
    CHECK_OK(amp_cross_entropy_ex(logits, lab, &o, &b));
    float fa = 0, fb = 0;
    CHECK_OK(amp_tensor_to_host(a, &fa, sizeof fa));
    CHECK_OK(amp_tensor_to_host(b, &fb, sizeof fb));
    /* rows 0 and 2: -log softmax([0.5, -1])[1] and -log softmax([1, 3])[0], halved */
    double want = 0.5 * ((log(exp(0.5) + exp(-1.0)) + 1.0) + (log(exp(1.0) + exp(3.0)) - 1.0));
    CHECK_MSG(fabs(fa - want) < 1e-6 && fa == fb, "defaults: %.9g vs %.9g (%.9g)", (double)fa,
              want, (double)fb);
    amp_ctx_reset_step(ctx);
    amp_tensor_free(logits);
    amp_tensor_free(lab);
}

static void test_bad_input(amp_ctx *ctx) {
    amp_tensor *logits = NULL, *y = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){3, 5}, &logits));
    amp_tensor *lab = labels_tensor(ctx, (const int32_t[]){1, 5, 2}, 3);
    amp_xent_options o = amp_xent_defaults();
    CHECK_FAILS(amp_cross_entropy_ex(logits, lab, &o, &y), AMP_ERR_INVALID_ARG,
                "amp_cross_entropy: ");
    CHECK(strstr(amp_last_error(), "label 5 of row 1 is outside [0, 5)") != NULL);
    o.ignore_index = 5; /* the same label, ignored now */
    CHECK_OK(amp_cross_entropy_ex(logits, lab, &o, &y));
    o.label_smoothing = 1.5f;
    CHECK_FAILS(amp_cross_entropy_ex(logits, lab, &o, &y), AMP_ERR_INVALID_ARG,
                "label_smoothing = 1.5 is outside [0, 1]");
    CHECK_FAILS(amp_cross_entropy_ex(logits, lab, NULL, &y), AMP_ERR_INVALID_ARG, "options");
    amp_tensor *short_lab = labels_tensor(ctx, (const int32_t[]){1, 2}, 2);
    CHECK_FAILS(amp_cross_entropy(logits, short_lab, &y), AMP_ERR_SHAPE, "2 labels for 3 rows");
    CHECK_FAILS(amp_cross_entropy(logits, logits, &y), AMP_ERR_SHAPE, "labels");
    amp_ctx_reset_step(ctx);
    amp_tensor_free(logits);
    amp_tensor_free(lab);
    amp_tensor_free(short_lab);
}

/* The loss of host logits [rows, cols] cast to dt, against lab with o, and the gradient of the
 * f32 leaf (rows * cols floats into grad); the step is released after. */
static void loss_and_grad(amp_ctx *ctx, const float *host, int64_t cols, amp_dtype dt,
                          amp_tensor *lab, const amp_xent_options *o, float *loss_out,
                          float *grad) {
    int64_t rows = amp_tensor_dim(lab, 0);
    amp_tensor *x = NULL, *h = NULL, *loss = NULL, *g = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){rows, cols}, host, &x));
    CHECK_OK(amp_tensor_set_requires_grad(x, true));
    CHECK_OK(amp_cast(x, dt, &h));
    CHECK_OK(amp_cross_entropy_ex(h, lab, o, &loss));
    CHECK_OK(amp_tensor_to_host(loss, loss_out, sizeof *loss_out));
    CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_tensor_get_grad(x, &g));
    CHECK_OK(amp_tensor_to_host_f32(g, grad, (size_t)(rows * cols) * sizeof *grad));
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x);
}

/* Logits [rows, classes + padding] with options.classes give the loss of the [rows, classes]
 * logits bit for bit and their gradient, 0 on the padding, whatever the padding holds (NaN and
 * 1e30 here: a read would show); options.classes outside [1, columns] is refused. */
static void test_padding(amp_ctx *ctx) {
    enum { ROWS = 5, CLASSES = 11, PAD = 5, W = CLASSES + PAD };
    float dense[ROWS * CLASSES], padded[ROWS * W];
    for (int r = 0; r < ROWS; r++)
        for (int j = 0; j < W; j++) {
            float v = (float)sin(1.7 * (r * W + j)) * 3.0f;
            if (j < CLASSES) dense[r * CLASSES + j] = v;
            padded[r * W + j] = j < CLASSES ? v : j % 2 ? NAN : 1e30f;
        }
    amp_tensor *lab = labels_tensor(ctx, (const int32_t[]){3, 10, -100, 0, 7}, ROWS);
    amp_dtype dts[] = {AMP_F32, AMP_BF16};
    for (int k = 0; k < 2; k++) {
        amp_xent_options o = amp_xent_defaults();
        o.label_smoothing = 0.1f;
        float fa = 0, fb = 0, ga[ROWS * CLASSES], gb[ROWS * W];
        loss_and_grad(ctx, dense, CLASSES, dts[k], lab, &o, &fa, ga);
        o.classes = CLASSES;
        loss_and_grad(ctx, padded, W, dts[k], lab, &o, &fb, gb);
        CHECK_MSG(fa == fb && isfinite(fa), "%s: padded loss %.9g, unpadded %.9g",
                  amp_dtype_name(dts[k]), (double)fb, (double)fa);
        int bad = 0;
        for (int r = 0; r < ROWS; r++)
            for (int j = 0; j < W; j++)
                bad += j < CLASSES ? gb[r * W + j] != ga[r * CLASSES + j] : gb[r * W + j] != 0.0f;
        CHECK_MSG(bad == 0, "%s: %d padded gradients differ", amp_dtype_name(dts[k]), bad);
    }
    amp_tensor *logits = NULL, *y = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){ROWS, W}, &logits));
    amp_xent_options o = amp_xent_defaults();
    o.classes = W + 1;
    CHECK_FAILS(amp_cross_entropy_ex(logits, lab, &o, &y), AMP_ERR_SHAPE,
                "options->classes = 17 is outside [1, 16]");
    o.classes = -1;
    CHECK_FAILS(amp_cross_entropy_ex(logits, lab, &o, &y), AMP_ERR_SHAPE, "options->classes = -1");
    o.classes = 10; /* label 10 is no class now */
    CHECK_FAILS(amp_cross_entropy_ex(logits, lab, &o, &y), AMP_ERR_INVALID_ARG,
                "label 10 of row 1 is outside [0, 10)");
    amp_ctx_reset_step(ctx);
    amp_tensor_free(logits);
    amp_tensor_free(lab);
}

static void run_all(amp_device device) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 13}, &ctx));
    if (!ctx) return;
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        int before = test_n_fail;
        gc_run(ctx, &cases[i], 5000 + (uint64_t)i);
        printf("%-48s %s\n", cases[i].name, test_n_fail == before ? "ok" : "FAILED");
    }
    test_defaults(ctx);
    test_bad_input(ctx);
    test_padding(ctx);
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(run_all);
    return test_summary("test_gradcheck_xent");
}
