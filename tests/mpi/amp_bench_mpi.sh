#!/usr/bin/env bash
# amp-bench under mpirun: with 2 ranks every configuration gives rank 0's one-rank row and the
# 2-rank DDP row (world samples/s, scaling efficiency against the one rank); only rank 0 writes;
# --zero 1 adds a ZeRO row; --compare-torch is refused with a message.
# Usage: amp_bench_mpi.sh MPIEXEC AMP_BENCH WORKDIR
set -uo pipefail
mpiexec=$1 bench=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "amp_bench_mpi: FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
mpi() { "$mpiexec" --oversubscribe --allow-run-as-root --bind-to none ${ASAN_OPTIONS:+-x ASAN_OPTIONS} -np 2 "$@"; }
mpi "$bench" --quick-peak --model mlp,convnet --opt-level O0,O2 --half bf16 --batch 8 --steps 2 \
    --warmup 1 \
    --json="$work/r.json" >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "amp-bench failed"; }
cat "$work/out.txt"
[[ $(grep -c '^scaling (DDP)' "$work/out.txt") -eq 1 ]] || fail "not one scaling table (one rank prints)"
python3 - "$work/r.json" <<'PY' || fail "the JSON rows"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert len(rows) == 8, "8 rows, got %d" % len(rows)
for alone, ddp in zip(rows[0::2], rows[1::2]):
    name = "%s %s" % (ddp["model"], ddp["opt_level"])
    assert alone["world_size"] == 1 and ddp["world_size"] == 2, name + ": world sizes"
    assert alone["scaling_efficiency"] is None, name + ": no efficiency on the one-rank row"
    assert 0 < ddp["scaling_efficiency"] <= 2, name + ": efficiency %s" % ddp["scaling_efficiency"]
    assert abs(ddp["gflop_per_step"] - 2 * alone["gflop_per_step"]) < 1e-9 * ddp["gflop_per_step"], \
        name + ": the world's step is twice one rank's FLOPs"
    assert ddp["threads"] == 1, name + ": the two ranks share the cores"
print("amp_bench_mpi: rows ok")
PY
# --zero 1: a third row after each DDP row, the optimizer's state and masters halved per rank.
mpi "$bench" --quick-peak --model mlp --opt-level O2 --half bf16 --batch 8 --steps 2 --warmup 1 \
    --zero 1 --json="$work/z.json" >"$work/z.txt" 2>&1 || { cat "$work/z.txt"; fail "amp-bench --zero 1 failed"; }
grep -q "mlp zero1" "$work/z.txt" || fail "no zero1 row in the table"
python3 - "$work/z.json" <<'PY' || fail "the ZeRO JSON rows"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert len(rows) == 3, "3 rows, got %d" % len(rows)
alone, ddp, zero = rows
assert [r["zero_stage"] for r in rows] == [0, 0, 1], "stages %s" % [r["zero_stage"] for r in rows]
for kind in ("masters", "optimizer"):
    d, z = ddp["mem_peak_bytes"][kind], zero["mem_peak_bytes"][kind]
    assert z < 0.55 * d, "%s: ZeRO-1 holds %d bytes a rank, DDP %d" % (kind, z, d)
for kind in ("params", "grads"):
    assert zero["mem_peak_bytes"][kind] == ddp["mem_peak_bytes"][kind], kind + " changed"
print("amp_bench_mpi: ZeRO rows ok")
PY
mpi "$bench" --compare-torch >"$work/torch.txt" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "compare without mpirun" "$work/torch.txt" || fail "--compare-torch under mpirun: rc $rc"
echo "1 passed, 0 failed"
