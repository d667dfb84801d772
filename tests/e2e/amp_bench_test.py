#!/usr/bin/env python3
"""amp-bench end to end: every output format from one run of two models at three levels, the
GEMM/convolution FLOPs per step against hand counts from the layer shapes, the memory split's
shape (masters only at O2, O3 below O0), the profile, bad arguments, a missing PyTorch, the plot.

    amp_bench_test.py AMP_BENCH WORKDIR
"""
import csv
import json
import os
import shutil
import subprocess
import sys

BATCH = 8
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(args, env=None):
    p = subprocess.run([bench, "--quick-peak"] + args, capture_output=True, text=True, env=env, timeout=900)
    return p.returncode, p.stdout, p.stderr


def linear(b, i, o, dx):
    """A linear layer's GEMM FLOPs in a step: forward + bias, weight gradient + bias gradient, and
    the input gradient unless its input is the data (amp/profile.h's counting)."""
    return 2 * (2 * b * i * o + b * o) + (2 * b * i * o if dx else 0)


def conv5(b, cin, cout, hw, dx):
    macs2, outs = 2 * b * cout * hw * hw * cin * 25, b * cout * hw * hw
    return 2 * (macs2 + outs) + (macs2 if dx else 0)


def conv3(b, cin, cout, hw, dx):
    """A bias-free 3x3 convolution (the residual network's)."""
    macs2 = 2 * b * cout * hw * hw * cin * 9
    return 2 * macs2 + (macs2 if dx else 0)


HAND_FLOPS = {
    "mlp": linear(BATCH, 784, 2048, False) + linear(BATCH, 2048, 2048, True) +
           linear(BATCH, 2048, 10, True),
    "convnet": conv5(BATCH, 1, 16, 28, False) + conv5(BATCH, 16, 32, 14, True) +
               linear(BATCH, 7 * 7 * 32, 10, True),
    # models/resnet.c: the stem on the data, four 32-channel convolutions at 14x14, the
    # spatial mean as a [B*32, 196] x [196, 1] GEMM and its input gradient, the linear head.
    "resnet": conv3(BATCH, 1, 32, 28, False) + 4 * conv3(BATCH, 32, 32, 14, True) +
              2 * (2 * BATCH * 32 * 196) + linear(BATCH, 32, 10, True),
}


def gpt_flops(b, t, c, layers, vocab):
    """models/gpt.c's step: per block c_attn, attn.c_proj, c_fc (its GELU epilogue one
    FLOP an element) and mlp.c_proj, the causal attention (2 b t^2 c forward, 5 b t^2 c backward:
    the backward recomputes the scores, core/backend_kernels.def), and the tied head (no bias)."""
    rows = b * t
    block = (linear(rows, c, 3 * c, True) + linear(rows, c, c, True) +
             linear(rows, c, 4 * c, True) + rows * 4 * c + linear(rows, 4 * c, c, True) +
             7 * b * t * t * c)
    return layers * block + 3 * 2 * rows * c * vocab


def check_gpt():
    """--model gpt: the shape options, the FLOPs by hand, tokens/s = samples/s x T, the model
    note, and a bad shape refused by name."""
    gj = os.path.join(work, "gpt.json")
    shape = ["--n-layer", "2", "--n-head", "2", "--n-embd", "32", "--block-size", "16",
             "--vocab-size", "60"]
    rc, out, err = run(["--model", "gpt"] + shape + ["--opt-level", "O0,O1", "--half", "bf16",
                        "--batch", "2", "--steps", "2", "--warmup", "1", "--threads", "1",
                        "--json=" + gj])
    check(rc == 0, "amp-bench --model gpt exits 0 (got %d: %s)" % (rc, err.strip()))
    check("tokens/s" in out and "gpt: 2 layers, 2 heads, 32 wide" in out,
          "the table has tokens/s and the GPT's shape")
    if rc != 0:
        return
    d = json.load(open(gj))
    want = gpt_flops(2, 16, 32, 2, 64)  # the vocabulary padded to 64
    for r in d["rows"]:
        got = r["gflop_per_step"] * 1e9
        check(abs(got - want) <= 1e-6 * want, "gpt %s: %.0f FLOPs per step, %d by hand"
              % (r["opt_level"], got, want))
        check(r["seq_len"] == 16 and abs(r["tokens_per_s"] - 16 * r["samples_per_s"]) <= 1e-6 *
              r["tokens_per_s"], "gpt %s: tokens/s is samples/s x 16" % r["opt_level"])
    rc, out, err = run(["--model", "gpt", "--n-embd", "30", "--n-head", "4", "--opt-level", "O0",
                        "--steps", "1", "--warmup", "0"])
    check(rc == 1 and "n_embd 30" in err, "a GPT shape that does not split over the heads is "
          "refused by name (rc %d, %s)" % (rc, err.strip()))


def main():
    os.makedirs(work, exist_ok=True)
    js, cs, md = (os.path.join(work, "r." + e) for e in ("json", "csv", "md"))
    rc, out, err = run(["--model", "mlp,convnet", "--opt-level", "O0,O2,O3", "--half", "bf16",
                        "--batch", str(BATCH), "--steps", "2", "--warmup", "1", "--threads", "1",
                        "--profile", "--json=" + js, "--csv=" + cs, "--markdown=" + md])
    check(rc == 0, "amp-bench exits 0 (got %d: %s)" % (rc, err.strip()))
    check("libamp" in out and "MFU" in out, "the table is printed")
    d = json.load(open(js))
    rows = d["rows"]
    check(len(rows) == 6, "6 rows (got %d)" % len(rows))
    check(d["run"]["cpu_model"] and d["run"]["isa"] is not None, "the run names the CPU and ISA")
    check(d["run"]["peak_gflops"]["f32"] > 0, "a measured f32 peak")
    check(d["run"]["peak_quick"] is True, "the run says its peaks were --quick-peak's")
    by = {(r["model"], r["opt_level"]): r for r in rows}
    for r in rows:
        name = "%s %s" % (r["model"], r["opt_level"])
        want = HAND_FLOPS[r["model"]]
        got = r["gflop_per_step"] * 1e9
        check(abs(got - want) <= 1e-6 * want, "%s: %.0f GEMM/conv FLOPs per step, %d by hand"
              % (name, got, want))
        check(r["samples_per_s"] > 0 and r["step_ms_p10"] <= r["step_ms_median"] <= r["step_ms_p90"],
              "%s: step time statistics in order" % name)
        check(0 < r["mfu"] < 2, "%s: MFU %s" % (name, r["mfu"]))
        # MFU is taken against the peak the header reports (the better of the two measurements)
        peak = d["run"]["peak_gflops"]["f32" if r["half"] == "-" else
                                       {"bf16": "bf16", "fp16": "f16"}[r["half"]]]
        check(abs(r["mfu"] - r["gflop_per_s"] / peak) <= 1e-9 * r["mfu"],
              "%s: MFU %s is GFLOP/s %s over the header's peak %s"
              % (name, r["mfu"], r["gflop_per_s"], peak))
        m = r["mem_peak_bytes"]
        check(m["total"] == sum(m[k] for k in m if k != "total"), "%s: memory kinds add up" % name)
        check(m["params"] > 0 and m["grads"] > 0 and m["optimizer"] > 0 and m["activations"] > 0,
              "%s: parameters, gradients, optimizer state and activations held" % name)
        check((m["masters"] > 0) == (r["opt_level"] == "O2"), "%s: masters only at O2" % name)
        check(r["prof_s_per_step"]["gemm_conv"] > 0, "%s: profiled GEMM time" % name)
        check(r["skipped_steps"] == 0, "%s: no skipped step" % name)
    for model in ("mlp", "convnet"):
        o0, o3 = by[(model, "O0")]["mem_peak_bytes"], by[(model, "O3")]["mem_peak_bytes"]
        check(model == "convnet" or abs(2 * o3["params"] - o0["params"]) < 0.01 * o0["params"],
              "%s: O3 holds half the parameter bytes of O0 (%d, %d; alignment aside)"
              % (model, o3["params"], o0["params"]))
        check(o3["total"] < o0["total"], "%s: O3 holds less than O0" % model)
    lines = list(csv.reader(open(cs)))
    check(len(lines) == 7 and all(len(l) == len(lines[0]) for l in lines),
          "CSV: a header and 6 rows of equal length")
    text = open(md).read()
    check(d["run"]["cpu_model"] in text and text.count("| libamp |") >= 6,
          "Markdown: the CPU and every row")

    # A hand-written model (the model API's residual network) through amp-bench.
    rj = os.path.join(work, "resnet.json")
    rc, out, err = run(["--model", "resnet", "--opt-level", "O1", "--half", "bf16", "--batch",
                        str(BATCH), "--steps", "2", "--warmup", "1", "--threads", "1",
                        "--json=" + rj])
    check(rc == 0, "amp-bench --model resnet exits 0 (got %d: %s)" % (rc, err.strip()))
    if rc == 0:
        r = json.load(open(rj))["rows"][0]
        got = r["gflop_per_step"] * 1e9
        check(r["model"] == "resnet" and abs(got - HAND_FLOPS["resnet"]) <= 1e-6 * got,
              "resnet O1: %.0f GEMM/conv FLOPs per step, %d by hand" % (got, HAND_FLOPS["resnet"]))

    check_gpt()

    rc, out, err = run(["--opt-level", "O5"])
    check(rc == 2 and "O5" in err, "--opt-level O5 refused naming it (rc %d, %s)" % (rc, err))
    rc, out, err = run(["--batch", "0"])
    check(rc == 2 and "--batch" in err, "--batch 0 refused (rc %d)" % rc)
    rc, out, err = run(["--device", "tpu"])
    check(rc == 2 and "tpu" in err, "--device tpu refused (rc %d)" % rc)
    rc, out, err = run(["--repeat", "16"])
    check(rc == 2 and "--repeat" in err, "--repeat 16 refused (rc %d)" % rc)

    # --repeat: three runs of the configuration, one row kept (the median run's).
    rj = os.path.join(work, "repeat.json")
    rc, out, err = run(["--model", "mlp", "--opt-level", "O0", "--batch", "16", "--steps", "2",
                        "--warmup", "0", "--repeat", "3", "--json=" + rj])
    check(rc == 0, "--repeat 3 runs (rc %d: %s)" % (rc, err.strip()))
    if rc == 0:
        rr = json.load(open(rj))["rows"]
        check(len(rr) == 1 and rr[0]["n_steps"] == 2, "--repeat 3: one row of 2 steps")

    # A Python without torch: amp-bench says so and still prints libamp's rows.
    fake = os.path.join(work, "python-without-torch")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\necho 'No module named torch' >&2\nexit 3\n")
    os.chmod(fake, 0o755)
    env = dict(os.environ, PYTHON=fake)
    rc, out, err = run(["--model", "mlp", "--opt-level", "O0", "--batch", str(BATCH), "--steps",
                        "1", "--warmup", "0", "--threads", "1", "--compare-torch"], env)
    check(rc == 1 and "PyTorch not importable" in err and "libamp" in out,
          "no torch: a clear message, exit 1, libamp's rows (rc %d, %s)" % (rc, err.strip()))

    if shutil.which("gnuplot"):
        png = os.path.join(work, "b.png")
        rc, out, err = run(["--model", "mlp", "--opt-level", "O0,O1", "--batch", str(BATCH),
                            "--steps", "1", "--warmup", "0", "--threads", "1", "--plot", png])
        ok = rc == 0 and os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
        check(ok, "--plot writes a PNG (rc %d, %s)" % (rc, err.strip()))
    else:
        print("amp_bench_test: no gnuplot: --plot not checked")

    print("amp_bench_test: %d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    bench, work = sys.argv[1], sys.argv[2]
    sys.exit(main())
