"""libamp checkpoints seen from Python (the `safetensors` and `numpy` packages).

1. Python writes the tutorial ConvNet's weights (PyTorch's state_dict names and dtypes,
   num_batches_tracked an int64 scalar) with values of its own.
2. amp-train starts from them (--init-weights) at lr 0 for one step, at O0 and at O2 fp16, and saves.
3. Python reads both checkpoints: exactly PyTorch's keys, shapes and dtypes; the weights it wrote,
   unchanged (lr 0) in f32 at O0, as f32 masters and their f16 rounding at O2; batch norm's
   counter at 1; the state file's step, scale and RNG.
usage: checkpoint_python.py AMP_TRAIN WORKDIR   (exit 77: SKIPPED without numpy/safetensors/data)
"""
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file
except ImportError as e:
    print(f"checkpoint_python: SKIPPED: {e}")
    sys.exit(77)

DATA = os.environ.get("AMP_DATA", "/usr/share/datasets/fashion-mnist")
if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
    print(f"checkpoint_python: SKIPPED: no data set in {DATA}")
    sys.exit(77)

train, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what, file=sys.stderr)


# PyTorch's state_dict of the tutorial ConvNet (layer1/layer2 = Conv2d, BatchNorm2d, ReLU, MaxPool2d).
SHAPES = {}
for layer, c_in, c_out in (("layer1", 1, 16), ("layer2", 16, 32)):
    SHAPES[f"{layer}.0.weight"] = (c_out, c_in, 5, 5)
    SHAPES[f"{layer}.0.bias"] = (c_out,)
    for what in ("weight", "bias", "running_mean", "running_var"):
        SHAPES[f"{layer}.1.{what}"] = (c_out,)
    SHAPES[f"{layer}.1.num_batches_tracked"] = ()
SHAPES["fc.weight"] = (10, 7 * 7 * 32)
SHAPES["fc.bias"] = (10,)

rng = np.random.default_rng(7)
weights = {}
for name, shape in SHAPES.items():
    if name.endswith("num_batches_tracked"):
        weights[name] = np.array(0, dtype=np.int64)
    elif name.endswith("running_var"):
        weights[name] = np.ones(shape, dtype=np.float32)
    elif name.endswith("running_mean"):
        weights[name] = np.zeros(shape, dtype=np.float32)
    else:
        weights[name] = (rng.standard_normal(shape) * 0.05).astype(np.float32)
init = os.path.join(work, "init.safetensors")
save_file(weights, init)

for level in ("O0", "O2"):
    ckpt = os.path.join(work, level)
    subprocess.run([train, "--model", "convnet", "--epochs", "1", "--batch-size", "32", "--threads",
                    "2", "--no-eval", "--data", DATA, "--lr", "0", "--max-steps", "1",
                    "--opt-level", level, "--init-weights", init, "--checkpoint-dir", ckpt],
                   check=True, stdout=subprocess.DEVNULL)
    folder = os.path.join(ckpt, "step-0000001")
    model = load_file(os.path.join(folder, "model.safetensors"))
    check(set(model) == set(SHAPES), f"{level}: keys {sorted(set(model) ^ set(SHAPES))} differ")
    for name, shape in SHAPES.items():
        if name not in model:
            continue
        t = model[name]
        check(t.shape == shape, f"{level}: {name} has shape {t.shape}, want {shape}")
        if name.endswith("num_batches_tracked"):
            check(t.dtype == np.int64 and int(t) == 1, f"{level}: {name} = {t!r}, want int64 1")
            continue
        half = level == "O2" and ".1." not in name  # O2 keeps batch norm in f32
        check(t.dtype == (np.float16 if half else np.float32), f"{level}: {name} is {t.dtype}")
        if "running" in name:
            continue  # moved by the training forward
        want = weights[name].astype(np.float16) if half else weights[name]
        check(np.array_equal(t, want), f"{level}: {name} differs from the weights Python wrote")
    with safe_open(os.path.join(folder, "state.safetensors"), "numpy") as f:
        meta = f.metadata()
        keys = set(f.keys())
        check(int(f.get_tensor("train.step")) == 1, f"{level}: train.step")
        check(f.get_tensor("rng.counter").dtype == np.uint64, f"{level}: rng.counter dtype")
        scale = f.get_tensor("scaler.0.scale")
        check(scale.dtype == np.float32 and float(scale) == (1.0 if level == "O0" else 65536.0),
              f"{level}: scaler.0.scale = {scale!r}")
        check(meta.get("amp.opt_level") == level and "machine.isa" in meta, f"{level}: metadata {meta}")
        if level == "O2":
            for name in ("layer1.0.weight", "fc.weight", "layer2.1.weight"):
                m = f.get_tensor("master." + name)
                check(m.dtype == np.float32 and np.array_equal(m, weights[name]),
                      f"O2: master.{name} is not the f32 weight Python wrote")
        else:
            check(not any(k.startswith("master.") for k in keys), "O0: masters saved")
        check("optimizer.state.0.momentum_buffer" in keys, f"{level}: no momentum_buffer")

print(f"checkpoint_python: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
