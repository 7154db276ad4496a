/* engine/text.c - the public text API: thin wrappers over text/tokenizer. */
#include "engine/engine_int.h"

#include <stdlib.h>

int ms_engine_has_tokenizer(const ms_engine *e) { return e->tok != NULL; }

ms_status ms_tokenize(const ms_engine *e, const char *text, size_t len, int32_t **ids, int64_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    if (!e->tok) return MS_E_USAGE;
    ms_err err;
    ms_err_clear(&err);
    int64_t cap = 0;
    ms_status st = ms_tok_encode(e->tok, text, len, ids, n_ids, &cap, &err);
    if (st != MS_OK) { free(*ids); *ids = NULL; *n_ids = 0; }
    return st;
}

ms_status ms_detokenize(const ms_engine *e, const int32_t *ids, int64_t n, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (!e->tok) return MS_E_USAGE;
    ms_err err;
    ms_err_clear(&err);
    return ms_tok_decode(e->tok, ids, n, out, len, &err);
}

int64_t ms_token_bytes(const ms_engine *e, int32_t id, const char **bytes) {
    if (!e->tok) return -1;
    return ms_tok_token_bytes(e->tok, id, bytes);
}

int32_t ms_special_id(const ms_engine *e, const char *name) {
    return e->tok ? ms_tok_special_id(e->tok, name) : -1;
}
