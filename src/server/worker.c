/* server/worker.c - the engine worker: slots, session reuse, and the
 * generation loop (the queue it takes jobs from is queue.c's).
 *
 * Owns: the slots (--parallel N sessions, each with the job it serves) and
 *   every call that computes on the engine (invariant 1 of srv.h). HTTP
 *   threads put jobs in the queue and wait; this thread takes them into free
 *   slots (a job with n choices into n slots) and steps all slots together.
 *
 * Fairness: jobs are taken in queue.c's fair order (the client served
 *   longest ago first).
 *
 * Session reuse: a slot's session holds the ids fed so far, S. A job's input
 *   is P = prompt ids + forced output ids. It goes to the free slot whose S
 *   is the longest prefix of P (else the least recently used); the slot
 *   starts from S or from the longest prefix of P the prompt cache holds,
 *   whichever is longer (ms_session_reuse), feeds only the rest, and reports
 *   what it skipped as cached. Prompt pieces stop at the cache's marks for a
 *   snapshot; slots reading prompts with a long shared prefix read it once
 *   (the later ones wait, then restore it: prompt_cut, waits). Because the engine gives identical
 *   bits however a sequence is split into feeds, a reused answer equals a
 *   fresh one (t_server tests that). The token the generation stops on (the
 *   stop token, the max_tokens-th token, the one that completes a stop
 *   string) is not fed: a follow-up request re-renders the answer, and the
 *   closing markup follows from there. A conversation continues from the
 *   kept state when the client sends back what the model produced and that
 *   text re-encodes to the same ids (see docs/SERVER.md).
 *
 * Steps (step()): one ms_sessions_feed call per step reads every decoding
 *   slot's last token and a prompt piece, one pass over the weights for all;
 *   then each decoding slot samples (slot_pick). With --speculate, a step in
 *   which every slot decodes is one ms_sessions_decode call instead: each
 *   slot's pending token and draft in one pass, each slot's picks and
 *   rollback its own (spec_step). Cancellation is checked between steps.
 *   Each session gets the bits it would get alone, so every answer is the one
 *   --parallel 1 gives (t_parallel).
 *
 * Streaming text (gen.c): chat replies are re-parsed (ms_chat_parse_reply) after
 *   every token; reasoning and content only grow, so the bytes past what was
 *   sent are the delta. Content is held back by (longest stop string - 1)
 *   bytes and never cut inside a UTF-8 character (srv_utf8_ready), so the
 *   concatenated deltas equal the non-streamed text. A tool call is sent
 *   whole once a later call starts or the reply ends.
 */
#include "server/srv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int choices_of(const srv_job *j) { return j->n_choices > 1 ? j->n_choices : 1; }

/* The decode picker: sample, then the stop rules in the order of the
 * one-token loop (stop id, not streamed; stop string; max_tokens). */
typedef struct srv_pick {
    srv *s;
    srv_job *j;
    srv_gen *g;
    ms_sampler *smp;
    srv_tcall *tc;              /* tool calls constrained (tc->t set), else unused */
    srv_hcon *hc;               /* a gpt-oss reply constrained (hc->h set), else unused */
    const char *finish;
    int oom;
} srv_pick;

static int32_t srv_picker(void *user, const float *logits, const int32_t *hist, int64_t n_hist, int *stop) {
    srv_pick *p = user;
    int32_t id = -1;
    const float *lg = p->tc->t ? srv_tcall_logits(p->tc, logits, &id)
                    : p->hc->h ? srv_hcon_logits(p->hc, logits, &id) : logits;
    if (id < 0) id = ms_sampler_next(p->smp, lg, hist, n_hist);     /* else forced markup: no draw */
    *stop = 1;
    if (p->tc->t && srv_tcall_observe(p->tc, id) != 0) { p->oom = 1; return id; }
    if (p->hc->h && srv_hcon_observe(p->hc, id) != 0) { p->oom = 1; return id; }
    if (srv_gen_push(p->g, id) != 0) { p->oom = 1; return id; }
    if (p->j->logprobs >= 0) {
        srv_lp *e = srv_gen_lp_next(p->g);
        if (!e) { p->oom = 1; return id; }
        e->id = id;
        const int64_t V = p->s->info.n_vocab;
        e->lp = ms_logprob_top(logits, V, id, p->j->logprobs, e->top_id, e->top_lp);    /* one pass */
        e->n_top = p->j->logprobs < V ? p->j->logprobs : (int)V;
        p->g->lp_pending = p->j->kind == SRV_CHAT;
    }
    p->g->n_sampled++;
    srv_metrics_token(p->j->t_submit, &p->g->t_last);
    if (!p->j->ignore_eos && srv_is_stop_id(p->s, id)) {
        if (p->j->logprobs >= 0) p->g->n_lp--;      /* like the text: without the stop token */
        p->g->lp_pending = 0;
        p->finish = "stop";
        return id;
    }
    srv_gen_on_token(p->s, p->j, p->g, id);
    if (p->g->stopped) p->finish = "stop";
    /* max_tokens bounds completion_tokens, which counts the forced tool-call markup too */
    else if (p->g->n >= p->j->max_tokens) p->finish = "length";
    else *stop = 0;
    return id;
}

static void reopen_session(srv *s, ms_session **ses) {
    ms_session_close(*ses);
    *ses = NULL;
    if (ms_session_open(s->e, ses) != MS_OK) {
        *ses = NULL;
        srv_log(s, 1, "cannot reopen the session: %s", ms_engine_error(s->e));
    }
}

/* ---- slots: the jobs the worker steps together ---------------------------------- */

/* One job in one of the worker's sessions, from its start to its response. */
typedef struct slot {
    ms_session *ses;            /* kept between jobs (conversation reuse) */
    uint64_t last_used;         /* when its last job ended (the least recently used is reused first) */
    srv_job *j;                 /* NULL: free */
    int choice;                 /* which of j's choices (sampled with seed + choice) */
    double t0;
    srv_result res;
    srv_gen g;
    ms_sampler *smp;
    ms_grammar *grammar;        /* response_format json_object / json_schema, else NULL */
    srv_tcall tc;               /* tool calls' constraint (toolcall.c) */
    srv_hcon hc;                /* gpt-oss: response_format / forced call (harmony.c) */
    int32_t *full;              /* prompt + forced output */
    int64_t n_full, at;         /* ids read so far */
    int decoding;               /* the prompt is read */
    int64_t cut;                /* where the prompt piece being fed ends (a snapshot is taken there) */
    int waited;                 /* held back for another slot's shared prefix: look in the cache again */
    int32_t pending;            /* the last token picked and not fed (-1: none) */
    ms_decode_counts dec0;      /* the session's decode counts when the job started */
    int64_t passes;             /* the passes that fed its decode tokens */
    srv_pick pk;
    ms_status st;
    const char *fail;
    int fail_status;
    char msg[256];
} slot;

/* echo + logprobs: the prompt's own log-probabilities are asked for, so all
 * of it is read (no reuse), and scored (ms_session_score), alone. */
static int scores_prompt(const srv_job *j) { return j->logprobs >= 0 && j->echo; }

/* The ids of j's input held by ses as a prefix (reusable), or -1. */
static int64_t reusable(const ms_session *ses, const srv_job *j) {
    if (!ses || scores_prompt(j) || !ms_session_logits(ses)) return -1;
    int64_t n_have = 0;
    const int32_t *have = ms_session_tokens(ses, &n_have);
    const int64_t n_forced_feed = j->n_forced - (j->forced_done ? 1 : 0);
    if (n_have == 0 || n_have > j->n_prompt + n_forced_feed) return -1;
    const int64_t np = n_have < j->n_prompt ? n_have : j->n_prompt;
    if (memcmp(have, j->prompt, (size_t)np * sizeof *have) != 0) return -1;
    if (n_have > np && memcmp(have + np, j->forced, (size_t)(n_have - np) * sizeof *have) != 0) return -1;
    return n_have;
}

/* Structured output: the document ends with the end-of-turn token. */
static int open_grammar(srv *s, srv_job *j, slot *sl) {
    int32_t end = ms_special_id(s->e, "<|end_of_msg|>");
    if (end < 0) ms_stop_ids(s->e, &end, 1);            /* eos_token_id (gpt-oss: <|return|>) */
    if (end < 0) end = (int32_t)s->info.eos_id;
    if (ms_grammar_open(s->e, j->json_mode == 2 ? j->schema : NULL, j->n_schema, end, &sl->grammar, sl->msg,
                        sizeof sl->msg) != MS_OK) {
        sl->fail = sl->msg;
        sl->fail_status = 400;
        return -1;
    }
    ms_sampler_set_grammar(sl->smp, sl->grammar);
    return 0;
}

/* Set up sl for its job: sampler, input ids, session reuse. 0, or -1 when the
 * job ends here (failed or cancelled: slot_end reports it). */
static int slot_start(srv *s, slot *sl) {
    srv_job *j = sl->j;
    sl->t0 = srv_now();
    sl->res.n_prompt = j->n_prompt;
    for (int k = 0; k < j->n_stop; k++)
        if (strlen(j->stop[k]) > sl->g.max_stop) sl->g.max_stop = strlen(j->stop[k]);
    sl->fail_status = 500;
    sl->pending = -1;
    if (!sl->ses) reopen_session(s, &sl->ses);
    if (!sl->ses) { sl->fail = "the engine has no session"; return -1; }
    ms_session_decode_counts(sl->ses, &sl->dec0);
    sl->res.spec = s->o.c.speculate > 0;
    if (atomic_load(&j->cancel)) return -1;
    sl->g.choice = sl->res.choice = sl->choice;
    ms_sample_params sp = j->sp;
    sp.seed = j->sp.seed + (uint64_t)sl->choice;
    sl->smp = ms_sampler_open(&sp, s->info.n_vocab, sl->msg, sizeof sl->msg);
    if (!sl->smp) { sl->fail = sl->msg; sl->fail_status = 400; return -1; }
    if (j->hspec) {     /* gpt-oss: the constraint opens the body's grammar itself */
        if (srv_hcon_init(&sl->hc, s, j->hspec, sl->smp) != 0) { sl->fail = "out of memory"; return -1; }
    } else if (j->json_mode && open_grammar(s, j, sl) < 0) return -1;
    if (j->tools && !j->json_mode && srv_tcall_init(&sl->tc, s, j->tools, sl->smp) != 0) {
        sl->fail = "out of memory";
        return -1;
    }
    /* the input: prompt + forced output (without a forced final stop token) */
    const int64_t n_forced_feed = j->n_forced - (j->forced_done ? 1 : 0);
    sl->n_full = j->n_prompt + n_forced_feed;
    sl->full = malloc((size_t)sl->n_full * sizeof *sl->full);
    if (!sl->full) { sl->fail = "out of memory"; return -1; }
    memcpy(sl->full, j->prompt, (size_t)j->n_prompt * sizeof *sl->full);
    if (n_forced_feed > 0) memcpy(sl->full + j->n_prompt, j->forced, (size_t)n_forced_feed * sizeof *sl->full);
    for (int64_t i = 0; i < j->n_forced; i++)
        if (srv_gen_push(&sl->g, j->forced[i]) != 0 || (sl->tc.t && srv_tcall_observe(&sl->tc, j->forced[i]) != 0)) {
            sl->fail = "out of memory";
            return -1;
        }
    /* the longest prefix of the input the session or the prompt cache holds */
    int64_t have = 0;
    if (scores_prompt(j)) ms_session_reset(sl->ses);
    else ms_session_reuse(sl->ses, sl->full, sl->n_full, &have);
    sl->at = have;
    sl->res.n_cached = sl->at < j->n_prompt ? sl->at : j->n_prompt;
    sl->pk = (srv_pick){ s, j, &sl->g, sl->smp, &sl->tc, &sl->hc, NULL, 0 };
    if (j->forced_done) sl->pk.finish = "tool_calls";
    else if (sl->g.n >= j->max_tokens) sl->pk.finish = "length";   /* max_tokens cut the forced ids */
    return 0;
}

/* The prompt is read: the response starts. */
static void slot_prompt_done(srv *s, slot *sl) {
    srv_job *j = sl->j;
    sl->decoding = 1;
    srv_api_emit_start(s, j, sl->g.choice, sl->g.lp, sl->g.n_lp);
    if (j->stream && j->kind == SRV_COMPLETION && j->echo && j->echo_text) sl->g.lp_sent = sl->g.n_lp;
    if (j->kind == SRV_CHAT && j->n_forced > 0) srv_gen_on_token(s, j, &sl->g, j->forced[j->n_forced - 1]);
}

/* The whole reply, cleaned, into res (the job finished with pk.finish). */
static void slot_reply(srv *s, slot *sl, ms_reply *reply, srv_call_out **calls, srv_buf **cbufs,
                       srv_buf *clean_r, srv_buf *clean_c) {
    srv_job *j = sl->j;
    srv_gen *g = &sl->g;
    srv_result *res = &sl->res;
    const char *finish = sl->pk.finish;
    res->n_completion = g->n;
    res->n_reasoning = srv_gen_count_reasoning(s, j, g);
    if (j->kind == SRV_CHAT) {
        if (ms_chat_parse_reply(s->e, g->ids, g->n, j->thinking, reply) != MS_OK) { sl->fail = "cannot parse the reply"; return; }
        size_t nc = strlen(reply->content);
        /* a call cut inside its markup (max_tokens) is not presented */
        int64_t n_calls = g->stopped || j->calls_off ? 0 : reply->n_tool_calls;
        if (n_calls > 0 && (srv_tcall_in_call(&sl->tc) || srv_hcon_in_call(&sl->hc))) n_calls--;
        if (j->stream) {
            srv_gen_emit_text(s, j, g, reply->reasoning, strlen(reply->reasoning), reply->content, nc, 1);
            srv_gen_emit_calls(s, j, g, reply, n_calls);
        }
        if (g->stopped && g->stop_at < nc) nc = g->stop_at;
        srv_utf8_clean(clean_r, reply->reasoning, strlen(reply->reasoning));
        srv_utf8_clean(clean_c, reply->content, nc);
        if (n_calls > 0) {
            *calls = calloc((size_t)n_calls, sizeof **calls);
            *cbufs = calloc((size_t)n_calls * 2, sizeof **cbufs);
            if (!*calls || !*cbufs) { sl->fail = "out of memory"; return; }
            for (int64_t i = 0; i < n_calls; i++)
                srv_gen_clean_call(&reply->tool_calls[i], &(*cbufs)[2 * i], &(*cbufs)[2 * i + 1], &(*calls)[i]);
            res->calls = *calls;
            res->n_calls = n_calls;
            if (!strcmp(finish, "stop")) finish = "tool_calls";
        }
    } else {
        if (j->stream) srv_gen_emit_text(s, j, g, NULL, 0, g->text.p, g->text.n, 1);
        size_t nt = g->stopped && g->stop_at < g->text.n ? g->stop_at : g->text.n;
        srv_utf8_clean(clean_c, g->text.p ? g->text.p : "", nt);
    }
    res->finish = finish;
    res->lp = g->lp;
    res->n_lp = g->n_lp;
    res->n_lp_sent = g->lp_sent;
    res->reasoning = clean_r->p ? clean_r->p : "";
    res->content = clean_c->p ? clean_c->p : "";
}

/* Report the job (its reply, or why it ended) and free the slot. */
static void slot_end(srv *s, slot *sl) {
    srv_job *j = sl->j;
    srv_result *res = &sl->res;
    srv_gen *g = &sl->g;
    ms_reply reply;
    memset(&reply, 0, sizeof reply);
    srv_call_out *calls = NULL;
    srv_buf *cbufs = NULL;
    srv_buf clean_r = {0}, clean_c = {0};
    char msg[300];
    if (sl->ses) {      /* what its decode steps drafted and accepted (usage.speculation) */
        ms_session_decode_counts(sl->ses, &res->dec);
        res->dec.passes = sl->passes;       /* ms_sessions_feed's steps too */
        res->dec.tokens -= sl->dec0.tokens;
        for (int i = 0; i < MS_DRAFT_SOURCES; i++) {
            res->dec.drafted[i] -= sl->dec0.drafted[i];
            res->dec.accepted[i] -= sl->dec0.accepted[i];
        }
        res->dec.tree_passes -= sl->dec0.tree_passes;
        res->dec.tree_drafted -= sl->dec0.tree_drafted;
        res->dec.tree_accepted -= sl->dec0.tree_accepted;
    }
    if (sl->pk.finish && sl->st == MS_OK && !sl->fail) slot_reply(s, sl, &reply, &calls, &cbufs, &clean_r, &clean_c);
    if (!res->finish) {
        int cancel = atomic_load(&j->cancel);
        if (sl->st != MS_OK) {
            snprintf(msg, sizeof msg, "the engine failed: %s: %s", ms_status_name(sl->st),
                     sl->ses ? ms_session_error(sl->ses) : "");
            res->err_msg = msg;
            res->err_status = sl->st == MS_E_CONTEXT ? 400 : 500;
            reopen_session(s, &sl->ses);        /* state after a failed feed is not trusted */
        } else if (sl->fail) {
            res->err_msg = sl->fail;
            res->err_status = sl->fail_status;
        } else if (cancel == 2) {
            res->err_msg = "the server is shutting down";
            res->err_status = 503;
        } else {
            res->err_msg = "the request was cancelled";
            res->err_status = 499;
        }
        res->err_type = res->err_status == 400 ? "invalid_request_error" : "server_error";
    }
    srv_api_finish(s, j, res);
    srv_metrics_job(s, sl->choice, res->n_prompt, res->n_cached, g->n);
    const double dt = srv_now() - sl->t0;
    srv_log(s, 0, "%s %s: %s, prompt %lld (cached %lld), output %lld, %.2f s (%.1f tok/s)",
            j->kind == SRV_CHAT ? "chat" : "completion", j->id, res->finish ? res->finish : res->err_msg,
            (long long)res->n_prompt, (long long)res->n_cached, (long long)g->n, dt,
            dt > 0 ? (double)g->n_sampled / dt : 0.0);
    ms_reply_free(&reply);
    for (int64_t i = 0; cbufs && i < 2 * res->n_calls; i++) srv_buf_free(&cbufs[i]);
    free(cbufs);
    free(calls);
    srv_buf_free(&clean_r);
    srv_buf_free(&clean_c);
    srv_gen_free(g);
    free(sl->full);
    srv_tcall_free(&sl->tc);
    srv_hcon_free(&sl->hc);
    ms_sampler_close(sl->smp);
    ms_grammar_close(sl->grammar);
    sl->grammar = NULL;
    pthread_mutex_lock(&s->qmu);
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] == j) { s->running[i] = s->running[--s->n_running]; break; }
    sl->last_used = ++s->n_served;
    pthread_cond_broadcast(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
    srv_job_unref(j);
    ms_session *ses = sl->ses;
    const uint64_t last = sl->last_used;
    memset(sl, 0, sizeof *sl);
    sl->ses = ses;
    sl->last_used = last;
}

static void slot_pick(srv *s, slot *all, int P, slot *sl, int prompt_done);

/* Choice 0 of a job with several has read the prompt: every other choice of
 * the job (waiting in its slot) starts from a copy of its session (the
 * prompt is read once) and the echoed entries it scored, then picks. */
static void fork_choices(srv *s, slot *all, int P, const slot *a) {
    for (int i = 0; i < P; i++) {
        slot *b = &all[i];
        if (b->j != a->j || b->choice == 0 || b->decoding) continue;
        if (ms_session_copy(b->ses, a->ses) != MS_OK) { b->fail = "cannot copy the session"; slot_end(s, b); continue; }
        b->at = b->n_full;
        b->res.n_cached = b->j->n_prompt;   /* the request's usage takes the least: choice 0's */
        for (int64_t q = 0; q < a->g.n_lp && !b->fail; q++) {
            srv_lp *e = srv_gen_lp_next(&b->g);
            if (e) *e = a->g.lp[q];
            else b->fail = "out of memory";
        }
        slot_pick(s, all, P, b, 1);
    }
}

/* Pick the next token of a decoding slot from its session's logits (the
 * picker applies the stop rules); the job ends when they say so. With
 * prompt_done, the prompt was just read: the response starts first (and the
 * job's other choices fork from here). */
static void slot_pick(srv *s, slot *all, int P, slot *sl, int prompt_done) {
    if (prompt_done) slot_prompt_done(s, sl);
    if (prompt_done && sl->choice == 0 && choices_of(sl->j) > 1) fork_choices(s, all, P, sl);
    if (!sl->pk.finish) {
        int64_t n_hist = 0;
        const int32_t *hist = ms_session_tokens(sl->ses, &n_hist);
        int stop = 0;
        sl->pending = srv_picker(&sl->pk, ms_session_logits(sl->ses), hist, n_hist, &stop);
        if (sl->pk.oom) sl->fail = sl->hc.h && sl->hc.msg[0] ? sl->hc.msg : "out of memory";
    }
    if (sl->pk.finish || sl->fail) slot_end(s, sl);
}

/* ---- prompts sharing a prefix ------------------------------------------------------ */

/* Slots reading their prompts share what their inputs have in common: the
 * one that started first reads it and stops there for a snapshot (the
 * prompt cache), the later ones wait, then restore it. A prefix shorter than
 * SHARE_MIN tokens is not waited for (a chat's opening markup). */
enum { SHARE_MIN = 16 };

static int reads_prompt(const slot *a) { return a->j && !a->decoding && a->choice == 0 && !scores_prompt(a->j) && a->full; }

static int64_t shared(const slot *a, const slot *b) {
    const int64_t n = a->n_full < b->n_full ? a->n_full : b->n_full;
    int64_t i = 0;
    while (i < n && a->full[i] == b->full[i]) i++;
    return i;
}

/* b started before a (a waits for b, never the other way round). */
static int earlier(const slot *sl, int ib, int ia) {
    return sl[ib].t0 < sl[ia].t0 || (sl[ib].t0 == sl[ia].t0 && ib < ia);
}

/* Whether slot ia waits for an earlier slot still reading a long prefix they share. */
static int waits(const slot *sl, int P, int ia) {
    const slot *a = &sl[ia];
    for (int ib = 0; ib < P; ib++) {
        if (ib == ia || !reads_prompt(&sl[ib]) || !earlier(sl, ib, ia)) continue;
        const int64_t L = shared(a, &sl[ib]);
        if (L >= a->at + SHARE_MIN && sl[ib].at < L) return 1;
    }
    return 0;
}

/* Where slot ib's next prompt piece ends: the prompt cache's mark, or sooner
 * where a later slot waiting for it parts from its input. */
static int64_t prompt_cut(const slot *sl, int P, int ib) {
    const slot *b = &sl[ib];
    int64_t cut = ms_session_prompt_mark(b->ses, b->full, b->n_full, b->at);
    for (int ia = 0; ia < P; ia++) {
        if (ia == ib || !reads_prompt(&sl[ia]) || earlier(sl, ia, ib)) continue;
        const int64_t L = shared(&sl[ia], b);
        if (L >= sl[ia].at + SHARE_MIN && L > b->at && L < cut) cut = L;
    }
    return cut;
}

/* The prompt ids slot i reads this step (at most room; its piece ends at
 * a->cut): none while it waits for an earlier slot's shared prefix; after
 * waiting, it first restores what that slot left in the prompt cache (a
 * prompt restored whole picks in step). After the feed, step keeps a
 * snapshot at the piece's end: always at a->cut, elsewhere if there is room. */
static int64_t prompt_piece(slot *sl, int P, int i, int64_t room) {
    slot *a = &sl[i];
    if (waits(sl, P, i)) { a->waited = 1; return 0; }
    if (a->waited) {
        int64_t have = 0;
        a->waited = 0;
        ms_session_reuse(a->ses, a->full, a->n_full, &have);
        a->at = have;
        a->res.n_cached = have < a->j->n_prompt ? have : a->j->n_prompt;
        if (a->at == a->n_full) return 0;
    }
    a->cut = prompt_cut(sl, P, i);
    return a->cut - a->at < room ? a->cut - a->at : room;
}

/* A step of --speculate when every active slot decodes: one
 * ms_sessions_decode call drafts for each slot (up to --speculate ids, fewer
 * before its max_tokens), verifies every slot's pending token and draft in
 * one pass, and picks each slot's tokens with its own picker (the stop rules
 * end a job there). A slot whose pending token no longer fits the context
 * fails alone, as in step(). */
enum { SPEC_MAX = 31 };         /* the largest --speculate (cli/opts.c) */
static void spec_step(srv *s, slot *sl, int P) {
    ms_session *ss[SRV_MAX_PARALLEL];
    int32_t pending[SRV_MAX_PARALLEL], buf[SRV_MAX_PARALLEL][SPEC_MAX + 1], *out[SRV_MAX_PARALLEL];
    int n_draft[SRV_MAX_PARALLEL], who[SRV_MAX_PARALLEL], k = 0;
    void *user[SRV_MAX_PARALLEL];
    int64_t n_out[SRV_MAX_PARALLEL];
    for (int i = 0; i < P; i++) {
        slot *a = &sl[i];
        if (!a->j) continue;
        if (a->pending >= 0 && ms_session_n_past(a->ses) + 1 > s->info.max_context) {
            snprintf(a->msg, sizeof a->msg, "the engine failed: context: context full: %lld + 1 tokens > max_context %lld",
                     (long long)ms_session_n_past(a->ses), (long long)s->info.max_context);
            a->fail = a->msg;
            a->fail_status = 400;
            slot_end(s, a);
            continue;
        }
        const int64_t room = a->j->max_tokens - a->g.n - 1;
        const int spec = s->o.c.speculate < SPEC_MAX ? s->o.c.speculate : SPEC_MAX;
        ss[k] = a->ses;
        pending[k] = a->pending;
        a->passes += a->pending >= 0;
        n_draft[k] = room <= 0 ? 0 : spec < room ? spec : (int)room;
        user[k] = &a->pk;
        out[k] = buf[k];
        who[k++] = i;
    }
    if (k == 0) return;
    const ms_status st = ms_sessions_decode(ss, k, pending, n_draft, srv_picker, user, out, n_out);
    int64_t emitted = 0;
    for (int q = 0; q < k; q++) emitted += n_out[q];
    atomic_fetch_add(&s->n_steps, 1);
    atomic_fetch_add(&s->n_step_tokens, emitted);
    for (int q = 0; q < k; q++) {
        slot *a = &sl[who[q]];
        if (a->pk.oom) a->fail = a->hc.h && a->hc.msg[0] ? a->hc.msg : "out of memory";
        /* a failed pass leaves every session of the call unsound; a non-finite
           row or a failed rollback only its own (ms_session_logits NULL) */
        if (st != MS_OK && !(st == MS_E_UNSOUND && ms_session_logits(a->ses))) a->st = st;
        else if (!a->fail && n_out[q] > 0) a->pending = out[q][n_out[q] - 1];
        if (a->st != MS_OK || a->fail || a->pk.finish) slot_end(s, a);
    }
}

/* One step of every active slot: one ms_sessions_feed call (one pass over
 * the weights) that reads each decoding slot's pending token and up to
 * prefill_chunk prompt tokens of the slots still reading their prompts (in
 * slot order; no more than the engine's chunk leaves beside the decode
 * tokens, so a step is one pass), then a pick per decoding slot. A job that
 * asks for its prompt's scores reads its prompt alone (ms_session_score).
 * With --speculate, a step in which no slot reads a prompt is spec_step's
 * (drafts verified, every slot's in one pass).
 * Bits: each session's logits are those it gets alone (ms_sessions_feed,
 * ms_sessions_decode), so every job's tokens are those it gets with
 * --parallel 1. */
static void step(srv *s, slot *sl, int P) {
    ms_session *ss[SRV_MAX_PARALLEL];
    const int32_t *ids[SRV_MAX_PARALLEL];
    int64_t n[SRV_MAX_PARALLEL];
    int who[SRV_MAX_PARALLEL], k = 0, n_active = 0, n_prompt = 0;
    for (int i = 0; i < P; i++) {
        if (!sl[i].j) continue;
        if (atomic_load(&sl[i].j->cancel) || sl[i].fail) { slot_end(s, &sl[i]); continue; }
        n_active++;
        n_prompt += !sl[i].decoding;
    }
    if (n_active > 0 && n_prompt == 0 && s->o.c.speculate > 0) {
        spec_step(s, sl, P);
        return;
    }
    /* prompt tokens this step: the decode tokens and they fill one engine chunk
       (one pass over the weights), at least one token so a prompt always advances */
    int64_t room = s->o.prefill_chunk, n_dec = 0;
    for (int i = 0; i < P; i++) n_dec += sl[i].j && sl[i].decoding && sl[i].pending >= 0;
    if (room > s->info.prefill_chunk - n_dec) room = s->info.prefill_chunk - n_dec;
    if (room < 1) room = 1;
    for (int i = 0; i < P; i++) {
        slot *a = &sl[i];
        if (!a->j) continue;
        int64_t take = 0;
        const int32_t *from = NULL;
        if (!a->decoding && a->choice > 0) continue;    /* forks from choice 0 (fork_choices) */
        if (!a->decoding && scores_prompt(a->j)) {
            /* scored prompts run alone, a chunk per step */
            take = a->n_full - a->at < s->o.prefill_chunk ? a->n_full - a->at : s->o.prefill_chunk;
            if (srv_gen_score_feed(a->j, &a->g, a->ses, a->full + a->at, take, &a->st) != 0) a->fail = "out of memory";
            atomic_fetch_add(&s->n_prompt_fed, take);
            if (a->st != MS_OK || a->fail) { slot_end(s, a); continue; }
            a->at += take;
            if (a->at == a->n_full) slot_pick(s, sl, P, a, 1);
            continue;
        }
        if (!a->decoding && room > 0 && a->at < a->n_full) {
            if ((take = prompt_piece(sl, P, i, room)) == 0) continue;
            room -= take;
            from = a->full + a->at;
        } else if (a->decoding && a->pending >= 0) {
            take = 1;
            from = &a->pending;
            a->passes++;
        }
        if (take == 0) continue;
        if (ms_session_n_past(a->ses) + take > s->info.max_context) {
            /* refused alone: the others' call goes on */
            snprintf(a->msg, sizeof a->msg, "the engine failed: context: context full: %lld + %lld tokens > max_context %lld",
                     (long long)ms_session_n_past(a->ses), (long long)take, (long long)s->info.max_context);
            a->fail = a->msg;
            a->fail_status = 400;
            slot_end(s, a);
            continue;
        }
        ss[k] = a->ses;
        ids[k] = from;
        n[k] = take;
        who[k++] = i;
    }
    ms_status st = k > 0 ? ms_sessions_feed(ss, k, ids, n) : MS_OK;
    int n_fed_dec = 0;
    for (int q = 0; q < k; q++) n_fed_dec += sl[who[q]].decoding;
    if (n_fed_dec > 0) {
        atomic_fetch_add(&s->n_steps, 1);
        atomic_fetch_add(&s->n_step_tokens, n_fed_dec);
    }
    for (int q = 0; q < k; q++) {
        slot *a = &sl[who[q]];
        /* a failed pass leaves every session of the call unsound; a non-finite
           row only its own (ms_session_logits NULL) */
        if (st != MS_OK && !(st == MS_E_UNSOUND && ms_session_logits(a->ses))) {
            a->st = st;
            slot_end(s, a);
            continue;
        }
        const int was_prompt = !a->decoding;
        if (was_prompt) { atomic_fetch_add(&s->n_prompt_fed, n[q]); ms_session_remember(a->ses, a->at + n[q] != a->cut); }
        if (was_prompt && (a->at += n[q]) < a->n_full) continue;
        slot_pick(s, sl, P, a, was_prompt);
    }
    /* a prompt that was all reused, or empty: its first pick */
    for (int i = 0; i < P; i++) {
        slot *a = &sl[i];
        if (!a->j || a->decoding || scores_prompt(a->j) || a->at < a->n_full || a->choice > 0) continue;
        slot_pick(s, sl, P, a, 1);
    }
}

/* ---- the thread ---------------------------------------------------------------- */

/* The free slot for j: the one whose session holds the longest prefix of j's
 * input, else the least recently used. -1 when none is free. */
static int choose_slot(const slot *sl, int P, const srv_job *j) {
    int best = -1;
    int64_t best_have = -1;
    for (int i = 0; i < P; i++) {
        if (sl[i].j) continue;
        const int64_t have = reusable(sl[i].ses, j);
        if (best < 0 || have > best_have || (have == best_have && sl[i].last_used < sl[best].last_used)) {
            best = i;
            best_have = have;
        }
    }
    return best;
}

static void *worker_main(void *arg) {
    srv *s = arg;
    const int P = s->o.c.parallel >= 1 && s->o.c.parallel <= SRV_MAX_PARALLEL ? s->o.c.parallel : 1;
    slot sl[SRV_MAX_PARALLEL];
    memset(sl, 0, sizeof sl);
    for (int i = 0; i < P; i++) sl[i].ses = s->ses[i];     /* opened before listening (serve.c) */
    for (;;) {
        int started[SRV_MAX_PARALLEL], n_started = 0, n_active = 0;
        for (int i = 0; i < P; i++) n_active += sl[i].j != NULL;
        pthread_mutex_lock(&s->qmu);
        while (!s->queue && !s->stop_worker && n_active == 0) pthread_cond_wait(&s->qcv, &s->qmu);
        if (!s->queue && n_active == 0) {   /* stop_worker and nothing left */
            pthread_mutex_unlock(&s->qmu);
            break;
        }
        /* take queued jobs while slots are free (fair order); a job with n
           choices takes n slots at once, and waits (the others behind it
           too) until that many are free */
        while (s->queue && n_active + choices_of(srv_queue_next(s)) <= P) {
            srv_job *j = srv_queue_take(s);
            for (int c = 0; c < choices_of(j); c++) {
                const int i = choose_slot(sl, P, j);
                if (c > 0) srv_job_ref(j);  /* a reference per slot */
                sl[i].j = j;
                sl[i].choice = c;
                s->running[s->n_running++] = j;
                started[n_started++] = i;
                n_active++;
            }
        }
        pthread_mutex_unlock(&s->qmu);
        for (int q = 0; q < n_started; q++)
            if (slot_start(s, &sl[started[q]]) != 0) slot_end(s, &sl[started[q]]);
        step(s, sl, P);
    }
    for (int i = 0; i < P; i++) ms_session_close(sl[i].ses);
    return NULL;
}

int srv_worker_start(srv *s) {
    if (pthread_create(&s->worker, NULL, worker_main, s) != 0) return -1;
    s->worker_started = 1;
    return 0;
}

void srv_worker_stop(srv *s) {
    if (!s->worker_started) return;
    pthread_mutex_lock(&s->qmu);
    s->stop_worker = 1;
    for (srv_job *j = s->queue; j; j = j->next) atomic_store(&j->cancel, 2);
    for (int i = 0; i < s->n_running; i++) atomic_store(&s->running[i]->cancel, 2);
    pthread_cond_broadcast(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
    pthread_join(s->worker, NULL);
    s->worker_started = 0;
}
