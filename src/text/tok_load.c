/* text/tok_load.c - loading the Kimi K3 tokenizer (see tokenizer.h,
 * docs/TOKENIZER.md; the layout it fills is text/tok_int.h), the builders
 * both loaders share, and the choice of file (tiktoken.model, else a Hugging
 * Face tokenizer.json: tok_hf.c).
 *
 * Owns: reading MODEL_DIR/tiktoken.model and MODEL_DIR/tokenizer_config.json
 *   (or tokenizer.json; whether two directories hold the same such files)
 *   (checked regular files, bounded sizes: base/file.h), parsing the ranks
 *   (strict canonical base64, dense unique ranks, unique bytes, every single
 *   byte present), the special-token names, the rank hash table, and compiling
 *   the pre-tokenizer regular expression.
 * Idea: the ranks file is split into lines once (counting, then checking each
 *   line), decoded into a temporary buffer, then laid out in rank order so a
 *   token is blob[off[r] .. off[r+1]); duplicates are found while filling the
 *   hash table and reported with both line numbers.
 * Invariants: those of tok_int.h hold for every ms_tok this file returns; on
 *   an error nothing is returned and everything allocated is freed.
 * Does not: encode or decode (tokenizer.c), produce specials from text.
 */
#include "text/tok_int.h"

#include "base/file.h"

#include <jansson.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Size limits of the two files: far above the released files' sizes (both
 * listed in docs/SECURITY.md, "Limits on metadata files"), so that anything
 * much larger is refused before a byte of it is read or allocated. */
#define TOK_MAX_RANKS_BYTES (64LL * 1024 * 1024)
#define TOK_MAX_CONFIG_BYTES (16LL * 1024 * 1024)
/* tokenizer.json: gpt-oss's is about 27 MB (o200k vocabulary and merges). */
#define TOK_MAX_HF_BYTES (128LL * 1024 * 1024)

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

/* ---- the ranks file ------------------------------------------------------ */

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

/* One line of tiktoken.model, checked: its base64 span, rank and line number. */
typedef struct line_span { int64_t b64, b64_len; int64_t rank; int64_t line; } line_span;

/* Pass 1: the number of entries (non-empty lines; a trailing '\r' is not part
 * of a line). */
static int64_t count_entries(const char *text, int64_t len) {
    int64_t n = 0;
    for (int64_t i = 0; i < len;) {
        int64_t e = i;
        while (e < len && text[e] != '\n') e++;
        int64_t le = e;
        if (le > i && text[le - 1] == '\r') le--;
        if (le > i) n++;
        i = e + 1;
    }
    return n;
}

/* Pass 2: split and check each of the n entries into ls[] (in file order),
 * recording the line that holds each rank in line_of_rank[] (zeroed by the
 * caller) and an upper bound of the decoded bytes in *total. */
static ms_status split_lines(const char *text, int64_t len, int64_t n, line_span *ls,
                             int64_t *line_of_rank, int64_t *total, ms_err *err) {
    int64_t k = 0, line = 0;
    *total = 0;
    for (int64_t i = 0; i < len;) {
        int64_t e = i;
        while (e < len && text[e] != '\n') e++;
        line++;
        int64_t le = e;
        if (le > i && text[le - 1] == '\r') le--;
        if (le > i) {
            int64_t sp = i;
            while (sp < le && text[sp] != ' ') sp++;
            if (sp == le || sp == i)
                return ms_err_set(err, MS_E_MODEL, "tiktoken.model line %lld: expected 'BASE64 RANK'",
                                  (long long)line);
            int64_t rank = 0, nd = 0;
            for (int64_t j = sp + 1; j < le; j++) {
                char c = text[j];
                if (c < '0' || c > '9' || nd >= 10) { nd = -1; break; }
                rank = rank * 10 + (c - '0');
                nd++;
            }
            if (nd <= 0)
                return ms_err_set(err, MS_E_MODEL, "tiktoken.model line %lld: rank is not a decimal number",
                                  (long long)line);
            if (rank >= n)
                return ms_err_set(err, MS_E_MODEL,
                                  "tiktoken.model line %lld: rank %lld leaves a gap (the file has %lld entries, "
                                  "ranks must be 0..%lld)", (long long)line, (long long)rank, (long long)n,
                                  (long long)(n - 1));
            if (line_of_rank[rank])
                return ms_err_set(err, MS_E_MODEL, "tiktoken.model line %lld: rank %lld already used on line %lld",
                                  (long long)line, (long long)rank, (long long)line_of_rank[rank]);
            line_of_rank[rank] = line;
            ls[k] = (line_span){ .b64 = i, .b64_len = sp - i, .rank = rank, .line = line };
            *total += (sp - i) / 4 * 3 + 3;
            k++;
        }
        i = e + 1;
    }
    return MS_OK;
}

/* Decode every entry into a temporary buffer, then lay the tokens out in rank
 * order: t->blob, t->off[0..n], t->max_tok_len. */
static ms_status lay_out_tokens(ms_tok *t, const char *text, const line_span *ls, int64_t n,
                                int64_t total, ms_err *err) {
    ms_status st = MS_OK;
    uint8_t *tmp = malloc((size_t)total + 1);
    t->off = malloc((size_t)(n + 1) * sizeof *t->off);
    int64_t *tmp_off = malloc((size_t)n * sizeof *tmp_off), *tmp_len = malloc((size_t)n * sizeof *tmp_len);
    if (!tmp || !t->off || !tmp_off || !tmp_len) {
        st = ms_err_set(err, MS_E_NOMEM, "tiktoken.model: out of memory");
        goto done;
    }
    int64_t used = 0;
    for (int64_t j = 0; j < n; j++) {
        int64_t d = b64_decode(text + ls[j].b64, ls[j].b64_len, tmp + used);
        if (d < 0) {
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
done:
    free(tmp);
    free(tmp_off);
    free(tmp_len);
    return st;
}

/* The hash table, byte_rank and pair_rank of t's n_ranks tokens (tok_int.h). */
ms_status tok_build_table(ms_tok *t, const char *file, const int64_t *line_of_rank, ms_err *err) {
    const int64_t n = t->n_ranks, o = t->off[n];
    if (o > (int64_t)UINT32_MAX)
        return ms_err_set(err, MS_E_MODEL, "%s: %lld bytes of tokens, at most 4 GiB supported", file, (long long)o);
    uint64_t cap = 1;
    while (cap < (uint64_t)n * 2) cap <<= 1;
    t->mask = cap - 1;
    t->table = malloc(cap * sizeof *t->table);
    t->pair_rank = malloc(65536 * sizeof *t->pair_rank);
    if (!t->table || !t->pair_rank) return ms_err_set(err, MS_E_NOMEM, "%s: out of memory", file);
    for (uint64_t i = 0; i < cap; i++) t->table[i] = (slot){ 0, -1, 0, 0 };
    memset(t->pair_rank, 0xFF, 65536 * sizeof *t->pair_rank);
    for (int i = 0; i < 256; i++) t->byte_rank[i] = -1;
    for (int64_t r = 0; r < n; r++) {
        const uint8_t *p = t->blob + t->off[r];
        int64_t l = t->off[r + 1] - t->off[r];
        uint64_t h = tok_hash_bytes(p, l), i = h & t->mask;
        for (;;) {
            const slot *e = &t->table[i];
            if (e->rank < 0) break;
            if (e->len == (uint64_t)l && memcmp(t->blob + e->off, p, (size_t)l) == 0) {
                if (!line_of_rank)
                    return ms_err_set(err, MS_E_MODEL, "%s: tokens %d and %lld have the same bytes", file,
                                      e->rank, (long long)r);
                int64_t a = line_of_rank[e->rank], b = line_of_rank[r];
                return ms_err_set(err, MS_E_MODEL, "%s line %lld: token bytes duplicate those of line %lld",
                                  file, (long long)(a > b ? a : b), (long long)(a > b ? b : a));
            }
            i = (i + 1) & t->mask;
        }
        t->table[i] = (slot){ (uint32_t)(h >> 32), (int32_t)r, (uint32_t)t->off[r], (uint32_t)l };
        if (l == 1) t->byte_rank[p[0]] = (int32_t)r;
        if (l == 2) t->pair_rank[(p[0] << 8) | p[1]] = (int32_t)r;
    }
    for (int i = 0; i < 256; i++)
        if (t->byte_rank[i] < 0)
            return ms_err_set(err, MS_E_MODEL, "%s: byte 0x%02X has no rank (every single byte must)", file, i);
    return MS_OK;
}

/* Parse tiktoken.model text into t (ranks, bytes, hash table); see the
 * invariants in tok_int.h. Errors: MS_E_MODEL naming the line; MS_E_NOMEM. */
static ms_status parse_ranks(ms_tok *t, const char *text, size_t len_sz, ms_err *err) {
    int64_t len = (int64_t)len_sz;
    if (len_sz > (size_t)INT64_MAX / 2) return ms_err_set(err, MS_E_MODEL, "tiktoken.model: too large");
    int64_t n = count_entries(text, len);
    if (n == 0) return ms_err_set(err, MS_E_MODEL, "tiktoken.model: no entries");
    if (n > INT32_MAX - 1)
        return ms_err_set(err, MS_E_MODEL, "tiktoken.model: %lld entries, at most %d supported",
                          (long long)n, INT32_MAX - 1);
    ms_status st;
    line_span *ls = malloc((size_t)n * sizeof *ls);
    int64_t *line_of_rank = calloc((size_t)n, sizeof *line_of_rank);
    int64_t total = 0;
    if (!ls || !line_of_rank) st = ms_err_set(err, MS_E_NOMEM, "tiktoken.model: out of memory");
    else st = split_lines(text, len, n, ls, line_of_rank, &total, err);
    if (st == MS_OK) st = lay_out_tokens(t, text, ls, n, total, err);
    if (st == MS_OK) {
        t->n_ranks = n;
        st = tok_build_table(t, "tiktoken.model", line_of_rank, err);
    }
    free(ls);
    free(line_of_rank);
    return st;
}

/* ---- specials, the regex, the whole tokenizer ------------------------------ */

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
    st = tok_set_specials(t, names, "tokenizer_config.json", err);
done:
    for (int64_t i = 0; i < n_sp; i++) free(names[i]);
    free(names);
    json_decref(root);
    return st;
}

/* The specials' names (tok_int.h); reserved names for the gaps. */
ms_status tok_set_specials(ms_tok *t, char *const *names, const char *file, ms_err *err) {
    const int64_t n_sp = t->n_vocab - t->n_ranks;
    int64_t total = 0;
    for (int64_t i = 0; i < n_sp; i++) total += names[i] ? (int64_t)strlen(names[i]) + 1 : 40;
    t->sp_blob = malloc((size_t)total + 1);
    t->sp_off = malloc((size_t)(n_sp + 1) * sizeof *t->sp_off);
    t->sp_len = malloc((size_t)(n_sp + 1) * sizeof *t->sp_len);
    if (!t->sp_blob || !t->sp_off || !t->sp_len) return ms_err_set(err, MS_E_NOMEM, "tokenizer: out of memory");
    int64_t o = 0;
    for (int64_t i = 0; i < n_sp; i++) {
        char buf[40];
        const char *name = names[i];
        if (!name) {
            snprintf(buf, sizeof buf, "<|reserved_token_%lld|>", (long long)(t->n_ranks + i));
            name = buf;
        }
        int64_t l = (int64_t)strlen(name);
        for (int64_t j = 0; j < i; j++)
            if (t->sp_len[j] == l && memcmp(t->sp_blob + t->sp_off[j], name, (size_t)l) == 0)
                return ms_err_set(err, MS_E_MODEL, "%s: tokens %lld and %lld share the name '%.60s'", file,
                                  (long long)(t->n_ranks + j), (long long)(t->n_ranks + i), name);
        t->sp_off[i] = o;
        t->sp_len[i] = l;
        memcpy(t->sp_blob + o, name, (size_t)l + 1);
        o += l + 1;
    }
    return MS_OK;
}

ms_status tok_compile(ms_tok *t, const char *pattern, const char *file, ms_err *err) {
    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return ms_err_set(err, MS_E_MODEL, "%s: the pre-tokenizer regex does not compile at offset %zu: %s",
                          file, (size_t)eo, (const char *)msg);
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
        if (n_vocab < t->n_ranks || n_vocab > INT32_MAX || n_vocab - t->n_ranks > TOK_MAX_SPECIALS)
            st = ms_err_set(err, MS_E_MODEL, "tokenizer: n_vocab %lld does not fit the %lld BPE ranks "
                            "(need n_ranks <= n_vocab <= n_ranks + %d)", (long long)n_vocab,
                            (long long)t->n_ranks, TOK_MAX_SPECIALS);
        t->n_vocab = n_vocab;
    }
    if (st == MS_OK) st = parse_specials(t, config_json, config_len, err);
    if (st == MS_OK) st = tok_compile(t, k3_pattern, "tiktoken.model", err);
    t->windowed = 1;
    t->whole_piece = 1;
    if (st != MS_OK) {
        ms_tok_free(t);
        return st;
    }
    *out = t;
    return MS_OK;
}

ms_tok_kind ms_tok_find(const char *model_dir) {
    size_t dl = strlen(model_dir);
    char *p = malloc(dl + 32);
    if (!p) return MS_TOK_NONE;
    ms_tok_kind k = MS_TOK_NONE;
    snprintf(p, dl + 32, "%s/tiktoken.model", model_dir);
    if (access(p, F_OK) == 0) k = MS_TOK_TIKTOKEN;
    else {
        snprintf(p, dl + 32, "%s/tokenizer.json", model_dir);
        if (access(p, F_OK) == 0) k = MS_TOK_HF_JSON;
    }
    free(p);
    return k;
}

/* 1: DIR_A/NAME and DIR_B/NAME can be read and hold the same bytes. Read in
 * blocks: whole-file buffers of tens of MB would stay in malloc's heap (its
 * threshold for mapping them moves up after the loader's) and be counted as
 * the process's size when the budget is split. */
static int same_file(const char *dir_a, const char *dir_b, const char *name, int64_t max_bytes) {
    char pa[4200], pb[4200];
    snprintf(pa, sizeof pa, "%s/%s", dir_a, name);
    snprintf(pb, sizeof pb, "%s/%s", dir_b, name);
    int fa = -1, fb = -1;
    int64_t na = 0, nb = 0;
    ms_err e;
    ms_err_clear(&e);
    int same = ms_file_open(pa, max_bytes, &fa, &na, &e) == MS_OK && ms_file_open(pb, max_bytes, &fb, &nb, &e) == MS_OK &&
               na == nb;
    enum { BLOCK = 1 << 16 };
    char *ba = same ? malloc(2 * BLOCK) : NULL;
    char *bb = ba ? ba + BLOCK : NULL;
    same = same && ba;
    for (int64_t off = 0; same && off < na; off += BLOCK) {
        const size_t n = (size_t)(na - off < BLOCK ? na - off : BLOCK);
        same = ms_file_pread_full(fa, ba, n, off, pa, &e) == MS_OK && ms_file_pread_full(fb, bb, n, off, pb, &e) == MS_OK &&
               memcmp(ba, bb, n) == 0;
    }
    free(ba);
    if (fa >= 0) close(fa);
    if (fb >= 0) close(fb);
    return same;
}

int ms_tok_same_files(const char *dir_a, const char *dir_b) {
    const ms_tok_kind k = ms_tok_find(dir_a);
    if (k != ms_tok_find(dir_b)) return 0;
    if (k == MS_TOK_HF_JSON) return same_file(dir_a, dir_b, "tokenizer.json", TOK_MAX_HF_BYTES);
    if (k == MS_TOK_TIKTOKEN)
        return same_file(dir_a, dir_b, "tiktoken.model", TOK_MAX_RANKS_BYTES) &&
               same_file(dir_a, dir_b, "tokenizer_config.json", TOK_MAX_CONFIG_BYTES);
    return 1;
}

ms_status ms_tok_load(const char *model_dir, int64_t n_vocab, ms_tok **out, ms_err *err) {
    *out = NULL;
    size_t dl = strlen(model_dir);
    const ms_tok_kind kind = ms_tok_find(model_dir);
    char *p1 = malloc(dl + 32), *p2 = malloc(dl + 32);
    char *ranks = NULL, *cfg = NULL;
    size_t rn = 0, cn = 0;
    ms_status st;
    if (!p1 || !p2) { st = ms_err_set(err, MS_E_NOMEM, "tokenizer: out of memory"); goto done; }
    if (kind == MS_TOK_HF_JSON) {       /* no tiktoken.model: the Hugging Face file */
        snprintf(p1, dl + 32, "%s/tokenizer.json", model_dir);
        st = ms_file_read(p1, TOK_MAX_HF_BYTES, &ranks, &rn, err);
        if (st == MS_OK) st = tok_load_hf_mem(ranks, rn, n_vocab, out, err);
        free(ranks);
        ranks = NULL;
        /* The file's text and its parse tree are freed: about 8x the file (150 MB
           of gpt-oss's 27 MB) that malloc would otherwise keep in the process,
           where the memory plan does not count it. (tiktoken.model's load frees
           a few MB: left to malloc, whose reuse keeps the process's measured
           size steady from one engine to the next.) */
        malloc_trim(0);
        goto done;
    }
    snprintf(p1, dl + 32, "%s/tiktoken.model", model_dir);
    snprintf(p2, dl + 32, "%s/tokenizer_config.json", model_dir);
    st = ms_file_read(p1, TOK_MAX_RANKS_BYTES, &ranks, &rn, err);
    if (st == MS_OK) st = ms_file_read(p2, TOK_MAX_CONFIG_BYTES, &cfg, &cn, err);
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
    free(t->merges);
    if (t->re) pcre2_code_free(t->re);
    free(t);
}

int64_t ms_tok_n_vocab(const ms_tok *t) { return t->n_vocab; }

int64_t ms_tok_bytes(const ms_tok *t) {
    if (!t) return 0;
    const int64_t n_sp = t->n_vocab - t->n_ranks;
    int64_t b = (int64_t)sizeof *t + t->off[t->n_ranks] + (t->n_ranks + 1) * (int64_t)sizeof *t->off +
                (int64_t)(t->mask + 1) * (int64_t)sizeof *t->table + 65536 * (int64_t)sizeof *t->pair_rank;
    if (t->sp_off) b += n_sp * (int64_t)(sizeof *t->sp_off + sizeof *t->sp_len);
    for (int64_t i = 0; t->sp_len && i < n_sp; i++) b += t->sp_len[i] + 1;
    if (t->merges) b += (int64_t)(t->merge_mask + 1) * (int64_t)sizeof *t->merges;
    size_t re = 0, jit = 0;
    if (t->re && pcre2_pattern_info(t->re, PCRE2_INFO_SIZE, &re) == 0) b += (int64_t)re;
    if (t->re && pcre2_pattern_info(t->re, PCRE2_INFO_JITSIZE, &jit) == 0) b += (int64_t)jit;
    return b;
}
