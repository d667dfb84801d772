/* The MNIST tutorials' ConvNet and MLP (amp/models/mnist.h), as Sequential models. */
#include "amp/models/mnist.h"
#include "amp/status.h"

static amp_status convnet_layers(amp_model *m) {
    static const char *blocks[2] = {"layer1", "layer2"};
    static const int64_t channels[3] = {1, 16, 32};
    for (int b = 0; b < 2; b++) { /* a Sequential each, its layers named 0..3, as torch's */
        amp_model *seq;
        amp_status s = amp_seq_create(amp_model_ctx(m), &seq);
        if (s != AMP_OK) return s;
        s = amp_seq_add_conv2d(seq, NULL, channels[b], channels[b + 1], 5, 1, 2, true);
        if (s == AMP_OK) s = amp_seq_add_batchnorm2d(seq, NULL, channels[b + 1]);
        if (s == AMP_OK) s = amp_seq_add_relu(seq, NULL);
        if (s == AMP_OK) s = amp_seq_add_maxpool2d(seq, NULL, 2, 2);
        if (s == AMP_OK) s = amp_seq_add(m, blocks[b], seq);
        if (s != AMP_OK) {
            amp_model_free(seq);
            return s;
        }
    }
    amp_status s = amp_seq_add_flatten(m, "flatten");
    return s == AMP_OK ? amp_seq_add_linear(m, "fc", 7 * 7 * 32, 10, true) : s;
}

static amp_status mlp_layers(amp_model *m) {
    amp_status s = amp_seq_add_flatten(m, "flatten");
    if (s == AMP_OK) s = amp_seq_add_linear(m, "fc1", 784, 2048, true);
    if (s == AMP_OK) s = amp_seq_add_relu(m, "relu1");
    if (s == AMP_OK) s = amp_seq_add_linear(m, "fc2", 2048, 2048, true);
    if (s == AMP_OK) s = amp_seq_add_relu(m, "relu2");
    return s == AMP_OK ? amp_seq_add_linear(m, "fc3", 2048, 10, true) : s;
}

static amp_status preset(const char *who, amp_ctx *ctx, amp_status (*layers)(amp_model *),
                         amp_model **out) {
    if (!out) return amp_error(AMP_ERR_INVALID_ARG, "%s: argument 'out' is NULL", who);
    *out = NULL;
    if (!ctx) return amp_error(AMP_ERR_INVALID_ARG, "%s: argument 'ctx' is NULL", who);
    amp_model *m;
    amp_status s = amp_seq_create(ctx, &m);
    if (s != AMP_OK) return s;
    s = layers(m);
    if (s == AMP_OK) s = amp_model_build(m);
    if (s != AMP_OK) {
        amp_model_free(m);
        return s;
    }
    *out = m;
    return AMP_OK;
}

amp_status amp_model_convnet_mnist(amp_ctx *ctx, amp_model **out) {
    return preset(__func__, ctx, convnet_layers, out);
}

amp_status amp_model_mlp_mnist(amp_ctx *ctx, amp_model **out) {
    return preset(__func__, ctx, mlp_layers, out);
}
