#!/usr/bin/env bash
# Builds libamp with its CUDA backend against ../shared/cudacpu (AMP_CUDACPU=ON, in build-cudacpu/)
# and runs every ctest there, the gpu-labelled ones included: the CUDA backend then runs on this
# CPU, so tests/unit/test_cuda_backend.c and tests/gpu/test_backend_ops.c run it instead of
# reporting SKIPPED. Stream work is deferred to sync points (CUDACPU_STREAMS=lazy, cudacpu's
# default) unless the caller sets CUDACPU_STREAMS; device memory faults on host access
# (CUDACPU_GUARD=1). Needs no GPU and no nvcc, only NVIDIA's headers. Extra CMake arguments:
# AMP_CMAKE_ARGS; extra ctest arguments: the script's own (e.g. -R test_backend_ops).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${AMP_CUDACPU_BUILD_DIR:-build-cudacpu}
export CUDACPU_STREAMS=${CUDACPU_STREAMS:-lazy}
# shellcheck disable=SC2086 # AMP_CMAKE_ARGS is a list of words on purpose
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DAMP_CUDACPU=ON ${AMP_CMAKE_ARGS:-}
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"
