/* text/chat_harmony.c - rendering conversations in gpt-oss's harmony format
 * (layout and choices: chat_harmony.h; docs/TOKENIZER.md, "Chat formats").
 *
 * Owns: the harmony sink (ids: pending text encoded as one piece at every
 *   special; text: specials by name), the system / developer / message
 *   layout, and the tool declarations in the template's TypeScript-like
 *   notation.
 * Invariants: a sink's status is sticky (first error wins); text is never
 *   merged across a special; the ids array is only appended to and *n_ids is
 *   restored on error; user text is encoded with specials disabled.
 * Does not: parse model output or close turns (chat_harmony_parse.c).
 */
#include "text/chat_harmony_int.h"

#include <stdio.h>

const char *const harmony_sp_name[H_N] = {"<|start|>", "<|end|>", "<|message|>", "<|channel|>",
                                          "<|return|>", "<|call|>", "<|constrain|>", "<|endoftext|>"};

ms_status harmony_lookup(const ms_tok *t, int32_t sp[H_N], int n_required, ms_err *err) {
    for (int i = 0; i < H_N; i++) {
        sp[i] = ms_tok_special_id(t, harmony_sp_name[i]);
        if (sp[i] < 0 && i < n_required)
            return ms_err_set(err, MS_E_MODEL, "chat (harmony): the tokenizer has no special token %s",
                              harmony_sp_name[i]);
    }
    return MS_OK;
}

/* ---- the sink ------------------------------------------------------------- */

static void hs_text(hsink *s, const char *p, size_t n) {
    if (s->st != MS_OK) return;
    sb_put(&s->pend, p, n);
    if (s->pend.oom) s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory");
}

static void hs_puts(hsink *s, const char *p) { hs_text(s, p, strlen(p)); }

static void hs_flush(hsink *s) {
    if (s->st != MS_OK || s->pend.n == 0) return;
    if (s->tok) s->st = ms_tok_encode(s->tok, s->pend.p, s->pend.n, s->ids, s->n_ids, s->cap, s->err);
    else {
        sb_put(&s->txt, s->pend.p, s->pend.n);
        if (s->txt.oom) s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory");
    }
    sb_reset(&s->pend);
}

void harmony_emit_s(hsink *s, int which) {
    hs_flush(s);
    if (s->st != MS_OK) return;
    if (!s->tok) {
        sb_puts(&s->txt, harmony_sp_name[which]);
        if (s->txt.oom) s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory");
        return;
    }
    if (*s->n_ids >= *s->cap) {
        int64_t c = *s->cap > 0 ? *s->cap * 2 : 64;
        int32_t *q = c < INT64_MAX / 8 ? realloc(*s->ids, (size_t)c * sizeof *q) : NULL;
        if (!q) { s->st = ms_err_set(s->err, MS_E_NOMEM, "chat: out of memory growing the id array"); return; }
        *s->ids = q;
        *s->cap = c;
    }
    (*s->ids)[(*s->n_ids)++] = s->sp[which];
}

/* ---- tool declarations ------------------------------------------------------ */

static int str_is(json_t *v, const char *s) { return json_is_string(v) && strcmp(json_string_value(v), s) == 0; }

static void ts_type(strbuf *b, json_t *spec, int depth);

static void ts_array(strbuf *b, json_t *spec, int depth) {
    json_t *items = json_object_get(spec, "items"), *it = json_object_get(items, "type");
    if (!items) sb_puts(b, "any[]");
    else if (str_is(it, "string")) sb_puts(b, "string[]");
    else if (str_is(it, "number") || str_is(it, "integer")) sb_puts(b, "number[]");
    else if (str_is(it, "boolean")) sb_puts(b, "boolean[]");
    else {
        strbuf in = {0};
        ts_type(&in, items, depth + 1);
        if (in.oom) b->oom = 1;
        else if (strcmp(in.p, "object | object") == 0 || in.n > 50) sb_puts(b, "any[]");
        else { sb_put(b, in.p, in.n); sb_puts(b, "[]"); }
        sb_free(&in);
    }
    if (json_is_true(json_object_get(spec, "nullable"))) sb_puts(b, " | null");
}

static void ts_object(strbuf *b, json_t *spec, int depth) {
    json_t *props = json_object_get(spec, "properties"), *req = json_object_get(spec, "required");
    if (!json_is_object(props) || json_object_size(props) == 0) { sb_puts(b, "object"); return; }
    sb_puts(b, "{\n");
    const char *k;
    json_t *v;
    size_t i = 0, n = json_object_size(props);
    json_object_foreach(props, k, v) {
        sb_puts(b, k);
        int required = 0;
        for (size_t j = 0; j < json_array_size(req); j++) required |= str_is(json_array_get(req, j), k);
        sb_puts(b, required ? ": " : "?: ");
        ts_type(b, v, depth + 1);
        if (++i < n) sb_puts(b, ", ");
    }
    sb_puts(b, "}");
}

/* The template's render_typescript_type (nesting capped; deeper is "any"). */
static void ts_type(strbuf *b, json_t *spec, int depth) {
    json_t *ty = json_object_get(spec, "type"), *one = json_object_get(spec, "oneOf");
    if (depth > 16 || !json_is_object(spec)) { sb_puts(b, "any"); return; }
    if (str_is(ty, "array")) ts_array(b, spec, depth);
    else if (json_is_array(ty) && json_array_size(ty) > 0) {
        for (size_t i = 0; i < json_array_size(ty); i++) {
            if (i) sb_puts(b, " | ");
            json_t *x = json_array_get(ty, i);
            sb_puts(b, json_is_string(x) ? json_string_value(x) : "any");
        }
    } else if (json_is_array(one) && json_array_size(one) > 0) {
        int has_object = 0;
        for (size_t i = 0; i < json_array_size(one); i++)
            has_object |= str_is(json_object_get(json_array_get(one, i), "type"), "object");
        if (has_object && json_array_size(one) > 1) { sb_puts(b, "any"); return; }
        for (size_t i = 0; i < json_array_size(one); i++) {
            if (i) sb_puts(b, " | ");
            ts_type(b, json_array_get(one, i), depth + 1);
        }
    } else if (str_is(ty, "string")) {
        json_t *en = json_object_get(spec, "enum");
        if (json_is_array(en) && json_array_size(en) > 0) {
            for (size_t i = 0; i < json_array_size(en); i++) {
                json_t *x = json_array_get(en, i);
                sb_puts(b, i ? " | \"" : "\"");
                if (json_is_string(x)) sb_puts(b, json_string_value(x));
                else chat_put_json(b, x, 0);
                sb_putc(b, '"');
            }
        } else {
            sb_puts(b, "string");
            if (json_is_true(json_object_get(spec, "nullable"))) sb_puts(b, " | null");
        }
    } else if (str_is(ty, "number") || str_is(ty, "integer")) sb_puts(b, "number");
    else if (str_is(ty, "boolean")) sb_puts(b, "boolean");
    else if (str_is(ty, "object")) ts_object(b, spec, depth);
    else sb_puts(b, "any");
}

/* One tool (OpenAI form or a bare function object) of the namespace. */
static void ts_tool(strbuf *b, json_t *tool) {
    json_t *fn = json_object_get(tool, "function");
    if (!json_is_object(fn)) fn = tool;
    json_t *name = json_object_get(fn, "name"), *desc = json_object_get(fn, "description");
    json_t *params = json_object_get(fn, "parameters"), *props = json_object_get(params, "properties");
    json_t *req = json_object_get(params, "required");
    if (json_is_string(desc)) { sb_puts(b, "// "); sb_puts(b, json_string_value(desc)); sb_putc(b, '\n'); }
    sb_puts(b, "type ");
    sb_puts(b, json_is_string(name) ? json_string_value(name) : "");
    sb_puts(b, " = ");
    if (!json_is_object(props) || json_object_size(props) == 0) { sb_puts(b, "() => any;\n\n"); return; }
    sb_puts(b, "(_: {\n");
    const char *k;
    json_t *v;
    json_object_foreach(props, k, v) {
        json_t *pd = json_object_get(v, "description"), *def = json_object_get(v, "default");
        if (json_is_string(pd)) { sb_puts(b, "// "); sb_puts(b, json_string_value(pd)); sb_putc(b, '\n'); }
        sb_puts(b, k);
        int required = 0;
        for (size_t j = 0; j < json_array_size(req); j++) required |= str_is(json_array_get(req, j), k);
        sb_puts(b, required ? ": " : "?: ");
        ts_type(b, v, 0);
        if (def) {   /* the template writes an enum's default raw, others as JSON */
            sb_puts(b, ", // default: ");
            if (json_object_get(v, "enum") && json_is_string(def)) sb_puts(b, json_string_value(def));
            else chat_put_json(b, def, 0);
        }
        sb_puts(b, ",\n");
    }
    sb_puts(b, "}) => any;\n\n");
}

/* "## functions\n\nnamespace functions {\n\n" ... "} // namespace functions";
 * *out NULL when there are no tools. */
static ms_status tools_namespace(const char *tools_json, char **out, ms_err *err) {
    *out = NULL;
    if (!tools_json || strspn(tools_json, " \t\r\n") == strlen(tools_json)) return MS_OK;
    json_error_t je;
    json_t *v = json_loads(tools_json, 0, &je);
    if (!json_is_array(v)) {
        json_decref(v);
        return ms_err_set(err, MS_E_USAGE, "chat: tools: expected a JSON array of tool definitions");
    }
    ms_status st = MS_OK;
    strbuf b = {0};
    for (size_t i = 0; i < json_array_size(v) && st == MS_OK; i++)
        if (!json_is_object(json_array_get(v, i)))
            st = ms_err_set(err, MS_E_USAGE, "chat: tools[%zu]: expected an object, found %s", i,
                            chat_jtype(json_array_get(v, i)));
    if (st == MS_OK && json_array_size(v) > 0) {
        sb_puts(&b, "## functions\n\nnamespace functions {\n\n");
        for (size_t i = 0; i < json_array_size(v); i++) ts_tool(&b, json_array_get(v, i));
        sb_puts(&b, "} // namespace functions");
        *out = sb_take(&b, NULL);
        if (!*out) st = ms_err_set(err, MS_E_NOMEM, "chat: out of memory");
    }
    sb_free(&b);
    json_decref(v);
    return st;
}

/* ---- messages -------------------------------------------------------------- */

static const char *effort_word(ms_chat_effort e) {
    return e == MS_CHAT_EFFORT_LOW ? "low" : e == MS_CHAT_EFFORT_HIGH || e == MS_CHAT_EFFORT_MAX ? "high" : "medium";
}

static void msg(hsink *s, const char *header, const char *channel, const char *body, int end) {
    harmony_emit_s(s, H_START);
    hs_puts(s, header);
    if (channel) {
        harmony_emit_s(s, H_CHANNEL);
        hs_puts(s, channel);
    }
    harmony_emit_s(s, H_MESSAGE);
    hs_puts(s, body ? body : "");
    harmony_emit_s(s, end);
}

static void render_system(hsink *s, const ms_chat_opts *o, int tools) {
    harmony_emit_s(s, H_START);
    hs_puts(s, "system");
    harmony_emit_s(s, H_MESSAGE);
    hs_puts(s, "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n");
    if (o->date) { hs_puts(s, "Current date: "); hs_puts(s, o->date); hs_puts(s, "\n"); }
    hs_puts(s, "\nReasoning: ");
    hs_puts(s, effort_word(o->effort));
    hs_puts(s, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.");
    if (tools) hs_puts(s, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    harmony_emit_s(s, H_END);
}

static void render_developer(hsink *s, const char *instructions, const char *tools) {
    harmony_emit_s(s, H_START);
    hs_puts(s, "developer");
    harmony_emit_s(s, H_MESSAGE);
    if (instructions && instructions[0]) {
        hs_puts(s, "# Instructions\n\n");
        hs_puts(s, instructions);
        hs_puts(s, "\n\n");
    }
    if (tools) { hs_puts(s, "# Tools\n\n"); hs_puts(s, tools); }
    harmony_emit_s(s, H_END);
}

static void render_calls(hsink *s, const ms_chat_msg *m, int later_final) {
    const char *r = m->reasoning && m->reasoning[0] ? m->reasoning : NULL;
    const char *c = m->content && m->content[0] ? m->content : NULL;
    if (!later_final && (r || c)) msg(s, "assistant", "analysis", r ? r : c, H_END);
    if (!later_final && r && c) msg(s, "assistant", "commentary", c, H_END);
    for (int64_t j = 0; j < m->n_calls; j++) {
        const ms_chat_call *call = &m->calls[j];
        const char *a = call->arguments;
        if (!a || strspn(a, " \t\r\n") == strlen(a)) a = "{}";
        harmony_emit_s(s, H_START);
        hs_puts(s, "assistant to=functions.");
        hs_puts(s, call->name);
        harmony_emit_s(s, H_CHANNEL);
        hs_puts(s, "commentary json");
        harmony_emit_s(s, H_MESSAGE);
        hs_puts(s, a);
        harmony_emit_s(s, H_CALL);
    }
}

static void render_msgs(hsink *s, const ms_chat_msg *msgs, int64_t n, int64_t from, const ms_chat_opts *o) {
    for (int64_t i = from; i < n && s->st == MS_OK; i++) {
        const ms_chat_msg *m = &msgs[i];
        if (m->role == MS_CHAT_SYSTEM) {
            render_developer(s, m->content, NULL);
        } else if (m->role == MS_CHAT_USER) {
            msg(s, "user", NULL, m->content, H_END);
        } else if (m->role == MS_CHAT_TOOL) {
            harmony_emit_s(s, H_START);
            hs_puts(s, "functions.");
            hs_puts(s, m->tool_name);
            hs_puts(s, " to=assistant");
            harmony_emit_s(s, H_CHANNEL);
            hs_puts(s, "commentary");
            harmony_emit_s(s, H_MESSAGE);
            hs_puts(s, m->content ? m->content : "");
            harmony_emit_s(s, H_END);
        } else if (m->n_calls > 0) {
            int later_final = 0;
            for (int64_t j = i + 1; j < n; j++)
                later_final |= msgs[j].role == MS_CHAT_ASSISTANT && msgs[j].n_calls == 0;
            render_calls(s, m, later_final);
        } else if (i == n - 1 && !o->add_generation_prompt) {
            if (m->reasoning) msg(s, "assistant", "analysis", m->reasoning, H_END);
            msg(s, "assistant", "final", m->content, H_RETURN);
        } else {
            msg(s, "assistant", "final", m->content, H_END);
        }
    }
}

static ms_status check(const ms_chat_msg *msgs, int64_t n, const ms_chat_opts *o, ms_err *err) {
    if (n < 0 || (n > 0 && !msgs)) return ms_err_set(err, MS_E_USAGE, "chat: expected n_msgs >= 0 and a message array");
    if ((int)o->effort < MS_CHAT_EFFORT_NONE || (int)o->effort > MS_CHAT_EFFORT_MEDIUM)
        return ms_err_set(err, MS_E_USAGE, "chat: reasoning effort %d is not none/low/medium/high/max", (int)o->effort);
    for (int64_t i = 0; i < n; i++) {
        const ms_chat_msg *m = &msgs[i];
        if ((int)m->role < MS_CHAT_SYSTEM || (int)m->role > MS_CHAT_TOOL)
            return ms_err_set(err, MS_E_USAGE, "chat: message %lld: role %d is not system/user/assistant/tool",
                              (long long)i, (int)m->role);
        if (m->role != MS_CHAT_ASSISTANT && (m->reasoning || m->n_calls))
            return ms_err_set(err, MS_E_USAGE, "chat: message %lld: only an assistant message has reasoning or "
                              "tool calls", (long long)i);
        if (m->n_calls < 0 || (m->n_calls > 0 && !m->calls))
            return ms_err_set(err, MS_E_USAGE, "chat: message %lld: expected n_calls >= 0 with a call array",
                              (long long)i);
        for (int64_t j = 0; j < m->n_calls; j++)
            if (!m->calls[j].name || !m->calls[j].name[0])
                return ms_err_set(err, MS_E_USAGE, "chat: message %lld call %lld: expected a tool name",
                                  (long long)i, (long long)j);
        if (m->role == MS_CHAT_TOOL && (!m->tool_name || !m->tool_name[0]))
            return ms_err_set(err, MS_E_USAGE, "chat: message %lld: a tool result needs tool_name", (long long)i);
        if (m->role != MS_CHAT_TOOL && m->tool_name)
            return ms_err_set(err, MS_E_USAGE, "chat: message %lld: tool_name on a non-tool message", (long long)i);
    }
    return MS_OK;
}

/* The shared body of the four render entry points. */
static ms_status render(hsink *s, const ms_chat_msg *msgs, int64_t n, const ms_chat_opts *o, int preamble) {
    ms_chat_opts def = ms_chat_default_opts();
    if (!o) o = &def;
    ms_status st = check(msgs, n, o, s->err);
    if (st != MS_OK) return st;
    int64_t from = 0;
    if (preamble) {
        char *tools = NULL;
        if ((st = tools_namespace(o->tools_json, &tools, s->err)) != MS_OK) return st;
        render_system(s, o, tools != NULL);
        const char *dev = n > 0 && msgs[0].role == MS_CHAT_SYSTEM ? (msgs[0].content ? msgs[0].content : "") : NULL;
        if (dev) from = 1;
        if ((dev && dev[0]) || tools) render_developer(s, dev, tools);
        free(tools);
    }
    render_msgs(s, msgs, n, from, o);
    if (o->add_generation_prompt) {
        harmony_emit_s(s, H_START);
        hs_puts(s, "assistant");
    }
    hs_flush(s);
    return s->st;
}

static ms_status render_ids(const ms_tok *t, const ms_chat_msg *msgs, int64_t n, const ms_chat_opts *o,
                            int preamble, int32_t **ids, int64_t *n_ids, int64_t *cap, ms_err *err) {
    hsink s;
    memset(&s, 0, sizeof s);
    s.tok = t;
    s.ids = ids;
    s.n_ids = n_ids;
    s.cap = cap;
    s.err = err;
    int64_t n0 = *n_ids;
    ms_status st = harmony_lookup(t, s.sp, H_N_RENDER, err);
    if (st == MS_OK) st = render(&s, msgs, n, o, preamble);
    sb_free(&s.pend);
    if (st != MS_OK) *n_ids = n0;
    return st;
}

static ms_status render_txt(const ms_chat_msg *msgs, int64_t n, const ms_chat_opts *o, int preamble, char **out,
                            size_t *len, ms_err *err) {
    hsink s;
    memset(&s, 0, sizeof s);
    s.err = err;
    *out = NULL;
    if (len) *len = 0;
    ms_status st = render(&s, msgs, n, o, preamble);
    sb_free(&s.pend);
    if (st == MS_OK) {
        sb_reserve(&s.txt, 0);
        *out = sb_take(&s.txt, len);
        if (!*out) st = ms_err_set(err, MS_E_NOMEM, "chat: out of memory");
    }
    sb_free(&s.txt);
    return st;
}

ms_status ms_harmony_render(const ms_tok *t, const ms_chat_msg *msgs, int64_t n_msgs, const ms_chat_opts *o,
                            int32_t **ids, int64_t *n_ids, int64_t *cap, ms_err *err) {
    return render_ids(t, msgs, n_msgs, o, 1, ids, n_ids, cap, err);
}

ms_status ms_harmony_render_append(const ms_tok *t, const ms_chat_msg *msgs, int64_t n_msgs,
                                   const ms_chat_opts *o, int32_t **ids, int64_t *n_ids, int64_t *cap,
                                   ms_err *err) {
    return render_ids(t, msgs, n_msgs, o, 0, ids, n_ids, cap, err);
}

ms_status ms_harmony_render_text(const ms_chat_msg *msgs, int64_t n_msgs, const ms_chat_opts *o, char **out,
                                 size_t *len, ms_err *err) {
    return render_txt(msgs, n_msgs, o, 1, out, len, err);
}

ms_status ms_harmony_render_append_text(const ms_chat_msg *msgs, int64_t n_msgs, const ms_chat_opts *o,
                                        char **out, size_t *len, ms_err *err) {
    return render_txt(msgs, n_msgs, o, 0, out, len, err);
}
