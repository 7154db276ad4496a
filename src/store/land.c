/* store/land.c - bytes arriving: how a region's read is submitted, waited
 * for and judged before its slot is published.
 *
 * Owns: the I/O layer's check hook for the store's files, the packed trunk's
 *   decode as it lands (store_pack: the regions by image offset and their
 *   progress), the submit / wait / land path every region read takes, and the
 *   read counters of the stats.
 * Verification (with params.sums): every region read asks the I/O layer to
 *   check it as it lands (store_io_check, on the I/O layer's checker threads:
 *   each 1 MiB block is hashed once, when the chunk that completes it has
 *   landed). Every wait that brings region bytes in goes through store_land
 *   (the resident loads at start, ring demand reads and read-aheads, expert
 *   misses and prefetches), which takes the verdict with the ticket before
 *   the slot is published; a mismatch is read again once into the same
 *   buffer, synchronously, and checked again the same way. A failed check
 *   makes the read count as failed on the path it was on (a read-ahead or
 *   prefetch is then read again on demand, which checks again). A ticket
 *   waited only to be dropped (a ring eviction) has its verdict ignored with
 *   its bytes. With params.verify_sync the compute thread hashes after the
 *   wait instead (check_region), the reference for tests and A/B runs.
 * Packed trunk: a TRUNK region the pack holds is read as one request of its
 *   image, which check_unpack hashes and decodes in place as it lands (see
 *   there); a mismatch or a decode error gives the image up for good.
 * Invariants: a region's bytes are published only after store_land returned
 *   MS_OK for its ticket; the hook only reads the sums, the pack's index and
 *   the landed bytes, and touches a packed region's progress under its mutex.
 * Does not: choose slots or what to read (ring.c, experts.c); by-part reads
 *   (store.c) check their own pieces with store_check_sync / the hook.
 */
#include "store/store_int.h"

#include "base/clock.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------ the hook on I/O threads */

static ms_status check_unpack(ms_store *s, int64_t rb, int64_t re, int64_t nb, const uint8_t *run,
                              int64_t *n_checked, ms_err *err);

/* Called on an I/O thread when a chunk of a region or part read lands, with
 * the landed stretch [rb, re) of its request around the chunk's data
 * [nb, ne). Hashes the checksum blocks that lie inside the stretch and meet
 * the chunk: the blocks of [nb, ne) widened to whole blocks, minus a first /
 * last block that reaches outside the stretch (another chunk completes it
 * later). Reads only the sums (read-only) and the landed bytes: thread-safe. */
ms_status store_io_check(void *user, int file, int64_t rb, int64_t re, int64_t nb, int64_t ne,
                         const uint8_t *run, int64_t *n_checked, ms_err *err) {
    ms_store *s = user;
    const int shard = file;     /* the store adds its files in shard order (asserted at open) */
    *n_checked = 0;
    if (file == s->pk.file) return check_unpack(s, rb, re, nb, run, n_checked, err);
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

/* The packed region whose image holds pack offset nb, or NULL. */
static const region *packed_at(const ms_store *s, int64_t nb) {
    int a = 0, b = s->pk.n;     /* the first image starting after nb */
    while (a < b) {
        int m = a + (b - a) / 2;
        if (s->regions[s->pk.by_off[m]].pk->image_off <= nb) a = m + 1;
        else b = m;
    }
    return a == 0 ? NULL : &s->regions[s->pk.by_off[a - 1]];
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
    const region *r = packed_at(s, nb);
    if (!r) return MS_OK;
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
            if (b1 > g->hashed && (st = ms_pack_check_blocks(e, img, g->hashed, b1, ms_pack_path(s->pk.pack), err)) == MS_OK)
                g->hashed = b1;
            /* the bytes the hashed blocks cover (the last block is shorter) */
            avail = g->hashed * MS_PACK_HASH_BYTES < e->image_bytes ? g->hashed * MS_PACK_HASH_BYTES : e->image_bytes;
            if (avail > from) *n_checked += avail - from;
        }
        if (st == MS_OK) {
            uint8_t scratch[MS_PACK_CHUNK_BYTES];
            const int64_t t0 = ms_now_ns();
            st = ms_pack_decode_upto(buf, r->buf_bytes, e, r->pos, &g->cur, e->shift + avail, scratch, 1, err);
            __atomic_fetch_add(&s->pk.unpack_ns, ms_now_ns() - t0, __ATOMIC_RELAXED);
        }
        pthread_mutex_lock(&g->mu);
        if (st != MS_OK) g->failed = 1;
        if (st != MS_OK || g->landed == landed) break;
    }
    g->busy = 0;
    pthread_mutex_unlock(&g->mu);
    return st;
}

/* --------------------------------------------------------- the pack index */

/* The pack's image of region r, when the pack holds exactly its ranges and
 * the image fits its buffer at its shift (the writer made sure; a pack of
 * the same table with other layout rules would not). Regions of more than
 * 64 ranges (none today: bind.c merges a layer part's tensors into a few)
 * are read from the shards. */
const ms_pack_entry *store_pack_entry(const ms_store *s, const region *r) {
    ms_pack_range q[64];
    if (r->n_ranges > 64) return NULL;
    for (int i = 0; i < r->n_ranges; i++) q[i] = (ms_pack_range){ r->ranges[i].shard, r->ranges[i].offset, r->ranges[i].n_bytes };
    const ms_pack_entry *e = ms_pack_find(s->pk.pack, q, r->n_ranges);
    if (!e || e->shift + ms_io_span(e->image_off, e->image_bytes) > r->buf_bytes) return NULL;
    return e;
}

typedef struct pk_key { int64_t off; int id; } pk_key;

static int pk_cmp(const void *a, const void *b) {
    const int64_t x = ((const pk_key *)a)->off, y = ((const pk_key *)b)->off;
    return (x > y) - (x < y);
}

ms_status store_pack_index(ms_store *s, ms_err *err) {
    if (!s->pk.pack) return MS_OK;
    s->pk.by_off = malloc(((size_t)s->n_regions + 1) * sizeof *s->pk.by_off);
    s->pk.prog = calloc((size_t)s->n_regions + 1, sizeof *s->pk.prog);
    pk_key *k = malloc(((size_t)s->n_regions + 1) * sizeof *k);
    if (!s->pk.by_off || !s->pk.prog || !k) { free(k); return ms_err_set(err, MS_E_NOMEM, "store: out of memory"); }
    for (int i = 0; i < s->n_regions; i++)
        if (s->regions[i].pk) k[s->pk.n++] = (pk_key){ s->regions[i].pk->image_off, i };
    qsort(k, (size_t)s->pk.n, sizeof *k, pk_cmp);
    ms_status st = MS_OK;
    for (int i = 0; i < s->pk.n; i++) {
        s->pk.by_off[i] = k[i].id;
        pthread_mutex_init(&s->pk.prog[i].mu, NULL);
        s->regions[k[i].id].prog = &s->pk.prog[i];
        if (i > 0 && k[i - 1].off == k[i].off)  /* two regions with one image: never from a valid pack */
            st = ms_err_set(err, MS_E_MODEL, "%s: two regions share an image", ms_pack_path(s->pk.pack));
    }
    free(k);
    s->stats.packed_regions = s->pk.n;
    return st;
}

void store_pack_free(ms_store *s) {
    free(s->pk.by_off);
    for (int i = 0; i < s->pk.n && s->pk.prog; i++) pthread_mutex_destroy(&s->pk.prog[i].mu);
    free(s->pk.prog);
}

/* ------------------------------------------------------- submit and wait */

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

ms_status store_submit_prio(ms_store *s, const region *r, uint8_t *buf, int prio, uint64_t *ticket,
                            ms_err *err) {
    if (packed(r)) {    /* the image at buf + shift, decoded by check_unpack as it lands */
        pk_prog *g = r->prog;   /* no checker thread touches it: its last read was waited */
        g->landed = g->hashed = 0;
        g->busy = g->failed = 0;
        ms_pack_cursor_init(&g->cur, r->pk);
        const ms_io_req q = { s->pk.file, r->pk->image_off, r->pk->image_bytes, buf + r->pk->shift, 1 };
        ms_status st = ms_io_submit_prio(s->io, &q, 1, prio, ticket, err);
        if (st == MS_OK) count_read(s, r);
        return st;
    }
    for (int i = 0; i < r->n_ranges; i++) {
        const ms_range *g = &r->ranges[i];
        s->reqs[i] = (ms_io_req){ s->file_of[g->shard], g->offset, g->n_bytes,
                                  buf + r->pos[i] + g->down - ms_io_skew(g->offset),
                                  s->sums && !s->p.verify_sync };
    }
    ms_status st = ms_io_submit_prio(s->io, s->reqs, r->n_ranges, prio, ticket, err);
    if (st == MS_OK) count_read(s, r);
    return st;
}

/* A read someone waits for now or soon. */
ms_status store_submit(ms_store *s, const region *r, uint8_t *buf, uint64_t *ticket, ms_err *err) {
    return store_submit_prio(s, r, buf, MS_IO_PRIO_DEMAND, ticket, err);
}

ms_status store_wait(ms_store *s, uint64_t ticket, int64_t *ns_extra, ms_err *check, ms_err *err) {
    int64_t t0 = ms_now_ns();
    ms_err dropped;
    ms_status st = ms_io_wait_checked(s->io, ticket, check ? check : &dropped, err);
    int64_t dt = ms_now_ns() - t0;
    s->stats.io_wait_ns += dt;
    if (ns_extra) *ns_extra += dt;
    return st;
}

/* ------------------------------------------------------------- verdicts */

ms_status store_check_sync(ms_store *s, int shard, int64_t off, int64_t n, const uint8_t *p,
                           ms_err *err) {
    const int64_t t0 = ms_now_ns();
    ms_status st = ms_sums_check(s->sums, shard, off, n, p, err);
    const int64_t dt = ms_now_ns() - t0;
    s->stats.verify_ns += dt;
    s->stats.verify_sync_ns += dt;
    if (st == MS_OK) s->stats.verify_bytes += n;
    return st;
}

/* Check the bytes of region r in buf against the sums on the compute thread:
 * where they landed (not yet moved down), or where a packed image decoded them. */
static ms_status check_region(ms_store *s, const region *r, const uint8_t *buf, ms_err *err) {
    ms_status st = MS_OK;
    for (int i = 0; i < r->n_ranges && st == MS_OK; i++) {
        const ms_range *g = &r->ranges[i];
        const int64_t at = r->pos[i] + (packed(r) ? 0 : g->down);
        if (g->n_bytes > 0) st = store_check_sync(s, g->shard, g->offset, g->n_bytes, buf + at, err);
    }
    return st;
}

/* Region r's bytes in buf have landed and passed: move every `down` range
 * to its place (store.h, ms_store_layout). A packed image decodes straight
 * to the places. */
static void settle(const region *r, uint8_t *buf) {
    if (packed(r)) return;
    for (int i = 0; i < r->n_ranges; i++)
        if (r->ranges[i].down) memmove(buf + r->pos[i], buf + r->pos[i] + 1, (size_t)r->ranges[i].n_bytes);
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

ms_status store_land(ms_store *s, region *r, uint8_t *buf, uint64_t ticket, int64_t *ns_extra,
                     ms_err *err) {
    ms_err check, first;
    ms_err_clear(&first);
    ms_status st = store_wait(s, ticket, ns_extra, &check, err);
    if (st != MS_OK) return st;
    if (verdict(s, r, buf, &check, &first) == MS_OK) {
        settle(r, buf);
        return MS_OK;
    }
    if (packed(r)) {    /* the checkpoint is the truth: give the packed image up for good */
        s->stats.pack_fallbacks++;
        r->pk_gone = 1;
        ms_log(s->p.log, MS_LOG_WARN, "store: packed trunk %s: %s; reading the checkpoint instead"
               " (run 'moestream pack' again)", ms_pack_path(s->pk.pack), first.msg);
    } else {
        s->stats.verify_retries++;
        ms_log(s->p.log, MS_LOG_WARN, "store: %s; reading it again", first.msg);
    }
    uint64_t t;
    st = store_submit(s, r, buf, &t, err);
    if (st == MS_OK) st = store_wait(s, t, NULL, &check, err);
    if (st == MS_OK) st = verdict(s, r, buf, &check, err);
    if (st != MS_OK) s->stats.verify_failures++;
    if (st == MS_OK) settle(r, buf);
    return st;
}
