/* engine/engine.c - implements include/moestream.h: an engine's info and
 * counters, sessions, feeds and the decode step (opening and closing an
 * engine: engine/open.c).
 *
 * The engine is the only place that wires format + store + model + text +
 * sample together. An engine owns the checkpoint table, the store, the bound
 * model and the thread pool; a session owns one sequence's state and the
 * forward scratch. A pipeline's other stages are reached only through the
 * hooks engine/pipe.c registers (ms_engine_pipe_*, e->pipe). A session that failed mid-forward is unsound: its state may hold a
 * half-applied token, so every later feed returns MS_E_UNSOUND (sticky).
 * ms_sessions_decode is the decode step of every front end, for one session
 * (ms_session_decode) or several in one pass: plain (feed the pending token,
 * pick once) or speculative (a draft from engine/draft.c, with a draft
 * model's offer from engine/draft_model.c; one pass over every session's
 * [pending, draft], each segment with its rows and its rollback record; then
 * per session: pick per row while the draft holds, roll back to the last kept
 * position; one session alone may add a second branch, engine/draft_tree.c;
 * docs/ARCHITECTURE.md, docs/DETERMINISM.md).
 */
#include "moestream.h"

#include "base/clock.h"
#include "base/progress.h"
#include "base/err.h"
#include "base/log.h"
#include "base/pool.h"
#include "engine/engine_int.h"
#include "engine/prefix_cache.h"
#include "format/config.h"
#include "model/model.h"
#include "store/store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *ms_status_name(ms_status s) {
    switch (s) {
    case MS_OK: return "ok";
    case MS_E_USAGE: return "usage";
    case MS_E_MODEL: return "invalid model";
    case MS_E_IO: return "I/O error";
    case MS_E_NOMEM: return "out of memory";
    case MS_E_BUDGET: return "over budget";
    case MS_E_UNSOUND: return "unsound";
    case MS_E_INTERNAL: return "internal error";
    case MS_E_CANCELLED: return "cancelled";
    case MS_E_CONTEXT: return "context full";
    }
    return "unknown";
}

static int64_t peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
    fclose(f);
    return (int64_t)kb * 1024;
}

const char *ms_engine_error(const ms_engine *e) { return e ? e->error : ""; }

void ms_engine_info(const ms_engine *e, ms_model_info *info) {
    memset(info, 0, sizeof *info);
    info->n_vocab = e->cfg.vocab_size;
    info->n_layer = e->cfg.num_hidden_layers;
    info->n_embd = e->cfg.hidden_size;
    info->n_expert = e->cfg.num_experts;
    info->n_expert_used = e->cfg.num_experts_per_token;
    info->bos_id = e->cfg.bos_token_id;
    info->eos_id = e->cfg.eos_token_id;
    info->pad_id = e->cfg.pad_token_id;
    info->max_context = e->p.max_context;
    info->prefill_chunk = e->p.prefill_chunk;
    info->kernels = e->model.kern->name;
}

void ms_engine_stats(const ms_engine *e, ms_stats *st) {
    *st = e->stats;
    ms_store_stats ss;
    ms_store_get_stats(e->store, &ss);
    st->trunk_bytes_read = ss.trunk_bytes_read + ss.global_bytes_read;
    st->expert_bytes_read = ss.expert_bytes_read;
    st->reads_issued = ss.reads_issued;
    st->expert_requests = ss.expert_requests;
    st->expert_hits = ss.expert_hits;
    st->io_wait_s = 1e-9 * (double)ss.io_wait_ns;
    st->io_busy_s = 1e-9 * (double)ss.io_busy_ns;
    st->io_inflight_s = 1e-9 * (double)ss.io_depth_ns;
    st->scale255_groups = e->scale255;
    st->readahead_issued = ss.ra_issued;
    st->readahead_used = ss.ra_used;
    st->prefetch_issued = ss.prefetch_issued;
    st->prefetch_hits = ss.prefetch_hits;
    st->guess_issued = ss.guess_issued;
    st->guess_hits = ss.guess_hits;
    st->guess_cancelled = ss.guess_cancelled;
    st->peak_rss_bytes = peak_rss_bytes();
    st->verify_on = e->sums != NULL;
    st->pack_on = e->pack != NULL;
    st->packed_regions = ss.packed_regions;
    st->trunk_packed_read = ss.trunk_packed_read;
    st->trunk_unpacked_bytes = ss.trunk_unpacked_bytes;
    st->unpack_s = (double)ss.unpack_ns * 1e-9;
    st->pack_fallbacks = ss.pack_fallbacks;
    st->n_stages = e->n_stages;
    st->stage_trunk_bytes[0] = st->trunk_bytes_read;
    st->stage_expert_bytes[0] = st->expert_bytes_read;
    st->stage_peak_rss[0] = st->peak_rss_bytes;
    if (e->pipe_up) e->pipe->add_stats(e, st);
    st->verify_bytes = ss.verify_bytes;
    st->verify_retries = ss.verify_retries;
    st->verify_failures = ss.verify_failures;
    st->verify_s = 1e-9 * (double)ss.verify_ns;
    st->verify_sync_s = 1e-9 * (double)ss.verify_sync_ns;
    st->prompt_cache_bytes = ms_pcache_used(e->pcache);
    st->prompt_cache_cap = ms_pcache_cap(e->pcache);
    st->prompt_cache_entries = ms_pcache_count(e->pcache);
}

void ms_engine_stats_reset(ms_engine *e) {
    memset(&e->stats, 0, sizeof e->stats);
    e->scale255 = 0;
    ms_store_reset_stats(e->store);
    ms_engine_pipe_op(e, MS_PIPE_STATS_RESET, 0, 0, NULL, 0);
}

ms_status ms_engine_pipe_op(ms_engine *e, int op, int64_t a0, int64_t a1, char *msg, size_t len) {
    return e->pipe_up ? e->pipe->op(e, op, a0, a1, msg, len) : MS_OK;
}

ms_status ms_engine_pipe_layer_state(ms_engine *e, int get, int64_t id, int il, int64_t n_past, float *buf,
                                     int64_t n, char *msg, size_t len) {
    return e->pipe_up ? e->pipe->layer_state(e, get, id, il, n_past, buf, n, msg, len) : MS_OK;
}

ms_status ms_session_open(ms_engine *e, ms_session **out) {
    *out = NULL;
    ms_err err;
    ms_err_clear(&err);
    ms_session *s = calloc(1, sizeof *s);
    if (!s) return MS_E_NOMEM;
    s->e = e;
    ms_status st;
    if ((st = ms_state_init(&s->st, &e->model, e->p.max_context, e->state_back, &err)) != MS_OK) goto fail;
    s->logits = malloc((size_t)e->cfg.vocab_size * sizeof(float));
    s->tokens = malloc((size_t)e->p.max_context * sizeof(int32_t));
    if (!s->logits || !s->tokens) { st = ms_err_set(&err, MS_E_NOMEM, "out of memory"); goto fail; }
    if (e->p.max_draft > 0) {
        s->max_draft = e->p.max_draft;
        if ((st = ms_rollback_init(&s->rb, &e->model, s->max_draft + 1, &err)) != MS_OK) goto fail;
        s->ver_logits = malloc((size_t)((s->max_draft + 1) * e->cfg.vocab_size) * sizeof(float));
        s->ver_ids = malloc((size_t)(s->max_draft + 1) * sizeof(int32_t));
        s->draft_sid = e->draft ? ms_drafter_sid(e->draft) : 0;
        s->draft_end = -1;
        if (!s->ver_logits || !s->ver_ids) { st = ms_err_set(&err, MS_E_NOMEM, "out of memory"); goto fail; }
        if (e->dm && (st = ms_dm_sess_open(s, &err)) != MS_OK) goto fail;
    }
    if (e->pipe_up) {
        /* the other stages keep their layers' state of it under this name */
        s->st.pipe_id = ++e->next_pipe_id;
        char msg[512];
        if ((st = ms_engine_pipe_op(e, MS_PIPE_OPEN, s->st.pipe_id, 0, msg, sizeof msg)) != MS_OK) {
            ms_err_set(&err, st, "%s", msg);
            ms_engine_pipe_op(e, MS_PIPE_CLOSE, s->st.pipe_id, 0, NULL, 0);     /* in the stages that opened it */
            goto fail;
        }
    }
    *out = s;
    return MS_OK;
fail:
    snprintf(e->error, sizeof e->error, "%s", err.msg);
    if (s->st.kda_S) ms_state_free(&s->st, &e->model);
    if (s->rb.kda) ms_rollback_free(&s->rb, &e->model);
    ms_dm_sess_close(s->dm);
    free(s->ver_logits);
    free(s->ver_ids);
    free(s->logits);
    free(s->tokens);
    free(s);
    return st;
}

void ms_session_close(ms_session *s) {
    if (!s) return;
    ms_engine_pipe_op(s->e, MS_PIPE_CLOSE, s->st.pipe_id, 0, NULL, 0);
    ms_state_free(&s->st, &s->e->model);
    if (s->rb.kda) ms_rollback_free(&s->rb, &s->e->model);
    ms_dm_sess_close(s->dm);
    free(s->ver_logits);
    free(s->ver_ids);
    free(s->logits);
    free(s->tokens);
    free(s);
}

const char *ms_session_error(const ms_session *s) { return s ? s->error : ""; }

/* Index of the first non-finite logit of row [V], or -1. */
int64_t ms_first_nonfinite(const float *row, int64_t V) {
    for (int64_t i = 0; i < V; i++)
        if (!isfinite(row[i])) return i;
    return -1;
}

/* The session's state may hold a half-applied chunk (or logits nobody may
 * use): nothing after it is sound, and every later call says so. */
static ms_status make_unsound(ms_session *s, const char *msg) {
    snprintf(s->error, sizeof s->error, "%s", msg);
    s->sticky = MS_E_UNSOUND;
    s->has_logits = 0;
    s->rb.n_rec = 0;
    return MS_E_UNSOUND;
}

_Static_assert(MS_TOP_MAX == MS_LSE_TOP_MAX, "the public and the fold's top-k bounds");

/* Where ms_session_score puts a feed's scores. */
typedef struct score_out {
    double *lp;                 /* [n] */
    int k;                      /* top entries per row */
    int32_t *top_ids;           /* [n * k] */
    double *top_lp;             /* [n * k] */
} score_out;

/* The feed behind ms_session_feed and ms_session_decode. record: keep what
 * ms_session_rollback needs (one chunk). count: add the feed to the prefill /
 * decode counters (ms_session_decode counts its own). check: reject non-finite
 * final logits (a verify pass checks each row it uses instead). score: also
 * write each fed token's log-probability (ms_session_score). *dt: seconds. */
/* Whether s may read ids[0, n) (the why into msg): no tokens or a bad id
 * (MS_E_USAGE), a full context (MS_E_CONTEXT). */
static ms_status check_tokens(const ms_session *s, const int32_t *ids, int64_t n, char *msg, size_t len) {
    const int64_t V = s->e->cfg.vocab_size;
    if (!ids || n < 1) {
        snprintf(msg, len, "feed: no tokens");
        return MS_E_USAGE;
    }
    if (s->st.n_past + n > s->st.max_ctx) {
        snprintf(msg, len, "context full: %lld + %lld tokens > max_context %lld",
                 (long long)s->st.n_past, (long long)n, (long long)s->st.max_ctx);
        return MS_E_CONTEXT;
    }
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) {
            snprintf(msg, len, "token id %d at position %lld is out of range [0, %lld)", ids[i], (long long)i,
                     (long long)V);
            return MS_E_USAGE;
        }
    return MS_OK;
}

/* What every forward of the engine runs with. */
static ms_fwd_ctx fwd_ctx(ms_engine *e) {
    const ms_next_stage next = { e->pipe_up ? ms_pipe_pass : NULL, e->pipe_up ? e->pipe_groups : 1,
                                 e->p.stage_groups > 0 ? 1 : MS_PIPE_GROUP_TOKENS };
    return (ms_fwd_ctx){ .m = &e->model, .store = e->store, .pool = e->pool,
                         .predict = !e->p.no_predict_experts, .next = next, .pass_user = e };
}

int64_t ms_engine_weight_bytes_read(const ms_engine *e) {
    ms_store_stats ss;
    ms_store_get_stats(e->store, &ss);
    return ss.trunk_bytes_read + ss.global_bytes_read + ss.expert_bytes_read;
}

static ms_status feed(ms_session *s, const int32_t *ids, int64_t n, float *all_logits,
                      const score_out *score, int record, int count, int check, double *dt_out) {
    if (s->sticky != MS_OK) return s->sticky;
    const ms_status usable = check_tokens(s, ids, n, s->error, sizeof s->error);
    if (usable != MS_OK) return usable;
    ms_engine *e = s->e;
    const int64_t V = e->cfg.vocab_size;
    if (record && (s->max_draft == 0 || n > s->rb.max_T || n > e->p.prefill_chunk)) {
        snprintf(s->error, sizeof s->error, "recorded feed of %lld tokens: the session records at most %lld",
                 (long long)n, (long long)(s->max_draft ? s->rb.max_T : 0));
        return MS_E_USAGE;
    }
    s->rb.n_rec = 0;                        /* any feed ends the previous record */
    if (score && s->has_logits) {
        score->lp[0] = ms_logprob_top(s->logits, V, ids[0], score->k, score->top_ids, score->top_lp);
    } else if (score) {
        score->lp[0] = NAN;
        for (int j = 0; j < score->k; j++) { score->top_ids[j] = -1; score->top_lp[j] = NAN; }
    }
    ms_err err;
    ms_err_clear(&err);
    ms_fwd_ctx ctx = fwd_ctx(e);
    double t0 = ms_now_s();
    ms_status st = MS_OK;
    const int64_t chunk = e->p.prefill_chunk;
    ms_progress_step ps;                    /* a prompt (not a decode step's verify pass) */
    const int prog = n > 1 && !record && !s->prompt_progress && ms_progress_on();
    const int64_t b0 = prog ? ms_engine_weight_bytes_read(e) : 0;
    if (prog) ms_progress_begin(&ps, "prompt", n, (n + chunk - 1) / chunk);
    for (int64_t i = 0; i < n && st == MS_OK; i += chunk) {
        int64_t T = n - i < chunk ? n - i : chunk;
        if (i > 0 && prog) ms_progress_report(&ps, i, i / chunk, ms_engine_weight_bytes_read(e) - b0);
        memcpy(s->tokens + s->st.n_past, ids + i, (size_t)T * sizeof *ids);
        const ms_fseg seg = { &s->st, T, all_logits ? NULL : s->logits, all_logits ? all_logits + i * V : NULL,
                              record ? &s->rb : NULL };
        if (score) {
            ctx.score_target = ids + i + 1;
            ctx.score_n = n - i - 1 < T ? n - i - 1 : T;
            ctx.score_lp = score->lp + i + 1;
            ctx.score_k = score->k;
            ctx.score_top_ids = score->top_ids ? score->top_ids + (i + 1) * score->k : NULL;
            ctx.score_top_lp = score->top_lp ? score->top_lp + (i + 1) * score->k : NULL;
        }
        /* a pipeline: a chunk before the last whose output nobody reads goes on
           through the stages while this one starts the next */
        ctx.pass_async = e->pipe_up && i + T < n && !all_logits && !score && !record;
        st = ms_forward_batch(&ctx, e->fwd, &seg, 1, ids + i, &err);
        if (st == MS_OK && all_logits)
            memcpy(s->logits, all_logits + (i + T - 1) * V, (size_t)V * sizeof(float));
    }
    if (e->pipe_up) {
        /* chunks still out after a failure (the last chunk collects them otherwise) */
        char msg[512];
        const ms_status ds = e->pipe->drain(e, msg, sizeof msg);
        if (ds != MS_OK && st == MS_OK) st = ms_err_set(&err, ds, "%s", msg);
    }
    double dt = ms_now_s() - t0;
    if (dt_out) *dt_out = dt;
    if (st == MS_OK && prog) ms_progress_report(&ps, n, (n + chunk - 1) / chunk, ms_engine_weight_bytes_read(e) - b0);
    e->scale255 += ctx.scale255;
    if (count) {
        if (n == 1) { e->stats.n_tokens_decode++; e->stats.decode_s += dt; }
        else { e->stats.n_tokens_prefill += n; e->stats.prefill_s += dt; }
    }
    int64_t bad;
    if (st == MS_OK && check && (bad = ms_first_nonfinite(s->logits, V)) >= 0)
        st = ms_err_set(&err, MS_E_UNSOUND, "non-finite logit %lld after position %lld",
                        (long long)bad, (long long)s->st.n_past);
    for (int64_t i = 1; st == MS_OK && score && i < n; i++)
        if (!isfinite(score->lp[i]))
            st = ms_err_set(&err, MS_E_UNSOUND, "non-finite log-probability at position %lld",
                            (long long)(s->st.n_past - n + i));
    if (st != MS_OK) return make_unsound(s, err.msg);
    s->has_logits = 1;
    return MS_OK;
}

ms_status ms_session_score(ms_session *s, const int32_t *ids, int64_t n, double *logprob, int top_k,
                           int32_t *top_ids, double *top_logprob) {
    if (!logprob || top_k < 0 || top_k > MS_TOP_MAX || (top_k > 0 && (!top_ids || !top_logprob))) {
        snprintf(s->error, sizeof s->error, "score: no output array, or top_k %d outside [0, %d]", top_k, MS_TOP_MAX);
        return MS_E_USAGE;
    }
    const score_out so = { logprob, top_k, top_ids, top_logprob };
    return feed(s, ids, n, NULL, &so, 0, 1, 1, NULL);
}

double ms_logprob_top(const float *logits, int64_t n, int32_t id, int k, int32_t *ids, double *logprobs) {
    ms_lse l;
    ms_lse_init(&l, k);
    ms_lse_fold(&l, logits, n, 0);
    if (l.k > 0) ms_lse_top(&l, l.k, ids, logprobs);
    return ms_lse_logprob(&l, logits[id]);
}

double ms_logprob(const float *logits, int64_t n, int32_t id) {
    return ms_logprob_top(logits, n, id, 0, NULL, NULL);
}

ms_status ms_session_feed(ms_session *s, const int32_t *ids, int64_t n, float *all_logits) {
    return feed(s, ids, n, all_logits, NULL, 0, 1, 1, NULL);
}

/* Why ss[i] cannot join ss[0..i) in one call (NULL: it can): it must be a
 * session of ss[0]'s engine, and not one given before. */
static const char *not_distinct(ms_session *const *ss, int i) {
    if (!ss[i] || ss[i]->e != ss[0]->e) return "not a session of the first session's engine";
    for (int j = 0; j < i; j++)
        if (ss[j] == ss[i]) return "given twice";
    return NULL;
}

/* ms_sessions_feed's arguments (the message in ss[0]'s error); *all_one: every
 * n[i] is 1; *total: the tokens. */
static ms_status batch_check(ms_session *const *ss, int k, const int32_t *const *ids, const int64_t *n,
                             int *all_one, int64_t *total) {
    ms_session *s0 = ss[0];
    *all_one = 1;
    *total = 0;
    for (int i = 0; i < k; i++) {
        const ms_session *s = ss[i];
        const char *why = not_distinct(ss, i);
        if (why) {
            snprintf(s0->error, sizeof s0->error, "feed: session %d: %s", i, why);
            return MS_E_USAGE;
        }
        char msg[300];
        ms_status bad = s->sticky != MS_OK ? s->sticky : check_tokens(s, ids[i], n[i], msg, sizeof msg);
        if (bad != MS_OK) {
            snprintf(s0->error, sizeof s0->error, "session %d: %.400s", i, s->sticky != MS_OK ? s->error : msg);
            return bad;
        }
        *all_one &= n[i] == 1;
        *total += n[i];
    }
    return MS_OK;
}

ms_status ms_sessions_feed(ms_session *const *ss, int k, const int32_t *const *ids, const int64_t *n) {
    if (!ss || k < 1 || !ss[0] || !ids || !n) return MS_E_USAGE;
    ms_session *s0 = ss[0];
    ms_engine *e = s0->e;
    const int64_t V = e->cfg.vocab_size, chunk = e->p.prefill_chunk;
    int all_one;
    int64_t total;
    const ms_status bad = batch_check(ss, k, ids, n, &all_one, &total);
    if (bad != MS_OK) {
        /* every session of the call tells why (nothing was fed) */
        for (int i = 1; i < k; i++)
            if (ss[i] && ss[i]->e == e && ss[i] != s0) snprintf(ss[i]->error, sizeof ss[i]->error, "%s", s0->error);
        return bad;
    }
    int32_t *pid = e->batch_ids;
    ms_fseg *seg = e->batch_seg;
    ms_err err;
    ms_err_clear(&err);
    ms_fwd_ctx ctx = fwd_ctx(e);
    double t0 = ms_now_s();
    ms_status st = MS_OK;
    /* passes of up to `chunk` tokens (so at most `chunk` segments), filled in
     * session order: sessions before i0 are done, i0 has read `off` of its
     * tokens, the ones after it none */
    for (int i0 = 0, off = 0; i0 < k && st == MS_OK;) {
        const int first = i0;
        const int64_t first_off = off;
        int ns = 0;
        int64_t T = 0;
        for (int i = first; i < k && T < chunk; i++) {
            ms_session *s = ss[i];
            const int64_t from = i == first ? first_off : 0;
            const int64_t take = n[i] - from < chunk - T ? n[i] - from : chunk - T;
            memcpy(pid + T, ids[i] + from, (size_t)take * sizeof *pid);
            memcpy(s->tokens + s->st.n_past, ids[i] + from, (size_t)take * sizeof *pid);
            s->rb.n_rec = 0;                /* any feed ends the previous record */
            seg[ns++] = (ms_fseg){ &s->st, take, s->logits, NULL, NULL };
            T += take;
            /* the last session of the pass sets where the next one starts */
            if (from + take < n[i]) { i0 = i; off = (int)(from + take); }
            else { i0 = i + 1; off = 0; }
        }
        st = ms_forward_batch(&ctx, e->fwd, seg, ns, pid, &err);
    }
    const double dt = ms_now_s() - t0;
    e->scale255 += ctx.scale255;
    if (all_one) { e->stats.n_tokens_decode += k; e->stats.decode_s += dt; }
    else { e->stats.n_tokens_prefill += total; e->stats.prefill_s += dt; }
    if (st != MS_OK) {
        for (int i = 0; i < k; i++) make_unsound(ss[i], err.msg);
        return MS_E_UNSOUND;
    }
    /* a session whose logits are not finite is unsound (its logits NULL);
       the others are fed */
    ms_status ret = MS_OK;
    for (int i = 0; i < k; i++) {
        int64_t bad = ms_first_nonfinite(ss[i]->logits, V);
        if (bad < 0) { ss[i]->has_logits = 1; continue; }
        char msg[128];
        snprintf(msg, sizeof msg, "non-finite logit %lld after position %lld", (long long)bad,
                 (long long)ss[i]->st.n_past);
        ret = make_unsound(ss[i], msg);
    }
    return ret;
}

ms_status ms_session_feed_rec(ms_session *s, const int32_t *ids, int64_t n, float *all_logits,
                              int record) {
    return feed(s, ids, n, all_logits, NULL, record, 1, 1, NULL);
}

ms_status ms_session_rollback(ms_session *s, int64_t n_keep, const float *logits) {
    if (s->sticky != MS_OK) return s->sticky;
    if (s->rb.n_rec == 0 || n_keep < 1 || n_keep > s->rb.n_rec) {
        snprintf(s->error, sizeof s->error, "rollback to %lld tokens of a recorded feed of %lld",
                 (long long)n_keep, (long long)s->rb.n_rec);
        return MS_E_USAGE;
    }
    char msg[512];
    const ms_status ps = ms_engine_pipe_op(s->e, MS_PIPE_ROLLBACK, s->st.pipe_id, n_keep, msg, sizeof msg);
    if (ps != MS_OK) return make_unsound(s, msg);
    ms_state_rollback(&s->st, &s->rb, &s->e->model, s->e->pool, n_keep);
    if (logits != s->logits)
        memcpy(s->logits, logits, (size_t)s->e->cfg.vocab_size * sizeof(float));
    s->has_logits = 1;
    return MS_OK;
}

/* Weight bytes read so far: trunk (with the pinned ones) and experts. */
static void bytes_read(const ms_engine *e, int64_t *trunk, int64_t *experts) {
    ms_store_stats ss;
    ms_store_get_stats(e->store, &ss);
    *trunk = ss.trunk_bytes_read + ss.global_bytes_read;
    *experts = ss.expert_bytes_read;
}

/* Whether ms_sessions_decode may start (nothing is done otherwise): the
 * sessions distinct, of one engine and sound, each with logits to pick from
 * (pending -1) or room for its pending id. The why goes to every sound
 * session's error (k = 1: the message alone, as ms_session_feed words it). */
static ms_status decode_check(ms_session *const *ss, int k, const int32_t *pending) {
    ms_session *s0 = ss[0];
    for (int i = 0; i < k; i++) {
        ms_session *s = ss[i];
        char msg[300] = "";
        ms_status bad = MS_OK;
        const char *why = not_distinct(ss, i);
        if (why) {
            snprintf(msg, sizeof msg, "decode: %s", why);
            bad = MS_E_USAGE;
        } else if (s->sticky != MS_OK) {
            bad = s->sticky;
            snprintf(msg, sizeof msg, "%.290s", s->error);
        } else if (pending[i] < 0 && !s->has_logits) {
            bad = MS_E_USAGE;
            snprintf(msg, sizeof msg, "decode: no logits yet (feed a prompt first)");
        } else if (pending[i] >= 0) {
            bad = check_tokens(s, &pending[i], 1, msg, sizeof msg);
        }
        if (bad == MS_OK) continue;
        if (k == 1) {
            if (s->sticky == MS_OK) snprintf(s->error, sizeof s->error, "%s", msg);
            return bad;
        }
        char all[sizeof s0->error];
        snprintf(all, sizeof all, "session %d: %.400s", i, msg);
        for (int j = 0; j < k; j++)
            if (ss[j] && ss[j]->e == s0->e && ss[j]->sticky == MS_OK)
                snprintf(ss[j]->error, sizeof ss[j]->error, "%s", all);
        return bad;
    }
    return MS_OK;
}

/* Session s's draft for a step that feeds `pending` (s->ver_ids[1..ver_m],
 * its source, the draft model's offer): at most n_draft ids, the session's
 * max_draft, what its context leaves and `cap`; `share` sequences are
 * verified in the pass (the drafter weighs its share of the pass). */
static void decode_draft(ms_session *s, int32_t pending, int n_draft, int64_t cap, int share) {
    ms_engine *e = s->e;
    int64_t want = n_draft < s->max_draft ? n_draft : s->max_draft;
    if (want > s->st.max_ctx - s->st.n_past - 1) want = s->st.max_ctx - s->st.n_past - 1;
    if (want > cap) want = cap;
    s->ver_m = 0;
    s->ver_src = MS_DRAFT_CONTEXT;
    s->ver_offer.n = 0;
    if (want <= 0) return;
    if (s->dm) ms_dm_draft(s, pending, want, share, &s->ver_offer);
    s->ver_m = ms_drafter_draft(e->draft, s->draft_sid, s->tokens, s->st.n_past, pending, want, share, &s->ver_offer,
                                s->ver_ids + 1, &s->ver_src, s->ver_p);
}

/* The passes of a decode step: every feeding session's [pending, draft], whole
 * sessions to a pass of up to prefill_chunk tokens, in session order; a
 * session that drafted gets every row's logits (s->ver_logits) and a record,
 * one that did not its logits. *passes, *fed: the passes made and the
 * tokens they fed. */
static ms_status decode_passes(ms_engine *e, ms_session *const *ss, int k, const int32_t *pending, int64_t *passes,
                               int64_t *fed, ms_err *err) {
    const int64_t chunk = e->p.prefill_chunk;
    int32_t *pid = e->batch_ids;
    ms_fseg *seg = e->batch_seg;
    ms_fwd_ctx ctx = fwd_ctx(e);
    ms_status st = MS_OK;
    for (int i = 0; i < k && st == MS_OK;) {
        int ns = 0;
        int64_t T = 0;
        for (; i < k; i++) {
            ms_session *s = ss[i];
            if (pending[i] < 0) continue;
            const int64_t m = s->ver_m, n = m + 1;    /* n <= chunk: decode_draft's cap */
            if (T + n > chunk) break;
            pid[T] = pending[i];
            if (m > 0) memcpy(pid + T + 1, s->ver_ids + 1, (size_t)m * sizeof *pid);
            memcpy(s->tokens + s->st.n_past, pid + T, (size_t)n * sizeof *pid);
            s->rb.n_rec = 0;                /* any feed ends the previous record */
            seg[ns++] = (ms_fseg){ &s->st, n, m ? NULL : s->logits, m ? s->ver_logits : NULL, m ? &s->rb : NULL };
            T += n;
        }
        if (ns == 0) break;
        st = ms_forward_batch(&ctx, e->fwd, seg, ns, pid, err);
        (*passes)++;
        *fed += T;
    }
    e->scale255 += ctx.scale255;
    return st;
}

/* After the passes: session s's rows picked in order while its draft holds
 * (each checked as a plain loop's feed would check it), then rolled back to
 * just after the last position kept; its counters, the engine's and the
 * drafter's (acceptance, history). The ids picked into out[0..*n_out). */
ms_status ms_decode_verify(ms_session *s, ms_pick_fn pick, void *user, int32_t *out, int64_t *n_out, int pre,
                           int pre_stop) {
    ms_engine *e = s->e;
    const int64_t V = e->cfg.vocab_size, m = s->ver_m, n0 = s->st.n_past - (m + 1);
    if (m > 0) memcpy(s->logits, s->ver_logits + m * V, (size_t)V * sizeof(float));
    s->has_logits = 1;
    int stop = 0;
    int64_t i = 0;
    for (;; i++) {
        const float *row = m > 0 ? s->ver_logits + i * V : s->logits;
        const int64_t bad = ms_first_nonfinite(row, V);
        if (bad >= 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "non-finite logit %lld after position %lld", (long long)bad,
                     (long long)(n0 + i + 1));
            *n_out = i;
            return make_unsound(s, msg);
        }
        if (i >= pre) out[i] = pick(user, row, s->tokens, n0 + 1 + i, &stop);
        else stop = pre_stop;
        if (stop || i == m || out[i] != s->ver_ids[i + 1]) break;
    }
    const int64_t keep = i + 1;
    e->stats.n_tokens_decode += keep;
    *n_out = keep;
    if (keep < m + 1) {
        const ms_status st = ms_session_rollback(s, keep, s->ver_logits + i * V);
        if (st != MS_OK) return st;
    } else {
        s->rb.n_rec = 0;
    }
    const int src = s->ver_src;
    e->stats.spec_drafted += m;
    e->stats.spec_accepted += i;
    s->dec.passes++;
    s->dec.tokens += keep;
    if (m > 0) {
        e->stats.spec_src_drafted[src] += m;
        e->stats.spec_src_accepted[src] += i;
        s->dec.drafted[src] += m;
        s->dec.accepted[src] += i;
    }
    if (!e->draft) return MS_OK;
    ms_drafter_verified(e->draft, src, m, i);
    if (src == MS_DRAFT_MODEL && m > 0) {
        double q = 0;                       /* the ids verified: those kept and the first rejected */
        for (int64_t j = 0; j < m && j <= i; j++) q += s->ver_offer.q[j];
        ms_drafter_model_verified(e->draft, q);
    }
    ms_drafter_remember(e->draft, s->draft_sid, &s->draft_end, s->tokens, n0, s->st.n_past);
    return MS_OK;
}

ms_status ms_sessions_decode(ms_session *const *ss, int k, const int32_t *pending, const int *n_draft,
                             ms_pick_fn pick, void *const *user, int32_t *const *out, int64_t *n_out) {
    if (!ss || k < 1 || !ss[0] || !pending || !n_draft || !pick || !user || !out || !n_out) return MS_E_USAGE;
    for (int i = 0; i < k; i++) n_out[i] = 0;
    ms_status st = decode_check(ss, k, pending);
    if (st != MS_OK) return st;
    ms_engine *e = ss[0]->e;
    /* the sessions that only pick (the first token after a prompt) */
    int n_feed = 0;
    for (int i = 0; i < k; i++) {
        ms_session *s = ss[i];
        if (pending[i] >= 0) { n_feed++; continue; }
        int stop = 0;
        out[i][0] = pick(user[i], s->logits, s->tokens, s->st.n_past, &stop);
        n_out[i] = 1;
    }
    if (n_feed == 0) return MS_OK;
    /* the drafts, cut so that every feeding session's fits one pass */
    const int64_t cap = e->p.prefill_chunk / n_feed - 1;
    for (int i = 0; i < k; i++)
        if (pending[i] >= 0) decode_draft(ss[i], pending[i], n_draft[i], cap, n_feed);
    /* one session alone may add a second branch (draft_tree): two segments */
    const int tree = k == 1 && e->tree_b && ms_tree_branch(ss[0], pending[0], n_draft[0]);
    ms_session *const two[2] = { ss[0], e->tree_b };
    const int32_t pend2[2] = { pending[0], pending[0] };
    /* one pass (per chunk) for all, then each session's picks */
    int64_t t0 = 0, x0 = 0, passes = 0, fed = 0;
    if (e->draft) bytes_read(e, &t0, &x0);
    ms_err err;
    ms_err_clear(&err);
    const double ta = ms_now_s();
    st = decode_passes(e, tree ? two : ss, tree ? 2 : k, tree ? pend2 : pending, &passes, &fed, &err);
    fed -= tree;                            /* the pending token again: no expert bytes more */
    e->stats.decode_s += ms_now_s() - ta;
    if (st != MS_OK) {
        for (int i = 0; i < k; i++)
            if (pending[i] >= 0) make_unsound(ss[i], err.msg);
        return MS_E_UNSOUND;
    }
    e->stats.spec_passes += passes;
    if (e->draft) {
        int64_t t1, x1;
        bytes_read(e, &t1, &x1);
        ms_drafter_measured(e->draft, passes, t1 - t0, x1 - x0, fed);
    }
    ms_status ret = MS_OK;
    for (int i = 0; i < k; i++) {
        if (pending[i] < 0) continue;
        const ms_status vs = tree ? ms_tree_verify(ss[i], pick, user[i], out[i], &n_out[i])
                                  : ms_decode_verify(ss[i], pick, user[i], out[i], &n_out[i], 0, 0);
        if (vs != MS_OK && ret == MS_OK) ret = vs;
    }
    return ret;
}

ms_status ms_session_decode(ms_session *s, int32_t pending, int n_draft, ms_pick_fn pick,
                            void *user, int32_t *out, int64_t *n_out) {
    *n_out = 0;
    if (!s) return MS_E_USAGE;
    return ms_sessions_decode(&s, 1, &pending, &n_draft, pick, &user, &out, n_out);
}

void ms_session_decode_counts(const ms_session *s, ms_decode_counts *out) { *out = s->dec; }

const float *ms_session_logits(const ms_session *s) { return s->has_logits ? s->logits : NULL; }

int64_t ms_session_n_past(const ms_session *s) { return s->st.n_past; }

const int32_t *ms_session_tokens(const ms_session *s, int64_t *n) {
    *n = s->st.n_past;
    return s->tokens;
}

ms_status ms_session_copy(ms_session *dst, const ms_session *src) {
    if (!dst || !src || dst == src || dst->e != src->e) {
        if (dst) snprintf(dst->error, sizeof dst->error, "copy: not two sessions of one engine");
        return MS_E_USAGE;
    }
    ms_engine *e = src->e;
    char msg[512];
    const ms_status ps = ms_engine_pipe_op(e, MS_PIPE_COPY, dst->st.pipe_id, src->st.pipe_id, msg, sizeof msg);
    if (ps != MS_OK) {
        make_unsound(dst, msg);
        return ps;
    }
    ms_state_copy(&dst->st, &src->st, &e->model);
    memcpy(dst->tokens, src->tokens, (size_t)src->st.n_past * sizeof *dst->tokens);
    memcpy(dst->logits, src->logits, (size_t)e->cfg.vocab_size * sizeof *dst->logits);
    dst->has_logits = src->has_logits;
    dst->rb.n_rec = 0;
    dst->sticky = src->sticky;
    snprintf(dst->error, sizeof dst->error, "%s", src->error);
    return MS_OK;
}

void ms_session_reset(ms_session *s) {
    char msg[512];
    const ms_status ps = ms_engine_pipe_op(s->e, MS_PIPE_RESET, s->st.pipe_id, 0, msg, sizeof msg);
    ms_state_reset(&s->st, &s->e->model);
    s->rb.n_rec = 0;
    s->has_logits = 0;
    s->sticky = MS_OK;
    s->error[0] = '\0';
    if (ps != MS_OK) make_unsound(s, msg);
}

int32_t ms_argmax(const float *logits, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
}
