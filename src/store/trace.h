/* store/trace.h - the expert request trace: writing it, replaying it.
 *
 * Owns: the text format of a trace, its writer (used by the store when
 *   params.trace_path is set) and the replayer that runs a trace through a
 *   cache of any capacity under any policy, or under Belady's MIN.
 * Format (text, one request per line, '#' lines are comments):
 *
 *     # moestream expert trace v1
 *     # batch region
 *     0 17
 *     0 23
 *     1 5
 *
 *   `batch` numbers the store's acquire_batch calls that asked for experts
 *   (0, 1, 2, ...); consecutive lines with the same batch number were
 *   requested together, in the order the caller gave them; `region` is the
 *   store's region id (the store does not know layers or experts). Regions of
 *   one batch are distinct. Prefetch hints, guesses and touches
 *   (ms_store_touch, after a prompt chunk) are not traced: the trace is the
 *   demand stream, so the hit count of a live run that used them can differ
 *   from its replay's.
 * Replay semantics are the live cache's: a batch's hits are found and pinned
 *   first, then its misses take slots in order (FREE slots first, then the
 *   policy's victims among slots not used by the batch); lru / s3fifo drive
 *   the very slot directory the store uses (store/cache.c). "belady" (alias
 *   "min") evicts the resident region whose next request is farthest in the
 *   future: no demand-fetch policy of the same capacity hits more often, so
 *   it is the ceiling to compare against.
 * Does not: know what a region is; replay prefetching.
 */
#ifndef MS_STORE_TRACE_H
#define MS_STORE_TRACE_H

#include "base/err.h"

#include <stdint.h>

typedef struct ms_trace_writer ms_trace_writer;

/* Create (truncate) the trace file at `path` and write its header.
 * Errors: MS_E_IO (cannot create), MS_E_NOMEM. Allocates. */
ms_status ms_trace_open(const char *path, ms_trace_writer **out, ms_err *err);

/* Append one batch: n lines "batch region". Buffered; a write error is
 * remembered and reported by ms_trace_close (later writes are dropped).
 * Allocates nothing. */
void ms_trace_write(ms_trace_writer *w, int64_t batch, const int *regions, int n);

/* Flush and close; MS_E_IO with the path and cause if any write failed.
 * NULL is a no-op returning MS_OK. */
ms_status ms_trace_close(ms_trace_writer *w, ms_err *err);

typedef struct ms_trace_result {
    int64_t requests, hits, misses, batches, evictions;
    int max_batch;          /* most requests in one batch */
    int n_regions;          /* distinct regions in the trace */
    double hit_rate;        /* hits / requests (0 for an empty trace) */
} ms_trace_result;

/* Replay the trace at `path` through a cache of `capacity` slots under
 * `policy` ("lru", "s3fifo", "belady" or "min") and fill *res.
 * Errors: MS_E_IO (cannot read), MS_E_MODEL (malformed line, with its number;
 * a region twice in one batch; batch numbers going down), MS_E_USAGE (unknown
 * policy, capacity < 1 or smaller than the largest batch), MS_E_NOMEM.
 * Allocates (the whole trace is loaded). */
ms_status ms_trace_replay(const char *path, const char *policy, int capacity,
                          ms_trace_result *res, ms_err *err);

#endif
