/* A residual network written with the model API, trained on Fashion-MNIST at O1 bf16 (Apex's
 * ImageNet example in miniature). In PyTorch it is
 *
 *   class Block(nn.Module):                       # torchvision's BasicBlock, no downsample
 *       def __init__(s, c):
 *           super().__init__()
 *           s.conv1, s.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
 *           s.conv2, s.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
 *       def forward(s, x):
 *           return F.relu(s.bn2(s.conv2(F.relu(s.bn1(s.conv1(x))))) + x)
 *   class Net(nn.Module):
 *       def __init__(s, c=32):
 *           super().__init__()
 *           s.stem, s.bn = nn.Conv2d(1, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
 *           s.layer1 = nn.Sequential(Block(c), Block(c))
 *           s.fc = nn.Linear(c, 10)
 *       def forward(s, x):
 *           x = F.max_pool2d(F.relu(s.bn(s.stem(x))), 2)         # 28x28 -> 14x14
 *           return s.fc(s.layer1(x).mean((2, 3)))                # global average pooling
 *
 * and its state_dict loads strictly into that class (tests/python/test_example_state_dict.py).
 * The network is the library's amp_model_resnet_mnist, written with the model API in
 * models/resnet.c: the file to copy for a model of your own.
 *   build/examples/resnet [--epochs 2] [--ckpt DIR [--resume]] ...   (examples/example_loop.h)
 *   mpirun -np 2 build/examples/resnet ...                           (DDP) */
#include "example_loop.h"

static amp_status make(amp_ctx *ctx, amp_model **m, amp_optimizer **opt) {
    amp_status s = amp_model_resnet_mnist(ctx, m);
    amp_sgd_opts o = amp_sgd_defaults();
    o.lr = 0.1f; /* cosine-decayed to 0 by the loop: 89.6 % after 2 epochs (bench/RESULTS.md) */
    o.momentum = 0.9f;
    o.weight_decay = 5e-4f;
    return s == AMP_OK ? amp_sgd_create(*m, &o, opt) : s;
}

int main(int argc, char **argv) { return example_main(argc, argv, "resnet", make); }
