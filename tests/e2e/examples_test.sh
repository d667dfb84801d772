#!/usr/bin/env bash
# The hand-written-model examples (examples/resnet.c, examples/mlp_groups.c): N steps in one run
# against K steps, then a new process that resumes from the checkpoint and goes on to N; the two
# final checkpoints must be byte-identical. With a launcher (MPIEXEC=...) every run is DDP over
# 2 ranks. ACCURACY=P also trains the resnet one epoch (its cosine schedule over that epoch) and
# wants at least P % test accuracy. Exits 77 (SKIPPED) without the Fashion-MNIST data set.
#   examples_test.sh WORKDIR N K RESNET MLP_GROUPS
set -euo pipefail
work=$1 n=$2 k=$3
shift 3
data=${AMP_DATA:-/usr/share/datasets/fashion-mnist}
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "examples_test: SKIPPED: no data set in $data"; exit 77; }
launch=()
[[ -n ${MPIEXEC:-} ]] && launch=("$MPIEXEC" --oversubscribe --allow-run-as-root --bind-to none
                                ${ASAN_OPTIONS:+-x ASAN_OPTIONS} -np 2)
rm -rf "$work" && mkdir -p "$work"
pass=0 fail=0
check() { # description, command...
    if "${@:2}"; then pass=$((pass + 1)); else echo "FAIL: $1" >&2; fail=$((fail + 1)); fi
}
for program in "$@"; do
    name=$(basename "$program")
    run() { "${launch[@]}" "$program" --data "$data" --threads 1 --steps "$n" "$@"; }
    run --no-eval --ckpt "$work/$name/straight" >"$work/$name-straight.log" 2>&1
    run --no-eval --ckpt "$work/$name/resumed" --stop-at "$k" >"$work/$name-first.log" 2>&1
    run --ckpt "$work/$name/resumed" --resume >"$work/$name-second.log" 2>&1
    cat "$work/$name-second.log"
    final=$(printf 'step-%07d' "$n")
    for f in model.safetensors state.safetensors; do
        check "$name: $f differs after resuming at step $k" \
            cmp "$work/$name/straight/$final/$f" "$work/$name/resumed/$final/$f"
    done
    check "$name: the second run did not resume at step $k" grep -q "resumed at step $k" "$work/$name-second.log"
    check "$name: no test accuracy" grep -q "test accuracy" "$work/$name-second.log"
    if [[ -n ${MPIEXEC:-} ]]; then
        check "$name: more than one rank printed" test "$(grep -c 'test accuracy' "$work/$name-second.log")" -eq 1
    fi
done
if [[ -n ${ACCURACY:-} ]]; then
    "${launch[@]}" "$1" --data "$data" --threads 2 --epochs 1 >"$work/full.log" 2>&1
    cat "$work/full.log"
    acc=$(sed -n 's/^test accuracy: \([0-9.]*\) %.*/\1/p' "$work/full.log")
    check "resnet: test accuracy '$acc' % after an epoch, want >= $ACCURACY" \
        awk -v a="${acc:-0}" -v w="$ACCURACY" 'BEGIN { exit !(a >= w) }'
fi
echo "examples_test: $pass passed, $fail failed"
((fail == 0))
