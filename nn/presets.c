/* The two models of the tutorial. Parameter names match the PyTorch modules they mirror. */
#include "core/error.h"
#include "nn/model_internal.h"

/* The ConvNet of the Apex/PyTorch MNIST tutorials:
 *   layer1 = Sequential(Conv2d(1, 16, 5, padding=2), BatchNorm2d(16), ReLU(), MaxPool2d(2))
 *   layer2 = Sequential(Conv2d(16, 32, 5, padding=2), BatchNorm2d(32), ReLU(), MaxPool2d(2))
 *   fc = Linear(7 * 7 * 32, 10) */
static amp_status amp_convnet_layers(amp_model *m) {
    static const char *blocks[2] = {"layer1", "layer2"};
    static const int64_t channels[3] = {1, 16, 32};
    for (int b = 0; b < 2; b++) { /* a Sequential each, its layers named 0..3, as torch's */
        amp_model *seq;
        AMP_TRY(amp_seq_create(m->ctx, &seq));
        amp_status s = amp_seq_add_conv2d(seq, NULL, channels[b], channels[b + 1], 5, 1, 2, true);
        if (s == AMP_OK) s = amp_seq_add_batchnorm2d(seq, NULL, channels[b + 1]);
        if (s == AMP_OK) s = amp_seq_add_relu(seq, NULL);
        if (s == AMP_OK) s = amp_seq_add_maxpool2d(seq, NULL, 2, 2);
        if (s == AMP_OK) s = amp_seq_add(m, blocks[b], seq);
        if (s != AMP_OK) {
            amp_model_free(seq);
            return s;
        }
    }
    AMP_TRY(amp_seq_add_flatten(m, "flatten"));
    return amp_seq_add_linear(m, "fc", 7 * 7 * 32, 10, true);
}

/* nn.Sequential(Flatten, Linear(784, 2048), ReLU, Linear(2048, 2048), ReLU, Linear(2048, 10)). */
static amp_status amp_mlp_layers(amp_model *m) {
    AMP_TRY(amp_seq_add_flatten(m, "flatten"));
    AMP_TRY(amp_seq_add_linear(m, "fc1", 784, 2048, true));
    AMP_TRY(amp_seq_add_relu(m, "relu1"));
    AMP_TRY(amp_seq_add_linear(m, "fc2", 2048, 2048, true));
    AMP_TRY(amp_seq_add_relu(m, "relu2"));
    return amp_seq_add_linear(m, "fc3", 2048, 10, true);
}

static amp_status amp_preset(const char *who, amp_ctx *ctx, amp_status (*layers)(amp_model *),
                             amp_model **out) {
    if (!out) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'out' is NULL", who);
    *out = NULL;
    if (!ctx) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'ctx' is NULL", who);
    *out = NULL;
    amp_model *m;
    AMP_TRY(amp_seq_create(ctx, &m));
    amp_status s = layers(m);
    if (s == AMP_OK) s = amp_model_build(m);
    if (s != AMP_OK) {
        amp_model_free(m);
        return s;
    }
    *out = m;
    return AMP_OK;
}

amp_status amp_model_convnet_mnist(amp_ctx *ctx, amp_model **out) {
    return amp_preset(__func__, ctx, amp_convnet_layers, out);
}

amp_status amp_model_mlp_mnist(amp_ctx *ctx, amp_model **out) {
    return amp_preset(__func__, ctx, amp_mlp_layers, out);
}
