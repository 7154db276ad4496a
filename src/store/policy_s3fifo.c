/* store/policy_s3fifo.c - S3-FIFO replacement: small FIFO, main FIFO, ghosts
 * (the rules are in cache.h).
 *
 * Why it is here: a cyclic or one-pass access pattern (a scan) flushes LRU,
 * while S3-FIFO lets a key that is not reused leave through the small queue
 * without disturbing the main queue, where reused keys live.
 *
 * The ghost list is kept as a stamp per key (the ghost clock when the key was
 * evicted from S): a key is a ghost while fewer than g_cap later keys became
 * ghosts. That is a FIFO of the last g_cap ghost insertions in O(1) time and
 * no list; a ghost that re-enters is cleared and still counts as one of the
 * g_cap (a true FIFO would close the gap; the difference is one entry).
 */
#include "store/cache.h"

#include <string.h>

enum { Q_NONE = 0, Q_SMALL = 1, Q_MAIN = 2 };

typedef struct fifo { int head, tail, len; } fifo;

typedef struct s3 {
    int n, n_keys;
    int s_target, g_cap;
    int64_t ghost_clock;
    fifo q[3];              /* indexed by Q_SMALL / Q_MAIN */
} s3;

/* Layout: s3 | ghost_at[n_keys] (int64) | prev[n] | next[n] | key[n] | queue[n] | freq[n] */
static int64_t *s3_ghost(s3 *s) { return (int64_t *)(s + 1); }
static int32_t *s3_prev(s3 *s) { return (int32_t *)(s3_ghost(s) + s->n_keys); }
static int32_t *s3_next(s3 *s) { return s3_prev(s) + s->n; }
static int32_t *s3_key(s3 *s) { return s3_next(s) + s->n; }
static uint8_t *s3_queue(s3 *s) { return (uint8_t *)(s3_key(s) + s->n); }
static uint8_t *s3_freq(s3 *s) { return s3_queue(s) + s->n; }

static size_t s3_state_bytes(int n_slots, int n_keys) {
    return sizeof(s3) + (size_t)n_keys * sizeof(int64_t) +
           (size_t)n_slots * (3 * sizeof(int32_t) + 2);
}

static void s3_init(void *st, int n_slots, int n_keys) {
    s3 *s = st;
    s->n = n_slots;
    s->n_keys = n_keys;
    s->s_target = n_slots / 10 > 1 ? n_slots / 10 : 1;
    s->g_cap = n_slots - s->s_target > 1 ? n_slots - s->s_target : 1;
    s->ghost_clock = 0;
    for (int i = 0; i < 3; i++) s->q[i] = (fifo){ -1, -1, 0 };
    for (int k = 0; k < n_keys; k++) s3_ghost(s)[k] = -1;
    memset(s3_queue(s), Q_NONE, (size_t)n_slots);
    memset(s3_freq(s), 0, (size_t)n_slots);
}

static void q_unlink(s3 *s, int slot) {
    int32_t *prev = s3_prev(s), *next = s3_next(s);
    fifo *f = &s->q[s3_queue(s)[slot]];
    if (prev[slot] >= 0) next[prev[slot]] = next[slot]; else f->head = next[slot];
    if (next[slot] >= 0) prev[next[slot]] = prev[slot]; else f->tail = prev[slot];
    f->len--;
    s3_queue(s)[slot] = Q_NONE;
}

static void q_push_head(s3 *s, int qi, int slot) {
    int32_t *prev = s3_prev(s), *next = s3_next(s);
    fifo *f = &s->q[qi];
    prev[slot] = -1;
    next[slot] = f->head;
    if (f->head >= 0) prev[f->head] = slot; else f->tail = slot;
    f->head = slot;
    f->len++;
    s3_queue(s)[slot] = (uint8_t)qi;
}

static int is_ghost(s3 *s, int key) {
    int64_t at = s3_ghost(s)[key];
    return at >= 0 && s->ghost_clock - at <= s->g_cap;
}

static void s3_on_insert(void *st, int slot, int key) {
    s3 *s = st;
    MS_ASSERT(s3_queue(s)[slot] == Q_NONE);
    s3_key(s)[slot] = key;
    s3_freq(s)[slot] = 0;
    if (is_ghost(s, key)) {
        s3_ghost(s)[key] = -1;
        q_push_head(s, Q_MAIN, slot);
    } else {
        q_push_head(s, Q_SMALL, slot);
    }
}

static void s3_on_hit(void *st, int slot) {
    s3 *s = st;
    MS_ASSERT(s3_queue(s)[slot] != Q_NONE);
    if (s3_freq(s)[slot] < 3) s3_freq(s)[slot]++;
}

static int s3_choose_victim(void *st, ms_evictable_fn evictable, void *user) {
    s3 *s = st;
    uint8_t *freq = s3_freq(s);
    /* each step moves a tail: at most 3 decrements per main slot, one promotion
     * per small slot, and rotations of pinned slots; past the bound only
     * pinned slots are left at the tails and a scan decides */
    const int64_t bound = 8 * (int64_t)s->n + 16;
    for (int64_t step = 0; step < bound; step++) {
        int qi;
        if (s->q[Q_SMALL].len > 0 && (s->q[Q_SMALL].len >= s->s_target || s->q[Q_MAIN].len == 0))
            qi = Q_SMALL;
        else if (s->q[Q_MAIN].len > 0) qi = Q_MAIN;
        else return -1;
        int t = s->q[qi].tail;
        q_unlink(s, t);
        if (!evictable(user, t)) { q_push_head(s, qi, t); continue; }
        if (qi == Q_SMALL) {
            if (freq[t] >= 1) { freq[t] = 0; q_push_head(s, Q_MAIN, t); continue; }
            s3_ghost(s)[s3_key(s)[t]] = s->ghost_clock++;
            return t;
        }
        if (freq[t] >= 1) { freq[t]--; q_push_head(s, Q_MAIN, t); continue; }
        return t;
    }
    for (int qi = Q_SMALL; qi <= Q_MAIN; qi++)
        for (int t = s->q[qi].tail; t >= 0; t = s3_prev(s)[t])
            if (evictable(user, t)) {
                q_unlink(s, t);
                if (qi == Q_SMALL) s3_ghost(s)[s3_key(s)[t]] = s->ghost_clock++;
                return t;
            }
    return -1;
}

const ms_policy_ops ms_policy_s3fifo = {
    "s3fifo", s3_state_bytes, s3_init, s3_on_insert, s3_on_hit, s3_choose_victim
};
