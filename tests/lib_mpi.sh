# tests/lib_mpi.sh - sourced by the pipeline tests (t_pipeline.sh, t_hosts.sh):
# the environment every mpirun there needs.
#
# Open MPI refuses root unless told; the test machines run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under AddressSanitizer (make asan): Open MPI leaves its own allocations (in its dlopen'ed
# components, ompi_op_base_op_select, ...) at MPI_Finalize, which LeakSanitizer reports as
# leaks of every process; memory errors and undefined behaviour are still caught there, and
# the engine's own leaks by every other test.
if [ "${MS_SANITIZER:-0}" = 1 ]; then export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"; fi
