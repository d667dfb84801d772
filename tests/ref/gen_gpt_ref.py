#!/usr/bin/env python3
"""The parity oracle of tests/unit/test_gpt.c: a tiny GPT-2 run by PyTorch itself.

The model is nanoGPT's GPT (its block, attention and MLP, GELU in the tanh form as GPT-2's and
models/gpt.c's, the head tied to the token embedding, GPT-2's init) at n_layer 2,
n_head 2, n_embd 64, block_size 32, vocab 256, no dropout, on one seeded batch of 4 x 32 byte
tokens. It writes two safetensors files:
  tests/data/gpt_tiny_weights.safetensors  the initial weights under nanoGPT's names, lm_head not
                                           stored (tied), which amp_model_load_weights takes;
  tests/data/gpt_tiny_ref.safetensors      idx and targets (i32 [4, 32]), logits [4, 32, 256] and
                                           the loss of the initial weights in float32, every
                                           parameter's gradient ("grad.<name>"), and the losses of
                                           10 AdamW steps on that batch (lr 1e-3, betas (0.9,
                                           0.95), eps 1e-8, weight decay 0.1 on the 2-D tensors
                                           only, nanoGPT's groups), in float32 ("losses_f32") and
                                           under torch.autocast(bfloat16) ("losses_bf16").
The C test reads them without torch.

Regenerate (the outputs are committed):
    python3 tests/ref/gen_gpt_ref.py tests/data
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from ref_files import adamw, write_safetensors

N_LAYER, N_HEAD, N_EMBD, BLOCK, VOCAB, BATCH, STEPS = 2, 2, 64, 32, 256, 4, 10


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
        q = q.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        k = k.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        v = v.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, N_EMBD), wpe=nn.Embedding(BLOCK, N_EMBD),
            h=nn.ModuleList([Block() for _ in range(N_LAYER)]), ln_f=nn.LayerNorm(N_EMBD)))
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * N_LAYER))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        pos = torch.arange(idx.size(1))
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def named_weights(model):
    """state_dict without the tied lm_head.weight, float32."""
    return {k: v.detach().clone().float() for k, v in model.state_dict().items() if k != "lm_head.weight"}


def train_losses(init, idx, targets, autocast):
    model = GPT()
    model.load_state_dict({**init, "lm_head.weight": init["transformer.wte.weight"]})
    opt = adamw(model)
    losses = []
    for _ in range(STEPS):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(idx)
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float32)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
    torch.manual_seed(20261128)
    torch.set_num_threads(1)
    model = GPT()
    init = named_weights(model)
    # A batch of printable bytes, the next byte as each target (as amp-train's windows).
    data = torch.randint(32, 127, (BATCH, BLOCK + 1), dtype=torch.int64)
    idx, targets = data[:, :-1], data[:, 1:]
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))
    loss.backward()
    grads = {"grad." + k: p.grad.detach().clone().float() for k, p in model.named_parameters()}
    ref = {"idx": idx.to(torch.int32), "targets": targets.to(torch.int32),
           "logits": logits.detach().float(), "loss": loss.detach().reshape(1).float(), **grads,
           "losses_f32": train_losses(init, idx, targets, False),
           "losses_bf16": train_losses(init, idx, targets, True)}
    meta = {"n_layer": str(N_LAYER), "n_head": str(N_HEAD), "n_embd": str(N_EMBD), "block_size": str(BLOCK),
            "vocab_size": str(VOCAB), "torch": torch.__version__}
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "gpt_tiny_weights.safetensors"), init, meta)
    write_safetensors(os.path.join(out, "gpt_tiny_ref.safetensors"), ref, meta)
    print("loss", loss.item(), "losses_f32", ref["losses_f32"].tolist(), "losses_bf16", ref["losses_bf16"].tolist())


if __name__ == "__main__":
    main()
