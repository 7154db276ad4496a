/* store/store.h - where weight bytes live between the disk and the model.
 *
 * Owns: every weight byte the model reads. The model describes what it needs
 *   as REGIONS (a set of byte ranges of the checkpoint that are used together:
 *   one layer's dense part, one routed expert, a global tensor) and asks for
 *   them with acquire / release; it never opens a file.
 * Idea: a region's bytes are laid out in one buffer; range i of the region
 *   starts at byte range_pos[i] of it, with range_pos[i] % 4096 equal to the
 *   range's file offset % 4096, so a tensor's alignment in memory is its
 *   alignment in the file and O_DIRECT can read the aligned superset.
 *
 *   region buffer:  |skew| range 0 bytes ... |pad to 4096|skew| range 1 ...|
 *
 * Classes tell the planner how a region is used, not what it means:
 *   GLOBAL  read once per token or less (embeddings, final norm, lm_head);
 *   TRUNK   read in a fixed cyclic order, every token (the layers' dense parts);
 *   EXPERT  equal-sized, chosen per token by the router.
 * Invariants:
 *   1. a pointer from acquire stays valid until the matching release;
 *   2. acquire never returns bytes that did not fully arrive (a failed read is
 *      an error, never a partly filled buffer);
 *   3. the bytes handed out equal the file's bytes, whatever the backend.
 * Does not: know layers, tensors or dtypes.
 */
#ifndef MS_STORE_STORE_H
#define MS_STORE_STORE_H

#include "base/err.h"
#include "base/log.h"
#include "format/safetensors.h"

#include <stdint.h>

typedef enum ms_region_class {
    MS_REGION_GLOBAL = 0, MS_REGION_TRUNK = 1, MS_REGION_EXPERT = 2
} ms_region_class;

typedef struct ms_range {
    int shard;
    int64_t offset;             /* absolute offset in the shard file */
    int64_t n_bytes;
} ms_range;

typedef struct ms_store_params {
    int64_t ram_bytes;          /* 0 = everything resident */
    const ms_logger *log;
} ms_store_params;

typedef struct ms_store_stats {
    int64_t trunk_bytes_read, expert_bytes_read, global_bytes_read;
    int64_t reads_issued;
    int64_t expert_requests, expert_hits;
    int64_t io_wait_ns;
    int64_t resident_bytes;
} ms_store_stats;

typedef struct ms_store ms_store;

ms_status ms_store_open(const ms_store_params *p, const ms_ckpt *ckpt,
                        ms_store **out, ms_err *err);
void ms_store_close(ms_store *s);

/* Declare a region (before ms_store_start). range_pos[n_ranges] receives each
 * range's offset inside the region buffer. Returns the region id (>= 0) or a
 * negative status. */
int ms_store_add_region(ms_store *s, ms_region_class cls, const ms_range *ranges,
                        int n_ranges, int64_t *range_pos, ms_err *err);

/* All regions declared: compute the plan, refuse if it does not fit the budget,
 * read what is resident. */
ms_status ms_store_start(ms_store *s, ms_err *err);

/* Bytes of a region; blocks until they are in memory. On failure returns NULL
 * and sets err (the caller's result is then unsound). */
const uint8_t *ms_store_acquire(ms_store *s, int region, ms_err *err);
/* Acquire several regions at once (their reads run in parallel). */
ms_status ms_store_acquire_batch(ms_store *s, const int *regions, int n,
                                 const uint8_t **ptrs, ms_err *err);
void ms_store_release(ms_store *s, int region);

/* Copy n_bytes at byte `rel` of a region's data (rel counts from the start of
 * the region's first range, as if its ranges were concatenated) into dst,
 * from memory when the region is resident, else with one read. Used for
 * sparse access such as embedding rows. */
ms_status ms_store_read_part(ms_store *s, int region, int64_t rel, int64_t n_bytes,
                             void *dst, ms_err *err);

/* Bytes of a region's buffer (its ranges with their alignment padding). */
int64_t ms_store_region_bytes(const ms_store *s, int region);

void ms_store_get_stats(const ms_store *s, ms_store_stats *st);
void ms_store_reset_stats(ms_store *s);

#endif
