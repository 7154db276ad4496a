/* store/cache.h - the expert cache's slot directory and its replacement policies.
 *
 * Owns: the state of every slot of the expert arena (which key it holds, its
 *   state, its pin count), the key -> slot map, and the replacement policy.
 *   It owns no bytes and does no I/O: the store pairs slot i with arena bytes
 *   [i * slot_bytes, (i + 1) * slot_bytes) and reads into them; the trace
 *   replayer (store/trace.c) drives the same directory with no bytes at all,
 *   so a replayed hit rate is the live cache's hit rate by construction.
 * Idea: a slot walks a small state machine; only the store moves it.
 *
 *            reserve                 publish
 *     FREE ----------> LOADING ------------------> READY
 *      ^                  |                          |
 *      +---- abort -------+   (read failed)          |
 *      +------------- evict (policy victim) ---------+
 *
 *   A key is mapped while its slot is LOADING or READY. Pins count the
 *   holders of the slot's bytes; the policy may only evict a READY slot with
 *   no pins (a LOADING slot is never a hit and never a victim). A reserve takes
 *   a FREE slot when there is one, else asks the policy for a victim.
 * Policies sit behind one small vtable and only see READY slots (they learn
 *   of a slot at publish and forget it when they evict it):
 *     lru     one recency list; the victim is the least recently used
 *             evictable slot.
 *     s3fifo  scan-resistant (Yang et al., SOSP'23, re-derived here): a small
 *             FIFO S (10% of the slots, at least 1), a main FIFO M, a 2-bit
 *             access counter per slot, and a ghost list of keys recently
 *             evicted from S (as long as M's share of the slots). A new key
 *             enters S (or M when it is a ghost); a hit bumps its counter
 *             (max 3). Eviction takes from S while S holds at least its share
 *             (else from M): S's tail moves to M's head (counter reset) when
 *             its counter is >= 1, else it is evicted and becomes a ghost; M's
 *             tail is reinserted at M's head with its counter decremented
 *             when the counter is >= 1, else evicted. A pinned tail is
 *             rotated to its queue's head unchanged.
 * Invariants:
 *   1. slot_of[key] == s  <=>  slots[s].key == key and state != FREE;
 *   2. state == FREE  =>  pins == 0;
 *   3. the policy tracks exactly the READY slots.
 * Thread safety: none; one thread (the store's caller) drives it.
 * Does not: read, allocate after init, or know what a key means.
 */
#ifndef MS_STORE_CACHE_H
#define MS_STORE_CACHE_H

#include "base/err.h"

#include <stddef.h>
#include <stdint.h>

typedef enum ms_slot_state { MS_SLOT_FREE = 0, MS_SLOT_LOADING = 1, MS_SLOT_READY = 2 } ms_slot_state;

/* Tells a policy whether a READY slot may be evicted now (not pinned). */
typedef int (*ms_evictable_fn)(void *user, int slot);

typedef struct ms_policy_ops {
    const char *name;
    /* Bytes of state for n_slots slots and keys in [0, n_keys). Pure. */
    size_t (*state_bytes)(int n_slots, int n_keys);
    /* Initialise zeroed state of state_bytes() bytes. */
    void (*init)(void *st, int n_slots, int n_keys);
    /* Slot `slot` became READY holding `key` (not tracked before). */
    void (*on_insert)(void *st, int slot, int key);
    /* A READY slot was used again. */
    void (*on_hit)(void *st, int slot);
    /* Choose an evictable READY slot, stop tracking it and return it; -1 when
     * no tracked slot is evictable. Must terminate whatever is pinned. */
    int (*choose_victim)(void *st, ms_evictable_fn evictable, void *user);
} ms_policy_ops;

extern const ms_policy_ops ms_policy_lru;
extern const ms_policy_ops ms_policy_s3fifo;

/* The policy named `name` ("lru", "s3fifo"), or NULL. Pure. */
const ms_policy_ops *ms_policy_find(const char *name);

/* "lru, s3fifo": the names ms_policy_find knows, for messages. Pure. */
const char *ms_policy_names(void);

typedef struct ms_cache_slot {
    uint8_t state;          /* ms_slot_state */
    uint8_t prefetched;     /* read before it was asked for (the store's PF_HINT /
                               PF_GUESS) and not used since; 0 otherwise */
    uint8_t cancelled;      /* LOADING: its read was cancelled (the store frees it) */
    int32_t pins;
    int32_t key;            /* -1 when FREE */
    uint64_t ticket;        /* the store's pending read while LOADING (0 = none) */
} ms_cache_slot;

typedef struct ms_cache {
    int n_slots, n_keys;
    ms_cache_slot *slots;
    int32_t *slot_of;       /* [n_keys]: slot or -1 */
    int32_t *free_list;     /* stack of FREE slots */
    int n_free;
    const ms_policy_ops *pol;
    void *pol_state;
    int64_t evictions;
    /* optional: a READY slot whose key veto(veto_user, key) rejects is not
     * evictable (the store sets it while it reserves slots for prefetches) */
    int (*veto)(void *user, int key);
    void *veto_user;
} ms_cache;

/* Allocate a directory of n_slots (>= 1) slots for keys in [0, n_keys) with
 * the policy named `policy` (NULL = "s3fifo"). Every slot starts FREE.
 * Errors: MS_E_USAGE (unknown policy: the message lists the known ones, bad
 * counts), MS_E_NOMEM. Allocates; free with ms_cache_free. */
ms_status ms_cache_init(ms_cache *c, int n_slots, int n_keys, const char *policy, ms_err *err);
void ms_cache_free(ms_cache *c);

/* The slot mapped to key (LOADING or READY), or -1. */
static inline int ms_cache_find(const ms_cache *c, int key) { return c->slot_of[key]; }

/* Map `key` (not mapped) to a slot in state LOADING with 0 pins: a FREE slot
 * if any, else the policy's victim (its key is unmapped; *evicted_key gets it,
 * else -1; *evicted_prefetched gets the victim's prefetched flag). Returns
 * the slot, or -1 when every slot is LOADING, pinned or vetoed. Allocates nothing. */
int ms_cache_reserve(ms_cache *c, int key, int *evicted_key, int *evicted_prefetched);

/* LOADING -> READY; the policy starts tracking the slot. */
void ms_cache_publish(ms_cache *c, int slot);

/* LOADING -> FREE (the read failed): the key is unmapped. Pins must be 0. */
void ms_cache_abort(ms_cache *c, int slot);

/* Tell the policy a READY slot was used again. */
static inline void ms_cache_touch(ms_cache *c, int slot) { c->pol->on_hit(c->pol_state, slot); }

#endif
