/* base/pool.h - a fixed thread pool for data-parallel loops.
 *
 * Owns: n_threads - 1 worker threads; the calling thread is worker 0.
 * Idea: ms_pool_for(pool, n, fn, ctx) splits [0, n) into n_threads contiguous
 *   parts (static partition) and runs fn(ctx, begin, end) on each, returning
 *   when all are done. Work items must be independent: results never depend
 *   on the partition, so output bits do not depend on the thread count.
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

/* Run fn over [0, n) split into at most n_threads parts; each part's length is
 * a multiple of `grain` (except the last). Blocks until done. */
void ms_pool_for(ms_pool *p, int64_t n, int64_t grain, ms_pool_fn fn, void *ctx);

#endif
