/* base/pool.h - a fixed thread pool for data-parallel loops.
 *
 * Owns: n_threads - 1 worker threads; the calling thread is worker 0.
 * Idea: ms_pool_for(pool, n, fn, ctx) cuts [0, n) into up to 16 x n_threads
 *   contiguous chunks and the threads (the caller included) take them one by
 *   one until none is left (dynamic, so a thread that lost its core to another
 *   process does not hold the loop up), returning when all are done. Which
 *   thread runs which chunk varies from call to call: work items must be
 *   independent, so results never depend on the partition and output bits do
 *   not depend on the thread count or the schedule. Idle threads spin for
 *   a few tens of microseconds before they sleep (jobs come back to back).
 * Invariants: one ms_pool_for at a time per pool (callers serialise);
 *   fn is never called with an empty range.
 * Does not: allocate per call.
 */
#ifndef MS_BASE_POOL_H
#define MS_BASE_POOL_H

#include "base/err.h"

#include <stdint.h>

typedef struct ms_pool ms_pool;
typedef void (*ms_pool_fn)(void *ctx, int64_t begin, int64_t end);

/* n_threads >= 1. */
ms_status ms_pool_open(int n_threads, ms_pool **out, ms_err *err);
void ms_pool_close(ms_pool *p);
int ms_pool_n_threads(const ms_pool *p);

/* Run fn over [0, n) split into chunks whose length is a multiple of `grain`
 * (except the last), from at most n_threads threads at once. Blocks until
 * done. */
void ms_pool_for(ms_pool *p, int64_t n, int64_t grain, ms_pool_fn fn, void *ctx);

#endif
