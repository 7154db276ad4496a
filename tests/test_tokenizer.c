/* tests/test_tokenizer.c - unit tests of text/tokenizer (no network, no files).
 *
 * Without arguments: hand-made vocabularies built in memory check
 *   - merge order: lowest rank first, not left-to-right greedy;
 *   - the heap merge of long pieces against a naive reference BPE here;
 *   - the pre-tokenizer's splits on hand-checked strings (contractions,
 *     digit groups, Han runs, spaces before a word, newlines, invalid UTF-8),
 *     made visible by a "piece-revealing" vocabulary (see check_split);
 *   - the reference's windowing (25,000-character runs, 400,000-char windows);
 *   - specials: never produced from text, decoded by name, reserved names,
 *     lookups; malformed tiktoken.model / tokenizer_config.json refused with
 *     the line number; round trip on random bytes; two threads agree.
 * With arguments (used by tests/t_tokenizer_parity.sh and the benchmark):
 *   --encode DIR N_VOCAB            stdin -> ids, one per line, on stdout
 *   --encode-raw DIR N_VOCAB        stdin -> ids as native int32 on stdout
 *   --encode-raw DIR N_VOCAB FILE.. for each file, its id count then its ids,
 *                                   native int32 (count -1: not read or not
 *                                   encoded); the tokenizer loads once
 *   --roundtrip DIR N_VOCAB FILE..  decode(encode(file)) == file for each
 *   --bench DIR N_VOCAB FILE        encode MB/s (best of 3) on stdout
 *   --pcre2-cn                      the Unicode version of the linked PCRE2 and
 *                                   the code point ranges it calls unassigned
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tokenizer.h"

#include "check.h"

#include <pcre2.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- building vocabularies ---------------------------------------------- */

typedef struct vocab {
    char **tok;
    size_t *len;
    int64_t n, cap;
} vocab;

static int64_t vocab_find(const vocab *v, const char *b, size_t l) {
    for (int64_t i = 0; i < v->n; i++)
        if (v->len[i] == l && memcmp(v->tok[i], b, l) == 0) return i;
    return -1;
}

/* Append token bytes (no-op if present); returns the rank. */
static int64_t vocab_add(vocab *v, const char *b, size_t l) {
    int64_t r = vocab_find(v, b, l);
    if (r >= 0) return r;
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 512;
        v->tok = realloc(v->tok, (size_t)v->cap * sizeof *v->tok);
        v->len = realloc(v->len, (size_t)v->cap * sizeof *v->len);
    }
    v->tok[v->n] = malloc(l + 1);
    memcpy(v->tok[v->n], b, l);
    v->len[v->n] = l;
    return v->n++;
}

static void vocab_bytes(vocab *v) {
    for (int i = 0; i < 256; i++) {
        char c = (char)i;
        vocab_add(v, &c, 1);
    }
}

static void vocab_free(vocab *v) {
    for (int64_t i = 0; i < v->n; i++) free(v->tok[i]);
    free(v->tok);
    free(v->len);
    memset(v, 0, sizeof *v);
}

static size_t b64(const unsigned char *s, size_t n, char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t x = (uint32_t)s[i] << 16;
        if (i + 1 < n) x |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n) x |= s[i + 2];
        out[o++] = A[(x >> 18) & 63];
        out[o++] = A[(x >> 12) & 63];
        out[o++] = i + 1 < n ? A[(x >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? A[x & 63] : '=';
    }
    return o;
}

/* tiktoken.model text; rank i = v->tok[i]. Caller frees. */
static char *vocab_text(const vocab *v, size_t *n_out) {
    size_t cap = 64;
    for (int64_t i = 0; i < v->n; i++) cap += v->len[i] * 4 / 3 + 32;
    char *s = malloc(cap);
    size_t o = 0;
    for (int64_t i = 0; i < v->n; i++) {
        o += b64((const unsigned char *)v->tok[i], v->len[i], s + o);
        o += (size_t)sprintf(s + o, " %lld\n", (long long)i);
    }
    *n_out = o;
    return s;
}

static ms_tok *vocab_load(const vocab *v, const char *cfg, int64_t n_vocab) {
    size_t n;
    char *txt = vocab_text(v, &n);
    ms_tok *t = NULL;
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_tok_load_mem(txt, n, cfg, cfg ? strlen(cfg) : 0, n_vocab ? n_vocab : v->n, &t, &err);
    if (st != MS_OK) fprintf(stderr, "load failed: %s\n", err.msg);
    free(txt);
    return t;
}

static int64_t encode(const ms_tok *t, const char *s, size_t n, int32_t **ids) {
    int64_t n_ids = 0, cap = 0;
    *ids = NULL;
    ms_err err;
    ms_err_clear(&err);
    if (ms_tok_encode(t, s, n, ids, &n_ids, &cap, &err) != MS_OK) {
        fprintf(stderr, "encode failed: %s\n", err.msg);
        return -1;
    }
    return n_ids;
}

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* ---- merge order -------------------------------------------------------- */

static void test_merge_order(void) {
    vocab v = {0};
    vocab_bytes(&v);
    int64_t r_bc = vocab_add(&v, "bc", 2);   /* 256: lower rank, right pair */
    int64_t r_ab = vocab_add(&v, "ab", 2);   /* 257: left pair, higher rank */
    int64_t r_xyz = vocab_add(&v, "yz", 2);
    vocab_add(&v, "xy", 2);
    int64_t r_xyz3 = vocab_add(&v, "xyz", 3);
    ms_tok *t = vocab_load(&v, NULL, 0);
    CHECK(t != NULL, "tiny vocabulary loads");
    if (!t) { vocab_free(&v); return; }
    int32_t *ids;
    /* lowest rank first: "bc" before "ab" -> [a][bc]; greedy would give [ab][c] */
    int64_t n = encode(t, "abc", 3, &ids);
    CHECK(n == 2 && ids[0] == 'a' && ids[1] == r_bc, "abc -> [a, bc] (n=%lld)", (long long)n);
    free(ids);
    /* "abab": both "ab" merged, "bc" never applies */
    n = encode(t, "abab", 4, &ids);
    CHECK(n == 2 && ids[0] == r_ab && ids[1] == r_ab, "abab -> [ab, ab]");
    free(ids);
    /* "xyz": yz (258) merges first, then [x][yz] is not a token although
     * "xyz" is: BPE only joins adjacent parts whose concatenation is a token,
     * and "x"+"yz" = "xyz" IS one, so -> [xyz] */
    n = encode(t, "xyzxyz", 6, &ids);
    CHECK(n == 2 && ids[0] == r_xyz3 && ids[1] == r_xyz3, "xyzxyz -> [xyz, xyz] (n=%lld)", (long long)n);
    free(ids);
    /* ties: "aaa" with only "aa" -> leftmost first: [aa][a] */
    ms_tok_free(t);
    vocab_free(&v);
    vocab_bytes(&v);
    int64_t r_aa = vocab_add(&v, "aa", 2);
    t = vocab_load(&v, NULL, 0);
    n = encode(t, "aaa", 3, &ids);
    CHECK(n == 2 && ids[0] == r_aa && ids[1] == 'a', "aaa -> [aa, a]");
    free(ids);
    (void)r_xyz;
    ms_tok_free(t);
    vocab_free(&v);
}

/* Naive BPE exactly as specified: repeatedly merge the leftmost adjacent pair
 * of lowest rank; the piece itself first if it is a token. */
static int64_t naive_bpe(const vocab *v, const char *p, size_t n, int32_t *out) {
    int64_t whole = vocab_find(v, p, n);
    if (whole >= 0) { out[0] = (int32_t)whole; return 1; }
    size_t *st = malloc((n + 1) * sizeof *st);
    int64_t *pr = malloc(n * sizeof *pr);   /* rank of the pair (part i, part i+1), -1 if none */
    size_t m = n;
    for (size_t i = 0; i <= n; i++) st[i] = i;
    for (size_t i = 0; i + 1 < n; i++) pr[i] = vocab_find(v, p + i, 2);
    for (;;) {
        int64_t best = -1;
        for (size_t i = 0; i + 1 < m; i++)
            if (pr[i] >= 0 && (best < 0 || pr[i] < pr[best])) best = (int64_t)i;
        if (best < 0) break;
        memmove(st + best + 1, st + best + 2, (m - (size_t)best - 1) * sizeof *st);
        memmove(pr + best + 1, pr + best + 2, (m - (size_t)best - 2) * sizeof *pr);
        m--;
        if (best > 0) pr[best - 1] = vocab_find(v, p + st[best - 1], st[best + 1] - st[best - 1]);
        if ((size_t)best + 1 < m) pr[best] = vocab_find(v, p + st[best], st[best + 2] - st[best]);
    }
    for (size_t i = 0; i < m; i++) out[i] = (int32_t)vocab_find(v, p + st[i], st[i + 1] - st[i]);
    free(st);
    free(pr);
    return (int64_t)m;
}

/* Random merges over {a,b,c,d}, ranks in creation order or shuffled; pieces of
 * 2..400 lowercase letters (one regex piece each) cover both the direct scan
 * (<= 64 bytes) and the heap. */
static void test_long_pieces(void) {
    for (int shuffled = 0; shuffled < 2; shuffled++) {
        vocab v = {0};
        vocab_bytes(&v);
        vocab m = {0};   /* merges, before (optional) shuffling */
        const char *al = "abcd";
        for (int i = 0; i < 4; i++) vocab_add(&m, al + i, 1);
        while (m.n < 4 + 300) {
            int64_t x = (int64_t)(rng() % (uint64_t)m.n), y = (int64_t)(rng() % (uint64_t)m.n);
            char buf[64];
            size_t l = m.len[x] + m.len[y];
            if (l > 12) continue;
            memcpy(buf, m.tok[x], m.len[x]);
            memcpy(buf + m.len[x], m.tok[y], m.len[y]);
            vocab_add(&m, buf, l);
        }
        int64_t order[400];
        for (int64_t i = 4; i < m.n; i++) order[i - 4] = i;
        if (shuffled)
            for (int64_t i = m.n - 5; i > 0; i--) {
                int64_t j = (int64_t)(rng() % (uint64_t)(i + 1)), tmp = order[i];
                order[i] = order[j];
                order[j] = tmp;
            }
        for (int64_t i = 0; i < m.n - 4; i++) vocab_add(&v, m.tok[order[i]], m.len[order[i]]);
        ms_tok *t = vocab_load(&v, NULL, 0);
        CHECK(t != NULL, "random merge vocabulary loads");
        if (!t) { vocab_free(&v); vocab_free(&m); return; }
        int bad = 0;
        char piece[401];
        int32_t want[401];
        for (int it = 0; it < 300; it++) {
            size_t n = 2 + (size_t)(rng() % (it < 150 ? 70 : 399));
            for (size_t i = 0; i < n; i++) piece[i] = al[rng() % 4];
            int32_t *ids;
            int64_t k = encode(t, piece, n, &ids);
            int64_t kw = naive_bpe(&v, piece, n, want);
            if (k != kw || memcmp(ids, want, (size_t)k * sizeof *ids) != 0) {
                if (bad++ < 3)
                    fprintf(stderr, "mismatch on %zu-byte piece '%.*s' (%lld vs %lld tokens)\n", n, (int)n, piece,
                            (long long)k, (long long)kw);
            }
            free(ids);
        }
        CHECK(bad == 0, "long-piece BPE equals the naive reference (%s ranks): %d mismatches",
              shuffled ? "shuffled" : "ordered", bad);
        ms_tok_free(t);
        vocab_free(&v);
        vocab_free(&m);
    }
}

/* ---- pre-tokenizer splits ----------------------------------------------- */

/* Expected pieces p[0..k): the vocabulary holds every byte, then one "bridge"
 * token per boundary (last byte of p[i] + first byte of p[i+1], the lowest
 * merge ranks), then every prefix of every piece. A correct split makes each
 * piece a whole token (fast path) -> ids == ranks of the pieces. A split too
 * fine yields a shorter token; a wrong join lets the bridge merge across the
 * boundary first. Either way the ids differ. */
static void check_split(const char *s, const char *const *p, int line) {
    vocab v = {0};
    vocab_bytes(&v);
    size_t k = 0, total = 0;
    while (p[k]) total += strlen(p[k++]);
    int joined = total == strlen(s);
    for (size_t i = 0; joined && i + 1 < k; i++) {
        char br[2] = { p[i][strlen(p[i]) - 1], p[i + 1][0] };
        vocab_add(&v, br, 2);
    }
    for (size_t i = 0; i < k; i++)
        for (size_t l = 2; l <= strlen(p[i]); l++) vocab_add(&v, p[i], l);
    ms_tok *t = vocab_load(&v, NULL, 0);
    int32_t *ids = NULL;
    int64_t n = t ? encode(t, s, strlen(s), &ids) : -1;
    int ok = joined && t && n == (int64_t)k;
    for (size_t i = 0; ok && i < k; i++) ok = ids[i] == vocab_find(&v, p[i], strlen(p[i]));
    if (!ok && t && n >= 0) {
        fprintf(stderr, "line %d: pieces of \"%s\":", line, s);
        for (int64_t i = 0; i < n; i++) {
            const char *b;
            int64_t l = ms_tok_token_bytes(t, ids[i], &b);
            fprintf(stderr, " [%.*s]", (int)l, b);
        }
        fputc('\n', stderr);
    }
    CHECK(ok, "split of line %d", line);
    free(ids);
    ms_tok_free(t);
    vocab_free(&v);
}

#define SPLIT(s, ...) check_split((s), (const char *const[]){ __VA_ARGS__, NULL }, __LINE__)

static void test_splits(void) {
    SPLIT("Hello world", "Hello", " world");
    /* contractions: case-insensitive suffixes glued to the word */
    SPLIT("I'm DON'T you'RE they'll", "I'm", " DON'T", " you'RE", " they'll");
    SPLIT("it's Bob'S car", "it's", " Bob'S", " car");
    SPLIT("don'x", "don", "'x");
    /* camel case: upper run then lower run */
    SPLIT("HTTPServer", "HTTPServer");
    SPLIT("getHTTPResponse", "get", "HTTPResponse");
    /* digits in groups of 1-3, never joined to letters */
    SPLIT("12345678", "123", "456", "78");
    SPLIT("a1234 56", "a", "123", "4", " ", "56");
    SPLIT("x=1.5e10", "x", "=", "1", ".", "5", "e", "10");
    /* Han runs stand alone; letters of other scripts are split from them */
    SPLIT("你好世界abc", "你好世界", "abc");
    SPLIT(" 世界", " ", "世界");
    SPLIT("日本語のテキスト", "日本語", "のテキスト");
    SPLIT("한국어 텍스트", "한국어", " 텍스트");
    SPLIT("中\xe3\x80\x81文", "中", "\xe3\x80\x81", "文");   /* U+3001 is Common, not Han */
    /* spaces before a word: all but the last space stand alone */
    SPLIT("a   b", "a", "  ", " b");
    SPLIT("a  ", "a", "  ");
    SPLIT("\tfoo", "\tfoo");
    /* newlines */
    SPLIT("a\n\nb", "a", "\n\n", "b");
    SPLIT("a \n b", "a", " \n", " b");
    SPLIT("x\r\n\r\ny", "x", "\r\n\r\n", "y");
    SPLIT("!!\n\nfoo", "!!\n\n", "foo");
    SPLIT("end.\n", "end", ".\n");
    /* punctuation, and text that looks like a special token */
    SPLIT("<|open|>", "<|", "open", "|>");
    SPLIT("f(x) { return; }", "f", "(x", ")", " {", " return", ";", " }");
    /* invalid UTF-8 bytes: one piece each, text around them unaffected */
    SPLIT("ab\xff\xfe" "cd", "ab", "\xff", "\xfe", "cd");
    SPLIT("  \xc3" "x", "  ", "\xc3", "x");   /* an invalid byte ends the text before it */
}

/* ---- windows and run cuts ----------------------------------------------- */

static int64_t count_id(const int32_t *ids, int64_t n, int64_t id) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += ids[i] == id;
    return c;
}

static void test_windows(void) {
    vocab v = {0};
    vocab_bytes(&v);
    int64_t r_bc = vocab_add(&v, "bc", 2);
    vocab_add(&v, "aa", 2);
    ms_tok *t = vocab_load(&v, NULL, 0);
    if (!t) { CHECK(0, "load"); vocab_free(&v); return; }
    int32_t *ids;
    /* a non-space run of 25,001 characters is cut before the last one */
    size_t n = 25001;
    char *s = malloc(1300000);
    memset(s, 'a', n);
    s[n - 2] = 'b';
    s[n - 1] = 'c';
    int64_t k = encode(t, s, n, &ids);
    CHECK(k > 0 && count_id(ids, k, r_bc) == 0, "25,001-char run is cut before its last char");
    free(ids);
    s[n - 3] = 'b';
    s[n - 2] = 'c';
    s[n - 1] = 'a';
    k = encode(t, s, n - 1, &ids);        /* 25,000 chars ending "bc": not cut */
    CHECK(k > 0 && count_id(ids, k, r_bc) == 1, "a 25,000-char run is not cut");
    free(ids);
    /* a 400,000-character window boundary falls between b and c */
    size_t m = 0;
    for (int i = 0; i < 133334; i++) { s[m++] = 'b'; s[m++] = 'c'; s[m++] = ' '; }
    k = encode(t, s, m, &ids);
    CHECK(k > 0 && count_id(ids, k, r_bc) == 133333, "window cut at 400,000 chars: %lld bc tokens",
          (long long)count_id(ids, k, r_bc));
    free(ids);
    /* windows count characters, not bytes: 2-byte chars shift the cut */
    m = 0;
    for (int i = 0; i < 133333; i++) { s[m++] = 'b'; s[m++] = 'c'; s[m++] = ' '; }
    s[m - 1] = '\xc2';                    /* replace the last space by U+00A0 */
    s[m++] = '\xa0';
    s[m++] = 'b'; s[m++] = 'c';
    k = encode(t, s, m, &ids);
    CHECK(k > 0 && count_id(ids, k, r_bc) == 133333, "window counts UTF-8 chars, not bytes");
    free(ids);
    free(s);
    ms_tok_free(t);
    vocab_free(&v);
}

/* ---- specials and malformed input --------------------------------------- */

static const char k3_cfg[] =
    "{\"added_tokens_decoder\": {"
    "\"300\": {\"content\": \"[BOS]\", \"special\": true},"
    "\"301\": {\"content\": \"[EOS]\"},"
    "\"302\": {\"content\": \"<|end_of_msg|>\"},"
    "\"303\": {\"content\": \"<|open|>\"},"
    "\"305\": {\"content\": \"<|sep|>\"}}}";

static void test_specials(void) {
    vocab v = {0};
    vocab_bytes(&v);
    vocab_add(&v, "<|", 2);
    vocab_add(&v, "|>", 2);
    while (v.n < 300) {
        char b[8];
        int l = sprintf(b, "x%d", (int)v.n);
        vocab_add(&v, b, (size_t)l);
    }
    ms_tok *t = vocab_load(&v, k3_cfg, 310);
    CHECK(t != NULL, "vocabulary with specials loads");
    if (!t) { vocab_free(&v); return; }
    CHECK(ms_tok_n_vocab(t) == 310, "n_vocab");
    CHECK(ms_tok_special_id(t, "<|open|>") == 303, "special id by name");
    CHECK(ms_tok_special_id(t, "[BOS]") == 300, "[BOS]");
    CHECK(ms_tok_special_id(t, "<|nope|>") == -1, "unknown name -> -1");
    CHECK(ms_tok_special_id(t, "<|reserved_token_304|>") == 304, "reserved name lookup");
    CHECK(ms_tok_is_special(t, 300) && ms_tok_is_special(t, 309) && !ms_tok_is_special(t, 299) &&
          !ms_tok_is_special(t, 310), "is_special range");
    const char *b;
    int64_t l = ms_tok_token_bytes(t, 304, &b);
    CHECK(l == 22 && memcmp(b, "<|reserved_token_304|>", 22) == 0, "reserved name of 304");
    l = ms_tok_token_bytes(t, 309, &b);
    CHECK(l == 22 && memcmp(b, "<|reserved_token_309|>", 22) == 0, "reserved name of 309");
    CHECK(ms_tok_token_bytes(t, 310, &b) == -1 && ms_tok_token_bytes(t, -1, &b) == -1, "bad ids -> -1");
    /* user text naming a special gets ordinary tokens only */
    const char *txt = "hi <|open|>[BOS]<|end_of_msg|> x";
    int32_t *ids;
    int64_t n = encode(t, txt, strlen(txt), &ids);
    int any_special = 0;
    for (int64_t i = 0; i < n; i++) any_special |= ms_tok_is_special(t, ids[i]);
    CHECK(n > 0 && !any_special, "specials are never produced from text");
    char *out;
    size_t ol;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_tok_decode(t, ids, n, &out, &ol, &err) == MS_OK && ol == strlen(txt) && memcmp(out, txt, ol) == 0,
          "text with special-looking strings round-trips");
    free(out);
    free(ids);
    /* decode of specials renders the names */
    int32_t seq[] = { 303, 'm', 305, 302 };
    CHECK(ms_tok_decode(t, seq, 4, &out, &ol, &err) == MS_OK && strcmp(out, "<|open|>m<|sep|><|end_of_msg|>") == 0,
          "decode renders specials by name");
    free(out);
    int32_t badseq[] = { 'a', 310 };
    ms_err_clear(&err);
    CHECK(ms_tok_decode(t, badseq, 2, &out, &ol, &err) == MS_E_USAGE && strstr(err.msg, "310"),
          "decode refuses an id >= n_vocab: %s", err.msg);
    ms_tok_free(t);
    vocab_free(&v);
}

/* Build a valid 256-byte vocabulary text, then apply `edit`. */
static void expect_bad_ranks(const char *extra, int replace_line, const char *what, const char *want_msg, int line) {
    vocab v = {0};
    vocab_bytes(&v);
    size_t n;
    char *txt = vocab_text(&v, &n);
    /* replace line `replace_line` (1-based; 0 = append) with `extra` */
    char *buf = malloc(n + strlen(extra) + 64);
    size_t o = 0, ln = 1;
    for (size_t i = 0; i < n;) {
        size_t e = i;
        while (e < n && txt[e] != '\n') e++;
        if (ln == (size_t)replace_line) {
            o += (size_t)sprintf(buf + o, "%s\n", extra);
        } else {
            memcpy(buf + o, txt + i, e - i + 1);
            o += e - i + 1;
        }
        ln++;
        i = e + 1;
    }
    if (replace_line == 0) o += (size_t)sprintf(buf + o, "%s\n", extra);
    ms_tok *t = NULL;
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_tok_load_mem(buf, o, NULL, 0, replace_line == 0 ? 257 : 256, &t, &err);
    CHECK(st == MS_E_MODEL && t == NULL && strstr(err.msg, want_msg) != NULL,
          "%s (line %d) refused with '%s'; got status %d: %s", what, line, want_msg, (int)st, err.msg);
    ms_tok_free(t);
    free(buf);
    free(txt);
    vocab_free(&v);
}

static void test_malformed(void) {
    expect_bad_ranks("QUJD! 256", 0, "bad base64 char", "line 257: bad base64", __LINE__);
    expect_bad_ranks("QUJ 256", 0, "base64 length", "line 257: bad base64", __LINE__);
    expect_bad_ranks("QR== 256", 0, "non-canonical base64", "line 257: bad base64", __LINE__);
    expect_bad_ranks("QUJD 255", 0, "duplicate rank", "line 257: rank 255 already used on line 256", __LINE__);
    expect_bad_ranks("QQ== 256", 0, "duplicate bytes", "line 257: token bytes duplicate those of line 66", __LINE__);
    expect_bad_ranks("QUJD 300", 0, "gap", "line 257: rank 300 leaves a gap", __LINE__);
    expect_bad_ranks("QUJD x1", 0, "non-numeric rank", "line 257: rank is not a decimal", __LINE__);
    expect_bad_ranks("QUJD -1", 0, "negative rank", "line 257: rank is not a decimal", __LINE__);
    expect_bad_ranks("QUJD", 0, "missing rank", "line 257: expected 'BASE64 RANK'", __LINE__);
    expect_bad_ranks("QUJD 1 2", 0, "extra field", "line 257: rank is not a decimal", __LINE__);
    expect_bad_ranks("QUJD 65", 66, "missing single byte", "byte 0x41 has no rank", __LINE__);

    /* tokenizer_config.json problems */
    vocab v = {0};
    vocab_bytes(&v);
    size_t n;
    char *txt = vocab_text(&v, &n);
    struct { const char *cfg; const char *want; } cases[] = {
        { "{\"added_tokens_decoder\": {\"255\": {\"content\": \"[X]\"}}}", "outside [256, 260)" },
        { "{\"added_tokens_decoder\": {\"260\": {\"content\": \"[X]\"}}}", "outside [256, 260)" },
        { "{\"added_tokens_decoder\": {\"25x\": {\"content\": \"[X]\"}}}", "is not a token id" },
        { "{\"added_tokens_decoder\": {\"256\": {\"content\": 5}}}", "expected a non-empty string" },
        { "{\"added_tokens_decoder\": {\"256\": {\"content\": \"\"}}}", "expected a non-empty string" },
        { "{\"added_tokens_decoder\": {\"256\": {\"content\": \"[X]\"}, \"257\": {\"content\": \"[X]\"}}}",
          "share the name" },
        { "{\"added_tokens_decoder\": {\"256\": {\"content\": \"<|reserved_token_257|>\"}}}", "share the name" },
        { "{\"added_tokens_decoder\": 3}", "added_tokens_decoder" },
        { "{\"added_tokens_decoder\": {\n\"256\": }", "tokenizer_config.json line 2" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ms_tok *t = NULL;
        ms_err err;
        ms_err_clear(&err);
        ms_status st = ms_tok_load_mem(txt, n, cases[i].cfg, strlen(cases[i].cfg), 260, &t, &err);
        CHECK(st == MS_E_MODEL && !t && strstr(err.msg, cases[i].want), "config case %zu: %s", i, err.msg);
        ms_tok_free(t);
    }
    ms_tok *t = NULL;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_tok_load_mem(txt, n, NULL, 0, 255, &t, &err) == MS_E_MODEL && !t, "n_vocab below n_ranks refused");
    ms_err_clear(&err);
    CHECK(ms_tok_load("/nonexistent-dir-h4", 256, &t, &err) == MS_E_IO && !t, "missing directory -> MS_E_IO");
    free(txt);
    vocab_free(&v);
}

/* ---- round trip and threads --------------------------------------------- */

static void test_roundtrip_random(void) {
    vocab v = {0};
    vocab_bytes(&v);
    /* some multi-byte merges, including partial UTF-8 sequences */
    const char *merges[] = { "th", "the", " the", "in", "  ", "    ", "\xe4\xbd", "\xe4\xbd\xa0", "\n\n",
                             "\xff\xff", "ab", "12", "123" };
    for (size_t i = 0; i < sizeof merges / sizeof merges[0]; i++) vocab_add(&v, merges[i], strlen(merges[i]));
    ms_tok *t = vocab_load(&v, NULL, 0);
    if (!t) { CHECK(0, "load"); vocab_free(&v); return; }
    int bad = 0;
    char *buf = malloc(200000);
    for (int it = 0; it < 40; it++) {
        size_t n = (size_t)(rng() % 200000);
        int mode = it % 4;   /* 0: uniform bytes, 1: ASCII-ish, 2: few symbols (long runs), 3: UTF-8 mix */
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng();
            if (mode == 0) buf[i] = (char)r;
            else if (mode == 1) buf[i] = r % 100 < 80 ? (char)(32 + r % 95) : "\n\t\r\x80"[r % 4];
            else if (mode == 2) buf[i] = " a\n\xe4"[r % 4];
            else {
                static const char *frag[] = { "\xe4\xbd\xa0", "\xe5\xa5\xbd", " ", "a", "\xf0\x9f\x98\x80", "\xd0\xaf",
                                              "\xe2\x80\x8d", "\xed\xa0\x80", "\xf4\x90\x80\x80" };
                const char *f = frag[r % 9];
                size_t fl = strlen(f);
                if (i + fl > n) { buf[i] = 'z'; continue; }
                memcpy(buf + i, f, fl);
                i += fl - 1;
            }
        }
        int32_t *ids;
        int64_t k = encode(t, buf, n, &ids);
        char *out = NULL;
        size_t ol = 0;
        ms_err err;
        ms_err_clear(&err);
        if (k < 0 || ms_tok_decode(t, ids, k, &out, &ol, &err) != MS_OK || ol != n || memcmp(out, buf, n) != 0)
            bad++;
        free(out);
        free(ids);
    }
    CHECK(bad == 0, "round trip on random bytes: %d of 40 failed", bad);
    /* an empty input appends nothing and keeps the array */
    int32_t *ids = NULL;
    int64_t n_ids = 0, cap = 0;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_tok_encode(t, "", 0, &ids, &n_ids, &cap, &err) == MS_OK && n_ids == 0, "empty input");
    /* encode appends to what is there */
    ms_tok_encode(t, "the", 3, &ids, &n_ids, &cap, &err);
    ms_tok_encode(t, "the", 3, &ids, &n_ids, &cap, &err);
    CHECK(n_ids == 2 && ids[0] == ids[1] && cap >= 2, "encode appends");
    free(ids);
    free(buf);
    ms_tok_free(t);
    vocab_free(&v);
}

typedef struct thr_arg { const ms_tok *t; const char *s; size_t n; int32_t *ids; int64_t k; } thr_arg;

static void *thr_encode(void *p) {
    thr_arg *a = p;
    a->k = encode(a->t, a->s, a->n, &a->ids);
    return NULL;
}

static void test_threads(void) {
    vocab v = {0};
    vocab_bytes(&v);
    vocab_add(&v, "ab", 2);
    vocab_add(&v, "  ", 2);
    ms_tok *t = vocab_load(&v, NULL, 0);
    if (!t) { CHECK(0, "load"); vocab_free(&v); return; }
    size_t n = 300000;
    char *s = malloc(n);
    for (size_t i = 0; i < n; i++) s[i] = "ab  \n\xe4\xbd\xa0"[rng() % 8];
    thr_arg a[2] = { { t, s, n, NULL, 0 }, { t, s, n, NULL, 0 } };
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, thr_encode, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(a[0].k > 0 && a[0].k == a[1].k && memcmp(a[0].ids, a[1].ids, (size_t)a[0].k * 4) == 0,
          "two threads encoding concurrently agree");
    free(a[0].ids);
    free(a[1].ids);
    free(s);
    ms_tok_free(t);
    vocab_free(&v);
}

/* ---- command-line modes for the parity script and the benchmark -------- */

static char *slurp(FILE *f, size_t *n) {
    size_t cap = 1 << 20, len = 0;
    char *b = malloc(cap);
    for (;;) {
        len += fread(b + len, 1, cap - len, f);
        if (len < cap) break;
        cap *= 2;
        b = realloc(b, cap);
    }
    *n = len;
    return b;
}

/* The parity sweep excludes code points the linked PCRE2 does not know yet
 * (its Unicode tables may be older than tiktoken's): print them as ranges. */
static int pcre2_cn_main(void) {
    char ver[64] = "";
    pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, ver);
    char pv[64] = "";
    pcre2_config(PCRE2_CONFIG_VERSION, pv);
    printf("# unicode %s pcre2 %s\n", ver, pv);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR) "\\p{Cn}", PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_ANCHORED, &ec, &eo, NULL);
    pcre2_match_data *md = re ? pcre2_match_data_create(1, NULL) : NULL;
    if (!md) return 2;
    long start = -1;
    for (long cp = 0; cp <= 0x110000; cp++) {
        int cn = 0;
        if (cp < 0x110000 && (cp < 0xD800 || cp > 0xDFFF)) {
            unsigned char u[4];
            int l;
            if (cp < 0x80) { u[0] = (unsigned char)cp; l = 1; }
            else if (cp < 0x800) { u[0] = (unsigned char)(0xC0 | (cp >> 6)); u[1] = (unsigned char)(0x80 | (cp & 63)); l = 2; }
            else if (cp < 0x10000) {
                u[0] = (unsigned char)(0xE0 | (cp >> 12)); u[1] = (unsigned char)(0x80 | ((cp >> 6) & 63));
                u[2] = (unsigned char)(0x80 | (cp & 63)); l = 3;
            } else {
                u[0] = (unsigned char)(0xF0 | (cp >> 18)); u[1] = (unsigned char)(0x80 | ((cp >> 12) & 63));
                u[2] = (unsigned char)(0x80 | ((cp >> 6) & 63)); u[3] = (unsigned char)(0x80 | (cp & 63)); l = 4;
            }
            cn = pcre2_match(re, u, (PCRE2_SIZE)l, 0, 0, md, NULL) >= 0;
        }
        if (cn && start < 0) start = cp;
        if (!cn && start >= 0) { printf("%lX %lX\n", start, cp - 1); start = -1; }
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return 0;
}

static int tool_main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--pcre2-cn") == 0) return pcre2_cn_main();
    if (argc < 4) {
        fprintf(stderr, "usage: %s --encode|--encode-raw|--roundtrip|--bench DIR N_VOCAB [FILE...] | --pcre2-cn\n", argv[0]);
        return 2;
    }
    ms_tok *t = NULL;
    ms_err err;
    ms_err_clear(&err);
    if (ms_tok_load(argv[2], atoll(argv[3]), &t, &err) != MS_OK) {
        fprintf(stderr, "load: %s\n", err.msg);
        return 2;
    }
    int rc = 0;
    if (strcmp(argv[1], "--encode-raw") == 0 && argc > 4) {
        for (int a = 4; a < argc; a++) {
            FILE *f = fopen(argv[a], "rb");
            size_t n = 0;
            char *s = f ? slurp(f, &n) : NULL;
            if (f) fclose(f);
            int32_t *ids = NULL;
            int64_t k = s ? encode(t, s, n, &ids) : -1;
            if (k < 0) { fprintf(stderr, "%s: %s\n", argv[a], s ? "not encoded" : "cannot open"); rc = 1; }
            const int32_t count = k < 0 ? -1 : (int32_t)k;
            if (fwrite(&count, sizeof count, 1, stdout) != 1 ||
                (k > 0 && fwrite(ids, sizeof *ids, (size_t)k, stdout) != (size_t)k))
                rc = 1;
            free(ids);
            free(s);
        }
    } else if (strcmp(argv[1], "--encode") == 0 || strcmp(argv[1], "--encode-raw") == 0) {
        size_t n;
        char *s = slurp(stdin, &n);
        int32_t *ids;
        int64_t k = encode(t, s, n, &ids);
        if (k < 0) rc = 1;
        if (argv[1][8] == '-') {
            if (k > 0 && fwrite(ids, sizeof *ids, (size_t)k, stdout) != (size_t)k) rc = 1;
        } else {
            for (int64_t i = 0; i < k; i++) printf("%d\n", ids[i]);
        }
        free(ids);
        free(s);
    } else if (strcmp(argv[1], "--roundtrip") == 0 || strcmp(argv[1], "--bench") == 0) {
        for (int a = 4; a < argc; a++) {
            FILE *f = fopen(argv[a], "rb");
            if (!f) { fprintf(stderr, "%s: cannot open\n", argv[a]); rc = 1; continue; }
            size_t n;
            char *s = slurp(f, &n);
            fclose(f);
            double best = 1e30;
            int32_t *ids = NULL;
            int64_t k = 0;
            for (int rep = 0; rep < (argv[1][2] == 'b' ? 3 : 1); rep++) {
                free(ids);
                struct timespec t0, t1;
                clock_gettime(CLOCK_MONOTONIC, &t0);
                k = encode(t, s, n, &ids);
                clock_gettime(CLOCK_MONOTONIC, &t1);
                double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
                if (sec < best) best = sec;
            }
            char *out = NULL;
            size_t ol = 0;
            int ok = k >= 0 && ms_tok_decode(t, ids, k, &out, &ol, &err) == MS_OK && ol == n &&
                     memcmp(out, s, n) == 0;
            if (argv[1][2] == 'b')
                printf("%s: %zu bytes, %lld tokens, %.3f s, %.2f MB/s, round trip %s\n", argv[a], n, (long long)k,
                       best, (double)n / best / 1e6, ok ? "ok" : "FAILED");
            else
                printf("%s: round trip %s (%zu bytes, %lld tokens)\n", argv[a], ok ? "ok" : "FAILED", n, (long long)k);
            if (!ok) rc = 1;
            free(out);
            free(ids);
            free(s);
        }
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        rc = 2;
    }
    ms_tok_free(t);
    return rc;
}

int main(int argc, char **argv) {
    if (argc > 1) return tool_main(argc, argv);
    test_merge_order();
    test_long_pieces();
    test_splits();
    test_windows();
    test_specials();
    test_malformed();
    test_roundtrip_random();
    test_threads();
    return CHECK_DONE("test_tokenizer");
}
