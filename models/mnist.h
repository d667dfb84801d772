/* The networks of the Apex/PyTorch MNIST tutorials and a small residual network, for 1x28x28
 * inputs (Fashion-MNIST in amp-train), built and initialised from the context's RNG as PyTorch's
 * defaults draw. Their parameter names are the PyTorch modules' they mirror, so their state_dict
 * loads into them strictly (tests/python). */
#ifndef AMP_MODELS_MNIST_H
#define AMP_MODELS_MNIST_H

#include "amp/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* layer1 = Sequential(Conv2d(1, 16, 5, padding=2), BatchNorm2d(16), ReLU(), MaxPool2d(2)),
 * layer2 = the same 16 -> 32, fc = Linear(7 * 7 * 32, 10). */
amp_status amp_model_convnet_mnist(amp_ctx *ctx, amp_model **out);
/* Sequential(Flatten, Linear(784, 2048), ReLU, Linear(2048, 2048), ReLU, Linear(2048, 10)). */
amp_status amp_model_mlp_mnist(amp_ctx *ctx, amp_model **out);
/* A residual network (Apex's ImageNet example in miniature, models/resnet.c):
 *   stem = Conv2d(1, 32, 3, padding=1, bias=False), bn = BatchNorm2d(32), ReLU, MaxPool2d(2);
 *   layer1 = Sequential(Block(32), Block(32)), torchvision's BasicBlock without downsampling:
 *     relu(bn2(conv2(relu(bn1(conv1(x))))) + x), 3x3 convolutions without bias;
 *   the spatial mean, fc = Linear(32, 10). */
amp_status amp_model_resnet_mnist(amp_ctx *ctx, amp_model **out);

#ifdef __cplusplus
}
#endif
#endif
