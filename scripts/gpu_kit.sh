#!/usr/bin/env bash
# Prepares .gpu-kit/ (ignored by git): what scripts/gpu.sh needs on the lent GPU machine and that
# machine lacks. Its image has CUDA's toolkit, CMake, ninja and a Python with PyTorch and NVIDIA's
# cuDNN and NCCL wheels, but none of Debian's development packages, and nothing can be fetched
# there; only the working tree and up to 8 carried ignored paths travel, 64 MiB in all.
#   .gpu-kit/debs/       Debian's packages of the libraries libamp builds against (oneDNN with the
#                        OpenCL loader its package config asks for, jansson, zlib's headers, Open
#                        MPI's library and headers with hwloc and libevent), from apt-get download;
#                        gpu.sh unpacks them into a prefix with dpkg -x, never over /
#   .gpu-kit/fallback/   packages of libraries every Linux image has (zlib, libudev): unpacked
#                        beside the prefix, and used only for a library the image turns out to lack
#   .gpu-kit/fashion-mnist/  the first 2048 training and 1024 test images of Fashion-MNIST, for the
#                        GPU tests that train on real images (amp-bench's figures use synthetic ones)
#   .gpu-kit/MANIFEST    what is in it, with versions and sizes
# Open MPI travels as a library only: on one GPU every process is a world of one, which never
# calls MPI_Init (parallel/comm.c), so no launcher and none of Open MPI's plugins are needed.
# Checks that every library the kit's libraries need is in the kit or is the C runtime or the
# compiler's (which the image's gcc brings), and that the kit and the working tree fit in 64 MiB.
# Needs apt's package lists (runs apt-get update when there are none) and the Fashion-MNIST data set
# (scripts/setup.sh installs it). Run it again after changing the lists below.
set -euo pipefail
cd "$(dirname "$0")/.."

kit=.gpu-kit
rm -rf "$kit.new"
always=(libdnnl2 libdnnl-dev ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers
    libjansson4 libjansson-dev zlib1g-dev libopenmpi3 libopenmpi-dev libhwloc15
    libevent-core-2.1-7 libevent-pthreads-2.1-7)
fallback=(zlib1g libudev1)
# What the image's C compiler and C library provide; a library the kit needs beyond these and its
# own files makes the check below fail.
runtime='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libgomp)\.so\.[0-9]+$|^ld-linux-x86-64\.so\.2$'
data=${AMP_DATA:-/usr/share/datasets/fashion-mnist}
limit_mib=64

say() { echo "gpu_kit: $*"; }
die() { echo "gpu_kit: $*" >&2; exit 1; }

[[ -f $data/train-images-idx3-ubyte.gz ]] || die "no Fashion-MNIST in $data (scripts/setup.sh installs it)"
if ! apt-cache show libdnnl2 >/dev/null 2>&1; then
    say "apt has no package lists: apt-get update"
    apt-get update >/dev/null
fi

mkdir -p "$kit.new/debs" "$kit.new/fallback" "$kit.new/fashion-mnist"
download() {
    local dir=$1
    shift
    # The sandbox user cannot write into a root-owned folder; the files are checked below anyway.
    (cd "$dir" && apt-get -q -o APT::Sandbox::User=root download "$@" >/dev/null) ||
        die "apt-get download $* failed"
}
download "$kit.new/debs" "${always[@]}"
download "$kit.new/fallback" "${fallback[@]}"

# The check: unpack everything into a scratch prefix and read each shared library's NEEDED
# entries. Open MPI's plugins (openmpi/lib/openmpi3/) and the libmca_common_* libraries only they
# link are left out: MPI_Init loads them, and a world of one never calls it.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch" "$kit.new"' EXIT
for deb in "$kit.new"/debs/*.deb "$kit.new"/fallback/*.deb; do dpkg -x "$deb" "$scratch"; done
libdir=$scratch/usr/lib/x86_64-linux-gnu
provided=$( (find "$scratch" \( -type f -o -type l \) -name 'lib*.so*' -printf '%f\n') | sort -u)
missing=()
while IFS= read -r lib; do
    while IFS= read -r needed; do
        [[ $needed =~ $runtime ]] && continue
        grep -qxF "$needed" <<<"$provided" || missing+=("$needed (needed by ${lib#"$scratch"/})")
    done < <(readelf -d "$lib" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done < <(find "$libdir" -maxdepth 3 -type f -name 'lib*.so*' -not -path '*/openmpi3/*' \
    -not -name 'libmca_common_*')
((${#missing[@]} == 0)) || die "libraries the kit needs but does not carry: ${missing[*]}"
[[ -f $libdir/cmake/dnnl/dnnl-config.cmake && -f $scratch/usr/include/jansson.h &&
    -f $scratch/usr/include/zlib.h && -f $scratch/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ]] ||
    die "the packages lack a header or package config libamp's build looks for"

# A Fashion-MNIST subset in the data set's own format (gzip'd IDX, counts rewritten).
python3 - "$data" "$kit.new/fashion-mnist" <<'EOF'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for prefix, n in (("train", 2048), ("t10k", 1024)):
    for kind, item in (("images-idx3-ubyte", 784), ("labels-idx1-ubyte", 1)):
        name = f"{prefix}-{kind}.gz"
        raw = gzip.open(f"{src}/{name}").read()
        dims = raw[3]
        head = bytearray(raw[:4 + 4 * dims])
        struct.pack_into(">I", head, 4, n)
        body = raw[4 + 4 * dims:4 + 4 * dims + n * item]
        with open(f"{dst}/{name}", "wb") as f:
            f.write(gzip.compress(bytes(head) + body, mtime=0))
EOF

{
    echo "# .gpu-kit, made by scripts/gpu_kit.sh on $(date -u +%FT%TZ) from $(. /etc/os-release && echo "$PRETTY_NAME")"
    for deb in "$kit.new"/debs/*.deb "$kit.new"/fallback/*.deb; do
        printf '%s %s %s %s\n' "$(basename "$(dirname "$deb")")" \
            "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" "$(stat -c %s "$deb")"
    done
    echo "fashion-mnist train 2048 test 1024 $(du -cb "$kit.new"/fashion-mnist/* | tail -n 1 | cut -f1)"
} >"$kit.new/MANIFEST"

rm -rf "$kit"
mv "$kit.new" "$kit"

kit_bytes=$(du -sb "$kit" | cut -f1)
tree_bytes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } |
    xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
total=$((kit_bytes + tree_bytes))
say "$kit: $(awk -v b="$kit_bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB" \
    "($(ls "$kit"/debs | wc -l) packages, $(ls "$kit"/fallback | wc -l) fallbacks, Fashion-MNIST subset);" \
    "with the working tree $(awk -v b="$total" 'BEGIN { printf "%.1f", b / 1048576 }') MiB of the $limit_mib that travel"
((total < limit_mib * 1048576)) || die "the kit and the working tree exceed $limit_mib MiB"
