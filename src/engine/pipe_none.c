/* engine/pipe_none.c - the pipeline's entry points in a build without MPI
 * (make MPI=0), in place of engine/pipe.c.
 *
 * Owns nothing and registers no hooks, so every engine is one process. A
 * pipeline cannot run: started under mpirun with more than one process, or
 * asked for a pipeline's options (--stages, --stage-groups), the process says
 * "built without MPI" and exits with status 2 (a usage error: the command
 * line asks for what this build does not have). `plan --pipeline N` still
 * works: it needs only the layer split (engine/split.c).
 * Does not: read anything but the environment mpirun sets.
 */
#include "engine/engine_int.h"

#include <stdio.h>
#include <stdlib.h>

const int ms_pipe_built = 0;

int ms_pipe_boot(int *argc, char ***argv) {
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n) n = getenv("PMI_SIZE");
    if (n && atoi(n) > 1) {
        fprintf(stderr, "moestream: built without MPI: cannot run as one of %d pipeline stages (rebuild with Open MPI"
                " installed, make MPI=1)\n", atoi(n));
        exit(2);
    }
    return 0;
}

int ms_pipe_rank(void) { return 0; }
void ms_pipe_set_state_piece(int64_t floats) { (void)floats; }
int ms_pipe_size(void) { return 1; }

void ms_pipe_serve_if_worker(const ms_engine_params *p) {
    if (p->stages || p->stage_groups) {
        fprintf(stderr, "moestream: %s: built without MPI (a pipeline's option; rebuild with Open MPI installed,"
                " make MPI=1)\n", p->stages ? "--stages" : "--stage-groups");
        exit(2);
    }
}

/* The forward's pass to the other stages (engine.c's fwd_ctx names it):
 * never called, since no engine of this build has a pipeline up. */
ms_status ms_pipe_pass(const ms_fwd_ctx *c, ms_pass_op op, const ms_fseg *seg, int nseg, int64_t T, float *run,
                       float *bank, int64_t nb_max, int *nb, ms_err *err) {
    return ms_err_set(err, MS_E_INTERNAL, "built without MPI: no pipeline");
}
