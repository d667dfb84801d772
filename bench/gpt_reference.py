#!/usr/bin/env python3
"""amp-train --model gpt's recipe in PyTorch eager: the same GPT-2, data, optimizer and schedule.

The model has nanoGPT's `GPT` structure and parameter names (transformer.wte, transformer.h.<l>.
ln_1 / attn.c_attn / attn.c_proj / ln_2 / mlp.c_fc / mlp.c_proj, transformer.ln_f, lm_head tied
to wte), GELU in GPT-2's tanh form as models/gpt.c's (nanoGPT's nn.GELU() is the exact
form), attention through F.scaled_dot_product_attention, GPT-2's initialisation, the vocabulary
padded to a multiple of 64. Training is examples/train_lm.c's: AdamW (betas 0.9 / 0.95, eps
1e-8, weight decay on the 2-D tensors only), nanoGPT's warm-up then cosine decay to --min-lr
(optim/lr_schedule.c's formula), the gradient norm clipped at --grad-clip, batches read from
llm.c token files in --data-order sequential's order (step s, row i: the window starting at
((s B + i) T) mod (n - T - 1)), so both programs see the same batches; the validation loss is
the mean over --eval-batches sequential batches of val.bin from its start, as amp-train's.

    python3 bench/gpt_reference.py --data /tmp/fortunes --max-steps 600 --precision bf16 --json

With --json it prints amp-train's objects: {"step", "loss", ...} per logged step, {"step",
"val_loss"} per evaluation and a final {"model": "gpt", ..., "val_loss"}. amp-bench's
`--model gpt --compare-torch` runs this file's GPT and AdamW (bench/pytorch_reference.py --bench
--model gpt);
tests/python/test_gpt_nanogpt.py loads amp-train's checkpoints into its GPT.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.utils.checkpoint
import torch.nn.functional as F

TOKENS_MAGIC, TOKENS_VERSION, TOKENS_HEADER = 20240520, 1, 256  # llm.c's token files


def padded_vocab(vocab):
    return (vocab + 63) // 64 * 64


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.n_embd = c.n_head, c.n_embd
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)
        self.dropout = c.dropout
        self.resid_dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd)
        self.attn = Attention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's GPT; config has n_layer, n_head, n_embd, block_size, vocab_size (padded), dropout
    and, optionally, real_vocab: the columns the loss scores (all of them without it)."""

    def __init__(self, c):
        super().__init__()
        self.config = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd), wpe=nn.Embedding(c.block_size, c.n_embd),
            drop=nn.Dropout(c.dropout), h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]),
            ln_f=nn.LayerNorm(c.n_embd)))
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        self.recompute = False  # each block under torch.utils.checkpoint (amp-bench --recompute)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            if self.recompute and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        scored = logits  # the padded vocabulary's extra columns are never scored (as libamp)
        vocab = getattr(self.config, "real_vocab", logits.size(-1))
        if vocab < logits.size(-1):
            scored = logits[..., :vocab]
        return logits, F.cross_entropy(scored.reshape(-1, vocab).float(), targets.view(-1),
                                       ignore_index=-100)


class Config:
    def __init__(self, n_layer=4, n_head=4, n_embd=256, block_size=128, vocab_size=256,
                 dropout=0.0):
        self.n_layer, self.n_head, self.n_embd = n_layer, n_head, n_embd
        self.block_size, self.vocab_size, self.dropout = block_size, padded_vocab(vocab_size), dropout
        self.real_vocab = vocab_size


def adamw(model, lr, weight_decay, device):
    """nanoGPT's configure_optimizers: weight decay on the 2-D tensors only."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8,
                             fused=device == "cuda")


def lr_at(step, max_lr, min_lr, warmup, decay_steps):
    """optim/lr_schedule.c's amp_lr_at, cosine decay."""
    if step < warmup:
        return max_lr * (step + 1) / (warmup + 1)
    if step >= decay_steps:
        return min_lr
    t = (step - warmup) / (decay_steps - warmup)
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))


def read_tokens(path, vocab):
    """An llm.c token file as an int64 tensor; errors name the file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 * TOKENS_HEADER:
        raise SystemExit(f"{path}: {len(data)} bytes, shorter than the header")
    magic, version, n = struct.unpack("<3i", data[:12])
    if magic != TOKENS_MAGIC or version != TOKENS_VERSION:
        raise SystemExit(f"{path}: magic {magic} version {version}, not an llm.c token file")
    body = data[4 * TOKENS_HEADER:]
    if len(body) != 2 * n:
        raise SystemExit(f"{path}: the header says {n} tokens, the body holds {len(body) // 2}")
    ids = torch.frombuffer(bytearray(body), dtype=torch.int16).to(torch.int64) & 0xFFFF
    if n and int(ids.max()) >= vocab:
        raise SystemExit(f"{path}: token id {int(ids.max())} >= vocab {vocab}")
    return ids


def sequential_batch(tokens, step, B, T):
    """data/tokens.c's AMP_TOKENS_SEQUENTIAL: row i of step s from ((s B + i) T) mod (n - T - 1)."""
    starts = tokens.numel() - T - 1
    rows = [((step * B + i) * T) % starts for i in range(B)]
    x = torch.stack([tokens[r:r + T] for r in rows])
    y = torch.stack([tokens[r + 1:r + 1 + T] for r in rows])
    return x, y


def autocast(device, precision):
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    return torch.autocast(device, dtype=dtype or torch.bfloat16, enabled=dtype is not None)


@torch.no_grad()
def val_loss(model, val, B, T, n, device="cpu", precision="fp32"):
    """amp-train's validation loss: the mean over n sequential batches of val from its start."""
    was = model.training
    model.eval()
    total = 0.0
    for i in range(n):
        x, y = sequential_batch(val, i, B, T)
        with autocast(device, precision):
            _, loss = model(x.to(device), y.to(device))
        total += loss.item()
    model.train(was)
    return total / n


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="DIR with train.bin and val.bin")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=-1, help="default: lr / 10")
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--lr-decay-steps", type=int, default=0, help="default: --max-steps")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train = read_tokens(os.path.join(a.data, "train.bin"), a.vocab_size)
    val = read_tokens(os.path.join(a.data, "val.bin"), a.vocab_size)
    model = GPT(Config(a.n_layer, a.n_head, a.n_embd, a.block_size, a.vocab_size,
                       a.dropout)).to(a.device)
    opt = adamw(model, a.lr, a.weight_decay, a.device)
    scaler = torch.amp.GradScaler(a.device, enabled=a.precision == "fp16")
    min_lr = a.min_lr if a.min_lr >= 0 else a.lr / 10
    decay = a.lr_decay_steps or a.max_steps
    B, T = a.batch_size, a.block_size
    out = sys.stdout if a.json else sys.stderr
    print(f"gpt_reference: torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{a.precision}", file=sys.stderr, flush=True)
    loss_v = vl = float("nan")
    t_total = 0.0
    for step in range(a.max_steps):
        t0 = time.perf_counter()
        lr = lr_at(step, a.lr, min_lr, min(a.warmup_steps, decay), decay)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = sequential_batch(train, step, B, T)
        with autocast(a.device, a.precision):
            _, loss = model(x.to(a.device), y.to(a.device))
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        loss_v = loss.item()
        dt = time.perf_counter() - t0
        t_total += dt if step > 0 else 0.0
        if a.log_every and ((step + 1) % a.log_every == 0 or step + 1 == a.max_steps):
            print(json.dumps({"step": step + 1, "loss": round(loss_v, 6), "lr": lr,
                              "norm": round(float(norm), 4), "ms": round(dt * 1e3, 2),
                              "tokens_per_s": round(B * T / dt, 1)}), file=out, flush=True)
        if (a.eval_every and (step + 1) % a.eval_every == 0) or step + 1 == a.max_steps:
            vl = val_loss(model, val, B, T, a.eval_batches, a.device, a.precision)
            print(json.dumps({"step": step + 1, "val_loss": round(vl, 6)}), file=out, flush=True)
    tok_s = B * T * (a.max_steps - 1) / t_total if t_total > 0 else 0.0
    print(json.dumps({"model": "gpt", "impl": "pytorch", "steps": a.max_steps,
                      "train_loss": round(loss_v, 6), "val_loss": round(vl, 6),
                      "tokens_per_sec": round(tok_s, 1), "precision": a.precision,
                      "torch": torch.__version__}), file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
