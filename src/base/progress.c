/* base/progress.c - see progress.h. */
#include "base/progress.h"

#include "base/clock.h"

static _Thread_local ms_progress_fn progress_fn;
static _Thread_local void *progress_user;

void ms_progress_set(ms_progress_fn fn, void *user) {
    progress_fn = fn;
    progress_user = user;
}

int ms_progress_on(void) { return progress_fn != NULL; }

void ms_progress_begin(ms_progress_step *ps, const char *step, int64_t total, int64_t n_chunks) {
    ps->step = step;
    ps->total = total;
    ps->n_chunks = n_chunks;
    ps->t0 = progress_fn ? ms_now_s() : 0.0;
    ms_progress_report(ps, 0, 0, 0);
}

void ms_progress_report(const ms_progress_step *ps, int64_t done, int64_t chunk, int64_t bytes) {
    if (!progress_fn) return;
    const ms_progress p = { ps->step, done, ps->total, chunk, ps->n_chunks, bytes, ms_now_s() - ps->t0 };
    progress_fn(progress_user, &p);
}
