/* bench/bench_util.h - the helpers every benchmark program needs: a
 * monotonic clock and the calling thread's CPU time in seconds, and "8G"-style
 * sizes. Header-only (static), so
 * each program stays one file plus this; the sizes are the engine's parser
 * (ms_parse_size, base/size.c), which a program that calls parse_size links from the
 * library. */
#ifndef MS_BENCH_UTIL_H
#define MS_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "moestream.h"

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread, in seconds: what a kernel costs on its own
 * core, whatever else the machine runs */
static inline double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "8G"-style sizes: the engine's own parser, so a unit means what it means on the
 * command line (ms_parse_size, base/size.c) */
static inline int64_t parse_size(const char *s) { return ms_parse_size(s); }

#endif
