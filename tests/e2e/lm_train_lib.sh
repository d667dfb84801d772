# What gpt_train_test.sh and llama_train_test.sh share (sourced; they set train, work, tiny,
# sched and again: the arguments of the resuming run, tiny or those without the shape):
#   check DESCRIPTION COMMAND...   counts a pass, or prints FAIL and counts a failure
#   resume NAME ARGS...            12 steps straight against 6 and a resume to 12 by a new
#                                  process: the final step folders' files byte-identical
#   recompute NAME MODE ARGS...    after resume NAME: its first 6 steps with --recompute MODE,
#                                  resumed to 12 without, and its 6 without resumed to 12 with:
#                                  both final step folders byte-identical to NAME's straight run
#                                  (nothing where AMP_E2E_SKIP_RECOMPUTE is set: cudacpu builds)
#   bad / usage DESCRIPTION MESSAGE ARGS...   amp-train refuses ARGS with exit code 1 / 2 and
#                                  MESSAGE on stderr
pass=0 fail=0
check() {
    if "${@:2}"; then pass=$((pass + 1)); else echo "FAIL: $1" >&2; fail=$((fail + 1)); fi
}
resume() {
    local name=$1 dir="$work/resume-$1" f
    shift
    "$train" "${tiny[@]}" "${sched[@]}" "$@" --max-steps 12 --checkpoint-dir "$dir/straight" >"$dir.straight" 2>&1
    "$train" "${tiny[@]}" "${sched[@]}" "$@" --max-steps 6 --checkpoint-dir "$dir/resumed" >"$dir.first" 2>&1
    "$train" "${again[@]}" "${sched[@]}" "$@" --max-steps 12 --checkpoint-dir "$dir/resumed" \
        --resume latest >"$dir.second" 2>&1
    for f in "$dir"/straight/step-0000012/*; do
        check "$name: ${f##*/} differs after resuming at step 6" \
            cmp "$f" "$dir/resumed/step-0000012/${f##*/}"
    done
    check "$name: the second run did not resume" grep -q "resumed from" "$dir.second"
}
recompute() {
    local name=$1 mode=$2 dir="$work/recompute-$1-$2" f
    shift 2
    if [[ -n ${AMP_E2E_SKIP_RECOMPUTE:-} ]]; then
        echo "recompute $name $mode: left out in this build (AMP_E2E_SKIP_RECOMPUTE)"
        return
    fi
    "$train" "${tiny[@]}" "${sched[@]}" "$@" --recompute "$mode" --max-steps 6 \
        --checkpoint-dir "$dir/first" >"$dir.first" 2>&1
    "$train" "${again[@]}" "${sched[@]}" "$@" --max-steps 12 --checkpoint-dir "$dir/first" \
        --resume latest >"$dir.second" 2>&1
    "$train" "${again[@]}" "${sched[@]}" "$@" --recompute "$mode" --max-steps 12 \
        --checkpoint-dir "$dir/then" --resume "$work/resume-$name/resumed/step-0000006" \
        >"$dir.then" 2>&1
    check "$name: --recompute $mode not in the start line" grep -q " recomputed" "$dir.first"
    check "$name: --json's recompute" grep -q "\"recompute\": \"$mode\"" "$dir.then"
    for f in "$work/resume-$name"/straight/step-0000012/*; do
        check "$name: ${f##*/} differs with the first 6 steps recomputed ($mode)" \
            cmp "$f" "$dir/first/step-0000012/${f##*/}"
        check "$name: ${f##*/} differs with the last 6 steps recomputed ($mode)" \
            cmp "$f" "$dir/then/step-0000012/${f##*/}"
    done
}
refused() { # exit code, what it is, description, wanted message, amp-train arguments...
    local code=$1 kind=$2 what=$3 want=$4 rc=0
    shift 4
    "$train" "$@" >"$work/bad.out" 2>"$work/bad.err" || rc=$?
    check "$what: exit code $rc, want $code$kind" test "$rc" -eq "$code"
    check "$what: no '$want' in: $(head -c 400 "$work/bad.err")" grep -q -- "$want" "$work/bad.err"
}
bad() { refused 1 "" "$@"; }
usage() { refused 2 " (a usage error)" "$@"; }
