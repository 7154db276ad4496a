/* engine/draft_model.c - a draft model (ms_engine_params.draft_model): a
 * second, resident engine run greedily ahead of the model, with one session
 * of it per session of the model.
 *
 * Owns: refusing a draft model whose vocabulary is not the model's (its
 *   size when the config is read, then its tokenizer: the same files, or
 *   the same bytes for every id, compared before the budget is split);
 *   opening the draft engine (one process, no budget: every weight
 *   resident; the model's kernels, threads, I/O backend and checksum
 *   choices; no tokenizer of its own: it is fed ids only); per
 *   session, its state of the draft model and the marks it goes back to; the
 *   greedy draft of a pass and each drafted id's probability.
 * Idea: a session's draft state holds a prefix of the ids the session holds.
 *   Before a pass it is brought to h = ids + pending: back to the longest
 *   prefix it shares with h, then the ids it lacks in one feed, then one feed
 *   per drafted id. Going back uses a mark: the KDA layers' S and conv
 *   history saved before each drafted id was fed (an MLA layer's latent cache
 *   and gpt-oss's keys and values go back by moving n_past, as in a
 *   rollback: later positions are written again before they are read). The
 *   marks of a pass are those of its drafted ids, so after the model kept i
 *   of them the state goes back to exactly h + d1..di, nothing recomputed.
 *   Without a mark there (a session reset, copied, loaded or restored from a
 *   prompt cache), it starts again from position 0.
 * Invariants: the draft is a function of h alone: every way of reaching a
 *   state (marks, chunking) gives the bits of a plain feed of the same ids
 *   (docs/DETERMINISM.md); nothing here reads or writes the model's sessions
 *   or logits, so no draft changes an emitted bit; a draft session that fails
 *   is reset and that pass drafts what it had.
 * Does not: choose the length of the draft the model verifies (engine/draft.c),
 *   verify or roll back the model (engine/engine.c), plan the bytes
 *   (engine/plan.c, ms_draft_model_bytes).
 */
#include "engine/engine_int.h"

#include "base/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ms_dm_sess {
    ms_session *ds;             /* the session of the draft engine */
    int64_t n_marks;
    int64_t mpos[MS_MAX_DRAFT_IDS];  /* the position each mark holds the state at, increasing */
    float *marks;               /* [max_draft][mark floats] */
    int32_t *buf;               /* [max_ctx] the ids a catch-up feeds */
};

int64_t ms_dm_mark_floats(const ms_model *m) {
    int64_t n = 0;
    for (int il = 0; il < m->n_layer; il++) {
        if (m->layers[il].pos_index >= 0) continue;     /* goes back by n_past */
        float *part[2];
        int64_t k[2];
        ms_state_layer(NULL, m, il, 0, part, k);
        n += k[0] + k[1];
    }
    return n;
}

/* save (1) or restore (0) the recurrent state of st into / from buf */
static void mark_io(ms_state *st, const ms_model *m, float *buf, int save) {
    for (int il = 0; il < m->n_layer; il++) {
        if (m->layers[il].pos_index >= 0) continue;
        float *part[2];
        int64_t k[2];
        ms_state_layer(st, m, il, st->n_past, part, k);
        for (int j = 0; j < 2; j++) {
            if (save) memcpy(buf, part[j], (size_t)k[j] * sizeof *buf);
            else memcpy(part[j], buf, (size_t)k[j] * sizeof *buf);
            buf += k[j];
        }
    }
}

/* ---- opening ------------------------------------------------------------------------ */

/* the draft engine's log lines, named as the draft's */
static void dm_log(void *user, ms_log_level level, const char *line) {
    const ms_engine *e = user;
    char buf[1200];
    snprintf(buf, sizeof buf, "draft model: %s", line);
    e->p.log(e->p.log_user, level, buf);
}

ms_status ms_dm_check_config(const ms_engine *e, ms_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", e->p.draft_model);
    ms_config c;
    ms_err ce;
    ms_err_clear(&ce);
    if (ms_config_load(path, &c, &ce) != MS_OK)
        return ms_err_set(err, MS_E_USAGE, "--draft-model %s: %s", e->p.draft_model, ce.msg);
    if (c.vocab_size != e->cfg.vocab_size)
        return ms_err_set(err, MS_E_USAGE, "--draft-model %s: its vocabulary has %lld ids, the model's (%s) %lld:"
                          " a draft model needs the model's vocabulary and tokenizer", e->p.draft_model,
                          (long long)c.vocab_size, e->p.model_dir, (long long)e->cfg.vocab_size);
    return MS_OK;
}

/* A digest of every id's bytes (0: no tokenizer). */
static uint64_t vocab_digest(const ms_tok *t, int64_t n_vocab) {
    if (!t) return 0;
    uint64_t h = MS_FNV_INIT;
    for (int64_t id = 0; id < n_vocab; id++) {
        const char *b = NULL;
        const int64_t n = ms_tok_token_bytes(t, (int32_t)id, &b);
        h = ms_fnv1a(h, &n, sizeof n);
        if (n > 0) h = ms_fnv1a(h, b, (size_t)n);
    }
    return h ? h : 1;
}

static const char *digest_str(uint64_t h, char *buf, size_t n) {
    if (h == 0) snprintf(buf, n, "none");
    else snprintf(buf, n, "%016llx", (unsigned long long)h);
    return buf;
}

ms_status ms_dm_check_tokenizer(const ms_engine *e, ms_err *err) {
    const char *dir = e->p.draft_model;
    if (ms_tok_same_files(e->p.model_dir, dir)) return MS_OK;
    ms_tok *t = NULL;
    ms_err te;
    ms_err_clear(&te);
    if (ms_tok_find(dir) != MS_TOK_NONE && ms_tok_load(dir, e->cfg.vocab_size, &t, &te) != MS_OK)
        return ms_err_set(err, MS_E_USAGE, "--draft-model %s: %s", dir, te.msg);
    const uint64_t mine = vocab_digest(e->tok, e->cfg.vocab_size), its = vocab_digest(t, e->cfg.vocab_size);
    ms_tok_free(t);
    if (mine == its) return MS_OK;
    char a[24], b[24];
    return ms_err_set(err, MS_E_USAGE, "--draft-model %s: its tokenizer (%s, %lld ids) is not the model's (%s: %s,"
                      " %lld ids): a draft model needs the model's vocabulary and tokenizer", dir,
                      digest_str(its, a, sizeof a), (long long)e->cfg.vocab_size, e->p.model_dir,
                      digest_str(mine, b, sizeof b), (long long)e->cfg.vocab_size);
}

ms_status ms_dm_open(ms_engine *e, ms_err *err) {
    ms_engine_params dp = ms_engine_default_params();
    dp.model_dir = e->p.draft_model;
    dp.n_threads = e->n_threads;
    dp.max_context = e->p.max_context;
    dp.n_seq = e->p.n_seq;
    dp.kernels = e->p.kernels;
    dp.io_backend = e->p.io_backend;
    dp.no_verify = e->p.no_verify;
    dp.no_pack = e->p.no_pack;
    dp.prompt_cache_bytes = MS_PROMPT_CACHE_OFF;
    dp.log = e->p.log ? dm_log : NULL;
    dp.log_user = e;
    dp.log_level = e->p.log_level;
    char msg[512];
    /* the model's threads; no tokenizer (ms_dm_check_tokenizer compared it) */
    ms_status st = ms_engine_open_alone(&dp, e->pool, 0, &e->dm, msg, sizeof msg);
    if (st != MS_OK) return ms_err_set(err, st, "--draft-model %s: %s", e->p.draft_model, msg);
    e->dm->state_back = e->p.max_draft;    /* its sessions go back to marks (go_back) */
    e->dm_mark_floats = ms_dm_mark_floats(&e->dm->model);
    ms_log(&e->log, MS_LOG_INFO, "draft model %s: %lld layers, hidden %lld, resident; drafts up to %d ids a pass",
           e->p.draft_model, (long long)e->dm->cfg.num_hidden_layers, (long long)e->dm->cfg.hidden_size,
           e->p.max_draft);
    return MS_OK;
}

void ms_dm_close(ms_engine *e) {
    ms_engine_close(e->dm);
    e->dm = NULL;
}

/* ---- sessions ----------------------------------------------------------------------- */

ms_status ms_dm_sess_open(ms_session *s, ms_err *err) {
    ms_engine *e = s->e;
    ms_dm_sess *d = calloc(1, sizeof *d);
    if (!d) return ms_err_set(err, MS_E_NOMEM, "out of memory (draft session)");
    d->marks = malloc((size_t)(e->p.max_draft * e->dm_mark_floats + 1) * sizeof *d->marks);
    d->buf = malloc((size_t)e->p.max_context * sizeof *d->buf);
    ms_status st = !d->marks || !d->buf ? MS_E_NOMEM : ms_session_open(e->dm, &d->ds);
    if (st != MS_OK) {
        st = ms_err_set(err, st, "draft model session: %s", st == MS_E_NOMEM ? "out of memory" : ms_engine_error(e->dm));
        ms_dm_sess_close(d);
        return st;
    }
    d->ds->prompt_progress = 1;         /* its catch-ups are no prompt of the user's */
    s->dm = d;
    return MS_OK;
}

void ms_dm_sess_close(ms_dm_sess *d) {
    if (!d) return;
    ms_session_close(d->ds);
    free(d->marks);
    free(d->buf);
    free(d);
}

/* back to position pos or before (a mark; else from scratch) */
static void go_back(ms_dm_sess *d, const ms_engine *e, int64_t pos) {
    ms_session *ds = d->ds;
    int64_t j = d->n_marks - 1;
    while (j >= 0 && d->mpos[j] > pos) j--;
    if (ds->sticky != MS_OK || j < 0 || !ms_state_rewind(&ds->st, d->mpos[j], &e->dm->model)) {
        ms_session_reset(ds);
        d->n_marks = 0;
        return;
    }
    mark_io(&ds->st, &e->dm->model, d->marks + j * e->dm_mark_floats, 0);
    ds->has_logits = 0;
    ds->rb.n_rec = 0;
    d->n_marks = j;
}

/* the draft state fed h = tok[0..n_past) + pending; its logits are h's last */
static ms_status catch_up(ms_dm_sess *d, const ms_engine *e, const int32_t *tok, int64_t n_past, int32_t pending,
                          int64_t *fed) {
    ms_session *ds = d->ds;
    const int64_t L = n_past + 1;
    int64_t c = 0;
    const int64_t dn = ds->st.n_past;
    while (c < dn && c < L && ds->tokens[c] == (c < n_past ? tok[c] : pending)) c++;
    const int64_t keep = c < n_past ? c : n_past;       /* at least the pending id is fed */
    if (dn > keep || ds->sticky != MS_OK) go_back(d, e, keep);
    const int64_t from = ds->st.n_past, n = L - from;
    memcpy(d->buf, tok + from, (size_t)(n - 1) * sizeof *d->buf);
    d->buf[n - 1] = pending;
    *fed += n;
    d->n_marks = 0;                     /* a pass's marks are its drafted ids' */
    return ms_session_feed(ds, d->buf, n, NULL);
}

int64_t ms_dm_draft(ms_session *s, int32_t pending, int64_t want, int share, ms_draft_offer *o) {
    o->n = 0;
    ms_dm_sess *d = s->dm;
    ms_engine *e = s->e;
    if (!d || want <= 0) return 0;
    if (want > MS_MAX_DRAFT_IDS) want = MS_MAX_DRAFT_IDS;
    const double t0 = ms_now_s();
    int64_t fed = 0;
    ms_session *ds = d->ds;
    ms_status st = catch_up(d, e, s->tokens, s->st.n_past, pending, &fed);
    const int64_t V = e->dm->cfg.vocab_size;
    for (int64_t i = 0; st == MS_OK && i < want; i++) {
        const float *lg = ds->logits;
        const int32_t id = ms_argmax(lg, V);
        o->ids[i] = id;
        o->q[i] = ms_exp_d(ms_logprob(lg, V, id));
        o->n = i + 1;
        if (i + 1 == want || i + 1 > e->p.max_draft - 1 || !ms_drafter_model_more(e->draft, o->q, i + 1, share)) break;
        d->mpos[d->n_marks] = ds->st.n_past;
        mark_io(&ds->st, &e->dm->model, d->marks + d->n_marks * e->dm_mark_floats, 1);
        d->n_marks++;
        st = ms_session_feed(ds, &id, 1, NULL);
        fed++;
    }
    if (st != MS_OK) {
        /* the draft is only a guess: log it, start the draft state again next pass */
        ms_log(&e->log, MS_LOG_WARN, "draft model: %s (its state starts again)", ms_session_error(ds));
        ms_session_reset(ds);
        d->n_marks = 0;
    }
    e->stats.draft_model_tokens += fed;
    e->stats.draft_model_s += ms_now_s() - t0;
    return o->n;
}
