/* server/gen.c - one generation's output: the ids produced (forced and
 * sampled), stop strings, the streamed text and tool calls, and logprobs.
 *
 * Owns: struct srv_gen's contents while a slot serves a job (worker.c owns
 *   the slot and frees them at its end).
 * Invariants: the streamed deltas concatenate to the non-streamed text:
 *   content is held back by (longest stop string - 1) bytes and never cut
 *   inside a UTF-8 character; reasoning and content only grow.
 * Does not: sample or decide when a job ends (worker.c); it computes on the
 *   engine only to score an echoed prompt (srv_gen_score_feed), on the worker
 *   thread.
 */
#include "server/srv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

srv_lp *srv_gen_lp_next(srv_gen *g) {
    if (g->n_lp == g->cap_lp) {
        int64_t cap = g->cap_lp ? 2 * g->cap_lp : 64;
        srv_lp *p = realloc(g->lp, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        g->lp = p;
        g->cap_lp = cap;
    }
    return &g->lp[g->n_lp++];
}

/* Feed ids[0, n) scoring them (completions with echo and logprobs): one
 * entry per token. -1 when out of memory (the session may have advanced;
 * the job fails). */
int srv_gen_score_feed(const srv_job *j, srv_gen *g, ms_session *ses, const int32_t *ids, int64_t n, ms_status *st) {
    const int k = j->logprobs;
    double *lp = malloc((size_t)n * sizeof *lp);
    int32_t *tid = malloc((size_t)(n * k + 1) * sizeof *tid);
    double *tlp = malloc((size_t)(n * k + 1) * sizeof *tlp);
    int rc = lp && tid && tlp ? 0 : -1;
    if (rc == 0 && (*st = ms_session_score(ses, ids, n, lp, k, tid, tlp)) == MS_OK)
        for (int64_t i = 0; i < n && rc == 0; i++) {
            srv_lp *e = srv_gen_lp_next(g);
            if (!e) { rc = -1; break; }
            e->id = ids[i];
            e->lp = lp[i];
            e->n_top = 0;
            for (int q = 0; q < k && !isnan(lp[i]) && tid[i * k + q] >= 0; q++) {
                e->top_id[q] = tid[i * k + q];
                e->top_lp[q] = tlp[i * k + q];
                e->n_top = q + 1;
            }
        }
    free(lp);
    free(tid);
    free(tlp);
    return rc;
}

int srv_gen_push(srv_gen *g, int32_t id) {
    if (g->n == g->cap) {
        int64_t cap = g->cap ? 2 * g->cap : 256;
        int32_t *p = realloc(g->ids, (size_t)cap * sizeof *p);
        if (!p) return -1;
        g->ids = p;
        g->cap = cap;
    }
    g->ids[g->n++] = id;
    return 0;
}

int srv_is_stop_id(const srv *s, int32_t id) {
    for (int i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] == id) return 1;
    return 0;
}

/* Search the stop strings in t[0..n) for matches starting at >= g->searched. */
static void find_stop(const srv_job *j, srv_gen *g, const char *t, size_t n) {
    if (g->stopped || j->n_stop == 0) return;
    size_t best = SIZE_MAX;
    for (int k = 0; k < j->n_stop; k++) {
        size_t len = strlen(j->stop[k]);
        for (size_t p = g->searched; p + len <= n; p++)
            if (!memcmp(t + p, j->stop[k], len)) { if (p < best) best = p; break; }
    }
    if (best != SIZE_MAX) { g->stopped = 1; g->stop_at = best; return; }
    /* a match can start no earlier than n - max_stop + 1 next time */
    if (n + 1 > g->max_stop && n + 1 - g->max_stop > g->searched) g->searched = n + 1 - g->max_stop;
}

/* Bytes of t[0..n) that may be sent now (final: all of them). Stop strings
 * apply to the content (is_content), not to the reasoning. */
static size_t sendable(const srv_gen *g, const char *t, size_t n, size_t sent, int is_content, int final) {
    size_t limit = n;
    if (is_content && g->stopped && g->stop_at < limit) limit = g->stop_at;
    else if (is_content && !final && g->max_stop > 1) limit = n >= g->max_stop - 1 ? n - (g->max_stop - 1) : 0;
    if (limit <= sent) return sent;
    if (final) return limit;
    return sent + srv_utf8_ready(t + sent, limit - sent);
}

/* Send the new reasoning/content bytes (clean UTF-8). */
void srv_gen_emit_text(srv *s, srv_job *j, srv_gen *g, const char *r, size_t nr, const char *c, size_t nc, int final) {
    size_t to_r = r ? sendable(g, r, nr, g->sent_r, 0, final) : g->sent_r;
    size_t to_c = sendable(g, c, nc, g->sent_c, 1, final);
    if (r && nr < g->sent_r) to_r = g->sent_r;          /* never shrinks; guard anyway */
    if (nc < g->sent_c) to_c = g->sent_c;
    g->scratch.n = g->scratch2.n = 0;
    if (to_r > g->sent_r) srv_utf8_clean(&g->scratch, r + g->sent_r, to_r - g->sent_r);
    if (to_c > g->sent_c) srv_utf8_clean(&g->scratch2, c + g->sent_c, to_c - g->sent_c);
    g->sent_r = to_r;
    g->sent_c = to_c;
    /* the entries of the tokens sampled since the last piece go with the next
       piece of text (held-back text holds them back too; the last chunk takes
       what is left) */
    if (g->scratch.n == 0 && g->scratch2.n == 0) return;
    srv_api_emit_delta(s, j, g->choice, g->scratch.p, g->scratch.n, g->scratch2.p, g->scratch2.n, g->lp + g->lp_sent,
                       g->n_lp - g->lp_sent);
    g->lp_sent = g->n_lp;
}

/* A tool call as sent: name and arguments cleaned (allocated into *buf). */
void srv_gen_clean_call(const ms_tool_call *tc, srv_buf *bn, srv_buf *ba, srv_call_out *out) {
    bn->n = ba->n = 0;
    srv_utf8_clean(bn, tc->name ? tc->name : "", tc->name ? strlen(tc->name) : 0);
    srv_buf compact = {0};      /* the json segment keeps the model's whitespace: drop it */
    if (tc->arguments) srv_json_compact(&compact, tc->arguments, strlen(tc->arguments));
    srv_utf8_clean(ba, compact.p ? compact.p : "{}", compact.p ? compact.n : 2);
    srv_buf_free(&compact);
    out->name = bn->p ? bn->p : "";
    out->arguments = ba->p ? ba->p : "{}";
}

void srv_gen_emit_calls(srv *s, srv_job *j, srv_gen *g, const ms_reply *r, int64_t upto) {
    srv_buf bn = {0}, ba = {0};
    for (; g->calls_sent < upto; g->calls_sent++) {
        srv_call_out c;
        srv_gen_clean_call(&r->tool_calls[g->calls_sent], &bn, &ba, &c);
        srv_api_emit_call(s, j, g->choice, g->calls_sent, &c);
    }
    srv_buf_free(&bn);
    srv_buf_free(&ba);
}

/* After a new token: stop strings, streamed deltas. */
void srv_gen_on_token(srv *s, srv_job *j, srv_gen *g, int32_t id) {
    if (j->kind == SRV_COMPLETION) {
        const char *b;
        int64_t len = ms_token_bytes(s->e, id, &b);
        if (len > 0) srv_buf_add(&g->text, b, (size_t)len);
        find_stop(j, g, g->text.p, g->text.n);
        if (j->stream) srv_gen_emit_text(s, j, g, NULL, 0, g->text.p, g->text.n, 0);
        return;
    }
    if (!j->stream && j->n_stop == 0 && j->logprobs < 0) return;     /* nothing to do per token */
    ms_reply r;
    if (ms_chat_parse_reply(s->e, g->ids, g->n, j->thinking, &r) != MS_OK) return;
    size_t nc = strlen(r.content);
    /* chat logprobs are the answer's (content's) tokens: a sampled token that
       added nothing to it (reasoning, tool-call markup) loses its entry */
    if (g->lp_pending && nc <= g->content_len) g->n_lp--;
    g->lp_pending = 0;
    if (nc > g->content_len) g->content_len = nc;
    find_stop(j, g, r.content, nc);
    if (j->stream) {
        srv_gen_emit_text(s, j, g, r.reasoning, strlen(r.reasoning), r.content, nc, 0);
        if (!g->stopped && !j->calls_off && r.n_tool_calls > 1) srv_gen_emit_calls(s, j, g, &r, r.n_tool_calls - 1);
    }
    ms_reply_free(&r);
}

/* gpt-oss (harmony, which always reasons): the tokens up to and including the
 * <|end|> of the last analysis message; all of them while one is open. */
static int64_t harmony_reasoning(srv *s, const srv_gen *g) {
    const int32_t start = ms_special_id(s->e, "<|start|>"), channel = ms_special_id(s->e, "<|channel|>");
    const int32_t message = ms_special_id(s->e, "<|message|>"), end = ms_special_id(s->e, "<|end|>");
    int64_t n = 0;
    int in_channel = 0, body = 0, analysis = 0;
    char name[9];               /* the channel's first bytes: "analysis" */
    size_t n_name = 0;
    for (int64_t i = 0; i < g->n; i++) {
        const int32_t id = g->ids[i];
        if (id == start) { body = analysis = in_channel = 0; n_name = 0; }
        else if (id == channel && !body) { in_channel = 1; n_name = 0; }
        else if (id == message && !body) {
            body = 1;
            analysis = n_name == 8 && !memcmp(name, "analysis", 8);
            in_channel = 0;
        } else if (id == end && body) {
            if (analysis) n = i + 1;
            body = analysis = 0;
        } else if (in_channel) {
            const char *b;
            int64_t len = ms_token_bytes(s->e, id, &b);
            for (int64_t k = 0; k < len && n_name < sizeof name; k++) name[n_name++] = b[k];
        }
    }
    return body && analysis ? g->n : n;
}

/* Reasoning tokens: up to and including the <|sep|> of close(think). */
int64_t srv_gen_count_reasoning(srv *s, const srv_job *j, const srv_gen *g) {
    if (!strcmp(ms_chat_format_name(s->e), "harmony")) return harmony_reasoning(s, g);
    if (!j->thinking) return 0;
    for (int64_t i = 0; i < g->n; i++) {
        if (g->ids[i] != s->id_close) continue;
        char tag[16];
        size_t n = 0;
        int64_t k = i + 1;
        for (; k < g->n && g->ids[k] != s->id_sep; k++) {
            const char *b;
            int64_t len = ms_token_bytes(s->e, g->ids[k], &b);
            if (len < 0 || n + (size_t)len >= sizeof tag) break;
            memcpy(tag + n, b, (size_t)len);
            n += (size_t)len;
        }
        if (k < g->n && g->ids[k] == s->id_sep && n == 5 && !memcmp(tag, "think", 5)) return k + 1;
    }
    return g->n;
}


void srv_gen_free(srv_gen *g) {
    srv_buf_free(&g->text);
    srv_buf_free(&g->scratch);
    srv_buf_free(&g->scratch2);
    free(g->ids);
    free(g->lp);
}
