/* format/st_int.h - what the safetensors header parser (safetensors.c) and the
 * checkpoint table (ckpt.c) share: file names, size limits, message widths.
 *
 * Owns: the limits on a shard header and on the index (docs/SECURITY.md,
 *   "Limits on metadata files").
 * Does not: leave format/ (included only by safetensors.c and ckpt.c).
 */
#ifndef MS_FORMAT_ST_INT_H
#define MS_FORMAT_ST_INT_H

/* Limits far above the released files' sizes (both in docs/SECURITY.md,
 * "Limits on metadata files"). A header is JSON text: more is refused, not
 * parsed or read. */
#define ST_MAX_HEADER_BYTES (100LL * 1024 * 1024)
#define ST_MAX_INDEX_BYTES (512LL * 1024 * 1024)
#define ST_INDEX_FILE "model.safetensors.index.json"
#define ST_SUFFIX ".safetensors"

/* Messages name the file and tensor with bounded widths, so the part that
 * says what was expected and found always fits in ms_err.msg. */
#define F_ "%.120s"
#define T_ "%.200s"

#endif
