# tests/lib.sh - sourced by every tests/t_*.sh (from the repository root): the
# pass / fail counters and the three functions every script reports with.
#
# ok             one check passed
# bad MESSAGE    one check failed: prints "FAIL: MESSAGE"
# finish         prints "NAME: N passed, N failed" (NAME: the script's file name
#                without .sh), the line tests/run.sh reads, and exits 0 only
#                when nothing failed
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
finish() { echo "$(basename "$0" .sh): $pass passed, $fail failed"; [ "$fail" = 0 ]; exit $?; }
