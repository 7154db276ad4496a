/* text/chat_harmony_parse.c - reading gpt-oss's output in the harmony format,
 * closing a generated turn, and the table of chat formats (chat_harmony.h).
 *
 * Owns: the output state machine (header -> body -> idle, done at a stop id),
 *   the mapping of channels and recipients onto ms_chat_reply, the ids that
 *   close a turn, and ms_chat_fmt_xtml / ms_chat_fmt_harmony.
 * Idea: the state after the generation prompt is "in a header, role given";
 *
 *     HDR --<|message|>--> BODY --<|end|>--> IDLE --<|start|>--> HDR
 *      BODY --<|return|> | <|call|>--> DONE      any --<|endoftext|>--> DONE
 *
 *   header text is kept in three parts (before <|channel|>, after it, after
 *   <|constrain|>) and read when <|message|> arrives; an id that does not fit
 *   the state is skipped and flags GARBLED.
 * Invariants: reasoning and content only grow while ids are fed; the parser
 *   never fails on content (only on memory).
 * Does not: render (chat_harmony.c) or validate tool arguments as JSON (they
 *   are returned verbatim, as the model wrote them).
 */
#include "text/chat_harmony_int.h"

#include <ctype.h>

enum { P_HDR, P_BODY, P_IDLE, P_DONE };
enum { T_REASON, T_CONTENT, T_CALL };

typedef struct hparse {
    const ms_tok *t;
    int32_t sp[H_N];
    int state, part, target, role_next;
    strbuf hdr[3];                /* before <|channel|>, after it, after <|constrain|> */
    strbuf reasoning, content, args;
    ms_chat_call_out *calls;
    int64_t n_calls, cap_calls;
    unsigned flags;
    int has_reasoning, oom;
} hparse;

/* The word after "to=" in any header part (NUL-terminated copy in out). */
static int recipient(const hparse *p, char *out, size_t cap) {
    for (int i = 0; i < 3; i++) {
        const char *h = p->hdr[i].p, *at = h ? strstr(h, "to=") : NULL;
        if (!at) continue;
        at += 3;
        size_t n = 0;
        while (at[n] && !isspace((unsigned char)at[n]) && n + 1 < cap) n++;
        memcpy(out, at, n);
        out[n] = 0;
        return n > 0;
    }
    return 0;
}

/* The channel: the first word after <|channel|> that is not "to=...". */
static int channel_is(const hparse *p, const char *name) {
    const char *h = p->hdr[1].p ? p->hdr[1].p : "";
    for (;;) {
        while (*h && isspace((unsigned char)*h)) h++;
        size_t n = 0;
        while (h[n] && !isspace((unsigned char)h[n])) n++;
        if (n == 0) return 0;
        if (n >= 3 && strncmp(h, "to=", 3) == 0) { h += n; continue; }
        return n == strlen(name) && strncmp(h, name, n) == 0;
    }
}

static void begin_body(hparse *p) {
    char to[256];
    if (p->role_next) {   /* after <|start|>: the header names the role first */
        const char *h = p->hdr[0].p ? p->hdr[0].p : "";
        while (*h && isspace((unsigned char)*h)) h++;
        if (strncmp(h, "assistant", 9) != 0) p->flags |= MS_CHAT_GARBLED;
    }
    if (recipient(p, to, sizeof to)) {
        if (p->n_calls == p->cap_calls) {
            int64_t c = p->cap_calls ? 2 * p->cap_calls : 4;
            ms_chat_call_out *q = realloc(p->calls, (size_t)c * sizeof *q);
            if (!q) { p->oom = 1; return; }
            p->calls = q;
            p->cap_calls = c;
        }
        const char *name = strncmp(to, "functions.", 10) == 0 ? to + 10 : to;
        ms_chat_call_out *c = &p->calls[p->n_calls];
        memset(c, 0, sizeof *c);
        c->name = strdup(name);
        c->index = p->n_calls;
        if (!c->name) { p->oom = 1; return; }
        p->n_calls++;
        p->target = T_CALL;
        sb_reset(&p->args);
    } else if (channel_is(p, "analysis")) {
        p->target = T_REASON;
        p->has_reasoning = 1;
    } else {
        p->target = T_CONTENT;   /* final, a commentary preamble, or no channel */
    }
    p->state = P_BODY;
}

/* The body of the open message ends (complete: its END id was seen). */
static void end_body(hparse *p, int complete) {
    if (p->target == T_CALL && p->n_calls > 0) {
        ms_chat_call_out *c = &p->calls[p->n_calls - 1];
        free(c->arguments);
        c->arguments = strdup(p->args.p ? p->args.p : "");
        if (!c->arguments) p->oom = 1;
        c->complete = complete;
    }
}

static void start_header(hparse *p, int role_next) {
    for (int i = 0; i < 3; i++) sb_reset(&p->hdr[i]);
    p->part = 0;
    p->role_next = role_next;
    p->state = P_HDR;
}

static void on_special(hparse *p, int32_t id) {
    const int st = p->state;
    if (id == p->sp[H_START]) {
        if (st == P_BODY) { end_body(p, 0); p->flags |= MS_CHAT_GARBLED; }
        else if (st == P_HDR) p->flags |= MS_CHAT_GARBLED;
        start_header(p, 1);
    } else if ((id == p->sp[H_CHANNEL] || id == p->sp[H_CONSTRAIN]) && st == P_HDR) {
        p->part = id == p->sp[H_CHANNEL] ? 1 : 2;
    } else if (id == p->sp[H_MESSAGE] && st == P_HDR) {
        begin_body(p);
    } else if (id == p->sp[H_END] && st == P_BODY) {
        end_body(p, 1);
        p->state = P_IDLE;
    } else if ((id == p->sp[H_RETURN] || id == p->sp[H_CALL]) && st == P_BODY) {
        end_body(p, 1);
        p->flags |= MS_CHAT_CLOSED | MS_CHAT_ENDED;
        p->state = P_DONE;
    } else if (id == p->sp[H_ENDOFTEXT] || id == p->sp[H_RETURN] || id == p->sp[H_CALL]) {
        if (st == P_BODY) end_body(p, 0);
        p->flags |= MS_CHAT_ENDED | (st == P_IDLE ? 0 : MS_CHAT_TRUNCATED);
        if (id != p->sp[H_ENDOFTEXT]) p->flags |= MS_CHAT_GARBLED;
        p->state = P_DONE;
    } else {
        p->flags |= MS_CHAT_GARBLED;   /* a special out of place, or one harmony does not use */
    }
}

static void feed(hparse *p, const int32_t *ids, int64_t n) {
    for (int64_t i = 0; i < n && p->state != P_DONE && !p->oom; i++) {
        if (ms_tok_is_special(p->t, ids[i])) { on_special(p, ids[i]); continue; }
        const char *b;
        int64_t l = ms_tok_token_bytes(p->t, ids[i], &b);
        if (l < 0 || p->state == P_IDLE) { p->flags |= MS_CHAT_GARBLED; continue; }
        strbuf *dst = p->state == P_HDR ? &p->hdr[p->part]
                    : p->target == T_REASON ? &p->reasoning : p->target == T_CALL ? &p->args : &p->content;
        sb_put(dst, b, (size_t)l);
        if (dst->oom) p->oom = 1;
    }
}

static void parser_free(hparse *p) {
    for (int i = 0; i < 3; i++) sb_free(&p->hdr[i]);
    sb_free(&p->reasoning);
    sb_free(&p->content);
    sb_free(&p->args);
    for (int64_t i = 0; i < p->n_calls; i++) { free(p->calls[i].name); free(p->calls[i].arguments); }
    free(p->calls);
}

static ms_status run(const ms_tok *t, const int32_t *ids, int64_t n, hparse *p, ms_err *err) {
    memset(p, 0, sizeof *p);
    p->t = t;
    ms_status st = harmony_lookup(t, p->sp, H_CHANNEL + 1, err);
    if (st != MS_OK) return st;
    start_header(p, 0);   /* the generation prompt wrote <|start|>assistant */
    if (n < 0 || (n > 0 && !ids)) return ms_err_set(err, MS_E_USAGE, "chat: bad id array");
    feed(p, ids, n);
    return p->oom ? ms_err_set(err, MS_E_NOMEM, "chat: out of memory parsing the reply") : MS_OK;
}

ms_status ms_harmony_parse(const ms_tok *t, const int32_t *ids, int64_t n, int thinking, ms_chat_reply *out,
                           ms_err *err) {
    (void)thinking;
    memset(out, 0, sizeof *out);
    hparse p;
    ms_status st = run(t, ids, n, &p, err);
    if (st == MS_OK) {
        if (p.state == P_BODY) end_body(&p, 0);
        if (!(p.flags & MS_CHAT_ENDED)) p.flags |= MS_CHAT_TRUNCATED;
        for (int64_t i = 0; i < p.n_calls && !p.oom; i++)
            if (!p.calls[i].arguments && !(p.calls[i].arguments = strdup(""))) p.oom = 1;
        out->reasoning = sb_take(&p.reasoning, &out->reasoning_len);
        out->content = sb_take(&p.content, &out->content_len);
        if (p.oom || !out->reasoning || !out->content) st = ms_err_set(err, MS_E_NOMEM, "chat: out of memory");
    }
    if (st == MS_OK) {
        out->has_reasoning = p.has_reasoning;
        out->calls = p.calls;
        out->n_calls = p.n_calls;
        out->flags = p.flags;
        p.calls = NULL;
        p.n_calls = 0;
    } else {
        ms_chat_reply_free(out);
    }
    parser_free(&p);
    return st;
}

ms_status ms_harmony_close_turn(const ms_tok *t, const int32_t *gen, int64_t n_gen, int thinking,
                                int32_t **ids, int64_t *n_ids, int64_t *cap, ms_err *err) {
    (void)thinking;
    hparse p;
    ms_status st = run(t, gen, n_gen, &p, err);
    if (st == MS_OK && (p.state == P_HDR || p.state == P_BODY)) {
        hsink s;
        memset(&s, 0, sizeof s);
        s.tok = t;
        memcpy(s.sp, p.sp, sizeof s.sp);
        s.ids = ids;
        s.n_ids = n_ids;
        s.cap = cap;
        s.err = err;
        int64_t n0 = *n_ids;
        if (p.state == P_HDR) harmony_emit_s(&s, H_MESSAGE);
        harmony_emit_s(&s, p.state == P_BODY && p.target == T_CALL ? H_CALL : H_END);
        st = s.st;
        if (st != MS_OK) *n_ids = n0;
        sb_free(&s.pend);
    }
    parser_free(&p);
    return st;
}

/* ---- the formats ------------------------------------------------------------ */

const ms_chat_fmt ms_chat_fmt_xtml = {
    "xtml", ms_chat_render, ms_chat_render_append, ms_chat_close_turn, ms_chat_parse,
    {NULL, NULL, NULL, NULL},   /* K3's eos_token_id is <|end_of_msg|> itself */
    "<|end_of_msg|>", MS_CHAT_EFFORT_HIGH,
};

const ms_chat_fmt ms_chat_fmt_harmony = {
    "harmony", ms_harmony_render, ms_harmony_render_append, ms_harmony_close_turn, ms_harmony_parse,
    {"<|return|>", "<|call|>", "<|endoftext|>", NULL}, "<|end|>", MS_CHAT_EFFORT_NONE,
};

int ms_chat_fmt_stop_ids(const ms_chat_fmt *f, const ms_tok *t, int32_t *out, int max) {
    int n = 0;
    for (int i = 0; i < 4 && f->stop_names[i] && n < max; i++) {
        int32_t id = ms_tok_special_id(t, f->stop_names[i]);
        int dup = id < 0;
        for (int k = 0; k < n; k++) dup |= out[k] == id;
        if (!dup) out[n++] = id;
    }
    return n;
}
