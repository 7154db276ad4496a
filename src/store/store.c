/* store/store.c - the store: region table, resident blocks, the trunk ring and
 * the expert cache, all fed by the I/O layer.
 *
 * Where a region's bytes live (decided once by the plan, store/plan.h):
 *
 *   GLOBAL          pinned block            acquire -> pointer, release no-op
 *   GLOBAL sparse   sparse block or disk    read_part only (bounce buffer)
 *   TRUNK pinned    pinned block            acquire -> pointer, release no-op
 *   TRUNK streamed  ring of n_ring slots    acquire waits / reads, read-ahead
 *   EXPERT          arena of equal slots    cache (store/cache.h)
 *
 * Trunk ring: the streamed TRUNK regions are walked in declaration order,
 *   cyclically, so the next use of every region is known: at position p the
 *   distance to region x is (x - p - 1) mod N + 1. A demand read takes the
 *   unpinned slot whose region is needed LAST (a FREE slot first); read-ahead
 *   of the next n_ring - 1 regions (at an acquire) or n_ring regions (when the
 *   last pin of a streamed region goes: its slot is needed last now) only
 *   takes a slot whose region is needed later than the one being read. This
 *   is Belady's choice for a cyclic walk, where LRU would evict exactly the
 *   region needed next. Read-ahead at release keeps the disk busy while the
 *   compute works through pinned regions between two streamed ones.
 *
 *   ring slot:  FREE --read--> LOADING(ticket) --wait--> READY --evict--> ...
 *               (a slot is overwritten only when its pins are 0)
 *
 * Expert batch (acquire_batch): hits are pinned first; misses then reserve
 *   slots one by one (FREE first, then the policy's victim), their reads are
 *   submitted together, one ticket per region, in (file, offset) order, and
 *   every ticket is waited; a region is published READY only when its read
 *   succeeded. Any failure frees the failed slots, unpins the rest and fails
 *   the call with no pointer handed out (invariant 2 of store.h).
 * Prefetches: hints (PF_HINT, demand priority) and guesses (PF_GUESS,
 *   speculative priority, ms_store_predict) reserve slots without blocking
 *   and never evict an expert wanted in the current step (want[key] ==
 *   want_gen: confirmed or hinted, not yet acquired; the cache's veto). An
 *   unheld prefetch that finished is published by reap_prefetches at the
 *   next hint / predict / confirm (no wait); ms_store_confirm promotes the
 *   right guesses and cancels the wrong ones still queued, and each
 *   ms_store_predict cancels the queued guesses its new list drops (both:
 *   cancel_stale_guesses; cancelled = 1: the slot is freed once its
 *   in-flight chunks land, its dropped bytes are taken off
 *   expert_bytes_read). Trunk read-aheads read at AHEAD priority, behind
 *   demand reads.
 * Verification (with params.sums): every region read asks the I/O layer to
 *   check it as it lands (io_check below, on the I/O layer's checker
 *   threads: each 1 MiB block is hashed once, when the chunk that completes
 *   it has landed). Every wait that
 *   brings region bytes in goes through land() (load_resident, ring_acquire
 *   for demand reads and read-aheads, expert_batch for misses and
 *   prefetches, drain_prefetches), which takes the verdict with the ticket
 *   before the slot is published; a mismatch is read again once into the
 *   same buffer, synchronously, and checked again the same way. A failed
 *   check makes the read count as failed on the path it was on (a read-ahead
 *   or prefetch is then read again on demand, which checks again). A ticket
 *   waited only to be dropped (ring_evict) has its verdict ignored with its
 *   bytes. read_part reads whole blocks through the bounce buffer, checked
 *   the same way, then copies the part out; the last verified piece stays
 *   there (bc_*) and serves the next parts that lie inside it. With
 *   params.verify_sync the compute thread hashes after the wait instead
 *   (check_region), the reference for tests and A/B runs.
 * Memory: every buffer is allocated in ms_store_start (blocks sized by the
 *   plan, plus scratch arrays sized by the slot counts); acquire, release,
 *   read_part and hint allocate nothing.
 * Thread safety: the compute thread calls everything; the I/O layer's own
 *   threads only touch buffers between submit and wait.
 */
#include "store/store.h"

#include "base/bufalloc.h"
#include "base/clock.h"
#include "base/progress.h"
#include "store/cache.h"
#include "store/trace.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STORE_ALIGN MS_IO_ALIGN

typedef struct region {
    ms_region_class cls;
    int n_ranges;
    ms_range *ranges;
    int64_t *pos;
    int64_t buf_bytes, data_bytes;
    uint8_t sparse, resident;
    uint8_t *buf;               /* resident: its bytes */
    int stream_pos;             /* streamed TRUNK: index in stream[], else -1 */
    int ring_slot;              /* streamed TRUNK: slot holding it, else -1 */
    int key;                    /* EXPERT: cache key, else -1 */
    const ms_pack_entry *pk;    /* packed TRUNK region: its image, else NULL (fixed at
                                   declaration: the checker threads read it) */
    uint8_t pk_gone;            /* the image was given up: read the shards */
    struct pk_prog *prog;       /* packed: its decode as it lands (check_unpack) */
} region;

/* A packed region's image as it lands (check_unpack): how much of it has
 * landed from its start, been hashed and been decoded, and whether a checker
 * thread is at work on it. Reset when the region's read is submitted; `hashed`
 * and `cur` are touched only by the thread that set `busy`. */
typedef struct pk_prog {
    pthread_mutex_t mu;
    int64_t landed;             /* image bytes [0, landed) are in memory */
    int64_t hashed;             /* image blocks [0, hashed) matched their hashes */
    int busy, failed;
    ms_pack_cursor cur;
} pk_prog;

/* Region r is read from the pack. */
static int packed(const region *r) { return r->pk && !r->pk_gone; }

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

struct ms_store {
    ms_store_params p;
    char *policy, *trace_path;
    ms_io_params io_p;
    ms_io *io;
    const ms_sums *sums;        /* NULL: no verification */
    int *file_of;               /* shard -> I/O file index */
    int64_t *file_bytes;
    int n_files;

    region *regions;
    int n_regions, cap_regions;
    int n_expert;
    int started, start_failed;
    ms_plan plan;

    block blk[BK_N];
    /* trunk ring */
    ring_slot *ring;
    int n_ring;
    int *stream;                /* streamed TRUNK region ids, declaration order */
    int n_stream;
    /* experts */
    ms_cache cache;
    int cache_on;
    int64_t slot_bytes;
    int *key_region;            /* key -> region id */
    int64_t *seen;              /* key -> batch stamp (distinctness check) */
    int64_t batch_no;
    int64_t *want;              /* key -> want_gen when the model asked for it in this step */
    int64_t want_gen;           /* bumped by ms_store_confirm */
    int64_t *guess;             /* key -> guess_gen when in the latest guess list */
    int64_t guess_gen;          /* bumped by ms_store_predict and ms_store_confirm */
    /* scratch, sized at start */
    int *b_slot, *b_kind, *b_idx, *b_miss;
    uint8_t *b_ok;              /* [slot]: its demand read of this batch arrived */
    ms_io_req *reqs;
    int max_ranges;
    /* the verified piece in the bounce buffer: [bc_begin, bc_end) of shard
     * bc_shard lies at bounce + skew(bc_begin); bc_shard -1 = none */
    int bc_shard;
    int64_t bc_begin, bc_end;
    ms_trace_writer *trace;
    ms_store_stats stats;
    /* packed trunk */
    const ms_pack *pack;
    int pk_file;                /* I/O file index of the pack, -1 = none */
    int *pk_by_off;             /* packed region ids by image offset (io_check's lookup) */
    int n_pk;
    pk_prog *pk_prog;           /* [n_pk], by image offset */
    int64_t unpack_ns;          /* added by the checker threads (atomic) */
    int64_t io_busy0, io_depth0;    /* the I/O layer's busy_ns / depth_ns at the last reset */
};

/* The I/O layer's check hook (base/io.h): called on an I/O thread when a
 * chunk of a region or part read lands, with the landed stretch [rb, re) of
 * its request around the chunk's data [nb, ne). Hashes the checksum blocks
 * that lie inside the stretch and meet the chunk: the blocks of [nb, ne)
 * widened to whole blocks, minus a first / last block that reaches outside
 * the stretch (another chunk completes it later). Reads only the sums
 * (read-only) and the landed bytes: thread-safe. */
static ms_status check_unpack(ms_store *s, int64_t rb, int64_t re, int64_t nb, const uint8_t *run,
                             int64_t *n_checked, ms_err *err);

static ms_status io_check(void *user, int file, int64_t rb, int64_t re, int64_t nb, int64_t ne,
                          const uint8_t *run, int64_t *n_checked, ms_err *err) {
    ms_store *s = user;
    const int shard = file;     /* the store adds its files in shard order (asserted at open) */
    *n_checked = 0;
    if (file == s->pk_file) return check_unpack(s, rb, re, nb, run, n_checked, err);
    int64_t c0, c1, b0, b1;
    ms_status st = ms_sums_cover(s->sums, shard, nb, ne - nb, &c0, &c1, err);
    if (st != MS_OK) return st;
    if (c0 < rb) c0 = ms_sums_block_end(s->sums, shard, c0);
    if (c1 > re) {
        st = ms_sums_cover(s->sums, shard, c1 - 1, 1, &b0, &b1, err);
        if (st != MS_OK) return st;
        c1 = b0;
    }
    if (c0 >= c1) return MS_OK;
    st = ms_sums_check(s->sums, shard, c0, c1 - c0, run + (c0 - rb), err);
    if (st == MS_OK) *n_checked = c1 - c0;
    return st;
}

/* A chunk of a packed region's image has landed ([nb, ...) in the pack file,
 * inside the landed stretch [rb, re) of the image's one request). The image
 * is decoded in place as it lands, first chunk first (format/pack.h): when
 * the stretch starts at the image's start, the landed prefix grows to re;
 * then, with the sidecar (a pack is only read with it; with verify_sync the
 * compute thread hashes the decoded ranges instead), every hash block wholly
 * inside the prefix is checked before a byte of it is overwritten, and the
 * chunks inside the checked prefix are decoded. One checker thread at a time
 * works on a region; one whose chunk lands meanwhile records the prefix and
 * returns, and the working thread picks it up before it returns itself, so
 * the ticket (complete when every chunk's call has returned) waits for the
 * whole decode. The decode of all but the last landed piece so overlaps the
 * reading of the rest, instead of following it. The buffer belongs to this
 * request until its ticket is waited. */
static ms_status check_unpack(ms_store *s, int64_t rb, int64_t re, int64_t nb, const uint8_t *run,
                              int64_t *n_checked, ms_err *err) {
    int a = 0, b = s->n_pk;     /* the first image starting after nb */
    while (a < b) {
        int m = a + (b - a) / 2;
        if (s->regions[s->pk_by_off[m]].pk->image_off <= nb) a = m + 1;
        else b = m;
    }
    if (a == 0) return MS_OK;
    const region *r = &s->regions[s->pk_by_off[a - 1]];
    const ms_pack_entry *e = r->pk;
    if (nb >= e->image_off + e->image_bytes || rb != e->image_off) return MS_OK;  /* no new prefix */
    pk_prog *g = r->prog;
    uint8_t *img = (uint8_t *)run, *buf = img - e->shift;
    const int hash = s->sums && !s->p.verify_sync;
    const int64_t n_blocks = ms_pack_n_blocks(e);
    ms_status st = MS_OK;
    pthread_mutex_lock(&g->mu);
    if (re - rb > g->landed) g->landed = re - rb;
    if (g->busy || g->failed) {
        pthread_mutex_unlock(&g->mu);
        return MS_OK;
    }
    g->busy = 1;
    for (;;) {
        const int64_t landed = g->landed;
        pthread_mutex_unlock(&g->mu);
        int64_t avail = landed;
        if (hash) {             /* whole blocks only: a block is checked before any of it is overwritten */
            const int64_t b1 = landed == e->image_bytes ? n_blocks : landed / MS_PACK_HASH_BYTES;
            const int64_t from = g->hashed * MS_PACK_HASH_BYTES;
            if (b1 > g->hashed && (st = ms_pack_check_blocks(e, img, g->hashed, b1, ms_pack_path(s->pack), err)) == MS_OK)
                g->hashed = b1;
            /* the bytes the hashed blocks cover (the last block is shorter) */
            avail = g->hashed * MS_PACK_HASH_BYTES < e->image_bytes ? g->hashed * MS_PACK_HASH_BYTES : e->image_bytes;
            if (avail > from) *n_checked += avail - from;
        }
        if (st == MS_OK) {
            uint8_t scratch[MS_PACK_CHUNK_BYTES];
            const int64_t t0 = ms_now_ns();
            st = ms_pack_decode_upto(buf, r->buf_bytes, e, r->pos, &g->cur, e->shift + avail, scratch, 1, err);
            __atomic_fetch_add(&s->unpack_ns, ms_now_ns() - t0, __ATOMIC_RELAXED);
        }
        pthread_mutex_lock(&g->mu);
        if (st != MS_OK) g->failed = 1;
        if (st != MS_OK || g->landed == landed) break;
    }
    g->busy = 0;
    pthread_mutex_unlock(&g->mu);
    return st;
}

ms_store_params ms_store_default_params(void) {
    ms_store_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* ------------------------------------------------------------ open/close */

ms_status ms_store_open_paths(const ms_store_params *p, const char *const *paths, int n_paths,
                              ms_store **out, ms_err *err) {
    *out = NULL;
    if (p->ram_bytes < 0 || p->trunk_bytes < 0 || p->expert_bytes < 0 || p->min_expert_slots < 0 ||
        p->bounce_bytes < 0 || p->ring_slots < 0 || p->ring_slots == 1 || n_paths < 0)
        return ms_err_set(err, MS_E_USAGE,
                          "store: negative size or count, or 1 ring slot (at least 2 are needed)");
    if (p->policy && !ms_policy_find(p->policy))
        return ms_err_set(err, MS_E_USAGE, "unknown cache policy '%s' (known: %s)", p->policy,
                          ms_policy_names());
    ms_store *s = calloc(1, sizeof *s);
    if (!s) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    s->p = *p;
    s->io_p = p->io ? *p->io : ms_io_default_params();
    s->p.io = NULL;
    s->sums = p->sums;
    s->p.sums = NULL;
    s->bc_shard = -1;
    s->pack = p->pack;
    s->p.pack = NULL;
    s->pk_file = -1;
    if ((s->sums && !s->p.verify_sync) || s->pack) {
        s->io_p.check = io_check;
        s->io_p.check_user = s;
    }
    /* by-part reads then read the enclosing blocks: two of them (a part that
     * straddles a block boundary) plus the alignment of both ends */
    const int64_t verify_bounce = 2 * MS_SUMS_BLOCK_BYTES + 2 * MS_IO_ALIGN;
    if (s->sums && (s->p.bounce_bytes == 0 ? MS_PLAN_DEFAULT_BOUNCE : s->p.bounce_bytes) < verify_bounce)
        s->p.bounce_bytes = verify_bounce;
    s->policy = p->policy ? strdup(p->policy) : NULL;
    s->trace_path = p->trace_path ? strdup(p->trace_path) : NULL;
    s->p.policy = s->policy;
    s->p.trace_path = s->trace_path;
    s->file_of = calloc((size_t)n_paths + 1, sizeof *s->file_of);
    s->file_bytes = calloc((size_t)n_paths + 1, sizeof *s->file_bytes);
    if ((p->policy && !s->policy) || (p->trace_path && !s->trace_path) || !s->file_of || !s->file_bytes) {
        ms_store_close(s);
        return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    }
    ms_err e2;
    ms_err_clear(&e2);
    ms_status st = ms_io_open(&s->io_p, &s->io, &e2);
    if (st != MS_OK && s->io_p.kind == MS_IO_URING) {
        ms_log(p->log, MS_LOG_WARN, "store: %s; using O_DIRECT pread instead", e2.msg);
        s->io_p.kind = MS_IO_DIRECT;
        st = ms_io_open(&s->io_p, &s->io, err);
    } else if (st != MS_OK) {
        ms_err_set(err, st, "%s", e2.msg);
    }
    for (int i = 0; i < n_paths && st == MS_OK; i++) {
        st = ms_io_add_file(s->io, paths[i], &s->file_of[i], err);
        if (st == MS_OK) s->file_bytes[i] = ms_io_file_size(s->io, s->file_of[i]);
        MS_ASSERT(st != MS_OK || s->file_of[i] == i);   /* io_check takes file index = shard */
    }
    if (st == MS_OK && s->pack) st = ms_io_add_file(s->io, ms_pack_path(s->pack), &s->pk_file, err);
    if (st != MS_OK) { ms_store_close(s); return st; }
    s->n_files = n_paths;
    *out = s;
    return MS_OK;
}

ms_status ms_store_open(const ms_store_params *p, const ms_ckpt *ckpt,
                        ms_store **out, ms_err *err) {
    *out = NULL;
    int n = ms_ckpt_n_shards(ckpt);
    const char **paths = calloc((size_t)n + 1, sizeof *paths);
    if (!paths) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    for (int i = 0; i < n; i++) paths[i] = ms_ckpt_shard(ckpt, i)->path;
    ms_status st = ms_store_open_paths(p, paths, n, out, err);
    free(paths);
    return st;
}

void ms_store_close(ms_store *s) {
    if (!s) return;
    ms_io_close(s->io);                 /* drains every outstanding read first */
    if (s->trace) {
        ms_err e2;
        ms_err_clear(&e2);
        if (ms_trace_close(s->trace, &e2) != MS_OK) ms_log(s->p.log, MS_LOG_WARN, "store: %s", e2.msg);
    }
    for (int i = 0; i < BK_N; i++) {
        block *b = &s->blk[i];
        ms_buf_free(b->p, b->bytes, b->bytes >= MS_BUF_HUGE_PAGE);
    }
    for (int i = 0; i < s->n_regions; i++) {
        free(s->regions[i].ranges);
        free(s->regions[i].pos);
    }
    free(s->regions);
    free(s->ring);
    free(s->stream);
    ms_cache_free(&s->cache);
    free(s->key_region);
    free(s->seen);
    free(s->b_slot);
    free(s->want);
    free(s->guess);
    free(s->b_kind);
    free(s->b_idx);
    free(s->b_miss);
    free(s->b_ok);
    free(s->reqs);
    free(s->pk_by_off);
    for (int i = 0; i < s->n_pk && s->pk_prog; i++) pthread_mutex_destroy(&s->pk_prog[i].mu);
    free(s->pk_prog);
    free(s->file_of);
    free(s->file_bytes);
    free(s->policy);
    free(s->trace_path);
    free(s);
}

/* --------------------------------------------------------------- regions */

/* The pack's image of region r, when the pack holds exactly its ranges and
 * the image fits its buffer at its shift (the writer made sure; a pack of
 * the same table with other layout rules would not). Regions of more than
 * 64 ranges (none today: bind.c merges a layer part's tensors into a few)
 * are read from the shards. */
static const ms_pack_entry *pack_entry(const ms_store *s, const region *r) {
    ms_pack_range q[64];
    if (r->n_ranges > 64) return NULL;
    for (int i = 0; i < r->n_ranges; i++) q[i] = (ms_pack_range){ r->ranges[i].shard, r->ranges[i].offset, r->ranges[i].n_bytes };
    const ms_pack_entry *e = ms_pack_find(s->pack, q, r->n_ranges);
    if (!e || e->shift + ms_io_span(e->image_off, e->image_bytes) > r->buf_bytes) return NULL;
    return e;
}

int ms_store_add_region(ms_store *s, ms_region_class cls, const ms_range *ranges,
                        int n_ranges, int64_t *range_pos, ms_err *err) {
    MS_ASSERT(!s->started && !s->start_failed && n_ranges >= 1);
    MS_ASSERT(cls == MS_REGION_GLOBAL || cls == MS_REGION_TRUNK || cls == MS_REGION_EXPERT);
    for (int i = 0; i < n_ranges; i++) {
        const ms_range *g = &ranges[i];
        if (g->shard < 0 || g->shard >= s->n_files || g->offset < 0 || g->n_bytes < 0 ||
            g->offset > s->file_bytes[g->shard] - g->n_bytes)
            return ms_err_set(err, MS_E_MODEL,
                              "store: region %d range %d (shard %d, offset %lld, %lld bytes) lies outside its file",
                              s->n_regions, i, g->shard, (long long)g->offset, (long long)g->n_bytes);
        int64_t c0, c1;
        if (s->sums && g->n_bytes > 0 &&
            (ms_sums_cover(s->sums, g->shard, g->offset, g->n_bytes, &c0, &c1, err) != MS_OK ||
             c0 != g->offset || c1 != g->offset + g->n_bytes))
            return ms_err_set(err, MS_E_INTERNAL,
                              "store: region %d range %d (shard %d, offset %lld, %lld bytes) is not made of whole"
                              " checksum blocks, so it cannot be verified", s->n_regions, i, g->shard,
                              (long long)g->offset, (long long)g->n_bytes);
    }
    if (s->n_regions == s->cap_regions) {
        int cap = s->cap_regions ? s->cap_regions * 2 : 256;
        region *r = realloc(s->regions, (size_t)cap * sizeof *r);
        if (!r) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
        s->regions = r;
        s->cap_regions = cap;
    }
    region *r = &s->regions[s->n_regions];
    memset(r, 0, sizeof *r);
    r->cls = cls;
    r->n_ranges = n_ranges;
    r->stream_pos = r->ring_slot = r->key = -1;
    r->ranges = malloc((size_t)n_ranges * sizeof *r->ranges);
    r->pos = malloc((size_t)n_ranges * sizeof *r->pos);
    if (!r->ranges || !r->pos) {
        free(r->ranges); free(r->pos);
        return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    }
    /* range i starts at a buffer offset congruent to its file offset mod 4096
     * (store.h), so its aligned read superset starts on a page of the buffer */
    int64_t at = 0;
    for (int i = 0; i < n_ranges; i++) {
        const ms_range *g = &ranges[i];
        at = (at + STORE_ALIGN - 1) / STORE_ALIGN * STORE_ALIGN + g->offset % STORE_ALIGN;
        r->ranges[i] = *g;
        r->pos[i] = at;
        if (range_pos) range_pos[i] = at;
        at += g->n_bytes;
        r->data_bytes += g->n_bytes;
    }
    r->buf_bytes = (at + STORE_ALIGN - 1) / STORE_ALIGN * STORE_ALIGN;
    if (r->buf_bytes == 0) r->buf_bytes = STORE_ALIGN;
    if (cls == MS_REGION_EXPERT) r->key = s->n_expert++;
    if (cls == MS_REGION_TRUNK && s->pack) r->pk = pack_entry(s, r);
    if (n_ranges > s->max_ranges) s->max_ranges = n_ranges;
    return s->n_regions++;
}

void ms_store_mark_sparse(ms_store *s, int region_id) {
    MS_ASSERT(!s->started && region_id >= 0 && region_id < s->n_regions);
    MS_ASSERT(s->regions[region_id].cls == MS_REGION_GLOBAL);
    s->regions[region_id].sparse = 1;
}

int64_t ms_store_region_bytes(const ms_store *s, int region_id) {
    MS_ASSERT(region_id >= 0 && region_id < s->n_regions);
    return s->regions[region_id].buf_bytes;
}

int ms_store_region_resident(const ms_store *s, int region_id) {
    MS_ASSERT(s->started && region_id >= 0 && region_id < s->n_regions);
    const region *r = &s->regions[region_id];
    return r->resident || (r->cls == MS_REGION_EXPERT && s->plan.experts_resident);
}

int ms_store_expert_state(const ms_store *s, int region_id) {
    if (ms_store_region_resident(s, region_id)) return MS_EXPERT_READY;
    const region *r = &s->regions[region_id];
    if (r->cls != MS_REGION_EXPERT || !s->cache_on) return MS_EXPERT_ABSENT;
    const int slot = ms_cache_find(&s->cache, r->key);
    if (slot < 0 || s->cache.slots[slot].cancelled) return MS_EXPERT_ABSENT;
    return s->cache.slots[slot].state == MS_SLOT_READY ? MS_EXPERT_READY : MS_EXPERT_LOADING;
}

const ms_plan *ms_store_get_plan(const ms_store *s) {
    return (s->started || s->start_failed) ? &s->plan : NULL;
}

ms_io *ms_store_io(ms_store *s) { return s->io; }

int ms_store_expert_capacity(const ms_store *s) { return s->cache_on ? s->cache.n_slots : 0; }

/* ------------------------------------------------------------------- I/O */

static void count_read(ms_store *s, const region *r) {
    if (packed(r)) {
        s->stats.reads_issued++;
        s->stats.trunk_bytes_read += r->pk->image_bytes;
        s->stats.trunk_packed_read += r->pk->image_bytes;
        s->stats.trunk_unpacked_bytes += r->data_bytes;
        return;
    }
    s->stats.reads_issued += r->n_ranges;
    if (r->cls == MS_REGION_TRUNK) s->stats.trunk_bytes_read += r->data_bytes;
    else if (r->cls == MS_REGION_EXPERT) s->stats.expert_bytes_read += r->data_bytes;
    else s->stats.global_bytes_read += r->data_bytes;
}

/* Submit the reads of region r into buf (laid out as the region buffer). */
static ms_status submit_region_prio(ms_store *s, const region *r, uint8_t *buf, int prio,
                                    uint64_t *ticket, ms_err *err) {
    if (packed(r)) {    /* the image at buf + shift, decoded by check_unpack as it lands */
        pk_prog *g = r->prog;   /* no checker thread touches it: its last read was waited */
        g->landed = g->hashed = 0;
        g->busy = g->failed = 0;
        ms_pack_cursor_init(&g->cur, r->pk);
        const ms_io_req q = { s->pk_file, r->pk->image_off, r->pk->image_bytes, buf + r->pk->shift, 1 };
        ms_status st = ms_io_submit_prio(s->io, &q, 1, prio, ticket, err);
        if (st == MS_OK) count_read(s, r);
        return st;
    }
    for (int i = 0; i < r->n_ranges; i++) {
        const ms_range *g = &r->ranges[i];
        s->reqs[i] = (ms_io_req){ s->file_of[g->shard], g->offset, g->n_bytes,
                                  buf + r->pos[i] - ms_io_skew(g->offset),
                                  s->sums && !s->p.verify_sync };
    }
    ms_status st = ms_io_submit_prio(s->io, s->reqs, r->n_ranges, prio, ticket, err);
    if (st == MS_OK) count_read(s, r);
    return st;
}

/* A read someone waits for now or soon. */
static ms_status submit_region(ms_store *s, const region *r, uint8_t *buf, uint64_t *ticket,
                               ms_err *err) {
    return submit_region_prio(s, r, buf, MS_IO_PRIO_DEMAND, ticket, err);
}

/* Wait for a ticket. The verdict of the I/O threads' checks goes to *check
 * (MS_OK without sums, with verify_sync, or when all matched); NULL drops it
 * (the bytes are dropped too). */
static ms_status wait_ticket(ms_store *s, uint64_t ticket, int64_t *ns_extra, ms_err *check,
                             ms_err *err) {
    int64_t t0 = ms_now_ns();
    ms_err dropped;
    ms_status st = ms_io_wait_checked(s->io, ticket, check ? check : &dropped, err);
    int64_t dt = ms_now_ns() - t0;
    s->stats.io_wait_ns += dt;
    if (ns_extra) *ns_extra += dt;
    return st;
}

/* Check the bytes of region r in buf against the sums (timed and counted). */
/* Hash bytes [off, off + n) of a shard at p on the compute thread (verify_sync),
 * timed and counted. */
static ms_status check_sync(ms_store *s, int shard, int64_t off, int64_t n, const uint8_t *p,
                            ms_err *err) {
    const int64_t t0 = ms_now_ns();
    ms_status st = ms_sums_check(s->sums, shard, off, n, p, err);
    const int64_t dt = ms_now_ns() - t0;
    s->stats.verify_ns += dt;
    s->stats.verify_sync_ns += dt;
    if (st == MS_OK) s->stats.verify_bytes += n;
    return st;
}

static ms_status check_region(ms_store *s, const region *r, const uint8_t *buf, ms_err *err) {
    ms_status st = MS_OK;
    for (int i = 0; i < r->n_ranges && st == MS_OK; i++) {
        const ms_range *g = &r->ranges[i];
        if (g->n_bytes > 0) st = check_sync(s, g->shard, g->offset, g->n_bytes, buf + r->pos[i], err);
    }
    return st;
}

/* The verdict on region r's bytes in buf, whose ticket returned *check:
 * the I/O threads' (copied to err), or the compute thread's hash with
 * verify_sync. */
static ms_status verdict(ms_store *s, const region *r, const uint8_t *buf, const ms_err *check,
                         ms_err *err) {
    if (check->status != MS_OK) return ms_err_set(err, check->status, "%s", check->msg);
    if (s->sums && s->p.verify_sync) return check_region(s, r, buf, err);
    return MS_OK;
}

/* Wait for the read of region r into buf (ticket) and take the verdict on
 * its bytes; on a mismatch read it again (synchronously, into the same
 * buffer) and judge once more. MS_OK, or the wait's error, the second
 * mismatch or the re-read's error in err. ns_extra as in wait_ticket. */
static ms_status land(ms_store *s, region *r, uint8_t *buf, uint64_t ticket,
                      int64_t *ns_extra, ms_err *err) {
    ms_err check, first;
    ms_err_clear(&first);
    ms_status st = wait_ticket(s, ticket, ns_extra, &check, err);
    if (st != MS_OK) return st;
    if (verdict(s, r, buf, &check, &first) == MS_OK) return MS_OK;
    if (packed(r)) {    /* the checkpoint is the truth: give the packed image up for good */
        s->stats.pack_fallbacks++;
        r->pk_gone = 1;
        ms_log(s->p.log, MS_LOG_WARN, "store: packed trunk %s: %s; reading the checkpoint instead"
               " (run 'moestream pack' again)", ms_pack_path(s->pack), first.msg);
    } else {
        s->stats.verify_retries++;
        ms_log(s->p.log, MS_LOG_WARN, "store: %s; reading it again", first.msg);
    }
    uint64_t t;
    st = submit_region(s, r, buf, &t, err);
    if (st == MS_OK) st = wait_ticket(s, t, NULL, &check, err);
    if (st == MS_OK) st = verdict(s, r, buf, &check, err);
    if (st != MS_OK) s->stats.verify_failures++;
    return st;
}

/* ----------------------------------------------------------------- start */

static ms_status alloc_block(ms_store *s, int which, int64_t bytes, ms_err *err) {
    if (bytes <= 0) return MS_OK;
    uint8_t *p = ms_buf_alloc(bytes, bytes >= MS_BUF_HUGE_PAGE);
    if (!p) return ms_err_set(err, MS_E_NOMEM, "store: cannot allocate %lld bytes", (long long)bytes);
    s->blk[which] = (block){ p, bytes };
    return MS_OK;
}

static ms_status plan_and_allocate(ms_store *s, ms_err *err) {
    ms_plan_region *pr = calloc((size_t)s->n_regions + 1, sizeof *pr);
    uint8_t *res = calloc((size_t)s->n_regions + 1, 1);
    if (!pr || !res) {
        free(pr); free(res);
        return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    }
    for (int i = 0; i < s->n_regions; i++)
        pr[i] = (ms_plan_region){ (int)s->regions[i].cls, s->regions[i].buf_bytes, s->regions[i].sparse };
    ms_plan_input in = { pr, s->n_regions, s->p.ram_bytes, s->p.trunk_bytes, s->p.expert_bytes,
                         s->p.min_expert_slots, s->p.ring_slots, s->p.bounce_bytes };
    ms_status st = ms_plan_compute(&in, &s->plan, res, err);
    char table[2048];
    ms_plan_format(&s->plan, table, sizeof table);
    if (st != MS_OK) {
        ms_log(s->p.log, MS_LOG_INFO, "%s", table);
        ms_log(s->p.log, MS_LOG_ERROR, "store: %s", err ? err->msg : "plan refused");
        free(pr); free(res);
        return st;
    }
    ms_log(s->p.log, MS_LOG_INFO, "%s", table);

    /* blocks: the plan's sizes, allocated exactly as it accounted them */
    int64_t g = 0, t = 0, sp = 0;
    for (int i = 0; i < s->n_regions; i++) {
        region *r = &s->regions[i];
        if (r->cls == MS_REGION_EXPERT || !res[i]) continue;
        r->resident = 1;
        if (r->cls == MS_REGION_TRUNK) t += r->buf_bytes;
        else if (r->sparse) sp += r->buf_bytes;
        else g += r->buf_bytes;
    }
    free(pr);
    free(res);
    const ms_plan *pl = &s->plan;
    s->slot_bytes = pl->expert_slot_bytes;
    if ((st = alloc_block(s, BK_GLOBAL, g, err)) != MS_OK ||
        (st = alloc_block(s, BK_TRUNK, t, err)) != MS_OK ||
        (st = alloc_block(s, BK_SPARSE, sp, err)) != MS_OK ||
        (st = alloc_block(s, BK_RING, (int64_t)pl->n_ring * pl->ring_slot_bytes, err)) != MS_OK ||
        (st = alloc_block(s, BK_ARENA, (int64_t)pl->n_expert_slots * s->slot_bytes, err)) != MS_OK ||
        (st = alloc_block(s, BK_BOUNCE, pl->bounce_bytes, err)) != MS_OK)
        return st;
    /* Map the ring, the expert arena and the bounce buffer now. Their pages
     * are first written by reads during tokens, and an O_DIRECT read into
     * unmapped pages faults and zeroes them in the read's path: at the floor
     * of the bench checkpoint the first decode token after a prompt took
     * 1.9-2.3 s against 1.3-1.6 s for the next ones, because a ring slot got
     * its first region larger than any before (the upper 565 MB of it were
     * first touched then), and a prompt paid the same for every first use.
     * Resident blocks need nothing: ms_store_start reads them in full. Costs
     * ~0.17 s at start for 3.4 GB (machine B). */
    for (int i = BK_RING; i <= BK_BOUNCE; i++)
        ms_buf_prefault(s->blk[i].p, s->blk[i].bytes, s->blk[i].bytes >= MS_BUF_HUGE_PAGE);
    int64_t acc = 0;
    for (int i = 0; i < BK_N; i++) acc += ms_plan_alloc_bytes(s->blk[i].bytes);
    MS_ASSERT(acc == pl->total_bytes);     /* every byte the plan promised, no more */
    int64_t at[3] = { 0, 0, 0 };
    for (int i = 0; i < s->n_regions; i++) {
        region *r = &s->regions[i];
        if (!r->resident) continue;
        int which = r->cls == MS_REGION_TRUNK ? BK_TRUNK : r->sparse ? BK_SPARSE : BK_GLOBAL;
        int64_t *a = &at[which];
        r->buf = s->blk[which].p + *a;
        *a += r->buf_bytes;
    }

    /* ring */
    s->n_stream = 0;
    s->stream = malloc(((size_t)s->n_regions + 1) * sizeof *s->stream);
    s->n_ring = pl->n_ring;
    s->ring = calloc((size_t)s->n_ring + 1, sizeof *s->ring);
    if (!s->stream || !s->ring) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    for (int i = 0; i < s->n_regions; i++) {
        region *r = &s->regions[i];
        if (r->cls == MS_REGION_TRUNK && !r->resident) {
            r->stream_pos = s->n_stream;
            s->stream[s->n_stream++] = i;
        }
    }
    for (int k = 0; k < s->n_ring; k++)
        s->ring[k] = (ring_slot){ -1, RS_FREE, 0, 0, 0, s->blk[BK_RING].p + (int64_t)k * pl->ring_slot_bytes };

    /* experts */
    const int n_slots = pl->n_expert_slots;
    if (s->n_expert > 0 && n_slots > 0) {
        if ((st = ms_cache_init(&s->cache, n_slots, s->n_expert, s->policy, err)) != MS_OK) return st;
        s->cache_on = 1;
    }
    s->key_region = malloc(((size_t)s->n_expert + 1) * sizeof *s->key_region);
    s->seen = malloc(((size_t)s->n_expert + 1) * sizeof *s->seen);
    s->want = calloc((size_t)s->n_expert + 1, sizeof *s->want);
    s->want_gen = 1;            /* want[] = 0: nothing wanted yet */
    s->guess = calloc((size_t)s->n_expert + 1, sizeof *s->guess);
    s->guess_gen = 1;
    s->b_slot = malloc(((size_t)n_slots + 1) * sizeof *s->b_slot);
    s->b_kind = malloc(((size_t)n_slots + 1) * sizeof *s->b_kind);
    s->b_idx = malloc(((size_t)n_slots + 1) * sizeof *s->b_idx);
    s->b_miss = malloc(((size_t)n_slots + 1) * sizeof *s->b_miss);
    s->b_ok = calloc((size_t)n_slots + 1, 1);
    s->reqs = malloc(((size_t)s->max_ranges + 1) * sizeof *s->reqs);
    if (!s->key_region || !s->seen || !s->want || !s->guess || !s->b_slot || !s->b_kind || !s->b_idx || !s->b_miss || !s->b_ok || !s->reqs)
        return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    for (int i = 0; i < s->n_regions; i++)
        if (s->regions[i].cls == MS_REGION_EXPERT) s->key_region[s->regions[i].key] = i;
    for (int k = 0; k < s->n_expert; k++) s->seen[k] = -1;
    s->stats.resident_bytes = pl->total_bytes;
    s->stats.peak_bytes = pl->total_bytes;
    return MS_OK;
}

static uint8_t *slot_buf(const ms_store *s, int slot) {
    return s->blk[BK_ARENA].p + (int64_t)slot * s->slot_bytes;
}

/* Read every resident region (and, when all fit, every expert) at start:
 * one ticket per region keeps the request arrays small, a window of
 * outstanding tickets keeps the I/O queue full. */
static ms_status load_resident(ms_store *s, ms_err *err) {
    enum { WINDOW = 16 };
    uint64_t tk[WINDOW];
    int tk_region[WINDOW];
    uint8_t *tk_dst[WINDOW];
    int n_out = 0;
    ms_status st = MS_OK;
    int64_t total = 0, done = 0;            /* bytes, for the "open" progress */
    for (int i = 0; i < s->n_regions; i++)
        if (s->regions[i].resident || (s->regions[i].cls == MS_REGION_EXPERT && s->plan.experts_resident))
            total += s->regions[i].data_bytes;
    ms_progress_step ps;
    ms_progress_begin(&ps, "open", total, 0);
    for (int i = 0; i < s->n_regions && st == MS_OK; i++) {
        region *r = &s->regions[i];
        uint8_t *dst = NULL;
        if (r->resident) dst = r->buf;
        else if (r->cls == MS_REGION_EXPERT && s->plan.experts_resident) {
            int ek, ep;
            int slot = ms_cache_reserve(&s->cache, r->key, &ek, &ep);
            MS_ASSERT(slot >= 0 && ek < 0);
            dst = slot_buf(s, slot);
        }
        if (!dst) continue;
        if (n_out == WINDOW) {
            for (int j = 0; j < n_out; j++) {
                ms_status w = st == MS_OK ? land(s, &s->regions[tk_region[j]], tk_dst[j], tk[j], NULL, err)
                                          : wait_ticket(s, tk[j], NULL, NULL, NULL);
                if (st == MS_OK) st = w;
                done += s->regions[tk_region[j]].data_bytes;
            }
            n_out = 0;
            if (st != MS_OK) break;
            ms_progress_report(&ps, done, 0, done);
        }
        st = submit_region(s, r, dst, &tk[n_out], err);
        if (st == MS_OK) { tk_region[n_out] = i; tk_dst[n_out] = dst; n_out++; }
    }
    for (int j = 0; j < n_out; j++) {
        ms_status w = st == MS_OK ? land(s, &s->regions[tk_region[j]], tk_dst[j], tk[j], NULL, err)
                                  : wait_ticket(s, tk[j], NULL, NULL, NULL);
        if (st == MS_OK) st = w;
    }
    if (st != MS_OK) return st;
    ms_progress_report(&ps, total, 0, total);
    if (s->plan.experts_resident)
        for (int k = 0; k < s->n_expert; k++) ms_cache_publish(&s->cache, ms_cache_find(&s->cache, k));
    return MS_OK;
}

typedef struct pk_key { int64_t off; int id; } pk_key;

static int pk_cmp(const void *a, const void *b) {
    const int64_t x = ((const pk_key *)a)->off, y = ((const pk_key *)b)->off;
    return (x > y) - (x < y);
}

/* The packed regions by image offset, for check_unpack. */
static ms_status index_packed(ms_store *s, ms_err *err) {
    if (!s->pack) return MS_OK;
    s->pk_by_off = malloc(((size_t)s->n_regions + 1) * sizeof *s->pk_by_off);
    s->pk_prog = calloc((size_t)s->n_regions + 1, sizeof *s->pk_prog);
    pk_key *k = malloc(((size_t)s->n_regions + 1) * sizeof *k);
    if (!s->pk_by_off || !s->pk_prog || !k) { free(k); return ms_err_set(err, MS_E_NOMEM, "store: out of memory"); }
    for (int i = 0; i < s->n_regions; i++)
        if (s->regions[i].pk) k[s->n_pk++] = (pk_key){ s->regions[i].pk->image_off, i };
    qsort(k, (size_t)s->n_pk, sizeof *k, pk_cmp);
    ms_status st = MS_OK;
    for (int i = 0; i < s->n_pk; i++) {
        s->pk_by_off[i] = k[i].id;
        pthread_mutex_init(&s->pk_prog[i].mu, NULL);
        s->regions[k[i].id].prog = &s->pk_prog[i];
        if (i > 0 && k[i - 1].off == k[i].off)  /* two regions with one image: never from a valid pack */
            st = ms_err_set(err, MS_E_MODEL, "%s: two regions share an image", ms_pack_path(s->pack));
    }
    free(k);
    s->stats.packed_regions = s->n_pk;
    return st;
}

ms_status ms_store_start(ms_store *s, ms_err *err) {
    MS_ASSERT(!s->started && !s->start_failed);
    ms_status st = plan_and_allocate(s, err);
    if (st == MS_OK) st = index_packed(s, err);
    if (st == MS_OK && s->trace_path) st = ms_trace_open(s->trace_path, &s->trace, err);
    if (st == MS_OK) st = load_resident(s, err);
    if (st != MS_OK) { s->start_failed = 1; return st; }
    s->started = 1;
    return MS_OK;
}

/* ------------------------------------------------------------ trunk ring */

/* Distance from position p to the next use of the region in slot k; FREE
 * slots are farther than anything. */
static int ring_dist(const ms_store *s, int p, int k) {
    const ring_slot *q = &s->ring[k];
    if (q->state == RS_FREE) return s->n_stream + 1;
    int x = s->regions[q->region].stream_pos, n = s->n_stream;
    return ((x - p - 1) % n + n) % n + 1;
}

/* Empty slot k (pins 0) for reuse; a read still in flight is waited for. */
static void ring_evict(ms_store *s, int k) {
    ring_slot *q = &s->ring[k];
    MS_ASSERT(q->pins == 0);
    if (q->state == RS_LOADING) {
        ms_err e2;
        ms_err_clear(&e2);
        wait_ticket(s, q->ticket, &s->stats.ra_wait_ns, NULL, &e2);   /* bytes dropped: no verdict */
    }
    if (q->state != RS_FREE && q->readahead) s->stats.ra_wasted++;
    if (q->region >= 0) s->regions[q->region].ring_slot = -1;
    *q = (ring_slot){ -1, RS_FREE, 0, 0, 0, q->buf };
}

static void ring_readahead(ms_store *s, int p, int ahead) {
    const int n = s->n_stream;
    for (int d = 1; d <= ahead && d < n; d++) {
        int id = s->stream[(p + d) % n];
        if (s->regions[id].ring_slot >= 0) continue;
        int best = -1, best_d = d;
        for (int k = 0; k < s->n_ring; k++) {
            const ring_slot *q = &s->ring[k];
            if (q->pins > 0 || q->state == RS_LOADING) continue;    /* never block here */
            int dk = ring_dist(s, p, k);
            if (dk > best_d) { best = k; best_d = dk; }
        }
        if (best < 0) break;
        ring_evict(s, best);
        ring_slot *q = &s->ring[best];
        ms_err e2;
        ms_err_clear(&e2);
        if (submit_region_prio(s, &s->regions[id], q->buf, MS_IO_PRIO_AHEAD, &q->ticket, &e2) != MS_OK)
            break;
        q->region = id;
        q->state = RS_LOADING;
        q->readahead = 1;
        s->regions[id].ring_slot = best;
        s->stats.ra_issued++;
    }
}

/* Wait for ring slot k's read if it is LOADING. 1: READY; 0: the read failed
 * and the slot is empty again. */
static int ring_land(ms_store *s, int k) {
    ring_slot *q = &s->ring[k];
    if (q->state != RS_LOADING) return 1;
    ms_err e2;
    ms_err_clear(&e2);
    ms_status st = land(s, &s->regions[q->region], q->buf, q->ticket, &s->stats.ra_wait_ns, &e2);
    q->ticket = 0;
    if (st == MS_OK) {
        q->state = RS_READY;
        return 1;
    }
    s->stats.ra_failed++;
    q->readahead = 0;
    q->state = RS_FREE;
    ring_evict(s, k);
    return 0;
}

static const uint8_t *ring_acquire(ms_store *s, int id, ms_err *err) {
    region *r = &s->regions[id];
    const int p = r->stream_pos;
    int k = r->ring_slot;
    if (k >= 0 && !ring_land(s, k)) k = -1;     /* a failed read-ahead is read on demand below */
    if (k >= 0) {
        ring_slot *q = &s->ring[k];
        if (q->readahead) { s->stats.ra_used++; q->readahead = 0; }
        else s->stats.trunk_ring_hits++;
        q->pins++;
        if (!s->p.no_readahead) ring_readahead(s, p, s->n_ring - 1);
        return q->buf;
    }
    int best = -1, best_d = -1;
    for (int j = 0; j < s->n_ring; j++) {
        if (s->ring[j].pins > 0) continue;
        int dj = ring_dist(s, p, j);
        if (dj > best_d) { best = j; best_d = dj; }
    }
    MS_ASSERT(best >= 0);   /* more streamed regions held at once than ring slots */
    ring_evict(s, best);
    ring_slot *q = &s->ring[best];
    uint64_t t;
    ms_status st = submit_region(s, r, q->buf, &t, err);
    if (st != MS_OK) return NULL;
    q->region = id;
    q->state = RS_LOADING;
    q->pins = 1;
    r->ring_slot = best;
    s->stats.trunk_sync_reads++;
    /* queue the read-ahead behind the demand read before blocking on it */
    if (!s->p.no_readahead) ring_readahead(s, p, s->n_ring - 1);
    st = land(s, r, q->buf, t, NULL, err);
    if (st != MS_OK) {
        q->pins = 0;
        ring_evict(s, best);
        return NULL;
    }
    q->state = RS_READY;
    return q->buf;
}

/* --------------------------------------------------------- expert cache */

enum { K_HIT = 0, K_PENDING = 1, K_MISS = 2 };

/* prefetched: how a LOADING / READY slot's bytes were asked for before use */
enum { PF_NONE = 0, PF_HINT = 1, PF_GUESS = 2 };

/* An unheld prefetch still loading (cancelled or not). */
static int prefetch_loading(const ms_cache_slot *c) {
    return c->state == MS_SLOT_LOADING && c->pins == 0 && c->prefetched;
}

/* Wait for prefetch slot i (prefetch_loading) and publish it; free it when
 * its read failed or was cancelled. */
static void finish_prefetch(ms_store *s, int i) {
    ms_cache_slot *c = &s->cache.slots[i];
    ms_err e2;
    ms_err_clear(&e2);
    if (c->cancelled) {
        ms_err dropped;
        wait_ticket(s, c->ticket, NULL, &dropped, &e2);
        ms_cache_abort(&s->cache, i);
    } else if (land(s, &s->regions[s->key_region[c->key]], slot_buf(s, i), c->ticket, NULL, &e2) ==
               MS_OK) {
        ms_cache_publish(&s->cache, i);
    } else {
        s->stats.prefetch_failed++;
        ms_cache_abort(&s->cache, i);
    }
}

/* Wait for every prefetch still loading with no holder; publish what arrived. */
static void drain_prefetches(ms_store *s) {
    for (int i = 0; i < s->cache.n_slots; i++)
        if (prefetch_loading(&s->cache.slots[i])) finish_prefetch(s, i);
}

/* Publish (or free) every unheld prefetch whose read has finished, without
 * blocking: a guess that arrived becomes an evictable READY slot at once
 * instead of holding its slot until a drain. */
static void reap_prefetches(ms_store *s) {
    for (int i = 0; i < s->cache.n_slots; i++) {
        const ms_cache_slot *c = &s->cache.slots[i];
        if (prefetch_loading(c) && ms_io_poll(s->io, c->ticket) == 1) finish_prefetch(s, i);
    }
}

/* Veto for prefetch reservations: an expert the model asked for in this step
 * (ms_store_confirm, ms_store_hint) and has not acquired yet. */
static int wanted_now(void *user, int key) {
    const ms_store *s = user;
    return s->want[key] == s->want_gen;
}

/* The first use of a prefetched slot. */
static void count_prefetch_hit(ms_store *s, ms_cache_slot *cs) {
    if (cs->prefetched == PF_GUESS) s->stats.guess_hits++;
    cs->prefetched = PF_NONE;
    s->stats.prefetch_hits++;
}

static int reserve_slot(ms_store *s, int key) {
    int ek, ep;
    int slot = ms_cache_reserve(&s->cache, key, &ek, &ep);
    if (slot < 0) {
        drain_prefetches(s);
        slot = ms_cache_reserve(&s->cache, key, &ek, &ep);
    }
    if (slot >= 0 && ek >= 0 && ep) s->stats.prefetch_wasted++;
    return slot;
}

static int miss_before(const ms_store *s, int a, int b) {
    const ms_range *x = &s->regions[s->key_region[s->cache.slots[a].key]].ranges[0];
    const ms_range *y = &s->regions[s->key_region[s->cache.slots[b].key]].ranges[0];
    if (x->shard != y->shard) return x->shard < y->shard;
    return x->offset < y->offset;
}

/* The experts at regions[idx[0..n)]: all pinned and READY on success. */
static ms_status expert_batch(ms_store *s, const int *regions, const int *idx, int n,
                              const uint8_t **ptrs, ms_err *err) {
    MS_ASSERT(s->cache_on && n <= s->cache.n_slots);
    ms_cache *c = &s->cache;
    const int64_t b = s->batch_no++;
    for (int j = 0; j < n; j++) {
        const int key = s->regions[regions[idx[j]]].key;
        MS_ASSERT(s->seen[key] != b);   /* an expert twice in one batch */
        s->seen[key] = b;
        s->want[key] = 0;               /* asked for and got: no longer protected */
        s->b_slot[j] = regions[idx[j]]; /* region ids, for the trace */
    }
    if (s->trace) ms_trace_write(s->trace, b, s->b_slot, n);
    s->stats.expert_requests += n;
    /* 1. hits (READY or a prefetch in flight) are pinned before any eviction */
    for (int j = 0; j < n; j++) {
        const int key = s->regions[regions[idx[j]]].key;
        int slot = ms_cache_find(c, key);
        if (slot >= 0 && c->slots[slot].cancelled) {
            finish_prefetch(s, slot);   /* a cancelled guess: its in-flight chunks land, then a miss */
            slot = -1;
        }
        s->b_slot[j] = slot;
        if (slot < 0) { s->b_kind[j] = K_MISS; continue; }
        ms_cache_slot *cs = &c->slots[slot];
        cs->pins++;
        if (cs->state == MS_SLOT_LOADING) { s->b_kind[j] = K_PENDING; continue; }
        s->b_kind[j] = K_HIT;
        if (cs->prefetched) { count_prefetch_hit(s, cs); }
        else { s->stats.expert_hits++; ms_cache_touch(c, slot); }
    }
    /* 2. prefetches in flight: wait; a failed one becomes a miss */
    for (int j = 0; j < n; j++) {
        if (s->b_kind[j] != K_PENDING) continue;
        int slot = s->b_slot[j];
        ms_cache_slot *cs = &c->slots[slot];
        ms_err e2;
        ms_err_clear(&e2);
        if (land(s, &s->regions[regions[idx[j]]], slot_buf(s, slot), cs->ticket, NULL, &e2) == MS_OK) {
            ms_cache_publish(c, slot);
            count_prefetch_hit(s, cs);
            s->b_kind[j] = K_HIT;
        } else {
            s->stats.prefetch_failed++;
            cs->pins--;
            MS_ASSERT(cs->pins == 0);
            ms_cache_abort(c, slot);
            s->b_kind[j] = K_MISS;
        }
    }
    /* 3. misses reserve slots serially, in the caller's order */
    int n_miss = 0;
    for (int j = 0; j < n; j++) {
        if (s->b_kind[j] != K_MISS) continue;
        const int key = s->regions[regions[idx[j]]].key;
        int slot = reserve_slot(s, key);
        MS_ASSERT(slot >= 0);   /* more experts held at once than cache slots */
        c->slots[slot].pins = 1;
        s->b_slot[j] = slot;
        s->b_miss[n_miss++] = slot;
        s->stats.expert_misses++;
    }
    /* 4. submit in (file, offset) order, one ticket per region, then wait all */
    for (int i = 1; i < n_miss; i++)
        for (int j = i; j > 0 && miss_before(s, s->b_miss[j], s->b_miss[j - 1]); j--) {
            int t = s->b_miss[j]; s->b_miss[j] = s->b_miss[j - 1]; s->b_miss[j - 1] = t;
        }
    ms_status st = MS_OK;
    for (int i = 0; i < n_miss; i++) {
        ms_cache_slot *cs = &c->slots[s->b_miss[i]];
        cs->ticket = 0;
        if (st != MS_OK) continue;      /* the call fails: issue nothing more */
        st = submit_region(s, &s->regions[s->key_region[cs->key]], slot_buf(s, s->b_miss[i]),
                           &cs->ticket, err);
    }
    for (int i = 0; i < n_miss; i++) {
        ms_cache_slot *cs = &c->slots[s->b_miss[i]];
        ms_status w = cs->ticket ? land(s, &s->regions[s->key_region[cs->key]], slot_buf(s, s->b_miss[i]),
                                        cs->ticket, NULL, err)
                                 : MS_E_IO;
        cs->ticket = 0;
        s->b_ok[s->b_miss[i]] = w == MS_OK;
        if (st == MS_OK) st = w;
    }
    /* 5. publish in the caller's order (the policy sees the order the trace
     * records, so a replay reproduces the live hit count); drop failures */
    for (int j = 0; j < n; j++) {
        const int slot = s->b_slot[j];
        if (s->b_kind[j] != K_MISS) continue;
        ms_cache_slot *cs = &c->slots[slot];
        if (s->b_ok[slot]) { ms_cache_publish(c, slot); continue; }
        cs->pins = 0;
        ms_cache_abort(c, slot);
        s->b_slot[j] = -1;
    }
    if (st != MS_OK) {
        for (int j = 0; j < n; j++) {
            if (s->b_slot[j] >= 0) c->slots[s->b_slot[j]].pins--;
            ptrs[idx[j]] = NULL;
        }
        return st;
    }
    for (int j = 0; j < n; j++) ptrs[idx[j]] = slot_buf(s, s->b_slot[j]);
    return MS_OK;
}

/* Start reading the uncached experts among regions[0..n) into slots the
 * cache can give without blocking or evicting a wanted expert, at priority
 * prio, marking them `how`. */
static void prefetch(ms_store *s, const int *regions, int n, int prio, int how) {
    s->cache.veto = wanted_now;
    s->cache.veto_user = s;
    for (int i = 0; i < n; i++) {
        MS_ASSERT(regions[i] >= 0 && regions[i] < s->n_regions);
        const region *r = &s->regions[regions[i]];
        if (r->cls != MS_REGION_EXPERT || ms_cache_find(&s->cache, r->key) >= 0) continue;
        int ek, ep;
        int slot = ms_cache_reserve(&s->cache, r->key, &ek, &ep);   /* no blocking drain */
        if (slot < 0) break;
        if (ek >= 0 && ep) s->stats.prefetch_wasted++;
        ms_cache_slot *cs = &s->cache.slots[slot];
        ms_err e2;
        ms_err_clear(&e2);
        if (submit_region_prio(s, r, slot_buf(s, slot), prio, &cs->ticket, &e2) != MS_OK) {
            ms_cache_abort(&s->cache, slot);
            break;
        }
        cs->prefetched = (uint8_t)how;
        s->stats.prefetch_issued++;
        if (how == PF_GUESS) s->stats.guess_issued++;
    }
    s->cache.veto = NULL;
    s->cache.veto_user = NULL;
}

void ms_store_hint(ms_store *s, const int *regions, int n) {
    if (!s->started || !s->cache_on || s->plan.experts_resident) return;
    reap_prefetches(s);
    for (int i = 0; i < n; i++) {
        MS_ASSERT(regions[i] >= 0 && regions[i] < s->n_regions);
        const region *r = &s->regions[regions[i]];
        if (r->cls == MS_REGION_EXPERT) s->want[r->key] = s->want_gen;
    }
    prefetch(s, regions, n, MS_IO_PRIO_DEMAND, PF_HINT);
}

/* Cancel every guess still queued that is neither wanted in this step nor in
 * the latest guess list; the bytes it drops are not counted as read. */
static void cancel_stale_guesses(ms_store *s) {
    ms_cache *c = &s->cache;
    for (int i = 0; i < c->n_slots; i++) {
        ms_cache_slot *cs = &c->slots[i];
        if (!prefetch_loading(cs) || cs->prefetched != PF_GUESS || cs->cancelled ||
            s->want[cs->key] == s->want_gen || s->guess[cs->key] == s->guess_gen)
            continue;
        const int64_t dropped = ms_io_cancel(s->io, cs->ticket);
        if (dropped <= 0) continue;     /* all of it in flight or landed: it completes */
        cs->cancelled = 1;
        s->stats.expert_bytes_read -= dropped;
        s->stats.guess_cancelled++;
    }
}

void ms_store_confirm(ms_store *s, const int *regions, int n) {
    if (!s->started || !s->cache_on || s->plan.experts_resident) return;
    s->want_gen++;
    s->guess_gen++;                     /* the last guess list is judged now */
    ms_cache *c = &s->cache;
    for (int i = 0; i < n; i++) {
        MS_ASSERT(regions[i] >= 0 && regions[i] < s->n_regions);
        const region *r = &s->regions[regions[i]];
        if (r->cls != MS_REGION_EXPERT) continue;
        s->want[r->key] = s->want_gen;
        const int slot = ms_cache_find(c, r->key);
        if (slot >= 0 && c->slots[slot].state == MS_SLOT_LOADING && !c->slots[slot].cancelled)
            ms_io_promote(s->io, c->slots[slot].ticket);   /* a right guess: needed now */
    }
    cancel_stale_guesses(s);
    reap_prefetches(s);
}

void ms_store_touch(ms_store *s, const int *regions, int n) {
    if (!s->started || !s->cache_on || s->plan.experts_resident) return;
    for (int i = 0; i < n; i++) {
        MS_ASSERT(regions[i] >= 0 && regions[i] < s->n_regions);
        const region *r = &s->regions[regions[i]];
        if (r->cls != MS_REGION_EXPERT) continue;
        const int slot = ms_cache_find(&s->cache, r->key);
        if (slot >= 0 && s->cache.slots[slot].state == MS_SLOT_READY) ms_cache_touch(&s->cache, slot);
    }
}

void ms_store_predict(ms_store *s, const int *regions, int n) {
    if (!s->started || !s->cache_on || s->plan.experts_resident) return;
    s->guess_gen++;
    for (int i = 0; i < n; i++) {
        MS_ASSERT(regions[i] >= 0 && regions[i] < s->n_regions);
        const region *r = &s->regions[regions[i]];
        if (r->cls == MS_REGION_EXPERT) s->guess[r->key] = s->guess_gen;
    }
    cancel_stale_guesses(s);
    reap_prefetches(s);
    prefetch(s, regions, n, MS_IO_PRIO_SPECULATIVE, PF_GUESS);
}

/* ---------------------------------------------------------- acquire API */

const uint8_t *ms_store_acquire(ms_store *s, int region_id, ms_err *err) {
    MS_ASSERT(s->started && region_id >= 0 && region_id < s->n_regions);
    region *r = &s->regions[region_id];
    if (r->resident) return r->buf;
    if (r->cls == MS_REGION_TRUNK) return ring_acquire(s, region_id, err);
    MS_ASSERT(r->cls == MS_REGION_EXPERT);  /* a sparse GLOBAL is read by parts only */
    const uint8_t *p = NULL;
    int idx = 0;
    if (expert_batch(s, &region_id, &idx, 1, &p, err) != MS_OK) return NULL;
    return p;
}

ms_status ms_store_acquire_batch(ms_store *s, const int *regions, int n,
                                 const uint8_t **ptrs, ms_err *err) {
    MS_ASSERT(s->started && n >= 0);
    int n_exp = 0;
    for (int i = 0; i < n; i++) {
        MS_ASSERT(regions[i] >= 0 && regions[i] < s->n_regions);
        ptrs[i] = NULL;
        if (s->regions[regions[i]].cls == MS_REGION_EXPERT) n_exp++;
    }
    MS_ASSERT(n_exp == 0 || (s->cache_on && n_exp <= s->cache.n_slots));
    int k = 0;
    for (int i = 0; i < n; i++)
        if (s->regions[regions[i]].cls == MS_REGION_EXPERT) s->b_idx[k++] = i;
    ms_status st = MS_OK;
    for (int i = 0; i < n && st == MS_OK; i++) {
        if (s->regions[regions[i]].cls == MS_REGION_EXPERT) continue;
        if (!(ptrs[i] = ms_store_acquire(s, regions[i], err))) st = err ? err->status : MS_E_IO;
    }
    if (st == MS_OK && n_exp > 0) st = expert_batch(s, regions, s->b_idx, n_exp, ptrs, err);
    if (st != MS_OK) {
        for (int i = 0; i < n; i++)
            if (ptrs[i] && s->regions[regions[i]].cls != MS_REGION_EXPERT) {
                ms_store_release(s, regions[i]);
                ptrs[i] = NULL;
            }
        if (st >= 0) st = MS_E_IO;
    }
    return st;
}

void ms_store_release(ms_store *s, int region_id) {
    MS_ASSERT(s->started && region_id >= 0 && region_id < s->n_regions);
    region *r = &s->regions[region_id];
    if (r->resident) return;
    if (r->cls == MS_REGION_TRUNK) {
        MS_ASSERT(r->ring_slot >= 0 && s->ring[r->ring_slot].pins > 0);
        /* its slot is free for the region n_ring ahead: start that read now,
         * not at the next streamed acquire, so the disk keeps going while
         * the compute works through pinned regions */
        if (--s->ring[r->ring_slot].pins == 0 && !s->p.no_readahead)
            ring_readahead(s, r->stream_pos, s->n_ring);
        return;
    }
    MS_ASSERT(r->cls == MS_REGION_EXPERT);
    int slot = ms_cache_find(&s->cache, r->key);
    MS_ASSERT(slot >= 0 && s->cache.slots[slot].pins > 0);
    s->cache.slots[slot].pins--;
}

/* ------------------------------------------------------------- read_part */

/* Bytes of region r in memory right now (resident, a READY ring slot or a
 * READY cache slot), or NULL. */
static const uint8_t *in_memory(const ms_store *s, const region *r) {
    if (r->resident) return r->buf;
    if (r->cls == MS_REGION_TRUNK && r->ring_slot >= 0 && s->ring[r->ring_slot].state == RS_READY)
        return s->ring[r->ring_slot].buf;
    if (r->cls == MS_REGION_EXPERT && s->cache_on) {
        int slot = ms_cache_find(&s->cache, r->key);
        if (slot >= 0 && s->cache.slots[slot].state == MS_SLOT_READY) return slot_buf(s, slot);
    }
    return NULL;
}

const uint8_t *ms_store_peek(ms_store *s, int region_id) {
    MS_ASSERT(s->started && region_id >= 0 && region_id < s->n_regions);
    const region *r = &s->regions[region_id];
    if (r->cls == MS_REGION_TRUNK && r->ring_slot >= 0 && s->ring[r->ring_slot].state == RS_LOADING &&
        ms_io_poll(s->io, s->ring[r->ring_slot].ticket) == 1)
        ring_land(s, r->ring_slot);     /* finished: taking it blocks on nothing */
    return in_memory(s, r);
}

static void count_part(ms_store *s, const region *r, int64_t len) {
    s->stats.reads_issued++;
    if (r->cls == MS_REGION_TRUNK) s->stats.trunk_bytes_read += len;
    else if (r->cls == MS_REGION_EXPERT) s->stats.expert_bytes_read += len;
    else s->stats.global_bytes_read += len;
}

/* Read bytes [off, off + n) of range g (of region r) into out, verified: the
 * enclosing checksum blocks are read through the bounce buffer in pieces of
 * whole blocks, each piece checked (and read once more on a mismatch) before
 * its share of the part is copied out. The last verified piece stays in the
 * bounce buffer (bc_*): blocks inside it are copied out without a read (the
 * next embedding row of the same block costs no I/O and no hashing). */
static ms_status read_part_verified(ms_store *s, const region *r, const ms_range *g, int64_t off,
                                    int64_t n, uint8_t *out, ms_err *err) {
    const block *bb = &s->blk[BK_BOUNCE];
    int64_t c0, c1;
    ms_status st = ms_sums_cover(s->sums, g->shard, off, n, &c0, &c1, err);
    if (st != MS_OK) return st;
    for (int64_t cur = c0; cur < c1;) {
        int64_t end = cur;
        if (s->bc_shard == g->shard && cur >= s->bc_begin && cur < s->bc_end) {
            /* cur is a block start and bc_end a block end (the piece was whole
             * blocks), so [cur, end) is whole verified blocks */
            end = s->bc_end < c1 ? s->bc_end : c1;
            s->stats.part_hits++;
            int64_t a = cur > off ? cur : off, b = end < off + n ? end : off + n;
            if (b > a)
                memcpy(out + (a - off), bb->p + ms_io_skew(s->bc_begin) + (a - s->bc_begin), (size_t)(b - a));
            cur = end;
            continue;
        }
        s->bc_shard = -1;   /* the bounce buffer is about to be overwritten */
        for (;;) {          /* as many whole blocks as the bounce buffer holds */
            int64_t nx = ms_sums_block_end(s->sums, g->shard, end);
            MS_ASSERT(nx > end && nx <= c1);
            if (end > cur && ms_io_span(cur, nx - cur) > bb->bytes) break;
            end = nx;
            if (end == c1) break;
        }
        MS_ASSERT(bb->p && ms_io_span(cur, end - cur) <= bb->bytes);   /* >= one block + alignment */
        for (int attempt = 0;; attempt++) {
            ms_io_req q = { s->file_of[g->shard], cur, end - cur, bb->p, !s->p.verify_sync };
            uint64_t t;
            ms_err check;
            st = ms_io_submit(s->io, &q, 1, &t, err);
            if (st == MS_OK) st = wait_ticket(s, t, NULL, &check, err);
            if (st != MS_OK) return st;
            count_part(s, r, end - cur);
            ms_err e1;
            ms_err_clear(&e1);
            if (s->p.verify_sync) {
                st = check_sync(s, g->shard, cur, end - cur, bb->p + ms_io_skew(cur), attempt ? err : &e1);
            } else {
                st = check.status;
                if (st != MS_OK) ms_err_set(attempt ? err : &e1, st, "%s", check.msg);
            }
            if (st == MS_OK) {
                s->bc_shard = g->shard;
                s->bc_begin = cur;
                s->bc_end = end;
                break;
            }
            if (attempt) { s->stats.verify_failures++; return st; }
            s->stats.verify_retries++;
            ms_log(s->p.log, MS_LOG_WARN, "store: %s; reading it again", e1.msg);
        }
        int64_t a = cur > off ? cur : off, b = end < off + n ? end : off + n;
        if (b > a) memcpy(out + (a - off), bb->p + ms_io_skew(cur) + (a - cur), (size_t)(b - a));
        cur = end;
    }
    return MS_OK;
}

ms_status ms_store_read_part(ms_store *s, int region_id, int64_t rel, int64_t n_bytes,
                             void *dst, ms_err *err) {
    MS_ASSERT(s->started && region_id >= 0 && region_id < s->n_regions);
    region *r = &s->regions[region_id];
    if (rel < 0 || n_bytes < 0 || rel > r->data_bytes - n_bytes)
        return ms_err_set(err, MS_E_INTERNAL, "store: part [%lld, +%lld) lies outside region %d (%lld bytes)",
                          (long long)rel, (long long)n_bytes, region_id, (long long)r->data_bytes);
    const uint8_t *mem = in_memory(s, r);
    uint8_t *out = dst;
    for (int i = 0; i < r->n_ranges && n_bytes > 0; i++) {
        const ms_range *g = &r->ranges[i];
        if (rel >= g->n_bytes) { rel -= g->n_bytes; continue; }
        int64_t take = g->n_bytes - rel < n_bytes ? g->n_bytes - rel : n_bytes;
        if (mem) {
            memcpy(out, mem + r->pos[i] + rel, (size_t)take);
        } else if (s->sums) {
            ms_status st = read_part_verified(s, r, g, g->offset + rel, take, out, err);
            if (st != MS_OK) return st;
        } else {
            /* through the bounce buffer, in pieces whose aligned span fits it */
            const block *bb = &s->blk[BK_BOUNCE];
            MS_ASSERT(bb->p && bb->bytes > 2 * STORE_ALIGN);
            const int64_t piece_max = bb->bytes - 2 * STORE_ALIGN;
            for (int64_t done = 0; done < take;) {
                int64_t len = take - done < piece_max ? take - done : piece_max;
                int64_t off = g->offset + rel + done;
                ms_io_req q = { s->file_of[g->shard], off, len, bb->p, 0 };
                uint64_t t;
                ms_status st = ms_io_submit(s->io, &q, 1, &t, err);
                if (st == MS_OK) st = wait_ticket(s, t, NULL, NULL, err);
                if (st != MS_OK) return st;
                count_part(s, r, len);
                memcpy(out + done, bb->p + ms_io_skew(off), (size_t)len);
                done += len;
            }
        }
        out += take;
        n_bytes -= take;
        rel = 0;
    }
    MS_ASSERT(n_bytes == 0);
    return MS_OK;
}

/* ----------------------------------------------------------------- stats */

void ms_store_get_stats(const ms_store *s, ms_store_stats *st) {
    *st = s->stats;
    st->unpack_ns = __atomic_load_n(&s->unpack_ns, __ATOMIC_RELAXED);
    if (!s->io) return;
    /* the hashing done on the I/O threads (counted there since open, like verify_*) */
    ms_io_stats io;
    ms_io_get_stats(s->io, &io);
    st->verify_ns += io.check_ns;
    st->verify_bytes += io.check_bytes;
    st->io_busy_ns = io.busy_ns - s->io_busy0;
    st->io_depth_ns = io.depth_ns - s->io_depth0;
}

void ms_store_reset_stats(ms_store *s) {
    const ms_store_stats keep = s->stats;
    memset(&s->stats, 0, sizeof s->stats);
    s->stats.resident_bytes = keep.resident_bytes;
    s->stats.peak_bytes = keep.peak_bytes;
    s->stats.verify_bytes = keep.verify_bytes;
    s->stats.verify_retries = keep.verify_retries;
    s->stats.verify_failures = keep.verify_failures;
    s->stats.verify_ns = keep.verify_ns;
    s->stats.verify_sync_ns = keep.verify_sync_ns;
    s->stats.packed_regions = keep.packed_regions;
    __atomic_store_n(&s->unpack_ns, 0, __ATOMIC_RELAXED);
    if (s->io) {
        ms_io_stats io;
        ms_io_get_stats(s->io, &io);
        s->io_busy0 = io.busy_ns;
        s->io_depth0 = io.depth_ns;
    }
}

/* ------------------------------------------------------------ write pack */

ms_status ms_store_write_pack(ms_store *s, const char *path, uint64_t table_hash, int64_t *raw,
                              int64_t *packed_bytes, int64_t *packed_raw, int *n_packed, int *n_regions,
                              ms_err *err) {
    MS_ASSERT(!s->started && !s->pack);
    *raw = *packed_bytes = *packed_raw = 0;
    *n_packed = *n_regions = 0;
    int64_t cap = 0;
    for (int i = 0; i < s->n_regions; i++)
        if (s->regions[i].cls == MS_REGION_TRUNK && s->regions[i].buf_bytes > cap) cap = s->regions[i].buf_bytes;
    if (cap == 0) return ms_err_set(err, MS_E_MODEL, "store: no trunk regions to pack");
    if (!s->sums) return ms_err_set(err, MS_E_USAGE, "store: a pack is made against the checksum sidecar");
    uint8_t *buf = ms_buf_alloc(cap, cap >= MS_BUF_HUGE_PAGE);
    ms_pack_range *q = malloc(((size_t)s->max_ranges + 1) * sizeof *q);
    if (!s->reqs) s->reqs = malloc(((size_t)s->max_ranges + 1) * sizeof *s->reqs);
    ms_pack_writer *w = NULL;
    ms_status st = buf && q && s->reqs ? MS_OK : ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    if (st == MS_OK) st = ms_pack_writer_open(path, table_hash, ms_sums_content_hash(s->sums), &w, err);
    int64_t total = 0, done = 0, t_log = ms_now_ns();
    for (int i = 0; i < s->n_regions; i++)
        if (s->regions[i].cls == MS_REGION_TRUNK) total += s->regions[i].data_bytes;
    ms_progress_step ps;
    ms_progress_begin(&ps, "pack", total, 0);
    for (int i = 0; i < s->n_regions && st == MS_OK; i++) {
        region *r = &s->regions[i];
        if (r->cls != MS_REGION_TRUNK) continue;
        uint64_t t;
        if ((st = submit_region(s, r, buf, &t, err)) != MS_OK) break;
        if ((st = land(s, r, buf, t, NULL, err)) != MS_OK) break;
        for (int k = 0; k < r->n_ranges; k++) q[k] = (ms_pack_range){ r->ranges[k].shard, r->ranges[k].offset, r->ranges[k].n_bytes };
        int64_t img = 0;
        if ((st = ms_pack_writer_add(w, q, r->n_ranges, r->pos, buf, r->buf_bytes, &img, err)) != MS_OK) break;
        (*n_regions)++;
        *raw += r->data_bytes;
        done += r->data_bytes;
        if (img > 0) {
            (*n_packed)++;
            *packed_bytes += img;
            *packed_raw += r->data_bytes;
        }
        ms_progress_report(&ps, done, 0, done);
        if (!ms_progress_on() && ms_now_ns() - t_log > 5000000000LL) {
            t_log = ms_now_ns();
            ms_log(s->p.log, MS_LOG_INFO, "pack: %.1f of %.1f GB", (double)done / 1e9, (double)total / 1e9);
        }
    }
    if (st == MS_OK) st = ms_pack_writer_finish(w, err);
    else ms_pack_writer_abort(w);
    free(q);
    ms_buf_free(buf, cap, cap >= MS_BUF_HUGE_PAGE);
    return st;
}
