/* sample/mask.c - the token mask of structured output (ms_grammar in the
 * public header): which token ids can continue the JSON document.
 *
 * Owns: a copy of each token's byte span (pointers into the engine's
 *   tokenizer), the matcher state of the document so far, and the mask.
 * Idea: a token is allowed iff every one of its bytes advances the matcher
 *   (sample/json_schema.h) from the current state; the end token is allowed
 *   iff the document is complete; other special tokens never are. Every id is
 *   tried in id order from the same state, so the mask depends only on the
 *   tokens picked before (bit-reproducible at every budget).
 * Invariants: 1. the matcher never dead-ends, so some id is always allowed
 *   (a content token, or the end token once the document is complete);
 *   2. after the end token is picked, only the end token is allowed.
 * Does not: a prefix trie over the vocabulary (each step walks all ids; fine
 *   for small vocabularies, the known speedup for large ones).
 */
#include "sample/mask.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ms_grammar {
    ms_json_schema *js;
    int64_t n_vocab;
    const uint8_t **tok;       /* [n_vocab] bytes; NULL: never allowed (special, empty) */
    int64_t *tok_len;
    int32_t end_id;
    int ended;                 /* the end token was picked */
    ms_json_state st, tmp;
};

/* A special token's bytes are its name; ms_special_id tells it apart from an
 * ordinary token with the same bytes. */
static int is_special(const ms_engine *e, int32_t id, const char *b, int64_t n) {
    char name[128];
    if (n <= 0 || n >= (int64_t)sizeof name || memchr(b, 0, (size_t)n)) return 0;
    memcpy(name, b, (size_t)n);
    name[n] = 0;
    return ms_special_id(e, name) == id;
}

ms_status ms_grammar_open(const ms_engine *e, const char *schema, size_t n, int32_t end_id,
                          ms_grammar **out, char *errbuf, size_t errbuf_len) {
    *out = NULL;
    ms_model_info info;
    ms_engine_info(e, &info);
    if (!ms_engine_has_tokenizer(e)) {
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "structured output needs the model's tokenizer");
        return MS_E_USAGE;
    }
    if (end_id < 0 || end_id >= info.n_vocab) {
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "structured output: no end token");
        return MS_E_USAGE;
    }
    ms_json_schema *js = ms_json_schema_compile(schema, n, errbuf, errbuf_len);
    if (!js) return MS_E_USAGE;
    ms_grammar *g = calloc(1, sizeof *g);
    if (g) {
        g->tok = calloc((size_t)info.n_vocab, sizeof *g->tok);
        g->tok_len = calloc((size_t)info.n_vocab, sizeof *g->tok_len);
    }
    if (!g || !g->tok || !g->tok_len) {
        ms_json_schema_free(js);
        if (g) { free(g->tok); free(g->tok_len); free(g); }
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "out of memory");
        return MS_E_NOMEM;
    }
    g->js = js;
    g->n_vocab = info.n_vocab;
    g->end_id = end_id;
    for (int32_t id = 0; id < info.n_vocab; id++) {
        const char *b = NULL;
        int64_t len = ms_token_bytes(e, id, &b);
        if (len <= 0 || !b || is_special(e, id, b, len)) continue;
        g->tok[id] = (const uint8_t *)b;
        g->tok_len[id] = len;
    }
    ms_json_start(js, &g->st);
    *out = g;
    return MS_OK;
}

ms_status ms_grammar_check(const char *schema, size_t n, char *errbuf, size_t errbuf_len) {
    ms_json_schema *js = ms_json_schema_compile(schema, n, errbuf, errbuf_len);
    if (!js) return MS_E_USAGE;
    ms_json_schema_free(js);
    return MS_OK;
}

void ms_grammar_close(ms_grammar *g) {
    if (!g) return;
    ms_json_schema_free(g->js);
    free(g->tok);
    free(g->tok_len);
    free(g);
}

int ms_grammar_done(const ms_grammar *g) {
    return g->ended || ms_json_can_end(g->js, &g->st);
}

int64_t ms_grammar_n_vocab(const ms_grammar *g) { return g->n_vocab; }

void ms_grammar_mask(ms_grammar *g, float *logits) {
    if (g->ended) {
        for (int64_t id = 0; id < g->n_vocab; id++)
            if (id != g->end_id) logits[id] = -INFINITY;
        return;
    }
    const int can_end = ms_json_can_end(g->js, &g->st);
    for (int64_t id = 0; id < g->n_vocab; id++) {
        if (id == g->end_id) {
            if (!can_end) logits[id] = -INFINITY;
            continue;
        }
        if (!g->tok[id] || !ms_json_advance_to(g->js, &g->st, g->tok[id], (size_t)g->tok_len[id], &g->tmp))
            logits[id] = -INFINITY;
    }
}

void ms_grammar_accept(ms_grammar *g, int32_t id) {
    if (g->ended) return;
    if (id == g->end_id) { g->ended = 1; return; }
    if (id < 0 || id >= g->n_vocab || !g->tok[id]) return;
    ms_json_advance(g->js, &g->st, g->tok[id], (size_t)g->tok_len[id]);
}
