#!/usr/bin/env bash
# tests/t_nompi.sh - a build without MPI (make MPI=0) refuses a pipeline,
# plainly, and still plans one.
#
#  1. under mpirun's environment with more than one process (and under
#     mpirun itself, where there is one), `run` exits 2 saying "built without
#     MPI"; with one process it runs;
#  2. a pipeline's options (--stages, --stage-groups) exit 2 the same way, for
#     run and serve;
#  3. `plan --pipeline 2` prints a row per stage, as with MPI.
# In a build with MPI it says so and counts nothing (t_pipeline.sh tests the
# pipeline there).
# Prints "t_nompi: N passed, N failed" as its last line.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
TD=${MS_TESTDATA:-$BUILD/testdata}
. tests/lib.sh
. tests/lib_mpi.sh
if mpi_built; then
    echo "t_nompi: not run: this build has MPI (the refusals of make MPI=0 are checked in such a build)"
    echo "t_nompi: 0 passed, 0 failed"
    exit 0
fi
m=models/k3-tiny
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

refused() {   # tag, env/command...: exit 2 and "built without MPI" on stderr
    local tag=$1; shift
    "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
    [ $rc -eq 2 ] && grep -q 'built without MPI' "$tmp/err" && ok \
        || bad "$tag: exit $rc, stderr: $(head -c 300 "$tmp/err")"
}

# 1. mpirun's environment, as each process of `mpirun -np 2` sees it
refused "OMPI_COMM_WORLD_SIZE=2" env OMPI_COMM_WORLD_SIZE=2 "$BIN" run "$m" --ids 1,2,3 --gen 2 --quiet
refused "PMI_SIZE=3" env PMI_SIZE=3 "$BIN" run "$m" --ids 1,2,3 --gen 2 --quiet
env OMPI_COMM_WORLD_SIZE=1 "$BIN" run "$m" --ids 1,2,3 --gen 2 --quiet > /dev/null 2>&1 && ok \
    || bad "one process under mpirun's environment does not run"
if command -v mpirun >/dev/null; then
    out=$(mpirun --oversubscribe --mca btl self,vader -np 2 "$BIN" run "$m" --ids 1,2,3 --gen 2 --quiet 2>&1); rc=$?
    [ $rc -ne 0 ] && printf '%s' "$out" | grep -q 'built without MPI' && ok \
        || bad "mpirun -np 2: exit $rc, $(printf '%s' "$out" | head -c 300)"
fi

# 2. a pipeline's options
refused "run --stages" "$BIN" run "$m" --ids 1,2,3 --gen 2 --quiet --stages 4
refused "run --stage-groups" "$BIN" run "$m" --ids 1,2,3 --gen 2 --quiet --stage-groups 2
refused "serve --stages" "$BIN" serve "$m" --port 0 --stages 4

# 3. plan --pipeline needs no MPI
"$BIN" plan "$m" --ram 256M --pipeline 2 > "$tmp/plan" 2>&1; rc=$?
[ $rc -eq 0 ] && [ "$(grep -cE '^ +[01]  ' "$tmp/plan")" = 2 ] && ok \
    || bad "plan --pipeline 2: exit $rc, $(head -c 300 "$tmp/plan")"
"$BIN" plan "$m" --pipeline 2 --stages 3 > "$tmp/plan" 2>&1 && grep -qE '^ +1  3-' "$tmp/plan" && ok \
    || bad "plan --pipeline 2 --stages 3: $(head -c 300 "$tmp/plan")"

echo "t_nompi: $pass passed, $fail failed"
[ $fail -eq 0 ]
