#!/usr/bin/env python3
"""Reference trajectories for tests/unit/test_scaler.c, computed by torch.amp.GradScaler itself.

Each case runs torch.amp.GradScaler("cpu", ...) with torch.optim.SGD(lr, momentum=0.9,
foreach=False) on three small float32 parameters for N_STEPS steps. There is no model: every step
emulates a scaled backward by setting p.grad = base_grad[step] * scale (a float32 product with the
scaler's own scale tensor), then scaler.step(opt) and scaler.update(), as a training loop does.
Overflows are injected into the scaled gradient of ONE parameter of the three: +inf, -inf and NaN,
at the very first step (before SGD has a momentum buffer), alone, and twice in a row.

Recorded per step: the scale before and after update(), the growth tracker after, and whether the
step was skipped (torch's found_inf for the optimizer; the script checks that the parameters
moved exactly on the steps that were not skipped). At the end: the parameters and the momentum
buffers. Two cases: "pow2" (growth 2, backoff 0.5: every scale a power of two, so unscaling is
exact) and "odd" (growth 3, backoff 0.3 from an init of 1000: the scaled gradients round, 1/scale
is inexact, and the scale products round from double to float32 as in ATen).

Every hyper-parameter is a float32 value, so the C side (which takes float options) and torch
(which takes Python floats) start from the same numbers.

Regenerate (the output is committed):
    python3 tests/ref/gen_scaler_ref.py > tests/ref/scaler_ref.h
"""
import math
import struct

import torch

N_STEPS = 25
SIZES = [5, 3, 4]
LR = 0.1
MOMENTUM = 0.9

# (step, parameter, element, value) written into the SCALED gradient.
INJECT = [
    (0, 1, 2, math.inf),    # the first step: SGD has no momentum buffer yet
    (6, 0, 4, -math.inf),
    (11, 2, 0, math.inf),   # two overflows in a row
    (12, 2, 3, math.nan),
    (19, 1, 0, math.nan),
]

CASES = [
    ("pow2", dict(init_scale=1024.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)),
    ("odd", dict(init_scale=1000.0, growth_factor=3.0, backoff_factor=0.3, growth_interval=2)),
]


def f32(x):
    """The float32 nearest to x, as a Python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


def c_float(x):
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "-INFINITY"
    s = "%.9g" % x
    if "e" not in s and "." not in s:
        s += ".0"
    return s + "f"


def c_array(values):
    return "{" + ", ".join(c_float(v) for v in values) + "}"


def base_grads():
    """Fixed gradients (before scaling): small float32 values from a seeded generator."""
    g = torch.Generator().manual_seed(1234)
    return [[(torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1).float() for n in SIZES]
            for _ in range(N_STEPS)]


def init_params():
    g = torch.Generator().manual_seed(42)
    return [(torch.rand(n, generator=g, dtype=torch.float64) * 4 - 2).float() for n in SIZES]


def run_case(opts, grads, init):
    opts = {k: (f32(v) if isinstance(v, float) else v) for k, v in opts.items()}
    params = [torch.nn.Parameter(p.clone()) for p in init]
    opt = torch.optim.SGD(params, lr=f32(LR), momentum=f32(MOMENTUM), foreach=False)
    scaler = torch.amp.GradScaler("cpu", **opts)
    rows = []
    for step in range(N_STEPS):
        scaler.scale(torch.zeros(()))  # what scaler.scale(loss) does: creates the scale tensor
        scale_before = scaler.get_scale()
        for i, p in enumerate(params):
            p.grad = grads[step][i] * scaler._scale  # float32 x float32 tensor product
        for (s, i, e, v) in INJECT:
            if s == step:
                params[i].grad[e] = v
        before = [p.detach().clone() for p in params]
        scaler.step(opt)
        found = sum(v.item() for v in scaler._found_inf_per_device(opt).values())
        skipped = found != 0.0
        moved = any(not torch.equal(b, p.detach()) for b, p in zip(before, params))
        assert moved != skipped, f"step {step}: skipped={skipped} but parameters moved={moved}"
        scaler.update()
        rows.append((scale_before, scaler.get_scale(), int(scaler._growth_tracker.item()), skipped))
    bufs = [opt.state[p]["momentum_buffer"] for p in params]
    return opts, rows, [x for p in params for x in p.detach().tolist()], \
        [x for b in bufs for x in b.tolist()]


def main():
    grads = base_grads()
    init = init_params()
    numel = sum(SIZES)
    out = []
    w = out.append
    w("/* Expected trajectories of torch.amp.GradScaler(\"cpu\") + torch.optim.SGD (torch %s,"
      % torch.__version__)
    w(" * foreach=False) for tests/unit/test_scaler.c.")
    w(" * Written by tests/ref/gen_scaler_ref.py; do not edit. Regenerate with")
    w(" *     python3 tests/ref/gen_scaler_ref.py > tests/ref/scaler_ref.h */")
    w("#ifndef AMP_TESTS_REF_SCALER_REF_H")
    w("#define AMP_TESTS_REF_SCALER_REF_H")
    w("")
    w("#include <math.h>")
    w("")
    w("#define SCALER_REF_N_PARAMS %d" % len(SIZES))
    w("#define SCALER_REF_N_STEPS %d" % N_STEPS)
    w("#define SCALER_REF_NUMEL %d" % numel)
    w("#define SCALER_REF_N_INJECT %d" % len(INJECT))
    w("#define SCALER_REF_N_CASES %d" % len(CASES))
    w("")
    w("static const float scaler_ref_lr = %s, scaler_ref_momentum = %s;"
      % (c_float(f32(LR)), c_float(f32(MOMENTUM))))
    w("static const int scaler_ref_param_numel[SCALER_REF_N_PARAMS] = {%s};"
      % ", ".join(str(n) for n in SIZES))
    w("static const float scaler_ref_init[SCALER_REF_NUMEL] = %s;"
      % c_array([x for p in init for x in p.tolist()]))
    w("/* The unscaled gradient of each step (parameters back to back). */")
    w("static const float scaler_ref_grad[SCALER_REF_N_STEPS][SCALER_REF_NUMEL] = {")
    for step in range(N_STEPS):
        w("    %s," % c_array([x for t in grads[step] for x in t.tolist()]))
    w("};")
    w("/* Overflows written into the scaled gradient: step, parameter, element, value. */")
    w("static const struct { int step, param, elem; float value; } "
      "scaler_ref_inject[SCALER_REF_N_INJECT] = {")
    for (s, i, e, v) in INJECT:
        w("    {%d, %d, %d, %s}," % (s, i, e, c_float(v)))
    w("};")
    w("")
    w("typedef struct scaler_ref_case {")
    w("    const char *name;")
    w("    float init_scale, growth_factor, backoff_factor;")
    w("    int growth_interval;")
    w("    float scale_before[SCALER_REF_N_STEPS], scale_after[SCALER_REF_N_STEPS];")
    w("    int growth_tracker[SCALER_REF_N_STEPS], skipped[SCALER_REF_N_STEPS];")
    w("    float params[SCALER_REF_NUMEL], momentum[SCALER_REF_NUMEL];")
    w("} scaler_ref_case;")
    w("")
    w("static const scaler_ref_case scaler_ref_cases[SCALER_REF_N_CASES] = {")
    for name, opts in CASES:
        o, rows, params, bufs = run_case(opts, grads, init)
        w("    {")
        w("        \"%s\", %s, %s, %s, %d," % (name, c_float(o["init_scale"]),
                                             c_float(o["growth_factor"]),
                                             c_float(o["backoff_factor"]), o["growth_interval"]))
        w("        %s," % c_array([r[0] for r in rows]))
        w("        %s," % c_array([r[1] for r in rows]))
        w("        {%s}," % ", ".join(str(r[2]) for r in rows))
        w("        {%s}," % ", ".join(str(int(r[3])) for r in rows))
        w("        %s," % c_array(params))
        w("        %s," % c_array(bufs))
        w("    },")
    w("};")
    w("")
    w("#endif")
    print("\n".join(out))


if __name__ == "__main__":
    main()
