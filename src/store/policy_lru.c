/* store/policy_lru.c - least-recently-used replacement (see cache.h).
 *
 * One doubly linked list over the tracked slots, most recent at the head.
 * The victim is the first evictable slot from the tail: O(1) unless the tail
 * is pinned, O(n_slots) at worst.
 */
#include "store/cache.h"

#include <string.h>

typedef struct lru {
    int n;
    int head, tail;         /* -1 when empty */
    int pad;
} lru;

/* Layout: lru | prev[n] | next[n] | in[n] */
static int32_t *lru_prev(lru *l) { return (int32_t *)(l + 1); }
static int32_t *lru_next(lru *l) { return lru_prev(l) + l->n; }
static uint8_t *lru_in(lru *l) { return (uint8_t *)(lru_next(l) + l->n); }

static size_t lru_state_bytes(int n_slots, int n_keys) {
    return sizeof(lru) + (size_t)n_slots * (2 * sizeof(int32_t) + 1);
}

static void lru_init(void *st, int n_slots, int n_keys) {
    lru *l = st;
    l->n = n_slots;
    l->head = l->tail = -1;
    memset(lru_in(l), 0, (size_t)n_slots);
}

static void unlink_slot(lru *l, int s) {
    int32_t *prev = lru_prev(l), *next = lru_next(l);
    if (prev[s] >= 0) next[prev[s]] = next[s]; else l->head = next[s];
    if (next[s] >= 0) prev[next[s]] = prev[s]; else l->tail = prev[s];
    lru_in(l)[s] = 0;
}

static void push_head(lru *l, int s) {
    int32_t *prev = lru_prev(l), *next = lru_next(l);
    prev[s] = -1;
    next[s] = l->head;
    if (l->head >= 0) prev[l->head] = s; else l->tail = s;
    l->head = s;
    lru_in(l)[s] = 1;
}

static void lru_on_insert(void *st, int slot, int key) {
    lru *l = st;
    MS_ASSERT(!lru_in(l)[slot]);
    push_head(l, slot);
}

static void lru_on_hit(void *st, int slot) {
    lru *l = st;
    MS_ASSERT(lru_in(l)[slot]);
    unlink_slot(l, slot);
    push_head(l, slot);
}

static int lru_choose_victim(void *st, ms_evictable_fn evictable, void *user) {
    lru *l = st;
    for (int s = l->tail; s >= 0; s = lru_prev(l)[s])
        if (evictable(user, s)) { unlink_slot(l, s); return s; }
    return -1;
}

const ms_policy_ops ms_policy_lru = {
    "lru", lru_state_bytes, lru_init, lru_on_insert, lru_on_hit, lru_choose_victim
};
