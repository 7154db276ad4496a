/* store/store.h - where weight bytes live between the disk and the model.
 *
 * Owns: every weight byte the model reads. The model describes what it needs
 *   as REGIONS (a set of byte ranges of the checkpoint that are used together:
 *   one layer's dense part, one routed expert, a global tensor) and asks for
 *   them with acquire / release; it never opens a file.
 * Idea: a region's bytes are laid out in one buffer; range i of the region
 *   starts at byte range_pos[i] of it, with range_pos[i] % 4096 equal to the
 *   range's file offset % 4096, so a tensor's alignment in memory is its
 *   alignment in the file and O_DIRECT can read the aligned superset. A range
 *   marked `down` (BF16 data at an odd file offset: safetensors does not align
 *   data) lands one byte above range_pos[i] and is then moved down to it.
 *
 *   region buffer:  |skew| range 0 bytes ... |pad to 4096|skew| range 1 ...|
 *
 * Classes tell the planner how a region is used, not what it means:
 *   GLOBAL  read once per token or less (final norms; the embedding table,
 *           marked sparse, is read only by parts);
 *   TRUNK   read in a fixed cyclic order, every token (the layers' dense
 *           parts, the lm_head chunks);
 *   EXPERT  equal-sized, chosen per token by the router.
 * Where the bytes live is decided once, before any weight is read, by the
 *   plan (store/plan.h) under ram_bytes: GLOBAL pinned; the TRUNK regions that
 *   save the most bytes per pass pinned, the rest streamed through a ring of
 *   >= 2 slots with asynchronous read-ahead in declaration order; EXPERTs in
 *   one arena of equal slots managed by a replacement policy
 *   (store/cache.h); sparse GLOBALs on disk unless everything fits. Every
 *   read goes through the I/O layer (base/io.h); expert requests can be
 *   traced and replayed under any policy (store/trace.h).
 * Invariants:
 *   1. a pointer from acquire stays valid until the matching release;
 *   2. acquire never returns bytes that did not fully arrive (a failed read is
 *      an error, never a partly filled buffer, and leaves nothing cached);
 *   3. the bytes handed out equal the file's bytes, whatever the backend;
 *   4. the store's weight buffers total exactly the plan's total_bytes, all
 *      allocated in ms_store_start; acquire / release allocate nothing.
 * Thread safety: one thread (the compute thread) calls the store; the I/O
 *   layer's threads only fill buffers between submit and wait.
 * Verification (params.sums, format/sums.h): every read from disk - resident
 *   loads at start, trunk demand reads and read-aheads, expert demand reads
 *   and prefetches, by-part reads - is checked against the checkpoint's
 *   block hashes before its bytes are published or copied out. The I/O
 *   layer's checker threads hash each block as soon as its last byte lands (base/io.h, "Checking as
 *   data lands"), so the hashing overlaps the disk and the compute thread
 *   only learns the verdict when its wait returns (verify_sync = 1 hashes on
 *   the compute thread after the wait instead). A mismatch is read once more (a transient
 *   corruption is cured: counted in verify_retries); a second mismatch fails
 *   the read with MS_E_IO and "FILE: tensor 'NAME' bytes [A, B) of the file:
 *   checksum mismatch (moestream.sums)". By-part reads read and check the
 *   enclosing blocks (the bounce buffer then holds 2 blocks + alignment) and
 *   keep the last verified piece there: a part inside it (the next embedding
 *   row of the same block) is copied out without a read.
 *   Every region range must be made of whole blocks of whole tensors (bind.c
 *   guarantees it; ms_store_add_region refuses anything else).
 * Packed trunk (params.pack): a TRUNK region whose exact ranges the pack
 *   holds is read as ONE request of its packed image into its buffer at the
 *   image's shift, and as it lands (in order of the image, as far as it has
 *   landed from its start) it is checked against its block hashes (with the
 *   sidecar; verify_sync: the compute thread hashes the decoded ranges
 *   instead) and decoded in place, on the I/O layer's checker threads (the
 *   hook that hashes shard reads, so by the time the wait returns the bytes
 *   are the checkpoint's). A mismatch or a decode error
 *   gives the region up: it is read again from the shards, and from then on
 *   always (pack_fallbacks, a warning). The buffers and the plan are those without a
 *   pack (the writer only packs images that fit), so a pack changes the
 *   bytes read, never the bytes handed out or the memory used.
 * Does not: know layers, tensors or dtypes; detect silent corruption without
 *   a sidecar (safetensors have no checksums: a read that "succeeds" with
 *   wrong bytes is then handed out as is - tests/test_store.c documents it).
 */
#ifndef MS_STORE_STORE_H
#define MS_STORE_STORE_H

#include "base/err.h"
#include "base/io.h"
#include "base/log.h"
#include "format/pack.h"
#include "format/safetensors.h"
#include "format/sums.h"
#include "store/plan.h"

#include <stdint.h>

typedef enum ms_region_class {
    MS_REGION_GLOBAL = 0, MS_REGION_TRUNK = 1, MS_REGION_EXPERT = 2
} ms_region_class;

typedef struct ms_range {
    int shard;
    int64_t offset;             /* absolute offset in the shard file */
    int64_t n_bytes;
    int down;                   /* 0 or 1: the range's bytes sit this many bytes below
                                   their file alignment in the buffer (moved down once
                                   they have landed), so 16-bit data at an odd file
                                   offset starts at an even address */
} ms_range;

/* The layout of a region buffer holding ranges r[0..n): range i starts at
 * pos[i]; returns the buffer's size (a multiple of 4096, >= 4096). A range
 * lands at pos[i] + r[i].down, congruent to its file offset modulo 4096 (the
 * I/O layer's aligned superset), and is then moved down to pos[i]. Pure: the
 * store and the dry-run plan (model/bind.c) lay regions out by this alone. */
int64_t ms_store_layout(const ms_range *r, int n, int64_t *pos);

/* Every field after `log` means "default" when zero / NULL, so a caller may
 * fill only the first two. Strings are copied by ms_store_open. */
typedef struct ms_store_params {
    int64_t ram_bytes;          /* 0 = everything resident */
    int ram_floor;              /* 1: when ram_bytes does not fit, plan at the floor (the
                                   smallest budget that does) instead of refusing */
    const ms_logger *log;
    int64_t trunk_bytes;        /* > 0: ceiling on pinned trunk + ring (store/plan.h) */
    int64_t expert_bytes;       /* > 0: ceiling on the expert arena */
    int min_expert_slots;       /* floor of the expert cache (default 1; the engine
                                   passes experts per token, 2x with hints) */
    int ring_slots;             /* trunk ring slots, >= 2 (default 2) */
    int no_readahead;           /* 1: streamed trunk regions are read synchronously */
    const char *policy;         /* expert cache policy: "s3fifo" (default) | "lru" */
    const char *trace_path;     /* append every expert request here (store/trace.h) */
    int64_t bounce_bytes;       /* by-part read buffer (default 256 KiB, >= 16 KiB) */
    const ms_io_params *io;     /* I/O backend and faults (default ms_io_default_params());
                                   io_uring unavailable -> falls back to O_DIRECT pread */
    const ms_sums *sums;        /* block hashes of the checkpoint (must outlive the store;
                                   shard i of the sums = file i of the store): every read is
                                   verified; NULL = no verification */
    int verify_sync;            /* 1: hash on the compute thread after each wait (the old
                                   way, kept as the reference and for A/B); 0 (default):
                                   the I/O threads hash as the data lands */
    const ms_pack *pack;        /* the packed trunk (format/pack.h; must outlive the store):
                                   a TRUNK region found in it is read from it and decoded
                                   (see "Packed trunk" below); NULL = read the shards */
} ms_store_params;

/* Counters since open or the last reset. "Hits" are resident hits: uses of
 * a slot whose bytes were already in memory before the request, loaded by an
 * earlier demand (or at start); the first use of a prefetched expert is a
 * prefetch hit, not a hit. Bytes read count the requested data bytes (not
 * the alignment padding the I/O layer adds). */
typedef struct ms_store_stats {
    int64_t trunk_bytes_read, expert_bytes_read, global_bytes_read;
    int64_t reads_issued;       /* I/O requests (one per range read) */
    int64_t expert_requests, expert_hits;
    int64_t io_wait_ns;         /* time the caller spent blocked on reads */
    int64_t io_busy_ns;         /* time with at least one read in flight (ms_io_stats.busy_ns) */
    int64_t io_depth_ns;        /* reads in flight integrated over time (ms_io_stats.depth_ns) */
    int64_t resident_bytes;     /* bytes the store allocated for weights (the plan's total) */
    int64_t expert_misses;      /* demand reads of experts */
    int64_t prefetch_issued, prefetch_hits, prefetch_wasted, prefetch_failed;
    int64_t guess_issued;       /* part of prefetch_issued made by ms_store_predict */
    int64_t guess_hits;         /* part of prefetch_hits served by a guess */
    int64_t guess_cancelled;    /* guesses cancelled (ms_store_confirm, or dropped from the
                                   list by a later ms_store_predict) before all their
                                   bytes were read (their unread bytes are not counted in
                                   expert_bytes_read) */
    int64_t ra_issued;          /* trunk read-aheads submitted */
    int64_t ra_used;            /* acquires served by a read-ahead */
    int64_t ra_wasted;          /* read-aheads overwritten or dropped unused */
    int64_t ra_failed;          /* read-aheads that failed (re-read on demand) */
    int64_t ra_wait_ns;         /* part of io_wait_ns spent on read-aheads */
    int64_t trunk_sync_reads;   /* streamed trunk regions read at acquire time */
    int64_t trunk_ring_hits;    /* acquires of a streamed region still in its slot */
    int64_t peak_bytes;         /* most bytes the store held allocated for weights */
    /* verification (params.sums); unlike the rest, counted since open (loading
     * included) and never reset */
    int64_t verify_bytes;       /* bytes whose hashes matched (blocks hashed on the I/O
                                   layer's checker threads count when hashed, also when
                                   their read is later dropped unused) */
    int64_t verify_retries;     /* regions / parts read again after a mismatch */
    int64_t verify_failures;    /* reads failed because the re-read mismatched too */
    int64_t verify_ns;          /* time spent hashing, on any thread (I/O threads included) */
    int64_t verify_sync_ns;     /* part of verify_ns spent on the compute thread (0 unless
                                   params.verify_sync) */
    int64_t part_hits;          /* by-part reads (pieces) served from the last verified
                                   blocks kept in the bounce buffer, without a read */
    /* packed trunk (params.pack); trunk_bytes_read counts the packed bytes read */
    int64_t trunk_packed_read;  /* part of trunk_bytes_read read from the pack */
    int64_t trunk_unpacked_bytes; /* checkpoint bytes those packed reads delivered */
    int64_t unpack_ns;          /* time decoding them, on the I/O layer's checker threads */
    int64_t pack_fallbacks;     /* packed regions given up (a decode error or, with sums, a
                                   mismatch after decoding): read from the shards since */
    int64_t packed_regions;     /* TRUNK regions the pack holds (set at start, never reset) */
} ms_store_stats;

/* Defaults for every field (ram_bytes 0, no logger). Pure. */
ms_store_params ms_store_default_params(void);

typedef struct ms_store ms_store;

/* Open a store over the checkpoint's shards (the checkpoint must outlive
 * nothing: its paths are copied). Starts the I/O layer and opens every
 * shard. Errors: MS_E_USAGE (bad params, unknown policy), MS_E_IO (a shard
 * cannot be opened), MS_E_NOMEM. Allocates; close with ms_store_close. */
ms_status ms_store_open(const ms_store_params *p, const ms_ckpt *ckpt,
                        ms_store **out, ms_err *err);
/* The same over a list of files: shard i of every ms_range is paths[i]. */
ms_status ms_store_open_paths(const ms_store_params *p, const char *const *paths, int n_paths,
                              ms_store **out, ms_err *err);
/* Drain outstanding reads, close the trace (a trace write error is logged),
 * free everything. NULL is a no-op. */
void ms_store_close(ms_store *s);

/* Declare a region (before ms_store_start). range_pos[n_ranges] receives each
 * range's offset inside the region buffer. Returns the region id (>= 0) or a
 * negative status (MS_E_MODEL for a range outside its file, MS_E_NOMEM).
 * Regions are declared in the order the model uses them: the streamed TRUNK
 * regions are read ahead in declaration order, cyclically. */
int ms_store_add_region(ms_store *s, ms_region_class cls, const ms_range *ranges,
                        int n_ranges, int64_t *range_pos, ms_err *err);

/* Declare that GLOBAL region `region` is only ever read with
 * ms_store_read_part (the embedding table): the plan may then leave it on
 * disk (it is resident only when everything else is), and acquiring it is a
 * bug. Call before ms_store_start. */
void ms_store_mark_sparse(ms_store *s, int region);

/* All regions declared: compute the plan (store/plan.h), refuse if it does
 * not fit the budget (MS_E_BUDGET, "needs X bytes ..., budget Y bytes"; the
 * plan table is logged at INFO either way), allocate every buffer the run
 * will use, read what is resident. After a refusal the store can only be
 * closed (ms_store_get_plan still shows the floor). */
ms_status ms_store_start(ms_store *s, ms_err *err);

/* Bytes of a region; blocks until they are in memory. On failure returns NULL
 * and sets err (the caller's result is then unsound). Compute thread only;
 * allocates nothing. A streamed TRUNK acquire also starts the read-ahead of
 * the next streamed regions; more streamed TRUNK regions held at once than
 * ring slots is a bug (assert). */
const uint8_t *ms_store_acquire(ms_store *s, int region, ms_err *err);
/* Acquire several regions at once (their reads run in parallel). EXPERT
 * regions of one call must be distinct and at most ms_store_expert_capacity()
 * minus the experts still held from other calls (assert). On failure no
 * pointer is handed out (ptrs[] are NULL) and nothing stays acquired; on
 * success every region must be released. */
ms_status ms_store_acquire_batch(ms_store *s, const int *regions, int n,
                                 const uint8_t **ptrs, ms_err *err);
void ms_store_release(ms_store *s, int region);

/* Experts that can be held at once (the cache's slot count; 0 before start
 * or without experts). A model batches its expert acquires to this. */
int ms_store_expert_capacity(const ms_store *s);

/* Hint that EXPERT regions will be acquired soon: start reading the ones not
 * cached into free or victim slots (never evicting pinned or loading ones;
 * stops quietly when no slot can be had), as demand reads (base/io.h,
 * "Priorities"). They count as wanted in this step (see ms_store_confirm).
 * Non-expert regions are ignored. A failed prefetch is not an error: the
 * acquire reads again on demand. Compute thread only; allocates nothing. */
void ms_store_hint(ms_store *s, const int *regions, int n);

/* Guesses: EXPERT regions that MAY be acquired later (the next layer's
 * predicted experts), most likely first. Read like hints, but as speculative
 * reads (behind every demand read and read-ahead) and only into free slots or
 * victims that are not wanted in this step, so a guess never evicts an
 * expert the model asked for. Stops at the first that gets no slot. The list
 * replaces the previous one (a later, better guess of the same layer): the
 * earlier guesses still queued that it leaves out, and that this step does
 * not want, are cancelled as ms_store_confirm cancels wrong ones. */
void ms_store_predict(ms_store *s, const int *regions, int n);

/* A new step: regions[0..n) are the experts the model needs now (a layer's
 * routed experts, known once its router ran). They become the wanted set
 * (replacing the last one): guesses among them still in flight are promoted to
 * demand reads; every other guess still in flight is cancelled (its unread
 * chunks dropped; the slot frees itself once the rest lands). Guesses that
 * arrived stay cached as evictable. Every finished prefetch is published
 * without blocking. Changes no byte handed out. */
void ms_store_confirm(ms_store *s, const int *regions, int n);

/* Mark the cached experts among regions[0..n) as just used, in that order
 * (the policy's hit: LRU moves them to the front, S3-FIFO raises their
 * frequency), so they outlive the rest. Experts not cached (or still
 * loading) are ignored; nothing is read, pinned or counted, and touches are
 * not traced (like prefetches). Compute thread only. */
void ms_store_touch(ms_store *s, const int *regions, int n);

/* The bytes of a region if they are in memory now (resident, or a streamed
 * TRUNK region whose read has finished, or a READY cached expert), else NULL;
 * never reads, waits, pins or reads ahead. The pointer is valid only until the
 * next call into the store (a use must not outlive it). Compute thread only. */
const uint8_t *ms_store_peek(ms_store *s, int region);

/* Copy n_bytes at byte `rel` of a region's data (rel counts from the start of
 * the region's first range, as if its ranges were concatenated) into dst,
 * from memory when the region is resident, else with one read. Used for
 * sparse access such as embedding rows. */
ms_status ms_store_read_part(ms_store *s, int region, int64_t rel, int64_t n_bytes,
                             void *dst, ms_err *err);

/* Bytes of a region's buffer (its ranges with their alignment padding). */
int64_t ms_store_region_bytes(const ms_store *s, int region);

/* Regions declared so far. */
int ms_store_n_regions(const ms_store *s);

/* Region `region` as declared: its class in *cls, its ranges in *ranges and
 * their offsets in its buffer in *pos (as range_pos of ms_store_add_region;
 * both arrays owned by the store, valid until ms_store_close); any output may
 * be NULL. Returns its range count. Pure. */
int ms_store_region_layout(const ms_store *s, int region, ms_region_class *cls,
                           const ms_range **ranges, const int64_t **pos);

/* Read a region's bytes from the shards into buf (MS_IO_ALIGN-aligned,
 * ms_store_region_bytes long, laid out as the region buffer), verified like
 * every read when the store has a sidecar (a mismatch is read once more).
 * Before ms_store_start, on a store opened without a pack: for tools that
 * walk every region once (the pack writer, engine/pack_write.c). Blocks;
 * counted in the stats; allocates nothing. Errors as ms_store_acquire. */
ms_status ms_store_read_region(ms_store *s, int region, uint8_t *buf, ms_err *err);

/* The checksum sidecar the store verifies against (params.sums), or NULL. */
const ms_sums *ms_store_sums(const ms_store *s);

/* 1 when the region's bytes stay in memory for the whole run (pinned
 * GLOBAL / TRUNK, resident sparse regions, every EXPERT when all are
 * resident). Valid after a successful ms_store_start. */
int ms_store_region_resident(const ms_store *s, int region);

/* Where an EXPERT region's bytes are now: MS_EXPERT_READY (resident or a
 * cached copy in memory), MS_EXPERT_LOADING (a read of it is in flight), or
 * MS_EXPERT_ABSENT. A model orders its computation by it; it changes nothing. */
enum { MS_EXPERT_ABSENT = 0, MS_EXPERT_LOADING = 1, MS_EXPERT_READY = 2 };
int ms_store_expert_state(const ms_store *s, int region);

/* The store's I/O layer (tests pause it, base/io.h ms_io_pause, to queue
 * reads deterministically); valid until ms_store_close. */
ms_io *ms_store_io(ms_store *s);

/* The plan of the last ms_store_start (also after a refusal), or NULL. */
const ms_plan *ms_store_get_plan(const ms_store *s);

void ms_store_get_stats(const ms_store *s, ms_store_stats *st);
/* Zero the counters except resident_bytes, peak_bytes and verify_*. */
void ms_store_reset_stats(ms_store *s);

#endif
