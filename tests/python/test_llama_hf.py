#!/usr/bin/env python3
"""amp-train --model llama's checkpoints are Hugging Face folders: a tiny Llama (2 layers, hidden
64, 4 heads, 2 key/value heads, intermediate 176, a byte vocabulary of 256, window 32) trains 20
steps at O0 on this project's README made into token files and saves a checkpoint; its step
folder's model.safetensors loads into transformers' LlamaForCausalLM with strict=True, and
LlamaForCausalLM.from_pretrained reads the folder (the config.json amp-train writes beside it)
as the same model. transformers' validation loss over the same batches must be amp-train's to
1e-4 relative. Two runs:
  - the shape as options (--hidden-size, ...), an untied head;
  - --config FILE with Llama 3.1's rope scaling, rope_theta 500000 and a tied head: the written
    config.json must carry the scaling to transformers (a default RoPE would give another loss).
A checkpoint loaded into a model with other heads of the same tensor shapes is not what this
test can catch in PyTorch (strict loads it): amp-train's own resume refuses it (e2e_llama_train).

    test_llama_hf.py AMP_TRAIN AMP_TEXT_TOKENS README TMPDIR

Exits 77 (ctest: SKIPPED) without torch, transformers or safetensors, never 0.
"""
import json
import os
import shutil
import subprocess
import sys

try:
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:  # the test must not pass without having run
    print(f"test_llama_hf: SKIPPED: {e}")
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import gpt_reference  # noqa: E402  (the token files and amp-train's sequential batches)

WINDOW, BATCH, EVAL_BATCHES, STEPS = 32, 4, 4, 20
SHAPE = {"hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
         "vocab_size": 256}


def train(amp_train, data, ckpt, extra):
    run = subprocess.run(
        [amp_train, "--model", "llama", "--data", data, "--block-size", str(WINDOW),
         "--batch-size", str(BATCH), "--threads", "2", "--max-steps", str(STEPS),
         "--warmup-steps", "5", "--lr", "3e-3", "--eval-batches", str(EVAL_BATCHES),
         "--checkpoint-dir", ckpt, "--json"] + extra,
        capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"FAIL: amp-train exited {run.returncode}: {run.stderr}")
    return json.loads(run.stdout.strip().splitlines()[-1])["val_loss"]


def hf_val_loss(model, val):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(EVAL_BATCHES):
            x, y = gpt_reference.sequential_batch(val, i, BATCH, WINDOW)
            logits = model(input_ids=x).logits
            total += torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1)).item()
    return total / EVAL_BATCHES


def check_run(name, folder, want, val, expect, failures):
    with open(os.path.join(folder, "config.json")) as f:
        written = json.load(f)
    for key, value in expect.items():
        got = written.get(key)
        if got != value:
            failures.append(f"{name}: config.json {key} = {got!r}, want {value!r}")
    config = LlamaConfig.from_pretrained(folder)
    strict = LlamaForCausalLM(config)
    state = load_file(os.path.join(folder, "model.safetensors"))
    if config.tie_word_embeddings:
        if "lm_head.weight" in state:
            failures.append(f"{name}: the tied head is stored twice")
        state["lm_head.weight"] = state["model.embed_tokens.weight"]  # tied, as HF's save does
    strict.load_state_dict(state, strict=True)  # raises on a missing, extra or misshapen tensor
    pretrained = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    for kind, model in (("strict load", strict), ("from_pretrained", pretrained)):
        got = hf_val_loss(model, val)
        print(f"test_llama_hf: {name}: amp-train's validation loss {want:.6f}, transformers' "
              f"({kind}) {got:.6f}")
        if not abs(got - want) <= 1e-4 * abs(want):
            failures.append(f"{name} ({kind}): validation loss {got:.6f}, amp-train's {want:.6f}")


def main(amp_train, tokens, readme, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = os.path.join(work, "data")
    subprocess.run([tokens, data, readme], check=True, capture_output=True)
    val = gpt_reference.read_tokens(os.path.join(data, "val.bin"), 256)
    failures = []

    options = []
    for key, value in SHAPE.items():
        options += ["--" + key.replace("_", "-"), str(value)]
    want = train(amp_train, data, os.path.join(work, "options"), options)
    check_run("options", os.path.join(work, "options", f"step-{STEPS:07d}"), want, val,
              dict(SHAPE, model_type="llama", tie_word_embeddings=False), failures)

    scaled = dict(SHAPE, model_type="llama", tie_word_embeddings=True,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                  rope_theta=500000.0)
    config_file = os.path.join(work, "config.json")
    with open(config_file, "w") as f:
        json.dump(scaled, f)
    want = train(amp_train, data, os.path.join(work, "config"), ["--config", config_file])
    folder = os.path.join(work, "config", f"step-{STEPS:07d}")
    check_run("--config, llama3 rope", folder, want, val,
              {"rope_theta": 500000.0, "tie_word_embeddings": True}, failures)
    loaded = LlamaConfig.from_pretrained(folder)
    rope = getattr(loaded, "rope_parameters", None) or getattr(loaded, "rope_scaling", None) or {}
    if rope.get("rope_type") != "llama3" or rope.get("factor") != 8.0:
        failures.append(f"--config: transformers read the rope as {rope}, not llama3 x8")

    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
