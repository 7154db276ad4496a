/* server/harmony.c - structured output and forced tool calls for gpt-oss
 * models (chat format "harmony"): the token-level constraint on the reply's
 * channels, headers and JSON bodies.
 *
 * Owns: a request's constraint as the worker needs it (srv_hspec: the header
 *   id sequences a reply may take, the schemas, the specials masked in the
 *   analysis) and the per-choice state machine (srv_hcon) the worker's picker
 *   consults before and after every pick.
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
 * Invariants: 1. a reply that reaches DONE holds, in its final or call
 *   message, a document the grammar accepted; 2. the masks and forced ids
 *   depend only on the ids so far, so greedy and seeded replies stay
 *   bit-reproducible at every budget; 3. srv_hcon_in_call() is 1 while a
 *   call's body is open: a reply cut there does not present it.
 * Does not: constrain tool_choice "auto" (calls the model writes on its own
 *   keep the arguments it wrote), offer the commentary preamble channel or a
 *   second analysis message under the constraint, or touch the session.
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
    int oom;
};

void srv_hspec_free(srv_hspec *h) {
    if (!h) return;
    for (int i = 0; i < h->n; i++) free(h->c[i].ids);
    for (int i = 0; h->schema && i < h->n_schema; i++) free(h->schema[i]);
    free(h->schema);
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
    for (size_t i = 0; i < n; i++, h->n_schema++) {
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
        if (!h->schema[i]) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        char msg[256];
        if (ms_grammar_check(h->schema[i], strlen(h->schema[i]), msg, sizeof msg) != MS_OK)
            return srv_err_set(e, 400, "invalid_request_error", "tools", "invalid_value",
                               "tools[%zu].function.parameters: %s", i, msg);
    }
    return 0;
}

int srv_hspec_build(srv *s, srv_job *j, const json_t *tools, const char *forced_name, srv_err *e) {
    srv_hspec *h = calloc(1, sizeof *h);
    if (!h) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    j->hspec = h;
    for (int i = 0; i < SP_N; i++) {
        h->sp[i] = ms_special_id(s->e, SP_NAME[i]);
        if (h->sp[i] < 0 && i != SP_CONSTRAIN)
            return srv_err_set(e, 500, "server_error", NULL, NULL, "the tokenizer has no %s", SP_NAME[i]);
    }
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

/* ---- the machine -------------------------------------------------------------- */

enum { HC_HEAD, HC_FREE, HC_BODY, HC_DONE };

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
    start_head(c, 0);
    return 0;
}

void srv_hcon_free(srv_hcon *c) {
    if (!c->h) return;
    ms_sampler_set_grammar(c->smp, NULL);
    ms_grammar_close(c->g);
    free(c->viable);
    free(c->w);
    memset(c, 0, sizeof *c);
}

int srv_hcon_in_call(const srv_hcon *c) {
    return c->h && c->state == HC_BODY && c->h->c[c->target].kind == HK_CALL;
}

/* The target's header is read: its grammar goes on the sampler. */
static int start_body(srv_hcon *c) {
    const hcand *t = &c->h->c[c->target];
    const char *sc = t->kind == HK_CALL ? c->h->schema[t->tool] : c->h->schema[0];
    c->end_id = c->h->sp[t->kind == HK_CALL ? SP_CALL : SP_RETURN];
    if (ms_grammar_open(c->s->e, sc, sc ? strlen(sc) : 0, c->end_id, &c->g, c->msg, sizeof c->msg) != MS_OK)
        return -1;
    ms_sampler_set_grammar(c->smp, c->g);
    c->state = HC_BODY;
    return 0;
}

int srv_hcon_observe(srv_hcon *c, int32_t id) {
    const srv_hspec *h = c->h;
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
