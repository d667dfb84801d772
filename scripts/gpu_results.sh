#!/usr/bin/env bash
# Appends what scripts/gpu.sh brought back from a GPU machine to bench/RESULTS.md: a section with
# the date and the device, each part's result, the test and compute-sanitizer lines, the peaks,
# fused optimizers and GEMMs (kernels.md) and amp-bench beside PyTorch (amp-bench-<model>.md).
#   scripts/gpu_results.sh DIR    DIR: the folder of gpu.sh's files (the device reply's files_at,
#                                 or build-gpu/out where gpu.sh ran on this machine)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/gpu_results.sh DIR, the folder of the files gpu.sh wrote}
[[ -f $dir/summary.md ]] || { echo "gpu_results: no summary.md in $dir" >&2; exit 1; }
when=$(sed -n '1s/^# scripts\/gpu.sh, \([0-9-]*\).*/\1/p' "$dir/summary.md")
device=$(sed -n 's/^Device: //p' "$dir/summary.md" | head -n 1)
[[ $device != "no GPU" ]] || { echo "gpu_results: $dir holds a run without a GPU: nothing to record" >&2; exit 1; }
{
    echo
    echo "## ${when:-$(date -u +%F)} — GPU: $device (scripts/gpu.sh)"
    echo
    tail -n +5 "$dir/summary.md" # without its title and device lines
    if [[ -s $dir/kernels.md ]]; then
        echo
        echo "### Peaks, fused optimizers, the MLP's GEMMs, the transformer ops (bench/cuda_kernels)"
        echo
        cat "$dir/kernels.md"
    fi
    for model in gpt2 mlp convnet; do
        [[ -s $dir/amp-bench-$model.md ]] || continue
        echo
        echo "### amp-bench $model on the GPU, PyTorch AMP on the same GPU beside it"
        echo
        cat "$dir/amp-bench-$model.md"
    done
} >>bench/RESULTS.md
echo "gpu_results: appended the $device run of ${when:-today} to bench/RESULTS.md"
