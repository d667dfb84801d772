#!/usr/bin/env python3
"""Reference values for tests/unit/test_optim.c, computed by torch.optim itself.

Runs torch.optim.SGD (plain, momentum, dampening, nesterov, weight decay) and torch.optim.Adam /
AdamW (with and without weight decay, and a beta1 below 0.5, which takes lerp's other branch) for
five steps on three small hand-written float32 parameters, with the single-tensor implementation
(foreach=False, fused=False). Some gradients are missing on some steps (grad = None, which torch
skips and libamp skips through grad_written = false), including a parameter's first step, so the
per-parameter "has state" and step counters are exercised.

Each Adam case is also run a second time (name suffix "_ieee_sqrt") with Tensor.sqrt replaced by a
correctly rounded one: torch's CPU sqrt of a float tensor goes through MKL's vsSqrt, which is off
by one ulp on some inputs, while libamp (and CUDA's default sqrtf) rounds correctly. With that one
op swapped, torch's own Adam code must match libamp bit for bit.

Every hyper-parameter is a float32 value, so the C side (which takes float options) and torch
(which takes Python floats) start from the same numbers. The expected values depend on the CPU
kernels torch picks (fused multiply-adds; MKL's sqrt), which is why they are committed.

Regenerate (the output is committed):
    python3 tests/ref/gen_optim_ref.py > tests/ref/optim_ref.h
"""
import contextlib
import struct
import sys

import torch


def f32(x):
    """The float32 nearest to x, as a Python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


# Three parameters of 5, 3 and 2 elements, stored back to back.
INIT = [[0.5, -1.25, 2.0, 0.125, -0.75],
        [1.5, -0.3, 0.01],
        [-2.0, 0.7]]
# GRADS[step][param]: None = no gradient that step (param 2 has none on its first step, param 1
# none on step 2, param 0 none on step 3).
GRADS = [
    [[0.1, -0.2, 0.3, -0.4, 0.05], [0.02, 1.5, -0.7], None],
    [[-0.3, 0.25, 0.6, 0.01, -0.9], [0.4, -0.05, 0.33], [0.8, -1.1]],
    [[0.2, 0.2, -0.15, 0.7, 0.002], None, [-0.25, 0.6]],
    [None, [1e-3, -2.5, 0.12], [0.9, 0.04]],
    [[-0.05, 0.45, 0.3, -0.6, 0.11], [0.7, -0.2, -0.9], [-0.35, 1.3]],
]
N_STEPS = len(GRADS)

SGD_CASES = [
    ("sgd_plain", dict(lr=0.1)),
    ("sgd_momentum", dict(lr=0.1, momentum=0.9)),
    ("sgd_dampening", dict(lr=0.05, momentum=0.8, dampening=0.25)),
    ("sgd_nesterov", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("sgd_weight_decay", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("sgd_nesterov_wd", dict(lr=0.02, momentum=0.7, weight_decay=0.05, nesterov=True)),
]
ADAM_CASES = [
    ("adam_default", False, dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8)),
    ("adam_wd", False, dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01)),
    ("adam_small_beta1", False, dict(lr=0.05, betas=(0.3, 0.95), eps=1e-8)),
    ("adamw_wd", True, dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)),
    ("adamw_no_wd", True, dict(lr=0.02, betas=(0.85, 0.995), eps=1e-7, weight_decay=0.0)),
]


def as_f32(opts):
    out = {}
    for k, v in opts.items():
        if isinstance(v, bool):
            out[k] = v
        elif isinstance(v, tuple):
            out[k] = tuple(f32(x) for x in v)
        else:
            out[k] = f32(v)
    return out


@contextlib.contextmanager
def ieee_sqrt():
    """Tensor.sqrt correctly rounded: the float64 sqrt of a float32 rounds to the right float32."""
    saved = torch.Tensor.sqrt
    torch.Tensor.sqrt = lambda self: saved(self.double()).to(self.dtype)
    try:
        yield
    finally:
        torch.Tensor.sqrt = saved


def run(make_opt, state_names):
    params = [torch.tensor(v, dtype=torch.float32) for v in INIT]
    opt = make_opt(params)
    rows = []
    for step in range(N_STEPS):
        for p, g in zip(params, GRADS[step]):
            p.grad = None if g is None else torch.tensor(g, dtype=torch.float32)
        opt.step()
        row = {"param": [p.detach().clone() for p in params], "state": {}, "has": [], "step": []}
        for name in state_names:
            row["state"][name] = [
                opt.state[p][name].clone() if opt.state[p].get(name) is not None
                else torch.zeros_like(p) for p in params]
        for p in params:
            st = opt.state[p]
            present = st.get(state_names[0]) is not None if state_names else False
            row["has"].append(1 if present else 0)
            row["step"].append(int(st["step"].item()) if "step" in st else 0)
        rows.append(row)
    return rows


def fmt(x):
    s = "%.9g" % x
    if not any(c in s for c in ".en"):
        s += ".0"
    return s + "f"


def flat(tensors):
    return [v for t in tensors for v in t.tolist()]


def floats(values):
    return "{" + ", ".join(fmt(v) for v in values) + "}"


def emit_case(out, name, kind, o, rows, state_names):
    out.append("    {")
    out.append('        .name = "%s", .kind = %s,' % (name, kind))
    betas = o.get("betas", (0.0, 0.0))
    out.append("        .lr = %s, .momentum = %s, .dampening = %s, .weight_decay = %s,"
               % (fmt(o["lr"]), fmt(o.get("momentum", 0.0)), fmt(o.get("dampening", 0.0)),
                  fmt(o.get("weight_decay", 0.0))))
    out.append("        .nesterov = %d, .beta1 = %s, .beta2 = %s, .eps = %s,"
               % (int(o.get("nesterov", False)), fmt(betas[0]), fmt(betas[1]),
                  fmt(o.get("eps", 0.0))))
    for field, key in (("param", None), ("state_a", 0), ("state_b", 1)):
        out.append("        .%s = {" % field)
        for r in rows:
            if key is None:
                vals = flat(r["param"])
            elif key < len(state_names):
                vals = flat(r["state"][state_names[key]])
            else:
                vals = [0.0] * OPTIM_NUMEL
            out.append("            %s," % floats(vals))
        out.append("        },")
    out.append("        .has_state = {%s}," % ", ".join(
        "{" + ", ".join(str(h) for h in r["has"]) + "}" for r in rows))
    out.append("        .step = {%s}," % ", ".join(
        "{" + ", ".join(str(s) for s in r["step"]) + "}" for r in rows))
    out.append("    },")


OPTIM_NUMEL = sum(len(v) for v in INIT)


def main():
    torch.set_num_threads(1)
    out = []
    out.append("/* Expected values of torch.optim.SGD/Adam/AdamW (torch %s, foreach=False) on hand-made"
               % torch.__version__)
    out.append(" * float32 vectors, for tests/unit/test_optim.c.")
    out.append(" * Written by tests/ref/gen_optim_ref.py; do not edit. Regenerate with")
    out.append(" *     python3 tests/ref/gen_optim_ref.py > tests/ref/optim_ref.h */")
    out.append("#ifndef AMP_TESTS_REF_OPTIM_REF_H")
    out.append("#define AMP_TESTS_REF_OPTIM_REF_H")
    out.append("")
    out.append("#define OPTIM_REF_N_PARAMS %d" % len(INIT))
    out.append("#define OPTIM_REF_N_STEPS %d" % N_STEPS)
    out.append("#define OPTIM_REF_NUMEL %d" % OPTIM_NUMEL)
    out.append("")
    out.append("static const int optim_ref_param_numel[OPTIM_REF_N_PARAMS] = {%s};"
               % ", ".join(str(len(v)) for v in INIT))
    out.append("static const float optim_ref_init[OPTIM_REF_NUMEL] = %s;"
               % floats([f32(x) for v in INIT for x in v]))
    out.append("/* 1 where the parameter has a gradient that step; else its grad values are 0 here. */")
    out.append("static const int optim_ref_grad_present[OPTIM_REF_N_STEPS][OPTIM_REF_N_PARAMS] = {%s};"
               % ", ".join("{" + ", ".join("0" if g is None else "1" for g in row) + "}"
                           for row in GRADS))
    out.append("static const float optim_ref_grad[OPTIM_REF_N_STEPS][OPTIM_REF_NUMEL] = {")
    for row in GRADS:
        vals = []
        for g, v in zip(row, INIT):
            vals += [f32(x) for x in g] if g is not None else [0.0] * len(v)
        out.append("    %s," % floats(vals))
    out.append("};")
    out.append("")
    out.append("enum { OPTIM_REF_SGD, OPTIM_REF_ADAM, OPTIM_REF_ADAMW };")
    out.append("")
    out.append("/* After each step: every parameter, state_a (SGD momentum_buffer or Adam exp_avg) and")
    out.append(" * state_b (Adam exp_avg_sq), 0 where torch has no state yet; has_state is 1 where torch")
    out.append(" * holds the state; step is Adam's per-parameter state['step'] (0 for SGD). */")
    out.append("typedef struct optim_ref_case {")
    out.append("    const char *name;")
    out.append("    int kind;")
    out.append("    float lr, momentum, dampening, weight_decay;")
    out.append("    int nesterov;")
    out.append("    float beta1, beta2, eps;")
    out.append("    float param[OPTIM_REF_N_STEPS][OPTIM_REF_NUMEL];")
    out.append("    float state_a[OPTIM_REF_N_STEPS][OPTIM_REF_NUMEL];")
    out.append("    float state_b[OPTIM_REF_N_STEPS][OPTIM_REF_NUMEL];")
    out.append("    int has_state[OPTIM_REF_N_STEPS][OPTIM_REF_N_PARAMS];")
    out.append("    int step[OPTIM_REF_N_STEPS][OPTIM_REF_N_PARAMS];")
    out.append("} optim_ref_case;")
    out.append("")
    out.append("static const optim_ref_case optim_ref_cases[] = {")
    for name, opts in SGD_CASES:
        o = as_f32(opts)
        names = ["momentum_buffer"] if o.get("momentum", 0.0) != 0.0 else []
        rows = run(lambda ps: torch.optim.SGD(ps, foreach=False, **o), names)
        emit_case(out, name, "OPTIM_REF_SGD", o, rows, names)
    for name, decoupled, opts in ADAM_CASES:
        o = as_f32(opts)
        cls = torch.optim.AdamW if decoupled else torch.optim.Adam
        o.setdefault("weight_decay", 0.0)
        names = ["exp_avg", "exp_avg_sq"]
        kind = "OPTIM_REF_ADAMW" if decoupled else "OPTIM_REF_ADAM"
        rows = run(lambda ps: cls(ps, foreach=False, fused=False, **o), names)
        emit_case(out, name, kind, o, rows, names)
        with ieee_sqrt():
            rows = run(lambda ps: cls(ps, foreach=False, fused=False, **o), names)
        emit_case(out, name + "_ieee_sqrt", kind, o, rows, names)
    out.append("};")
    out.append("")
    out.append("#endif")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
