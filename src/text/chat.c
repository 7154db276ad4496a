/* text/chat.c - the Kimi K3 chat format: renderer, turn closing, output parser.
 *
 * Owns: the implementation of text/chat.h. The data model, the exact segment
 *   layout and all documented choices (effort wording, argument value text,
 *   JSON writer, how a turn is closed) are described there.
 * Idea: one segment sink with two back ends (ids: ms_tok_encode per T and one
 *   id per S; text: names of specials) so the id and text renders cannot
 *   drift apart; one parser state machine (events on a tag stack) serves
 *   both ms_chat_parse and ms_chat_close_turn, so what the closer completes
 *   is exactly what the parser saw open.
 * Invariants: a sink's status is sticky (first error wins; later emits are
 *   no-ops); the ids array is only appended to and *n_ids is restored on
 *   error; a parser's reasoning / content buffers are always NUL terminated
 *   and only grow; the parser's tag stack has the message frame at the
 *   bottom until close(message).
 * Does not: touch the tokenizer's internals (header only), merge text across
 *   segments, or fail on bad model output.
 */
#include "text/chat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable byte buffer ------------------------------------------------ */

typedef struct strbuf {
    char *p;    /* NUL terminated when non-NULL */
    size_t n;
    size_t cap; /* allocated bytes, > n when p != NULL */
    int oom;    /* sticky allocation failure */
} strbuf;

static int sb_reserve(strbuf *b, size_t extra) {
    if (b->oom) return -1;
    if (extra > SIZE_MAX / 2 - b->n - 1) { b->oom = 1; return -1; }
    size_t need = b->n + extra + 1;
    if (need <= b->cap) return 0;
    size_t c = b->cap ? b->cap : 64;
    while (c < need) c *= 2;
    char *q = realloc(b->p, c);
    if (!q) { b->oom = 1; return -1; }
    b->p = q;
    b->cap = c;
    b->p[b->n] = 0;
    return 0;
}

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (sb_reserve(b, n) < 0) return;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_putc(strbuf *b, char c) { sb_put(b, &c, 1); }

static void sb_reset(strbuf *b) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
}

static void sb_free(strbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Take the buffer (never NULL unless out of memory); the strbuf is emptied. */
static char *sb_take(strbuf *b, size_t *len) {
    if (sb_reserve(b, 0) < 0) return NULL;
    char *p = b->p;
    if (len) *len = b->n;
    memset(b, 0, sizeof *b);
    return p;
}

/* ---- JSON writer --------------------------------------------------------- */

/* Shortest digits that read back as x, laid out as Python's repr(float):
 * fixed notation for decimal exponents in [-4, 16), else d.ddde+XX. */
static void put_real(strbuf *b, double x) {
    char buf[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    char dig[24];
    int nd = 0;
    const char *p = buf;
    if (*p == '-') { sb_putc(b, '-'); p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < (int)sizeof dig) dig[nd++] = *p;
    int e = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) sb_putc(b, i < nd ? dig[i] : '0');
            sb_putc(b, '.');
            if (nd > e + 1) sb_put(b, dig + e + 1, (size_t)(nd - e - 1));
            else sb_putc(b, '0');
        } else {
            sb_puts(b, "0.");
            for (int i = 0; i < -e - 1; i++) sb_putc(b, '0');
            sb_put(b, dig, (size_t)nd);
        }
    } else {
        sb_putc(b, dig[0]);
        if (nd > 1) {
            sb_putc(b, '.');
            sb_put(b, dig + 1, (size_t)(nd - 1));
        }
        char eb[16];
        snprintf(eb, sizeof eb, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
        sb_puts(b, eb);
    }
}

/* A JSON string as Python's json.dumps(ensure_ascii=False) writes it. */
static void put_jstr(strbuf *b, const char *s, size_t n) {
    sb_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (esc) {
            sb_put(b, s + run, i - run);
            sb_puts(b, esc);
            run = i + 1;
        }
    }
    sb_put(b, s + run, n - run);
    sb_putc(b, '"');
}

typedef struct kv {
    const char *k;
    size_t kl;
    json_t *v;
} kv;

static int kv_cmp(const void *a, const void *b) {
    const kv *x = a, *y = b;
    size_t m = x->kl < y->kl ? x->kl : y->kl;
    int c = memcmp(x->k, y->k, m);
    if (c) return c;
    return (x->kl > y->kl) - (x->kl < y->kl);
}

/* Compact JSON: no spaces, "," and ":"; keys sorted by byte (= code point)
 * order when sort, else in jansson's insertion order. */
static void put_json(strbuf *b, json_t *v, int sort) {
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        kv *a = n ? malloc(n * sizeof *a) : NULL;
        if (n && !a) { b->oom = 1; return; }
        const char *k;
        size_t kl;
        json_t *x;
        json_object_keylen_foreach(v, k, kl, x) {
            if (i < n) a[i++] = (kv){k, kl, x};
        }
        if (sort && i > 1) qsort(a, i, sizeof *a, kv_cmp);
        sb_putc(b, '{');
        for (size_t j = 0; j < i; j++) {
            if (j) sb_putc(b, ',');
            put_jstr(b, a[j].k, a[j].kl);
            sb_putc(b, ':');
            put_json(b, a[j].v, sort);
        }
        sb_putc(b, '}');
        free(a);
        break;
    }
    case JSON_ARRAY:
        sb_putc(b, '[');
        for (size_t j = 0; j < json_array_size(v); j++) {
            if (j) sb_putc(b, ',');
            put_json(b, json_array_get(v, j), sort);
        }
        sb_putc(b, ']');
        break;
    case JSON_STRING: put_jstr(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        sb_puts(b, num);
        break;
    case JSON_REAL: put_real(b, json_real_value(v)); break;
    case JSON_TRUE: sb_puts(b, "true"); break;
    case JSON_FALSE: sb_puts(b, "false"); break;
    case JSON_NULL: sb_puts(b, "null"); break;
    }
}

/* The spec's type attribute of a value. */
static const char *jtype(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER:
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    }
    return "null";
}

ms_status ms_chat_json_normalize(const char *text, size_t n, int sort_keys, char **out,
                                 ms_err *err) {
    *out = NULL;
    json_error_t je;
    json_t *v = json_loadb(text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v)
        return ms_err_set(err, MS_E_USAGE, "chat: expected JSON, found an error at line %d column %d: %s",
                          je.line, je.column, je.text);
    strbuf b = {0};
    put_json(&b, v, sort_keys);
    json_decref(v);
    *out = sb_take(&b, NULL);
    if (!*out) return ms_err_set(err, MS_E_NOMEM, "chat: out of memory writing JSON");
    return MS_OK;
}

/* ---- segments ------------------------------------------------------------ */

enum { SP_OPEN, SP_CLOSE, SP_SEP, SP_END, SP_N };
static const char *const sp_name[SP_N] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};

static ms_status lookup_specials(const ms_tok *t, int32_t sp[SP_N], ms_err *err) {
    for (int i = 0; i < SP_N; i++) {
        sp[i] = ms_tok_special_id(t, sp_name[i]);
        if (sp[i] < 0)
            return ms_err_set(err, MS_E_MODEL, "chat: the tokenizer has no special token %s "
                              "(expected in tokenizer_config.json added_tokens_decoder)", sp_name[i]);
    }
    return MS_OK;
}

/* Where segments go: ids (tok != NULL) or readable text. Status is sticky. */
typedef struct sink {
    const ms_tok *tok;
    int32_t sp[SP_N];
    int32_t **ids;
    int64_t *n_ids, *cap;
    strbuf txt;
    strbuf scratch; /* attribute / argument value text */
    ms_err *err;
    ms_status st;
} sink;

static int push_id(int32_t **ids, int64_t *n, int64_t *cap, int32_t id) {
    if (*n >= *cap) {
        int64_t c = *cap > 0 ? *cap : 64, bytes;
        while (c <= *n) {
            if (ms_mul_i64(c, 2, &c) < 0) return -1;
        }
        if (ms_mul_i64(c, (int64_t)sizeof(int32_t), &bytes) < 0 || (uint64_t)bytes > SIZE_MAX) return -1;
        int32_t *q = realloc(*ids, (size_t)bytes);
        if (!q) return -1;
        *ids = q;
        *cap = c;
    }
    (*ids)[(*n)++] = id;
    return 0;
}

static void emit_s(sink *s, int which) {
    if (s->st != MS_OK) return;
    if (s->tok) {
        if (push_id(s->ids, s->n_ids, s->cap, s->sp[which]) < 0)
            s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory growing the id array");
    } else {
        sb_puts(&s->txt, sp_name[which]);
        if (s->txt.oom) s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory rendering text");
    }
}

/* One T segment, encoded on its own. */
static void emit_t(sink *s, const char *text, size_t n) {
    if (s->st != MS_OK || n == 0) return;
    if (s->tok) {
        s->st = ms_tok_encode(s->tok, text, n, s->ids, s->n_ids, s->cap, s->err);
    } else {
        sb_put(&s->txt, text, n);
        if (s->txt.oom) s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory rendering text");
    }
}

static void emit_ts(sink *s, const char *text) { emit_t(s, text, strlen(text)); }

typedef struct attr {
    const char *k;
    size_t kl;
    const char *v;
    size_t vl;
} attr;

/* ' k="v"' with & and " escaped in v, into the scratch buffer. */
static void put_attr(strbuf *b, const attr *a) {
    sb_putc(b, ' ');
    sb_put(b, a->k, a->kl);
    sb_puts(b, "=\"");
    size_t run = 0;
    for (size_t i = 0; i < a->vl; i++) {
        const char *esc = a->v[i] == '&' ? "&amp;" : a->v[i] == '"' ? "&quot;" : NULL;
        if (esc) {
            sb_put(b, a->v + run, i - run);
            sb_puts(b, esc);
            run = i + 1;
        }
    }
    sb_put(b, a->v + run, a->vl - run);
    sb_putc(b, '"');
}

static attr attr_of(const char *k, const char *v) { return (attr){k, strlen(k), v, strlen(v)}; }

static void open_tag(sink *s, const char *tag, const attr *attrs, int n_attrs) {
    emit_s(s, SP_OPEN);
    emit_ts(s, tag);
    for (int i = 0; i < n_attrs; i++) {
        sb_reset(&s->scratch);
        put_attr(&s->scratch, &attrs[i]);
        if (s->scratch.oom && s->st == MS_OK) s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory");
        emit_t(s, s->scratch.p, s->scratch.n);
    }
    emit_s(s, SP_SEP);
}

static void close_tag(sink *s, const char *tag, size_t n) {
    emit_s(s, SP_CLOSE);
    emit_t(s, tag, n);
    emit_s(s, SP_SEP);
}

static void close_tags(sink *s, const char *tag) { close_tag(s, tag, strlen(tag)); }

/* ---- rendering ----------------------------------------------------------- */

static const char *const role_name[4] = {"system", "user", "assistant", "tool"};
static const char *const effort_name[4] = {"none", "low", "high", "max"};

ms_chat_opts ms_chat_default_opts(void) {
    ms_chat_opts o;
    memset(&o, 0, sizeof o);
    o.thinking = 0;
    o.effort = MS_CHAT_EFFORT_HIGH;
    o.add_generation_prompt = 1;
    return o;
}

int ms_chat_role_from_name(const char *name) {
    for (int i = 0; name && i < 4; i++)
        if (strcmp(name, role_name[i]) == 0) return i;
    return -1;
}

int ms_chat_effort_from_name(const char *name) {
    for (int i = 0; name && i < 4; i++)
        if (strcmp(name, effort_name[i]) == 0) return i;
    return -1;
}

static int is_blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') return 0;
    return 1;
}

static ms_status check_msgs(const ms_chat_msg *msgs, int64_t n, const ms_chat_opts *o, ms_err *err) {
    if (n < 0 || (n > 0 && !msgs))
        return ms_err_set(err, MS_E_USAGE, "chat: expected n_msgs >= 0 and a message array, found %lld",
                          (long long)n);
    if ((int)o->effort < MS_CHAT_EFFORT_NONE || (int)o->effort > MS_CHAT_EFFORT_MAX)
        return ms_err_set(err, MS_E_USAGE, "chat: thinking effort %d is not none/low/high/max", (int)o->effort);
    for (int64_t i = 0; i < n; i++) {
        const ms_chat_msg *m = &msgs[i];
        if ((int)m->role < MS_CHAT_SYSTEM || (int)m->role > MS_CHAT_TOOL)
            return ms_err_set(err, MS_E_USAGE, "chat: message %lld: role %d is not system/user/assistant/tool",
                              (long long)i, (int)m->role);
        if (m->role != MS_CHAT_ASSISTANT && (m->reasoning || m->n_calls))
            return ms_err_set(err, MS_E_USAGE, "chat: message %lld: only an assistant message has "
                              "reasoning or tool calls, found them on a %s message", (long long)i,
                              role_name[m->role]);
        if (m->n_calls < 0 || (m->n_calls > 0 && !m->calls))
            return ms_err_set(err, MS_E_USAGE, "chat: message %lld: expected n_calls >= 0 with a call "
                              "array, found %lld", (long long)i, (long long)m->n_calls);
        for (int64_t j = 0; j < m->n_calls; j++) {
            if (!m->calls[j].name || m->calls[j].index < 0)
                return ms_err_set(err, MS_E_USAGE, "chat: message %lld call %lld: expected a tool name "
                                  "and an index >= 0", (long long)i, (long long)j);
        }
        if (m->role == MS_CHAT_TOOL && (!m->tool_name || m->tool_index < 0))
            return ms_err_set(err, MS_E_USAGE, "chat: message %lld: a tool result needs tool_name and "
                              "tool_index >= 0", (long long)i);
        if (m->role != MS_CHAT_TOOL && m->tool_name)
            return ms_err_set(err, MS_E_USAGE, "chat: message %lld: tool_name on a %s message",
                              (long long)i, role_name[m->role]);
    }
    return MS_OK;
}

static void render_call(sink *s, const ms_chat_call *c) {
    char idx[32];
    snprintf(idx, sizeof idx, "%lld", (long long)c->index);
    attr ca[2] = {attr_of("tool", c->name), attr_of("index", idx)};
    open_tag(s, "call", ca, 2);
    const char *args = c->arguments ? c->arguments : "";
    if (!is_blank(args)) {
        size_t an = strlen(args);
        json_error_t je;
        json_t *v = json_loadb(args, an, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (json_is_object(v)) {
            const char *k;
            size_t kl;
            json_t *x;
            strbuf val = {0};
            json_object_keylen_foreach(v, k, kl, x) {
                const char *vt;
                size_t vn;
                if (json_is_string(x)) {
                    vt = json_string_value(x);
                    vn = json_string_length(x);
                } else {
                    sb_reset(&val);
                    put_json(&val, x, 0);
                    if (val.oom) break;
                    vt = val.p;
                    vn = val.n;
                }
                attr aa[2] = {{"key", 3, k, kl}, attr_of("type", jtype(x))};
                open_tag(s, "argument", aa, 2);
                emit_t(s, vt, vn);
                close_tags(s, "argument");
            }
            if (val.oom && s->st == MS_OK) s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory");
            sb_free(&val);
        } else {
            attr ja = attr_of("type", v ? jtype(v) : "object");
            open_tag(s, "json", &ja, 1);
            emit_t(s, args, an);
            close_tags(s, "json");
        }
        json_decref(v);
    }
    close_tags(s, "call");
}

static void render_msg(sink *s, const ms_chat_msg *m) {
    const char *content = m->content ? m->content : "";
    char idx[32];
    if (m->role == MS_CHAT_TOOL) {
        snprintf(idx, sizeof idx, "%lld", (long long)m->tool_index);
        attr a[3] = {attr_of("role", "tool"), attr_of("tool", m->tool_name), attr_of("index", idx)};
        open_tag(s, "message", a, 3);
        emit_ts(s, content);
    } else if (m->role == MS_CHAT_ASSISTANT) {
        attr a = attr_of("role", "assistant");
        open_tag(s, "message", &a, 1);
        if (m->reasoning) {
            open_tag(s, "think", NULL, 0);
            emit_ts(s, m->reasoning);
            close_tags(s, "think");
        }
        open_tag(s, "response", NULL, 0);
        emit_ts(s, content);
        close_tags(s, "response");
        if (m->n_calls > 0) {
            open_tag(s, "tools", NULL, 0);
            for (int64_t j = 0; j < m->n_calls; j++) render_call(s, &m->calls[j]);
            close_tags(s, "tools");
        }
    } else {
        attr a = attr_of("role", role_name[m->role]);
        open_tag(s, "message", &a, 1);
        emit_ts(s, content);
    }
    close_tags(s, "message");
    emit_s(s, SP_END);
}

/* The tools array in OpenAI form, compact and key-sorted; *out NULL when
 * there are no tools. */
static ms_status tools_text(const char *tools_json, char **out, ms_err *err) {
    *out = NULL;
    if (!tools_json || is_blank(tools_json)) return MS_OK;
    json_error_t je;
    json_t *v = json_loads(tools_json, 0, &je);
    if (!v)
        return ms_err_set(err, MS_E_USAGE, "chat: tools: expected a JSON array, found an error at "
                          "line %d column %d: %s", je.line, je.column, je.text);
    ms_status st = MS_OK;
    json_t *arr = json_array();
    if (!json_is_array(v)) {
        st = ms_err_set(err, MS_E_USAGE, "chat: tools: expected a JSON array of tool definitions, found %s",
                        jtype(v));
        goto done;
    }
    if (!arr) { st = ms_err_set(err, MS_E_NOMEM, "chat: out of memory"); goto done; }
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_object(e)) {
            st = ms_err_set(err, MS_E_USAGE, "chat: tools[%zu]: expected an object, found %s", i, jtype(e));
            goto done;
        }
        json_t *w = e;
        int wrapped = 0;
        if (!json_object_get(e, "function") && json_object_get(e, "name")) {
            w = json_pack("{s:s,s:O}", "type", "function", "function", e);
            wrapped = 1;
        }
        if (!w || (wrapped ? json_array_append_new(arr, w) : json_array_append(arr, w)) < 0) {
            st = ms_err_set(err, MS_E_NOMEM, "chat: out of memory");
            goto done;
        }
    }
    if (json_array_size(arr) > 0) {
        strbuf b = {0};
        put_json(&b, arr, 1);
        *out = sb_take(&b, NULL);
        if (!*out) st = ms_err_set(err, MS_E_NOMEM, "chat: out of memory");
    }
done:
    json_decref(arr);
    json_decref(v);
    return st;
}

static void render_preamble(sink *s, const ms_chat_opts *o, const char *tools) {
    if (tools) {
        attr a[2] = {attr_of("role", "system"), attr_of("type", "tool-declare")};
        open_tag(s, "message", a, 2);
        strbuf b = {0};
        sb_puts(&b, "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n");
        sb_puts(&b, tools);
        sb_puts(&b, "\n```");
        if (b.oom && s->st == MS_OK) s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory");
        emit_t(s, b.p, b.n);
        sb_free(&b);
        close_tags(s, "message");
        emit_s(s, SP_END);
    }
    if (o->thinking && o->effort != MS_CHAT_EFFORT_NONE) {
        attr a[2] = {attr_of("role", "system"), attr_of("type", "thinking-effort")};
        open_tag(s, "message", a, 2);
        char line[64];
        snprintf(line, sizeof line, "Use thinking effort: %s.", effort_name[o->effort]);
        emit_ts(s, line);
        close_tags(s, "message");
        emit_s(s, SP_END);
    }
}

static void render_gen_prompt(sink *s, const ms_chat_opts *o) {
    attr a = attr_of("role", "assistant");
    open_tag(s, "message", &a, 1);
    open_tag(s, o->thinking ? "think" : "response", NULL, 0);
}

/* The shared body of all four render entry points. */
static ms_status render(sink *s, const ms_chat_msg *msgs, int64_t n, const ms_chat_opts *o,
                        int preamble) {
    ms_chat_opts def = ms_chat_default_opts();
    if (!o) o = &def;
    ms_status st = check_msgs(msgs, n, o, s->err);
    if (st != MS_OK) return st;
    char *tools = NULL;
    if (preamble && (st = tools_text(o->tools_json, &tools, s->err)) != MS_OK) return st;
    if (preamble) render_preamble(s, o, tools);
    free(tools);
    for (int64_t i = 0; i < n; i++) render_msg(s, &msgs[i]);
    if (o->add_generation_prompt) render_gen_prompt(s, o);
    return s->st;
}

static ms_status render_ids(const ms_tok *t, const ms_chat_msg *msgs, int64_t n, const ms_chat_opts *o,
                            int preamble, int32_t **ids, int64_t *n_ids, int64_t *cap, ms_err *err) {
    sink s;
    memset(&s, 0, sizeof s);
    s.tok = t;
    s.ids = ids;
    s.n_ids = n_ids;
    s.cap = cap;
    s.err = err;
    int64_t n0 = *n_ids;
    ms_status st = lookup_specials(t, s.sp, err);
    if (st == MS_OK) st = render(&s, msgs, n, o, preamble);
    sb_free(&s.scratch);
    if (st != MS_OK) *n_ids = n0;
    return st;
}

static ms_status render_txt(const ms_chat_msg *msgs, int64_t n, const ms_chat_opts *o, int preamble,
                            char **out, size_t *len, ms_err *err) {
    sink s;
    memset(&s, 0, sizeof s);
    s.err = err;
    *out = NULL;
    if (len) *len = 0;
    ms_status st = render(&s, msgs, n, o, preamble);
    sb_free(&s.scratch);
    if (st == MS_OK) {
        *out = sb_take(&s.txt, len);
        if (!*out) st = ms_err_set(err, MS_E_NOMEM, "chat: out of memory rendering text");
    }
    sb_free(&s.txt);
    return st;
}

ms_status ms_chat_render(const ms_tok *t, const ms_chat_msg *msgs, int64_t n_msgs,
                         const ms_chat_opts *o, int32_t **ids, int64_t *n_ids,
                         int64_t *cap, ms_err *err) {
    return render_ids(t, msgs, n_msgs, o, 1, ids, n_ids, cap, err);
}

ms_status ms_chat_render_append(const ms_tok *t, const ms_chat_msg *msgs, int64_t n_msgs,
                                const ms_chat_opts *o, int32_t **ids, int64_t *n_ids,
                                int64_t *cap, ms_err *err) {
    return render_ids(t, msgs, n_msgs, o, 0, ids, n_ids, cap, err);
}

ms_status ms_chat_render_text(const ms_chat_msg *msgs, int64_t n_msgs, const ms_chat_opts *o,
                              char **out, size_t *len, ms_err *err) {
    return render_txt(msgs, n_msgs, o, 1, out, len, err);
}

ms_status ms_chat_render_append_text(const ms_chat_msg *msgs, int64_t n_msgs,
                                     const ms_chat_opts *o, char **out, size_t *len,
                                     ms_err *err) {
    return render_txt(msgs, n_msgs, o, 0, out, len, err);
}

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
        if (p->args) put_json(&b, p->args, 0);
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
    ms_status st = lookup_specials(t, p->sp, err);
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
            emit_s(&s, SP_SEP);
            on_sep(p);
        }
        while (p->depth > 0) {
            frame *f = &p->st[p->depth - 1];
            if (f->kind == TG_MESSAGE && !p->saw_response && !p->saw_tools) {
                open_tag(&s, "response", NULL, 0);
                close_tags(&s, "response");
            }
            close_tag(&s, f->name, f->nl);
            pop(p, 1);
        }
        emit_s(&s, SP_END);
    }
    st = s.st;
    if (st == MS_OK && bufs_oom(p)) st = ms_err_set(err, MS_E_NOMEM, "chat: out of memory");
    if (st != MS_OK) *n_ids = n0;
    sb_free(&s.scratch);
    ms_chat_parser_free(p);
    return st;
}
