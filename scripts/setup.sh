#!/usr/bin/env bash
# Installs what building and testing libamp needs on Debian 12 (run as root, or with sudo).
# Idempotent: packages already installed are not touched, and when nothing is missing apt is not
# run at all, so a warm machine passes through in well under a second.
#   scripts/setup.sh          system packages for the build, the tests and amp-train's data set
#   scripts/setup.sh --bench  also the Python packages for bench/pytorch_reference.py (pip)
set -euo pipefail

bench=0
for arg in "$@"; do
    case "$arg" in
        --bench) bench=1 ;;
        -h | --help)
            sed -n '2,6p' "$0"
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
# /usr/share/datasets/fashion-mnist for amp-train and the end-to-end tests.
packages=(cmake gcc g++ make libdnnl-dev libopenblas-dev zlib1g-dev libjansson-dev
    libopenmpi-dev openmpi-bin dataset-fashion-mnist ocl-icd-opencl-dev)

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

if ((bench)); then
    # Only for the PyTorch comparison; never needed to build or test libamp.
    python=${PYTHON:-python3}
    pip_missing=()
    for mod in torch numpy safetensors; do
        "$python" -c "import $mod" 2>/dev/null || pip_missing+=("$mod")
    done
    if ((${#pip_missing[@]})); then
        echo "setup.sh: pip installing ${pip_missing[*]}"
        "$python" -m pip install "${pip_missing[@]}"
    fi
fi
