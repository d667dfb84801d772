/* The residual network of amp/models/mnist.h, written with the model API: a block is a model of
 * its own whose forward runs its children and the skip; the network's forward runs the stem, the
 * blocks (a Sequential) and the head. examples/resnet.c trains it, amp-bench measures it
 * (`--model resnet`); its PyTorch twin is in examples/resnet.c's header comment and
 * bench/pytorch_reference.py. */
#include <stdlib.h>

#include "amp/models/mnist.h"
#include "amp/status.h"

#define WIDTH 32
#define POOLED (14 * 14) /* 28x28 after the stem's 2x2 max pool */

typedef struct block {
    amp_model *conv1, *bn1, *conv2, *bn2;
} block;

static amp_status block_forward(amp_model *self, amp_tensor *const *in, int n, amp_tensor **out) {
    (void)n;
    block *b = amp_model_user(self);
    amp_tensor *h;
    amp_status s = amp_model_forward(b->conv1, in[0], &h);
    if (s == AMP_OK) s = amp_model_forward(b->bn1, h, &h);
    if (s == AMP_OK) s = amp_relu(h, &h);
    if (s == AMP_OK) s = amp_model_forward(b->conv2, h, &h);
    if (s == AMP_OK) s = amp_model_forward(b->bn2, h, &h);
    if (s == AMP_OK) s = amp_add(h, in[0], &h); /* the skip */
    return s == AMP_OK ? amp_relu(h, out) : s;
}

/* The child *child that `made` (its constructor's status) made, added to parent as `name`. */
static amp_status adopt(amp_model *parent, const char *name, amp_status made, amp_model **child) {
    return made == AMP_OK ? amp_model_add_child(parent, name, *child) : made;
}

static amp_status block_create(amp_ctx *ctx, int64_t c, amp_model **out) {
    block *b = calloc(1, sizeof *b);
    if (!b) return amp_error(AMP_ERR_OOM, "amp_model_resnet_mnist: out of host memory");
    amp_status s = amp_model_create(ctx, block_forward, b, free, out);
    if (s != AMP_OK) return free(b), s;
    s = adopt(*out, "conv1", amp_module_conv2d(ctx, c, c, 3, 1, 1, false, &b->conv1), &b->conv1);
    if (s == AMP_OK) s = adopt(*out, "bn1", amp_module_batchnorm2d(ctx, c, &b->bn1), &b->bn1);
    if (s == AMP_OK) s = adopt(*out, "conv2", amp_module_conv2d(ctx, c, c, 3, 1, 1, false, &b->conv2), &b->conv2);
    if (s == AMP_OK) s = adopt(*out, "bn2", amp_module_batchnorm2d(ctx, c, &b->bn2), &b->bn2);
    if (s != AMP_OK) {
        amp_model_free(*out); /* frees b and what was adopted */
        *out = NULL;
    }
    return s;
}

/* A block made and added to seq, or freed. */
static amp_status block_add(amp_ctx *ctx, amp_model *seq) {
    amp_model *b;
    amp_status s = block_create(ctx, WIDTH, &b);
    if (s == AMP_OK && (s = amp_seq_add(seq, NULL, b)) != AMP_OK) amp_model_free(b);
    return s;
}

typedef struct net {
    amp_model *stem, *bn, *layer1, *fc;
    amp_tensor *avg; /* [14 * 14, 1] of 1 / 196: the spatial mean as one GEMM */
} net;

static void net_free(void *user) {
    net *n = user;
    if (!n) return;
    amp_tensor_free(n->avg);
    free(n);
}

static amp_status net_forward(amp_model *self, amp_tensor *const *in, int n_in, amp_tensor **out) {
    if (n_in != 1 || !in[0] || amp_tensor_ndim(in[0]) != 4)
        return amp_error(AMP_ERR_SHAPE, "ResNet forward (amp_model_forward): the input must be "
                         "one image batch [n, 1, 28, 28]");
    net *n = amp_model_user(self);
    amp_tensor *h, *avg = n->avg;
    amp_status s = amp_model_forward(n->stem, in[0], &h);
    if (s == AMP_OK) s = amp_model_forward(n->bn, h, &h);
    if (s == AMP_OK) s = amp_relu(h, &h);
    if (s == AMP_OK) s = amp_maxpool2d(h, 2, 2, 0, &h);
    if (s == AMP_OK) s = amp_model_forward(n->layer1, h, &h);
    if (s == AMP_OK && amp_tensor_numel(h) != amp_tensor_dim(h, 0) * WIDTH * POOLED)
        return amp_error(AMP_ERR_SHAPE, "ResNet forward (amp_model_forward): the images must be "
                         "28x28");
    int64_t batch = s == AMP_OK ? amp_tensor_dim(h, 0) : 0;
    int64_t rows[2] = {batch * WIDTH, POOLED}, pooled[2] = {batch, WIDTH};
    if (s == AMP_OK) s = amp_reshape(h, 2, rows, &h);
    if (s == AMP_OK && amp_tensor_dtype(h) != amp_tensor_dtype(avg)) s = amp_cast(avg, amp_tensor_dtype(h), &avg);
    if (s == AMP_OK) s = amp_matmul(h, avg, &h);
    if (s == AMP_OK) s = amp_reshape(h, 2, pooled, &h);
    return s == AMP_OK ? amp_model_forward(n->fc, h, out) : s;
}

static amp_status net_make(amp_ctx *ctx, net *n, amp_model *m) {
    amp_status s = adopt(m, "stem", amp_module_conv2d(ctx, 1, WIDTH, 3, 1, 1, false, &n->stem), &n->stem);
    if (s == AMP_OK) s = adopt(m, "bn", amp_module_batchnorm2d(ctx, WIDTH, &n->bn), &n->bn);
    if (s == AMP_OK) s = adopt(m, "layer1", amp_seq_create(ctx, &n->layer1), &n->layer1);
    if (s == AMP_OK) s = block_add(ctx, n->layer1);
    if (s == AMP_OK) s = block_add(ctx, n->layer1);
    if (s == AMP_OK) s = adopt(m, "fc", amp_module_linear(ctx, WIDTH, 10, true, &n->fc), &n->fc);
    return s == AMP_OK ? amp_model_build(m) : s;
}

amp_status amp_model_resnet_mnist(amp_ctx *ctx, amp_model **out) {
    if (!out) return amp_error(AMP_ERR_INVALID_ARG, "%s: argument 'out' is NULL", __func__);
    *out = NULL;
    if (!ctx) return amp_error(AMP_ERR_INVALID_ARG, "%s: argument 'ctx' is NULL", __func__);
    net *n = calloc(1, sizeof *n);
    if (!n) return amp_error(AMP_ERR_OOM, "%s: out of host memory", __func__);
    float avg[POOLED];
    for (int i = 0; i < POOLED; i++) avg[i] = 1.0f / POOLED;
    amp_status s = amp_tensor_from_host(ctx, AMP_F32, 2, (int64_t[]){POOLED, 1}, avg, &n->avg);
    if (s != AMP_OK) return net_free(n), s;
    amp_model *m;
    s = amp_model_create(ctx, net_forward, n, net_free, &m);
    if (s != AMP_OK) return net_free(n), s;
    s = net_make(ctx, n, m);
    if (s != AMP_OK) {
        amp_model_free(m); /* frees n and what was adopted */
        return s;
    }
    *out = m;
    return AMP_OK;
}
