/* bench/bench_util.h - the two helpers every benchmark program needs: a
 * monotonic clock in seconds and "8G"-style sizes. Header-only (static),
 * so each program stays one file plus this; nothing of the engine. */
#ifndef MS_BENCH_UTIL_H
#define MS_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "8G" (K/M/G/T: powers of 1024, an optional trailing B) -> bytes; -1 when malformed */
static inline int64_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    double b = v * mul;
    return b > 9.0e18 ? -1 : (int64_t)b;
}

#endif
