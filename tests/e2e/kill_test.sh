#!/usr/bin/env bash
# amp-train killed with SIGKILL at random moments while it saves every few steps, every run
# started with the same command line, `--resume latest` included (a requeued Slurm job), until
# one run finishes: every trial must end byte-identical to an uninterrupted run. A run killed
# before a save completed leaves no `latest`, perhaps a temporary folder: the next run must start
# from step 0, say so, and clear the leftover; a torn checkpoint makes amp-train fail its load,
# which fails the trial. The first trial's first kill comes before the first save, and the
# temporary folder that a kill in the middle of that save leaves is planted beside it.
#   kill_test.sh AMP_TRAIN WORKDIR TRIALS [amp-train arguments...]
# KILLS (5): kills per trial (fewer when the runs reach the end first; a run that ends before
# its kill is not one), each at a random moment of the run (kill_moment), then a last run;
# KILL_STEPS (90), KILL_SEED (1). Exits 77 (SKIPPED) without the Fashion-MNIST data set.
set -euo pipefail
train=$1 work=$2 trials=$3
shift 3
data=${AMP_DATA:-/usr/share/datasets/fashion-mnist}
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "kill_test: SKIPPED: no data set in $data"; exit 77; }
steps=${KILL_STEPS:-90} per_trial=${KILLS:-5}
rm -rf "$work"
mkdir -p "$work"
common=(--model convnet --epochs 1 --batch-size 32 --threads 2 --no-eval --data "$data"
    --max-steps "$steps" --save-every 3 --keep 2 "$@")
seconds() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'; }
started=$(date +%s.%N)
"$train" "${common[@]}" --max-steps 1 --checkpoint-dir "$work/startup" >"$work/startup.log" 2>&1
startup=$(seconds "$started") # reading the data set, building the model: before any save
started=$(date +%s.%N)
"$train" "${common[@]}" --checkpoint-dir "$work/reference" >"$work/reference.log" 2>&1
span=$(seconds "$started")
final=$(printf 'step-%07d' "$steps")
RANDOM=${KILL_SEED:-1}
pass=0 fail=0 kills=0
check() { if "${@:2}"; then pass=$((pass + 1)); else echo "FAIL: $1" >&2; fail=$((fail + 1)); fi; }
# saved = the step `latest` names in the trial's folder (0 when none); nap S: a sleep of S
# seconds without a process (a read that times out on a pipe nobody writes): the polls below
# cost no forks.
read_saved() {
    local name=
    [[ -f $dir/latest ]] && read -r name <"$dir/latest" || true
    name=${name#step-}
    saved=$((10#${name:-0}))
}
exec {nap_fd}<> <(:)
nap() { read -r -t "$1" -u "$nap_fd" _ || true; }
# Waits for a random moment of run pid's life: one time in four a moment of its start (as long
# as a run of one step takes), before its first save; else, after k of the saves it has left
# (from the second to the one before its last), a random part of the time its last two saves
# took apart. Progress, not a clock, so that a run of a loaded machine is still killed before it
# ends.
kill_moment() {
    local pid=$1 from left k seen at=$EPOCHREALTIME before=$EPOCHREALTIME
    read_saved
    from=$saved
    left=$(((steps - from) / 3))
    k=0
    if ((left > 2 && RANDOM % 4 != 0)); then k=$((2 + RANDOM % (left - 2))); fi
    if ((k == 0)); then
        sleep "$(awk -v r=$RANDOM -v s="$startup" 'BEGIN { printf "%.3f", s * r / 32767 }')"
        return
    fi
    seen=$from
    while ((seen < from + 3 * k)) && kill -0 "$pid" 2>/dev/null; do
        read_saved
        if ((saved != seen)); then seen=$saved before=$at at=$EPOCHREALTIME; fi
        nap 0.002
    done
    sleep "$(awk -v r=$RANDOM -v a="$before" -v b="$at" 'BEGIN { printf "%.4f", (b - a) * r / 32767 }')"
}
# One run of the trial's command line; exec, so that a run in the background is amp-train itself
# (its pid the one killed), not a subshell whose amp-train would go on without it.
run_one() { exec "$train" "${common[@]}" --checkpoint-dir "$dir" --resume latest >>"$dir.log" 2>&1; }
for ((t = 1; t <= trials; t++)); do
    dir=$work/trial-$t leftover= n=0
    # per_trial kills (a run that ends before its kill came is not one), unless the runs reach
    # the end first; then the last run, which must finish.
    while ((n < per_trial)) && [[ $(cat "$dir/latest" 2>/dev/null) != "$final" ]]; do
        run_one &
        pid=$!
        if ((t == 1 && n == 0)); then
            sleep 0.01 # amp-train is still reading the data set: no step, no save
        else
            kill_moment "$pid"
        fi
        if kill -9 "$pid" 2>/dev/null; then
            n=$((n + 1)) kills=$((kills + 1))
            wait "$pid" 2>/dev/null || true
        elif ! wait "$pid"; then
            echo "FAIL: trial $t: amp-train failed after $n kills (log $dir.log)" >&2
            fail=$((fail + 1))
            continue 2
        fi
        if ((t == 1 && n == 1)) && [[ -z $leftover ]]; then
            check "trial 1: the first kill came after a save" test ! -e "$dir/latest"
            leftover=$dir/.tmp-step-0000003-$pid-0 # as a kill in the first save leaves it
            mkdir -p "$leftover"
            head -c 100 /dev/zero >"$leftover/model.safetensors"
        fi
    done
    if ! (run_one); then
        echo "FAIL: trial $t: the last run failed after $n kills (log $dir.log)" >&2
        fail=$((fail + 1))
        continue
    fi
    if cmp -s "$work/reference/$final/model.safetensors" "$dir/$final/model.safetensors" &&
        cmp -s "$work/reference/$final/state.safetensors" "$dir/$final/state.safetensors"; then
        pass=$((pass + 1))
    else
        echo "FAIL: trial $t: final checkpoint differs from the uninterrupted run" >&2
        fail=$((fail + 1))
    fi
    if [[ -n $leftover ]]; then
        check "trial 1: no 'starting from step 0' after the kill before the first save" \
            grep -q "no checkpoint has completed in .*starting from step 0" "$dir.log"
        check "trial 1: the killed save's temporary folder is still there" test ! -e "$leftover"
    fi
done
fresh=$(cat "$work"/trial-*.log | grep -c "starting from step 0" || true)
echo "kill_test: $trials trials, $kills kills ($fresh runs started from step 0; the start" \
    "${startup} s, a whole run ${span} s); $pass passed, $fail failed"
((fail == 0))
