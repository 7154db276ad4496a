/* engine/prefix_cache.c - the prompt cache in RAM (see prefix_cache.h for
 * what it owns and its invariants). An entry is one allocation: on stage 0
 * (or one process) its ids, its logits row and its layers' state in layer
 * order (ms_state_layer's parts); on a stage r > 0 its layers' state only.
 * Storing and restoring are memcpys of the same layout. Lookups compare ids
 * against every entry (a few entries of long prompts: the compare is nothing
 * beside one pass over the weights). In a pipeline stage 0 tells the other
 * stages to store, restore and drop their parts (MS_PIPE_PC_*, each keyed
 * by the entry's id) and admits an entry only where every stage's share
 * holds its part (invariant 2). */
#include "base/progress.h"
#include "engine/engine_int.h"
#include "engine/prefix_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pc_entry {
    int64_t id;                 /* stage 0's number: the key of its parts on the other stages */
    int64_t n;                  /* positions */
    int64_t bytes;              /* what it is charged here (part_bytes) */
    double prio;                /* stage 0: GreedyDual-Size priority (invariant 3) */
    int32_t *ids;               /* stage 0: [n], then logits [n_vocab], then state; a part: NULL */
    float *state;               /* this process's layers' state (in the same allocation) */
    struct pc_entry *next;
} pc_entry;

struct ms_pcache {
    ms_engine *e;               /* the model (e->model), the split, the pipeline */
    int part;                   /* 1: a stage r > 0's parts (keyed by id; no ids, no index) */
    int n_stages;               /* stage 0: the stages whose shares it keeps (1: one process) */
    int64_t n_vocab;
    int64_t cap[MS_MAX_STAGES], used[MS_MAX_STAGES];   /* [r]: stage r's share and its use
                                                          ([0]: this process's) */
    int64_t next_id;
    int64_t evictions;          /* entries evicted so far (tests) */
    double clock;
    int n;
    pc_entry *head;
};

/* The bytes stage r's part of an entry of n positions takes: the entry
 * record, stage 0's ids and logits row, and the state of stage r's layers.
 * Every stage computes its own charge with it (over the layers its model
 * holds: what copy_layers copies), and stage 0 every stage's (over the split). */
static int64_t part_bytes(const ms_pcache *pc, int r, int64_t n) {
    const ms_engine *e = pc->e;
    const int own = r == e->stage;
    const int l0 = own ? e->model.layer0 : e->stage_start[r], l1 = own ? e->model.layer1 : e->stage_start[r + 1];
    const int64_t head = r == 0 ? n * (int64_t)sizeof(int32_t) + pc->n_vocab * (int64_t)sizeof(float) : 0;
    return (int64_t)sizeof(pc_entry) + head + ms_state_floats(&e->model, l0, l1, n) * (int64_t)sizeof(float);
}

ms_pcache *ms_pcache_init(ms_engine *e, int64_t cap_bytes) {
    if (cap_bytes <= 0) return NULL;
    ms_pcache *pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    pc->e = e;
    pc->part = e->stage > 0;
    pc->n_stages = e->stage == 0 ? e->n_stages : 1;
    pc->n_vocab = e->cfg.vocab_size;
    pc->cap[0] = cap_bytes;
    return pc;
}

void ms_pcache_set_share(ms_pcache *pc, int r, int64_t cap_bytes) {
    if (pc && !pc->part && r > 0 && r < pc->n_stages) pc->cap[r] = cap_bytes;
}

int ms_pcache_shared(const ms_pcache *pc) {
    for (int r = 0; pc && r < pc->n_stages; r++)
        if (pc->cap[r] <= 0) return 0;
    return pc != NULL;
}

/* Tell the other stages (stage 0 in a pipeline; nothing without one). */
static ms_status tell(ms_pcache *pc, int op, int64_t a0, int64_t a1, char *msg, size_t len) {
    return pc->n_stages > 1 ? ms_engine_pipe_op(pc->e, op, a0, a1, msg, len) : MS_OK;
}

/* Unlink *link and free it; stage 0 tells the other stages to drop their
 * parts when `tell_stages`. */
static void unlink_entry(ms_pcache *pc, pc_entry **link, int tell_stages) {
    pc_entry *e = *link;
    *link = e->next;
    pc->used[0] -= e->bytes;
    for (int r = 1; r < pc->n_stages; r++) pc->used[r] -= part_bytes(pc, r, e->n);
    pc->n--;
    if (tell_stages) tell(pc, MS_PIPE_PC_DROP, 0, e->id, NULL, 0);
    free(e->ids ? (void *)e->ids : (void *)e->state);
    free(e);
}

void ms_pcache_free(ms_pcache *pc) {
    if (!pc) return;
    /* the other stages free their parts when they close */
    while (pc->head) unlink_entry(pc, &pc->head, 0);
    free(pc);
}

int64_t ms_pcache_used(const ms_pcache *pc) { return pc ? pc->used[0] : 0; }
int64_t ms_pcache_cap(const ms_pcache *pc) { return pc ? pc->cap[0] : 0; }
int ms_pcache_count(const ms_pcache *pc) { return pc ? pc->n : 0; }
int64_t ms_pcache_evictions(const ms_pcache *pc) { return pc ? pc->evictions : 0; }
int64_t ms_pcache_stage_used(const ms_pcache *pc, int r) { return pc && r >= 0 && r < pc->n_stages ? pc->used[r] : 0; }

int ms_pcache_room(const ms_pcache *pc, int64_t n) {
    for (int r = 0; pc && r < pc->n_stages; r++)
        if (pc->used[r] + part_bytes(pc, r, n) > pc->cap[r]) return 0;
    return pc != NULL;
}

int ms_pcache_fits(const ms_pcache *pc, int64_t n) {
    for (int r = 0; pc && r < pc->n_stages; r++)
        if (part_bytes(pc, r, n) > pc->cap[r]) return 0;
    return pc != NULL;
}

/* Invariant 3: a hit saves n positions' compute for `bytes` held. */
static void touch(ms_pcache *pc, pc_entry *e) {
    e->prio = pc->clock + (double)e->n * 1e9 / (double)e->bytes;
}

static int64_t common(const int32_t *a, const int32_t *b, int64_t n) {
    int64_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static pc_entry *find(ms_pcache *pc, const int32_t *ids, int64_t len) {
    for (pc_entry *e = pc->head; e; e = e->next)
        if (e->n == len && common(e->ids, ids, len) == len) return e;
    return NULL;
}

static pc_entry **find_id(ms_pcache *pc, int64_t id) {
    pc_entry **l = &pc->head;
    while (*l && (*l)->id != id) l = &(*l)->next;
    return l;
}

int64_t ms_pcache_lookup(ms_pcache *pc, const int32_t *ids, int64_t n, int64_t *lcp) {
    int64_t best = 0, share = 0;
    for (pc_entry *e = pc && !pc->part ? pc->head : NULL; e; e = e->next) {
        const int64_t c = common(e->ids, ids, e->n < n ? e->n : n);
        if (c > share) share = c;
        if (c == e->n && c > best) best = c;
    }
    if (lcp) *lcp = share;
    return best;
}

/* This process's layers of state st and an entry's state blob (n
 * positions): each of ms_state_layer's parts in layer order. */
static void copy_layers(const ms_model *m, float *blob, ms_state *st, int64_t n, int to_state) {
    for (int il = m->layer0; il < m->layer1; il++) {
        float *part[2];
        int64_t k[2];
        ms_state_layer(st, m, il, n, part, k);
        for (int j = 0; j < 2; j++) {
            if (k[j] == 0) continue;
            if (to_state) memcpy(part[j], blob, (size_t)k[j] * sizeof(float));
            else memcpy(blob, part[j], (size_t)k[j] * sizeof(float));
            blob += k[j];
        }
    }
}

ms_status ms_pcache_restore(ms_pcache *pc, const int32_t *ids, int64_t len, ms_session *s) {
    pc_entry *e = find(pc, ids, len);
    MS_ASSERT(e && len <= s->st.max_ctx);
    /* the other stages first: their parts into their sessions (n_past set) */
    char msg[512];
    const ms_status st = tell(pc, MS_PIPE_PC_RESTORE, s->st.pipe_id, e->id, msg, sizeof msg);
    if (st != MS_OK) {
        /* the stages' parts of s may be half restored: s is unsound */
        s->sticky = st;
        snprintf(s->error, sizeof s->error, "%s", msg);
        return st;
    }
    float *logits = (float *)(e->ids + e->n);
    copy_layers(&pc->e->model, e->state, &s->st, e->n, 1);
    memcpy(s->tokens, e->ids, (size_t)e->n * sizeof *s->tokens);
    memcpy(s->logits, logits, (size_t)pc->n_vocab * sizeof *s->logits);
    s->st.n_past = e->n;
    s->has_logits = 1;
    s->rb.n_rec = 0;
    touch(pc, e);
    return MS_OK;
}

/* A new entry of n positions charged `bytes` here, linked first; its blob
 * holds `head` bytes (stage 0's ids and logits) before the state. NULL when
 * out of memory. */
static pc_entry *add(ms_pcache *pc, int64_t id, int64_t n, int64_t bytes, int64_t head) {
    pc_entry *e = calloc(1, sizeof *e);
    char *blob = malloc((size_t)(bytes - (int64_t)sizeof *e));
    if (!e || !blob) { free(e); free(blob); return NULL; }
    e->id = id;
    e->n = n;
    e->bytes = bytes;
    e->ids = head > 0 ? (int32_t *)blob : NULL;
    e->state = (float *)(blob + head);
    e->next = pc->head;
    pc->head = e;
    pc->used[0] += bytes;
    pc->n++;
    return e;
}

void ms_pcache_store(ms_pcache *pc, const ms_session *s) {
    const int64_t n = s->st.n_past;
    if (!pc || pc->part || n < 1 || !s->has_logits || s->sticky != MS_OK) return;
    pc_entry *have = find(pc, s->tokens, n);
    if (have) { touch(pc, have); return; }
    if (!ms_pcache_fits(pc, n)) return;                     /* larger than a stage's share: not kept */
    /* invariant 2: the lowest priorities give way until every stage's part fits */
    while (!ms_pcache_room(pc, n)) {
        pc_entry **low = &pc->head;
        for (pc_entry **l = &pc->head; *l; l = &(*l)->next)
            if ((*l)->prio < (*low)->prio) low = l;
        pc->clock = (*low)->prio;
        unlink_entry(pc, low, 1);
        pc->evictions++;
    }
    const int64_t head = n * (int64_t)sizeof(int32_t) + pc->n_vocab * (int64_t)sizeof(float);
    pc_entry *e = add(pc, ++pc->next_id, n, part_bytes(pc, 0, n), head);
    if (!e) return;                                         /* no room: simply not kept */
    memcpy(e->ids, s->tokens, (size_t)n * sizeof *e->ids);
    memcpy(e->ids + n, s->logits, (size_t)pc->n_vocab * sizeof(float));
    copy_layers(&pc->e->model, e->state, (ms_state *)&s->st, n, 0);
    touch(pc, e);
    for (int r = 1; r < pc->n_stages; r++) pc->used[r] += part_bytes(pc, r, n);
    char msg[512];
    if (tell(pc, MS_PIPE_PC_STORE, s->st.pipe_id, e->id, msg, sizeof msg) != MS_OK) {
        /* a stage could not keep its part (out of memory): kept nowhere (a0 = 1:
           the stages that have no part of it pass) */
        ms_log(&pc->e->log, MS_LOG_WARN, "prompt cache: an entry of %lld positions not kept: %s", (long long)n, msg);
        const int64_t id = e->id;
        unlink_entry(pc, find_id(pc, id), 0);
        tell(pc, MS_PIPE_PC_DROP, 1, id, NULL, 0);
    }
}

/* ---- a stage r > 0's parts (engine/pipe.c, for stage 0's MS_PIPE_PC_*) ---- */

static ms_status part_fail(char *msg, size_t len, ms_status st, const char *what, int64_t id) {
    if (msg && len) snprintf(msg, len, "prompt cache: %s (entry %lld)", what, (long long)id);
    return st;
}

ms_status ms_pcache_part_store(ms_pcache *pc, int64_t id, const ms_state *st, char *msg, size_t len) {
    if (!pc || !pc->part) return part_fail(msg, len, MS_E_INTERNAL, "no prompt cache on this stage", id);
    if (*find_id(pc, id)) return part_fail(msg, len, MS_E_INTERNAL, "an entry stored twice", id);
    const int64_t n = st->n_past, bytes = part_bytes(pc, pc->e->stage, n);
    /* stage 0 counted this stage's share with the same part_bytes: never over it */
    if (n < 1 || pc->used[0] + bytes > pc->cap[0])
        return part_fail(msg, len, MS_E_INTERNAL, "an entry over this stage's share", id);
    pc_entry *e = add(pc, id, n, bytes, 0);
    if (!e) return part_fail(msg, len, MS_E_NOMEM, "out of memory", id);
    copy_layers(&pc->e->model, e->state, (ms_state *)st, n, 0);
    return MS_OK;
}

ms_status ms_pcache_part_restore(ms_pcache *pc, int64_t id, ms_state *st, char *msg, size_t len) {
    pc_entry *e = pc && pc->part ? *find_id(pc, id) : NULL;
    if (!e || e->n > st->max_ctx) return part_fail(msg, len, MS_E_INTERNAL, "restore of an unknown entry", id);
    copy_layers(&pc->e->model, e->state, st, e->n, 1);
    st->n_past = e->n;
    return MS_OK;
}

ms_status ms_pcache_part_drop(ms_pcache *pc, int64_t id, int missing_ok, char *msg, size_t len) {
    pc_entry **l = pc && pc->part ? find_id(pc, id) : NULL;
    if (l && *l) unlink_entry(pc, l, 0);
    else if (!missing_ok) return part_fail(msg, len, MS_E_INTERNAL, "drop of an unknown entry", id);
    return MS_OK;
}

/* ---- the public calls (include/moestream.h, "the prompt cache") ---- */

ms_status ms_session_reuse(ms_session *s, const int32_t *ids, int64_t n, int64_t *n_have) {
    *n_have = 0;
    if (!ids || n < 0) return MS_E_USAGE;
    if (n > s->st.max_ctx) n = s->st.max_ctx;
    int64_t own = s->sticky == MS_OK && s->has_logits && s->st.n_past <= n &&
                                common(s->tokens, ids, s->st.n_past) == s->st.n_past ? s->st.n_past : -1;
    ms_engine *e = s->e;
    const int64_t hit = ms_pcache_lookup(e->pcache, ids, n, NULL);
    /* RAM first; the disk only for a longer prefix, and its hit is kept in RAM */
    int clobbered = 0;
    const int64_t on_disk = ms_pdisk_restore(e->pdisk, ids, n, hit > own ? hit : own, s, &clobbered);
    if (on_disk < 0) return s->sticky;  /* a stage failed: s is unsound */
    if (on_disk > 0) {
        e->stats.prompt_cache_hits++;
        e->stats.prompt_tokens_reused += on_disk;
        ms_pcache_store(e->pcache, s);
        *n_have = on_disk;
        return MS_OK;
    }
    if (clobbered) own = -1;            /* a refused entry was half read into s: it was reset */
    if (hit > 0 && hit > own) {
        const ms_status ps = ms_pcache_restore(e->pcache, ids, hit, s);
        if (ps != MS_OK) return ps;     /* a stage failed: s is unsound */
        s->sticky = MS_OK;
        s->error[0] = '\0';
        e->stats.prompt_cache_hits++;
        e->stats.prompt_tokens_reused += hit;
        *n_have = hit;
        return MS_OK;
    }
    if (own < 0) ms_session_reset(s);
    *n_have = own > 0 ? own : 0;
    return MS_OK;
}

int64_t ms_session_prompt_mark(const ms_session *s, const int32_t *ids, int64_t n, int64_t from) {
    const ms_engine *e = s->e;
    if ((!e->pcache && !e->pdisk) || from >= n) return n;
    int64_t first = -1, last = -1, lcp = 0;
    for (int64_t i = 0; e->eom_id >= 0 && i + 1 < n; i++)
        if (ids[i] == e->eom_id) {
            if (first < 0) first = i + 1;
            last = i + 1;
        }
    ms_pcache_lookup(e->pcache, ids, n, &lcp);
    int64_t mark = n;
    const int64_t cand[3] = { first, last, lcp };
    /* a cut costs a pass: only where a snapshot can be kept (a cache of a few
       MiB, what a small budget leaves, holds none of a long prompt) */
    for (int k = 0; k < 3; k++)
        if (cand[k] > from && cand[k] < mark && (ms_pcache_fits(e->pcache, cand[k]) || ms_pdisk_fits(e->pdisk, cand[k])))
            mark = cand[k];
    return mark;
}

void ms_session_remember(ms_session *s, int if_room) {
    ms_pcache *pc = s->e->pcache;
    if (pc && (!if_room || ms_pcache_room(pc, s->st.n_past))) ms_pcache_store(pc, s);
    /* the disk takes the marks only (docs/ARCHITECTURE.md, "Prompt cache on disk") */
    if (!if_room) ms_pdisk_store(s->e->pdisk, s);
}

ms_status ms_session_feed_prompt(ms_session *s, const int32_t *ids, int64_t n, int64_t *n_cached) {
    int64_t at = 0;
    ms_status st = ms_session_reuse(s, ids, n, &at);
    if (n_cached) *n_cached = at;
    if (st != MS_OK) return st;
    if (at == n && n > 0 && s->has_logits) return MS_OK;
    /* without a cache there are no marks: the rest in one feed (one progress step) */
    if (!s->e->pcache && !s->e->pdisk) return ms_session_feed(s, ids + at, n - at, NULL);
    const int64_t chunk = s->e->p.prefill_chunk;
    /* one progress step for the whole prompt, not one per piece */
    ms_progress_step ps;
    const int prog = n - at > 1 && ms_progress_on();
    const int64_t at0 = at, b0 = prog ? ms_engine_weight_bytes_read(s->e) : 0;
    if (prog) ms_progress_begin(&ps, "prompt", n - at0, (n - at0 + chunk - 1) / chunk);
    s->prompt_progress = prog;
    while (st == MS_OK && at < n) {
        /* a piece ends at a mark or at the end of a pass over the weights
           (where the feed would end a chunk anyway) */
        const int64_t mark = ms_session_prompt_mark(s, ids, n, at);
        const int64_t end = mark - at > chunk ? at + chunk : mark;
        st = ms_session_feed(s, ids + at, end - at, NULL);
        at = end;
        if (st == MS_OK) ms_session_remember(s, end != mark);
        if (st == MS_OK && prog)
            ms_progress_report(&ps, at - at0, (at - at0 + chunk - 1) / chunk, ms_engine_weight_bytes_read(s->e) - b0);
    }
    s->prompt_progress = 0;
    return st;
}
