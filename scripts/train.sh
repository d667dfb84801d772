#!/usr/bin/env bash
# Installs the dependencies, builds libamp and trains the Apex tutorial ConvNet on Fashion-MNIST
# for two epochs with amp-train. Arguments are appended to amp-train's command line, after
# `--model convnet --epochs 2` (see amp-train --help for its options).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
# shellcheck disable=SC2086 # AMP_CMAKE_ARGS is a list of words on purpose
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${AMP_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)" --target amp-train
exec build/examples/amp-train --model convnet --epochs 2 "$@"
