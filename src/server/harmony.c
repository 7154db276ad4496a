/* server/harmony.c - structured output and tool calls for gpt-oss models
 * (chat format "harmony"): the token-level constraint on the reply's
 * channels, headers and JSON bodies.
 *
 * Owns: a request's constraint as the worker needs it (srv_hspec: the header
 *   id sequences a reply may take, the schemas, the specials masked in the
 *   analysis; under tool_choice "auto" the recipients "functions.NAME" and
 *   the rest of a call's header) and the per-choice state machine (srv_hcon)
 *   the worker's picker consults before and after every pick.
 * Idea: the generation prompt ends with <|start|>assistant. Under the
 *   constraint a reply is an optional analysis message, then the target:
 *
 *     [<|channel|>analysis<|message|> REASONING <|end|><|start|>assistant]
 *     then, response_format:  <|channel|>final<|message|> JSON <|return|>
 *     or, tool_choice:         to=functions.NAME<|channel|>commentary json
 *                              <|message|> ARGS <|call|>
 *                         or   <|channel|>commentary to=functions.NAME
 *                              <|constrain|>json<|message|> ARGS <|call|>
 *
 *   The first call form is the renderer's (chat_harmony.c writes calls of
 *   earlier turns so), the second the one gpt-oss writes on its own; the
 *   parser reads both. Each header is a list of candidate id sequences (the
 *   text between two specials encoded as one piece, as the renderer
 *   encodes it; after the analysis "assistant to=functions.NAME" is one
 *   piece, as in a rendered call). In a header, only ids that continue a
 *   candidate are allowed; when every candidate left has the same next id it
 *   is forced (taken without a draw). The analysis body is the model's: any
 *   ordinary token, or <|end|>; no other special. A JSON body runs the
 *   schema's grammar (sample/json_schema.h) on the sampler, whose end token
 *   (<|return|> for the answer, <|call|> for a call) is allowed only once the
 *   document is complete.
 *
 *     HEAD --a candidate complete--> FREE (analysis) --<|end|>--> HEAD (later)
 *       +--------------------------> BODY (grammar) --end token--> DONE
 *
 *   tool_choice "auto" (srv_hspec_auto) leaves the reply to the model and
 *   follows it as the parser (text/chat_harmony_parse.c) reads it: header
 *   parts (role, after <|channel|>, after <|constrain|>), bodies, between
 *   messages. The parser makes a call of any header holding "to=" (the word
 *   after it is the recipient, "functions.NAME" for a tool). So from the
 *   first "to=" of a header on, only tokens that keep the bytes after it a
 *   prefix of "functions.NAME" for a tool NAME are allowed (a token that
 *   would write "to=" with anything else is masked: only tokens holding '='
 *   can write it); once the recipient is whole, the rest of the header is
 *   forced as the part it is in goes on (role part: the renderer's
 *   <|channel|>commentary json<|message|>; channel part: gpt-oss's
 *   " <|constrain|>json<|message|>"; constrain part: <|message|>), then the
 *   tool's grammar runs until <|call|>:
 *
 *     HDR --"to="--> NAME --recipient whole--> TAIL (forced) --> CALL (grammar)
 *      |                                                    --<|call|>--> DONE
 *      +--<|message|>--> BODY (free) --<|end|>--> IDLE --<|start|>--> HDR
 *
 * Invariants: 1. a reply that reaches DONE holds, in its final or call
 *   message, a document the grammar accepted (under "auto": every call the
 *   parser reads names a tool, and one whose <|call|> was read holds such a
 *   document); 2. the masks and forced ids depend only on the ids so far,
 *   so greedy and seeded replies stay bit-reproducible at every budget;
 *   3. srv_hcon_in_call() is 1 while a call's body is open (the parser
 *   presents a call from its <|message|> on): a reply cut there does not
 *   present it.
 * Does not: mask anything under "auto" but a call's recipient, header rest
 *   and arguments (a reply that opens no call is the model's, token for
 *   token: the only other ids masked are '='-tokens that would open a call
 *   of no tool); offer the commentary preamble channel or a second analysis
 *   message under a forced constraint; or touch the session.
 */
#include "server/srv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HK_ANALYSIS, HK_FINAL, HK_CALL };
enum { SP_START, SP_END, SP_MESSAGE, SP_CHANNEL, SP_RETURN, SP_CALL, SP_CONSTRAIN, SP_N };
static const char *const SP_NAME[SP_N] = { "<|start|>", "<|end|>", "<|message|>", "<|channel|>",
                                           "<|return|>", "<|call|>", "<|constrain|>" };

typedef struct hcand {
    int32_t *ids;
    int64_t n, cap;
    int later;                  /* 0: the reply's first header; 1: the one after the analysis */
    int kind, tool;             /* HK_*; the tool of a call */
} hcand;

struct srv_hspec {
    hcand *c;
    int n, cap;
    char **schema;              /* per tool (calls), or [0] (json mode; NULL: json_object) */
    int n_schema;
    int32_t sp[SP_N];
    int32_t *special;           /* every special token but <|end|>: masked in the analysis */
    int64_t n_special;
    /* tool_choice "auto" (is_auto set): the machine of the second half of this file */
    int is_auto;
    char **target;              /* per tool: "functions.NAME", the recipient word of its call */
    size_t *target_len, max_target;
    unsigned char *is_sp;       /* per id: a special token */
    int32_t *eq;                /* the ordinary tokens holding '=' (only they can complete "to=") */
    int64_t n_eq;
    hcand tail[3];              /* per header part: the rest of a call's header after its name */
    int32_t eot;                /* <|endoftext|> (-1: none), which ends the reply as the parser reads it */
    int oom;
};

void srv_hspec_free(srv_hspec *h) {
    if (!h) return;
    for (int i = 0; i < h->n; i++) free(h->c[i].ids);
    for (int i = 0; h->schema && i < h->n_schema; i++) free(h->schema[i]);
    for (int i = 0; h->target && i < h->n_schema; i++) free(h->target[i]);
    for (int i = 0; i < 3; i++) free(h->tail[i].ids);
    free(h->schema);
    free(h->target);
    free(h->target_len);
    free(h->is_sp);
    free(h->eq);
    free(h->c);
    free(h->special);
    free(h);
}

/* ---- building the candidates ------------------------------------------------ */

static void cand_put(srv_hspec *h, hcand *c, const int32_t *ids, int64_t n) {
    if (h->oom) return;
    if (c->n + n > c->cap) {
        int64_t cap = (c->n + n) * 2 + 8;
        int32_t *p = realloc(c->ids, (size_t)cap * sizeof *p);
        if (!p) { h->oom = 1; return; }
        c->ids = p;
        c->cap = cap;
    }
    memcpy(c->ids + c->n, ids, (size_t)n * sizeof *ids);
    c->n += n;
}

static void cand_sp(srv_hspec *h, hcand *c, int which) { cand_put(h, c, &h->sp[which], 1); }

/* Text between two specials: one piece, specials disabled (the renderer's way). */
static void cand_text(srv *s, srv_hspec *h, hcand *c, const char *text) {
    int32_t *ids = NULL;
    int64_t n = 0;
    if (ms_tokenize(s->e, text, strlen(text), &ids, &n) != MS_OK) h->oom = 1;
    else cand_put(h, c, ids, n);
    free(ids);
}

static hcand *cand_new(srv_hspec *h, int later, int kind, int tool) {
    if (h->oom) return NULL;
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 8;
        hcand *p = realloc(h->c, (size_t)cap * sizeof *p);
        if (!p) { h->oom = 1; return NULL; }
        h->c = p;
        h->cap = cap;
    }
    hcand *c = &h->c[h->n++];
    memset(c, 0, sizeof *c);
    c->later = later;
    c->kind = kind;
    c->tool = tool;
    return c;
}

/* <|channel|>CHANNEL<|message|>, after "assistant" (later: <|start|>assistant first). */
static void add_channel(srv *s, srv_hspec *h, int later, int kind, const char *channel) {
    hcand *c = cand_new(h, later, kind, -1);
    if (!c) return;
    if (later) { cand_sp(h, c, SP_START); cand_text(s, h, c, "assistant"); }
    cand_sp(h, c, SP_CHANNEL);
    cand_text(s, h, c, channel);
    cand_sp(h, c, SP_MESSAGE);
}

/* The two header forms of a call of tool k (NAME). */
static void add_call(srv *s, srv_hspec *h, int later, int k, const char *name) {
    srv_buf t = {0};
    hcand *c = cand_new(h, later, HK_CALL, k);
    if (c) {          /* the renderer's: [<|start|>]assistant to=functions.NAME<|channel|>commentary json<|message|> */
        if (later) cand_sp(h, c, SP_START);
        srv_buf_adds(&t, later ? "assistant to=functions." : " to=functions.");
        if (srv_buf_adds(&t, name) != 0) h->oom = 1;
        else cand_text(s, h, c, t.p);
        cand_sp(h, c, SP_CHANNEL);
        cand_text(s, h, c, "commentary json");
        cand_sp(h, c, SP_MESSAGE);
    }
    if (h->sp[SP_CONSTRAIN] >= 0 && (c = cand_new(h, later, HK_CALL, k))) {
        /* gpt-oss's own: [<|start|>assistant]<|channel|>commentary to=functions.NAME <|constrain|>json<|message|> */
        if (later) { cand_sp(h, c, SP_START); cand_text(s, h, c, "assistant"); }
        cand_sp(h, c, SP_CHANNEL);
        t.n = 0;
        srv_buf_adds(&t, "commentary to=functions.");
        srv_buf_adds(&t, name);
        if (srv_buf_adds(&t, " ") != 0) h->oom = 1;
        else cand_text(s, h, c, t.p);
        cand_sp(h, c, SP_CONSTRAIN);
        cand_text(s, h, c, "json");
        cand_sp(h, c, SP_MESSAGE);
    }
    srv_buf_free(&t);
}

/* The special tokens of the vocabulary (their bytes are their name), but <|end|>. */
static void find_specials(srv *s, srv_hspec *h) {
    const int64_t V = s->info.n_vocab;
    int64_t cap = 256;
    h->special = malloc((size_t)cap * sizeof *h->special);
    if (!h->special) { h->oom = 1; return; }
    for (int64_t id = 0; id < V; id++) {
        const char *b;
        int64_t len = ms_token_bytes(s->e, (int32_t)id, &b);
        char name[128];
        if (len < 4 || len >= (int64_t)sizeof name || b[0] != '<' || b[1] != '|' || b[len - 2] != '|' || b[len - 1] != '>')
            continue;
        memcpy(name, b, (size_t)len);
        name[len] = 0;
        if (id == h->sp[SP_END] || ms_special_id(s->e, name) != (int32_t)id) continue;
        if (h->n_special == cap) {
            int32_t *p = realloc(h->special, (size_t)(cap *= 2) * sizeof *p);
            if (!p) { h->oom = 1; return; }
            h->special = p;
        }
        h->special[h->n_special++] = (int32_t)id;
    }
}

/* A name the header can carry: the parser reads the recipient up to white space. */
static int name_ok(const char *name) {
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p <= ' ' || *p == 0x7f) return 0;
    return 1;
}

/* The tools' schemas (every tool's checked: 400 naming a keyword outside the subset). */
static int tool_schemas(srv_hspec *h, const json_t *tools, srv_err *e) {
    const size_t n = json_array_size(tools);
    h->schema = calloc(n ? n : 1, sizeof *h->schema);
    if (!h->schema) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const json_t *p = json_object_get(fn, "parameters");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (p && !json_is_null(p) && !json_is_object(p))
            return srv_err_set(e, 400, "invalid_request_error", "tools", "invalid_type",
                               "tools[%zu].function.parameters must be a JSON Schema object", i);
        if (!name_ok(name))
            return srv_err_set(e, 400, "invalid_request_error", "tools", "invalid_value",
                               "tools[%zu].function.name '%.64s' has white space or control characters, which a "
                               "harmony call header cannot carry", i, name);
        h->schema[i] = json_is_object(p) ? json_dumps(p, JSON_COMPACT) : strdup(srv_no_params_schema);
        h->n_schema = (int)i + 1;       /* freed with the spec from here on */
        if (!h->schema[i]) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        char msg[256];
        if (ms_grammar_check(h->schema[i], strlen(h->schema[i]), msg, sizeof msg) != MS_OK)
            return srv_err_set(e, 400, "invalid_request_error", "tools", "invalid_value",
                               "tools[%zu].function.parameters: %s", i, msg);
    }
    return 0;
}

/* j->hspec, empty, with the special ids (NULL with e set when one is missing). */
static srv_hspec *hspec_new(srv *s, srv_job *j, srv_err *e) {
    srv_hspec *h = calloc(1, sizeof *h);
    if (!h) { srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory"); return NULL; }
    j->hspec = h;
    for (int i = 0; i < SP_N; i++) {
        h->sp[i] = ms_special_id(s->e, SP_NAME[i]);
        if (h->sp[i] < 0 && i != SP_CONSTRAIN) {
            srv_err_set(e, 500, "server_error", NULL, NULL, "the tokenizer has no %s", SP_NAME[i]);
            return NULL;
        }
    }
    return h;
}

int srv_hspec_build(srv *s, srv_job *j, const json_t *tools, const char *forced_name, srv_err *e) {
    srv_hspec *h = hspec_new(s, j, e);
    if (!h) return -1;
    add_channel(s, h, 0, HK_ANALYSIS, "analysis");
    if (j->json_mode) {
        if (!(h->schema = calloc(1, sizeof *h->schema))) h->oom = 1;
        else if (j->json_mode == 2 && !(h->schema[0] = strdup(j->schema))) h->oom = 1;
        h->n_schema = h->schema ? 1 : 0;
        for (int later = 0; later < 2; later++) add_channel(s, h, later, HK_FINAL, "final");
    } else {
        if (tool_schemas(h, tools, e) < 0) return -1;
        for (int later = 0; later < 2; later++)
            for (int k = 0; k < h->n_schema; k++) {
                const char *name = json_string_value(json_object_get(json_object_get(json_array_get(tools, (size_t)k), "function"), "name"));
                if (!forced_name || !strcmp(name, forced_name)) add_call(s, h, later, k, name);
            }
    }
    find_specials(s, h);
    if (h->oom) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* ---- tool_choice "auto": the spec ------------------------------------------------ */

/* The rest of a call's header after its name, per header part its "to=" is in:
 * the role part goes on as the renderer writes a call, the channel part as
 * gpt-oss does; after <|constrain|> only <|message|> is left. */
static void add_tails(srv *s, srv_hspec *h) {
    hcand *t = h->tail;
    cand_sp(h, &t[0], SP_CHANNEL);
    cand_text(s, h, &t[0], "commentary json");
    cand_sp(h, &t[0], SP_MESSAGE);
    if (h->sp[SP_CONSTRAIN] >= 0) {
        cand_text(s, h, &t[1], " ");
        cand_sp(h, &t[1], SP_CONSTRAIN);
        cand_text(s, h, &t[1], "json");
    } else {
        cand_text(s, h, &t[1], " json");
    }
    cand_sp(h, &t[1], SP_MESSAGE);
    cand_sp(h, &t[2], SP_MESSAGE);
}

/* Per id: special or not; the ordinary ids whose bytes hold '='. */
static void scan_vocab(srv *s, srv_hspec *h) {
    const int64_t V = s->info.n_vocab;
    int64_t cap = 0;
    if (!(h->is_sp = calloc((size_t)V, 1))) { h->oom = 1; return; }
    for (int64_t i = 0; i < h->n_special; i++) h->is_sp[h->special[i]] = 1;
    h->is_sp[h->sp[SP_END]] = 1;
    for (int64_t id = 0; id < V; id++) {
        const char *b;
        int64_t len = ms_token_bytes(s->e, (int32_t)id, &b);
        if (h->is_sp[id] || len <= 0 || !memchr(b, '=', (size_t)len)) continue;
        if (h->n_eq == cap) {
            int32_t *p = realloc(h->eq, (size_t)(cap = 2 * cap + 64) * sizeof *p);
            if (!p) { h->oom = 1; return; }
            h->eq = p;
        }
        h->eq[h->n_eq++] = (int32_t)id;
    }
}

int srv_hspec_auto(srv *s, srv_job *j, const json_t *tools, srv_err *e) {
    srv_hspec *h = hspec_new(s, j, e);
    if (!h) return -1;
    h->is_auto = 1;
    h->eot = ms_special_id(s->e, "<|endoftext|>");
    if (tool_schemas(h, tools, e) < 0) return -1;
    h->target = calloc((size_t)h->n_schema + 1, sizeof *h->target);
    h->target_len = calloc((size_t)h->n_schema + 1, sizeof *h->target_len);
    if (!h->target || !h->target_len) h->oom = 1;
    for (int k = 0; !h->oom && k < h->n_schema; k++) {
        const char *name = json_string_value(json_object_get(json_object_get(json_array_get(tools, (size_t)k), "function"), "name"));
        srv_buf t = {0};
        if (srv_buf_adds(&t, "functions.") != 0 || srv_buf_adds(&t, name) != 0) { h->oom = 1; srv_buf_free(&t); break; }
        h->target[k] = t.p;
        h->target_len[k] = t.n;
        if (t.n > h->max_target) h->max_target = t.n;
    }
    add_tails(s, h);
    find_specials(s, h);
    scan_vocab(s, h);
    if (h->oom) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* ---- the machine -------------------------------------------------------------- */

enum { HC_HEAD, HC_FREE, HC_BODY, HC_DONE };
/* tool_choice "auto": as the parser (text/chat_harmony_parse.c) reads the reply,
 * plus the recipient of a call (NAME), the rest of its header (TAIL) and its
 * arguments (CALL) */
enum { AU_HDR = 16, AU_NAME, AU_TAIL, AU_BODY, AU_CALL, AU_IDLE, AU_DONE };
static int auto_observe(srv_hcon *c, int32_t id);
static const float *auto_logits(srv_hcon *c, const float *logits, int32_t *forced);

static void start_head(srv_hcon *c, int later) {
    c->state = HC_HEAD;
    c->later = later;
    c->pos = 0;
    for (int i = 0; i < c->h->n; i++) c->viable[i] = c->h->c[i].later == later;
}

int srv_hcon_init(srv_hcon *c, srv *s, const srv_hspec *h, ms_sampler *smp) {
    memset(c, 0, sizeof *c);
    c->s = s;
    c->h = h;
    c->smp = smp;
    c->viable = calloc((size_t)(h->n ? h->n : 1), 1);
    c->w = malloc((size_t)s->info.n_vocab * sizeof *c->w);
    if (!c->viable || !c->w) return -1;
    if (h->is_auto) {       /* the generation prompt wrote <|start|>assistant: the role part */
        c->state = AU_HDR;
        return (c->rcp = malloc(h->max_target + 1)) ? 0 : -1;
    }
    start_head(c, 0);
    return 0;
}

void srv_hcon_free(srv_hcon *c) {
    if (!c->h) return;
    ms_sampler_set_grammar(c->smp, NULL);
    ms_grammar_close(c->g);
    free(c->viable);
    free(c->w);
    free(c->rcp);
    memset(c, 0, sizeof *c);
}

int srv_hcon_in_call(const srv_hcon *c) {
    if (!c->h) return 0;
    if (c->h->is_auto) return c->state == AU_CALL;
    return c->state == HC_BODY && c->h->c[c->target].kind == HK_CALL;
}

/* A header is read: the body's grammar (schema sc, NULL: any object) goes
 * on the sampler, ended by end_id. */
static int open_body(srv_hcon *c, const char *sc, int32_t end_id, int state) {
    c->end_id = end_id;
    if (ms_grammar_open(c->s->e, sc, sc ? strlen(sc) : 0, c->end_id, &c->g, c->msg, sizeof c->msg) != MS_OK)
        return -1;
    ms_sampler_set_grammar(c->smp, c->g);
    c->state = state;
    return 0;
}

/* The target's header is read. */
static int start_body(srv_hcon *c) {
    const hcand *t = &c->h->c[c->target];
    const char *sc = t->kind == HK_CALL ? c->h->schema[t->tool] : c->h->schema[0];
    return open_body(c, sc, c->h->sp[t->kind == HK_CALL ? SP_CALL : SP_RETURN], HC_BODY);
}

int srv_hcon_observe(srv_hcon *c, int32_t id) {
    const srv_hspec *h = c->h;
    if (h->is_auto) return auto_observe(c, id);
    switch (c->state) {
    case HC_HEAD: {
        int done = -1, any = 0;
        for (int i = 0; i < h->n; i++) {
            if (!c->viable[i]) continue;
            if (c->pos >= h->c[i].n || h->c[i].ids[c->pos] != id) { c->viable[i] = 0; continue; }
            any = 1;
            if (h->c[i].n == c->pos + 1 && done < 0) done = i;
        }
        c->pos++;
        if (!any) { c->state = HC_DONE; c->end_id = -1; return 0; }  /* not reached: the mask keeps a candidate */
        if (done < 0) return 0;
        c->target = done;
        if (h->c[done].kind == HK_ANALYSIS) { c->state = HC_FREE; return 0; }
        return start_body(c);
    }
    case HC_FREE:
        if (id == h->sp[SP_END]) start_head(c, 1);
        return 0;
    case HC_BODY:       /* the grammar advanced itself in the sampler */
        if (id == c->end_id) c->state = HC_DONE;
        return 0;
    }
    return 0;
}

/* HEAD: the next ids of the candidates left; one id alone is forced. */
static const float *mask_head(srv_hcon *c, const float *logits, int32_t *forced) {
    const srv_hspec *h = c->h;
    int32_t first = -1;
    int several = 0;
    for (int i = 0; i < h->n; i++) {
        if (!c->viable[i] || c->pos >= h->c[i].n) continue;
        if (first < 0) first = h->c[i].ids[c->pos];
        else several |= h->c[i].ids[c->pos] != first;
    }
    if (first < 0) return logits;       /* not reached (see srv_hcon_observe) */
    if (!several) { *forced = first; return logits; }
    const int64_t V = c->s->info.n_vocab;
    for (int64_t id = 0; id < V; id++) c->w[id] = -INFINITY;
    for (int i = 0; i < h->n; i++)
        if (c->viable[i] && c->pos < h->c[i].n) {
            const int32_t id = h->c[i].ids[c->pos];
            c->w[id] = logits[id];
        }
    return c->w;
}

const float *srv_hcon_logits(srv_hcon *c, const float *logits, int32_t *forced) {
    *forced = -1;
    if (c->h->is_auto) return auto_logits(c, logits, forced);
    switch (c->state) {
    case HC_HEAD:
        return mask_head(c, logits, forced);
    case HC_FREE:
        memcpy(c->w, logits, (size_t)c->s->info.n_vocab * sizeof *c->w);
        for (int64_t i = 0; i < c->h->n_special; i++) c->w[c->h->special[i]] = -INFINITY;
        return c->w;
    case HC_DONE:       /* only past the end token (ignore_eos): the end token again */
        if (c->end_id >= 0) *forced = c->end_id;
        return logits;
    }
    return logits;
}

/* ---- tool_choice "auto": the machine ------------------------------------------------ */

/* Where a recipient starts in tok (len bytes) when the header part, ending in
 * last[0..n_last) and holding no "to=" so far, goes on with tok: the offset
 * in tok just past the first "to=", or -1. */
static int64_t after_to(const unsigned char *last, int n_last, const char *tok, int64_t len) {
    char w[5];
    int n = 0;
    for (int i = 0; i < n_last; i++) w[n++] = (char)last[i];
    for (int64_t i = 0; i < len && i < 2; i++) w[n++] = tok[i];
    for (int i = 0; i < n_last && i + 3 <= n; i++)         /* a "to=" that begins before tok */
        if (!memcmp(w + i, "to=", 3)) return i + 3 - n_last;
    const char *at = memmem(tok, (size_t)len, "to=", 3);
    return at ? at - tok + 3 : -1;
}

/* r (n bytes) then t (len bytes): 0 when that is no prefix of a call's
 * recipient "functions.NAME", 1 when it is one, 2 when it is the whole of
 * one (its tool in *k). */
static int recipient_fits(const srv_hspec *h, const char *r, size_t n, const char *t, size_t len, int *k) {
    int fit = 0;
    for (int i = 0; i < h->n_schema; i++) {
        const char *g = h->target[i];
        if (n + len > h->target_len[i] || memcmp(g, r, n) || memcmp(g + n, t, len)) continue;
        if (n + len == h->target_len[i]) {
            if (k) *k = i;
            return 2;
        }
        fit = 1;
    }
    return fit;
}

/* HDR: the ordinary tokens that would write "to=" with a recipient no call
 * can have are masked (only tokens holding '=' can); the rest is the model's. */
static const float *auto_mask_hdr(srv_hcon *c, const float *logits) {
    const srv_hspec *h = c->h;
    const float *out = logits;
    for (int64_t i = 0; i < h->n_eq; i++) {
        const char *b;
        const int64_t len = ms_token_bytes(c->s->e, h->eq[i], &b);
        const int64_t at = after_to(c->last[c->part], c->n_last[c->part], b, len);
        if (at < 0 || recipient_fits(h, "", 0, b + at, (size_t)(len - at), NULL)) continue;
        if (out == logits) out = memcpy(c->w, logits, (size_t)c->s->info.n_vocab * sizeof *c->w);
        c->w[h->eq[i]] = -INFINITY;
    }
    return out;
}

/* NAME: tokens that continue the recipient towards "functions.NAME" of a
 * tool; once it is whole, also the first id of the header's rest. One id
 * alone is forced. */
static const float *auto_mask_name(srv_hcon *c, const float *logits, int32_t *forced) {
    const srv_hspec *h = c->h;
    const int64_t V = c->s->info.n_vocab;
    const int whole = recipient_fits(h, c->rcp, c->n_rcp, "", 0, NULL) == 2;
    const int32_t rest = h->tail[c->part].ids[0];
    int64_t n_ok = 0;
    int32_t one = -1;
    for (int64_t id = 0; id < V; id++) {
        const char *b;
        int64_t len;
        int ok = whole && id == rest;
        if (!ok && !h->is_sp[id] && (len = ms_token_bytes(c->s->e, (int32_t)id, &b)) > 0)
            ok = recipient_fits(h, c->rcp, c->n_rcp, b, (size_t)len, NULL) != 0;
        c->w[id] = ok ? logits[id] : -INFINITY;
        if (ok) { n_ok++; one = (int32_t)id; }
    }
    if (n_ok == 1) { *forced = one; return logits; }
    return c->w;
}

static const float *auto_logits(srv_hcon *c, const float *logits, int32_t *forced) {
    switch (c->state) {
    case AU_HDR: return auto_mask_hdr(c, logits);
    case AU_NAME: return auto_mask_name(c, logits, forced);
    case AU_TAIL: *forced = c->h->tail[c->part].ids[c->pos]; return logits;
    }
    return logits;      /* a body (a call's: its grammar is on the sampler), between messages, done */
}

static void auto_header(srv_hcon *c) {
    c->state = AU_HDR;
    c->part = 0;
    memset(c->n_last, 0, sizeof c->n_last);
}

/* A special id outside a call, as the parser takes it. */
static void auto_special(srv_hcon *c, int32_t id) {
    const int32_t *sp = c->h->sp;
    if (id == sp[SP_START]) auto_header(c);
    else if ((id == sp[SP_CHANNEL] || id == sp[SP_CONSTRAIN]) && c->state == AU_HDR) c->part = id == sp[SP_CHANNEL] ? 1 : 2;
    else if (id == sp[SP_MESSAGE] && c->state == AU_HDR) c->state = AU_BODY;
    else if (id == sp[SP_END] && c->state == AU_BODY) c->state = AU_IDLE;
    else if (id == sp[SP_RETURN] || id == sp[SP_CALL] || id == c->h->eot) c->state = AU_DONE;
}

/* An ordinary token in a header part that holds no "to=" yet. */
static void auto_hdr_bytes(srv_hcon *c, const char *b, int64_t len) {
    unsigned char *last = c->last[c->part];
    const int64_t at = after_to(last, c->n_last[c->part], b, len);
    if (at >= 0) {      /* a call opens: the mask kept its recipient a prefix of one */
        c->n_rcp = (size_t)(len - at) <= c->h->max_target ? (size_t)(len - at) : c->h->max_target;
        memcpy(c->rcp, b + at, c->n_rcp);
        c->state = AU_NAME;
        return;
    }
    for (int64_t i = len > 2 ? len - 2 : 0; i < len; i++) {
        if (c->n_last[c->part] == 2) { last[0] = last[1]; c->n_last[c->part] = 1; }
        last[c->n_last[c->part]++] = (unsigned char)b[i];
    }
}

static int auto_observe(srv_hcon *c, int32_t id) {
    const srv_hspec *h = c->h;
    const char *b;
    int64_t len;
    switch (c->state) {
    case AU_DONE: return 0;            /* the parser reads no further */
    case AU_CALL:
        if (id == c->end_id) { ms_sampler_set_grammar(c->smp, NULL); c->state = AU_DONE; }
        return 0;
    case AU_NAME:
        if (id == h->tail[c->part].ids[0] && recipient_fits(h, c->rcp, c->n_rcp, "", 0, &c->target) == 2) {
            c->state = AU_TAIL;
            c->pos = 0;
            break;
        }
        len = ms_token_bytes(c->s->e, id, &b);
        if (len > 0 && c->n_rcp + (size_t)len <= h->max_target) {
            memcpy(c->rcp + c->n_rcp, b, (size_t)len);
            c->n_rcp += (size_t)len;
        }
        return 0;
    case AU_TAIL: break;
    default:
        if (h->is_sp[id]) auto_special(c, id);
        else if (c->state == AU_HDR && (len = ms_token_bytes(c->s->e, id, &b)) > 0) auto_hdr_bytes(c, b, len);
        return 0;
    }
    /* TAIL: the header's rest, forced id by id; then the tool's arguments */
    if (++c->pos < h->tail[c->part].n) return 0;
    return open_body(c, h->schema[c->target], h->sp[SP_CALL], AU_CALL);
}
