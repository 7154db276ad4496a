/* text/tokenizer.c - encoding and decoding with the Kimi K3 tokenizer (see
 * tokenizer.h, docs/TOKENIZER.md; loading is tok_load.c, the layout tok_int.h).
 *
 * Owns: the windowing of long inputs, the pre-tokenizer matching, and BPE
 *   merging; decoding ids back to bytes and the special-token lookups.
 * Idea: encode = windows -> regex pieces -> BPE per piece. A tokenizer.json
 *   tokenizer (t->windowed == 0) has no windows: the input is one subject, as
 *   in tiktoken and Hugging Face tokenizers. K3's windows replicate
 *   the reference exactly (400,000 code points; inside a window a cut before
 *   any character that would make a run of whitespace or of non-whitespace
 *   longer than 25,000). Each window is matched as its own subject, so the
 *   regex never sees more than 400,000 characters and no piece is longer than
 *   about 50,000 characters. BPE merges the lowest-rank adjacent pair first
 *   (leftmost on ties, as tiktoken does): a direct scan for short pieces, a
 *   linked list + binary heap (O(n log n)) for long ones.
 * Invariants:
 *   1. those of tok_int.h (dense ranks, every single byte has one), so every
 *      byte string is encodable and decode(encode(b)) == b (with drop_gaps:
 *      for every b the pattern leaves no valid character of unmatched).
 *   2. bytes that no regex alternative matches (for K3's and o200k's patterns
 *      only invalid UTF-8, which the PCRE2_MATCH_INVALID_UTF mode treats as a
 *      barrier) become one piece per byte, i.e. one single-byte token per
 *      invalid byte; with t->drop_gaps (a tokenizer.json Split with behavior
 *      Removed, invert true) an unmatched valid character yields nothing, as
 *      in Hugging Face, and an invalid byte still one token.
 * Does not: produce special tokens from text, normalise text, or touch the
 *   environment. The loaded object is read-only; encode allocates its own
 *   match data and scratch per call.
 */
#include "text/tok_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    WINDOW_CHARS = 400000,   /* reference TIKTOKEN_MAX_ENCODE_CHARS */
    MAX_RUN_CHARS = 25000,   /* reference MAX_NO_WHITESPACES_CHARS */
    SMALL_PIECE = 64,        /* pieces up to this many bytes use the direct scan */
};

/* ---- BPE ---------------------------------------------------------------- */

/* The id made by joining the adjacent parts [s, m) and [m, e) of p, whose ids
 * are a and b; -1 if they do not join. tiktoken joins any two parts whose
 * bytes are a token; a tokenizer.json only its listed merges (the two agree
 * when every split of every token is listed, as in files converted from
 * tiktoken: docs/TOKENIZER.md). */
static inline int32_t join(const ms_tok *t, const uint8_t *p, int64_t s, int64_t m, int64_t e, int32_t a,
                           int32_t b) {
    (void)m;
    if (t->by_merges) return tok_merge_lookup(t, a, b);
    if (e - s == 2) return t->pair_rank[(p[s] << 8) | p[s + 1]];
    return tok_rank_lookup(t, p + s, e - s);
}

typedef struct heap_ent { int32_t rank, left, total; } heap_ent;

typedef struct scratch {
    int32_t *nxt, *prv, *tok;   /* per byte position of the piece */
    heap_ent *heap;
    int64_t cap, heap_cap;
} scratch;

static int ent_less(heap_ent a, heap_ent b) {
    return a.rank < b.rank || (a.rank == b.rank && a.left < b.left);
}

static void heap_push(heap_ent *h, int64_t *n, heap_ent e) {
    int64_t i = (*n)++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!ent_less(e, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static heap_ent heap_pop(heap_ent *h, int64_t *n) {
    heap_ent top = h[0], last = h[--(*n)];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && ent_less(h[c + 1], h[c])) c++;
        if (!ent_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

/* Long pieces: doubly linked list of parts (nodes are byte positions) and a
 * heap of candidate pairs ordered by (rank, left position). An entry
 * (rank, l, total) is stale unless part l is alive and l + its right neighbour
 * still span exactly `total` bytes: a part only grows, so the span is equal
 * iff neither part changed since the push. */
static int64_t bpe_heap(const ms_tok *t, const uint8_t *p, int64_t n, scratch *s, int32_t *out) {
    int32_t *nxt = s->nxt, *prv = s->prv, *tok = s->tok;
    heap_ent *h = s->heap;
    int64_t hn = 0;
    for (int64_t i = 0; i < n; i++) {
        nxt[i] = (int32_t)(i + 1);
        prv[i] = (int32_t)(i - 1);
        tok[i] = t->byte_rank[p[i]];
    }
    for (int64_t i = 0; i + 1 < n; i++) {
        int32_t r = join(t, p, i, i + 1, i + 2, tok[i], tok[i + 1]);
        if (r >= 0) heap_push(h, &hn, (heap_ent){ r, (int32_t)i, 2 });
    }
    while (hn > 0) {
        heap_ent e = heap_pop(h, &hn);
        int32_t l = e.left;
        if (tok[l] < 0) continue;                 /* l was absorbed */
        int32_t r = nxt[l];
        if (r >= n) continue;
        int32_t end = nxt[r];
        if (end - l != e.total) continue;         /* stale */
        tok[l] = e.rank;
        tok[r] = -1;
        nxt[l] = end;
        if (end < n) prv[end] = l;
        if (prv[l] >= 0) {
            int32_t pl = prv[l];
            int32_t rk = join(t, p, pl, l, end, tok[pl], tok[l]);
            if (rk >= 0) heap_push(h, &hn, (heap_ent){ rk, pl, end - pl });
        }
        if (end < n) {
            int32_t e2 = nxt[end];
            int32_t rk = join(t, p, l, end, e2, tok[l], tok[end]);
            if (rk >= 0) heap_push(h, &hn, (heap_ent){ rk, l, e2 - l });
        }
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i = nxt[i]) out[k++] = tok[i];
    return k;
}

/* Short pieces: tiktoken's direct scan (parts array, rescan for the minimum). */
static int64_t bpe_small(const ms_tok *t, const uint8_t *p, int64_t n, int32_t *out) {
    int32_t start[SMALL_PIECE + 1], pr[SMALL_PIECE], tok[SMALL_PIECE];
    int64_t m = n;   /* number of parts */
    for (int64_t i = 0; i < n; i++) {
        start[i] = (int32_t)i;
        tok[i] = t->byte_rank[p[i]];
    }
    start[n] = (int32_t)n;
    for (int64_t i = 0; i + 1 < n; i++) pr[i] = join(t, p, i, i + 1, i + 2, tok[i], tok[i + 1]);
    if (n > 0) pr[n - 1] = -1;
    for (;;) {
        int64_t best = -1;
        for (int64_t i = 0; i + 1 < m; i++)
            if (pr[i] >= 0 && (best < 0 || pr[i] < pr[best])) best = i;
        if (best < 0) break;
        tok[best] = pr[best];
        for (int64_t i = best + 1; i + 1 < m; i++) {
            start[i] = start[i + 1];
            tok[i] = tok[i + 1];
            pr[i] = pr[i + 1];
        }
        m--;
        start[m] = (int32_t)n;
        if (best > 0)
            pr[best - 1] = join(t, p, start[best - 1], start[best], start[best + 1], tok[best - 1], tok[best]);
        pr[best] = best + 1 < m ? join(t, p, start[best], start[best + 1], start[best + 2], tok[best], tok[best + 1])
                                : -1;
    }
    memcpy(out, tok, (size_t)m * sizeof *out);
    return m;
}

static int scratch_reserve(scratch *s, int64_t n) {
    if (n <= s->cap) return 0;
    int64_t c = s->cap ? s->cap : 256;
    while (c < n) c *= 2;
    int32_t *a = realloc(s->nxt, (size_t)c * sizeof *a);
    if (!a) return -1;
    s->nxt = a;
    a = realloc(s->prv, (size_t)c * sizeof *a);
    if (!a) return -1;
    s->prv = a;
    a = realloc(s->tok, (size_t)c * sizeof *a);
    if (!a) return -1;
    s->tok = a;
    /* pushes: n - 1 initial pairs + at most 2 per merge (n - 1 merges) */
    heap_ent *h = realloc(s->heap, (size_t)(3 * c) * sizeof *h);
    if (!h) return -1;
    s->heap = h;
    s->cap = c;
    return 0;
}

/* ---- encode ------------------------------------------------------------- */

typedef struct enc {
    const ms_tok *t;
    int32_t **ids;
    int64_t *n_ids, *cap;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
    scratch s;
    ms_err *err;
} enc;

static ms_status reserve_ids(enc *e, int64_t more) {
    int64_t need;
    if (ms_add_i64(*e->n_ids, more, &need) || need > INT64_MAX / 8)
        return ms_err_set(e->err, MS_E_NOMEM, "tokenizer: id array size overflows");
    if (need <= *e->cap) return MS_OK;
    int64_t c = *e->cap > 0 ? *e->cap : 64;
    while (c < need) c *= 2;
    int32_t *a = realloc(*e->ids, (size_t)c * sizeof *a);
    if (!a) return ms_err_set(e->err, MS_E_NOMEM, "tokenizer: out of memory for %lld ids", (long long)c);
    *e->ids = a;
    *e->cap = c;
    return MS_OK;
}

static ms_status encode_piece(enc *e, const uint8_t *p, int64_t n) {
    ms_status st = reserve_ids(e, n);
    if (st) return st;
    int32_t *out = *e->ids + *e->n_ids;
    int32_t r = n == 1 || e->t->whole_piece ? tok_rank_lookup(e->t, p, n) : -1;
    if (r >= 0) {                        /* fast path: the piece is a token */
        out[0] = r;
        *e->n_ids += 1;
        return MS_OK;
    }
    int64_t k;
    if (n <= SMALL_PIECE) {
        k = bpe_small(e->t, p, n, out);
    } else {
        if (scratch_reserve(&e->s, n))
            return ms_err_set(e->err, MS_E_NOMEM, "tokenizer: out of memory for a %lld-byte piece", (long long)n);
        k = bpe_heap(e->t, p, n, &e->s, out);
    }
    *e->n_ids += k;
    return MS_OK;
}

static int utf8_next(const uint8_t *p, int64_t n, uint32_t *cp);

/* Encode one window-chunk: it is its own regex subject (so a lookahead at its
 * end sees the end of the subject, as in the reference's separate calls). */
static ms_status encode_chunk(enc *e, const uint8_t *c, int64_t n) {
    int64_t pos = 0;
    ms_status st;
    while (pos < n) {
        int rc = pcre2_match(e->t->re, c, (PCRE2_SIZE)n, (PCRE2_SIZE)pos, 0, e->md, e->mc);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !e->js) {
            /* long runs inside repeated groups need more than the default 32 KiB */
            e->mc = pcre2_match_context_create(NULL);
            e->js = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
            if (!e->mc || !e->js) return ms_err_set(e->err, MS_E_NOMEM, "tokenizer: out of memory for the JIT stack");
            pcre2_jit_stack_assign(e->mc, NULL, e->js);
            continue;
        }
        int64_t ms, me;
        if (rc == PCRE2_ERROR_NOMATCH) {
            ms = me = n;
        } else if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return ms_err_set(e->err, MS_E_INTERNAL, "tokenizer: pre-tokenizer match failed: %s", (const char *)msg);
        } else {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
            ms = (int64_t)ov[0];
            me = (int64_t)ov[1];
            if (me <= ms) me = ms + 1;   /* the pattern has no empty match; never loop */
        }
        /* unmatched bytes: an invalid UTF-8 byte is one piece; a valid
         * character is one piece per byte too, or dropped (drop_gaps) */
        while (pos < ms) {
            uint32_t cp;
            int l = e->t->drop_gaps ? utf8_next(c + pos, ms - pos, &cp) : 0;
            if (l > 0) { pos += l; continue; }
            if ((st = encode_piece(e, c + pos, 1))) return st;
            pos++;
        }
        if (ms < n) {
            if ((st = encode_piece(e, c + ms, me - ms))) return st;
            pos = me;
        }
    }
    return MS_OK;
}

/* Length of the valid UTF-8 sequence at p (1..4) with its code point, or 0. */
static int utf8_next(const uint8_t *p, int64_t n, uint32_t *cp) {
    uint8_t b = p[0];
    if (b < 0x80) { *cp = b; return 1; }
    int len;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b >= 0xE0 && b <= 0xEF) { len = 3; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
    else if (b >= 0xF0 && b <= 0xF4) { len = 4; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
    else return 0;
    if (n < len || p[1] < lo || p[1] > hi) return 0;
    uint32_t c = b & (0xFF >> (len + 1));
    c = (c << 6) | (p[1] & 0x3F);
    for (int i = 2; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (p[i] & 0x3F);
    }
    *cp = c;
    return len;
}

/* Python's str.isspace(), which the reference's run splitter uses (it differs
 * from the regex's White_Space: U+001C..U+001F are space here). */
static int py_isspace(uint32_t c) {
    if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
    if (c < 0x85) return 0;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

ms_status ms_tok_encode(const ms_tok *t, const char *text, size_t len,
                        int32_t **ids, int64_t *n_ids, int64_t *cap, ms_err *err) {
    if (len == 0) return MS_OK;
    if (!text || len > (size_t)INT64_MAX / 8)
        return ms_err_set(err, MS_E_USAGE, "ms_tok_encode: bad text argument");
    enc e = { .t = t, .ids = ids, .n_ids = n_ids, .cap = cap, .err = err };
    e.md = pcre2_match_data_create(1, NULL);
    if (!e.md) return ms_err_set(err, MS_E_NOMEM, "tokenizer: out of memory for match data");
    const uint8_t *s = (const uint8_t *)text;
    int64_t n = (int64_t)len, pos = 0;
    ms_status st = MS_OK;
    /* Windows and run cuts, replicating the reference's
     * _split_whitespaces_or_nonwhitespaces over 400,000-character windows. An
     * invalid UTF-8 byte counts as one non-space character. */
    if (!t->windowed) {
        /* tokenizer.json (tiktoken's and Hugging Face's own behaviour): the
         * whole input is one subject; bpe_heap indexes pieces with int32 */
        if (n > INT32_MAX / 4) st = ms_err_set(err, MS_E_USAGE, "ms_tok_encode: %lld bytes, at most %d in one call",
                                               (long long)n, INT32_MAX / 4);
        else st = encode_chunk(&e, s, n);
        pos = n;
    }
    while (pos < n && st == MS_OK) {
        int64_t n_chars = 0, slice = pos, run = 0;
        int cur = -1;
        while (pos < n && n_chars < WINDOW_CHARS) {
            uint32_t cp = 0;
            int l = utf8_next(s + pos, n - pos, &cp);
            int sp = l > 0 && py_isspace(cp);
            if (l == 0) l = 1;
            if (cur < 0) cur = sp;
            if (sp != cur) {
                cur = sp;
                run = 1;
            } else if (++run > MAX_RUN_CHARS) {
                st = encode_chunk(&e, s + slice, pos - slice);
                if (st) break;
                slice = pos;
                run = 1;
            }
            pos += l;
            n_chars++;
        }
        if (st == MS_OK) st = encode_chunk(&e, s + slice, pos - slice);
    }
    pcre2_match_data_free(e.md);
    if (e.mc) pcre2_match_context_free(e.mc);
    if (e.js) pcre2_jit_stack_free(e.js);
    free(e.s.nxt);
    free(e.s.prv);
    free(e.s.tok);
    free(e.s.heap);
    return st;
}

/* ---- decode and lookups ------------------------------------------------- */

int64_t ms_tok_token_bytes(const ms_tok *t, int32_t id, const char **bytes) {
    if (id < 0 || id >= t->n_vocab) return -1;
    if (id < t->n_ranks) {
        *bytes = (const char *)t->blob + t->off[id];
        return t->off[id + 1] - t->off[id];
    }
    int64_t i = id - t->n_ranks;
    *bytes = t->sp_blob + t->sp_off[i];
    return t->sp_len[i];
}

int ms_tok_is_special(const ms_tok *t, int32_t id) {
    return id >= t->n_ranks && id < t->n_vocab;
}

int32_t ms_tok_special_id(const ms_tok *t, const char *name) {
    size_t l = strlen(name);
    for (int64_t i = 0; i < t->n_vocab - t->n_ranks; i++)
        if ((size_t)t->sp_len[i] == l && memcmp(t->sp_blob + t->sp_off[i], name, l) == 0)
            return (int32_t)(t->n_ranks + i);
    return -1;
}

ms_status ms_tok_decode(const ms_tok *t, const int32_t *ids, int64_t n,
                        char **out, size_t *len, ms_err *err) {
    *out = NULL;
    *len = 0;
    if (n < 0) return ms_err_set(err, MS_E_USAGE, "ms_tok_decode: negative count %lld", (long long)n);
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *b;
        int64_t l = ms_tok_token_bytes(t, ids[i], &b);
        if (l < 0)
            return ms_err_set(err, MS_E_USAGE, "ms_tok_decode: token id %d at position %lld outside [0, %lld)",
                              ids[i], (long long)i, (long long)t->n_vocab);
        if (ms_add_i64(total, l, &total))
            return ms_err_set(err, MS_E_USAGE, "ms_tok_decode: output size overflows");
    }
    char *buf = malloc((size_t)total + 1);
    if (!buf) return ms_err_set(err, MS_E_NOMEM, "ms_tok_decode: out of memory for %lld bytes", (long long)total);
    int64_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *b;
        int64_t l = ms_tok_token_bytes(t, ids[i], &b);
        memcpy(buf + o, b, (size_t)l);
        o += l;
    }
    buf[o] = '\0';
    *out = buf;
    *len = (size_t)o;
    return MS_OK;
}
