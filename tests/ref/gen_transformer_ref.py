#!/usr/bin/env python3
"""Reference values for tests/unit/test_transformer_ref.c, computed by PyTorch itself.

Each case runs one transformer op of torch.nn.functional in float32 on seeded inputs, then
backward of (y * dy).mean() for a seeded dy (the loss itself for cross-entropy), and writes the
inputs, the output and every input's gradient: layer_norm, rms_norm, gelu (tanh and erf),
softmax and log_softmax over the last dim, scaled_dot_product_attention (causal, and with a
key-padding mask whose every batch keeps a key: PyTorch gives NaN for a row without keys, libamp
0), embedding, and cross_entropy (with ignore_index and label_smoothing, and PyTorch's defaults).
The C test runs the same ops on every device and backward of the same loss.

Regenerate (the output is committed):
    python3 tests/ref/gen_transformer_ref.py > tests/ref/transformer_ref.h
"""
import torch
import torch.nn.functional as F

torch.manual_seed(20261128)
torch.set_num_threads(1)


def rand(*shape, lo=-2.0, hi=2.0):
    return (torch.rand(*shape, dtype=torch.float32) * (hi - lo) + lo).requires_grad_()


def literal(v):
    """A C float literal that reads back as the float32 v."""
    if v != v:
        return "NAN"
    if abs(v) == float("inf"):
        return "INFINITY" if v > 0 else "-INFINITY"
    s = f"{v:.9g}"
    return s + ("f" if any(c in s for c in ".e") else ".0f")


def fmt(t):
    return ", ".join(literal(v) for v in t.detach().reshape(-1).tolist())


CASES = []


def case(name, op, inputs, y, ints=None, scalars=None):
    """Records a case: inputs (name, tensor) whose grads are read after backward."""
    CASES.append(dict(name=name, op=op, inputs=inputs, y=y, ints=ints or [],
                      scalars=scalars or []))


def with_dy(name, op, inputs, fn, ints=None, scalars=None):
    y = fn()
    dy = torch.rand(y.shape) * 2 - 1
    (y * dy).mean().backward()
    case(name, op, inputs + [("dy", dy)], y, ints, scalars)


x = rand(3, 2, 8); g = rand(8, lo=0.5, hi=1.5); b = rand(8, lo=-0.5, hi=0.5)
with_dy("layer_norm", "LAYER_NORM", [("x", x), ("gamma", g), ("beta", b)],
        lambda: F.layer_norm(x, (8,), g, b, 1e-5))
x = rand(4, 6); g = rand(6, lo=0.5, hi=1.5)
with_dy("rms_norm", "RMS_NORM", [("x", x), ("gamma", g)], lambda: F.rms_norm(x, (6,), g, 1e-6))
x = rand(48, lo=-6, hi=6)
with_dy("gelu_tanh", "GELU_TANH", [("x", x)], lambda: F.gelu(x, approximate="tanh"))
x = rand(48, lo=-6, hi=6)
with_dy("gelu_erf", "GELU_ERF", [("x", x)], lambda: F.gelu(x))
x = rand(3, 7, lo=-4, hi=4)
with_dy("softmax", "SOFTMAX", [("x", x)], lambda: F.softmax(x, dim=-1))
x = rand(3, 7, lo=-4, hi=4)
with_dy("log_softmax", "LOG_SOFTMAX", [("x", x)], lambda: F.log_softmax(x, dim=-1))
q, k, v = rand(2, 2, 9, 8, lo=-1, hi=1), rand(2, 2, 9, 8, lo=-1, hi=1), rand(2, 2, 9, 8, lo=-1, hi=1)
with_dy("attention_causal", "ATTENTION", [("q", q), ("k", k), ("v", v)],
        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), ints=[9, 9])
q, k, v = rand(2, 1, 6, 4, lo=-1, hi=1), rand(2, 1, 6, 4, lo=-1, hi=1), rand(2, 1, 6, 4, lo=-1, hi=1)
lens = [4, 6]
mask = torch.tensor([[j < n for j in range(6)] for n in lens]).reshape(2, 1, 1, 6)
with_dy("attention_padded", "ATTENTION", [("q", q), ("k", k), ("v", v)],
        lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), ints=lens)
w = rand(11, 6)
idx = torch.tensor([[3, 0, 10, 3, 7], [1, 3, 3, 9, 0]])
with_dy("embedding", "EMBEDDING", [("weight", w)], lambda: F.embedding(idx, w),
        ints=idx.reshape(-1).tolist())
logits = rand(6, 10, lo=-3, hi=3)
labels = [3, -100, 9, 0, 3, 7]
loss = F.cross_entropy(logits, torch.tensor(labels), ignore_index=-100, label_smoothing=0.1)
loss.backward()
case("cross_entropy_smooth", "CROSS_ENTROPY", [("logits", logits)], loss, ints=labels,
     scalars=[0.1])
logits = rand(5, 13, lo=-3, hi=3)
labels = [12, 0, 5, 5, 1]
loss = F.cross_entropy(logits, torch.tensor(labels))
loss.backward()
case("cross_entropy", "CROSS_ENTROPY", [("logits", logits)], loss, ints=labels, scalars=[0.0])

out = []
out.append("/* Expected values of torch.nn.functional's transformer ops (torch %s, float32, one\n"
           " * thread), for tests/unit/test_transformer_ref.c: inputs, the output and the inputs'\n"
           " * gradients of (y * dy).mean() (cross-entropy: of the loss).\n"
           " * Written by tests/ref/gen_transformer_ref.py; do not edit. Regenerate with\n"
           " *     python3 tests/ref/gen_transformer_ref.py > tests/ref/transformer_ref.h */"
           % torch.__version__)
out.append("#ifndef AMP_TESTS_REF_TRANSFORMER_REF_H\n#define AMP_TESTS_REF_TRANSFORMER_REF_H\n")
out.append("#include <math.h>\n#include <stdint.h>\n")
out.append("enum { REF_LAYER_NORM, REF_RMS_NORM, REF_GELU_TANH, REF_GELU_ERF, REF_SOFTMAX, "
           "REF_LOG_SOFTMAX,\n       REF_ATTENTION, REF_EMBEDDING, REF_CROSS_ENTROPY };\n")
out.append("#define TREF_MAX_IN 4\n")
out.append("typedef struct tref_tensor {\n    const char *name;\n    int ndim;\n"
           "    int64_t shape[4];\n    const float *value, *grad; /* grad NULL: none (dy) */\n"
           "} tref_tensor;\n")
out.append("typedef struct tref_case {\n    const char *name;\n    int op;\n    int n_in;\n"
           "    tref_tensor in[TREF_MAX_IN]; /* the last is dy, except for cross-entropy */\n"
           "    tref_tensor y;\n    int n_ints;\n"
           "    const int32_t *ints; /* attention: kv_len; embedding: ids; cross-entropy: labels */\n"
           "    float scalar;        /* cross-entropy: label smoothing */\n} tref_case;\n")
for c in CASES:
    n = c["name"]
    for name, t in c["inputs"]:
        out.append(f"static const float tref_{n}_{name}[] = {{{fmt(t)}}};")
        if t.grad is not None:
            out.append(f"static const float tref_{n}_{name}_grad[] = {{{fmt(t.grad)}}};")
    out.append(f"static const float tref_{n}_y[] = {{{fmt(c['y'])}}};")
    if c["ints"]:
        out.append(f"static const int32_t tref_{n}_ints[] = {{{', '.join(map(str, c['ints']))}}};")
out.append("\nstatic const tref_case tref_cases[] = {")
for c in CASES:
    n = c["name"]
    ins = []
    for name, t in c["inputs"]:
        shape = list(t.shape) + [0] * (4 - t.dim())
        grad = f"tref_{n}_{name}_grad" if t.grad is not None else "NULL"
        ins.append(f"{{\"{name}\", {t.dim()}, {{{', '.join(map(str, shape))}}}, tref_{n}_{name}, "
                   f"{grad}}}")
    y = c["y"]
    yshape = list(y.shape) + [0] * (4 - y.dim())
    ints = f"tref_{n}_ints" if c["ints"] else "NULL"
    scalar = c["scalars"][0] if c["scalars"] else 0.0
    out.append(f"    {{\"{n}\", REF_{c['op']}, {len(ins)},\n     {{{', '.join(ins)}}},\n"
               f"     {{\"y\", {y.dim()}, {{{', '.join(map(str, yshape))}}}, tref_{n}_y, NULL}}, "
               f"{len(c['ints'])}, {ints}, {scalar}f}},")
out.append("};\n#define TREF_N_CASES ((int)(sizeof tref_cases / sizeof tref_cases[0]))\n")
out.append("#endif")
print("\n".join(out))
