/* text/chat_int.h - what the chat format's three files share (see chat.h).
 *
 * Owns: the growable byte buffer (strbuf), the segment sink that renders
 *   either ids or readable text, and the names of the helpers that cross files:
 *     chat_json.c    the JSON writer (Python-compatible compact form) and
 *                    ms_chat_json_normalize;
 *     chat_render.c  segments (S = one special id, T = text encoded on its
 *                    own), tags and attributes, and the conversation renderer;
 *     chat.c         the output parser and ms_chat_close_turn, which uses the
 *                    sink to close what the parser saw open.
 * Invariants: a strbuf's bytes are NUL terminated whenever p != NULL, and its
 *   oom flag is sticky; a sink's status is sticky (first error wins; later
 *   emits are no-ops).
 * Does not: leave text/ (included only by the chat files).
 */
#ifndef MS_TEXT_CHAT_INT_H
#define MS_TEXT_CHAT_INT_H

#include "text/chat.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable byte buffer ------------------------------------------------ */

typedef struct strbuf {
    char *p;    /* NUL terminated when non-NULL */
    size_t n;
    size_t cap; /* allocated bytes, > n when p != NULL */
    int oom;    /* sticky allocation failure */
} strbuf;

static inline int sb_reserve(strbuf *b, size_t extra) {
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

static inline void sb_put(strbuf *b, const char *s, size_t n) {
    if (sb_reserve(b, n) < 0) return;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static inline void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static inline void sb_putc(strbuf *b, char c) { sb_put(b, &c, 1); }

static inline void sb_reset(strbuf *b) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
}

static inline void sb_free(strbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Take the buffer (never NULL unless out of memory); the strbuf is emptied. */
static inline char *sb_take(strbuf *b, size_t *len) {
    if (sb_reserve(b, 0) < 0) return NULL;
    char *p = b->p;
    if (len) *len = b->n;
    memset(b, 0, sizeof *b);
    return p;
}

/* ---- JSON (chat_json.c) -------------------------------------------------- */

/* Compact JSON of v appended to b: no spaces, "," and ":"; keys sorted by byte
 * (= code point) order when sort, else in jansson's insertion order. */
void chat_put_json(strbuf *b, json_t *v, int sort);

/* The spec's type attribute of a value ("object", "number", ...). Static. */
const char *chat_jtype(const json_t *v);

/* ---- segments (chat_render.c) -------------------------------------------- */

enum { SP_OPEN, SP_CLOSE, SP_SEP, SP_END, SP_N };
extern const char *const chat_sp_name[SP_N];

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

typedef struct attr {
    const char *k;
    size_t kl;
    const char *v;
    size_t vl;
} attr;

/* The ids of the four specials the format uses; MS_E_MODEL naming the one the
 * tokenizer lacks. */
ms_status chat_lookup_specials(const ms_tok *t, int32_t sp[SP_N], ms_err *err);

/* One S segment (a special's id, or its name in text mode). */
void chat_emit_s(sink *s, int which);

/* <|open|>tag attrs<|sep|> and <|close|>tag<|sep|>, each piece its own segment. */
void chat_open_tag(sink *s, const char *tag, const attr *attrs, int n_attrs);
void chat_close_tag(sink *s, const char *tag, size_t n);
void chat_close_tags(sink *s, const char *tag);

#endif
