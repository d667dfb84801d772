#!/usr/bin/env bash
# Everything a lent GPU machine is for, in one call: builds libamp with CUDA there from the kit
# that scripts/gpu_kit.sh prepares here, runs the GPU tests and compute-sanitizer, and takes the
# GPU figures, with PyTorch on the same GPU in the same run.
#
# The call on the lent machine (the device tool's `run`), after `bash scripts/gpu_kit.sh` here:
#     command:   bash scripts/gpu.sh
#     carry:     [".gpu-kit"]
#     timeout_s: 390
# It keeps to AMP_GPU_BUDGET seconds (default 360) whatever happens, so the reply comes back with
# every file; a start (1-2 minutes) and 6.5 minutes, twice, fit in the 15 minutes of a loan, and a
# second call on the still warm machine finds build-gpu/ built. Then, here:
#     bash scripts/gpu_results.sh <the reply's files_at>
# appends the figures to bench/RESULTS.md with the date and the device.
#
# The parts, in order; each has a time limit of its own, and a failure is written down and the
# next part runs, so that one loan yields every finding:
#   probe      the machine: GPU, driver, OS, compilers, CMake, Python, torch, where cuDNN/NCCL are
#   kit        .gpu-kit's Debian packages unpacked into /tmp/amp-kit (dpkg -x, or ar and tar
#              where there is no dpkg), never over /; a fallback library only where the image
#              lacks it
#   configure  build-gpu/, AMP_CUDA=ON for the device's architecture (90 without one), cuDNN and
#              NCCL from python3's NVIDIA wheels where it has them (the configure line says which),
#              warnings not errors (AMP_WERROR=OFF: that machine's GCC is not this one's); the
#              build's warnings are counted in summary.md
#   build      everything, -j$(nproc)
#   tests      ctest -L '^(gpu|device)$': the op table against the CPU, step-synchronisation
#              counts, streams, the allocator, amp-train's waits, amp-train's device parity, and
#              the unit tests that run their cases on CUDA too; beside them compute-sanitizer's
#              memcheck (with the allocator's cache off) and racecheck over the op table
#   figures    bench/cuda_kernels (copy and GEMM peaks per dtype, fused optimizers against HBM,
#              the MLP's GEMMs), then amp-bench: GPT-2 small in bf16 at O1 and O2, and every level
#              for the MLP and the ConvNet, each beside PyTorch AMP on the same GPU; nothing else
#              runs on the GPU meanwhile
# Where no GPU answers (the rehearsal, scripts/gpu_rehearsal.sh) the tests report SKIPPED and the
# sanitizer and figures say "no device". Files go to $OUT (the device tool's) or build-gpu/out:
#   summary.md (each part's result), gpu.log (all output), probe.txt, sanitizer.log, kernels.md,
#   amp-bench-gpt2.md, amp-bench-mlp.md, amp-bench-convnet.md.
# Exits 0 when no part failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
t_start=$SECONDS
budget=${AMP_GPU_BUDGET:-360}
build=${AMP_GPU_BUILD_DIR:-build-gpu}
kit=$root/.gpu-kit
prefix=${AMP_GPU_PREFIX:-/tmp/amp-kit}
out=${OUT:-$root/$build/out}
mkdir -p "$out"
: >"$out/gpu.log"
exec > >(tee -a "$out/gpu.log") 2>&1
tee_pid=$!

rows=()
failed=0
part_begin() { part=$1 part_t0=$SECONDS; echo; echo "==== gpu.sh: $part ($((SECONDS - t_start)) s in)"; }
part_end() { # RESULT NOTE
    local secs=$((SECONDS - part_t0))
    rows+=("| $part | $1 | $secs | ${2:-} |")
    [[ $1 == FAIL ]] && failed=1
    echo "==== gpu.sh: $part: $1${2:+ ($2)} in $secs s"
    write_summary
}
left() { echo $((budget - (SECONDS - t_start))); }
# limit WANT: a part's time limit, WANT seconds or what the budget has left less a reserve for
# writing the files (0 when nothing is left).
limit() { local l=$(($(left) - 10)); ((l > $1)) && l=$1; ((l < 0)) && l=0; echo "$l"; }

device="no GPU"
write_summary() {
    {
        echo "# scripts/gpu.sh, $(date -u +%F\ %H:%M) UTC"
        echo
        echo "Device: $device"
        echo
        echo "| part | result | seconds | note |"
        echo "|---|---|---:|---|"
        printf '%s\n' "${rows[@]}"
        [[ -n ${tests_line:-} ]] && printf '\nctest: %s\n' "$tests_line"
        [[ -n ${tests_failed:-} ]] && printf '\nFailed tests:\n%s\n' "$tests_failed"
        [[ -n ${sanitizer_lines:-} ]] && printf '\ncompute-sanitizer:\n%s\n' "$sanitizer_lines"
    } >"$out/summary.md"
}

# ---- probe ----
part_begin probe
[[ -d /usr/local/cuda/bin ]] && export PATH=/usr/local/cuda/bin:$PATH
has_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    has_gpu=1
    device=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
fi
arch=${arch:-90}
{
    echo "date: $(date -u +%FT%TZ)"
    echo "gpu: $device (sm_$arch)"
    command -v nvidia-smi >/dev/null && nvidia-smi 2>&1 | head -n 20
    echo "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); kernel $(uname -r); $(ldd --version 2>&1 | head -n 1)"
    echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
    echo "memory: $(free -g 2>/dev/null | awk '/Mem:/ { print $2 " GiB" }')"
    for tool in gcc g++ nvcc cmake ninja python3 compute-sanitizer dpkg ar; do
        printf '%s: %s\n' "$tool" "$({ command -v "$tool" && "$tool" --version 2>&1 | grep -m1 -iE 'version|[0-9]+\.[0-9]+'; } 2>/dev/null | tr '\n' ' ')"
    done
    python3 - <<'EOF' 2>&1
import glob, os, sys
print("python:", sys.executable, sys.version.split()[0])
try:
    import torch
    print("torch:", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
          "nccl", getattr(torch.cuda, "nccl", None) and torch.cuda.nccl.version(), "device available", torch.cuda.is_available())
except Exception as e:
    print("torch: not importable:", e)
for p in sys.path:
    for lib in ("cudnn", "nccl", "cublas", "cu13"):
        d = os.path.join(p, "nvidia", lib)
        if os.path.isdir(d):
            print(f"wheel nvidia/{lib}: {d}: {' '.join(sorted(os.listdir(os.path.join(d, 'lib')))[:6]) if os.path.isdir(os.path.join(d, 'lib')) else ''}")
EOF
    echo "toolkit /usr/local/cuda -> $(readlink -f /usr/local/cuda 2>/dev/null):" \
        "$(ls /usr/local/cuda/lib64/ 2>/dev/null | grep -E '^lib(cublasLt|cudnn|nccl)\.so' | tr '\n' ' ')"
} >"$out/probe.txt" 2>&1
cat "$out/probe.txt"
if ((has_gpu)); then part_end PASS "$device"; else part_end PASS "no GPU answers: the GPU parts will say so"; fi

# ---- kit ----
part_begin kit
# unpack DEB DEST: dpkg -x where there is dpkg, else the archive's data member through ar and tar.
unpack() {
    if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$1" "$2"
    else
        local member tmp rc
        member=$(ar t "$1" | grep '^data\.tar') || return 1
        tmp=$(mktemp --suffix="-$member") # tar reads the compression from the file, not a pipe
        ar p "$1" "$member" >"$tmp" && tar -x -C "$2" -f "$tmp" --no-same-owner
        rc=$?
        rm -f "$tmp"
        return "$rc"
    fi
}
kit_ok=1
libdir=$prefix/usr/lib/x86_64-linux-gnu
if [[ ! -d $kit/debs ]]; then
    kit_ok=0
    part_end FAIL "no $kit/debs: run scripts/gpu_kit.sh here and carry .gpu-kit"
else
    rm -rf "$prefix" "$prefix-fallback"
    mkdir -p "$prefix" "$prefix-fallback"
    for deb in "$kit"/debs/*.deb; do unpack "$deb" "$prefix" || { kit_ok=0; echo "cannot unpack $deb"; }; done
    for deb in "$kit"/fallback/*.deb; do unpack "$deb" "$prefix-fallback" || { kit_ok=0; echo "cannot unpack $deb"; }; done
    # A fallback library only where the image has none of that name; then the development links
    # that point at a library only the image has (libz.so -> its libz.so.1).
    used=()
    known=$(ldconfig -p 2>/dev/null | awk '/x86-64/ && /=>/ { print $1 }')
    while IFS= read -r f; do # each soname the fallbacks have (libz.so.1 -> libz.so.1.2.13)
        name=$(basename "$f")
        grep -qxF "$name" <<<"$known" && continue
        [[ -e $libdir/$name ]] && continue
        cp -a "$f" "$libdir/" && used+=("$name")
        [[ -L $f ]] && cp -a "$(dirname "$f")/$(readlink "$f")" "$libdir/"
    done < <(find "$prefix-fallback" -regextype posix-extended -regex '.*/lib[^/]*\.so\.[0-9]+' \
        \( -type f -o -type l \))
    for link in $(find "$libdir" -maxdepth 1 -xtype l -name 'lib*.so'); do
        base=$(basename "$link")
        target=$(ldconfig -p 2>/dev/null |
            awk -v b="$base." '/x86-64/ && /=>/ && index($1, b) == 1 { print $NF; exit }')
        if [[ -n $target ]]; then ln -sfn "$target" "$link"; else kit_ok=0; echo "no library for $link"; fi
    done
    export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export AMP_DATA=$kit/fashion-mnist
    if ((kit_ok)); then
        part_end PASS "$(ls "$kit"/debs | wc -l) packages into $prefix; fallbacks used: ${used[*]:-none}"
    else
        part_end FAIL "see gpu.log"
    fi
fi

# ---- configure ----
part_begin configure
configured=0
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if ((kit_ok)) && timeout "$(limit 120)" cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DAMP_CUDA=ON -DAMP_CUDA_PYTHON_WHEELS=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DAMP_WERROR=OFF \
    -DCMAKE_PREFIX_PATH="$prefix/usr" \
    -DMPI_C_COMPILER_INCLUDE_DIRS="$libdir/openmpi/include" -DMPI_C_LIB_NAMES=mpi \
    -DMPI_mpi_LIBRARY="$libdir/openmpi/lib/libmpi.so" >"$out/configure.txt" 2>&1; then
    configured=1
    cat "$out/configure.txt"
    part_end PASS "$(grep -o 'cuDNN .*' "$out/configure.txt" | head -n 1)"
else
    cat "$out/configure.txt" 2>/dev/null
    part_end FAIL "$(grep -m1 -A2 'CMake Error' "$out/configure.txt" 2>/dev/null | tr '\n' ' ' | cut -c1-200)"
fi
rm -f "$out/configure.txt"

# ---- build ----
part_begin build
built=0
if ((configured)) && timeout "$(limit 240)" cmake --build "$build" -j"$(nproc)" 2>&1 | tee "$out/build.txt"; then
    built=1
    part_end PASS "-j$(nproc); $(grep -c 'warning:' "$out/build.txt") compiler warnings"
else
    part_end FAIL "$( ((configured)) && grep -m1 'error' "$out/build.txt" | cut -c1-200 || echo 'not configured')"
fi
rm -f "$out/build.txt"

# ---- tests, with compute-sanitizer beside them ----
part_begin tests
sanitize() { # TOOL [ENV...]: the op table under compute-sanitizer's TOOL
    local tool=$1
    shift
    env "$@" timeout "$(limit 150)" compute-sanitizer --tool "$tool" --error-exitcode 86 --print-limit 50 \
        "$build/tests/gpu/test_backend_ops" >"$out/sanitizer-$tool.log" 2>&1
    echo $? >"$out/sanitizer-$tool.rc"
}
if ((built)); then
    sanitizing=0
    if ((has_gpu)) && command -v compute-sanitizer >/dev/null; then
        sanitizing=1
        sanitize memcheck AMP_CUDA_NO_CACHING=1 &
        sanitizers=($!)
        sanitize racecheck &
        sanitizers+=($!)
    fi
    timeout "$(limit 150)" ctest --test-dir "$build" -L '^(gpu|device)$' -j8 --output-on-failure \
        --timeout 140 >"$out/ctest.txt" 2>&1
    ctest_rc=$?
    cat "$out/ctest.txt"
    tests_line=$(grep -E 'tests passed|tests failed' "$out/ctest.txt" | tail -n 1)
    tests_failed=$(sed -n '/The following tests FAILED/,$p' "$out/ctest.txt" | grep -E '^\s+[0-9]+ - ' || true)
    skipped=$(grep -c '\*\*\*Skipped' "$out/ctest.txt")
    if ((ctest_rc == 0)); then part_end PASS "$tests_line; $skipped skipped"; else part_end FAIL "${tests_line:-ctest exit $ctest_rc}"; fi
    rm -f "$out/ctest.txt"
    part_begin sanitizer
    if ((sanitizing)); then
        wait "${sanitizers[@]}"
        : >"$out/sanitizer.log"
        verdict=PASS
        for tool in memcheck racecheck; do
            rc=$(cat "$out/sanitizer-$tool.rc" 2>/dev/null || echo '?')
            line=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-$tool.log" | tail -n 1)
            sanitizer_lines+="- $tool (op table): exit $rc; ${line:-no summary line}"$'\n'
            [[ $rc == 0 ]] || verdict=FAIL
            { echo "==== $tool"; cat "$out/sanitizer-$tool.log"; } >>"$out/sanitizer.log"
            rm -f "$out/sanitizer-$tool.log" "$out/sanitizer-$tool.rc"
        done
        part_end "$verdict" "memcheck and racecheck over test_backend_ops"
    else
        part_end SKIP "$( ((has_gpu)) && echo 'no compute-sanitizer' || echo 'no device')"
    fi
else
    part_end FAIL "not built"
    part_begin sanitizer
    part_end SKIP "not built"
fi

# ---- figures: the GPU to themselves ----
part_begin kernels
if ((built && has_gpu)); then
    if timeout "$(limit 60)" "$build/bench/cuda_kernels" >"$out/kernels.md"; then
        part_end PASS "peaks, fused optimizers, MLP GEMMs"
    else
        part_end FAIL "see kernels.md"
    fi
else
    part_end SKIP "$( ((built)) && echo 'no device' || echo 'not built')"
fi

# GPT-2 small (12 layers, 12 heads, 768 wide, T 1024, GPT-2's vocabulary padded to 50304) in
# bf16 at O1 and O2 beside PyTorch autocast on the same GPU: tokens/s, MFU, peak device memory.
part_begin "amp-bench gpt2"
if ((built && has_gpu)); then
    if timeout "$(limit 100)" "$build/bench/amp-bench" --model gpt --n-layer 12 --n-head 12 \
        --n-embd 768 --block-size 1024 --vocab-size 50257 --opt-level O1,O2 --half bf16 --batch 8 \
        --steps 10 --warmup 3 --device cuda --compare-torch --markdown="$out/amp-bench-gpt2.md"; then
        part_end PASS "GPT-2 small, batch 8 x 1024, O1 and O2 bf16, PyTorch beside"
    else
        part_end FAIL "see gpu.log"
    fi
else
    part_end SKIP "$( ((built)) && echo 'no device' || echo 'not built')"
fi

# One run a model, so that a run cut short by the budget costs only its own table.
for model in mlp convnet; do
    part_begin "amp-bench $model"
    if ((built && has_gpu)); then
        if timeout "$(limit 110)" "$build/bench/amp-bench" --model "$model" --opt-level O0,O1,O2,O3 \
            --half bf16,fp16 --batch 1024 --steps 30 --warmup 5 --device cuda --compare-torch \
            --markdown="$out/amp-bench-$model.md"; then
            part_end PASS "batch 1024, every level in bf16 and fp16, PyTorch beside"
        else
            part_end FAIL "see gpu.log"
        fi
    else
        part_end SKIP "$( ((built)) && echo 'no device' || echo 'not built')"
    fi
done

echo
echo "gpu.sh: $( ((failed)) && echo 'a part FAILED' || echo 'no part failed') in $((SECONDS - t_start)) s; files in $out"
cat "$out/summary.md"
exec >&- 2>&-
wait "$tee_pid" # gpu.log complete before the files are collected
exit "$failed"
