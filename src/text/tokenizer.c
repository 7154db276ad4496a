/* text/tokenizer.c - the Kimi K3 tokenizer (see tokenizer.h, docs/TOKENIZER.md).
 *
 * Owns: the parsed vocabulary (token bytes in rank order, a rank hash table
 *   keyed by raw bytes, the special-token names), the compiled pre-tokenizer
 *   regular expression, the windowing of long inputs, and BPE merging.
 * Idea: encode = windows -> regex pieces -> BPE per piece. Windows replicate
 *   the reference exactly (400,000 code points; inside a window a cut before
 *   any character that would make a run of whitespace or of non-whitespace
 *   longer than 25,000). Each window is matched as its own subject, so the
 *   regex never sees more than 400,000 characters and no piece is longer than
 *   about 50,000 characters. BPE merges the lowest-rank adjacent pair first
 *   (leftmost on ties, as tiktoken does): a direct scan for short pieces, a
 *   linked list + binary heap (O(n log n)) for long ones.
 * Invariants:
 *   1. ranks are dense (0..n_ranks-1), unique, with unique non-empty bytes,
 *      and every single byte 0x00..0xFF has a rank, so every byte string is
 *      encodable and decode(encode(b)) == b.
 *   2. specials occupy [n_ranks, n_vocab); each has a unique non-empty name.
 *   3. bytes that no regex alternative matches (only invalid UTF-8, which the
 *      PCRE2_MATCH_INVALID_UTF mode treats as a barrier) become one piece per
 *      byte, i.e. one single-byte token per invalid byte.
 * Does not: produce special tokens from text, normalise text, or touch the
 *   environment. The loaded object is read-only; encode allocates its own
 *   match data and scratch per call.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    WINDOW_CHARS = 400000,   /* reference TIKTOKEN_MAX_ENCODE_CHARS */
    MAX_RUN_CHARS = 25000,   /* reference MAX_NO_WHITESPACES_CHARS */
    SMALL_PIECE = 64,        /* pieces up to this many bytes use the direct scan */
    MAX_SPECIALS = 1 << 20,  /* sanity cap on n_vocab - n_ranks */
};

/* The spec's pattern for PCRE2. Three rewrites, each checked against the real
 * tiktoken by tests/t_tokenizer_parity.sh (unicode sweep):
 *   - `X&&[^\p{Han}]` (class intersection) -> `(?:(?!\p{sc:Han})X)`;
 *   - `\p{Han}` -> `\p{sc:Han}`: PCRE2 >= 10.40 reads a bare script name as
 *     Script_Extensions (which would pull in U+3001, U+302A, ...); Rust's regex
 *     (tiktoken) reads it as Script;
 *   - `\s` -> the explicit Unicode White_Space set: PCRE2's \s adds U+180E
 *     (\h), which Rust's \s (White_Space) does not. */
#define WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
           "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define NOHAN "(?!\\p{sc:Han})"
#define UPPER "(?:" NOHAN "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])"
#define LOWER "(?:" NOHAN "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])"
#define CONTR "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
static const char k3_pattern[] =
    "\\p{sc:Han}+"
    "|[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+" CONTR
    "|[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER "*" CONTR
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

/* A hash slot carries what a probe needs (fingerprint, length, offset) so a
 * miss touches one cache line and a hit one more (the bytes). */
typedef struct slot {
    uint32_t fp;          /* high 32 bits of the hash */
    int32_t rank;         /* -1: empty */
    uint32_t off, len;    /* the token's bytes: blob[off .. off + len) */
} slot;

struct ms_tok {
    int64_t n_ranks;
    int64_t n_vocab;
    uint8_t *blob;        /* token bytes, rank order */
    int64_t *off;         /* [n_ranks + 1]: token r is blob[off[r] .. off[r+1]) */
    slot *table;          /* open addressing, rank -1 = empty; size mask + 1 */
    uint64_t mask;
    int32_t byte_rank[256];
    int32_t *pair_rank;   /* [65536]: rank of a 2-byte token, or -1 */
    int64_t max_tok_len;
    char *sp_blob;        /* special names, each NUL-terminated */
    int64_t *sp_off;      /* [n_vocab - n_ranks] offsets into sp_blob */
    int64_t *sp_len;
    pcre2_code *re;
};

/* ---- hashing of raw token bytes ---------------------------------------- */

static uint64_t hash_bytes(const uint8_t *p, int64_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, (size_t)n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 32;
    return h;
}

static int32_t rank_lookup(const ms_tok *t, const uint8_t *p, int64_t n) {
    if (n == 1) return t->byte_rank[p[0]];
    if (n == 2) return t->pair_rank[(p[0] << 8) | p[1]];
    if (n > t->max_tok_len) return -1;
    uint64_t h = hash_bytes(p, n), i = h & t->mask;
    uint32_t fp = (uint32_t)(h >> 32);
    for (;;) {
        const slot *e = &t->table[i];
        if (e->rank < 0) return -1;
        if (e->fp == fp && e->len == (uint32_t)n && memcmp(t->blob + e->off, p, (size_t)n) == 0) return e->rank;
        i = (i + 1) & t->mask;
    }
}

/* ---- loading ------------------------------------------------------------ */

static int b64_val(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Strict standard base64 with padding. Returns decoded length or -1. */
static int64_t b64_decode(const char *s, int64_t n, uint8_t *out) {
    if (n == 0 || n % 4 != 0) return -1;
    int64_t o = 0;
    for (int64_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=') {
                /* padding only in the last quad, positions 2 or 3, and then to the end */
                if (i + 4 != n || k < 2) return -1;
                pad++;
                v[k] = 0;
            } else {
                if (pad) return -1;
                v[k] = b64_val(c);
                if (v[k] < 0) return -1;
            }
        }
        uint32_t x = ((uint32_t)v[0] << 18) | ((uint32_t)v[1] << 12) | ((uint32_t)v[2] << 6) | (uint32_t)v[3];
        out[o++] = (uint8_t)(x >> 16);
        if (pad < 2) out[o++] = (uint8_t)(x >> 8);
        if (pad < 1) out[o++] = (uint8_t)x;
        /* canonical form: the bits dropped by the padding must be zero */
        if (pad == 2 && (x & 0xFFFF)) return -1;
        if (pad == 1 && (x & 0xFF)) return -1;
    }
    return o;
}

typedef struct line_span { int64_t b64, b64_len; int64_t rank; int64_t line; } line_span;

static ms_status parse_ranks(ms_tok *t, const char *text, size_t len_sz, ms_err *err) {
    int64_t len = (int64_t)len_sz;
    if (len_sz > (size_t)INT64_MAX / 2) return ms_err_set(err, MS_E_MODEL, "tiktoken.model: too large");
    /* pass 1: count entries (non-empty lines) */
    int64_t n = 0;
    for (int64_t i = 0; i < len;) {
        int64_t e = i;
        while (e < len && text[e] != '\n') e++;
        int64_t le = e;
        if (le > i && text[le - 1] == '\r') le--;
        if (le > i) n++;
        i = e + 1;
    }
    if (n == 0) return ms_err_set(err, MS_E_MODEL, "tiktoken.model: no entries");
    if (n > INT32_MAX - 1)
        return ms_err_set(err, MS_E_MODEL, "tiktoken.model: %lld entries, at most %d supported",
                          (long long)n, INT32_MAX - 1);
    ms_status st = MS_OK;
    line_span *ls = malloc((size_t)n * sizeof *ls);
    int64_t *line_of_rank = malloc((size_t)n * sizeof *line_of_rank);
    uint8_t *tmp = NULL;
    if (!ls || !line_of_rank) { st = ms_err_set(err, MS_E_NOMEM, "tiktoken.model: out of memory"); goto done; }
    for (int64_t r = 0; r < n; r++) line_of_rank[r] = 0;
    /* pass 2: split and check each line */
    int64_t k = 0, line = 0, total = 0;
    for (int64_t i = 0; i < len;) {
        int64_t e = i;
        while (e < len && text[e] != '\n') e++;
        line++;
        int64_t le = e;
        if (le > i && text[le - 1] == '\r') le--;
        if (le > i) {
            int64_t sp = i;
            while (sp < le && text[sp] != ' ') sp++;
            if (sp == le || sp == i) {
                st = ms_err_set(err, MS_E_MODEL, "tiktoken.model line %lld: expected 'BASE64 RANK'",
                                (long long)line);
                goto done;
            }
            int64_t rank = 0, nd = 0;
            for (int64_t j = sp + 1; j < le; j++) {
                char c = text[j];
                if (c < '0' || c > '9' || nd >= 10) { nd = -1; break; }
                rank = rank * 10 + (c - '0');
                nd++;
            }
            if (nd <= 0) {
                st = ms_err_set(err, MS_E_MODEL, "tiktoken.model line %lld: rank is not a decimal number",
                                (long long)line);
                goto done;
            }
            if (rank >= n) {
                st = ms_err_set(err, MS_E_MODEL,
                                "tiktoken.model line %lld: rank %lld leaves a gap (the file has %lld entries, "
                                "ranks must be 0..%lld)", (long long)line, (long long)rank, (long long)n,
                                (long long)(n - 1));
                goto done;
            }
            if (line_of_rank[rank]) {
                st = ms_err_set(err, MS_E_MODEL, "tiktoken.model line %lld: rank %lld already used on line %lld",
                                (long long)line, (long long)rank, (long long)line_of_rank[rank]);
                goto done;
            }
            line_of_rank[rank] = line;
            ls[k] = (line_span){ .b64 = i, .b64_len = sp - i, .rank = rank, .line = line };
            total += (sp - i) / 4 * 3 + 3;
            k++;
        }
        i = e + 1;
    }
    /* decode into a temporary buffer, then lay tokens out in rank order */
    tmp = malloc((size_t)total + 1);
    t->off = malloc((size_t)(n + 1) * sizeof *t->off);
    int64_t *tmp_off = malloc((size_t)n * sizeof *tmp_off), *tmp_len = malloc((size_t)n * sizeof *tmp_len);
    if (!tmp || !t->off || !tmp_off || !tmp_len) {
        free(tmp_off); free(tmp_len);
        st = ms_err_set(err, MS_E_NOMEM, "tiktoken.model: out of memory");
        goto done;
    }
    int64_t used = 0;
    for (int64_t j = 0; j < n; j++) {
        int64_t d = b64_decode(text + ls[j].b64, ls[j].b64_len, tmp + used);
        if (d < 0) {
            free(tmp_off); free(tmp_len);
            st = ms_err_set(err, MS_E_MODEL, "tiktoken.model line %lld: bad base64 '%.*s'",
                            (long long)ls[j].line, (int)(ls[j].b64_len > 64 ? 64 : ls[j].b64_len),
                            text + ls[j].b64);
            goto done;
        }
        tmp_off[ls[j].rank] = used;
        tmp_len[ls[j].rank] = d;
        used += d;
    }
    t->blob = malloc((size_t)used + 1);
    if (!t->blob) {
        free(tmp_off); free(tmp_len);
        st = ms_err_set(err, MS_E_NOMEM, "tiktoken.model: out of memory");
        goto done;
    }
    int64_t o = 0;
    t->max_tok_len = 0;
    for (int64_t r = 0; r < n; r++) {
        t->off[r] = o;
        memcpy(t->blob + o, tmp + tmp_off[r], (size_t)tmp_len[r]);
        o += tmp_len[r];
        if (tmp_len[r] > t->max_tok_len) t->max_tok_len = tmp_len[r];
    }
    t->off[n] = o;
    free(tmp_off);
    free(tmp_len);
    t->n_ranks = n;

    /* the hash table; duplicates are refused with both line numbers */
    if (o > (int64_t)UINT32_MAX) {
        st = ms_err_set(err, MS_E_MODEL, "tiktoken.model: %lld bytes of tokens, at most 4 GiB supported", (long long)o);
        goto done;
    }
    uint64_t cap = 1;
    while (cap < (uint64_t)n * 2) cap <<= 1;
    t->mask = cap - 1;
    t->table = malloc(cap * sizeof *t->table);
    t->pair_rank = malloc(65536 * sizeof *t->pair_rank);
    if (!t->table || !t->pair_rank) { st = ms_err_set(err, MS_E_NOMEM, "tiktoken.model: out of memory"); goto done; }
    for (uint64_t i = 0; i < cap; i++) t->table[i] = (slot){ 0, -1, 0, 0 };
    memset(t->pair_rank, 0xFF, 65536 * sizeof *t->pair_rank);
    for (int i = 0; i < 256; i++) t->byte_rank[i] = -1;
    for (int64_t r = 0; r < n; r++) {
        const uint8_t *p = t->blob + t->off[r];
        int64_t l = t->off[r + 1] - t->off[r];
        uint64_t h = hash_bytes(p, l), i = h & t->mask;
        for (;;) {
            const slot *e = &t->table[i];
            if (e->rank < 0) break;
            if (e->len == (uint64_t)l && memcmp(t->blob + e->off, p, (size_t)l) == 0) {
                int64_t a = line_of_rank[e->rank], b = line_of_rank[r];
                st = ms_err_set(err, MS_E_MODEL, "tiktoken.model line %lld: token bytes duplicate those of line %lld",
                                (long long)(a > b ? a : b), (long long)(a > b ? b : a));
                goto done;
            }
            i = (i + 1) & t->mask;
        }
        t->table[i] = (slot){ (uint32_t)(h >> 32), (int32_t)r, (uint32_t)t->off[r], (uint32_t)l };
        if (l == 1) t->byte_rank[p[0]] = (int32_t)r;
        if (l == 2) t->pair_rank[(p[0] << 8) | p[1]] = (int32_t)r;
    }
    for (int i = 0; i < 256; i++)
        if (t->byte_rank[i] < 0) {
            st = ms_err_set(err, MS_E_MODEL, "tiktoken.model: byte 0x%02X has no rank (every single byte must)", i);
            goto done;
        }
done:
    free(ls);
    free(line_of_rank);
    free(tmp);
    return st;
}

static ms_status parse_specials(ms_tok *t, const char *json, size_t json_len, ms_err *err) {
    int64_t n_sp = t->n_vocab - t->n_ranks;
    char **names = calloc((size_t)(n_sp > 0 ? n_sp : 1), sizeof *names);
    if (!names) return ms_err_set(err, MS_E_NOMEM, "tokenizer: out of memory");
    ms_status st = MS_OK;
    json_t *root = NULL;
    if (json) {
        json_error_t je;
        root = json_loadb(json, json_len, JSON_REJECT_DUPLICATES, &je);
        if (!root) {
            st = ms_err_set(err, MS_E_MODEL, "tokenizer_config.json line %d: %s", je.line, je.text);
            goto done;
        }
        json_t *dec = json_is_object(root) ? json_object_get(root, "added_tokens_decoder") : NULL;
        if (!json_is_object(dec)) {
            st = ms_err_set(err, MS_E_MODEL, "tokenizer_config.json: expected an object "
                            "'added_tokens_decoder', found none");
            goto done;
        }
        const char *key;
        json_t *val;
        json_object_foreach(dec, key, val) {
            int64_t id = 0;
            size_t kl = strlen(key);
            int ok = kl > 0 && kl <= 10;
            for (size_t i = 0; ok && i < kl; i++) {
                if (key[i] < '0' || key[i] > '9') ok = 0;
                else id = id * 10 + (key[i] - '0');
            }
            if (!ok) {
                st = ms_err_set(err, MS_E_MODEL, "tokenizer_config.json: added_tokens_decoder key '%.40s' "
                                "is not a token id", key);
                goto done;
            }
            if (id < t->n_ranks || id >= t->n_vocab) {
                st = ms_err_set(err, MS_E_MODEL, "tokenizer_config.json: special token id %lld outside "
                                "[%lld, %lld) (after the %lld BPE ranks, below n_vocab)", (long long)id,
                                (long long)t->n_ranks, (long long)t->n_vocab, (long long)t->n_ranks);
                goto done;
            }
            json_t *c = json_is_object(val) ? json_object_get(val, "content") : NULL;
            if (!json_is_string(c) || json_string_length(c) == 0 ||
                strlen(json_string_value(c)) != json_string_length(c)) {
                st = ms_err_set(err, MS_E_MODEL, "tokenizer_config.json: token %lld: expected a non-empty "
                                "string 'content' without NUL", (long long)id);
                goto done;
            }
            names[id - t->n_ranks] = strdup(json_string_value(c));
            if (!names[id - t->n_ranks]) { st = ms_err_set(err, MS_E_NOMEM, "tokenizer: out of memory"); goto done; }
        }
    }
    /* fill reserved names, lay out the blob */
    int64_t total = 0;
    for (int64_t i = 0; i < n_sp; i++) {
        if (!names[i]) {
            char buf[64];
            snprintf(buf, sizeof buf, "<|reserved_token_%lld|>", (long long)(t->n_ranks + i));
            names[i] = strdup(buf);
            if (!names[i]) { st = ms_err_set(err, MS_E_NOMEM, "tokenizer: out of memory"); goto done; }
        }
        total += (int64_t)strlen(names[i]) + 1;
    }
    t->sp_blob = malloc((size_t)total + 1);
    t->sp_off = malloc((size_t)(n_sp + 1) * sizeof *t->sp_off);
    t->sp_len = malloc((size_t)(n_sp + 1) * sizeof *t->sp_len);
    if (!t->sp_blob || !t->sp_off || !t->sp_len) { st = ms_err_set(err, MS_E_NOMEM, "tokenizer: out of memory"); goto done; }
    int64_t o = 0;
    for (int64_t i = 0; i < n_sp; i++) {
        int64_t l = (int64_t)strlen(names[i]);
        for (int64_t j = 0; j < i; j++)
            if (t->sp_len[j] == l && memcmp(t->sp_blob + t->sp_off[j], names[i], (size_t)l) == 0) {
                st = ms_err_set(err, MS_E_MODEL, "tokenizer_config.json: tokens %lld and %lld share the name '%.60s'",
                                (long long)(t->n_ranks + j), (long long)(t->n_ranks + i), names[i]);
                goto done;
            }
        t->sp_off[i] = o;
        t->sp_len[i] = l;
        memcpy(t->sp_blob + o, names[i], (size_t)l + 1);
        o += l + 1;
    }
done:
    for (int64_t i = 0; i < n_sp; i++) free(names[i]);
    free(names);
    json_decref(root);
    return st;
}

static ms_status compile_pattern(ms_tok *t, ms_err *err) {
    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)k3_pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return ms_err_set(err, MS_E_INTERNAL, "tokenizer: pre-tokenizer regex does not compile at %zu: %s",
                          (size_t)eo, (const char *)msg);
    }
    /* JIT is an optimisation: without it (unsupported CPU, no exec memory)
     * pcre2_match interprets the same pattern with the same results. */
    (void)pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE);
    return MS_OK;
}

ms_status ms_tok_load_mem(const char *ranks_text, size_t ranks_len,
                          const char *config_json, size_t config_len,
                          int64_t n_vocab, ms_tok **out, ms_err *err) {
    *out = NULL;
    if (!ranks_text) return ms_err_set(err, MS_E_USAGE, "ms_tok_load_mem: no ranks text");
    ms_tok *t = calloc(1, sizeof *t);
    if (!t) return ms_err_set(err, MS_E_NOMEM, "tokenizer: out of memory");
    ms_status st = parse_ranks(t, ranks_text, ranks_len, err);
    if (st == MS_OK) {
        if (n_vocab < t->n_ranks || n_vocab > INT32_MAX || n_vocab - t->n_ranks > MAX_SPECIALS)
            st = ms_err_set(err, MS_E_MODEL, "tokenizer: n_vocab %lld does not fit the %lld BPE ranks "
                            "(need n_ranks <= n_vocab <= n_ranks + %d)", (long long)n_vocab,
                            (long long)t->n_ranks, MAX_SPECIALS);
        t->n_vocab = n_vocab;
    }
    if (st == MS_OK) st = parse_specials(t, config_json, config_len, err);
    if (st == MS_OK) st = compile_pattern(t, err);
    if (st != MS_OK) {
        ms_tok_free(t);
        return st;
    }
    *out = t;
    return MS_OK;
}

static ms_status read_file(const char *path, char **out, size_t *n, ms_err *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ms_err_set(err, MS_E_IO, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) { fclose(f); return ms_err_set(err, MS_E_NOMEM, "%s: out of memory", path); }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap) break;
        if (cap > ((size_t)1 << 40)) { free(buf); fclose(f); return ms_err_set(err, MS_E_MODEL, "%s: too large", path); }
        char *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); return ms_err_set(err, MS_E_IO, "%s: read error", path); }
    *out = buf;
    *n = len;
    return MS_OK;
}

ms_status ms_tok_load(const char *model_dir, int64_t n_vocab, ms_tok **out, ms_err *err) {
    *out = NULL;
    size_t dl = strlen(model_dir);
    char *p1 = malloc(dl + 32), *p2 = malloc(dl + 32);
    char *ranks = NULL, *cfg = NULL;
    size_t rn = 0, cn = 0;
    ms_status st;
    if (!p1 || !p2) { st = ms_err_set(err, MS_E_NOMEM, "tokenizer: out of memory"); goto done; }
    snprintf(p1, dl + 32, "%s/tiktoken.model", model_dir);
    snprintf(p2, dl + 32, "%s/tokenizer_config.json", model_dir);
    st = read_file(p1, &ranks, &rn, err);
    if (st == MS_OK) st = read_file(p2, &cfg, &cn, err);
    if (st == MS_OK) st = ms_tok_load_mem(ranks, rn, cfg, cn, n_vocab, out, err);
done:
    free(p1);
    free(p2);
    free(ranks);
    free(cfg);
    return st;
}

void ms_tok_free(ms_tok *t) {
    if (!t) return;
    free(t->blob);
    free(t->off);
    free(t->table);
    free(t->pair_rank);
    free(t->sp_blob);
    free(t->sp_off);
    free(t->sp_len);
    if (t->re) pcre2_code_free(t->re);
    free(t);
}

int64_t ms_tok_n_vocab(const ms_tok *t) { return t->n_vocab; }

/* ---- BPE ---------------------------------------------------------------- */

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
        int32_t r = t->pair_rank[(p[i] << 8) | p[i + 1]];
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
            int32_t rk = (int32_t)rank_lookup(t, p + pl, end - pl);
            if (rk >= 0) heap_push(h, &hn, (heap_ent){ rk, pl, end - pl });
        }
        if (end < n) {
            int32_t e2 = nxt[end];
            int32_t rk = (int32_t)rank_lookup(t, p + l, e2 - l);
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
        pr[i] = i + 1 < n ? t->pair_rank[(p[i] << 8) | p[i + 1]] : -1;
    }
    start[n] = (int32_t)n;
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
            pr[best - 1] = rank_lookup(t, p + start[best - 1], start[best + 1] - start[best - 1]);
        pr[best] = best + 1 < m ? rank_lookup(t, p + start[best], start[best + 2] - start[best]) : -1;
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
    int32_t r = rank_lookup(e->t, p, n);
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
        /* unmatched bytes (invalid UTF-8): one piece per byte */
        for (; pos < ms; pos++)
            if ((st = encode_piece(e, c + pos, 1))) return st;
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
