#!/usr/bin/env bash
# Fuzzes the safetensors reader: builds tests/fuzz with clang (libFuzzer, ASan, UBSan) in its own
# build folder, then runs it for FUZZ_SECONDS (default 60) on a copy of tests/fuzz/corpus, so the
# committed seeds are never touched. Exits non-zero on a finding (crash, sanitizer report, leak,
# timeout); the input that triggers it is left under the run folder this prints.
#   FUZZ_SECONDS=600 scripts/fuzz.sh
#   FUZZ_BUILD=build-fuzz (build folder)   FUZZ_ARGS="-jobs=2" (more libFuzzer flags)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-60}
build=${FUZZ_BUILD:-build-fuzz}
command -v clang >/dev/null || {
    echo "fuzz.sh: clang not found (scripts/setup.sh installs it)" >&2
    exit 1
}

cmake -S tests/fuzz -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >/dev/null
cmake --build "$build" -j"$(nproc)"

run="$build/run"
rm -rf "$run"
mkdir -p "$run/corpus" "$run/findings"
cp tests/fuzz/corpus/* "$run/corpus/"
echo "fuzz.sh: fuzzing for ${seconds}s, corpus in $run/corpus, findings in $run/findings"
# -timeout: one input taking seconds is a hang for a reader of at most 64 KiB.
# shellcheck disable=SC2086 # FUZZ_ARGS is a list of words on purpose
if ! "$build/fuzz_safetensors" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
    -dict=tests/fuzz/safetensors.dict -artifact_prefix="$run/findings/" -print_final_stats=1 \
    ${FUZZ_ARGS:-} "$run/corpus"; then
    echo "fuzz.sh: FINDING: reproduce with $build/fuzz_safetensors $run/findings/<file>" >&2
    ls -l "$run/findings" >&2
    exit 1
fi
echo "fuzz.sh: no finding in ${seconds}s"
