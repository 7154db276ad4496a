/* base/bufalloc.h - aligned buffers for the I/O layer, optionally on huge pages.
 *
 * Owns: anonymous memory mappings handed to callers as read buffers.
 * Idea: O_DIRECT needs MS_IO_ALIGN (4096) alignment; the target disk takes at
 *   most 254 segments per request, so a read into 4 KiB pages is capped near
 *   1.35 GB/s while a read into 2 MiB huge pages reaches ~1.7-2.0 GB/s. A
 *   "huge" buffer is therefore 2 MiB-aligned and a whole number of 2 MiB
 *   extents, advised MADV_HUGEPAGE (transparent huge pages; the advice may be
 *   ignored by the kernel, which only costs speed).
 * Invariants: the bytes reserved for (bytes, huge) are exactly
 *   ms_buf_alloc_size(bytes, huge); a buffer is freed with the same two values
 *   it was allocated with. Fresh buffers read as zeros.
 * Does not: keep any global state, account memory (the caller reports
 *   ms_buf_alloc_size to the accountant), or touch the pages (but for
 *   ms_buf_prefault, on request).
 */
#ifndef MS_BASE_BUFALLOC_H
#define MS_BASE_BUFALLOC_H

#include <stdint.h>

#define MS_BUF_HUGE_PAGE ((int64_t)2 << 20)

/* Bytes actually reserved for a request of `bytes`: rounded up to 2 MiB when
 * huge, else to 4096. 0 for bytes <= 0, -1 on overflow. Pure. */
int64_t ms_buf_alloc_size(int64_t bytes, int huge);

/* A zero-filled buffer of at least `bytes` bytes, aligned to 2 MiB when huge
 * (and advised MADV_HUGEPAGE), else to 4096. NULL when bytes <= 0, on overflow
 * or when the mapping fails. Thread-safe. Free with ms_buf_free. */
void *ms_buf_alloc(int64_t bytes, int huge);

/* Map every page of a buffer from ms_buf_alloc(bytes, huge) now (zero-filled,
 * as the kernel would on first touch), so that its first use does not fault:
 * an O_DIRECT read into unmapped pages faults and zeroes them in the read's
 * path. MADV_POPULATE_WRITE (Linux 5.14+); else a write per 4 KiB page. */
void ms_buf_prefault(void *ptr, int64_t bytes, int huge);

/* Release a buffer from ms_buf_alloc(bytes, huge); ptr NULL is a no-op. */
void ms_buf_free(void *ptr, int64_t bytes, int huge);

#endif
