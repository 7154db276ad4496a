/* base/progress.h - reports of slow steps to the function the program set
 * with ms_progress_set (include/moestream.h).
 *
 * Owns:        the calling thread's progress function (thread-local), and
 *              the start time of the step being reported.
 * Invariants:  a report never changes what the step computes; without a
 *              function set every call here is a test and a return.
 * Does not:    print, rate-limit (the program draws as often as it likes),
 *              or reach other threads (a server's workers report nothing).
 */
#ifndef MS_BASE_PROGRESS_H
#define MS_BASE_PROGRESS_H

#include "moestream.h"

/* A step in progress: begin it, then report as pieces complete. */
typedef struct ms_progress_step {
    const char *step;
    int64_t total, n_chunks;
    double t0;
} ms_progress_step;

/* 1 when the calling thread has a progress function (the callers then skip
 * their own periodic log line). */
int ms_progress_on(void);
/* Start a step of `total` units (n_chunks passes for "prompt", else 0) and
 * report done = 0. */
void ms_progress_begin(ms_progress_step *ps, const char *step, int64_t total, int64_t n_chunks);
/* done units; "prompt": chunk passes done and bytes read (else chunk 0 and
 * bytes = done). */
void ms_progress_report(const ms_progress_step *ps, int64_t done, int64_t chunk, int64_t bytes);

#endif
