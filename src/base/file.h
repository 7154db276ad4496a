/* base/file.h - opening and reading the small files that describe a model.
 *
 * Owns: the two checks every metadata file passes before a byte of it is read
 *   (config.json, model.safetensors.index.json, tiktoken.model,
 *   tokenizer_config.json, moestream.sums, each shard's header): it is a
 *   regular file (a symlink to one is fine), and it is no larger than the
 *   limit its reader documents (docs/SECURITY.md, "Limits on metadata files").
 * Idea: open(2) on a FIFO blocks until a writer appears, and a device such as
 *   /dev/zero reports size 0 but never ends, so the file is opened with
 *   O_NONBLOCK (which does nothing to a regular file's reads and is cleared
 *   after the check) and judged by fstat of that same descriptor, before any
 *   read and before any allocation of its size. Checking the descriptor, not
 *   the name, leaves no window for the name to be swapped in between.
 * Invariants: a descriptor handed out refers to a regular file whose size was
 *   <= max_bytes at the check; a buffer handed out is NUL-terminated (one byte
 *   beyond *n) and holds exactly the file's size at the check.
 * Does not: account memory, keep descriptors (but the one ms_file_open
 *   returns, which the caller closes), or read environment variables.
 */
#ifndef MS_BASE_FILE_H
#define MS_BASE_FILE_H

#include "base/err.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>

/* What a non-regular file is, for messages: "a directory", "a FIFO",
 * "a character device", "a block device", "a socket", "not a regular file".
 * `mode` is a struct stat st_mode. Static string; thread-safe. */
const char *ms_file_kind(unsigned mode);

/* The flags to open a metadata file with: read-only, without blocking on a
 * FIFO, without becoming the controlling terminal. */
#define MS_FILE_OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)

/* Check a descriptor opened (with MS_FILE_OPEN_FLAGS, or at least O_NONBLOCK,
 * so that the open itself cannot hang) from `path`: a regular file of at most
 * max_bytes (INT64_MAX: no limit). Clears O_NONBLOCK and sets *size. Errors:
 * MS_E_MODEL naming the path and what it is instead ("PATH: is a FIFO,
 * expected a regular file") or its size against the limit; MS_E_IO when fstat
 * fails. Does not close fd. Thread-safe. */
ms_status ms_file_check_fd(int fd, const char *path, int64_t max_bytes, int64_t *size, ms_err *err);

/* Open `path` read-only without blocking, check that it is a regular file
 * (after symlinks) of at most max_bytes, and return the blocking descriptor
 * in *fd (close it with close(2)) and the size in *size.
 * Errors (*fd = -1 then): those of ms_file_check_fd; MS_E_IO when it cannot
 * be opened ("PATH: cannot open: ERRNO TEXT"; a missing file too); MS_E_MODEL
 * for ENXIO (a socket). Thread-safe. */
ms_status ms_file_open(const char *path, int64_t max_bytes, int *fd, int64_t *size, ms_err *err);

/* Check, without opening it for long and without blocking, that `path` is a
 * regular file (after symlinks); the errors of ms_file_open, without the size
 * limit. For files opened elsewhere (the I/O layer's shards, the pack). */
ms_status ms_file_check_regular(const char *path, ms_err *err);

/* Read exactly n bytes at offset off of fd (retrying EINTR and short reads).
 * Errors: MS_E_IO naming `path` - "read failed: ERRNO TEXT", or "short read:
 * G of N bytes at offset O" when the file ends first. Thread-safe. */
ms_status ms_file_pread_full(int fd, void *buf, size_t n, int64_t off, const char *path, ms_err *err);

/* ms_file_open, then read the whole file into a fresh malloc'd buffer (caller
 * frees) with a terminating NUL: *out holds *n bytes. The buffer is allocated
 * only after both checks passed. Errors: those of ms_file_open; MS_E_IO for a
 * failed or short read; MS_E_NOMEM. Thread-safe. */
ms_status ms_file_read(const char *path, int64_t max_bytes, char **out, size_t *n, ms_err *err);

#endif
