#!/usr/bin/env python3
"""scripts/gpt2_import.py against transformers' GPT2LMHeadModel: a small GPT-2 (2 layers, 2
heads, 64 wide, block 32, a vocabulary of 300, padded to 320 by the import) with random weights
and non-trivial LayerNorms is saved as Hugging Face saves GPT-2 (model.safetensors with Conv1D
weights, config.json, a byte-level vocab.json). After the import:
  - amp-train --model gpt --init-weights --eval-only gives the validation loss that
    GPT2LMHeadModel gives over the same sequential batches, to 1e-4 relative (the Conv1D
    transposes, the names, the tied head, GELU's tanh form, and the padded vocabulary never
    scored all show in it);
  - tokenizer.bin decodes every id to the bytes of GPT2Tokenizer's token string under
    transformers' own byte alphabet, and
    amp-train's sample, decoded by it, is printed;
  - --block-size 16 crops the position embedding (nanoGPT's crop_block_size): the cropped
    model's validation loss over windows of 16 is GPT2LMHeadModel's on them; a crop past the
    model's positions is refused;
  - a folder without config.json's n_head is refused with a message naming it.

    test_gpt2_import.py AMP_TRAIN TMPDIR

Exits 77 (ctest: SKIPPED) without torch, transformers, numpy or safetensors, never 0.
"""
import json
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer
    try:  # transformers' own copy of GPT-2's byte alphabet, where its version keeps it
        from transformers.convert_slow_tokenizer import bytes_to_unicode
    except ImportError:
        from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode
    import safetensors  # noqa: F401 (gpt2_import.py's)
except ImportError as e:  # the test must not pass without having run
    print(f"test_gpt2_import: SKIPPED: {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
IMPORT = os.path.join(HERE, "..", "..", "scripts", "gpt2_import.py")
LAYERS, HEADS, WIDTH, BLOCK, VOCAB, BATCH, EVAL_BATCHES = 2, 2, 64, 32, 300, 4, 3


def byte_level_vocab():
    """256 byte tokens in GPT-2's alphabet, 43 merged ones, <|endoftext|> last."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
          + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    enc = {b: chr(c) for b, c in zip(bs, cs)}
    tokens = [enc[b] for b in range(256)]
    words = [" the", " and", "ing", " of", "tion", " a", " to", " in", "ed", " is", "er", "é",
             " über", "€"]
    i = 0
    while len(tokens) < VOCAB - 1:
        w = words[i % len(words)] * (1 + i // len(words))
        tokens.append("".join(enc[b] for b in w.encode("utf-8")))
        i += 1
    tokens.append("<|endoftext|>")
    return {t: i for i, t in enumerate(tokens)}


def write_tokens(path, ids):
    header = np.zeros(256, np.int32)
    header[:3] = (20240520, 1, len(ids))
    with open(path, "wb") as f:
        f.write(header.astype("<i4").tobytes() + np.asarray(ids, "<u2").tobytes())


def hf_val_loss(model, val, block):
    """GPT2LMHeadModel's mean loss over amp-train's evaluation batches: batch i, row r reads the
    window at ((i B + r) T) mod (n - T - 1)."""
    total = 0.0
    with torch.no_grad():
        for i in range(EVAL_BATCHES):
            starts = [((i * BATCH + r) * block) % (len(val) - block - 1) for r in range(BATCH)]
            x = torch.tensor(np.stack([val[s:s + block] for s in starts]).astype(np.int64))
            y = torch.tensor(np.stack([val[s + 1:s + block + 1] for s in starts]).astype(np.int64))
            logits = model(x).logits
            total += F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)).item()
    return total / EVAL_BATCHES


def amp_val_loss(train, data, out, block, extra=()):
    """amp-train --eval-only's final JSON object on the imported weights (None when it failed),
    and the run."""
    run = subprocess.run(
        [train, "--model", "gpt", "--data", data, "--n-layer", str(LAYERS), "--n-head",
         str(HEADS), "--n-embd", str(WIDTH), "--block-size", str(block), "--vocab-size",
         str(VOCAB), "--batch-size", str(BATCH), "--threads", "2", "--eval-batches",
         str(EVAL_BATCHES), "--init-weights", os.path.join(out, "model.safetensors"),
         "--eval-only", "--json", *extra], capture_output=True, text=True, errors="replace")
    final = json.loads(run.stdout.strip().splitlines()[-1]) if run.returncode == 0 else None
    return final, run


def main(train, work):
    shutil.rmtree(work, ignore_errors=True)
    hf, out, data = (os.path.join(work, d) for d in ("hf", "out", "data"))
    os.makedirs(data)
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=BLOCK, n_embd=WIDTH, n_layer=LAYERS,
                     n_head=HEADS, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # LayerNorms and biases away from 1 and 0, so a misplaced one shows
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(hf, safe_serialization=True)
    with open(os.path.join(hf, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(byte_level_vocab(), f, ensure_ascii=False)
    with open(os.path.join(hf, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")

    rng = np.random.default_rng(1)
    write_tokens(os.path.join(data, "train.bin"), rng.integers(0, VOCAB, 4000))
    val = rng.integers(0, VOCAB, 2000)
    write_tokens(os.path.join(data, "val.bin"), val)

    imp = subprocess.run([sys.executable, IMPORT, hf, out], capture_output=True, text=True)
    failures = []
    if imp.returncode != 0:
        print(f"FAIL: gpt2_import.py exited {imp.returncode}: {imp.stderr}")
        return 1
    final, run = amp_val_loss(train, data, out, BLOCK, ("--tokenizer",
                                                        os.path.join(out, "tokenizer.bin"),
                                                        "--sample", "16"))
    if final is None:
        print(f"FAIL: amp-train exited {run.returncode}: {run.stderr}")
        return 1
    want = final["val_loss"]
    if final["steps"] != 0:
        failures.append(f"--eval-only trained {final['steps']} steps")
    if "decoded by" not in run.stderr:
        failures.append(f"no sample decoded by the tokenizer: {run.stderr[-300:]}")
    got = hf_val_loss(model, val, BLOCK)
    print(f"test_gpt2_import: amp-train's validation loss {want:.6f} on the imported weights, "
          f"GPT2LMHeadModel's {got:.6f}")
    if not abs(got - want) <= 1e-4 * abs(got):
        failures.append(f"validation loss: transformers {got:.6f}, amp-train {want:.6f}")

    cropped = out + "-16"
    imp = subprocess.run([sys.executable, IMPORT, "--block-size", "16", hf, cropped],
                         capture_output=True, text=True)
    final, run = amp_val_loss(train, data, cropped, 16)
    if imp.returncode != 0 or final is None:
        failures.append(f"--block-size 16: import {imp.stderr.strip()}, "
                        f"amp-train {run.stderr[-300:]}")
    else:
        got16 = hf_val_loss(model, val, 16)
        print(f"test_gpt2_import: cropped to 16 positions: amp-train {final['val_loss']:.6f}, "
              f"GPT2LMHeadModel over windows of 16 {got16:.6f}")
        if not abs(got16 - final["val_loss"]) <= 1e-4 * abs(got16):
            failures.append(f"cropped: transformers {got16:.6f}, amp-train {final['val_loss']:.6f}")
    imp = subprocess.run([sys.executable, IMPORT, "--block-size", "64", hf, out + "-64"],
                         capture_output=True, text=True)
    if imp.returncode == 0 or "--block-size 64 is outside [1, 32]" not in imp.stderr:
        failures.append(f"a crop past the positions: exit {imp.returncode}, {imp.stderr.strip()}")

    tok = GPT2Tokenizer(os.path.join(hf, "vocab.json"), os.path.join(hf, "merges.txt"))
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    with open(os.path.join(out, "tokenizer.bin"), "rb") as f:
        blob = f.read()
    header = np.frombuffer(blob[:1024], "<u4")
    if tuple(header[:4]) != (20240328, 2, VOCAB, VOCAB - 1):
        failures.append(f"tokenizer header {tuple(header[:4])}")
    at, bad = 1024, 0
    for i in range(VOCAB):
        n = blob[at]
        piece = blob[at + 1:at + 1 + n]
        at += 1 + n
        text = tok.convert_ids_to_tokens(i)
        want_bytes = (text.encode("utf-8") if text == "<|endoftext|>"
                      else bytes(byte_of[c] for c in text))
        bad += piece != want_bytes
    if bad or at != len(blob):
        failures.append(f"tokenizer.bin: {bad} ids decode to other bytes than GPT2Tokenizer's")

    os.remove(os.path.join(hf, "config.json"))
    rerun = subprocess.run([sys.executable, IMPORT, hf, out + "2"], capture_output=True, text=True)
    if rerun.returncode == 0 or "config.json is missing or has no n_head" not in rerun.stderr:
        failures.append(f"no config.json: exit {rerun.returncode}, {rerun.stderr.strip()}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
