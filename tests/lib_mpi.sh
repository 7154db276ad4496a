# tests/lib_mpi.sh - sourced by the pipeline tests (t_pipeline.sh, t_pcpipe.sh,
# t_hosts.sh, t_nompi.sh): the environment every mpirun there needs, whether
# the build has the pipeline at all (BUILD must be set), and the local mpirun.
#
# Open MPI refuses root unless told; the test machines run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under AddressSanitizer (make asan): Open MPI leaves its own allocations (in its dlopen'ed
# components, ompi_op_base_op_select, ...) at MPI_Finalize, which LeakSanitizer reports as
# leaks of every process; memory errors and undefined behaviour are still caught there, and
# the engine's own leaks by every other test.
if [ "${MS_SANITIZER:-0}" = 1 ]; then export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"; fi

# mpi_built: whether $BUILD was built with MPI (make MPI=0 builds without it).
mpi_built() { "$BUILD/tests/test_pipe" --built-with-mpi; }
# mpi_or_skip NAME: in a build without MPI, say why NAME does not run, count
# nothing and end the script.
mpi_or_skip() {
    mpi_built && return 0
    echo "$1: not run: this build has no MPI (make MPI=0), so there is no pipeline to test"
    echo "$1: 0 passed, 0 failed"
    exit 0
}
# mpi_local NAME: sets MPI, the mpirun of the tests that run every stage on this
# machine (over shared memory); when mpirun is missing NAME fails with the reason
# and the script ends.
mpi_local() {
    MPI="mpirun --oversubscribe --mca btl self,vader"
    command -v mpirun >/dev/null && return 0
    echo "FAIL: mpirun is missing (make setup installs openmpi-bin)"
    echo "$1: 0 passed, 1 failed"
    exit 1
}
