#!/usr/bin/env bash
# tests/run.sh - runs every test and prints the closing line "N passed, N failed".
#
# 1. builds the test data (tiny checkpoints + goldens from the Python reference)
#    into $BUILD/testdata unless it is already current;
# 2. runs every C test binary $BUILD/tests/test_* and every script tests/t_*.sh;
#    each prints one line "NAME: N passed, N failed"; the counts are summed.
# A binary that crashes or prints no count line counts as one failure.
# With TSAN=1 only the binaries listed in tests/tsan.list run.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export MS_BUILD=$BUILD
export MS_TESTDATA=$BUILD/testdata
export MS_BIN=$BUILD/moestream
export PYTHON=/usr/bin/python3

if ! bash tests/make_testdata.sh "$MS_TESTDATA"; then
    echo "test data generation failed"
    echo "0 passed, 1 failed"
    exit 1
fi

total_pass=0; total_fail=0
run_one() {   # name, command...
    local name=$1; shift
    local out rc line p f
    local t0=$(date +%s)
    out=$("$@" 2>&1); rc=$?
    line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        printf '%s\n' "$out" | tail -n 20
        echo "$name: no result line (exit $rc)"
        total_fail=$((total_fail + 1)); return
    fi
    p=$(printf '%s' "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
    f=$(printf '%s' "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
    if [ "$f" != 0 ] || [ $rc -ne 0 ]; then
        printf '%s\n' "$out" | grep -E 'FAIL|error|Error' | head -n 30
        [ "$f" = 0 ] && f=1
    fi
    echo "$name: $p passed, $f failed ($(( $(date +%s) - t0 ))s)"
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
}

# Under a sanitizer, tests listed in tests/nosan.list do not apply (e.g. an
# address-space limit cannot hold AddressSanitizer's shadow reservation).
skip_san() { [ "${MS_SANITIZER:-0}" = 1 ] && grep -qx "$1" tests/nosan.list 2>/dev/null; }

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    if [ "${TSAN:-0}" = 1 ] && ! grep -qx "$name" tests/tsan.list 2>/dev/null; then continue; fi
    run_one "$name" "$t"
done
if [ "${TSAN:-0}" != 1 ]; then
    for t in tests/t_*.sh; do
        [ -f "$t" ] || continue
        if skip_san "$(basename "$t" .sh)"; then echo "$(basename "$t" .sh): not run under a sanitizer (tests/nosan.list)"; continue; fi
        run_one "$(basename "$t" .sh)" bash "$t"
    done
fi
echo "$total_pass passed, $total_fail failed"
[ $total_fail -eq 0 ]
