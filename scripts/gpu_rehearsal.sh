#!/usr/bin/env bash
# The GPU call rehearsed here, before a loan spends device time on it: scripts/gpu.sh on the
# committed HEAD in a clean root that holds what the lent image holds and nothing more:
#   - Debian 12 (debootstrap minbase) with gcc, g++, make and the C library's headers: none of
#     Debian's development packages libamp builds against (oneDNN, jansson, zlib, Open MPI);
#   - CUDA's toolkit: this machine's /usr/local/cuda, read-only (as ../shared/tools/fresh-machine
#     does);
#   - a Python at /opt/torch/.venv, first on PATH as the image's python3 is, with torch from PyPI
#     and the NVIDIA wheels it brings (cuDNN and NCCL among them: gpu.sh must take them from
#     there), and CMake and ninja from PyPI, as the image has them;
#   - no network while gpu.sh runs (a network namespace of its own).
# The kit is made on this machine by the HEAD's own scripts/gpu_kit.sh, as before a loan; then
# gpu.sh runs in the root exactly as the device call runs it. It passes when probe, kit,
# configure, build and tests pass (every GPU test SKIPPED, no device here) and the sanitizer and
# figures say "no device". The last line is the figure:
#     gpu rehearsal: passed in N s (...)
# The root is built once and cached at /tmp/gpu-rehearsal/root-base (rebuilt when this recipe
# changes, or with REHEARSAL_REBUILD=1); each run copies it. Needs root, debootstrap, and the
# network for building the root and the kit. Run it from the project root, after committing.
set -uo pipefail
project=$(git rev-parse --show-toplevel 2>/dev/null) || { echo "gpu rehearsal: not in a git checkout"; exit 1; }
tools=${REHEARSAL_TOOLS:-$project/../shared/tools/fresh-machine}
export FRESH_DIR=${REHEARSAL_DIR:-/tmp/gpu-rehearsal}
# shellcheck source=/dev/null
source "$tools/fresh-base.sh" || { echo "gpu rehearsal: no $tools/fresh-base.sh"; exit 1; }
base=$FRESH_DIR/root-base
log=$FRESH_DIR/rehearsal.log
t0=$SECONDS
say() { echo "gpu rehearsal: $*"; }
fail() { say "$*"; exit 1; }

run=''
cleanup() {
    fresh_kill_ns
    [[ -n $run ]] && fresh_remove_tree "$run"
}
trap cleanup EXIT

[[ $(id -u) == 0 ]] || fail "needs root (debootstrap, chroot, mounts)"
[[ -e /usr/local/cuda ]] || fail "no /usr/local/cuda on this machine"
if ! command -v debootstrap >/dev/null; then
    { apt-get install -y debootstrap || { apt-get update && apt-get install -y debootstrap; }; } >/dev/null 2>&1 ||
        fail "could not install debootstrap"
fi
mkdir -p "$FRESH_DIR"
: >"$log"

# The image's software, as a recipe: its text is the cache's stamp.
root_recipe() {
    local dir=$1 mirror
    mirror=$(fresh_mirror)
    [[ -n $mirror ]] || { echo "no bookworm source in the host's apt configuration"; return 1; }
    fresh_spawn debootstrap --variant=minbase bookworm "$dir" "$mirror" || return 1
    echo "deb $mirror bookworm main" >"$dir/etc/apt/sources.list"
    cp -L /etc/resolv.conf /etc/hosts "$dir/etc/"
    printf '%s\0' PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
        PIP_CERT=/etc/ssl/certs/host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 \
        >"$FRESH_DIR/build.env"
    # This sandbox reaches PyPI through its own certificate authority: pip gets the host's bundle.
    install -D -m 644 /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/host-ca.crt"
    fresh_in_root --env "$FRESH_DIR/build.env" "$dir" -- bash -ec '
        apt-get update
        apt-get install -y --no-install-recommends gcc g++ make libc6-dev python3 python3-venv
        apt-get clean
        rm -rf /var/lib/apt/lists/*
        python3 -m venv /opt/torch/.venv
        /opt/torch/.venv/bin/pip install --no-cache-dir torch cmake ninja
        /opt/torch/.venv/bin/python3 -c "import torch; print(\"torch\", torch.__version__)"
        rm /etc/ssl/certs/host-ca.crt' || return 1
    for p in libdnnl-dev libjansson-dev zlib1g-dev libopenmpi-dev pkg-config; do
        if dpkg-query --admindir="$dir/var/lib/dpkg" -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
            echo "the root has $p, which the lent image does not"
            return 1
        fi
    done
}
stamp=$(declare -f root_recipe | sha256sum | cut -c1-16)

fresh_lock
[[ ${REHEARSAL_REBUILD:-0} == 1 ]] && fresh_remove_tree "$base"
if [[ $(cat "$base/.stamp" 2>/dev/null) != "$stamp" ]]; then
    say "building the root (once; cached at $base; log $log)"
    fresh_remove_tree "$base.new" && fresh_remove_tree "$base"
    root_recipe "$base.new" >>"$log" 2>&1 || fail "could not build the root (see $log)"
    echo "$stamp" >"$base.new/.stamp"
    mv "$base.new" "$base"
fi

# A throwaway copy, the HEAD cloned into it, and the kit made by the HEAD's script on this machine.
run=$(mktemp -d "$FRESH_DIR/run.XXXXXX")
cp -a "$base" "$run/root" || fail "could not copy the root"
fresh_unlock
work=/srv/rehearsal
mkdir -p "$run/root$work/out"
git clone --quiet --no-hardlinks "$project" "$run/root$work/main" || fail "git clone failed"
head=$(git -C "$project" rev-parse --short=12 HEAD)
(cd "$run/root$work/main" && bash scripts/gpu_kit.sh) >>"$log" 2>&1 || fail "scripts/gpu_kit.sh failed: $(tail -n 1 "$log")"
kit_line=$(grep '^gpu_kit: ' "$log" | tail -n 1 | sed 's/^gpu_kit: //')

cuda=$(readlink -f /usr/local/cuda)
mkdir -p "$run/root$cuda"
ln -sfn "$(readlink /usr/local/cuda)" "$run/root/usr/local/cuda"
printf '%s\0' "PATH=/opt/torch/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    HOME=/root LANG=C.UTF-8 "OUT=$work/out" >"$run/env"
say "running scripts/gpu.sh at $head in the root, without network (log $log)"
fresh_in_root --cuda "$cuda" --env "$run/env" --cwd "$work/main" --timeout 3000 "$run/root" -- \
    unshare --net -- bash scripts/gpu.sh >>"$log" 2>&1 </dev/null
rc=$?
summary=$run/root$work/out/summary.md
[[ -f $summary ]] || fail "gpu.sh wrote no summary (exit $rc; see $log)"
cp "$summary" "$FRESH_DIR/summary.md"

# Every part before the GPU passed; the GPU's say so; the tests that need a device were SKIPPED.
result() { awk -F' *\\| *' -v p="$1" '$2 == p { print $3 }' "$summary"; }
secs() { awk -F' *\\| *' -v p="$1" '$2 == p { print $4 }' "$summary"; }
bad=''
for p in probe kit configure build tests; do [[ $(result "$p") == PASS ]] || bad+=" $p=$(result "$p")"; done
for p in sanitizer kernels "amp-bench mlp" "amp-bench convnet"; do
    [[ $(result "$p") == SKIP ]] || bad+=" $p=$(result "$p")"
done
grep -q 'pip wheel' "$summary" || bad+=" cuDNN/NCCL not from the wheels"
tests=$(sed -n 's/^ctest: //p' "$summary")
[[ -z $bad && $rc == 0 ]] || fail "failed (gpu.sh exit $rc):$bad; see $FRESH_DIR/summary.md and $log"
build_s=$(secs build)
# On 16 cores: the compile steps' total over 16, or the longest single step if that is longer
# (ninja's log: start and end of each step in ms).
est=$(awk '!/^#/ { d = $2 - $1; t += d; if (d > m) m = d } END { e = t / 16; if (m > e) e = m;
    printf "%.0f", e / 1000 + 1 }' "$run/root$work/main/build-gpu/.ninja_log" 2>/dev/null)
say "passed in $((SECONDS - t0)) s (HEAD $head; build $build_s s on $(nproc) cores, about" \
    "${est:-?} s on 16; $tests; kit $kit_line)"
