/* store/store_int.h - the store's private structures, shared by the files of
 * src/store/ that implement store/store.h. Nothing outside src/store
 * includes it.
 *
 * Owns: struct ms_store and the types of its parts, and the functions one
 *   file of the store calls in another:
 *
 *   store.c    the region table, open / close, start (plan, allocate, read
 *              what is resident), acquire / release / peek / read_part,
 *              statistics
 *   land.c     bytes arriving: submitting a region's read, waiting for it
 *              and judging what landed (the checksum hook on the I/O
 *              threads, the packed trunk decoded as it lands, the re-read
 *              after a mismatch)
 *   ring.c     the trunk ring: streamed TRUNK regions in slots, Belady's
 *              eviction for a cyclic walk, read-ahead
 *   experts.c  the expert slots: batch acquires, hints, guesses, prefetch
 *
 * Each part of struct ms_store below names the file that owns it: only that
 *   file changes it after ms_store_start (store.c sets the parts up through
 *   the owners' *_init functions and reads them for peek / read_part).
 * Invariants: those of store.h; ring and cache slots as drawn in ring.c and
 *   store/cache.h.
 * Does not: export anything beyond store.h (every name here is internal to
 *   the library).
 */
#ifndef MS_STORE_STORE_INT_H
#define MS_STORE_STORE_INT_H

#include "store/cache.h"
#include "store/store.h"
#include "store/trace.h"

#include <pthread.h>
#include <stdint.h>

#define STORE_ALIGN MS_IO_ALIGN

typedef struct region {
    ms_region_class cls;
    int n_ranges;
    ms_range *ranges;
    int64_t *pos;
    int64_t buf_bytes, data_bytes;
    uint8_t sparse, resident;
    uint8_t *buf;               /* resident: its bytes */
    int stream_pos;             /* streamed TRUNK: index in ring.stream[], else -1 */
    int ring_slot;              /* streamed TRUNK: slot holding it, else -1 */
    int key;                    /* EXPERT: cache key, else -1 */
    const ms_pack_entry *pk;    /* packed TRUNK region: its image, else NULL (fixed at
                                   declaration: the checker threads read it) */
    uint8_t pk_gone;            /* the image was given up: read the shards */
    struct pk_prog *prog;       /* packed: its decode as it lands (land.c) */
} region;

/* A packed region's image as it lands (land.c, check_unpack): how much of it
 * has landed from its start, been hashed and been decoded, and whether a
 * checker thread is at work on it. Reset when the region's read is submitted;
 * `hashed` and `cur` are touched only by the thread that set `busy`. */
typedef struct pk_prog {
    pthread_mutex_t mu;
    int64_t landed;             /* image bytes [0, landed) are in memory */
    int64_t hashed;             /* image blocks [0, hashed) matched their hashes */
    int busy, failed;
    ms_pack_cursor cur;
} pk_prog;

/* Region r is read from the pack. */
static inline int packed(const region *r) { return r->pk && !r->pk_gone; }

enum { RS_FREE = 0, RS_LOADING = 1, RS_READY = 2 };

typedef struct ring_slot {
    int region;                 /* -1 when FREE */
    int state;
    int pins;
    int readahead;              /* loaded by read-ahead, not used yet */
    uint64_t ticket;
    uint8_t *buf;
} ring_slot;

typedef struct block { uint8_t *p; int64_t bytes; } block;

enum { BK_GLOBAL, BK_TRUNK, BK_SPARSE, BK_RING, BK_ARENA, BK_BOUNCE, BK_N };  /* RING..BOUNCE: prefaulted at start */

/* The trunk ring (ring.c). */
typedef struct store_ring {
    ring_slot *slot;            /* [n] */
    int n;
    int *stream;                /* streamed TRUNK region ids, declaration order */
    int n_stream;
} store_ring;

/* The expert slots (experts.c). Slot i's bytes are arena bytes
 * [i * slot_bytes, (i + 1) * slot_bytes). */
typedef struct store_experts {
    ms_cache cache;
    int on;                     /* the cache exists (experts declared and slots planned) */
    int64_t slot_bytes;
    int *key_region;            /* key -> region id */
    int64_t *seen;              /* key -> batch stamp (distinctness check) */
    int64_t batch_no;
    int64_t *want;              /* key -> want_gen when the model asked for it in this step */
    int64_t want_gen;           /* bumped by ms_store_confirm */
    int64_t *guess;             /* key -> guess_gen when in the latest guess list */
    int64_t guess_gen;          /* bumped by ms_store_predict and ms_store_confirm */
    /* a batch's scratch, sized by the slot count at start */
    int *b_slot, *b_kind, *b_idx, *b_miss;
    uint8_t *b_ok;              /* [slot]: its demand read of this batch arrived */
} store_experts;

/* The packed trunk (land.c). */
typedef struct store_pack {
    const ms_pack *pack;        /* NULL: read the shards */
    int file;                   /* I/O file index of the pack, -1 = none */
    int *by_off;                /* packed region ids by image offset (check_unpack's lookup) */
    int n;
    pk_prog *prog;              /* [n], by image offset */
    int64_t unpack_ns;          /* added by the checker threads (atomic) */
} store_pack;

/* The verified piece in the bounce buffer (store.c, read_part): [begin, end)
 * of shard `shard` lies at bounce + skew(begin); shard -1 = none. */
typedef struct store_bounce {
    int shard;
    int64_t begin, end;
} store_bounce;

struct ms_store {
    ms_store_params p;
    char *policy, *trace_path;  /* p's strings, owned */
    /* the files and the I/O layer */
    ms_io_params io_p;
    ms_io *io;
    const ms_sums *sums;        /* NULL: no verification */
    int *file_of;               /* shard -> I/O file index */
    int64_t *file_bytes;
    int n_files;
    ms_io_req *reqs;            /* [max_ranges]: one region's requests */
    int max_ranges;
    /* the region table and where the bytes live */
    region *regions;
    int n_regions, cap_regions;
    int n_expert;
    int started, start_failed;
    ms_plan plan;
    block blk[BK_N];
    /* the parts */
    store_ring ring;
    store_experts ex;
    store_pack pk;
    store_bounce bc;
    ms_trace_writer *trace;
    ms_store_stats stats;
    int64_t io_busy0, io_depth0;    /* the I/O layer's busy_ns / depth_ns at the last reset */
};

/* ------------------------------------------------------------- land.c */

/* The I/O layer's check hook (base/io.h, ms_io_check_fn) for the store's
 * files: checksum blocks of shard reads, the packed images' hash and decode. */
ms_status store_io_check(void *user, int file, int64_t rb, int64_t re, int64_t nb, int64_t ne,
                         const uint8_t *run, int64_t *n_checked, ms_err *err);
/* The pack's image of region r, or NULL (read from the shards). */
const ms_pack_entry *store_pack_entry(const ms_store *s, const region *r);
/* The packed regions by image offset, their decode progress (at start). */
ms_status store_pack_index(ms_store *s, ms_err *err);
void store_pack_free(ms_store *s);
/* Submit the reads of region r into buf (laid out as the region buffer) at
 * priority prio (store_submit: MS_IO_PRIO_DEMAND), counted in the stats. */
ms_status store_submit_prio(ms_store *s, const region *r, uint8_t *buf, int prio, uint64_t *ticket,
                            ms_err *err);
ms_status store_submit(ms_store *s, const region *r, uint8_t *buf, uint64_t *ticket, ms_err *err);
/* Wait for a ticket, timed into io_wait_ns (and *ns_extra when not NULL). The
 * verdict of the I/O threads' checks goes to *check (MS_OK without sums,
 * with verify_sync, or when all matched); NULL drops it (the bytes are
 * dropped too). */
ms_status store_wait(ms_store *s, uint64_t ticket, int64_t *ns_extra, ms_err *check, ms_err *err);
/* Wait for the read of region r into buf (ticket) and take the verdict on
 * its bytes; on a mismatch read it again (synchronously, into the same
 * buffer) and judge once more (a packed region is then given up for good).
 * MS_OK, or the wait's error, the second mismatch or the re-read's error in
 * err. ns_extra as in store_wait. */
ms_status store_land(ms_store *s, region *r, uint8_t *buf, uint64_t ticket, int64_t *ns_extra,
                     ms_err *err);
/* Hash bytes [off, off + n) of a shard at p on the compute thread
 * (verify_sync), timed and counted. */
ms_status store_check_sync(ms_store *s, int shard, int64_t off, int64_t n, const uint8_t *p,
                           ms_err *err);

/* ------------------------------------------------------------- ring.c */

/* Lay the ring's slots over the BK_RING block and list the streamed TRUNK
 * regions (after the plan placed the resident ones). */
ms_status ring_init(ms_store *s, ms_err *err);
void ring_free(ms_store *s);
/* Acquire streamed TRUNK region id: pinned and READY, or NULL and err. */
const uint8_t *ring_acquire(ms_store *s, int id, ms_err *err);
/* Drop a pin of streamed TRUNK region r (read-ahead when its slot frees). */
void ring_release(ms_store *s, const region *r);
/* The bytes of streamed TRUNK region r when its slot is READY, else NULL. */
const uint8_t *ring_in_memory(const ms_store *s, const region *r);
/* Publish r's read when it has finished (never blocks). */
void ring_reap(ms_store *s, const region *r);

/* ---------------------------------------------------------- experts.c */

/* The expert cache and its arrays (after the arena block is allocated). */
ms_status experts_init(ms_store *s, ms_err *err);
void experts_free(ms_store *s);
/* Bytes of expert slot `slot` in the arena. */
uint8_t *expert_buf(const ms_store *s, int slot);
/* Acquire the experts at regions[idx[0..n)] into ptrs[idx[..]]: all pinned
 * and READY on success; on failure none is held and ptrs[idx[..]] are NULL. */
ms_status experts_batch(ms_store *s, const int *regions, const int *idx, int n,
                        const uint8_t **ptrs, ms_err *err);
/* Drop a pin of EXPERT region r. */
void expert_release(ms_store *s, const region *r);
/* The bytes of EXPERT region r when a READY slot holds it, else NULL. */
const uint8_t *expert_in_memory(const ms_store *s, const region *r);
/* Everything resident (plan.experts_resident): a slot reserved for expert
 * region r to be read into at start, and, once all arrived, their publish. */
uint8_t *experts_resident_slot(ms_store *s, const region *r);
void experts_publish_resident(ms_store *s);

#endif
