#!/usr/bin/env python3
"""GPT-2's pretrained weights for amp-train --model gpt, as nanoGPT's GPT.from_pretrained takes
them: a Hugging Face GPT-2 folder (model.safetensors, config.json, and vocab.json for the
tokenizer; e.g. the 'gpt2' model's files) becomes

    OUT/model.safetensors  nanoGPT's names (transformer.h.0.attn.c_attn.weight, ...), each
                           Conv1D weight transposed to the Linear layout [out, in], the token
                           embedding padded with zero rows to a multiple of 64 (50257 -> 50304;
                           the padding is never scored nor sampled), no lm_head.weight (tied to
                           transformer.wte.weight), no attention-mask buffers;
    OUT/tokenizer.bin      llm.c's tokenizer file (version 2, the end-of-text id in the header):
                           each id's bytes, from vocab.json's byte-level strings;

and prints the amp-train line that loads them. --block-size N keeps the first N positions of
the position embedding (nanoGPT's crop_block_size: a shorter context for fine-tuning, N at most
GPT-2's 1024):

    python3 scripts/gpt2_import.py [--block-size N] HF_DIR OUT_DIR
    amp-train --model gpt --n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 \\
        --vocab-size 50257 --init-weights OUT_DIR/model.safetensors \\
        --tokenizer OUT_DIR/tokenizer.bin --data DIR --eval-only --sample 200

Needs numpy and safetensors (no torch). tests/python/test_gpt2_import.py holds the result
against transformers' GPT2LMHeadModel.
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
SKIPPED = (".attn.bias", ".attn.masked_bias")  # the attention masks (buffers, not weights)
PER_LAYER = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
             "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
             "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")


def fail(msg):
    print(f"gpt2_import: {msg}", file=sys.stderr)
    sys.exit(1)


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: each byte as the printable character its BPE strings use."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
          + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def convert_weights(state, n_layer, vocab, block):
    out = {}
    padded = (vocab + 63) // 64 * 64
    for name, t in state.items():
        if any(name.endswith(s) for s in SKIPPED) or name == "lm_head.weight":  # tied to wte
            continue
        if name.startswith("transformer."):
            name = name[len("transformer."):]
        if any(name.endswith(s) for s in CONV1D):
            t = t.T  # Conv1D keeps [in, out]; a Linear is [out, in]
        if name == "wte.weight":
            t = np.concatenate([t, np.zeros((padded - vocab, t.shape[1]), t.dtype)])
        if name == "wpe.weight":
            t = t[:block]
        out["transformer." + name] = np.ascontiguousarray(t)
    want = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
            "transformer.ln_f.bias"}
    want |= {f"transformer.h.{i}.{s}" for i in range(n_layer) for s in PER_LAYER}
    missing, extra = sorted(want - out.keys()), sorted(out.keys() - want)
    if missing or extra:
        fail(f"not GPT-2's tensors: missing {missing[:4]}, unexpected {extra[:4]}")
    return out


def write_tokenizer(path, vocab_json, eot):
    """llm.c's tokenizer .bin, version 2: 256 uint32 of header, then each id's length and bytes."""
    with open(vocab_json, encoding="utf-8") as f:
        ids = json.load(f)
    decode = bytes_to_unicode()
    pieces = [None] * len(ids)
    for text, i in ids.items():
        if not 0 <= i < len(ids) or pieces[i] is not None:
            fail(f"{vocab_json}: ids are not 0..{len(ids) - 1}, each once (id {i})")
        try:
            pieces[i] = bytes(decode[c] for c in text)
        except KeyError:  # an added token in plain text, as <|endoftext|> is
            pieces[i] = text.encode("utf-8")
        if not 1 <= len(pieces[i]) <= 255:
            fail(f"{vocab_json}: token {i} has {len(pieces[i])} bytes; the format holds 1..255")
    if eot is None:
        eot = ids.get("<|endoftext|>")
    if eot is None or not 0 <= eot < len(ids):
        fail(f"{vocab_json}: no end-of-text token (<|endoftext|> or config.json's eos_token_id)")
    header = np.zeros(256, np.uint32)
    header[:4] = (20240328, 2, len(ids), eot)
    with open(path, "wb") as f:
        f.write(header.astype("<u4").tobytes())
        for p in pieces:
            f.write(bytes([len(p)]) + p)
    return len(ids)


def main(hf_dir, out_dir, crop=None):
    weights = os.path.join(hf_dir, "model.safetensors")
    if not os.path.exists(weights):
        fail(f"{weights} is missing: the folder of a Hugging Face GPT-2 model holds it")
    config = {}
    if os.path.exists(os.path.join(hf_dir, "config.json")):
        with open(os.path.join(hf_dir, "config.json")) as f:
            config = json.load(f)
    state = load_file(weights)
    wte = state.get("wte.weight", state.get("transformer.wte.weight"))
    wpe = state.get("wpe.weight", state.get("transformer.wpe.weight"))
    if wte is None or wpe is None:
        fail(f"{weights} has no wte.weight / wpe.weight: not a GPT-2 model")
    vocab, n_embd = wte.shape
    block = wpe.shape[0]
    if crop is not None:
        if not 1 <= crop <= block:
            fail(f"--block-size {crop} is outside [1, {block}], the model's positions")
        block = crop
    layers = set()
    for k in state:
        parts = k.split(".")
        if "h" in parts[:-1]:
            layers.add(parts[parts.index("h") + 1])
    n_layer = len(layers)
    n_head = config.get("n_head")
    if n_head is None:
        fail(f"{hf_dir}/config.json is missing or has no n_head: the weights do not say it")
    if config.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        fail(f"activation_function {config['activation_function']}: this GPT uses GELU's tanh form")
    os.makedirs(out_dir, exist_ok=True)
    converted = convert_weights(state, n_layer, vocab, block)
    save_file(converted, os.path.join(out_dir, "model.safetensors"))
    line = (f"amp-train --model gpt --n-layer {n_layer} --n-head {n_head} --n-embd {n_embd} "
            f"--block-size {block} --vocab-size {vocab} --init-weights "
            f"{out_dir}/model.safetensors")
    vocab_json = os.path.join(hf_dir, "vocab.json")
    if os.path.exists(vocab_json):
        n = write_tokenizer(os.path.join(out_dir, "tokenizer.bin"), vocab_json,
                            config.get("eos_token_id"))
        if n != vocab:
            fail(f"{vocab_json} has {n} tokens, the weights {vocab}")
        line += f" --tokenizer {out_dir}/tokenizer.bin"
    print(f"gpt2_import: {n_layer} layers, {n_head} heads, {n_embd} wide, block {block}, "
          f"vocab {vocab} (padded {(vocab + 63) // 64 * 64}) into {out_dir}")
    print(line + " --data DIR ...")


if __name__ == "__main__":
    args = sys.argv[1:]
    crop = None
    if len(args) == 4 and args[0] == "--block-size":
        try:
            crop = int(args[1])
        except ValueError:
            fail(f"--block-size {args[1]!r} is not a number")
        args = args[2:]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(args[0], args[1], crop)
