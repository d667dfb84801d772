#!/usr/bin/env bash
# Installs the dependencies, builds libamp (Release, in build/) and runs every ctest. GPU tests
# report SKIPPED where no device answers. Extra CMake arguments: AMP_CMAKE_ARGS="-DAMP_CUDA=OFF".
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
# shellcheck disable=SC2086 # AMP_CMAKE_ARGS is a list of words on purpose
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${AMP_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2
