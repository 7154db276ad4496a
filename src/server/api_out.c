/* server/api_out.c - every JSON object the server sends: completions and
 * chat completions (whole and as stream chunks), logprobs, errors at the end
 * of a stream, models, health, and the tokenize / detokenize answers.
 *
 * Owns: the shapes of OpenAI's response objects and the order of the events
 *   of a stream (start, deltas, tool calls, finish, [DONE]).
 * Does not: validate requests (api.c), touch the engine's session.
 */
#include "server/srv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- output ----------------------------------------------------------------- */

static json_t *str_n(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    return v ? v : json_string("");     /* inputs are cleaned; never NULL in practice */
}

/* With --speculate, usage.speculation: the passes that fed the decode tokens
 * (a pass that served several requests counts for each), the drafted ids
 * they verified and the ones accepted, in all and by the source of the draft
 * (as `run --json`'s stats and `batch`'s result lines name them), and the
 * passes that verified a second branch (--draft-tree 1), the drafted ids of
 * those branches and the ones kept. */
static json_t *speculation_json(const ms_decode_counts *d) {
    json_t *o = json_object(), *by[2] = { json_object(), json_object() };
    int64_t sum[2] = { 0, 0 };
    for (int i = 0; i < MS_DRAFT_SOURCES; i++) {
        json_object_set_new(by[0], ms_draft_source_name(i), json_integer((json_int_t)d->drafted[i]));
        json_object_set_new(by[1], ms_draft_source_name(i), json_integer((json_int_t)d->accepted[i]));
        sum[0] += d->drafted[i];
        sum[1] += d->accepted[i];
    }
    json_object_set_new(o, "decode_passes", json_integer((json_int_t)d->passes));
    json_object_set_new(o, "drafted", json_integer((json_int_t)sum[0]));
    json_object_set_new(o, "accepted", json_integer((json_int_t)sum[1]));
    json_object_set_new(o, "drafted_by_source", by[0]);
    json_object_set_new(o, "accepted_by_source", by[1]);
    json_object_set_new(o, "tree_passes", json_integer((json_int_t)d->tree_passes));
    json_object_set_new(o, "tree_drafted", json_integer((json_int_t)d->tree_drafted));
    json_object_set_new(o, "tree_accepted", json_integer((json_int_t)d->tree_accepted));
    return o;
}

static json_t *usage_json(const srv_result *r) {
    json_t *u = json_pack("{s:I, s:I, s:I, s:{s:I}, s:{s:I}}",
                          "prompt_tokens", (json_int_t)r->n_prompt,
                          "completion_tokens", (json_int_t)r->n_completion,
                          "total_tokens", (json_int_t)(r->n_prompt + r->n_completion),
                          "prompt_tokens_details", "cached_tokens", (json_int_t)r->n_cached,
                          "completion_tokens_details", "reasoning_tokens", (json_int_t)r->n_reasoning);
    if (u && r->spec) json_object_set_new(u, "speculation", speculation_json(&r->dec));
    return u;
}

static json_t *envelope(srv *s, const srv_job *j, const char *object) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", j->id, "object", object,
                     "created", (json_int_t)j->created, "model", s->o.model_name,
                     "system_fingerprint", "moestream");
}

static json_t *call_json(const srv_job *j, int64_t i, const srv_call_out *c, int with_index) {
    char id[80];
    const char *hex = strchr(j->id, '-');
    snprintf(id, sizeof id, "call_%s_%lld", hex ? hex + 1 : j->id, (long long)i);
    json_t *o = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function",
                          "function", "name", c->name, "arguments", c->arguments);
    if (o && with_index) json_object_set_new(o, "index", json_integer((json_int_t)i));
    return o;
}

/* Send one SSE event "data: JSON\n\n" (consumes o). */
static void send_event(srv_job *j, json_t *o) {
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!txt) { atomic_store(&j->cancel, 2); return; }
    srv_buf b = {0};
    if (srv_buf_adds(&b, "data: ") == 0 && srv_buf_adds(&b, txt) == 0 && srv_buf_adds(&b, "\n\n") == 0)
        srv_job_push(j, b.p, b.n);
    else
        atomic_store(&j->cancel, 2);
    srv_buf_free(&b);
    free(txt);
}

static json_t *lp_object(srv *s, srv_job *j, int ci, const srv_lp *lp, int64_t n);

/* A stream chunk of choice ci; logprobs: its logprobs (NULL: null), consumed. */
static json_t *chunk(srv *s, const srv_job *j, int ci, json_t *delta_or_text, const char *finish, json_t *logprobs) {
    json_t *o = envelope(s, j, j->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_pack("{s:i, s:o, s:o}", "index", ci, "logprobs", logprobs ? logprobs : json_null(),
                               "finish_reason", finish ? json_string(finish) : json_null());
    if (!o || !choice) { json_decref(o); json_decref(choice); json_decref(delta_or_text); return NULL; }
    json_object_set_new(choice, j->kind == SRV_CHAT ? "delta" : "text", delta_or_text);
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    return o;
}

void srv_api_emit_start(srv *s, srv_job *j, int ci, const srv_lp *lp, int64_t n_lp) {
    if (!j->stream) return;
    if (j->kind == SRV_CHAT)
        send_event(j, chunk(s, j, ci, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL));
    else if (j->echo && j->echo_text) {
        srv_buf b = {0};
        if (srv_utf8_clean(&b, j->echo_text, strlen(j->echo_text)) == 0)
            send_event(j, chunk(s, j, ci, str_n(b.p, b.n), NULL, lp_object(s, j, ci, lp, n_lp)));
        srv_buf_free(&b);
    }
}

void srv_api_emit_delta(srv *s, srv_job *j, int ci, const char *reasoning, size_t n_reasoning,
                        const char *content, size_t n_content, const srv_lp *lp, int64_t n_lp) {
    if (!j->stream || (n_reasoning == 0 && n_content == 0)) return;
    if (j->kind == SRV_COMPLETION) {
        send_event(j, chunk(s, j, ci, str_n(content, n_content), NULL, lp_object(s, j, ci, lp, n_lp)));
        return;
    }
    json_t *d = json_object();
    if (n_reasoning) json_object_set_new(d, "reasoning_content", str_n(reasoning, n_reasoning));
    if (n_content) json_object_set_new(d, "content", str_n(content, n_content));
    send_event(j, chunk(s, j, ci, d, NULL, lp_object(s, j, ci, lp, n_lp)));
}

void srv_api_emit_call(srv *s, srv_job *j, int ci, int64_t i, const srv_call_out *c) {
    if (!j->stream) return;
    send_event(j, chunk(s, j, ci, json_pack("{s:[o]}", "tool_calls", call_json(j, i, c, 1)), NULL, NULL));
}

/* A token as text: its bytes, cleaned to UTF-8 (a token that ends inside a
 * character shows U+FFFD), into b (reset first). */
static void token_text(srv *s, int32_t id, srv_buf *b) {
    b->n = 0;
    if (b->p) b->p[0] = '\0';
    const char *t;
    int64_t len = ms_token_bytes(s->e, id, &t);
    if (len > 0) srv_utf8_clean(b, t, (size_t)len);
    else srv_buf_add(b, "", 0);
}

static size_t utf8_chars(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

/* {token, logprob, bytes} of chat logprobs; b: the token's cleaned text. */
static json_t *chat_lp_entry(srv *s, int32_t id, double lp, srv_buf *b) {
    token_text(s, id, b);
    const char *t;
    int64_t len = ms_token_bytes(s->e, id, &t);
    json_t *bytes = json_array();
    for (int64_t i = 0; i < len; i++) json_array_append_new(bytes, json_integer((unsigned char)t[i]));
    return json_pack("{s:o, s:f, s:o}", "token", str_n(b->p ? b->p : "", b->n), "logprob", lp, "bytes", bytes);
}

/* OpenAI's chat logprobs: {content: [{token, logprob, bytes, top_logprobs:
 * [{token, logprob, bytes}]}], refusal: null}, one entry per sampled token of
 * the answer (the worker drops the others). */
static json_t *chat_logprobs_json(srv *s, const srv_lp *lp, int64_t n) {
    json_t *content = json_array();
    srv_buf b = {0};
    for (int64_t i = 0; i < n; i++) {
        const srv_lp *x = &lp[i];
        json_t *tops = json_array();
        for (int q = 0; q < x->n_top; q++) json_array_append_new(tops, chat_lp_entry(s, x->top_id[q], x->top_lp[q], &b));
        json_t *o = chat_lp_entry(s, x->id, x->lp, &b);
        json_object_set_new(o, "top_logprobs", tops);
        json_array_append_new(content, o);
    }
    srv_buf_free(&b);
    return json_pack("{s:o, s:n}", "content", content, "refusal");
}

/* OpenAI's completion logprobs: tokens, token_logprobs, top_logprobs (the
 * top alternatives and the chosen token, by text; null for a first echoed
 * token), text_offset (characters into the returned text). */
static json_t *logprobs_json(srv *s, const srv_lp *lp, int64_t n, size_t *at_io) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    srv_buf b = {0}, b2 = {0};
    size_t at = *at_io;
    for (int64_t i = 0; i < n; i++) {
        const srv_lp *x = &lp[i];
        token_text(s, x->id, &b);
        json_array_append_new(tokens, str_n(b.p ? b.p : "", b.n));
        json_array_append_new(offs, json_integer((json_int_t)at));
        at += b.p ? utf8_chars(b.p, b.n) : 0;
        if (isnan(x->lp)) {
            json_array_append_new(lps, json_null());
            json_array_append_new(tops, json_null());
            continue;
        }
        json_array_append_new(lps, json_real(x->lp));
        json_t *t = json_object();
        for (int q = 0; q < x->n_top; q++) {
            token_text(s, x->top_id[q], &b2);
            const char *k = b2.p ? b2.p : "";
            if (!json_object_get(t, k)) json_object_set_new(t, k, json_real(x->top_lp[q]));
        }
        if (!json_object_get(t, b.p ? b.p : "")) json_object_set_new(t, b.p ? b.p : "", json_real(x->lp));
        json_array_append_new(tops, t);
    }
    srv_buf_free(&b);
    srv_buf_free(&b2);
    *at_io = at;
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

/* Choice ci's logprobs object for entries lp[0, n) (null without logprobs);
 * completions' text offsets continue from j->lp_offset[ci]. */
static json_t *lp_object(srv *s, srv_job *j, int ci, const srv_lp *lp, int64_t n) {
    if (j->logprobs < 0) return json_null();
    return j->kind == SRV_CHAT ? chat_logprobs_json(s, lp, n) : logprobs_json(s, lp, n, &j->lp_offset[ci]);
}

/* A failed job: its error (a non-stream response, or mid-stream an error
 * event and [DONE]). */
static void finish_error(srv_job *j, const srv_result *r) {
    srv_err e;
    memset(&e, 0, sizeof e);
    srv_err_set(&e, r->err_status, r->err_type ? r->err_type : "server_error", NULL, NULL, "%s", r->err_msg ? r->err_msg : "generation failed");
    char *body = srv_err_body(&e);
    if (j->stream && j->pushed) {       /* mid-stream: an error event, then [DONE] */
        if (body) {
            srv_buf b = {0};
            if (srv_buf_adds(&b, "data: ") == 0 && srv_buf_adds(&b, body) == 0 && srv_buf_adds(&b, "\n\ndata: [DONE]\n\n") == 0)
                srv_job_push(j, b.p, b.n);
            srv_buf_free(&b);
            free(body);
        }
        srv_job_complete(j, r->err_status, NULL);
    } else {
        srv_job_complete(j, r->err_status, body);
    }
}

/* The non-stream choice object of r (NULL when out of memory). */
static json_t *choice_json(srv *s, srv_job *j, const srv_result *r) {
    json_t *choice = NULL;
    if (j->kind == SRV_CHAT) {
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        json_object_set_new(msg, "content", r->n_calls > 0 && !r->content[0] ? json_null() : json_string(r->content));
        if (j->thinking || r->reasoning[0]) json_object_set_new(msg, "reasoning_content", json_string(r->reasoning));
        if (r->n_calls > 0) {
            json_t *calls = json_array();
            for (int64_t i = 0; i < r->n_calls; i++) json_array_append_new(calls, call_json(j, i, &r->calls[i], 0));
            json_object_set_new(msg, "tool_calls", calls);
        }
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", r->choice, "message", msg, "logprobs",
                           lp_object(s, j, r->choice, r->lp, r->n_lp), "finish_reason", r->finish);
    } else {
        srv_buf t = {0};
        if (j->echo && j->echo_text) srv_utf8_clean(&t, j->echo_text, strlen(j->echo_text));
        srv_buf_adds(&t, r->content);
        choice = json_pack("{s:s%, s:i, s:o, s:s}", "text", t.p ? t.p : "", t.n, "index", r->choice, "logprobs",
                           lp_object(s, j, r->choice, r->lp, r->n_lp), "finish_reason", r->finish);
        srv_buf_free(&t);
    }
    return choice;
}

void srv_api_finish(srv *s, srv_job *j, const srv_result *r) {
    const int n = j->n_choices > 1 ? j->n_choices : 1;
    j->n_ended++;
    if (j->failed) return;                  /* completed with an earlier choice's error */
    if (!r->finish) {
        j->failed = 1;
        if (n > 1) atomic_store(&j->cancel, 1);     /* the other choices stop */
        finish_error(j, r);
        return;
    }
    /* usage: the prompt once, every choice's output */
    j->sum_completion += r->n_completion;
    j->sum_reasoning += r->n_reasoning;
    j->sum_spec.passes += r->dec.passes;
    for (int i = 0; i < MS_DRAFT_SOURCES; i++) {
        j->sum_spec.drafted[i] += r->dec.drafted[i];
        j->sum_spec.accepted[i] += r->dec.accepted[i];
    }
    j->sum_spec.tree_passes += r->dec.tree_passes;
    j->sum_spec.tree_drafted += r->dec.tree_drafted;
    j->sum_spec.tree_accepted += r->dec.tree_accepted;
    if (j->n_ended == 1 || r->n_cached < j->min_cached) j->min_cached = r->n_cached;
    srv_result u = *r;
    u.n_completion = j->sum_completion;
    u.n_reasoning = j->sum_reasoning;
    u.dec = j->sum_spec;
    u.n_cached = j->min_cached;
    const int last = j->n_ended == n;
    if (j->stream) {
        json_t *fin = chunk(s, j, r->choice, j->kind == SRV_CHAT ? json_object() : json_string(""), r->finish,
                            r->n_lp > r->n_lp_sent ? lp_object(s, j, r->choice, r->lp + r->n_lp_sent, r->n_lp - r->n_lp_sent)
                                                   : NULL);
        if (fin && last) json_object_set_new(fin, "usage", usage_json(&u));
        send_event(j, fin);
        if (!last) return;
        if (j->include_usage) {
            json_t *uo = envelope(s, j, j->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion");
            if (uo) {
                json_object_set_new(uo, "choices", json_array());
                json_object_set_new(uo, "usage", usage_json(&u));
            }
            send_event(j, uo);
        }
        srv_job_push(j, "data: [DONE]\n\n", 14);
        srv_job_complete(j, 200, NULL);
        return;
    }
    json_t *choice = choice_json(s, j, r);
    if (!j->choices) {
        j->choices = json_array();
        for (int i = 0; i < n && j->choices; i++) json_array_append_new(j->choices, json_null());
    }
    if (j->choices && choice) json_array_set_new(j->choices, (size_t)r->choice, choice);
    else json_decref(choice);
    if (!last) return;
    int whole = j->choices != NULL;
    for (int i = 0; whole && i < n; i++) whole = !json_is_null(json_array_get(j->choices, (size_t)i));
    json_t *o = envelope(s, j, j->kind == SRV_CHAT ? "chat.completion" : "text_completion");
    char *body = NULL;
    if (o && whole) {
        json_object_set(o, "choices", j->choices);
        json_object_set_new(o, "usage", usage_json(&u));
        body = json_dumps(o, JSON_COMPACT);
    }
    json_decref(o);
    if (!body) {
        srv_err e;
        memset(&e, 0, sizeof e);
        srv_err_set(&e, 500, "server_error", NULL, NULL, "out of memory");
        srv_job_complete(j, 500, srv_err_body(&e));
        return;
    }
    srv_job_complete(j, 200, body);
}

/* ---- models, health ----------------------------------------------------------- */

static json_t *model_json(srv *s) {
    return json_pack("{s:s, s:s, s:I, s:s, s:I}", "id", s->o.model_name, "object", "model",
                     "created", (json_int_t)s->started, "owned_by", "moestream",
                     "context_length", (json_int_t)s->info.max_context);
}

static char *dump(json_t *o) {
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return t;
}

char *srv_api_models(srv *s) { return dump(json_pack("{s:s, s:[o]}", "object", "list", "data", model_json(s))); }

char *srv_api_model(srv *s) { return dump(model_json(s)); }

char *srv_api_tokenized(srv *s, const int32_t *ids, int64_t n) {
    json_t *a = json_array();
    for (int64_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(ids[i])) != 0) { json_decref(a); a = NULL; }
    if (!a) return NULL;
    return dump(json_pack("{s:I, s:I, s:o}", "count", (json_int_t)n, "max_model_len", (json_int_t)s->info.max_context,
                          "tokens", a));
}

char *srv_api_detokenized(const char *text, size_t len) {
    srv_buf clean;
    memset(&clean, 0, sizeof clean);
    json_t *t = srv_utf8_clean(&clean, text ? text : "", len) == 0 ? str_n(clean.p ? clean.p : "", clean.n) : NULL;
    srv_buf_free(&clean);
    return t ? dump(json_pack("{s:O, s:o}", "prompt", t, "content", t)) : NULL;
}

char *srv_api_health(srv *s) {
    int draining = atomic_load(&s->draining);
    return dump(json_pack("{s:s, s:s, s:I, s:I, s:i, s:I, s:I, s:I, s:b, s:b}", "status", draining ? "draining" : "ok",
                          "model", s->o.model_name, "queue", (json_int_t)srv_queue_depth(s),
                          "requests", (json_int_t)atomic_load(&s->n_requests), "parallel", s->o.c.parallel,
                          "decode_steps", (json_int_t)atomic_load(&s->n_steps),
                          "decode_tokens", (json_int_t)atomic_load(&s->n_step_tokens),
                          "prompt_tokens_read", (json_int_t)atomic_load(&s->n_prompt_fed),
                          "verify", s->verify_on, "pack", s->pack_on));
}
