#!/usr/bin/env python3
"""libamp's safetensors files against the Python `safetensors` package, both ways.

    test_safetensors_interop.py ST_INTEROP TMPDIR

1. st_interop writes two files; the package reads them and every name, dtype, shape, value and
   the metadata is checked. numpy has no bfloat16, so safetensors.numpy.load_file refuses a file
   with a BF16 tensor ("data type 'bfloat16' not understood"): the BF16 file is read with
   safetensors.deserialize, the package's own parser, which hands back the raw little-endian
   bytes; they are widened to float32 here (bf16 is the top half of an f32) and compared, and
   safe_open checks the dtype and shape it reports.
2. safetensors.numpy.save_file writes f32/f16/i32 tensors and metadata; `st_interop check` reads
   that file through libamp and compares the values (spelled out in st_interop.c too).

Exits 77 (ctest: SKIPPED) when safetensors or numpy cannot be imported, never 0.
"""
import os
import subprocess
import sys

try:
    import numpy as np
    import safetensors
    import safetensors.numpy
except ImportError as e:  # the test must not pass without having run
    print(f"test_safetensors_interop: SKIPPED: {e} (scripts/setup.sh installs it)")
    sys.exit(77)

passed = 0
failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", file=sys.stderr)


def check_array(got, want, what):
    check(got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}")
    check(got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}")
    # Bit-exact, NaN-free inputs: compare the bytes so -0.0 and 0.0 differ.
    same = got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    check(same, f"{what}: values {got!r}, want {want!r}")


def read_c_files(tmp):
    tensors = safetensors.numpy.load_file(os.path.join(tmp, "c_numpy.safetensors"))
    want = {
        "fc.weight": np.array([[0.5, -1.25, 3.0], [1e-3, -0.0, 65504.0]], np.float32),
        "fc.bias": np.array([1.0, -2.0, 65504.0], np.float16),
        "step": np.array(1234567890123, np.int64),
        "labels": np.array([[-1, 0], [7, 2147483647]], np.int32),
        "mask": np.array([True, False, True], np.bool_),
        "bytes": np.array([0, 1, 127, 128, 255], np.uint8),
        "double": np.array([0.1, -1e300], np.float64),
        "empty": np.zeros((0, 3), np.float32),
    }
    check(sorted(tensors) == sorted(want), f"names {sorted(tensors)}, want {sorted(want)}")
    for name, w in want.items():
        if name in tensors:
            check_array(tensors[name], w, name)

    path = os.path.join(tmp, "c_numpy.safetensors")
    with safetensors.safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        check(sorted(f.keys()) == sorted(want), f"safe_open keys {list(f.keys())}")
    check(meta.get("opt_level") == "O2", f"metadata {meta}")
    check(meta.get("libamp.format") == "1", f"metadata {meta}")
    crc = meta.get("libamp.crc32", "")
    check(len(crc) == 8 and all(c in "0123456789abcdef" for c in crc), f"crc32 '{crc}'")

    path = os.path.join(tmp, "c_bf16.safetensors")
    with open(path, "rb") as fh:
        raw = dict(safetensors.deserialize(fh.read()))
    check(sorted(raw) == ["after", "master"], f"bf16 file names {sorted(raw)}")
    m = raw.get("master", {})
    check(m.get("dtype") == "BF16" and m.get("shape") == [2, 2], f"master: {m}")
    bits = np.frombuffer(bytes(m.get("data", b"")), dtype="<u2").astype(np.uint32) << 16
    got = bits.view(np.float32).reshape(m.get("shape", [-1]))
    check_array(got, np.array([[1.0, -3.0], [3.140625, 0.0]], np.float32), "master (bf16)")
    a = raw.get("after", {})
    after = np.frombuffer(bytes(a.get("data", b"")), dtype="<f4")
    check(a.get("dtype") == "F32", f"after: {a}")
    check_array(after, np.array([42.0, -42.0], np.float32), "after (f32 behind bf16)")
    with safetensors.safe_open(path, framework="numpy") as f:
        s = f.get_slice("master")
        check(s.get_dtype() == "BF16" and s.get_shape() == [2, 2], "safe_open: master dtype/shape")


def write_python_file(tmp):
    path = os.path.join(tmp, "py.safetensors")
    safetensors.numpy.save_file(
        {
            "w": np.array([[1.5, -2.0], [0.0, 3.25], [-1e-8, 1e30]], np.float32),
            "h": np.array([1.0, -1.0, 0.5, np.inf], np.float16),
            "i": np.array([-7, 0, 123456], np.int32),
            "s": np.array(2.5, np.float32),
        },
        path,
        metadata={"writer": "python"},
    )
    return path


def main():
    tool, tmp = sys.argv[1], sys.argv[2]
    os.makedirs(tmp, exist_ok=True)
    print(f"safetensors {safetensors.__version__}, numpy {np.__version__}")
    r = subprocess.run([tool, "write", tmp])
    check(r.returncode == 0, f"st_interop write exited {r.returncode}")
    if r.returncode == 0:
        read_c_files(tmp)
    r = subprocess.run([tool, "check", write_python_file(tmp)])
    check(r.returncode == 0, f"st_interop check exited {r.returncode}")
    print(f"test_safetensors_interop: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
