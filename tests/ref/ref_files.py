"""What the reference generators of tests/ref share: the safetensors writer (no dependency
beyond torch) and the AdamW the C tests take (nanoGPT's groups: weight decay on 2-D tensors)."""
import json
import struct

import torch


def write_safetensors(path, tensors, meta):
    """The safetensors format: an 8-byte little-endian header size, the JSON header, the data."""
    header, blobs, offset = {"__metadata__": meta}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        dtype = {torch.float32: "F32", torch.int32: "I32"}[t.dtype]
        raw = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def adamw(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=1e-3, betas=(0.9, 0.95), eps=1e-8, foreach=False)
