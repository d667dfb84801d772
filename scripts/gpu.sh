#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: builds libamp with CUDA (build-gpu/), runs the
# GPU tests and the unit suite, then the GPU figures (the fused optimizers' bandwidth and the
# GEMMs against the device's peaks, amp-train at every opt level on the GPU, and PyTorch AMP on
# the same GPU when torch is importable), and appends them to bench/RESULTS.md with the date and
# the device. Without a device it says so and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu.sh: no NVIDIA GPU answers on this machine (nvidia-smi); nothing to run"
    exit 0
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1)
echo "gpu.sh: $gpu"
build=${AMP_GPU_BUILD_DIR:-build-gpu}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DAMP_CUDA=ON || exit 1
cmake --build "$build" -j"$(nproc)" || exit 1
out=$(mktemp -d)
ctest --test-dir "$build" --output-on-failure -j4 -L "gpu|unit" 2>&1 | tee "$out/ctest.log"
tests_line=$(grep -E "tests passed|tests failed" "$out/ctest.log" | tail -n 1)

"$build/bench/cuda_kernels" | tee "$out/kernels.md"

data=${AMP_DATA:-/usr/share/datasets/fashion-mnist}
train_rows=""
if [[ -f $data/train-images-idx3-ubyte.gz ]]; then
    for model in mlp convnet; do
        for cfg in "O0 fp16" "O1 fp16" "O2 fp16" "O2 bf16" "O3 bf16"; do
            set -- $cfg
            line=$("$build/examples/amp-train" --model "$model" --device cuda --opt-level "$1" \
                --half "$2" --batch-size 256 --epochs 1 --max-steps 200 --no-eval --json \
                --data "$data" 2>/dev/null | tail -n 1)
            sps=$(sed -n 's/.*"samples_per_sec": \([0-9.]*\).*/\1/p' <<<"$line")
            allocs=$(sed -n 's/.*"system_allocs_steady": \([-0-9]*\).*/\1/p' <<<"$line")
            train_rows+="| $model | $1 $2 | ${sps:-failed} | ${allocs:-?} |"$'\n'
        done
    done
else
    train_rows="| (no Fashion-MNIST in $data) | | | |"$'\n'
fi

torch_rows=""
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    torch_rows="PyTorch on the same GPU (batch 256, 200 steps, samples/s over the steps):"$'\n\n'
    torch_rows+="| model | run | samples/s |"$'\n'"|---|---|---:|"$'\n'
    for model in mlp convnet; do
        for run in "fp32:" "autocast fp16:--autocast-fp16" "autocast bf16:--autocast-bf16"; do
            line=$(python3 bench/pytorch_reference.py --model "$model" --device cuda \
                ${run#*:} --batch-size 256 --epochs 1 --max-steps 200 --json --data "$data" \
                2>/dev/null | tail -n 1)
            sps=$(sed -n 's/.*"samples_per_sec": \([0-9.]*\).*/\1/p' <<<"$line")
            torch_rows+="| $model | ${run%%:*} | ${sps:-failed} |"$'\n'
        done
    done
else
    torch_rows="PyTorch with CUDA is not importable here: no comparison."$'\n'
fi

{
    echo
    echo "## $(date -u +%F) — GPU: $gpu (\`scripts/gpu.sh\`)"
    echo
    echo "Tests: ${tests_line:-see ctest output}"
    echo
    cat "$out/kernels.md"
    echo
    echo "amp-train on the GPU (batch 256, 200 steps, no evaluation):"
    echo
    echo "| model | level | samples/s | cudaMalloc after step 3 |"
    echo "|---|---|---:|---:|"
    printf '%s' "$train_rows"
    echo
    printf '%s' "$torch_rows"
} >>bench/RESULTS.md
echo "gpu.sh: figures appended to bench/RESULTS.md"
