#!/usr/bin/env bash
# Runs the unit and mpi tests of build/ (made by scripts/test.sh) again as an AVX2-only CPU would
# run them: AMP_CPU_ISA=avx2 turns off every AVX-512 and AVX512-BF16 path of libamp's own kernels
# and caps oneDNN's at AVX2 (core/cpu_info.h), so the code paths of the other CPUs of this
# machine kind are tested on any one of them. On a CPU without AVX-512 the first run already
# took those paths, and this one is skipped. Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    echo "test_isa_cap.sh: no AVX-512 on this CPU: scripts/test.sh already ran its AVX2 paths"
    exit 0
fi
echo "test_isa_cap.sh: the unit and mpi tests under AMP_CPU_ISA=avx2 on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
AMP_CPU_ISA=avx2 ctest --test-dir build --output-on-failure -j2 -L '^(unit|mpi)$' "$@"
