/* store/ring.c - the trunk ring: the TRUNK regions the plan did not pin,
 * streamed through n slots of the largest such region's size.
 *
 * Owns: store_ring (the slots, the streamed regions in declaration order)
 *   and each streamed region's ring_slot.
 * Idea: the streamed TRUNK regions are walked in declaration order,
 *   cyclically, so the next use of every region is known: at position p the
 *   distance to region x is (x - p - 1) mod N + 1. A demand read takes the
 *   unpinned slot whose region is needed LAST (a FREE slot first); read-ahead
 *   of the next n - 1 regions (at an acquire) or n regions (when the last pin
 *   of a streamed region goes: its slot is needed last now) only takes a slot
 *   whose region is needed later than the one being read. This is Belady's
 *   choice for a cyclic walk, where LRU would evict exactly the region needed
 *   next. Read-ahead at release keeps the disk busy while the compute works
 *   through pinned regions between two streamed ones. Read-aheads read at
 *   AHEAD priority, behind demand reads.
 *
 *   ring slot:  FREE --read--> LOADING(ticket) --wait--> READY --evict--> ...
 *               (a slot is overwritten only when its pins are 0)
 *
 * Invariants: a slot is overwritten only with 0 pins; a LOADING slot is
 *   landed (store_land) before its bytes are handed out; more streamed
 *   regions held at once than slots is a bug (assert).
 * Does not: allocate after ring_init, or know which region is which layer.
 */
#include "store/store_int.h"

#include <stdlib.h>

ms_status ring_init(ms_store *s, ms_err *err) {
    const ms_plan *pl = &s->plan;
    store_ring *rg = &s->ring;
    rg->n_stream = 0;
    rg->stream = malloc(((size_t)s->n_regions + 1) * sizeof *rg->stream);
    rg->n = pl->n_ring;
    rg->slot = calloc((size_t)rg->n + 1, sizeof *rg->slot);
    if (!rg->stream || !rg->slot) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    for (int i = 0; i < s->n_regions; i++) {
        region *r = &s->regions[i];
        if (r->cls == MS_REGION_TRUNK && !r->resident) {
            r->stream_pos = rg->n_stream;
            rg->stream[rg->n_stream++] = i;
        }
    }
    for (int k = 0; k < rg->n; k++)
        rg->slot[k] = (ring_slot){ -1, RS_FREE, 0, 0, 0, s->blk[BK_RING].p + (int64_t)k * pl->ring_slot_bytes };
    return MS_OK;
}

void ring_free(ms_store *s) {
    free(s->ring.slot);
    free(s->ring.stream);
}

/* Distance from position p to the next use of the region in slot k; FREE
 * slots are farther than anything. */
static int ring_dist(const ms_store *s, int p, int k) {
    const ring_slot *q = &s->ring.slot[k];
    if (q->state == RS_FREE) return s->ring.n_stream + 1;
    int x = s->regions[q->region].stream_pos, n = s->ring.n_stream;
    return ((x - p - 1) % n + n) % n + 1;
}

/* Empty slot k (pins 0) for reuse; a read still in flight is waited for. */
static void ring_evict(ms_store *s, int k) {
    ring_slot *q = &s->ring.slot[k];
    MS_ASSERT(q->pins == 0);
    if (q->state == RS_LOADING) {
        ms_err e2;
        ms_err_clear(&e2);
        store_wait(s, q->ticket, &s->stats.ra_wait_ns, NULL, &e2);   /* bytes dropped: no verdict */
    }
    if (q->state != RS_FREE && q->readahead) s->stats.ra_wasted++;
    if (q->region >= 0) s->regions[q->region].ring_slot = -1;
    *q = (ring_slot){ -1, RS_FREE, 0, 0, 0, q->buf };
}

static void ring_readahead(ms_store *s, int p, int ahead) {
    const int n = s->ring.n_stream;
    for (int d = 1; d <= ahead && d < n; d++) {
        int id = s->ring.stream[(p + d) % n];
        if (s->regions[id].ring_slot >= 0) continue;
        int best = -1, best_d = d;
        for (int k = 0; k < s->ring.n; k++) {
            const ring_slot *q = &s->ring.slot[k];
            if (q->pins > 0 || q->state == RS_LOADING) continue;    /* never block here */
            int dk = ring_dist(s, p, k);
            if (dk > best_d) { best = k; best_d = dk; }
        }
        if (best < 0) break;
        ring_evict(s, best);
        ring_slot *q = &s->ring.slot[best];
        ms_err e2;
        ms_err_clear(&e2);
        if (store_submit_prio(s, &s->regions[id], q->buf, MS_IO_PRIO_AHEAD, &q->ticket, &e2) != MS_OK)
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
    ring_slot *q = &s->ring.slot[k];
    if (q->state != RS_LOADING) return 1;
    ms_err e2;
    ms_err_clear(&e2);
    ms_status st = store_land(s, &s->regions[q->region], q->buf, q->ticket, &s->stats.ra_wait_ns, &e2);
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

const uint8_t *ring_acquire(ms_store *s, int id, ms_err *err) {
    region *r = &s->regions[id];
    const int p = r->stream_pos;
    int k = r->ring_slot;
    if (k >= 0 && !ring_land(s, k)) k = -1;     /* a failed read-ahead is read on demand below */
    if (k >= 0) {
        ring_slot *q = &s->ring.slot[k];
        if (q->readahead) { s->stats.ra_used++; q->readahead = 0; }
        else s->stats.trunk_ring_hits++;
        q->pins++;
        if (!s->p.no_readahead) ring_readahead(s, p, s->ring.n - 1);
        return q->buf;
    }
    int best = -1, best_d = -1;
    for (int j = 0; j < s->ring.n; j++) {
        if (s->ring.slot[j].pins > 0) continue;
        int dj = ring_dist(s, p, j);
        if (dj > best_d) { best = j; best_d = dj; }
    }
    MS_ASSERT(best >= 0);   /* more streamed regions held at once than ring slots */
    ring_evict(s, best);
    ring_slot *q = &s->ring.slot[best];
    uint64_t t;
    ms_status st = store_submit(s, r, q->buf, &t, err);
    if (st != MS_OK) return NULL;
    q->region = id;
    q->state = RS_LOADING;
    q->pins = 1;
    r->ring_slot = best;
    s->stats.trunk_sync_reads++;
    /* queue the read-ahead behind the demand read before blocking on it */
    if (!s->p.no_readahead) ring_readahead(s, p, s->ring.n - 1);
    st = store_land(s, r, q->buf, t, NULL, err);
    if (st != MS_OK) {
        q->pins = 0;
        ring_evict(s, best);
        return NULL;
    }
    q->state = RS_READY;
    return q->buf;
}

void ring_release(ms_store *s, const region *r) {
    MS_ASSERT(r->ring_slot >= 0 && s->ring.slot[r->ring_slot].pins > 0);
    /* its slot is free for the region n ahead: start that read now, not at
     * the next streamed acquire, so the disk keeps going while the compute
     * works through pinned regions */
    if (--s->ring.slot[r->ring_slot].pins == 0 && !s->p.no_readahead)
        ring_readahead(s, r->stream_pos, s->ring.n);
}

const uint8_t *ring_in_memory(const ms_store *s, const region *r) {
    if (r->ring_slot >= 0 && s->ring.slot[r->ring_slot].state == RS_READY) return s->ring.slot[r->ring_slot].buf;
    return NULL;
}

void ring_reap(ms_store *s, const region *r) {
    if (r->ring_slot >= 0 && s->ring.slot[r->ring_slot].state == RS_LOADING &&
        ms_io_poll(s->io, s->ring.slot[r->ring_slot].ticket) == 1)
        ring_land(s, r->ring_slot);     /* finished: taking it blocks on nothing */
}
