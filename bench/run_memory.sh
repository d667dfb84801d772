#!/usr/bin/env bash
# Memory per opt level, and what skip_nonfinite costs where it adds a pass.
#  1. amp-train on the MLP at O0..O3 with fp16 and bf16: peak backend memory while training
#     (parameters, gradients, masters, optimizer state, step memory: amp_ctx_memory) and peak RSS
#     (which also holds the data set and the libraries).
#  2. samples/s with --skip-nonfinite on and off where it adds a read of every gradient (O1 bf16,
#     O3 fp16 at scale 1), REPEATS runs each, alternating; the median of each.
# Prints markdown for bench/RESULTS.md, with the CPU model and its ISA.
#
#   bench/run_memory.sh                 STEPS=100 per run, REPEATS=5, THREADS=2
# Environment: BUILD (build), STEPS, REPEATS, THREADS, OUT (folder for the logs).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${BUILD:-build}
steps=${STEPS:-100}
repeats=${REPEATS:-5}
threads=${THREADS:-2}
out=${OUT:-$(mktemp -d /tmp/amp-memory.XXXXXX)}
amp_train=$build/examples/amp-train
[[ -x $amp_train ]] || { echo "run_memory.sh: build $amp_train first" >&2; exit 1; }

json() { # args...: the last line amp-train prints (its JSON)
    "$amp_train" --model mlp --epochs 1 --max-steps "$steps" --threads "$threads" --json "$@" \
        2>>"$out/stderr.log" | tail -n 1
}
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
isa=$(grep -o -w -E 'avx512f|avx512_bf16|avx512_fp16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "CPU: $cpu; ISA: ${isa:-no AVX-512}; $threads threads; MLP 5.8M parameters, batch 128, SGD momentum, $steps steps"
echo
echo "| half | level | peak backend MiB | peak RSS MiB |"
echo "|---|---|---:|---:|"
for half in fp16 bf16; do
    for level in O0 O1 O2 O3; do
        j=$(json --opt-level "$level" --half "$half")
        echo "| $half | $level | $(field "$j" peak_backend_mb) | $(field "$j" peak_rss_mb) |"
    done
done
echo
echo "| run | skip_nonfinite on (samples/s) | off (samples/s) | on / off |"
echo "|---|---:|---:|---:|"
for cfg in "O1 bf16" "O3 fp16"; do
    read -r level half <<<"$cfg"
    on=() off=()
    for ((i = 0; i < repeats; i++)); do
        on+=("$(field "$(json --opt-level "$level" --half "$half" --skip-nonfinite on)" samples_per_sec)")
        off+=("$(field "$(json --opt-level "$level" --half "$half" --skip-nonfinite off)" samples_per_sec)")
    done
    m_on=$(median "${on[@]}")
    m_off=$(median "${off[@]}")
    echo "| $level $half | $m_on | $m_off | $(python3 -c "print(f'{$m_on / $m_off:.3f}')") |"
done
