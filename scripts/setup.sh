#!/usr/bin/env bash
# Installs what building and testing libamp needs on Debian 12 (run as root, or with sudo).
# Idempotent: packages already installed are not touched, and when nothing is missing apt is not
# run at all, so a warm machine passes through in well under a second.
#   scripts/setup.sh          system packages for the build, the tests and amp-train's data set,
#                             and numpy + safetensors (pip) for the safetensors interop test
#   scripts/setup.sh --bench  also torch for bench/pytorch_reference.py (pip)
set -euo pipefail

bench=0
for arg in "$@"; do
    case "$arg" in
        --bench) bench=1 ;;
        -h | --help)
            sed -n '2,7p' "$0"
            exit 0
            ;;
        *)
            echo "setup.sh: unknown argument '$arg' (want --bench)" >&2
            exit 2
            ;;
    esac
done

# Compilers and build tools; oneDNN (CPU GEMM and convolution) and OpenBLAS; zlib (gzip'd IDX
# files); jansson (JSON); Open MPI (DDP bootstrap, mpi tests); Fashion-MNIST under
# /usr/share/datasets/fashion-mnist for amp-train and the end-to-end tests; clang and its
# compiler-rt (libclang_rt.fuzzer, only a recommends of clang) for scripts/fuzz.sh; gnuplot-nox
# for amp-bench --plot (its test reports SKIPPED without it); jq, which reads --json's output in
# the tests; fortunes, whose English text (/usr/share/games/fortunes) is amp-train --model gpt's
# default corpus.
packages=(cmake gcc g++ make libdnnl-dev libopenblas-dev zlib1g-dev libjansson-dev
    libopenmpi-dev openmpi-bin dataset-fashion-mnist ocl-icd-opencl-dev clang libclang-rt-dev
    gnuplot-nox jq fortunes)

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]})); then
    sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || {
            echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2
            exit 1
        }
        sudo=(sudo)
    fi
    echo "setup.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update
    "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Python packages: numpy and safetensors for tests/python (which reports SKIPPED without them),
# torch only for the PyTorch comparison (--bench), never needed to build or test libamp.
python=${PYTHON:-python3}
pip_want=(numpy safetensors)
if ((bench)); then
    pip_want+=(torch)
fi
pip_missing=()
if command -v "$python" >/dev/null; then
    for mod in "${pip_want[@]}"; do
        "$python" -c "import $mod" 2>/dev/null || pip_missing+=("$mod")
    done
fi
if ((${#pip_missing[@]})); then
    echo "setup.sh: pip installing ${pip_missing[*]}"
    pip_flags=()
    # A Debian-managed interpreter refuses pip (PEP 668) unless told; a pyenv or venv one does not.
    if "$python" - <<'EOF'; then
import os, sys, sysconfig
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(0 if os.path.exists(marker) else 1)
EOF
        pip_flags+=(--break-system-packages)
    fi
    # Without them only the interop test is lost (SKIPPED, visibly): not worth failing the setup.
    if ! "$python" -m pip install "${pip_flags[@]}" "${pip_missing[@]}"; then
        echo "setup.sh: warning: pip could not install ${pip_missing[*]};" \
            "tests/python reports SKIPPED" >&2
        ((bench == 0)) || exit 1
    fi
fi
