/* store/cache.c - the expert cache's slot directory (see cache.h).
 *
 * Everything is sized at init: the slot array, the key map, the free stack
 * and the policy state, so reserve / publish / abort allocate nothing.
 */
#include "store/cache.h"

#include <stdlib.h>
#include <string.h>

static const ms_policy_ops *const policies[] = { &ms_policy_lru, &ms_policy_s3fifo };

const ms_policy_ops *ms_policy_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++)
        if (strcmp(policies[i]->name, name) == 0) return policies[i];
    return NULL;
}

const char *ms_policy_names(void) { return "lru, s3fifo"; }

ms_status ms_cache_init(ms_cache *c, int n_slots, int n_keys, const char *policy, ms_err *err) {
    memset(c, 0, sizeof *c);
    /* default S3-FIFO: on the bench checkpoint it never hit less than LRU and
     * read fewer expert bytes per token with few slots, where the policy
     * matters (docs/perf/history.md, "S3-FIFO by default") */
    const char *name = policy ? policy : "s3fifo";
    const ms_policy_ops *ops = ms_policy_find(name);
    if (!ops)
        return ms_err_set(err, MS_E_USAGE, "unknown cache policy '%s' (known: %s)", name,
                          ms_policy_names());
    if (n_slots < 1 || n_keys < 0)
        return ms_err_set(err, MS_E_USAGE, "cache: %d slots for %d keys", n_slots, n_keys);
    c->n_slots = n_slots;
    c->n_keys = n_keys;
    c->pol = ops;
    c->slots = calloc((size_t)n_slots, sizeof *c->slots);
    c->slot_of = malloc(((size_t)n_keys + 1) * sizeof *c->slot_of);
    c->free_list = malloc((size_t)n_slots * sizeof *c->free_list);
    c->pol_state = calloc(1, ops->state_bytes(n_slots, n_keys));
    if (!c->slots || !c->slot_of || !c->free_list || !c->pol_state) {
        ms_cache_free(c);
        return ms_err_set(err, MS_E_NOMEM, "cache: out of memory for %d slots / %d keys", n_slots, n_keys);
    }
    for (int k = 0; k < n_keys; k++) c->slot_of[k] = -1;
    for (int i = 0; i < n_slots; i++) {
        c->slots[i].key = -1;
        c->free_list[i] = n_slots - 1 - i;      /* slot 0 is handed out first */
    }
    c->n_free = n_slots;
    ops->init(c->pol_state, n_slots, n_keys);
    return MS_OK;
}

void ms_cache_free(ms_cache *c) {
    if (!c) return;
    free(c->slots);
    free(c->slot_of);
    free(c->free_list);
    free(c->pol_state);
    memset(c, 0, sizeof *c);
}

static int evictable(void *user, int slot) {
    const ms_cache *c = user;
    const ms_cache_slot *x = &c->slots[slot];
    return x->state == MS_SLOT_READY && x->pins == 0 && !(c->veto && c->veto(c->veto_user, x->key));
}

int ms_cache_reserve(ms_cache *c, int key, int *evicted_key, int *evicted_prefetched) {
    MS_ASSERT(key >= 0 && key < c->n_keys && c->slot_of[key] < 0);
    *evicted_key = -1;
    *evicted_prefetched = 0;
    int s;
    if (c->n_free > 0) {
        s = c->free_list[--c->n_free];
        MS_ASSERT(c->slots[s].state == MS_SLOT_FREE);
    } else {
        s = c->pol->choose_victim(c->pol_state, evictable, c);
        if (s < 0) return -1;
        ms_cache_slot *v = &c->slots[s];
        MS_ASSERT(v->state == MS_SLOT_READY && v->pins == 0 && v->key >= 0);
        *evicted_key = v->key;
        *evicted_prefetched = v->prefetched;
        c->slot_of[v->key] = -1;
        c->evictions++;
    }
    ms_cache_slot *x = &c->slots[s];
    x->state = MS_SLOT_LOADING;
    x->prefetched = 0;
    x->cancelled = 0;
    x->pins = 0;
    x->key = key;
    x->ticket = 0;
    c->slot_of[key] = s;
    return s;
}

void ms_cache_publish(ms_cache *c, int slot) {
    ms_cache_slot *x = &c->slots[slot];
    MS_ASSERT(x->state == MS_SLOT_LOADING && x->key >= 0);
    x->state = MS_SLOT_READY;
    x->ticket = 0;
    c->pol->on_insert(c->pol_state, slot, x->key);
}

void ms_cache_abort(ms_cache *c, int slot) {
    ms_cache_slot *x = &c->slots[slot];
    MS_ASSERT(x->state == MS_SLOT_LOADING && x->pins == 0);
    c->slot_of[x->key] = -1;
    x->state = MS_SLOT_FREE;
    x->key = -1;
    x->prefetched = 0;
    x->ticket = 0;
    c->free_list[c->n_free++] = slot;
}
