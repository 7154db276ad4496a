/* server/toolcall.c - tool calls whose arguments validate against the tool's
 * JSON Schema: the token-level constraint around K3's call markup.
 *
 * Owns: a request's tools as the constraint needs them (srv_tools: each
 *   tool's call tag and parameters schema, and the ids of the json segment's
 *   markup), and the per-choice state machine (srv_tcall) the worker's picker
 *   consults before and after every pick.
 * Idea: K3 writes a call as open(call, tool=NAME, index=K), then either one
 *   argument segment per member or one json segment with the raw arguments,
 *   then close(call) (docs/spec/kimi-k3.md, section 6). The constraint makes
 *   every call take the json segment and runs the tool's grammar
 *   (ms_grammar, end token <|close|>) over the raw arguments. The machine
 *   watches every output id, forced or sampled:
 *
 *     FREE --<|open|>--> TAG --<|sep|>, tag = a call of tool X--> OPEN
 *       ^                 | <|sep|>, any other tag                 | forced: <|open|>json type="object"<|sep|>
 *       +-----------------+                                        v
 *       +---- forced: json<|sep|><|close|>call<|sep|> <-- CLOSE <--<|close|>-- ARGS (X's grammar)
 *
 *   In TAG the tag's bytes are free unless they start with 'c' (no other K3
 *   tag does): then only tokens that continue `call tool="X" index="K"` for
 *   one of the tools X (K = calls so far) are allowed, and <|sep|> once one
 *   is complete. With tool_choice "required" the first tag
 *   after the forced ids (which end with its <|open|>) must be a call.
 *   Forced ids are picked without the sampler (no draw).
 * Invariants: 1. a call the machine let close holds arguments its tool's
 *   grammar accepted, so the parsed reply's arguments validate;
 *   2. the masks and forced ids depend only on the ids so far, so greedy and
 *   seeded replies stay bit-reproducible at every budget;
 *   3. srv_tcall_in_call() is 1 from a call's tag to its close(call): a reply
 *   cut there does not present that call (docs/SERVER.md, tool calls).
 * Does not: constrain anything outside a call's tag and arguments (content,
 *   reasoning and the number of calls are the model's), or touch the session.
 */
#include "server/srv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_tools {
    int n;
    int required;               /* the first tag after the forced ids must be a call */
    char **tag;                 /* `call tool="NAME" index="` (attribute-escaped) */
    char **schema;              /* the parameters schema, compact JSON */
    int32_t *open_args, *close_args;    /* <|open|>json type="object"<|sep|>; <|close|>json<|sep|><|close|>call<|sep|> */
    int64_t n_open_args, n_close_args;
    size_t max_tag;             /* longest tag + room for the index */
};

/* A tool without parameters takes exactly {}. */
const char srv_no_params_schema[] = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}";

void srv_tools_free(srv_tools *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        if (t->tag) free(t->tag[i]);
        if (t->schema) free(t->schema[i]);
    }
    free(t->tag);
    free(t->schema);
    free(t->open_args);
    free(t->close_args);
    free(t);
}

/* `call tool="NAME" index="` with & and " escaped as the renderer does. */
static char *call_tag(const char *name) {
    srv_buf b = {0};
    srv_buf_add(&b, "call tool=\"", 11);
    for (const char *p = name; *p; p++) {
        if (*p == '&') srv_buf_add(&b, "&amp;", 5);
        else if (*p == '"') srv_buf_add(&b, "&quot;", 6);
        else srv_buf_add(&b, p, 1);
    }
    if (srv_buf_add(&b, "\" index=\"", 9) != 0) { srv_buf_free(&b); return NULL; }
    return b.p;
}

/* The bytes of ids[from, to) into buf (NUL-terminated, truncated to n - 1). */
static void ids_text(srv *s, const int32_t *ids, int64_t from, int64_t to, char *buf, size_t n) {
    size_t at = 0;
    for (int64_t i = from; i < to; i++) {
        const char *b;
        int64_t len = ms_token_bytes(s->e, ids[i], &b);
        if (len <= 0 || at + (size_t)len >= n) continue;
        memcpy(buf + at, b, (size_t)len);
        at += (size_t)len;
    }
    buf[at] = 0;
}

/* The ids of the json segment's markup, cut from a rendered call whose
 * arguments are not JSON (so the renderer writes them raw in a json segment):
 * ... <|open|>call ...<|sep|> <|open|>json type="object"<|sep|> @ <|close|>json<|sep|><|close|>call<|sep|> ... */
static int markup_ids(srv *s, srv_tools *t) {
    ms_chat_format f = { NULL, 0, NULL, 0 };
    ms_tool_call call = { "x", "@", 0 };
    ms_message m;
    memset(&m, 0, sizeof m);
    m.role = "assistant";
    m.content = "";
    m.tool_calls = &call;
    m.n_tool_calls = 1;
    int32_t *r = NULL;
    int64_t n = 0, open_at = -1, sep_at = -1, close_at = -1, end_at = -1;
    char msg[256], txt[64];
    if (ms_chat_tokens(s->e, &m, 1, &f, 1, &r, &n, msg, sizeof msg) != MS_OK) return -1;
    for (int64_t i = 0; i < n && open_at < 0; i++) {
        if (r[i] != s->id_open) continue;
        int64_t k = i + 1;
        while (k < n && r[k] != s->id_sep) k++;
        ids_text(s, r, i + 1, k, txt, sizeof txt);
        if (k < n && !strcmp(txt, "json type=\"object\"")) { open_at = i; sep_at = k; }
    }
    for (int64_t i = sep_at + 1; open_at >= 0 && i < n && close_at < 0; i++)
        if (r[i] == s->id_close) close_at = i;
    for (int64_t i = close_at + 1, seps = 0; close_at >= 0 && i < n && end_at < 0; i++)
        if (r[i] == s->id_sep && ++seps == 2) end_at = i + 1;
    if (end_at > 0) ids_text(s, r, close_at, end_at, txt, sizeof txt);
    int rc = -1;
    if (end_at > 0 && !strcmp(txt, "<|close|>json<|sep|><|close|>call<|sep|>")) {
        t->n_open_args = sep_at + 1 - open_at;
        t->n_close_args = end_at - close_at;
        t->open_args = malloc((size_t)t->n_open_args * sizeof *t->open_args);
        t->close_args = malloc((size_t)t->n_close_args * sizeof *t->close_args);
        if (t->open_args && t->close_args) {
            memcpy(t->open_args, r + open_at, (size_t)t->n_open_args * sizeof *r);
            memcpy(t->close_args, r + close_at, (size_t)t->n_close_args * sizeof *r);
            rc = 0;
        }
    }
    free(r);
    return rc;
}

int srv_tools_build(srv *s, const json_t *tools, int required, srv_tools **out, srv_err *e) {
    *out = NULL;
    srv_tools *t = calloc(1, sizeof *t);
    const size_t n = json_array_size(tools);
    if (t) {
        t->tag = calloc(n ? n : 1, sizeof *t->tag);
        t->schema = calloc(n ? n : 1, sizeof *t->schema);
    }
    if (!t || !t->tag || !t->schema) {
        srv_tools_free(t);
        return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    t->required = required;
    for (size_t i = 0; i < n; i++, t->n++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const json_t *p = json_object_get(fn, "parameters");
        if (p && !json_is_null(p) && !json_is_object(p)) {
            srv_tools_free(t);
            return srv_err_set(e, 400, "invalid_request_error", "tools", "invalid_type",
                               "tools[%zu].function.parameters must be a JSON Schema object", i);
        }
        t->tag[i] = call_tag(json_string_value(json_object_get(fn, "name")));
        t->schema[i] = json_is_object(p) ? json_dumps(p, JSON_COMPACT) : strdup(srv_no_params_schema);
        if (!t->tag[i] || !t->schema[i]) {
            t->n++;
            srv_tools_free(t);
            return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        }
        if (strlen(t->tag[i]) + 24 > t->max_tag) t->max_tag = strlen(t->tag[i]) + 24;
        char msg[256];
        if (ms_grammar_check(t->schema[i], strlen(t->schema[i]), msg, sizeof msg) != MS_OK) {
            t->n++;
            srv_tools_free(t);
            return srv_err_set(e, 400, "invalid_request_error", "tools", "invalid_value",
                               "tools[%zu].function.parameters: %s", i, msg);
        }
    }
    if (markup_ids(s, t) != 0 || t->close_args[0] != s->id_close) {
        srv_tools_free(t);
        return srv_err_set(e, 500, "server_error", "tools", NULL, "cannot render the tool-call markup");
    }
    *out = t;
    return 0;
}

void srv_json_compact(srv_buf *out, const char *t, size_t n) {
    int in_str = 0, esc = 0;
    size_t run = 0;             /* start of the bytes not yet copied */
    for (size_t i = 0; i < n; i++) {
        const char ch = t[i];
        if (in_str) {
            if (esc) esc = 0;
            else if (ch == '\\') esc = 1;
            else if (ch == '"') in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            srv_buf_add(out, t + run, i - run);
            run = i + 1;
        }
    }
    srv_buf_add(out, t + run, n - run);
}

/* ---- the machine -------------------------------------------------------------- */

enum { TC_FREE, TC_TAG, TC_OPEN, TC_ARGS, TC_CLOSE };

int srv_tcall_init(srv_tcall *c, srv *s, const srv_tools *t, ms_sampler *smp) {
    memset(c, 0, sizeof *c);
    c->s = s;
    c->t = t;
    c->smp = smp;
    c->tag = malloc(t->max_tag);
    c->alt = calloc((size_t)(t->n ? t->n : 1), sizeof *c->alt);
    c->alt_len = calloc((size_t)(t->n ? t->n : 1), sizeof *c->alt_len);
    c->w = malloc((size_t)s->info.n_vocab * sizeof *c->w);
    if (!c->tag || !c->alt || !c->alt_len || !c->w) return -1;
    for (int i = 0; i < t->n; i++)
        if (!(c->alt[i] = malloc(t->max_tag))) return -1;
    return 0;
}

void srv_tcall_free(srv_tcall *c) {
    if (!c->t) return;
    ms_sampler_set_grammar(c->smp, NULL);
    ms_grammar_close(c->g);
    for (int i = 0; c->alt && i < c->t->n; i++) free(c->alt[i]);
    free(c->alt);
    free(c->alt_len);
    free(c->tag);
    free(c->w);
    memset(c, 0, sizeof *c);
}

int srv_tcall_in_call(const srv_tcall *c) {
    return c->t && (c->state == TC_OPEN || c->state == TC_ARGS || c->state == TC_CLOSE);
}

/* The first tag after the forced ids of tool_choice "required" must be a call. */
static int strict(const srv_tcall *c) { return c->t->required && c->n_calls == 0; }

/* A tag that starts with 'c' can only be a call (no other K3 tag starts
 * so): from its first byte on it must spell one. */
static int callish(const char *b, size_t n) { return n > 0 && b[0] == 'c'; }

static int alt_prefix(const srv_tcall *c, const char *b, size_t n) {
    for (int i = 0; i < c->t->n; i++)
        if (n <= c->alt_len[i] && !memcmp(c->alt[i], b, n)) return 1;
    return 0;
}

static int alt_exact(const srv_tcall *c) {
    for (int i = 0; i < c->t->n; i++)
        if (c->n_tag == c->alt_len[i] && !memcmp(c->alt[i], c->tag, c->n_tag)) return i;
    return -1;
}

static void start_tag(srv_tcall *c) {
    c->state = TC_TAG;
    c->n_tag = 0;
    for (int i = 0; i < c->t->n; i++) {
        snprintf(c->alt[i], c->t->max_tag, "%s%lld\"", c->t->tag[i], (long long)c->n_calls);
        c->alt_len[i] = strlen(c->alt[i]);
    }
}

/* The arguments start: the tool's grammar goes on the sampler until <|close|>. */
static int start_args(srv_tcall *c) {
    const char *sc = c->t->schema[c->tool];
    if (ms_grammar_open(c->s->e, sc, strlen(sc), c->s->id_close, &c->g, c->msg, sizeof c->msg) != MS_OK) return -1;
    ms_sampler_set_grammar(c->smp, c->g);
    c->state = TC_ARGS;
    return 0;
}

static int is_marker(const srv *s, int32_t id) {
    if (id == s->id_open || id == s->id_close || id == s->id_sep) return 1;
    for (int i = 0; i < s->n_stop_ids; i++)
        if (id == s->stop_ids[i]) return 1;
    return 0;
}

int srv_tcall_observe(srv_tcall *c, int32_t id) {
    const srv *s = c->s;
    const srv_tools *t = c->t;
    switch (c->state) {
    case TC_FREE:
        if (id == s->id_open) start_tag(c);
        return 0;
    case TC_TAG: {
        if (id == s->id_sep) {
            c->tool = alt_exact(c);
            c->state = c->tool >= 0 ? TC_OPEN : TC_FREE;
            c->pos = 0;
            return 0;
        }
        if (id == s->id_open) { start_tag(c); return 0; }
        const char *b;
        int64_t len = ms_token_bytes(s->e, id, &b);
        if (is_marker(s, id) || len < 0 || c->n_tag + (size_t)len >= t->max_tag) { c->state = TC_FREE; return 0; }
        memcpy(c->tag + c->n_tag, b, (size_t)len);
        c->n_tag += (size_t)len;
        return 0;
    }
    case TC_OPEN:       /* a mismatch comes only from the request's forced ids (a whole forced call) */
        if (id != t->open_args[c->pos]) { c->state = TC_FREE; return 0; }
        return ++c->pos == t->n_open_args ? start_args(c) : 0;
    case TC_ARGS:
        if (id != s->id_close) return 0;    /* the grammar advanced itself in the sampler */
        ms_sampler_set_grammar(c->smp, NULL);
        ms_grammar_close(c->g);
        c->g = NULL;
        c->state = TC_CLOSE;
        c->pos = 1;
        return 0;
    case TC_CLOSE:
        if (id != t->close_args[c->pos]) { c->state = TC_FREE; return 0; }
        if (++c->pos == t->n_close_args) { c->state = TC_FREE; c->n_calls++; }
        return 0;
    }
    return 0;
}

/* TAG: -inf on every id that would make the tag a call of no tool. */
static void mask_tag(srv_tcall *c, float *w) {
    const srv *s = c->s;
    const int64_t V = s->info.n_vocab;
    const int st = strict(c);
    const int may_end = alt_exact(c) >= 0 || (!st && !callish(c->tag, c->n_tag));
    char *b = c->tag;               /* room past n_tag: max_tag bytes in all */
    for (int64_t id = 0; id < V; id++) {
        if (id == s->id_sep) {
            if (!may_end) w[id] = -INFINITY;
            continue;
        }
        const char *tb;
        int64_t len = ms_token_bytes(s->e, (int32_t)id, &tb);
        if (is_marker(s, (int32_t)id) || len <= 0 || c->n_tag + (size_t)len >= c->t->max_tag) {
            if (st || callish(c->tag, c->n_tag)) w[id] = -INFINITY;
            continue;
        }
        memcpy(b + c->n_tag, tb, (size_t)len);
        const size_t n = c->n_tag + (size_t)len;
        if (!alt_prefix(c, b, n) && (st || callish(b, n))) w[id] = -INFINITY;
    }
}

const float *srv_tcall_logits(srv_tcall *c, const float *logits, int32_t *forced) {
    *forced = -1;
    if (c->state == TC_OPEN) { *forced = c->t->open_args[c->pos]; return logits; }
    if (c->state == TC_CLOSE) { *forced = c->t->close_args[c->pos]; return logits; }
    if (c->state != TC_TAG) return logits;
    /* any other tag is free (unless this one must be a call) */
    if (!strict(c) && c->n_tag > 0 && !callish(c->tag, c->n_tag)) return logits;
    memcpy(c->w, logits, (size_t)c->s->info.n_vocab * sizeof *c->w);
    mask_tag(c, c->w);
    return c->w;
}
