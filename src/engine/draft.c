/* engine/draft.c - draft sources and the choice of a draft's length (see
 * draft.h).
 *
 * Owns: prompt lookup, the counted index and its chains, the choice rule
 *   (a draft model's offer weighed among the sources, its calibration), the
 *   engine's drafter (history, corpus, running acceptance, measured costs).
 * Idea: a source offers, for the longest suffix of the text it has seen, the
 *   ids that followed it with their counts; chaining the most frequent one
 *   gives a draft whose i-th id is accepted with probability about the
 *   product over j <= i of q_j x the source's running acceptance (q_j: the
 *   chosen id's share of the counts at step j). Verifying k drafted
 *   ids costs a pass plus k + 1 tokens' bytes, so the draft is cut where the
 *   expected emitted tokens per byte peak (ms_draft_choose). When k sequences
 *   are verified in one pass (ms_sessions_decode) the pass's trunk bytes are
 *   read once for all of them: each weighs its share, c_pass / k, so company
 *   makes a token's experts weigh more and drafts shorter. A second branch
 *   (--draft-tree) is the runner-up continuation of the chain's first
 *   position, chained on: it pays when its chance of being the id picked,
 *   times what it then emits, outweighs the expert bytes of its fed ids
 *   (ms_draft_branch_choose).
 * Invariants: deterministic (ids, the order of remembered outputs and
 *   counted passes); the index never holds more than its max ids; every
 *   access to a drafter is under its mutex.
 * Does not: look at logits, feed, or decide what is emitted.
 */
#include "engine/draft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- prompt lookup ----------------------------------------------------------------- */

int64_t ms_draft_lookup(const int32_t *tok, int64_t n_past, int32_t pending, int64_t want, int32_t *out) {
    const int64_t N = n_past + 1;
#define HID(i) ((i) < n_past ? tok[i] : (i) == n_past ? pending : out[(i) - N])
    for (int64_t n = MS_DRAFT_NGRAM; n >= 1; n--) {
        for (int64_t i = N - n - 1; i >= 0; i--) {
            int64_t j = 0;
            while (j < n && HID(i + j) == HID(N - n + j)) j++;
            if (j < n) continue;
            int64_t m = 0;
            for (; m < want; m++) out[m] = HID(i + n + m);   /* i + n + m < N + m */
            return m;
        }
    }
#undef HID
    return 0;
}

/* ---- the index ---------------------------------------------------------------------- */

static uint32_t bucket(int32_t id) { return ((uint32_t)id * 2654435761u) >> 16 & (MS_DRAFT_BUCKETS - 1); }

int ms_draft_index_init(ms_draft_index *x, int64_t max) {
    memset(x, 0, sizeof *x);
    x->max = max < 2 ? 2 : max;
    x->head = malloc(MS_DRAFT_BUCKETS * sizeof *x->head);
    if (!x->head) return -1;
    memset(x->head, 0xff, MS_DRAFT_BUCKETS * sizeof *x->head);
    return 0;
}

void ms_draft_index_free(ms_draft_index *x) {
    free(x->tok);
    free(x->prev);
    free(x->head);
    memset(x, 0, sizeof *x);
}

int64_t ms_draft_index_bytes(const ms_draft_index *x) {
    return x->cap * (int64_t)(sizeof *x->tok + sizeof *x->prev) + (x->head ? MS_DRAFT_BUCKETS * 4 : 0);
}

/* position p (< n) joins the chain of the id before it */
static void link_pos(ms_draft_index *x, int64_t p) {
    x->prev[p] = -1;
    if (p < 1 || x->tok[p - 1] < 0) return;
    const uint32_t b = bucket(x->tok[p - 1]);
    x->prev[p] = x->head[b];
    x->head[b] = (int32_t)p;
}

/* keep the newer half of the ids; the chains are built again */
static void keep_newer_half(ms_draft_index *x) {
    const int64_t keep = x->n / 2;
    x->dropped += x->n - keep;
    memmove(x->tok, x->tok + (x->n - keep), (size_t)keep * sizeof *x->tok);
    x->n = keep;
    memset(x->head, 0xff, MS_DRAFT_BUCKETS * sizeof *x->head);
    for (int64_t p = 0; p < x->n; p++) link_pos(x, p);
}

int ms_draft_index_add(ms_draft_index *x, const int32_t *ids, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (x->n == x->max) keep_newer_half(x);
        if (x->n == x->cap) {
            int64_t cap = x->cap ? x->cap * 2 : 4096;
            if (cap > x->max) cap = x->max;
            int32_t *t = realloc(x->tok, (size_t)cap * sizeof *t);
            if (!t) return -1;
            x->tok = t;
            int32_t *p = realloc(x->prev, (size_t)cap * sizeof *p);
            if (!p) return -1;
            x->prev = p;
            x->cap = cap;
        }
        x->tok[x->n] = ids[i] < 0 ? -1 : ids[i];
        link_pos(x, x->n);
        x->n++;
    }
    return 0;
}

/* ---- chains ------------------------------------------------------------------------- */

/* h = ctx[0..n_ctx) + pending + out[0..n_out) */
typedef struct hview {
    const int32_t *ctx, *out;
    int64_t n_ctx, len;
    int32_t pending;
} hview;

static int32_t h_at(const hview *h, int64_t i) {
    return i < h->n_ctx ? h->ctx[i] : i == h->n_ctx ? h->pending : h->out[i - h->n_ctx - 1];
}

/* the continuations of the longest suffix seen so far, with their counts */
typedef struct tally {
    int64_t L, total;
    int n;
    int32_t id[MS_DRAFT_CANDS];
    int64_t count[MS_DRAFT_CANDS];
} tally;

static void tally_add(tally *t, int64_t L, int32_t id) {
    if (L > t->L) { t->L = L; t->total = 0; t->n = 0; }
    if (L < t->L) return;
    t->total++;
    for (int i = 0; i < t->n; i++)
        if (t->id[i] == id) { t->count[i]++; return; }
    if (t->n < MS_DRAFT_CANDS) { t->id[t->n] = id; t->count[t->n++] = 1; }
}

/* matched length of the ids before position p of seq (-1 ends a run) with
 * h's last ones, up to MS_DRAFT_MAX_NGRAM */
static int64_t match_len(const int32_t *seq, const hview *h, int64_t p) {
    int64_t t = 0;
    while (t < MS_DRAFT_MAX_NGRAM && p - 1 - t >= 0 && h->len - 1 - t >= 0 && seq[p - 1 - t] >= 0 &&
           seq[p - 1 - t] == h_at(h, h->len - 1 - t))
        t++;
    return t;
}

static int64_t match_len_self(const hview *h, int64_t p) {
    int64_t t = 0;
    while (t < MS_DRAFT_MAX_NGRAM && p - 1 - t >= 0 && h_at(h, p - 1 - t) == h_at(h, h->len - 1 - t)) t++;
    return t;
}

static void tally_step(const ms_draft_index *x, int64_t below, const hview *h, tally *t) {
    memset(t, 0, sizeof *t);
    const int32_t key = h_at(h, h->len - 1);
    int64_t seen = 0;
    if (x) {
        for (int64_t p = x->head[bucket(key)]; p >= 0 && seen < MS_DRAFT_SCAN; p = x->prev[p]) {
            if (p >= below || x->tok[p - 1] != key || x->tok[p] < 0) continue;
            seen++;
            tally_add(t, match_len(x->tok, h, p), x->tok[p]);
        }
        return;
    }
    for (int64_t p = h->len - 1; p >= 1 && seen < MS_DRAFT_SCAN; p--) {
        if (h_at(h, p - 1) != key) continue;
        seen++;
        tally_add(t, match_len_self(h, p), h_at(h, p));
    }
}

/* the chain after h = ctx + pending + out[0..m0), from out[m0] on: returns its
   end (out[m0..end), q[m0..end)) */
static int64_t chain_from(const ms_draft_index *x, int64_t below, const int32_t *ctx, int64_t n_ctx, int32_t pending,
                          int64_t m0, int64_t want, int32_t *out, double *q) {
    hview h = { ctx, out, n_ctx, n_ctx + 1 + m0, pending };
    int64_t m = m0;
    for (; m < want; m++) {
        tally t;
        tally_step(x, below, &h, &t);
        if (t.total == 0) break;
        int best = 0;
        for (int i = 1; i < t.n; i++)
            if (t.count[i] > t.count[best]) best = i;
        out[m] = t.id[best];
        q[m] = (double)t.count[best] / (double)t.total;
        h.len++;
    }
    return m;
}

int64_t ms_draft_chain(const ms_draft_index *x, int64_t below, const int32_t *ctx, int64_t n_ctx, int32_t pending,
                       int64_t want, int32_t *out, double *q) {
    return chain_from(x, below, ctx, n_ctx, pending, 0, want, out, q);
}

/* a second branch: the most frequent continuation of h = ctx + pending other
   than a1 (ties: the newest), chained on; returns its length (0: none) */
static int64_t chain_second(const ms_draft_index *x, int64_t below, const int32_t *ctx, int64_t n_ctx, int32_t pending,
                            int32_t a1, int64_t want, int32_t *out, double *q) {
    const hview h = { ctx, out, n_ctx, n_ctx + 1, pending };
    tally t;
    tally_step(x, below, &h, &t);
    int best = -1;
    for (int i = 0; i < t.n; i++)
        if (t.id[i] != a1 && (best < 0 || t.count[i] > t.count[best])) best = i;
    if (best < 0 || want < 1) return 0;
    out[0] = t.id[best];
    q[0] = (double)t.count[best] / (double)t.total;
    return chain_from(x, below, ctx, n_ctx, pending, 1, want, out, q);
}

/* ---- the choice rule ------------------------------------------------------------- */

int ms_draft_choose(const double *p, int K, double c_pass, double c_tok, double *gain) {
    if (!(c_pass >= 0 && c_tok >= 0 && c_pass + c_tok > 0)) {
        if (gain) *gain = 0;
        return 0;
    }
    double emitted = 1, prod = 1, best = 1 / (c_pass + c_tok);
    int k_best = 0;
    for (int k = 1; k <= K; k++) {
        prod *= p[k - 1];
        emitted += prod;
        const double v = emitted / (c_pass + (double)(k + 1) * c_tok);
        if (v > best) { best = v; k_best = k; }
    }
    if (gain) *gain = best;
    return k_best;
}

int ms_draft_branch_choose(const double *pa, int ka, const double *pb, int Kb, double c_pass, double c_tok,
                           double *gain) {
    double ea = 1, prod = 1;
    for (int i = 0; i < ka; i++) {
        prod *= pa[i];
        ea += prod;
    }
    const double ca = c_pass + (double)(ka + 1) * c_tok;
    if (!(c_pass >= 0 && c_tok >= 0 && ca > 0)) {
        if (gain) *gain = 0;
        return 0;
    }
    double best = ea / ca, eb = 0;
    int k_best = 0;
    prod = 1;
    for (int k = 1; k <= Kb; k++) {
        prod *= pb[k - 1];
        eb += prod;
        const double v = (ea + eb) / (ca + (double)k * c_tok);
        if (v > best) { best = v; k_best = k; }
    }
    if (gain) *gain = best;
    return k_best;
}

/* ---- the engine's drafter ---------------------------------------------------------- */

ms_status ms_drafter_init(ms_drafter *d, int auto_len, double c_pass0, double c_tok0, ms_err *err) {
    memset(d, 0, sizeof *d);
    d->auto_len = auto_len;
    d->c_pass0 = c_pass0;
    d->c_tok0 = c_tok0;
    if (ms_draft_index_init(&d->hist, MS_DRAFT_HISTORY_MAX) != 0 ||
        ms_draft_index_init(&d->corpus, MS_DRAFT_CORPUS_MAX_TOKENS) != 0) {
        ms_draft_index_free(&d->hist);
        ms_draft_index_free(&d->corpus);
        return ms_err_set(err, MS_E_NOMEM, "out of memory (draft index)");
    }
    pthread_mutex_init(&d->mu, NULL);
    return MS_OK;
}

void ms_drafter_free(ms_drafter *d) {
    if (!d->hist.head) return;
    ms_draft_index_free(&d->hist);
    ms_draft_index_free(&d->corpus);
    pthread_mutex_destroy(&d->mu);
}

ms_status ms_draft_corpus_check(const char *path, ms_err *err) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return ms_err_set(err, MS_E_USAGE, "--draft-corpus %s: not a readable file", path);
    if ((int64_t)sb.st_size > MS_DRAFT_CORPUS_MAX_BYTES)
        return ms_err_set(err, MS_E_USAGE, "--draft-corpus %s: %lld bytes, more than the %lld a corpus may have", path,
                          (long long)sb.st_size, (long long)MS_DRAFT_CORPUS_MAX_BYTES);
    FILE *f = fopen(path, "rb");
    if (!f) return ms_err_set(err, MS_E_USAGE, "--draft-corpus %s: not a readable file", path);
    fclose(f);
    return MS_OK;
}

ms_status ms_drafter_corpus(ms_drafter *d, const char *path, const ms_tok *tok, ms_err *err) {
    ms_status st = ms_draft_corpus_check(path, err);
    if (st != MS_OK) return st;
    if (!tok) return ms_err_set(err, MS_E_USAGE, "--draft-corpus %s: the model has no tokenizer", path);
    FILE *f = fopen(path, "rb");
    char *text = malloc((size_t)MS_DRAFT_CORPUS_MAX_BYTES + 1);
    size_t len = f && text ? fread(text, 1, (size_t)MS_DRAFT_CORPUS_MAX_BYTES + 1, f) : 0;
    const int bad = !f || ferror(f) || len > (size_t)MS_DRAFT_CORPUS_MAX_BYTES;
    if (f) fclose(f);
    if (!text) return ms_err_set(err, MS_E_NOMEM, "out of memory (draft corpus)");
    if (bad) { free(text); return ms_err_set(err, MS_E_USAGE, "--draft-corpus %s: could not be read whole", path); }
    int32_t *ids = NULL;
    int64_t n = 0, cap = 0;
    st = ms_tok_encode(tok, text, len, &ids, &n, &cap, err);
    free(text);
    if (st == MS_OK && n > MS_DRAFT_CORPUS_MAX_TOKENS) n = MS_DRAFT_CORPUS_MAX_TOKENS;
    if (st == MS_OK && ms_draft_index_add(&d->corpus, ids, n) != 0)
        st = ms_err_set(err, MS_E_NOMEM, "out of memory (draft corpus)");
    free(ids);
    return st;
}

int64_t ms_drafter_sid(ms_drafter *d) {
    pthread_mutex_lock(&d->mu);
    const int64_t sid = ++d->next_sid;
    pthread_mutex_unlock(&d->mu);
    return sid;
}

/* bytes a pass and a fed token cost: given, or measured on this run's decode
 * passes, or what the compute touches when they read nothing; a pass's share
 * of one of the `share` sequences it serves */
static void costs(const ms_drafter *d, int share, double *c_pass, double *c_tok) {
    if (!d->given && d->m_passes > 0 && d->m_fed > 0 && d->m_trunk + d->m_expert > 0) {
        *c_pass = (double)d->m_trunk / (double)d->m_passes;
        *c_tok = (double)d->m_expert / (double)d->m_fed;
    } else {
        *c_pass = d->c_pass0;
        *c_tok = d->c_tok0;
    }
    if (share > 1) *c_pass /= (double)share;
}

void ms_drafter_costs(ms_drafter *d, int share, double *c_pass, double *c_tok) {
    pthread_mutex_lock(&d->mu);
    costs(d, share, c_pass, c_tok);
    pthread_mutex_unlock(&d->mu);
}

static const ms_draft_index *source(const ms_drafter *d, int s) {
    return s == MS_DRAFT_HISTORY ? &d->hist : s == MS_DRAFT_CORPUS ? &d->corpus : NULL;
}

const char *ms_draft_source_name(int src) {
    static const char *const name[MS_DRAFT_SOURCES] = { "context", "history", "corpus", "model" };
    return src >= 0 && src < MS_DRAFT_SOURCES ? name[src] : "?";
}

/* a source's running acceptance: the chance that a drafted id is accepted
   once every one before it was */
static double acceptance(const ms_drafter *d, int s) {
    if (s == MS_DRAFT_MODEL) return (double)(d->accepted[s] + 1) / (d->model_q + 1.0);
    return (double)(d->accepted[s] + 1) / (double)(d->accepted[s] + d->rejected[s] + 2);
}

/* p = q x r, a probability */
static double chance(double q, double r) { return q * r < 1.0 ? q * r : 1.0; }

void ms_drafter_model_verified(ms_drafter *d, double q_sum) {
    pthread_mutex_lock(&d->mu);
    d->model_q += q_sum;
    pthread_mutex_unlock(&d->mu);
}

int ms_drafter_model_more(ms_drafter *d, const double *q, int64_t k, int share) {
    if (k >= MS_MAX_DRAFT_IDS) return 0;
    pthread_mutex_lock(&d->mu);
    const int auto_len = d->auto_len;
    double c_pass, c_tok;
    costs(d, share, &c_pass, &c_tok);
    const double r = acceptance(d, MS_DRAFT_MODEL);
    pthread_mutex_unlock(&d->mu);
    if (!auto_len) return 1;
    if (!(c_tok > 0)) return 1;             /* a fed token costs nothing more: any length pays */
    double p[MS_MAX_DRAFT_IDS], prod = 1, best;
    for (int64_t i = 0; i < k; i++) {
        p[i] = chance(q[i], r);
        prod *= p[i];
    }
    ms_draft_choose(p, (int)k, c_pass, c_tok, &best);
    /* a longer draft adds at most prod emitted tokens per c_tok bytes per id: it
       can beat the best so far only if prod / c_tok does */
    return prod / c_tok > best;
}

/* the positions of x a session drafts from: the history without the
 * session's own run (its context source has those ids already) */
static int64_t below(const ms_drafter *d, const ms_draft_index *x, int64_t sid) {
    if (x != &d->hist || d->owner != sid) return x ? x->n : 0;
    const int64_t dropped = d->hist.dropped - d->run_dropped;   /* ids the history let go since */
    return d->run0 - dropped > 0 ? d->run0 - dropped : 0;
}

/* auto: each source's chain cut by the choice rule; the best gain */
static int64_t draft_auto(ms_drafter *d, int64_t sid, const int32_t *tok, int64_t n_past, int32_t pending,
                          int64_t want, int share, const ms_draft_offer *model, int32_t *out, int *src, double *p_out) {
    int32_t buf[MS_MAX_DRAFT_IDS];
    double q[MS_MAX_DRAFT_IDS], p[MS_MAX_DRAFT_IDS];
    double c_pass, c_tok, best;
    costs(d, share, &c_pass, &c_tok);
    ms_draft_choose(p, 0, c_pass, c_tok, &best);
    int64_t m = 0;
    for (int s = 0; s < MS_DRAFT_SOURCES; s++) {
        const ms_draft_index *x = source(d, s);
        int64_t mm;
        if (s == MS_DRAFT_MODEL) {
            mm = model && model->n < want ? model->n : model ? want : 0;
            if (mm > 0) {
                memcpy(buf, model->ids, (size_t)mm * sizeof *buf);
                memcpy(q, model->q, (size_t)mm * sizeof *q);
            }
        } else {
            if (x && x->n == 0) continue;
            mm = ms_draft_chain(x, below(d, x, sid), tok, n_past, pending, want, buf, q);
        }
        /* a drafted id is verified only when every one before it was accepted: the
           chance that one is, given that, is accepted / (accepted + rejections) */
        const double r = acceptance(d, s);
        for (int64_t i = 0; i < mm; i++) p[i] = chance(q[i], r);
        double g;
        const int k = ms_draft_choose(p, (int)mm, c_pass, c_tok, &g);
        if (k > 0 && g > best) {
            best = g;
            m = k;
            *src = s;
            memcpy(out, buf, (size_t)k * sizeof *out);
            if (p_out) memcpy(p_out, p, (size_t)k * sizeof *p_out);
        }
    }
    return m;
}

int64_t ms_drafter_draft(ms_drafter *d, int64_t sid, const int32_t *tok, int64_t n_past, int32_t pending,
                         int64_t want, int share, const ms_draft_offer *model, int32_t *out, int *src, double *p) {
    double q[MS_MAX_DRAFT_IDS];
    if (want > MS_MAX_DRAFT_IDS) want = MS_MAX_DRAFT_IDS;
    *src = MS_DRAFT_CONTEXT;
    pthread_mutex_lock(&d->mu);
    int64_t m;
    if (d->auto_len) {
        m = draft_auto(d, sid, tok, n_past, pending, want, share, model, out, src, p);
    } else if (model && model->n > 0) {
        /* a draft model was given: it drafts every pass, as long as asked */
        m = model->n < want ? model->n : want;
        memcpy(out, model->ids, (size_t)m * sizeof *out);
        *src = MS_DRAFT_MODEL;
    } else {
        m = ms_draft_lookup(tok, n_past, pending, want, out);
        for (int s = MS_DRAFT_HISTORY; m == 0 && s < MS_DRAFT_CORPUS + 1; s++)
            if (source(d, s)->n > 0 &&
                (m = ms_draft_chain(source(d, s), below(d, source(d, s), sid), tok, n_past, pending, want, out, q)) > 0)
                *src = s;
    }
    pthread_mutex_unlock(&d->mu);
    return m;
}

int64_t ms_drafter_branch(ms_drafter *d, int64_t sid, const int32_t *tok, int64_t n_past, int32_t pending,
                          const int32_t *a, const double *pa, int64_t ma, int64_t want, int32_t *out, int *src) {
    if (ma < 1 || want < 1) return 0;
    if (want > MS_MAX_DRAFT_IDS) want = MS_MAX_DRAFT_IDS;
    int32_t buf[MS_MAX_DRAFT_IDS];
    double q[MS_MAX_DRAFT_IDS], p[MS_MAX_DRAFT_IDS], c_pass, c_tok, best = 0;
    int64_t m = 0;
    pthread_mutex_lock(&d->mu);
    costs(d, 1, &c_pass, &c_tok);
    for (int s = MS_DRAFT_CONTEXT; s <= MS_DRAFT_CORPUS; s++) {
        const ms_draft_index *x = source(d, s);
        if (x && x->n == 0) continue;
        const int64_t mm = chain_second(x, below(d, x, sid), tok, n_past, pending, a[0], want, buf, q);
        const double r = acceptance(d, s);
        for (int64_t i = 0; i < mm; i++) p[i] = chance(q[i], r);
        double g;
        const int k = ms_draft_branch_choose(pa, (int)ma, p, (int)mm, c_pass, c_tok, &g);
        if (k > 0 && g > best) {
            best = g;
            m = k;
            *src = s;
            memcpy(out, buf, (size_t)k * sizeof *out);
        }
    }
    pthread_mutex_unlock(&d->mu);
    return m;
}

void ms_drafter_verified(ms_drafter *d, int src, int64_t drafted, int64_t accepted) {
    if (drafted <= 0 || src < 0 || src >= MS_DRAFT_SOURCES) return;
    pthread_mutex_lock(&d->mu);
    d->drafted[src] += drafted;
    d->accepted[src] += accepted;
    d->rejected[src] += accepted < drafted;
    pthread_mutex_unlock(&d->mu);
}

void ms_drafter_measured(ms_drafter *d, int64_t passes, int64_t trunk, int64_t expert, int64_t fed) {
    pthread_mutex_lock(&d->mu);
    d->m_trunk += trunk;
    d->m_expert += expert;
    d->m_passes += passes;
    d->m_fed += fed;
    pthread_mutex_unlock(&d->mu);
}

void ms_drafter_remember(ms_drafter *d, int64_t sid, int64_t *end, const int32_t *tok, int64_t n0, int64_t n1) {
    pthread_mutex_lock(&d->mu);
    if (d->owner != sid || *end != n0) {
        d->run0 = d->hist.n;
        d->run_dropped = d->hist.dropped;
        const int32_t sep = -1;
        const int64_t lead = n0 < MS_DRAFT_LEAD ? n0 : MS_DRAFT_LEAD;
        ms_draft_index_add(&d->hist, &sep, 1);
        ms_draft_index_add(&d->hist, tok + n0 - lead, lead);
    }
    ms_draft_index_add(&d->hist, tok + n0, n1 - n0);
    d->owner = sid;
    *end = n1;
    pthread_mutex_unlock(&d->mu);
}
