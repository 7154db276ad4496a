/* format/safetensors.h - safetensors shards and the checkpoint index.
 *
 * Owns: parsing of untrusted safetensors headers and model.safetensors.index.json,
 *   and the name -> tensor table of a whole checkpoint (hash table; ~500k names).
 * Idea: a checkpoint is a directory of shards; every tensor is known by its
 *   shard, absolute file offset, byte count, dtype and shape. Nothing here reads
 *   tensor data: the store owns all weight I/O.
 * Invariants (checked at open, never assumed):
 *   - header length + 8 <= file size; JSON is an object of tensor entries
 *     (+ optional "__metadata__" object of strings);
 *   - every dtype known, every dim >= 0, numel * dtype_size computed with
 *     overflow checks and equal to end - begin;
 *   - 0 <= begin <= end <= data section size; ranges of one shard do not overlap;
 *   - names unique within and across shards; with an index, every indexed name
 *     exists in the shard the index names, and every shard it names exists.
 * Errors: MS_E_MODEL with one line naming the file and the tensor, e.g.
 *   "model-00002-of-00003.safetensors: tensor 'x.weight': data_offsets [0, 10)
 *    hold 10 bytes but F32 [3] needs 12"; a shard shorter than its header
 *   says (the ranges fill the data section without a gap) is "FILE: truncated:
 *   N bytes, expected M ...". Parsing is safetensors.c, the checkpoint table
 *   and opening the files ckpt.c.
 * Does not: read tensor bytes, keep file descriptors open.
 */
#ifndef MS_FORMAT_SAFETENSORS_H
#define MS_FORMAT_SAFETENSORS_H

#include "base/err.h"

#include <stdint.h>
#include <stddef.h>

typedef enum ms_dtype {
    MS_DT_F32 = 0, MS_DT_BF16, MS_DT_F16, MS_DT_U8, MS_DT_I8,
    MS_DT_I32, MS_DT_I64, MS_DT_F64, MS_DT_BOOL, MS_DT_U16, MS_DT_I16,
    MS_DT_U32, MS_DT_U64, MS_DT_F8_E4M3, MS_DT_F8_E5M2, MS_DT_COUNT
} ms_dtype;

#define MS_MAX_DIMS 8

const char *ms_dtype_name(ms_dtype dt);
int64_t ms_dtype_size(ms_dtype dt);

typedef struct ms_tensor_info {
    const char *name;           /* owned by the checkpoint */
    ms_dtype dtype;
    int n_dim;
    int64_t shape[MS_MAX_DIMS];
    int64_t numel;
    int shard;                  /* index into the checkpoint's shards */
    int64_t offset;             /* absolute byte offset of the data in the shard file */
    int64_t n_bytes;
} ms_tensor_info;

typedef struct ms_shard_info {
    char *path;                 /* full path */
    const char *file;           /* basename, points into path */
    int64_t file_bytes;
    int64_t data_offset;        /* 8 + header length */
} ms_shard_info;

typedef struct ms_ckpt ms_ckpt;

/* Parse one shard header from memory. `buf` holds the whole file prefix of at
 * least 8 + header length bytes (n >= 8); `file_bytes` is the file's size.
 * `file` names the file in messages. Calls add(user, &info) per tensor, with
 * info.shard = shard_index and absolute offsets; a negative return from `add`
 * stops parsing and is returned. Used by ms_ckpt_open and by the fuzz target.
 * Allocates only temporaries. */
typedef int (*ms_st_add_fn)(void *user, const ms_tensor_info *info, ms_err *err);
ms_status ms_st_parse_header(const uint8_t *buf, size_t n, int64_t file_bytes,
                             const char *file, int shard_index,
                             ms_st_add_fn add, void *user, ms_err *err);

/* Open a checkpoint directory: with model.safetensors.index.json the shards it
 * names; otherwise every regular *.safetensors file in the directory, sorted
 * by name. Reads the index and each shard's header (and only the header),
 * each checked to be a regular file within its limit first (base/file.h): a
 * FIFO, a device or a directory is MS_E_MODEL naming it, without blocking. */
ms_status ms_ckpt_open(const char *dir, ms_ckpt **out, ms_err *err);
void ms_ckpt_close(ms_ckpt *c);

/* O(1) expected lookup; NULL if absent. Pointers stay valid until close. */
const ms_tensor_info *ms_ckpt_find(const ms_ckpt *c, const char *name);
int64_t ms_ckpt_n_tensors(const ms_ckpt *c);
const ms_tensor_info *ms_ckpt_tensor(const ms_ckpt *c, int64_t i);
int ms_ckpt_n_shards(const ms_ckpt *c);
/* 1 when the checkpoint was opened through model.safetensors.index.json. */
int ms_ckpt_has_index(const ms_ckpt *c);
const ms_shard_info *ms_ckpt_shard(const ms_ckpt *c, int i);

/* Parse index JSON text (untrusted) into (name, shard file) pairs via a
 * callback; used by ms_ckpt_open and the fuzz target. */
typedef int (*ms_index_add_fn)(void *user, const char *name, const char *file, ms_err *err);
ms_status ms_index_parse(const char *text, size_t n, const char *file,
                         ms_index_add_fn add, void *user, ms_err *err);

#endif
