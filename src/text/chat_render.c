/* text/chat_render.c - rendering conversations in the Kimi K3 chat format
 * (see chat.h for the data model and the exact segment layout).
 *
 * Owns: the segment sink with its two back ends (ids: ms_tok_encode per T and
 *   one id per S; text: names of specials) so the id and text renders cannot
 *   drift apart; tags with escaped attributes; checking a conversation and
 *   rendering it (preamble, tools, messages, calls, the generation prompt).
 * Invariants: a sink's status is sticky (first error wins; later emits are
 *   no-ops); the ids array is only appended to and *n_ids is restored on
 *   error; user text is encoded with specials disabled.
 * Does not: touch the tokenizer's internals (header only), merge text across
 *   segments, or parse model output (chat.c).
 */
#include "text/chat_int.h"

#include <stdio.h>

/* ---- segments ------------------------------------------------------------ */

const char *const chat_sp_name[SP_N] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};

ms_status chat_lookup_specials(const ms_tok *t, int32_t sp[SP_N], ms_err *err) {
    for (int i = 0; i < SP_N; i++) {
        sp[i] = ms_tok_special_id(t, chat_sp_name[i]);
        if (sp[i] < 0)
            return ms_err_set(err, MS_E_MODEL, "chat: the tokenizer has no special token %s "
                              "(expected in tokenizer_config.json added_tokens_decoder)", chat_sp_name[i]);
    }
    return MS_OK;
}


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

void chat_emit_s(sink *s, int which) {
    if (s->st != MS_OK) return;
    if (s->tok) {
        if (push_id(s->ids, s->n_ids, s->cap, s->sp[which]) < 0)
            s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory growing the id array");
    } else {
        sb_puts(&s->txt, chat_sp_name[which]);
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

void chat_open_tag(sink *s, const char *tag, const attr *attrs, int n_attrs) {
    chat_emit_s(s, SP_OPEN);
    emit_ts(s, tag);
    for (int i = 0; i < n_attrs; i++) {
        sb_reset(&s->scratch);
        put_attr(&s->scratch, &attrs[i]);
        if (s->scratch.oom && s->st == MS_OK) s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory");
        emit_t(s, s->scratch.p, s->scratch.n);
    }
    chat_emit_s(s, SP_SEP);
}

void chat_close_tag(sink *s, const char *tag, size_t n) {
    chat_emit_s(s, SP_CLOSE);
    emit_t(s, tag, n);
    chat_emit_s(s, SP_SEP);
}

void chat_close_tags(sink *s, const char *tag) { chat_close_tag(s, tag, strlen(tag)); }


/* ---- rendering ----------------------------------------------------------- */

static const char *const role_name[4] = {"system", "user", "assistant", "tool"};
static const char *const effort_name[5] = {"none", "low", "high", "max", "medium"};

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
    for (int i = 0; name && i < 5; i++)
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
        return ms_err_set(err, MS_E_USAGE, "chat: thinking effort %d is not none/low/high/max%s", (int)o->effort,
                          o->effort == MS_CHAT_EFFORT_MEDIUM ? " (medium is gpt-oss's)" : "");
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
    chat_open_tag(s, "call", ca, 2);
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
                    chat_put_json(&val, x, 0);
                    if (val.oom) break;
                    vt = val.p;
                    vn = val.n;
                }
                attr aa[2] = {{"key", 3, k, kl}, attr_of("type", chat_jtype(x))};
                chat_open_tag(s, "argument", aa, 2);
                emit_t(s, vt, vn);
                chat_close_tags(s, "argument");
            }
            if (val.oom && s->st == MS_OK) s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory");
            sb_free(&val);
        } else {
            attr ja = attr_of("type", v ? chat_jtype(v) : "object");
            chat_open_tag(s, "json", &ja, 1);
            emit_t(s, args, an);
            chat_close_tags(s, "json");
        }
        json_decref(v);
    }
    chat_close_tags(s, "call");
}

static void render_msg(sink *s, const ms_chat_msg *m) {
    const char *content = m->content ? m->content : "";
    char idx[32];
    if (m->role == MS_CHAT_TOOL) {
        snprintf(idx, sizeof idx, "%lld", (long long)m->tool_index);
        attr a[3] = {attr_of("role", "tool"), attr_of("tool", m->tool_name), attr_of("index", idx)};
        chat_open_tag(s, "message", a, 3);
        emit_ts(s, content);
    } else if (m->role == MS_CHAT_ASSISTANT) {
        attr a = attr_of("role", "assistant");
        chat_open_tag(s, "message", &a, 1);
        if (m->reasoning) {
            chat_open_tag(s, "think", NULL, 0);
            emit_ts(s, m->reasoning);
            chat_close_tags(s, "think");
        }
        chat_open_tag(s, "response", NULL, 0);
        emit_ts(s, content);
        chat_close_tags(s, "response");
        if (m->n_calls > 0) {
            chat_open_tag(s, "tools", NULL, 0);
            for (int64_t j = 0; j < m->n_calls; j++) render_call(s, &m->calls[j]);
            chat_close_tags(s, "tools");
        }
    } else {
        attr a = attr_of("role", role_name[m->role]);
        chat_open_tag(s, "message", &a, 1);
        emit_ts(s, content);
    }
    chat_close_tags(s, "message");
    chat_emit_s(s, SP_END);
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
                        chat_jtype(v));
        goto done;
    }
    if (!arr) { st = ms_err_set(err, MS_E_NOMEM, "chat: out of memory"); goto done; }
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_object(e)) {
            st = ms_err_set(err, MS_E_USAGE, "chat: tools[%zu]: expected an object, found %s", i, chat_jtype(e));
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
        chat_put_json(&b, arr, 1);
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
        chat_open_tag(s, "message", a, 2);
        strbuf b = {0};
        sb_puts(&b, "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n");
        sb_puts(&b, tools);
        sb_puts(&b, "\n```");
        if (b.oom && s->st == MS_OK) s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory");
        emit_t(s, b.p, b.n);
        sb_free(&b);
        chat_close_tags(s, "message");
        chat_emit_s(s, SP_END);
    }
    if (o->thinking && o->effort != MS_CHAT_EFFORT_NONE) {
        attr a[2] = {attr_of("role", "system"), attr_of("type", "thinking-effort")};
        chat_open_tag(s, "message", a, 2);
        char line[64];
        snprintf(line, sizeof line, "Use thinking effort: %s.", effort_name[o->effort]);
        emit_ts(s, line);
        chat_close_tags(s, "message");
        chat_emit_s(s, SP_END);
    }
}

static void render_gen_prompt(sink *s, const ms_chat_opts *o) {
    attr a = attr_of("role", "assistant");
    chat_open_tag(s, "message", &a, 1);
    chat_open_tag(s, o->thinking ? "think" : "response", NULL, 0);
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
    ms_status st = chat_lookup_specials(t, s.sp, err);
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

