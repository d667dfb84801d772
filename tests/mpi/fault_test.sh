#!/usr/bin/env bash
# A rank that dies (SIGKILL) or hangs must end the job with a non-zero exit and a message within
# 60 s, never a silent hang. Usage: fault_test.sh MPIEXEC TEST_DDP kill|hang
set -uo pipefail
mpiexec=$1 prog=$2 mode=$3
log=$(mktemp)
start=$(date +%s)
# The hang is detected by the collective timeout (10 s here; 60 s by default).
timeout 120 "$mpiexec" --oversubscribe --allow-run-as-root --bind-to none -x AMP_COMM_TIMEOUT=10 \
    ${ASAN_OPTIONS:+-x ASAN_OPTIONS} \
    -np 2 "$prog" "$mode" >"$log" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
cat "$log"
fail() { echo "fault_test $mode: FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
[[ $rc -ne 124 ]] || fail "the job hung (killed by timeout after 120 s)"
[[ $rc -ne 0 ]] || fail "the job exited 0"
((elapsed <= 60)) || fail "the job took ${elapsed} s to stop (limit 60 s)"
grep -q "went unnoticed" "$log" && fail "a rank finished as if nothing happened"
if [[ $mode == hang ]]; then
    grep -q "ranks not answering: 1 " "$log" || fail "no error naming rank 1 as not answering"
else
    grep -Eqi "signal 9|killed" "$log" || fail "no message about the killed rank"
fi
echo "fault_test $mode: job stopped in ${elapsed} s with exit $rc"
echo "1 passed, 0 failed"
