/* text/chat.c - the Kimi K3 chat format: the output parser and turn closing.
 *
 * Owns: parsing generated ids back into reasoning, content and tool calls, and
 *   ms_chat_close_turn. The data model, the exact segment layout and all
 *   documented choices (effort wording, argument value text, JSON writer, how
 *   a turn is closed) are described in chat.h; rendering is chat_render.c and
 *   the JSON writer chat_json.c.
 * Idea: one parser state machine (events on a tag stack) serves both
 *   ms_chat_parse and ms_chat_close_turn, so what the closer completes is
 *   exactly what the parser saw open; the closer writes through the renderer's
 *   sink, so closing tags are the renderer's bytes.
 * Invariants: a parser's reasoning / content buffers are always NUL
 *   terminated and only grow; the parser's tag stack has the message frame at
 *   the bottom until close(message); *n_ids is restored when closing fails.
 * Does not: touch the tokenizer's internals (header only), or fail on bad
 *   model output (it repairs and flags).
 */
#include "text/chat_int.h"

#include <stdio.h>

/* ---- parser -------------------------------------------------------------- */

/* Tag kinds; TG_OTHER is any tag the format does not define. */
enum { TG_MESSAGE, TG_THINK, TG_RESPONSE, TG_TOOLS, TG_CALL, TG_ARGUMENT, TG_JSON, TG_OTHER };
static const char *const tg_name[TG_OTHER] = {"message", "think", "response", "tools",
                                              "call", "argument", "json"};
/* The tag each kind must sit directly inside (-1: none). */
static const int tg_parent[TG_OTHER] = {-1, TG_MESSAGE, TG_MESSAGE, TG_MESSAGE, TG_TOOLS, TG_CALL, TG_CALL};

#define MAX_DEPTH 32
#define MAX_TAG_BYTES 4096
#define MAX_ATTRS 8

typedef struct frame {
    int kind;
    char *name; /* malloc'd; the tag's name as generated */
    size_t nl;
} frame;

enum { MODE_TEXT, MODE_OPEN, MODE_CLOSE };

struct ms_chat_parser {
    const ms_tok *tok;
    int32_t sp[SP_N];
    int32_t eos;        /* [EOS], or -1 */
    frame st[MAX_DEPTH];
    int depth;
    int mode;
    strbuf tag;         /* bytes between <|open|>/<|close|> and <|sep|> */
    strbuf reasoning, content;
    int64_t calls_cap;
    json_t *args;       /* arguments of the open call (object) */
    int has_args;       /* an argument segment was closed into args */
    int has_json;       /* a json segment was seen */
    strbuf raw;         /* the json segment's text */
    strbuf key, type, val; /* the open argument */
    int saw_response, saw_tools;
    int ended, finished;
    int oom;
    ms_chat_reply r;
};

static int span_eq(const char *a, size_t an, const char *b) { return an == strlen(b) && memcmp(a, b, an) == 0; }

static void garble(ms_chat_parser *p) { p->r.flags |= MS_CHAT_GARBLED; }

/* Copy bytes, replacing invalid UTF-8 with U+FFFD (jansson strings and keys
 * must be valid UTF-8). */
static void put_utf8_clean(strbuf *b, const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = len > 0 && i + len <= n;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
        for (size_t j = 1; ok && j < len; j++) {
            unsigned char d = (unsigned char)s[i + j];
            if ((d & 0xc0) != 0x80) ok = 0;
            cp = cp << 6 | (d & 0x3f);
        }
        if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                   cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)))
            ok = 0;
        if (ok) {
            sb_put(b, s + i, len);
            i += len;
        } else {
            sb_puts(b, "\xef\xbf\xbd");
            i++;
        }
    }
}

static json_t *make_string(ms_chat_parser *p, const char *s, size_t n) {
    strbuf b = {0};
    put_utf8_clean(&b, s, n);
    json_t *v = b.oom ? NULL : json_stringn(b.p ? b.p : "", b.n);
    sb_free(&b);
    if (!v) p->oom = 1;
    return v;
}

/* The open argument becomes a member of args, typed by its type attribute;
 * text that does not parse as that type is kept as a string (flagged
 * GARBLED unless the argument was cut off by the end of the output). */
static void finish_argument(ms_chat_parser *p, int complete) {
    const char *ty = p->type.p ? p->type.p : "";
    const char *val = p->val.p ? p->val.p : "";
    json_t *v = NULL;
    if (strcmp(ty, "string") == 0) {
        v = make_string(p, val, p->val.n);
    } else {
        json_error_t je;
        json_t *x = json_loadb(val, p->val.n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        int ok = x != NULL;
        if (ok && strcmp(ty, "number") == 0) ok = json_is_number(x);
        else if (ok && strcmp(ty, "boolean") == 0) ok = json_is_boolean(x);
        else if (ok && strcmp(ty, "null") == 0) ok = json_is_null(x);
        else if (ok && strcmp(ty, "object") == 0) ok = json_is_object(x);
        else if (ok && strcmp(ty, "array") == 0) ok = json_is_array(x);
        else if (ok) garble(p); /* unknown type: keep the parsed value */
        if (ok) {
            v = x;
        } else {
            json_decref(x);
            if (complete) garble(p);
            v = make_string(p, val, p->val.n);
        }
    }
    if (!v) return;
    strbuf k = {0};
    put_utf8_clean(&k, p->key.p ? p->key.p : "", p->key.n);
    if (k.oom || !p->args || json_object_setn_new(p->args, k.p ? k.p : "", k.n, v) < 0) p->oom = 1;
    sb_free(&k);
    p->has_args = 1;
}

static ms_chat_call_out *cur_call(ms_chat_parser *p) {
    return p->r.n_calls > 0 ? &p->r.calls[p->r.n_calls - 1] : NULL;
}

/* Close the open call: arguments from the argument segments (compact, in
 * generated order), or the json segment's raw text. */
static void finish_call(ms_chat_parser *p, int complete) {
    ms_chat_call_out *c = cur_call(p);
    if (!c || c->arguments) return;
    strbuf b = {0};
    if (p->has_json && !p->has_args) {
        sb_put(&b, p->raw.p ? p->raw.p : "", p->raw.n);
    } else {
        if (p->has_json) garble(p);
        if (p->args) chat_put_json(&b, p->args, 0);
        else sb_puts(&b, "{}");
    }
    c->arguments = sb_take(&b, NULL);
    if (!c->arguments) p->oom = 1;
    c->complete = complete;
    json_decref(p->args);
    p->args = NULL;
}

static void pop(ms_chat_parser *p, int by_close) {
    frame *f = &p->st[--p->depth];
    if (f->kind == TG_ARGUMENT) finish_argument(p, by_close);
    else if (f->kind == TG_CALL) finish_call(p, by_close);
    else if (f->kind == TG_MESSAGE && by_close) p->r.flags |= MS_CHAT_CLOSED;
    free(f->name);
    f->name = NULL;
}

static int push(ms_chat_parser *p, int kind, const char *name, size_t nl) {
    if (p->depth == MAX_DEPTH) { garble(p); return -1; }
    char *c = malloc(nl + 1);
    if (!c) { p->oom = 1; return -1; }
    memcpy(c, name, nl);
    c[nl] = 0;
    p->st[p->depth++] = (frame){kind, c, nl};
    return 0;
}

static int find_kind(const ms_chat_parser *p, int kind) {
    for (int i = p->depth - 1; i >= 0; i--)
        if (p->st[i].kind == kind) return i;
    return -1;
}

typedef struct tagparse {
    const char *name;
    size_t nl;
    attr a[MAX_ATTRS];
    int n;
} tagparse;

/* Parse 'name k="v" ...' in place (values are unescaped in the buffer).
 * Returns 0, or -1 when the text is malformed (what parsed is kept). */
static int parse_tag(char *s, size_t n, tagparse *tp) {
    size_t i = 0;
    while (i < n && s[i] != ' ') i++;
    tp->name = s;
    tp->nl = i;
    tp->n = 0;
    int bad = 0;
    for (;;) {
        while (i < n && s[i] == ' ') i++;
        if (i >= n) break;
        size_t k0 = i;
        while (i < n && s[i] != '=' && s[i] != ' ') i++;
        if (i + 1 >= n || s[i] != '=' || s[i + 1] != '"') { bad = 1; break; }
        size_t kl = i - k0;
        i += 2;
        size_t v0 = i, o = i;
        while (i < n && s[i] != '"') {
            if (s[i] == '&' && n - i >= 5 && memcmp(s + i, "&amp;", 5) == 0) { s[o++] = '&'; i += 5; }
            else if (s[i] == '&' && n - i >= 6 && memcmp(s + i, "&quot;", 6) == 0) { s[o++] = '"'; i += 6; }
            else s[o++] = s[i++];
        }
        if (i >= n) bad = 1;
        if (tp->n < MAX_ATTRS) tp->a[tp->n++] = (attr){s + k0, kl, s + v0, o - v0};
        else bad = 1;
        i++;
    }
    return bad ? -1 : 0;
}

static const attr *get_attr(const tagparse *tp, const char *k) {
    for (int i = 0; i < tp->n; i++)
        if (span_eq(tp->a[i].k, tp->a[i].kl, k)) return &tp->a[i];
    return NULL;
}

static void start_call(ms_chat_parser *p, const tagparse *tp) {
    if (p->r.n_calls == p->calls_cap) {
        int64_t c = p->calls_cap ? p->calls_cap * 2 : 4;
        ms_chat_call_out *q = realloc(p->r.calls, (size_t)c * sizeof *q);
        if (!q) { p->oom = 1; return; }
        p->r.calls = q;
        p->calls_cap = c;
    }
    ms_chat_call_out *c = &p->r.calls[p->r.n_calls];
    memset(c, 0, sizeof *c);
    const attr *name = get_attr(tp, "tool"), *idx = get_attr(tp, "index");
    if (!name) garble(p);
    size_t nl = name ? name->vl : 0;
    c->name = malloc(nl + 1);
    if (!c->name) { p->oom = 1; return; }
    if (nl) memcpy(c->name, name->v, nl);
    c->name[nl] = 0;
    c->index = -1;
    if (idx && idx->vl > 0 && idx->vl <= 18) {
        int64_t k = 0;
        size_t i = 0;
        for (; i < idx->vl && idx->v[i] >= '0' && idx->v[i] <= '9'; i++) k = k * 10 + (idx->v[i] - '0');
        if (i == idx->vl) c->index = k;
    }
    if (c->index < 0) garble(p);
    p->r.n_calls++;
    json_decref(p->args);
    p->args = json_object();
    if (!p->args) p->oom = 1;
    p->has_args = p->has_json = 0;
    sb_reset(&p->raw);
}

static void do_open(ms_chat_parser *p, tagparse *tp, int bad) {
    int kind = TG_OTHER;
    for (int k = 0; k < TG_OTHER; k++)
        if (span_eq(tp->name, tp->nl, tg_name[k])) kind = k;
    if (bad) garble(p);
    if (p->depth == 0) { garble(p); return; } /* after close(message): ignore */
    if (kind == TG_OTHER || kind == TG_MESSAGE) {
        garble(p);
        push(p, TG_OTHER, tp->name, tp->nl);
        return;
    }
    int parent = tg_parent[kind];
    int at = find_kind(p, parent);
    if (at < 0 && kind == TG_CALL && (at = find_kind(p, TG_MESSAGE)) >= 0) {
        /* a call without open(tools): open it implicitly */
        while (p->depth > at + 1) pop(p, 1);
        if (push(p, TG_TOOLS, "tools", 5) < 0) return;
        p->saw_tools = 1;
        at = p->depth - 1;
        garble(p);
    }
    if (at < 0) {
        garble(p);
        push(p, TG_OTHER, tp->name, tp->nl);
        return;
    }
    if (at != p->depth - 1) garble(p);
    while (p->depth > at + 1) pop(p, 1);
    if (push(p, kind, tp->name, tp->nl) < 0) return;
    switch (kind) {
    case TG_THINK: p->r.has_reasoning = 1; break;
    case TG_RESPONSE: p->saw_response = 1; break;
    case TG_TOOLS: p->saw_tools = 1; break;
    case TG_CALL: start_call(p, tp); break;
    case TG_ARGUMENT: {
        const attr *k = get_attr(tp, "key"), *t = get_attr(tp, "type");
        if (!k || !t) garble(p);
        sb_reset(&p->key);
        sb_reset(&p->type);
        sb_reset(&p->val);
        if (k) sb_put(&p->key, k->v, k->vl);
        if (t) sb_put(&p->type, t->v, t->vl);
        break;
    }
    case TG_JSON:
        if (p->has_json) garble(p);
        p->has_json = 1;
        sb_reset(&p->raw);
        break;
    }
}

static void do_close(ms_chat_parser *p, const tagparse *tp, int bad) {
    if (bad || tp->n > 0) garble(p);
    int at = -1;
    for (int i = p->depth - 1; i >= 0 && at < 0; i--)
        if (p->st[i].nl == tp->nl && memcmp(p->st[i].name, tp->name, tp->nl) == 0) at = i;
    if (at < 0) { garble(p); return; }
    if (at != p->depth - 1) garble(p);
    while (p->depth > at) pop(p, 1);
}

static void on_text(ms_chat_parser *p, const char *b, size_t n) {
    if (p->mode != MODE_TEXT) {
        size_t room = p->tag.n < MAX_TAG_BYTES ? MAX_TAG_BYTES - p->tag.n : 0;
        if (n > room) { garble(p); n = room; }
        sb_put(&p->tag, b, n);
        return;
    }
    int top = p->depth ? p->st[p->depth - 1].kind : -1;
    strbuf *dst = top == TG_THINK ? &p->reasoning : top == TG_RESPONSE ? &p->content
                : top == TG_ARGUMENT ? &p->val : top == TG_JSON ? &p->raw : NULL;
    if (dst) {
        sb_put(dst, b, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (b[i] != ' ' && b[i] != '\n' && b[i] != '\t' && b[i] != '\r') { garble(p); break; }
}

static void on_sep(ms_chat_parser *p) {
    if (p->mode == MODE_TEXT) { garble(p); return; }
    int mode = p->mode;
    p->mode = MODE_TEXT;
    tagparse tp;
    int bad = parse_tag(p->tag.p ? p->tag.p : "", p->tag.n, &tp) < 0;
    if (mode == MODE_OPEN) do_open(p, &tp, bad);
    else do_close(p, &tp, bad);
    sb_reset(&p->tag);
}

static void feed_one(ms_chat_parser *p, int32_t id) {
    if (p->ended) { garble(p); return; }
    int which = -1;
    for (int i = 0; i < SP_N; i++)
        if (id == p->sp[i]) which = i;
    if (which < 0 && id >= 0 && id == p->eos) which = SP_END;
    switch (which) {
    case SP_OPEN:
    case SP_CLOSE:
        if (p->mode != MODE_TEXT) garble(p);
        p->mode = which == SP_OPEN ? MODE_OPEN : MODE_CLOSE;
        sb_reset(&p->tag);
        return;
    case SP_SEP: on_sep(p); return;
    case SP_END:
        if (p->mode != MODE_TEXT) garble(p);
        p->mode = MODE_TEXT;
        p->ended = 1;
        p->r.flags |= MS_CHAT_ENDED;
        return;
    }
    const char *b;
    int64_t n = ms_tok_token_bytes(p->tok, id, &b);
    if (n < 0 || ms_tok_is_special(p->tok, id)) { garble(p); return; } /* other specials: skipped */
    on_text(p, b, (size_t)n);
}

/* Publish the buffers into the reply view. */
static void sync_reply(ms_chat_parser *p) {
    if (sb_reserve(&p->reasoning, 0) < 0 || sb_reserve(&p->content, 0) < 0) { p->oom = 1; return; }
    p->r.reasoning = p->reasoning.p;
    p->r.reasoning_len = p->reasoning.n;
    p->r.content = p->content.p;
    p->r.content_len = p->content.n;
}

static int bufs_oom(const ms_chat_parser *p) {
    return p->oom || p->tag.oom || p->reasoning.oom || p->content.oom || p->raw.oom || p->key.oom ||
           p->type.oom || p->val.oom;
}

ms_status ms_chat_parser_new(const ms_tok *t, int thinking, ms_chat_parser **out, ms_err *err) {
    *out = NULL;
    ms_chat_parser *p = calloc(1, sizeof *p);
    if (!p) return ms_err_set(err, MS_E_NOMEM, "chat: out of memory");
    ms_status st = chat_lookup_specials(t, p->sp, err);
    if (st != MS_OK) { free(p); return st; }
    p->tok = t;
    p->eos = ms_tok_special_id(t, "[EOS]");
    push(p, TG_MESSAGE, "message", 7);
    if (thinking) push(p, TG_THINK, "think", 5);
    else push(p, TG_RESPONSE, "response", 8);
    if (thinking) p->r.has_reasoning = 1;
    else p->saw_response = 1;
    sync_reply(p);
    if (bufs_oom(p)) {
        ms_chat_parser_free(p);
        return ms_err_set(err, MS_E_NOMEM, "chat: out of memory");
    }
    *out = p;
    return MS_OK;
}

static void reply_clear(ms_chat_reply *r) {
    for (int64_t i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    memset(r, 0, sizeof *r);
}

void ms_chat_parser_free(ms_chat_parser *p) {
    if (!p) return;
    while (p->depth > 0) free(p->st[--p->depth].name);
    sb_free(&p->tag);
    sb_free(&p->reasoning);
    sb_free(&p->content);
    sb_free(&p->raw);
    sb_free(&p->key);
    sb_free(&p->type);
    sb_free(&p->val);
    json_decref(p->args);
    p->r.reasoning = p->r.content = NULL;
    reply_clear(&p->r);
    free(p);
}

ms_status ms_chat_parser_feed(ms_chat_parser *p, const int32_t *ids, int64_t n, ms_err *err) {
    if (bufs_oom(p)) return ms_err_set(err, MS_E_NOMEM, "chat: parser out of memory");
    for (int64_t i = 0; i < n && !bufs_oom(p); i++) feed_one(p, ids[i]);
    sync_reply(p);
    if (bufs_oom(p)) return ms_err_set(err, MS_E_NOMEM, "chat: parser out of memory");
    return MS_OK;
}

const ms_chat_reply *ms_chat_parser_reply(const ms_chat_parser *p) { return &p->r; }

ms_status ms_chat_parser_finish(ms_chat_parser *p, ms_err *err) {
    if (!p->finished) {
        p->finished = 1;
        if (p->mode != MODE_TEXT) {
            p->r.flags |= MS_CHAT_TRUNCATED;
            p->mode = MODE_TEXT;
        }
        if (p->depth > 0) p->r.flags |= MS_CHAT_TRUNCATED;
        while (p->depth > 0) pop(p, 0);
        sync_reply(p);
    }
    if (bufs_oom(p)) return ms_err_set(err, MS_E_NOMEM, "chat: parser out of memory");
    return MS_OK;
}

ms_status ms_chat_parse(const ms_tok *t, const int32_t *ids, int64_t n, int thinking,
                        ms_chat_reply *out, ms_err *err) {
    memset(out, 0, sizeof *out);
    ms_chat_parser *p;
    ms_status st = ms_chat_parser_new(t, thinking, &p, err);
    if (st != MS_OK) return st;
    st = ms_chat_parser_feed(p, ids, n, err);
    if (st == MS_OK) st = ms_chat_parser_finish(p, err);
    if (st == MS_OK) {
        *out = p->r;
        memset(&p->r, 0, sizeof p->r);
        memset(&p->reasoning, 0, sizeof p->reasoning); /* now owned by *out */
        memset(&p->content, 0, sizeof p->content);
    }
    ms_chat_parser_free(p);
    return st;
}

void ms_chat_reply_free(ms_chat_reply *r) {
    if (!r) return;
    free(r->reasoning);
    free(r->content);
    reply_clear(r);
}

/* ---- closing a generated turn ------------------------------------------- */

ms_status ms_chat_close_turn(const ms_tok *t, const int32_t *gen, int64_t n_gen, int thinking,
                             int32_t **ids, int64_t *n_ids, int64_t *cap, ms_err *err) {
    ms_chat_parser *p;
    ms_status st = ms_chat_parser_new(t, thinking, &p, err);
    if (st != MS_OK) return st;
    st = ms_chat_parser_feed(p, gen, n_gen, err);
    if (st != MS_OK) { ms_chat_parser_free(p); return st; }
    sink s;
    memset(&s, 0, sizeof s);
    s.tok = t;
    memcpy(s.sp, p->sp, sizeof s.sp);
    s.ids = ids;
    s.n_ids = n_ids;
    s.cap = cap;
    s.err = err;
    int64_t n0 = *n_ids;
    if (!p->ended) {
        if (p->mode != MODE_TEXT) {
            /* finish the half-written tag so the session's markup stays paired */
            chat_emit_s(&s, SP_SEP);
            on_sep(p);
        }
        while (p->depth > 0) {
            frame *f = &p->st[p->depth - 1];
            if (f->kind == TG_MESSAGE && !p->saw_response && !p->saw_tools) {
                chat_open_tag(&s, "response", NULL, 0);
                chat_close_tags(&s, "response");
            }
            chat_close_tag(&s, f->name, f->nl);
            pop(p, 1);
        }
        chat_emit_s(&s, SP_END);
    }
    st = s.st;
    if (st == MS_OK && bufs_oom(p)) st = ms_err_set(err, MS_E_NOMEM, "chat: out of memory");
    if (st != MS_OK) *n_ids = n0;
    sb_free(&s.scratch);
    ms_chat_parser_free(p);
    return st;
}
