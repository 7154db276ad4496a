/* format/pack.h - the packed trunk `moestream.pack`: the trunk regions of a
 * checkpoint re-encoded without loss, so a streamed token reads fewer bytes.
 *
 * Owns: the chunk codec, the region image (its layout and its in-place
 *   decode), and the file (write, load, validate, look up).
 * Idea: the dense trunk is bf16, and a bf16 weight's 8 exponent bits carry
 *   ~2.5 bits of information (trained weights, like the generator's, sit in a
 *   few binades), while its sign and 7 mantissa bits carry ~8. A chunk of
 *   64 KiB is read as 16-bit words (little-endian) and stored as
 *
 *     sm[w]   = sign | mantissa (bit 7 = bit 15 of the word, bits 0-6 = bits 0-6)
 *     code[w] = 4 bits: the exponent's rank among the chunk's 15 most frequent
 *               exponents, or 15 (escape)
 *     escapes = (u16 word index, u8 exponent) for every word with code 15
 *
 *   which is 12 bits per word plus 3 bytes per escape: ~0.75 of the bytes
 *   (a Huffman code would reach ~0.70; a fixed 4-bit code decodes with one
 *   byte shuffle per 16 words). Any chunk that would not shrink (f32 norms read
 *   as words, odd lengths) is stored raw. The decode is integer work, so the
 *   bytes handed to the kernels are the checkpoint's bytes, bit for bit.
 *
 *   chunk (n raw bytes, n <= 65536, W = n / 2 words): a u32 header, then
 *     packed:  E | tab[16] sm[W] nib[ceil(W/2)] epos[E] (u16) eexp[E]
 *              (word 2j's code in nib[j]'s low nibble, 2j+1's in the high;
 *               exponent = tab[code], tab[15] = 0; E < 2^31)
 *     raw:     2^31 | the n bytes
 *
 * Region image: the chunks of every range of a region (64 KiB pieces of each
 *   range, in order), back to back. It is read into the END of the region
 *   buffer (at byte `shift` = the buffer's size minus the image's, rounded up
 *   to 4096) and decoded IN PLACE, first chunk first, each chunk's payload
 *   copied to a 64 KiB scratch before its words are written over the buffer:
 *
 *     buffer:  [range 0 out ...][range 1 out ........]      (pos[i])
 *                              [ image: c0 c1 c2 c3 c4 ]   (shift ...)
 *
 *   Output grows faster than input, so this is safe when every chunk's output
 *   (but the last's) ends at or before the next chunk's input: the writer
 *   packs a region only when that holds, so the store's buffers and plan are
 *   the same with or without a pack. The decoder checks every bound and that
 *   rule; a malformed image is an error, never a read or write outside the
 *   buffer.
 *
 * File (little-endian):
 *     0    8  magic "MSPACK\0\1"          8    4  version (1)
 *     12   4  chunk bytes (65536)          16   8  table hash (ms_sums_table_hash)
 *     24   8  sums hash (ms_sums_content_hash)
 *     32   8  n_entries                    40   8  index offset
 *     48   8  index bytes                  56   8  XXH3-64 of the index
 *     64   8  XXH3-64 of bytes 0..63
 *     4096 ...  region images, each at a multiple of 4096
 *     index:  per entry: u32 n_ranges, u32 0, u64 image offset, u64 image
 *             bytes, u64 shift, raw bytes (u64), then per range u32 shard,
 *             u32 0, u64 offset, u64 n_bytes, then the XXH3-64 of every
 *             1 MiB block of the image (the last one shorter)
 *   A pack is made from a checkpoint WITH its checksum sidecar and is used
 *   only with it: the table hash ties it to the tensor table, the sums hash
 *   to the bytes the sidecar describes (a pack of another checkpoint, or of
 *   this one before its bytes or tensors changed, is refused). The writer
 *   packs bytes the sidecar verified and writes an image only after decoding
 *   it back to those bytes; each image carries block hashes, which the store
 *   checks before decoding (0.75x the bytes to hash), reading the shards
 *   instead on a mismatch (store/store.h). The index hash refuses a truncated
 *   or edited index.
 * Thread safety: a loaded pack is read-only; decode works on caller memory.
 * Does not: read the checkpoint (engine/pack_write.c reads the raw regions
 *   through the store and hands them to the writer), choose the regions (the
 *   model's binding does).
 */
#ifndef MS_FORMAT_PACK_H
#define MS_FORMAT_PACK_H

#include "base/err.h"
#include "format/safetensors.h"

#include <stdint.h>

#define MS_PACK_FILE "moestream.pack"
#define MS_PACK_CHUNK_BYTES ((int64_t)65536)
#define MS_PACK_ALIGN 4096
#define MS_PACK_RAW_FLAG 0x80000000u
#define MS_PACK_HASH_BYTES ((int64_t)1 << 20)

typedef struct ms_pack_range {
    int shard;
    int64_t offset, n_bytes;
} ms_pack_range;

typedef struct ms_pack_entry {
    int n_ranges;
    const ms_pack_range *ranges;    /* into the pack's table */
    int64_t image_off;              /* in the pack file, a multiple of 4096 */
    int64_t image_bytes;
    int64_t shift;                  /* the image lands at region buffer + shift */
    int64_t raw_bytes;              /* sum of the ranges' n_bytes */
    const uint64_t *hashes;         /* XXH3-64 of each MS_PACK_HASH_BYTES block of the image */
} ms_pack_entry;

typedef struct ms_pack ms_pack;

/* ---- codec (pure) ---- */

/* Bytes one range of n raw bytes may take, at most, as chunks: n plus one
 * header per chunk. */
int64_t ms_pack_range_bound(int64_t n);
/* Encode one range's n bytes (src) as chunks into dst (capacity
 * ms_pack_range_bound(n)); returns the bytes written. Deterministic. */
int64_t ms_pack_encode_range(const uint8_t *src, int64_t n, uint8_t *dst);

/* Decode a region image in place. buf: the region buffer (buf_bytes), the image
 * at buf + e->shift; range i goes to buf + pos[i]. scratch: at least
 * MS_PACK_CHUNK_BYTES bytes. MS_OK, or MS_E_MODEL with the reason in err.
 * use_simd: 1 the best decoder the CPU has (AVX2, SSSE3, portable), 0 the
 * portable one, 2 at most SSSE3 (tests compare all three). */
ms_status ms_pack_decode_image(uint8_t *buf, int64_t buf_bytes, const ms_pack_entry *e,
                               const int64_t *pos, uint8_t *scratch, int use_simd, ms_err *err);

/* The same decode in steps, as the image lands (the store decodes on the I/O
 * layer's checker threads while the rest of the image is still being read).
 * A cursor starts at the image's first chunk; each call decodes, in order,
 * every chunk whose header and payload lie below buffer offset `avail` (the
 * bytes below it have landed, and been checked where that is asked for) and
 * stops at the first that does not. Because a chunk's output ends at or
 * before the next chunk's input, no call writes at or above `avail`, so the
 * rest of the image may still be landing. c->done is set when the last chunk
 * is decoded; errors are those of ms_pack_decode_image, and a cursor that
 * returned one is not used again. */
typedef struct ms_pack_cursor {
    int64_t in;                 /* buffer offset of the next chunk's header */
    int range;                  /* next chunk: range index, chunk within the range */
    int64_t chunk;
    int done;
} ms_pack_cursor;
void ms_pack_cursor_init(ms_pack_cursor *c, const ms_pack_entry *e);
ms_status ms_pack_decode_upto(uint8_t *buf, int64_t buf_bytes, const ms_pack_entry *e,
                              const int64_t *pos, ms_pack_cursor *c, int64_t avail,
                              uint8_t *scratch, int use_simd, ms_err *err);

/* The image's hash blocks (MS_PACK_HASH_BYTES each, the last one shorter), and
 * the check of blocks [b0, b1) against their hashes (img: the image's start;
 * [0, ms_pack_n_blocks) checks it all). MS_E_IO naming path, the image and
 * the block on a mismatch. */
int64_t ms_pack_n_blocks(const ms_pack_entry *e);
ms_status ms_pack_check_blocks(const ms_pack_entry *e, const uint8_t *img, int64_t b0, int64_t b1,
                               const char *path, ms_err *err);

/* The decoder the build and the CPU give ("avx2", "ssse3" or "portable"). */
const char *ms_pack_decoder_name(void);

/* ---- writer ---- */

typedef struct ms_pack_writer ms_pack_writer;

/* Start the pack of the checkpoint whose table and sums hashes are given
 * (sums_hash: ms_sums_content_hash of the sidecar it is built from; a pack
 * whose sidecar differs is refused at load). The file is written unnamed
 * (O_TMPFILE in path's directory) and linked as `path`.tmp, then renamed to
 * `path` only at finish, so a killed run leaves nothing behind; where the
 * filesystem has no O_TMPFILE it is written as `path`.tmp directly. A
 * `path`.tmp left by an earlier killed run is removed here. Errors: MS_E_IO
 * naming the file and the errno text, MS_E_NOMEM. */
ms_status ms_pack_writer_open(const char *path, uint64_t table_hash, uint64_t sums_hash,
                              ms_pack_writer **out, ms_err *err);
/* Add one region: its ranges, their positions in the region buffer (as the
 * store lays them out) and the buffer with the raw bytes at those positions.
 * The region is packed only when its image fits the buffer (see above) and is
 * smaller than its raw bytes; *image_bytes is its size then, else 0. Before
 * it is written, the image is decoded back IN buf, exactly as a reader
 * decodes it, and the ranges' XXH3 compared with the raw bytes' (so the
 * writer needs no second region buffer): on return the ranges hold their
 * bytes, and the rest of buf is undefined. */
ms_status ms_pack_writer_add(ms_pack_writer *w, const ms_pack_range *ranges, int n_ranges,
                             const int64_t *pos, uint8_t *buf, int64_t buf_bytes,
                             int64_t *image_bytes, ms_err *err);
/* Write the index and header, fsync, rename to `path`. Frees w either way. */
ms_status ms_pack_writer_finish(ms_pack_writer *w, ms_err *err);
/* Remove the temporary file and free w (after an error). NULL is a no-op. */
void ms_pack_writer_abort(ms_pack_writer *w);

/* ---- reader ---- */

/* Load and validate the pack at path against the checkpoint and its loaded
 * sidecar (table hash, sums hash, index hash, every entry inside the file and
 * its ranges inside their shards). MS_E_IO (cannot read), MS_E_MODEL
 * (malformed, or another checkpoint's pack; the message says which). */
struct ms_sums;
ms_status ms_pack_load(const char *path, const ms_ckpt *ck, const struct ms_sums *sums, ms_pack **out,
                       ms_err *err);
void ms_pack_free(ms_pack *p);
const char *ms_pack_path(const ms_pack *p);
int64_t ms_pack_n_entries(const ms_pack *p);
const ms_pack_entry *ms_pack_entry_at(const ms_pack *p, int64_t i);
/* The entry whose ranges are exactly these, or NULL. */
const ms_pack_entry *ms_pack_find(const ms_pack *p, const ms_pack_range *ranges, int n_ranges);

#endif
