#!/usr/bin/env python3
"""The hand-written-model examples' state_dicts load strictly into the same networks written in
PyTorch (the classes in examples/resnet.c's and examples/mlp_groups.c's header comments; the
residual network's is bench/pytorch_reference.py's ResNet), and
the loaded PyTorch network computes what libamp's weights say: each example trains 3 steps at O0
and saves a checkpoint; its model.safetensors goes into the PyTorch class with strict=True, and
the eval-mode logits of a few test images must match the logits the C program printed for them
(--print-logits) to 1e-4 relative.

    test_example_state_dict.py RESNET MLP_GROUPS TMPDIR

Exits 77 (ctest: SKIPPED) without torch, safetensors or the Fashion-MNIST data set, never 0.
"""
import gzip
import os
import subprocess
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from safetensors.torch import load_file
except ImportError as e:  # the test must not pass without having run
    print(f"test_example_state_dict: SKIPPED: {e}")
    sys.exit(77)
# The residual network's PyTorch twin is amp-bench's (bench/pytorch_reference.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from pytorch_reference import ResNet  # noqa: E402

DATA = os.environ.get("AMP_DATA", "/usr/share/datasets/fashion-mnist")
if not os.path.exists(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")):
    print(f"test_example_state_dict: SKIPPED: no Fashion-MNIST in {DATA}")
    sys.exit(77)


class MLP(nn.Module):
    def __init__(s):
        super().__init__()
        s.fc1, s.fc2, s.fc3 = nn.Linear(784, 512), nn.Linear(512, 256), nn.Linear(256, 10)

    def forward(s, x):
        return s.fc3(F.relu(s.fc2(F.relu(s.fc1(x.flatten(1))))))


def test_images(n):
    """The first n test images, normalised as libamp's loader does."""
    with gzip.open(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")) as f:
        raw = f.read()[16:16 + n * 784]
    x = torch.tensor(list(raw), dtype=torch.float32).reshape(n, 1, 28, 28) / 255.0
    return (x - 0.2860) / 0.3530


passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", file=sys.stderr)


def main():
    resnet, mlp, tmp = sys.argv[1:4]
    for program, module in ((resnet, ResNet()), (mlp, MLP())):
        name = os.path.basename(program)
        ckpt = os.path.join(tmp, name)
        out = subprocess.run([program, "--data", DATA, "--steps", "3", "--level", "O0", "--no-eval",
                              "--ckpt", ckpt, "--print-logits", "4"],
                             capture_output=True, text=True)
        check(out.returncode == 0, f"{name} failed: {out.stderr}")
        if out.returncode:
            continue
        with open(os.path.join(ckpt, "latest")) as f:
            step = f.read().strip()
        state = load_file(os.path.join(ckpt, step, "model.safetensors"))
        result = module.load_state_dict(state, strict=True)
        check(not result.missing_keys and not result.unexpected_keys, f"{name}: {result}")
        module.eval()
        with torch.no_grad():
            mine = module(test_images(4))
        theirs = torch.tensor([[float(v) for v in line.split()[1:]]
                               for line in out.stdout.splitlines() if line.startswith("logits")])
        check(theirs.shape == mine.shape, f"{name}: logits {tuple(theirs.shape)}, want {tuple(mine.shape)}")
        if theirs.shape == mine.shape:
            err = ((mine - theirs).norm() / mine.norm()).item()
            check(err < 1e-4, f"{name}: logits differ from PyTorch's by {err:.2e} (relative)")
            print(f"{name}: {len(state)} tensors loaded strictly; logits within {err:.1e} of PyTorch's")
    print(f"test_example_state_dict: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


main()
