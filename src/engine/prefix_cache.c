/* engine/prefix_cache.c - the prompt cache in RAM (see prefix_cache.h for
 * what it owns and its invariants). An entry is one allocation: its ids, its
 * logits row and every layer's state in layer order (ms_state_layer's parts),
 * so storing and restoring are memcpys of the same layout. Lookups compare
 * ids against every entry (a few entries of long prompts: the compare is
 * nothing beside one pass over the weights). */
#include "base/progress.h"
#include "engine/engine_int.h"
#include "engine/prefix_cache.h"

#include <stdlib.h>
#include <string.h>

typedef struct pc_entry {
    int64_t n;                  /* positions */
    int64_t bytes;              /* what it is charged (ms_pcache_entry_bytes) */
    double prio;                /* GreedyDual-Size priority (invariant 3) */
    int32_t *ids;               /* [n], then logits [n_vocab], then the layers' state */
    struct pc_entry *next;
} pc_entry;

struct ms_pcache {
    const ms_model *m;
    int64_t n_vocab, cap_bytes, used_bytes;
    double clock;
    int n;
    pc_entry *head;
};

/* Floats of every layer's state at n positions. */
static int64_t state_floats(const ms_model *m, int64_t n) {
    int64_t all = 0;
    for (int il = m->layer0; il < m->layer1; il++) {
        float *part[2];
        int64_t k[2];
        ms_state_layer(NULL, m, il, n, part, k);
        all += k[0] + k[1];
    }
    return all;
}

int64_t ms_pcache_entry_bytes(const ms_model *m, int64_t n_vocab, int64_t n) {
    return (int64_t)sizeof(pc_entry) + n * (int64_t)sizeof(int32_t) +
           (n_vocab + state_floats(m, n)) * (int64_t)sizeof(float);
}

ms_pcache *ms_pcache_init(const ms_model *m, int64_t n_vocab, int64_t cap_bytes) {
    if (cap_bytes <= 0) return NULL;
    ms_pcache *pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    pc->m = m;
    pc->n_vocab = n_vocab;
    pc->cap_bytes = cap_bytes;
    return pc;
}

static void drop(ms_pcache *pc, pc_entry **link) {
    pc_entry *e = *link;
    *link = e->next;
    pc->used_bytes -= e->bytes;
    pc->n--;
    free(e->ids);
    free(e);
}

void ms_pcache_free(ms_pcache *pc) {
    if (!pc) return;
    while (pc->head) drop(pc, &pc->head);
    free(pc);
}

int64_t ms_pcache_used(const ms_pcache *pc) { return pc ? pc->used_bytes : 0; }
int64_t ms_pcache_cap(const ms_pcache *pc) { return pc ? pc->cap_bytes : 0; }
int ms_pcache_count(const ms_pcache *pc) { return pc ? pc->n : 0; }

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

int64_t ms_pcache_lookup(ms_pcache *pc, const int32_t *ids, int64_t n, int64_t *lcp) {
    int64_t best = 0, share = 0;
    for (pc_entry *e = pc ? pc->head : NULL; e; e = e->next) {
        const int64_t c = common(e->ids, ids, e->n < n ? e->n : n);
        if (c > share) share = c;
        if (c == e->n && c > best) best = c;
    }
    if (lcp) *lcp = share;
    return best;
}

/* The parts of entry e (n positions) and of state st, layer by layer: each
 * of ms_state_layer's parts, as (entry floats, state floats, count). */
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

void ms_pcache_restore(ms_pcache *pc, const int32_t *ids, int64_t len, ms_session *s) {
    pc_entry *e = find(pc, ids, len);
    MS_ASSERT(e && len <= s->st.max_ctx);
    float *logits = (float *)(e->ids + e->n);
    copy_layers(pc->m, logits + pc->n_vocab, &s->st, e->n, 1);
    memcpy(s->tokens, e->ids, (size_t)e->n * sizeof *s->tokens);
    memcpy(s->logits, logits, (size_t)pc->n_vocab * sizeof *s->logits);
    s->st.n_past = e->n;
    s->has_logits = 1;
    s->rb.n_rec = 0;
    touch(pc, e);
}

void ms_pcache_store(ms_pcache *pc, const ms_session *s) {
    const int64_t n = s->st.n_past;
    if (!pc || n < 1 || !s->has_logits || s->sticky != MS_OK) return;
    pc_entry *have = find(pc, s->tokens, n);
    if (have) { touch(pc, have); return; }
    const int64_t bytes = ms_pcache_entry_bytes(pc->m, pc->n_vocab, n);
    if (bytes > pc->cap_bytes) return;
    while (pc->used_bytes + bytes > pc->cap_bytes) {
        pc_entry **low = &pc->head;
        for (pc_entry **l = &pc->head; *l; l = &(*l)->next)
            if ((*l)->prio < (*low)->prio) low = l;
        pc->clock = (*low)->prio;
        drop(pc, low);
    }
    pc_entry *e = calloc(1, sizeof *e);
    int32_t *blob = malloc((size_t)(bytes - (int64_t)sizeof *e));
    if (!e || !blob) { free(e); free(blob); return; }     /* no room: simply not kept */
    e->n = n;
    e->bytes = bytes;
    e->ids = blob;
    memcpy(e->ids, s->tokens, (size_t)n * sizeof *e->ids);
    float *logits = (float *)(e->ids + n);
    memcpy(logits, s->logits, (size_t)pc->n_vocab * sizeof *logits);
    copy_layers(pc->m, logits + pc->n_vocab, (ms_state *)&s->st, n, 0);
    touch(pc, e);
    e->next = pc->head;
    pc->head = e;
    pc->used_bytes += bytes;
    pc->n++;
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
    if (on_disk > 0) {
        e->stats.prompt_cache_hits++;
        e->stats.prompt_tokens_reused += on_disk;
        ms_pcache_store(e->pcache, s);
        *n_have = on_disk;
        return MS_OK;
    }
    if (clobbered) own = -1;            /* a refused entry was half read into s: it was reset */
    if (hit > 0 && hit > own) {
        char msg[512];
        const ms_status ps = ms_engine_pipe_op(e, MS_PIPE_RESET, s->st.pipe_id, 0, msg, sizeof msg);
        if (ps != MS_OK) return ps;     /* never: the cache is off with a pipeline */
        ms_pcache_restore(e->pcache, ids, hit, s);
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
    for (int k = 0; k < 3; k++)
        if (cand[k] > from && cand[k] < mark) mark = cand[k];
    return mark;
}

void ms_session_remember(ms_session *s, int if_room) {
    ms_pcache *pc = s->e->pcache;
    if (pc && !(if_room && pc->used_bytes + ms_pcache_entry_bytes(pc->m, pc->n_vocab, s->st.n_past) > pc->cap_bytes))
        ms_pcache_store(pc, s);
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
