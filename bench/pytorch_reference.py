#!/usr/bin/env python3
"""amp-train's recipe in PyTorch on the CPU, for comparing accuracy and throughput with libamp.

Same data (Fashion-MNIST from the IDX files, normalised as libamp's data layer does), same models
(nn/presets.c), same optimiser (SGD, lr 0.05, momentum 0.9), same batch size (128, last batch
kept), same per-epoch numbers as examples/amp_train.c: mean train loss over the epoch's steps,
test accuracy (eval mode, no gradients) and samples/s over the training steps only. The data sit in
memory as tensors and each batch is gathered by index, as libamp's loader does, so neither side
pays for a Python data pipeline. Shuffling uses torch.randperm, so the batch order (and thus the
exact losses) differ from libamp's Philox order; only statistics are comparable.

    python3 bench/pytorch_reference.py --model convnet --epochs 2 --threads 2 --json

Benchmark mode (--bench), what amp-bench runs beside libamp: no data set, one batch of random
inputs and labels (fixed seed) generated once and reused every step, as amp-bench does; --warmup
untimed steps, then --steps timed ones (torch.cuda.synchronize after each on cuda); prints one
JSON line with the per-step times and samples/s from their median:

    python3 bench/pytorch_reference.py --bench --model mlp --precision bf16 --batch 128 \
        --steps 20 --warmup 5 --threads 2

--model llama (--bench only) runs transformers' LlamaForCausalLM of --n-layer, --n-head,
--kv-heads, --n-embd, --intermediate, --block-size and --vocab-size (--attn sdpa or eager) with the
same AdamW groups. --model gpt (--bench only) runs bench/gpt_reference.py's GPT-2 of --n-layer, --n-head, --n-embd,
--block-size and --vocab-size on one batch of random token sequences, AdamW and clipping as
amp-train --model gpt; a sample is a sequence.

Needs torch (and numpy outside --bench; scripts/setup.sh --bench); no torchvision. Without an
importable torch it prints one line to stderr and exits with status 3 (amp-bench reports "PyTorch
not importable: ..."); --device cuda without a usable GPU exits with status 4.
"""
import argparse
import gzip
import json
import os
import resource
import statistics
import struct
import sys
import time

EXIT_NO_TORCH = 3  # amp-bench reads this status as "PyTorch not importable"
EXIT_NO_DEVICE = 4

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except Exception as e:  # ImportError, or a broken install failing inside torch's own imports
    print(f"pytorch_reference.py: PyTorch not importable: {type(e).__name__}: {e}",
          file=sys.stderr)
    sys.exit(EXIT_NO_TORCH)
try:
    import numpy as np  # the accuracy mode's IDX reader; --bench does without
except ImportError:
    np = None

# include/amp/data.h: AMP_FASHION_MNIST_MEAN / AMP_FASHION_MNIST_STD, what amp-train passes to
# amp_mnist_load_ex (pixel mean and std of the 60000 training images after x / 255).
FASHION_MNIST_MEAN = 0.2860
FASHION_MNIST_STD = 0.3530
EVAL_BATCH = 1000  # examples/amp_train.c EVAL_BATCH


def read_idx(path, magic, ndim):
    """Reads a gzipped (or plain) IDX file as a uint8 array; checks magic and size."""
    if np is None:
        raise SystemExit("pytorch_reference.py: numpy is needed to read the data set (pip install "
                         "numpy), or run --bench")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    got_magic, = struct.unpack(">I", data[:4])
    if got_magic != magic:
        raise SystemExit(f"{path}: magic 0x{got_magic:08x}, want 0x{magic:08x}")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise SystemExit(f"{path}: {body.size} bytes of data, header says {dims}")
    return body.reshape(dims)


def find_file(data_dir, name):
    for candidate in (name + ".gz", name):
        path = os.path.join(data_dir, candidate)
        if os.path.exists(path):
            return path
    raise SystemExit(f"{data_dir}: neither {name}.gz nor {name} found")


def load_split(data_dir, train, mean, std):
    """x f32 [n, 1, 28, 28] = (u8 / 255 - mean) / std in f32, in that order (data/dataset.c's
    table), and y int64 [n]."""
    prefix = "train" if train else "t10k"
    images = read_idx(find_file(data_dir, f"{prefix}-images-idx3-ubyte"), 0x00000803, 3)
    labels = read_idx(find_file(data_dir, f"{prefix}-labels-idx1-ubyte"), 0x00000801, 1)
    if images.shape[0] != labels.shape[0]:
        raise SystemExit(f"{data_dir}: {images.shape[0]} images but {labels.shape[0]} labels")
    f32 = np.float32
    table = (np.arange(256, dtype=f32) / f32(255) - f32(mean)) / f32(std)
    x = torch.from_numpy(table[images][:, None, :, :].copy())
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


class Block(nn.Module):
    """models/resnet.c's residual block (torchvision's BasicBlock, no downsample)."""

    def __init__(s, c):
        super().__init__()
        s.conv1, s.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        s.conv2, s.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(s, x):
        return torch.relu(s.bn2(s.conv2(torch.relu(s.bn1(s.conv1(x))))) + x)


class ResNet(nn.Module):
    """models/resnet.c: stem, two residual blocks, global average pooling, linear."""

    def __init__(s, c=32):
        super().__init__()
        s.stem, s.bn = nn.Conv2d(1, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        s.layer1 = nn.Sequential(Block(c), Block(c))
        s.fc = nn.Linear(c, 10)

    def forward(s, x):
        x = torch.max_pool2d(torch.relu(s.bn(s.stem(x))), 2)
        return s.fc(s.layer1(x).mean((2, 3)))


def make_model(name):
    """nn/presets.c: amp_model_convnet_mnist and amp_model_mlp_mnist, and the hand-written
    residual network of models/resnet.c; PyTorch default init."""
    if name == "resnet":
        return ResNet()
    if name == "convnet":
        def block(c_in, c_out):
            return nn.Sequential(nn.Conv2d(c_in, c_out, 5, padding=2), nn.BatchNorm2d(c_out),
                                 nn.ReLU(), nn.MaxPool2d(2))

        return nn.Sequential(block(1, 16), block(16, 32), nn.Flatten(), nn.Linear(7 * 7 * 32, 10))
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048),
                         nn.ReLU(), nn.Linear(2048, 10))


DEVICE = "cpu"


def autocast(dtype):
    """torch.autocast on the device in dtype (None: off)."""
    return torch.autocast(DEVICE, dtype=dtype or torch.bfloat16, enabled=dtype is not None)


@torch.no_grad()
def evaluate(model, x, y, use_autocast):
    model.eval()
    correct = 0
    for i in range(0, x.shape[0], EVAL_BATCH):
        with autocast(use_autocast):
            logits = model(x[i:i + EVAL_BATCH])
        correct += (logits.argmax(dim=1) == y[i:i + EVAL_BATCH]).sum().item()
    model.train()
    return correct / x.shape[0]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("convnet", "mlp", "resnet", "gpt", "llama"), default="convnet")
    p.add_argument("--n-layer", type=int, default=4, help="--model gpt's and llama's shape")
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--kv-heads", type=int, default=2, help="--model llama's key/value heads")
    p.add_argument("--intermediate", type=int, default=704, help="--model llama's MLP width")
    p.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa",
                   help="--model llama: transformers' attn_implementation")
    p.add_argument("--recompute", choices=("none", "full"), default="none",
                   help="--model gpt's and llama's blocks under torch.utils.checkpoint")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", "--batch", dest="batch_size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: no limit)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--mean", type=float, default=FASHION_MNIST_MEAN)
    p.add_argument("--std", type=float, default=FASHION_MNIST_STD)
    p.add_argument("--autocast-fp16", action="store_true",
                   help="forward and loss under torch.autocast('cpu', dtype=torch.float16)")
    p.add_argument("--autocast-bf16", action="store_true",
                   help="forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: model and data on the GPU (scripts/gpu.sh), cuDNN autotuning on")
    p.add_argument("--json", action="store_true", help="end with one JSON summary line")
    p.add_argument("--bench", action="store_true",
                   help="benchmark mode: random data, --warmup + --steps steps, one JSON line")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default=None,
                   help="bf16 / fp16: torch.autocast in that dtype (fp16 with a GradScaler); "
                        "the same as --autocast-bf16 / --autocast-fp16")
    p.add_argument("--steps", type=int, default=50, help="--bench: timed steps")
    p.add_argument("--warmup", type=int, default=5, help="--bench: untimed steps before them")
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch_size < 1 or a.threads < 1 or a.max_steps < 0 or a.std <= 0:
        p.error("--epochs, --batch-size, --threads must be >= 1, --max-steps >= 0, --std > 0")
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be >= 1, --warmup >= 0")
    if a.autocast_fp16 and a.autocast_bf16:
        p.error("--autocast-fp16 and --autocast-bf16 exclude each other")
    flag = "fp16" if a.autocast_fp16 else "bf16" if a.autocast_bf16 else None
    if flag and a.precision and a.precision != flag:
        p.error(f"--precision {a.precision} contradicts --autocast-{flag}")
    a.precision = a.precision or flag or "fp32"
    if a.model in ("gpt", "llama") and not a.bench:
        p.error(f"--model {a.model} is for --bench; bench/gpt_reference.py trains the GPT on "
                "token files")
    return a


def autocast_dtype(precision):
    """torch.autocast's dtype for --precision, None for fp32."""
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def bench_setup(a):
    """The model, one batch, the optimizer and the loss of the batch as a function: the image
    models with amp-train's SGD, or bench/gpt_reference.py's GPT with nanoGPT's AdamW; the
    parameter count (a GPT's without the position embedding, nanoGPT's get_num_params); whether
    the step clips the gradient norm at 1.0 (the GPT's, as amp-train --model gpt's)."""
    gen = torch.Generator().manual_seed(a.seed)
    if a.model == "llama":  # transformers' own model, untied, as models/llama.c's default
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=a.vocab_size, hidden_size=a.n_embd,
                          intermediate_size=a.intermediate, num_hidden_layers=a.n_layer,
                          num_attention_heads=a.n_head, num_key_value_heads=a.kv_heads,
                          max_position_embeddings=a.block_size, rms_norm_eps=1e-5,
                          rope_theta=10000.0, tie_word_embeddings=False, attn_implementation=a.attn)
        model = LlamaForCausalLM(cfg).to(DEVICE)
        if a.recompute == "full":
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        tok = torch.randint(0, a.vocab_size, (a.batch_size, a.block_size + 1), generator=gen)
        x, y = tok[:, :-1].contiguous().to(DEVICE), tok[:, 1:].contiguous().to(DEVICE)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": rest, "weight_decay": 0.0}],
                                lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=DEVICE == "cuda")
        n_params = sum(p.numel() for p in model.parameters())

        def loss():
            logits = model(input_ids=x).logits
            return F.cross_entropy(logits.float().view(-1, a.vocab_size), y.view(-1))
        return model, opt, loss, n_params, True
    if a.model == "gpt":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import gpt_reference
        model = gpt_reference.GPT(gpt_reference.Config(a.n_layer, a.n_head, a.n_embd,
                                                       a.block_size, a.vocab_size)).to(DEVICE)
        model.recompute = a.recompute == "full"
        tok = torch.randint(0, a.vocab_size, (a.batch_size, a.block_size + 1), generator=gen)
        x, y = tok[:, :-1].contiguous().to(DEVICE), tok[:, 1:].contiguous().to(DEVICE)
        opt = gpt_reference.adamw(model, 6e-4, 0.1, DEVICE)
        n_params = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
        return model, opt, lambda: model(x, y)[1], n_params, True
    model = make_model(a.model).to(DEVICE)
    x = torch.randn(a.batch_size, 1, 28, 28, generator=gen).to(DEVICE)
    y = torch.randint(0, 10, (a.batch_size,), generator=gen).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    return (model, opt, lambda: F.cross_entropy(model(x), y),
            sum(p.numel() for p in model.parameters()), False)


def bench(a):
    """--bench: the training step of the accuracy mode on one random batch, timed step by step."""
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    model, opt, batch_loss, n_params, clip = bench_setup(a)
    amp_dtype = autocast_dtype(a.precision)
    scaler = torch.amp.GradScaler(DEVICE, enabled=a.precision == "fp16")
    step_ms = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        with autocast(amp_dtype):
            loss = batch_loss()
        scaler.scale(loss).backward()
        if clip:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        if step >= a.warmup:
            step_ms.append((time.perf_counter() - t0) * 1e3)
    return bench_report(a, step_ms, loss.item(), n_params, scaler)


def bench_report(a, step_ms, final_loss, n_params, scaler):
    """--bench's one JSON line."""
    median_ms = statistics.median(step_ms)
    config = "fp32" if a.precision == "fp32" else "autocast-" + a.precision
    print(json.dumps({
        "impl": "pytorch", "model": a.model, "precision": a.precision, "config": config,
        "device": DEVICE, "batch": a.batch_size, "steps": a.steps, "warmup": a.warmup,
        "threads": torch.get_num_threads(), "step_ms": [round(t, 4) for t in step_ms],
        "step_ms_median": round(median_ms, 4),
        "samples_per_s": round(a.batch_size / (median_ms * 1e-3), 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "cuda_peak_bytes": torch.cuda.max_memory_allocated() if DEVICE == "cuda" else None,
        "loss_scale": scaler.get_scale() if scaler.is_enabled() else None,
        "final_loss": final_loss, "n_params": n_params,
        "torch": torch.__version__}), flush=True)
    return 0


def main(argv):
    a = parse_args(argv)
    global DEVICE
    DEVICE = a.device
    if DEVICE == "cuda":
        if not torch.cuda.is_available():
            print(f"pytorch_reference.py: torch {torch.__version__} sees no usable CUDA device",
                  file=sys.stderr)
            return EXIT_NO_DEVICE
        torch.backends.cudnn.benchmark = True
    if a.bench:
        return bench(a)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    x_train, y_train = load_split(a.data, True, a.mean, a.std)
    x_test, y_test = load_split(a.data, False, a.mean, a.std)
    model = make_model(a.model).to(DEVICE)
    x_train, y_train = x_train.to(DEVICE), y_train.to(DEVICE)
    x_test, y_test = x_test.to(DEVICE), y_test.to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    amp_dtype = autocast_dtype(a.precision)
    # fp16 needs loss scaling (torch.amp.GradScaler); bf16 and fp32 do not.
    scaler = torch.amp.GradScaler(DEVICE, enabled=a.precision == "fp16")
    n_params = sum(p.numel() for p in model.parameters())
    print(f"pytorch-reference: {a.model}, {n_params} parameters, sgd, lr {a.lr:g}, "
          f"batch {a.batch_size}, torch {torch.__version__}, {a.threads} threads"
          f"{', autocast ' + str(amp_dtype) if amp_dtype else ''}", flush=True)

    shuffle_gen = torch.Generator().manual_seed(a.seed)
    n = x_train.shape[0]
    steps = samples = 0
    train_seconds = accuracy = epoch_loss = 0.0
    epochs_run = 0
    for epoch in range(1, a.epochs + 1):
        if a.max_steps and steps >= a.max_steps:
            break
        order = torch.randperm(n, generator=shuffle_gen).to(DEVICE)
        loss_sum, n_loss = 0.0, 0
        t0 = time.perf_counter()
        for start in range(0, n, a.batch_size):
            if a.max_steps and steps >= a.max_steps:
                break
            idx = order[start:start + a.batch_size]
            xb, yb = x_train.index_select(0, idx), y_train.index_select(0, idx)
            with autocast(amp_dtype):
                loss = F.cross_entropy(model(xb), yb)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            loss_sum += loss.item()
            n_loss += 1
            steps += 1
            samples += xb.shape[0]
        train_seconds += time.perf_counter() - t0
        accuracy = evaluate(model, x_test, y_test, amp_dtype)
        epoch_loss = loss_sum / n_loss if n_loss else 0.0
        epochs_run = epoch
        print(f"epoch {epoch}: train loss {epoch_loss:.9g}, test accuracy {100 * accuracy:.2f} %, "
              f"{samples / train_seconds:.1f} samples/s", flush=True)

    if a.json:
        print(json.dumps({
            "model": a.model, "optimizer": "sgd", "epochs": epochs_run, "steps": steps,
            "batch_size": a.batch_size, "lr": a.lr, "seed": a.seed, "train_loss": epoch_loss,
            "test_accuracy": accuracy,
            "samples_per_sec": round(samples / train_seconds, 2) if train_seconds > 0 else 0.0,
            "backend": "pytorch-" + DEVICE, "torch": torch.__version__, "threads": a.threads,
            "autocast": str(amp_dtype) if amp_dtype else None,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
