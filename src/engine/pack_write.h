/* engine/pack_write.h - writing the packed trunk (format/pack.h) of the
 * TRUNK regions a store has declared.
 *
 * Owns: the walk over the regions and the progress log; the file format and
 *   the encoding belong to the pack writer (format/pack.h), the verified
 *   reads to the store (ms_store_read_region).
 * Does not: plan or start the store, or decide which regions exist (the
 *   model's binding declares them; engine/pack.c drives it).
 */
#ifndef MS_ENGINE_PACK_WRITE_H
#define MS_ENGINE_PACK_WRITE_H

#include "moestream.h"

#include "base/err.h"
#include "base/log.h"
#include "store/store.h"

#include <stdint.h>

/* Write the packed trunk of every TRUNK region declared in s to `path`
 * (format/pack.h): each region is read from the shards (verified with the
 * store's sidecar, which it must have: MS_E_USAGE otherwise), encoded, and
 * kept when it shrinks and fits its buffer. s: opened without a pack, not
 * started. Progress is logged to log at INFO every 5 s. Fills out's counts
 * (n_regions, n_packed, raw_bytes, packed_bytes, packed_raw_bytes; not
 * seconds). Allocates one buffer of the largest TRUNK region. */
ms_status ms_pack_write_trunk(ms_store *s, const char *path, uint64_t table_hash, const ms_logger *log,
                              ms_pack_result *out, ms_err *err);

#endif
