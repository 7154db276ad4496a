/* format/sums.h - the checksum sidecar `moestream.sums`: XXH3-64 hashes of
 * every tensor's bytes in blocks of 1 MiB, and the checks made with it.
 *
 * Owns: the sidecar's binary format (build, write, load and validate it) and
 *   the block lookup that turns a byte range of a shard into the tensors and
 *   blocks it covers.
 * Idea: safetensors carry no checksums, so a disk or a copy that silently
 *   returns wrong bytes would give a wrong token. The sidecar stores, for
 *   every tensor in the checkpoint table's order (shard, offset, name), the
 *   XXH3-64 of each block of B = MS_SUMS_BLOCK_BYTES bytes counted from the
 *   tensor's first byte (the last block is shorter; a 0-byte tensor has no
 *   block). A tensor that fuses a layer's experts along its first dimension
 *   (gpt-oss's model.layers.N.mlp.experts.*_blocks / _scales / _bias, 2+
 *   dims) counts its blocks from each expert slice's first byte instead, so
 *   one expert's slice, which is what a read of that expert covers, is whole
 *   blocks (a K3 checkpoint has no such tensor: its sidecars are unchanged). Blocks are relative to tensors, not files, so a tensor's hashes do
 *   not depend on where it lies, and any range made of whole blocks of whole
 *   tensors can be checked in memory right after it is read.
 *
 *   file (little-endian):
 *     0    8  magic "MSSUMS\0\1"
 *     8    4  version (3)            12   4  reserved (0)
 *     16   8  block bytes B (2^20)   24   8  table hash (ms_sums_table_hash)
 *     32   8  n_tensors              40   8  n_blocks
 *     48   16 x 5  metadata files, in ms_sums_meta_files' order: u64 size
 *                  (2^64 - 1: absent when written), u64 XXH3-64 of its bytes
 *     128  8 x n_blocks  block hashes, tensor by tensor in table order
 *     end  8  XXH3-64 of every byte before it
 *   Format 1 (no metadata entries, block hashes at 48) and format 2 (the
 *   first four entries, block hashes at 112: no tokenizer.json) still load;
 *   the files they do not record are then unverified (ms_sums_check_meta
 *   warns when such a file is present).
 *
 *   The table hash covers the shard file names and, per tensor, its name,
 *   dtype, shape, shard, offset and byte count: a sidecar of another
 *   checkpoint (or of this one after any tensor moved) is refused at load.
 *   The trailing hash refuses a truncated or edited sidecar. Size in RAM:
 *   8 bytes per MiB of checkpoint (~12 MB for the 1.56 TB of Kimi K3).
 * Invariants (of a loaded or built sidecar):
 *   1. n_tensors == the checkpoint's tensor count, n_blocks == sum over the
 *      tensors of ceil(n_bytes / B), the file is exactly 120 + 8 n_blocks
 *      bytes (56 + 8 n_blocks for format 1);
 *   2. the checkpoint it was loaded against outlives it (names and shard
 *      paths are borrowed from it).
 * Thread safety: a loaded sidecar is read-only; check / cover may be called
 *   from any thread.
 * Does not: read weights through the store (build and compare read the shard
 *   files once, in table order, through the I/O layer: O_DIRECT, several reads
 *   in flight, two 64 MiB windows); decide what to do on a
 *   mismatch (the store re-reads once, then fails the read).
 */
#ifndef MS_FORMAT_SUMS_H
#define MS_FORMAT_SUMS_H

#include "base/err.h"
#include "base/log.h"
#include "format/safetensors.h"

#include <stdint.h>

#define MS_SUMS_BLOCK_BYTES ((int64_t)1 << 20)
#define MS_SUMS_FILE "moestream.sums"
#define MS_SUMS_HEADER_BYTES 128
#define MS_SUMS_N_META 5

/* The metadata files of a model directory the sidecar covers, by name:
 * config.json, model.safetensors.index.json, tiktoken.model,
 * tokenizer_config.json, tokenizer.json (gpt-oss's tokenizer) - each may be
 * absent; absence is recorded. */
extern const char *const ms_sums_meta_files[MS_SUMS_N_META];

typedef struct ms_sums ms_sums;

/* XXH3-64 of the checkpoint's tensor table (see the header comment). Pure. */
uint64_t ms_sums_table_hash(const ms_ckpt *ck);

/* XXH3-64 of the block hashes (little-endian u64s, in table order): what the
 * sidecar says about the bytes. The packed trunk records it, so a pack made
 * against other bytes is refused. Pure. */
uint64_t ms_sums_content_hash(const ms_sums *s);

/* Build the sidecar of `ck` by reading every tensor's bytes with ordinary
 * reads and hashing them block by block; logs a progress line at INFO every
 * 5 s. Errors: MS_E_IO (a shard cannot be read; the message names it),
 * MS_E_NOMEM. Allocates; free with ms_sums_free. */
ms_status ms_sums_build(const ms_ckpt *ck, const ms_logger *log, ms_sums **out, ms_err *err);

/* Write the sidecar to `path` atomically: `path`.tmp.PID, fsync, rename.
 * Errors: MS_E_IO naming the path and the cause (a read-only directory
 * included; the caller can suggest another path). */
ms_status ms_sums_write(const ms_sums *s, const char *path, ms_err *err);

/* Load `path` and validate it against `ck`: size, magic, version, block
 * size, trailing hash, table hash, counts. Errors: MS_E_IO (cannot open or
 * read), MS_E_MODEL (truncated, damaged, or of another checkpoint; the
 * message names the path and says which, and how to rebuild it), MS_E_NOMEM.
 * Allocates. */
ms_status ms_sums_load(const char *path, const ms_ckpt *ck, ms_sums **out, ms_err *err);

/* Hash the metadata files of model_dir (ms_sums_meta_files) into s, to be
 * written with it. A built sidecar records them absent until this is called.
 * Each is read in 64 KiB pieces (a regular file within its reader's limit,
 * docs/SECURITY.md "Limits on metadata files"). Errors:
 * those of ms_file_open / ms_file_pread_full naming the file. */
ms_status ms_sums_hash_meta(ms_sums *s, const char *model_dir, ms_err *err);

/* Hash the metadata files of model_dir again and compare with what the
 * loaded sidecar records. n_bad NULL: MS_E_MODEL naming the first file that
 * differs (or appeared, or went missing) and how. n_bad given: one
 * MS_LOG_ERROR line per such file, counted in *n_bad, MS_OK. A sidecar of
 * format 1 records none: a warning to log, MS_OK. Errors otherwise: those of
 * reading a file (MS_E_IO / MS_E_MODEL naming it). */
ms_status ms_sums_check_meta(const ms_sums *s, const char *model_dir, const ms_logger *log, int *n_bad, ms_err *err);

void ms_sums_free(ms_sums *s);

int64_t ms_sums_n_blocks(const ms_sums *s);
int64_t ms_sums_n_tensors(const ms_sums *s);

/* Check bytes[0, n_bytes) as the bytes of shard `shard` at `offset`.
 * The range must consist of whole blocks of the tensors it touches: every
 * tensor it intersects is entered at a block boundary and left at a block
 * boundary or at the tensor's end, and every byte lies in some tensor.
 * Returns MS_OK when every block's hash matches; MS_E_IO with the message
 *   "FILE: tensor 'NAME' bytes [A, B) of the file: checksum mismatch
 *    (moestream.sums)" naming the first bad block; MS_E_INTERNAL when the
 * range is not made of whole blocks (a bug of the caller). Pure; allocates
 * nothing. */
ms_status ms_sums_check(const ms_sums *s, int shard, int64_t offset, int64_t n_bytes,
                        const uint8_t *bytes, ms_err *err);

/* The smallest range [*begin, *end) of shard `shard` holding [offset,
 * offset + n_bytes) (n_bytes > 0) that ms_sums_check accepts: from the start
 * of the block holding the first byte to the end of the block holding the
 * last. MS_E_INTERNAL when a byte lies in no tensor. Pure. */
ms_status ms_sums_cover(const ms_sums *s, int shard, int64_t offset, int64_t n_bytes,
                        int64_t *begin, int64_t *end, ms_err *err);

/* End (absolute file offset) of the block holding byte `offset` of shard
 * `shard`, or -1 when that byte lies in no tensor. Pure. */
int64_t ms_sums_block_end(const ms_sums *s, int shard, int64_t offset);

/* Re-hash every tensor of the checkpoint the sidecar was loaded against and
 * compare. For each tensor with bad blocks, calls bad(user, tensor, file,
 * begin, end, n_bad) once, with the absolute file range from its first to
 * its last bad block. *n_bad_tensors / *n_bad_blocks receive the totals.
 * Logs progress like ms_sums_build. Errors: MS_E_IO (a shard cannot be
 * read), MS_E_NOMEM; mismatches are not errors. */
typedef void (*ms_sums_bad_fn)(void *user, const ms_tensor_info *t, const char *file,
                               int64_t begin, int64_t end, int64_t n_bad_blocks);
ms_status ms_sums_compare(const ms_sums *s, const ms_logger *log, ms_sums_bad_fn bad, void *user,
                          int64_t *n_bad_tensors, int64_t *n_bad_blocks, ms_err *err);

#endif
