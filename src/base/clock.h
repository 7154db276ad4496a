/* base/clock.h - the monotonic clock every timed counter reads. */
#ifndef MS_BASE_CLOCK_H
#define MS_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t ms_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline double ms_now_s(void) { return 1e-9 * (double)ms_now_ns(); }

#endif
