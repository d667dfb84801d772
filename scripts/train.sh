#!/usr/bin/env bash
# Installs the dependencies, builds libamp and trains with amp-train:
#   scripts/train.sh [args]              the Apex tutorial ConvNet on Fashion-MNIST for two
#                                        epochs (args after `--model convnet --epochs 2`)
#   scripts/train.sh --model gpt [args]  the default GPT (4 layers, 4 heads, 256 wide, block 128)
#                                        on the English text of Debian's fortunes as bytes (made
#                                        into build/data/fortunes/{train,val}.bin by
#                                        amp-text-tokens, the last 10 % for validation), 2000
#                                        steps, the validation loss every 250, and a 500-byte
#                                        sample at the end
# See amp-train --help for the options; later ones override these.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
# shellcheck disable=SC2086 # AMP_CMAKE_ARGS is a list of words on purpose
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${AMP_CMAKE_ARGS:-}
if [[ ${1:-} == --model && ${2:-} == gpt ]]; then
    shift 2
    cmake --build build -j"$(nproc)" --target amp-train amp-text-tokens
    data=build/data/fortunes
    if [[ ! -f $data/train.bin ]]; then
        # Every English fortune file (the offensive ones are not installed by the package).
        mapfile -t files < <(find /usr/share/games/fortunes -maxdepth 1 -type f \
            ! -name '*.dat' ! -name '*.u8' ! -name 'ascii-art' | sort)
        build/examples/amp-text-tokens "$data" "${files[@]}"
    fi
    exec build/examples/amp-train --model gpt --data "$data" --max-steps 2000 --eval-every 250 \
        --sample 500 --top-k 40 --temperature 0.8 "$@"
fi
cmake --build build -j"$(nproc)" --target amp-train
exec build/examples/amp-train --model convnet --epochs 2 "$@"
