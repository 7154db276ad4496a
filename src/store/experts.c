/* store/experts.c - the expert slots: acquires in batches, hints, guesses and
 * their prefetches, over the cache's slot directory (store/cache.h).
 *
 * Owns: store_experts (the cache, the arena's slot size, the want / guess
 *   generations, a batch's scratch) and every expert slot's bytes.
 * Batch (experts_batch): hits are pinned first; misses then reserve slots
 *   one by one (FREE first, then the policy's victim), their reads are
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
 *   expert_bytes_read).
 * Invariants: a LOADING slot is never a hit; a slot is published only after
 *   store_land accepted its bytes; more experts held at once than slots is a
 *   bug (assert).
 * Does not: allocate after experts_init, or know layers (keys are region
 *   order among the EXPERT regions).
 */
#include "store/store_int.h"

#include <stdlib.h>

enum { K_HIT = 0, K_PENDING = 1, K_MISS = 2 };

/* prefetched: how a LOADING / READY slot's bytes were asked for before use */
enum { PF_NONE = 0, PF_HINT = 1, PF_GUESS = 2 };

ms_status experts_init(ms_store *s, ms_err *err) {
    store_experts *x = &s->ex;
    const int n_slots = s->plan.n_expert_slots;
    x->slot_bytes = s->plan.expert_slot_bytes;
    if (s->n_expert > 0 && n_slots > 0) {
        ms_status st = ms_cache_init(&x->cache, n_slots, s->n_expert, s->policy, err);
        if (st != MS_OK) return st;
        x->on = 1;
    }
    x->key_region = malloc(((size_t)s->n_expert + 1) * sizeof *x->key_region);
    x->seen = malloc(((size_t)s->n_expert + 1) * sizeof *x->seen);
    x->want = calloc((size_t)s->n_expert + 1, sizeof *x->want);
    x->want_gen = 1;            /* want[] = 0: nothing wanted yet */
    x->guess = calloc((size_t)s->n_expert + 1, sizeof *x->guess);
    x->guess_gen = 1;
    x->b_slot = malloc(((size_t)n_slots + 1) * sizeof *x->b_slot);
    x->b_kind = malloc(((size_t)n_slots + 1) * sizeof *x->b_kind);
    x->b_idx = malloc(((size_t)n_slots + 1) * sizeof *x->b_idx);
    x->b_miss = malloc(((size_t)n_slots + 1) * sizeof *x->b_miss);
    x->b_ok = calloc((size_t)n_slots + 1, 1);
    if (!x->key_region || !x->seen || !x->want || !x->guess || !x->b_slot || !x->b_kind || !x->b_idx ||
        !x->b_miss || !x->b_ok)
        return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    for (int i = 0; i < s->n_regions; i++)
        if (s->regions[i].cls == MS_REGION_EXPERT) x->key_region[s->regions[i].key] = i;
    for (int k = 0; k < s->n_expert; k++) x->seen[k] = -1;
    return MS_OK;
}

void experts_free(ms_store *s) {
    store_experts *x = &s->ex;
    ms_cache_free(&x->cache);
    free(x->key_region);
    free(x->seen);
    free(x->want);
    free(x->guess);
    free(x->b_slot);
    free(x->b_kind);
    free(x->b_idx);
    free(x->b_miss);
    free(x->b_ok);
}

uint8_t *expert_buf(const ms_store *s, int slot) {
    return s->blk[BK_ARENA].p + (int64_t)slot * s->ex.slot_bytes;
}

/* The region of the key slot i holds. */
static region *slot_region(ms_store *s, int i) {
    return &s->regions[s->ex.key_region[s->ex.cache.slots[i].key]];
}

uint8_t *experts_resident_slot(ms_store *s, const region *r) {
    int ek, ep;
    int slot = ms_cache_reserve(&s->ex.cache, r->key, &ek, &ep);
    MS_ASSERT(slot >= 0 && ek < 0);
    return expert_buf(s, slot);
}

void experts_publish_resident(ms_store *s) {
    for (int k = 0; k < s->n_expert; k++) ms_cache_publish(&s->ex.cache, ms_cache_find(&s->ex.cache, k));
}

const uint8_t *expert_in_memory(const ms_store *s, const region *r) {
    if (!s->ex.on) return NULL;
    int slot = ms_cache_find(&s->ex.cache, r->key);
    if (slot >= 0 && s->ex.cache.slots[slot].state == MS_SLOT_READY) return expert_buf(s, slot);
    return NULL;
}

void expert_release(ms_store *s, const region *r) {
    int slot = ms_cache_find(&s->ex.cache, r->key);
    MS_ASSERT(slot >= 0 && s->ex.cache.slots[slot].pins > 0);
    s->ex.cache.slots[slot].pins--;
}

int ms_store_expert_state(const ms_store *s, int region_id) {
    if (ms_store_region_resident(s, region_id)) return MS_EXPERT_READY;
    const region *r = &s->regions[region_id];
    if (r->cls != MS_REGION_EXPERT || !s->ex.on) return MS_EXPERT_ABSENT;
    const int slot = ms_cache_find(&s->ex.cache, r->key);
    if (slot < 0 || s->ex.cache.slots[slot].cancelled) return MS_EXPERT_ABSENT;
    return s->ex.cache.slots[slot].state == MS_SLOT_READY ? MS_EXPERT_READY : MS_EXPERT_LOADING;
}

int ms_store_expert_capacity(const ms_store *s) { return s->ex.on ? s->ex.cache.n_slots : 0; }

/* ------------------------------------------------------------- prefetches */

/* An unheld prefetch still loading (cancelled or not). */
static int prefetch_loading(const ms_cache_slot *c) {
    return c->state == MS_SLOT_LOADING && c->pins == 0 && c->prefetched;
}

/* Wait for prefetch slot i (prefetch_loading) and publish it; free it when
 * its read failed or was cancelled. */
static void finish_prefetch(ms_store *s, int i) {
    ms_cache_slot *c = &s->ex.cache.slots[i];
    ms_err e2;
    ms_err_clear(&e2);
    if (c->cancelled) {
        ms_err dropped;
        store_wait(s, c->ticket, NULL, &dropped, &e2);
        ms_cache_abort(&s->ex.cache, i);
    } else if (store_land(s, slot_region(s, i), expert_buf(s, i), c->ticket, NULL, &e2) == MS_OK) {
        ms_cache_publish(&s->ex.cache, i);
    } else {
        s->stats.prefetch_failed++;
        ms_cache_abort(&s->ex.cache, i);
    }
}

/* Wait for every prefetch still loading with no holder; publish what arrived. */
static void drain_prefetches(ms_store *s) {
    for (int i = 0; i < s->ex.cache.n_slots; i++)
        if (prefetch_loading(&s->ex.cache.slots[i])) finish_prefetch(s, i);
}

/* Publish (or free) every unheld prefetch whose read has finished, without
 * blocking: a guess that arrived becomes an evictable READY slot at once
 * instead of holding its slot until a drain. */
static void reap_prefetches(ms_store *s) {
    for (int i = 0; i < s->ex.cache.n_slots; i++) {
        const ms_cache_slot *c = &s->ex.cache.slots[i];
        if (prefetch_loading(c) && ms_io_poll(s->io, c->ticket) == 1) finish_prefetch(s, i);
    }
}

/* Veto for prefetch reservations: an expert the model asked for in this step
 * (ms_store_confirm, ms_store_hint) and has not acquired yet. */
static int wanted_now(void *user, int key) {
    const ms_store *s = user;
    return s->ex.want[key] == s->ex.want_gen;
}

/* The first use of a prefetched slot. */
static void count_prefetch_hit(ms_store *s, ms_cache_slot *cs) {
    if (cs->prefetched == PF_GUESS) s->stats.guess_hits++;
    cs->prefetched = PF_NONE;
    s->stats.prefetch_hits++;
}

/* ----------------------------------------------------------------- batch */

static int reserve_slot(ms_store *s, int key) {
    int ek, ep;
    int slot = ms_cache_reserve(&s->ex.cache, key, &ek, &ep);
    if (slot < 0) {
        drain_prefetches(s);
        slot = ms_cache_reserve(&s->ex.cache, key, &ek, &ep);
    }
    if (slot >= 0 && ek >= 0 && ep) s->stats.prefetch_wasted++;
    return slot;
}

static int miss_before(ms_store *s, int a, int b) {
    const ms_range *x = &slot_region(s, a)->ranges[0];
    const ms_range *y = &slot_region(s, b)->ranges[0];
    if (x->shard != y->shard) return x->shard < y->shard;
    return x->offset < y->offset;
}

/* 1. Hits (READY or a prefetch in flight) are pinned before any eviction. */
static void pin_hits(ms_store *s, const int *regions, const int *idx, int n) {
    ms_cache *c = &s->ex.cache;
    for (int j = 0; j < n; j++) {
        const int key = s->regions[regions[idx[j]]].key;
        int slot = ms_cache_find(c, key);
        if (slot >= 0 && c->slots[slot].cancelled) {
            finish_prefetch(s, slot);   /* a cancelled guess: its in-flight chunks land, then a miss */
            slot = -1;
        }
        s->ex.b_slot[j] = slot;
        if (slot < 0) { s->ex.b_kind[j] = K_MISS; continue; }
        ms_cache_slot *cs = &c->slots[slot];
        cs->pins++;
        if (cs->state == MS_SLOT_LOADING) { s->ex.b_kind[j] = K_PENDING; continue; }
        s->ex.b_kind[j] = K_HIT;
        if (cs->prefetched) { count_prefetch_hit(s, cs); }
        else { s->stats.expert_hits++; ms_cache_touch(c, slot); }
    }
}

/* 2. Prefetches in flight: wait; a failed one becomes a miss. */
static void land_pending(ms_store *s, const int *regions, const int *idx, int n) {
    ms_cache *c = &s->ex.cache;
    for (int j = 0; j < n; j++) {
        if (s->ex.b_kind[j] != K_PENDING) continue;
        int slot = s->ex.b_slot[j];
        ms_cache_slot *cs = &c->slots[slot];
        ms_err e2;
        ms_err_clear(&e2);
        if (store_land(s, &s->regions[regions[idx[j]]], expert_buf(s, slot), cs->ticket, NULL, &e2) == MS_OK) {
            ms_cache_publish(c, slot);
            count_prefetch_hit(s, cs);
            s->ex.b_kind[j] = K_HIT;
        } else {
            s->stats.prefetch_failed++;
            cs->pins--;
            MS_ASSERT(cs->pins == 0);
            ms_cache_abort(c, slot);
            s->ex.b_kind[j] = K_MISS;
        }
    }
}

/* 3. Misses reserve slots serially, in the caller's order; their slots go
 * to b_miss. Returns how many. */
static int reserve_misses(ms_store *s, const int *regions, const int *idx, int n) {
    int n_miss = 0;
    for (int j = 0; j < n; j++) {
        if (s->ex.b_kind[j] != K_MISS) continue;
        const int key = s->regions[regions[idx[j]]].key;
        int slot = reserve_slot(s, key);
        MS_ASSERT(slot >= 0);   /* more experts held at once than cache slots */
        s->ex.cache.slots[slot].pins = 1;
        s->ex.b_slot[j] = slot;
        s->ex.b_miss[n_miss++] = slot;
        s->stats.expert_misses++;
    }
    return n_miss;
}

/* 4. Submit the misses in (file, offset) order, one ticket per region, then
 * wait for all of them; b_ok[slot] says which arrived. */
static ms_status read_misses(ms_store *s, int n_miss, ms_err *err) {
    ms_cache *c = &s->ex.cache;
    int *miss = s->ex.b_miss;
    for (int i = 1; i < n_miss; i++)
        for (int j = i; j > 0 && miss_before(s, miss[j], miss[j - 1]); j--) {
            int t = miss[j]; miss[j] = miss[j - 1]; miss[j - 1] = t;
        }
    ms_status st = MS_OK;
    for (int i = 0; i < n_miss; i++) {
        ms_cache_slot *cs = &c->slots[miss[i]];
        cs->ticket = 0;
        if (st != MS_OK) continue;      /* the call fails: issue nothing more */
        st = store_submit(s, slot_region(s, miss[i]), expert_buf(s, miss[i]), &cs->ticket, err);
    }
    for (int i = 0; i < n_miss; i++) {
        ms_cache_slot *cs = &c->slots[miss[i]];
        ms_status w = cs->ticket ? store_land(s, slot_region(s, miss[i]), expert_buf(s, miss[i]), cs->ticket,
                                              NULL, err)
                                 : MS_E_IO;
        cs->ticket = 0;
        s->ex.b_ok[miss[i]] = w == MS_OK;
        if (st == MS_OK) st = w;
    }
    return st;
}

/* 5. Publish the misses in the caller's order (the policy sees the order the
 * trace records, so a replay reproduces the live hit count); drop failures. */
static void publish_misses(ms_store *s, int n) {
    ms_cache *c = &s->ex.cache;
    for (int j = 0; j < n; j++) {
        const int slot = s->ex.b_slot[j];
        if (s->ex.b_kind[j] != K_MISS) continue;
        if (s->ex.b_ok[slot]) { ms_cache_publish(c, slot); continue; }
        c->slots[slot].pins = 0;
        ms_cache_abort(c, slot);
        s->ex.b_slot[j] = -1;
    }
}

ms_status experts_batch(ms_store *s, const int *regions, const int *idx, int n,
                        const uint8_t **ptrs, ms_err *err) {
    MS_ASSERT(s->ex.on && n <= s->ex.cache.n_slots);
    const int64_t b = s->ex.batch_no++;
    for (int j = 0; j < n; j++) {
        const int key = s->regions[regions[idx[j]]].key;
        MS_ASSERT(s->ex.seen[key] != b);    /* an expert twice in one batch */
        s->ex.seen[key] = b;
        s->ex.want[key] = 0;                /* asked for and got: no longer protected */
        s->ex.b_slot[j] = regions[idx[j]];  /* region ids, for the trace */
    }
    if (s->trace) ms_trace_write(s->trace, b, s->ex.b_slot, n);
    s->stats.expert_requests += n;
    pin_hits(s, regions, idx, n);
    land_pending(s, regions, idx, n);
    const int n_miss = reserve_misses(s, regions, idx, n);
    ms_status st = read_misses(s, n_miss, err);
    publish_misses(s, n);
    if (st != MS_OK) {
        for (int j = 0; j < n; j++) {
            if (s->ex.b_slot[j] >= 0) s->ex.cache.slots[s->ex.b_slot[j]].pins--;
            ptrs[idx[j]] = NULL;
        }
        return st;
    }
    for (int j = 0; j < n; j++) ptrs[idx[j]] = expert_buf(s, s->ex.b_slot[j]);
    return MS_OK;
}

/* ------------------------------------------------- hints and guesses API */

/* Start reading the uncached experts among regions[0..n) into slots the
 * cache can give without blocking or evicting a wanted expert, at priority
 * prio, marking them `how`. */
static void prefetch(ms_store *s, const int *regions, int n, int prio, int how) {
    ms_cache *c = &s->ex.cache;
    c->veto = wanted_now;
    c->veto_user = s;
    for (int i = 0; i < n; i++) {
        MS_ASSERT(regions[i] >= 0 && regions[i] < s->n_regions);
        const region *r = &s->regions[regions[i]];
        if (r->cls != MS_REGION_EXPERT || ms_cache_find(c, r->key) >= 0) continue;
        int ek, ep;
        int slot = ms_cache_reserve(c, r->key, &ek, &ep);   /* no blocking drain */
        if (slot < 0) break;
        if (ek >= 0 && ep) s->stats.prefetch_wasted++;
        ms_cache_slot *cs = &c->slots[slot];
        ms_err e2;
        ms_err_clear(&e2);
        if (store_submit_prio(s, r, expert_buf(s, slot), prio, &cs->ticket, &e2) != MS_OK) {
            ms_cache_abort(c, slot);
            break;
        }
        cs->prefetched = (uint8_t)how;
        s->stats.prefetch_issued++;
        if (how == PF_GUESS) s->stats.guess_issued++;
    }
    c->veto = NULL;
    c->veto_user = NULL;
}

/* Hints, guesses, confirmations and touches act only on a started store
 * with a cache that is not all resident. */
static int prefetching(const ms_store *s) {
    return s->started && s->ex.on && !s->plan.experts_resident;
}

void ms_store_hint(ms_store *s, const int *regions, int n) {
    if (!prefetching(s)) return;
    reap_prefetches(s);
    for (int i = 0; i < n; i++) {
        MS_ASSERT(regions[i] >= 0 && regions[i] < s->n_regions);
        const region *r = &s->regions[regions[i]];
        if (r->cls == MS_REGION_EXPERT) s->ex.want[r->key] = s->ex.want_gen;
    }
    prefetch(s, regions, n, MS_IO_PRIO_DEMAND, PF_HINT);
}

/* Cancel every guess still queued that is neither wanted in this step nor in
 * the latest guess list; the bytes it drops are not counted as read. */
static void cancel_stale_guesses(ms_store *s) {
    ms_cache *c = &s->ex.cache;
    for (int i = 0; i < c->n_slots; i++) {
        ms_cache_slot *cs = &c->slots[i];
        if (!prefetch_loading(cs) || cs->prefetched != PF_GUESS || cs->cancelled ||
            s->ex.want[cs->key] == s->ex.want_gen || s->ex.guess[cs->key] == s->ex.guess_gen)
            continue;
        const int64_t dropped = ms_io_cancel(s->io, cs->ticket);
        if (dropped <= 0) continue;     /* all of it in flight or landed: it completes */
        cs->cancelled = 1;
        s->stats.expert_bytes_read -= dropped;
        s->stats.guess_cancelled++;
    }
}

void ms_store_confirm(ms_store *s, const int *regions, int n) {
    if (!prefetching(s)) return;
    s->ex.want_gen++;
    s->ex.guess_gen++;                  /* the last guess list is judged now */
    ms_cache *c = &s->ex.cache;
    for (int i = 0; i < n; i++) {
        MS_ASSERT(regions[i] >= 0 && regions[i] < s->n_regions);
        const region *r = &s->regions[regions[i]];
        if (r->cls != MS_REGION_EXPERT) continue;
        s->ex.want[r->key] = s->ex.want_gen;
        const int slot = ms_cache_find(c, r->key);
        if (slot >= 0 && c->slots[slot].state == MS_SLOT_LOADING && !c->slots[slot].cancelled)
            ms_io_promote(s->io, c->slots[slot].ticket);   /* a right guess: needed now */
    }
    cancel_stale_guesses(s);
    reap_prefetches(s);
}

void ms_store_touch(ms_store *s, const int *regions, int n) {
    if (!prefetching(s)) return;
    for (int i = 0; i < n; i++) {
        MS_ASSERT(regions[i] >= 0 && regions[i] < s->n_regions);
        const region *r = &s->regions[regions[i]];
        if (r->cls != MS_REGION_EXPERT) continue;
        const int slot = ms_cache_find(&s->ex.cache, r->key);
        if (slot >= 0 && s->ex.cache.slots[slot].state == MS_SLOT_READY) ms_cache_touch(&s->ex.cache, slot);
    }
}

void ms_store_predict(ms_store *s, const int *regions, int n) {
    if (!prefetching(s)) return;
    s->ex.guess_gen++;
    for (int i = 0; i < n; i++) {
        MS_ASSERT(regions[i] >= 0 && regions[i] < s->n_regions);
        const region *r = &s->regions[regions[i]];
        if (r->cls == MS_REGION_EXPERT) s->ex.guess[r->key] = s->ex.guess_gen;
    }
    cancel_stale_guesses(s);
    reap_prefetches(s);
    prefetch(s, regions, n, MS_IO_PRIO_SPECULATIVE, PF_GUESS);
}
