#!/usr/bin/env python3
"""amp-train --model gpt's checkpoints load into nanoGPT's GPT class and give amp-train's
validation loss: a tiny GPT (2 layers, 2 heads, 64 wide, block 32, byte vocabulary padded to
256) trains 30 steps at O0 on this project's README made into token files, saves a checkpoint
and prints its validation loss (--json). The checkpoint's model.safetensors goes into
bench/gpt_reference.py's GPT (nanoGPT's class: its module tree and parameter names, with GPT-2's
tanh GELU where nanoGPT's nn.GELU() is the exact one) with strict=True once lm_head.weight is
tied to transformer.wte.weight (the checkpoint stores the tied tensor once, as nanoGPT's own
from_pretrained expects); PyTorch's validation loss over the same batches must be amp-train's to
1e-4 relative. A checkpoint of another shape is refused by PyTorch's strict load.

    test_gpt_nanogpt.py AMP_TRAIN AMP_TEXT_TOKENS README TMPDIR

Exits 77 (ctest: SKIPPED) without torch or safetensors, never 0.
"""
import json
import os
import shutil
import subprocess
import sys

try:
    import torch
    from safetensors.torch import load_file
except ImportError as e:  # the test must not pass without having run
    print(f"test_gpt_nanogpt: SKIPPED: {e}")
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import gpt_reference  # noqa: E402

LAYERS, HEADS, WIDTH, BLOCK, BATCH, EVAL_BATCHES = 2, 2, 64, 32, 4, 4


def main(train, tokens, readme, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data, ckpt = os.path.join(work, "data"), os.path.join(work, "ckpt")
    subprocess.run([tokens, data, readme], check=True, capture_output=True)
    run = subprocess.run(
        [train, "--model", "gpt", "--data", data, "--n-layer", str(LAYERS), "--n-head", str(HEADS),
         "--n-embd", str(WIDTH), "--block-size", str(BLOCK), "--batch-size", str(BATCH),
         "--threads", "2", "--max-steps", "30", "--warmup-steps", "5", "--lr", "3e-3",
         "--eval-batches", str(EVAL_BATCHES), "--checkpoint-dir", ckpt, "--json"],
        capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL: amp-train exited {run.returncode}: {run.stderr}")
        return 1
    final = json.loads(run.stdout.strip().splitlines()[-1])
    want = final["val_loss"]

    state = load_file(os.path.join(ckpt, "step-0000030", "model.safetensors"))
    failures = []
    if "lm_head.weight" in state:
        failures.append("the checkpoint stores lm_head.weight: the tied head is stored twice")
    state["lm_head.weight"] = state["transformer.wte.weight"]  # tied, as nanoGPT's is
    cfg = gpt_reference.Config(LAYERS, HEADS, WIDTH, BLOCK, 256)
    model = gpt_reference.GPT(cfg)
    model.load_state_dict(state, strict=True)  # raises on a missing, extra or misshapen tensor
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        failures.append("lm_head is no longer tied after loading")
    val = gpt_reference.read_tokens(os.path.join(data, "val.bin"), 256)
    got = gpt_reference.val_loss(model, val, BATCH, BLOCK, EVAL_BATCHES)
    print(f"test_gpt_nanogpt: amp-train's validation loss {want:.6f}, PyTorch's on the loaded "
          f"checkpoint {got:.6f}")
    if not abs(got - want) <= 1e-4 * abs(want):
        failures.append(f"validation loss: PyTorch {got:.6f}, amp-train {want:.6f}")

    wider = gpt_reference.GPT(gpt_reference.Config(LAYERS, HEADS, 2 * WIDTH, BLOCK, 256))
    try:
        wider.load_state_dict(state, strict=True)
        failures.append("a checkpoint of another width loaded strictly")
    except RuntimeError as e:
        if "size mismatch" not in str(e):
            failures.append(f"another width: unexpected error {e}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
