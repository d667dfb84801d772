#!/usr/bin/env python3
"""Reference values for tests/unit/test_lamb_math.c: LAMB computed in float64 with NumPy.

The update is written from the paper, You et al. 2019, "Large Batch Optimization for Deep
Learning: Training BERT in 76 minutes", Algorithm 2 (LAMB), per tensor ("layer"):
    m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2
    m_hat = m / (1 - beta1^t),    v_hat = v / (1 - beta2^t)
    r = m_hat / (sqrt(v_hat) + eps)
    x = x - lr * phi(||x||) / ||r + wd x|| * (r + wd x),   phi = identity
plus the choices of Apex's FusedLAMB that the paper leaves open, each a case option:
  - the trust ratio is 1 when ||x|| or ||r + wd x|| is 0;
  - adapt_all = 0 applies the ratio only to tensors with weight decay (Apex's default,
    use_nvlamb=False); adapt_all = 1 is the paper's every layer;
  - max_grad_norm > 0: when the L2 norm G of all gradients of the step exceeds it, every gradient
    is divided by G / max_grad_norm before the moments (0: off);
  - decoupled = 0: wd x is added to the gradient instead (L2, Apex's adam_w_mode=False);
    grad_averaging = 0: g enters m with weight 1; bias_correction = 0: m_hat = m, v_hat = v.
It does not read libamp's code. Inputs and hyper-parameters are float32 values (the C side takes
floats), the state is kept in float64 from there on, so the C result (float32 state) drifts from
it by rounding only; the test states its tolerance.

Tensors: a plain one, one whose gradient is always 0 (with wd = 0 its direction is 0: ratio 1 by
convention and no move), one whose weights start at 0 (ratio 1 by convention on the first step),
and one with gradients near 1e-5, where sqrt(v_hat) is comparable to eps = 1e-6 (so eps placement
shows). Cases: decoupled decay with clipping on; no decay with adapt_all (paper); no decay without
(Apex: a plain lr step); L2 decay without bias correction or gradient averaging, clipping off.

Regenerate (the output is committed):
    python3 tests/ref/gen_lamb_ref.py > tests/ref/lamb_ref.h
"""
import numpy as np

N_STEPS = 4
NUMEL = [6, 5, 4, 3]
N_TENSORS = len(NUMEL)


def f32(x):
    return np.float64(np.float32(x))


def make_inputs():
    rng = np.random.default_rng(20190401)
    init = [rng.uniform(-1.0, 1.0, n) for n in NUMEL]
    init[2] = np.zeros(NUMEL[2])  # zero weights
    grads = []
    for _ in range(N_STEPS):
        g = [rng.normal(0.0, 0.5, n) for n in NUMEL]
        g[1] = np.zeros(NUMEL[1])  # zero gradient
        g[3] = rng.uniform(-2e-5, 2e-5, NUMEL[3])  # small: sqrt(v_hat) ~ eps
        grads.append(g)
    init = [np.array([f32(v) for v in t]) for t in init]
    grads = [[np.array([f32(v) for v in t]) for t in g] for g in grads]
    return init, grads


CASES = [
    dict(name="decoupled_wd_clip", lr=0.01, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.01,
         max_grad_norm=1.0, decoupled=1, bias_correction=1, grad_averaging=1, adapt_all=0),
    dict(name="no_wd_adapt_all", lr=0.02, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.0,
         max_grad_norm=10.0, decoupled=1, bias_correction=1, grad_averaging=1, adapt_all=1),
    dict(name="no_wd_plain_lr", lr=0.005, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0,
         max_grad_norm=1.0, decoupled=1, bias_correction=1, grad_averaging=1, adapt_all=0),
    dict(name="l2_no_bias_correction", lr=0.01, beta1=0.85, beta2=0.995, eps=1e-4,
         weight_decay=0.1, max_grad_norm=0.0, decoupled=0, bias_correction=0, grad_averaging=0,
         adapt_all=0),
]


def run(case, init, grads):
    o = {k: (f32(v) if isinstance(v, float) else v) for k, v in case.items() if k != "name"}
    x = [t.copy() for t in init]
    m = [np.zeros(n) for n in NUMEL]
    v = [np.zeros(n) for n in NUMEL]
    rows = []
    for step in range(1, N_STEPS + 1):
        g = [t.copy() for t in grads[step - 1]]
        gnorm = np.sqrt(sum(np.sum(t * t) for t in g))
        if o["max_grad_norm"] > 0 and gnorm > o["max_grad_norm"]:
            g = [t / (gnorm / o["max_grad_norm"]) for t in g]
        wd = o["weight_decay"]
        beta1, beta2 = o["beta1"], o["beta2"]
        ratios = []
        for k in range(N_TENSORS):
            gk = g[k] + wd * x[k] if not o["decoupled"] else g[k]
            m[k] = beta1 * m[k] + ((1.0 - beta1) if o["grad_averaging"] else 1.0) * gk
            v[k] = beta2 * v[k] + (1.0 - beta2) * gk * gk
            bc1 = 1.0 - beta1 ** step if o["bias_correction"] else 1.0
            bc2 = 1.0 - beta2 ** step if o["bias_correction"] else 1.0
            r = (m[k] / bc1) / (np.sqrt(v[k] / bc2) + o["eps"])
            u = r + wd * x[k] if o["decoupled"] else r
            ratio = 1.0
            if o["adapt_all"] or wd != 0.0:
                xn, un = np.linalg.norm(x[k]), np.linalg.norm(u)
                if xn > 0.0 and un > 0.0:
                    ratio = xn / un
            x[k] = x[k] - o["lr"] * ratio * u
            ratios.append(ratio)
        rows.append((gnorm, ratios, np.concatenate(x), np.concatenate(m), np.concatenate(v)))
    return rows


def ffmt(x):
    """A float32 value as a C float literal that reads back exactly."""
    s = "%.9g" % np.float32(x)
    if "e" not in s and "." not in s and "inf" not in s and "nan" not in s:
        s += ".0"
    return s + "f"


def dfmt(x):
    return repr(float(x))


def block(values, fmt, indent="        "):
    values = list(values)
    lines, line = [], ""
    for i, v in enumerate(values):
        item = fmt(v) + ("," if i + 1 < len(values) else "")
        if len(indent) + len(line) + len(item) + 1 > 98:
            lines.append(indent + line.rstrip())
            line = ""
        line += item + " "
    lines.append(indent + line.rstrip())
    return "\n".join(lines)


def main():
    init, grads = make_inputs()
    total = sum(NUMEL)
    out = []
    out.append("/* Expected values of LAMB (You et al. 2019, Algorithm 2, with Apex FusedLAMB's "
               "conventions),\n * computed in float64 by tests/ref/gen_lamb_ref.py from float32 "
               "inputs, for\n * tests/unit/test_lamb_math.c. Written by that script; do not edit."
               " Regenerate with\n *     python3 tests/ref/gen_lamb_ref.py > tests/ref/lamb_ref.h"
               " */")
    out.append("#ifndef AMP_TESTS_REF_LAMB_REF_H")
    out.append("#define AMP_TESTS_REF_LAMB_REF_H")
    out.append("")
    out.append("#define LAMB_REF_N_TENSORS %d" % N_TENSORS)
    out.append("#define LAMB_REF_N_STEPS %d" % N_STEPS)
    out.append("#define LAMB_REF_NUMEL %d" % total)
    out.append("/* Tensor 1 has a zero gradient at every step, tensor 2 starts at zero weights, "
               "tensor 3 has\n * gradients near 1e-5. */")
    out.append("#define LAMB_REF_ZERO_GRAD 1")
    out.append("#define LAMB_REF_ZERO_WEIGHT 2")
    out.append("")
    out.append("static const int lamb_ref_numel[LAMB_REF_N_TENSORS] = {%s};"
               % ", ".join(str(n) for n in NUMEL))
    out.append("static const float lamb_ref_init[LAMB_REF_NUMEL] = {")
    out.append(block(np.concatenate(init), ffmt, "    "))
    out.append("};")
    out.append("static const float lamb_ref_grad[LAMB_REF_N_STEPS][LAMB_REF_NUMEL] = {")
    for g in grads:
        out.append("    {")
        out.append(block(np.concatenate(g), ffmt))
        out.append("    },")
    out.append("};")
    out.append("")
    out.append("typedef struct lamb_ref_case {")
    out.append("    const char *name;")
    out.append("    float lr, beta1, beta2, eps, weight_decay, max_grad_norm;")
    out.append("    int decoupled, bias_correction, grad_averaging, adapt_all;")
    out.append("    /* after each step: the global gradient norm before clipping, the trust ratio "
               "applied\n     * to each tensor (1 where none), and parameters and moments */")
    out.append("    double global_grad_norm[LAMB_REF_N_STEPS];")
    out.append("    double trust_ratio[LAMB_REF_N_STEPS][LAMB_REF_N_TENSORS];")
    out.append("    double param[LAMB_REF_N_STEPS][LAMB_REF_NUMEL];")
    out.append("    double exp_avg[LAMB_REF_N_STEPS][LAMB_REF_NUMEL];")
    out.append("    double exp_avg_sq[LAMB_REF_N_STEPS][LAMB_REF_NUMEL];")
    out.append("} lamb_ref_case;")
    out.append("")
    out.append("static const lamb_ref_case lamb_ref_cases[] = {")
    for case in CASES:
        rows = run(case, init, grads)
        out.append("    {\"%s\"," % case["name"])
        out.append("     %s, %s, %s, %s, %s, %s," % (
            ffmt(case["lr"]), ffmt(case["beta1"]), ffmt(case["beta2"]), ffmt(case["eps"]),
            ffmt(case["weight_decay"]), ffmt(case["max_grad_norm"])))
        out.append("     %d, %d, %d, %d," % (case["decoupled"], case["bias_correction"],
                                             case["grad_averaging"], case["adapt_all"]))
        out.append("     {")
        out.append(block([r[0] for r in rows], dfmt, "        "))
        out.append("     },")
        out.append("     {")
        for r in rows:
            out.append("        {" + ", ".join(dfmt(x) for x in r[1]) + "},")
        out.append("     },")
        for idx in (2, 3, 4):
            out.append("     {")
            for r in rows:
                out.append("      {")
                out.append(block(r[idx], dfmt, "        "))
                out.append("      },")
            out.append("     },")
        out.append("    },")
    out.append("};")
    out.append("#define LAMB_REF_N_CASES ((int)(sizeof lamb_ref_cases / sizeof lamb_ref_cases[0]))")
    out.append("")
    out.append("#endif")
    print("\n".join(out))


if __name__ == "__main__":
    main()
