#!/usr/bin/env python3
"""The parity oracle of tests/unit/test_llama.c: a tiny Hugging Face LlamaForCausalLM with random
weights, run by transformers itself.

Three variants, each a Hugging Face folder written by save_pretrained (config.json and
model.safetensors, exactly as transformers writes them) under tests/data/llama_tiny_<variant>/:
  base     2 layers, hidden 64, 4 heads, 2 key/value heads, intermediate 176, vocab 256,
           rope_theta 10000, untied head;
  llama3   the same with Llama 3.1's rope scaling (factor 8, low 1, high 4, original 16, so the
           scaling moves the frequencies at these lengths) and a head tied to the embedding;
  bias     the same as base with attention_bias (Qwen2's q/k/v biases).
The base model is also written in shards of at most 150 kB (model-0000k-of-0000n.safetensors and
model.safetensors.index.json) under tests/data/llama_tiny_sharded/, without a reference of its
own: it must load to the base model's bits.
Beside each, ref.safetensors holds one seeded batch of 4 x 32 tokens (idx, targets, i32), the
logits [4, 32, 256] and the loss of the initial weights in float32, every parameter's gradient
("grad.<name>"), and the losses of 10 AdamW steps on that batch (lr 1e-3, betas (0.9, 0.95),
eps 1e-8, weight decay 0.1 on the 2-D tensors only) in float32 ("losses_f32") and under
torch.autocast(bfloat16) ("losses_bf16"), with eager attention. The C test reads them without
torch.

Regenerate (the outputs are committed):
    python3 tests/ref/gen_llama_ref.py tests/data
"""
import os
import sys

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from ref_files import adamw, write_safetensors

BATCH, T, STEPS = 4, 32, 10
BASE = dict(vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0,
            max_position_embeddings=64, tie_word_embeddings=False, attention_bias=False,
            attn_implementation="eager")
VARIANTS = {
    "base": {},
    "llama3": dict(tie_word_embeddings=True,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
    "bias": dict(attention_bias=True),
}


def loss_of(model, idx, targets, vocab):
    logits = model(input_ids=idx).logits
    return logits, F.cross_entropy(logits.float().view(-1, vocab), targets.reshape(-1))


def train_losses(folder, idx, targets, vocab, autocast):
    model = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32, attn_implementation="eager")
    opt = adamw(model)
    losses = []
    for _ in range(STEPS):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            _, loss = loss_of(model, idx, targets, vocab)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float32)


def variant(out, name, extra, seed):
    torch.manual_seed(seed)
    cfg = LlamaConfig(**{**BASE, **extra})
    model = LlamaForCausalLM(cfg).float()
    folder = os.path.join(out, "llama_tiny_" + name)
    model.save_pretrained(folder, safe_serialization=True)
    if name == "base":
        model.save_pretrained(os.path.join(out, "llama_tiny_sharded"), safe_serialization=True,
                              max_shard_size="150KB")
    data = torch.randint(0, cfg.vocab_size, (BATCH, T + 1), dtype=torch.int64)
    idx, targets = data[:, :-1], data[:, 1:]
    logits, loss = loss_of(model, idx, targets, cfg.vocab_size)
    loss.backward()
    grads = {"grad." + k: p.grad.detach().clone().float() for k, p in model.named_parameters()}
    ref = {"idx": idx.to(torch.int32), "targets": targets.to(torch.int32),
           "logits": logits.detach().float(), "loss": loss.detach().reshape(1).float(), **grads,
           "losses_f32": train_losses(folder, idx, targets, cfg.vocab_size, False),
           "losses_bf16": train_losses(folder, idx, targets, cfg.vocab_size, True)}
    import transformers
    write_safetensors(os.path.join(folder, "ref.safetensors"), ref,
                      {"torch": torch.__version__, "transformers": transformers.__version__})
    print(name, "loss", loss.item(), "losses_f32", ref["losses_f32"].tolist()[-1],
          "losses_bf16", ref["losses_bf16"].tolist()[-1])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
    torch.set_num_threads(1)
    for i, (name, extra) in enumerate(VARIANTS.items()):
        variant(out, name, extra, 20261202 + i)


if __name__ == "__main__":
    main()
