/* text/tok_hf.c - loading a Hugging Face tokenizer.json (byte-level BPE) into
 * the tokenizer of tok_int.h (see tokenizer.h, docs/TOKENIZER.md).
 *
 * Owns: reading the parts of tokenizer.json that decide encoding - model
 *   (type BPE, vocab, merges), normalizer (must be none), pre_tokenizer (a
 *   Split regex, Isolated or Removed + invert, + ByteLevel without its own
 *   regex, or a lone ByteLevel with GPT-2's regex), added_tokens (which the
 *   vocab may list too, under their own ids) - and translating the Split
 *   regex from the Rust regex dialect to PCRE2's.
 * Idea: encode as Hugging Face's BPE does, on the tiktoken machinery: the
 *   vocab keys are token bytes in GPT-2's byte-to-unicode alphabet, and two
 *   adjacent parts join only when (left, right) is a listed merge
 *   (t->by_merges), lowest made id first, leftmost on ties; a piece that is a
 *   token is taken whole when the file says ignore_merges. That "lowest made
 *   id first" is HF's "lowest merge index first" is checked, not assumed: the
 *   ids the merges make must never decrease along the list (equal ids are
 *   several splits of one token, as transformers' tiktoken converter lists
 *   every split). A file whose merge order disagrees with its ids is refused,
 *   not approximated. For gpt-oss's o200k file (every split listed) the rule
 *   is tiktoken's exactly; the parity test shows it on the o200k ranks.
 * Invariants: those of tok_int.h for every tokenizer returned; the input is
 *   untrusted (every problem is MS_E_MODEL with a one-line message naming
 *   tokenizer.json); on error nothing is returned and everything is freed.
 * Does not: split added tokens out of text (encode never yields specials), or
 *   read tokenizer_config.json (the names come from added_tokens).
 */
#include "text/tok_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF "tokenizer.json"
enum { MAX_PATTERN = 16384 };

/* The White_Space set (as in K3's pattern: PCRE2's \s adds U+180E). */
#define WS_SET "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
               "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* GPT-2's ByteLevel pre-tokenizer regex (use_regex: true). */
static const char gpt2_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- GPT-2's byte-to-unicode alphabet ------------------------------------ */

/* Bytes 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other
 * 68 bytes, in increasing order, are U+0100..U+0143. cp_byte[cp] inverts it. */
static void alphabet(int16_t cp_byte[324]) {
    for (int i = 0; i < 324; i++) cp_byte[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        cp_byte[self ? b : 256 + extra++] = (int16_t)b;
    }
}

/* UTF-8 text s[0..n) in the alphabet -> bytes (out has room for n). Returns
 * the byte count, or -1 for a character outside the alphabet. jansson hands
 * out valid UTF-8 only, so sequences are well formed. */
static int64_t unmap(const int16_t cp_byte[324], const char *s, size_t n, uint8_t *out) {
    int64_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        if (c < 0x80) { cp = c; i += 1; }
        else if ((c & 0xE0) == 0xC0 && i + 1 < n) { cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu); i += 2; }
        else return -1;   /* 3- and 4-byte sequences are all above U+0143 */
        if (cp >= 324 || cp_byte[cp] < 0) return -1;
        out[o++] = (uint8_t)cp_byte[cp];
    }
    return o;
}

/* ---- the pre-tokenizer ---------------------------------------------------- */

static int put(char *o, size_t *k, size_t cap, const char *s) {
    size_t l = strlen(s);
    if (*k + l >= cap) return -1;
    memcpy(o + *k, s, l);
    *k += l;
    return 0;
}

/* Rust regex -> PCRE2, the rewrites K3's pattern needed (docs/TOKENIZER.md):
 * \s -> the White_Space set (inside a class: its members), \S -> its
 * complement (outside classes only), \p{Script} / \P{Script} -> sc:Script
 * (PCRE2 reads a bare script name as Script_Extensions; one- and two-letter
 * names are general categories and stay). Class intersection, nested classes
 * and \S inside a class have no simple PCRE2 form and are refused. */
static ms_status translate(const char *src, char *o, size_t cap, ms_err *err) {
    size_t k = 0;
    int in_class = 0;
    for (size_t i = 0; src[i]; i++) {
        char c = src[i];
        int bad = 0;
        if (c == '\\' && src[i + 1]) {
            char d = src[++i];
            if (d == 's') bad = put(o, &k, cap, in_class ? WS_SET : "[" WS_SET "]");
            else if (d == 'S' && !in_class) bad = put(o, &k, cap, "[^" WS_SET "]");
            else if (d == 'S')
                return ms_err_set(err, MS_E_MODEL, HF ": pre-tokenizer regex: \\S inside a class is not supported");
            else if ((d == 'p' || d == 'P') && src[i + 1] == '{') {
                const char *e = strchr(src + i, '}');
                if (!e) return ms_err_set(err, MS_E_MODEL, HF ": pre-tokenizer regex: unterminated \\%c{", d);
                size_t nl = (size_t)(e - (src + i + 2));
                int keep = nl <= 2 || memchr(src + i + 2, ':', nl) || memchr(src + i + 2, '=', nl);
                char head[8];
                snprintf(head, sizeof head, "\\%c{%s", d, keep ? "" : "sc:");
                bad = put(o, &k, cap, head);
                for (size_t j = 0; !bad && j <= nl; j++) {
                    char ch[2] = {src[i + 2 + j], 0};
                    bad = put(o, &k, cap, ch);
                }
                i += nl + 2;
            } else {
                char esc[3] = {'\\', d, 0};
                bad = put(o, &k, cap, esc);
            }
        } else {
            if (c == '[' && in_class)
                return ms_err_set(err, MS_E_MODEL, HF ": pre-tokenizer regex: nested character classes are not supported");
            if (c == '&' && in_class && src[i + 1] == '&')
                return ms_err_set(err, MS_E_MODEL, HF ": pre-tokenizer regex: class intersection (&&) is not supported");
            if (c == '[') {
                in_class = 1;
                char open[2] = {c, 0};
                bad = put(o, &k, cap, open);
                if (!bad && src[i + 1] == '^') { bad = put(o, &k, cap, "^"); i++; }
                if (!bad && src[i + 1] == ']') { bad = put(o, &k, cap, "]"); i++; }   /* literal ] first */
                if (bad) break;
                continue;
            }
            if (c == ']' && in_class) in_class = 0;
            char ch[2] = {c, 0};
            bad = put(o, &k, cap, ch);
        }
        if (bad) return ms_err_set(err, MS_E_MODEL, HF ": pre-tokenizer regex longer than %d bytes", MAX_PATTERN);
    }
    if (in_class) return ms_err_set(err, MS_E_MODEL, HF ": pre-tokenizer regex: unterminated character class");
    o[k] = 0;
    return MS_OK;
}

static int is_type(json_t *o, const char *type) {
    json_t *t = json_object_get(o, "type");
    return json_is_string(t) && strcmp(json_string_value(t), type) == 0;
}

/* ByteLevel's options: no prefix space; *regex = its use_regex (default on). */
static ms_status byte_level(json_t *bl, int *regex, ms_err *err) {
    json_t *aps = json_object_get(bl, "add_prefix_space"), *ur = json_object_get(bl, "use_regex");
    if (json_is_true(aps))
        return ms_err_set(err, MS_E_MODEL, HF ": ByteLevel add_prefix_space is true; expected false");
    *regex = ur ? json_is_true(ur) : 1;
    return MS_OK;
}

/* Split's behavior and invert, as Hugging Face reads them: Isolated with
 * invert false keeps the matches and the text between them as pieces;
 * Removed with invert true keeps the matches and drops the text between them
 * (the inverted pattern marks that text as the delimiter, and Removed drops
 * delimiters). *drop_gaps = 1 for the second. Any other combination is
 * refused. For a pattern that matches at every position (o200k's: every
 * character is a letter, digit, space or other, and each class starts a
 * non-empty match) the two are the same; for others, dropping is the file's
 * meaning. */
static ms_status split_behavior(json_t *sp, int *drop_gaps, ms_err *err) {
    json_t *beh = json_object_get(sp, "behavior"), *inv = json_object_get(sp, "invert");
    const char *b = json_is_string(beh) ? json_string_value(beh) : "";
    if (strcmp(b, "Isolated") == 0 && !json_is_true(inv)) *drop_gaps = 0;
    else if (strcmp(b, "Removed") == 0 && json_is_true(inv)) *drop_gaps = 1;
    else
        return ms_err_set(err, MS_E_MODEL, HF ": Split: expected behavior Isolated with invert false, or Removed "
                          "with invert true");
    return MS_OK;
}

/* The pre-tokenizer's regex in PCRE2 syntax into pat[MAX_PATTERN]. Accepted:
 * Sequence[Split{Regex, Isolated + invert false or Removed + invert true},
 * ByteLevel{use_regex false}] (gpt-oss, Llama 3, converted o200k files), or a
 * lone ByteLevel{use_regex true} (GPT-2). *drop_gaps: see split_behavior. */
static ms_status pre_tokenizer(json_t *root, char *pat, int *drop_gaps, ms_err *err) {
    json_t *pt = json_object_get(root, "pre_tokenizer");
    int regex = 0;
    ms_status st;
    *drop_gaps = 0;
    if (json_is_object(pt) && is_type(pt, "ByteLevel")) {
        if ((st = byte_level(pt, &regex, err)) != MS_OK) return st;
        if (!regex) return ms_err_set(err, MS_E_MODEL, HF ": ByteLevel pre-tokenizer without a regex splits nothing");
        return translate(gpt2_pattern, pat, MAX_PATTERN, err);
    }
    json_t *seq = json_is_object(pt) && is_type(pt, "Sequence") ? json_object_get(pt, "pretokenizers") : NULL;
    json_t *sp = json_array_get(seq, 0), *bl = json_array_get(seq, 1);
    if (json_array_size(seq) != 2 || !json_is_object(sp) || !is_type(sp, "Split") || !json_is_object(bl) ||
        !is_type(bl, "ByteLevel"))
        return ms_err_set(err, MS_E_MODEL, HF ": expected pre_tokenizer Sequence [Split, ByteLevel] or ByteLevel");
    json_t *re = json_object_get(json_object_get(sp, "pattern"), "Regex");
    if (!json_is_string(re) || strlen(json_string_value(re)) != json_string_length(re) ||
        json_string_length(re) == 0)
        return ms_err_set(err, MS_E_MODEL, HF ": Split: expected a non-empty string pattern.Regex");
    if ((st = split_behavior(sp, drop_gaps, err)) != MS_OK) return st;
    if ((st = byte_level(bl, &regex, err)) != MS_OK) return st;
    if (regex) return ms_err_set(err, MS_E_MODEL, HF ": ByteLevel after Split must have use_regex false");
    if (json_string_length(re) >= MAX_PATTERN / 4)
        return ms_err_set(err, MS_E_MODEL, HF ": pre-tokenizer regex of %zu bytes (at most %d)",
                          json_string_length(re), MAX_PATTERN / 4 - 1);
    return translate(json_string_value(re), pat, MAX_PATTERN, err);
}

/* ---- the model ------------------------------------------------------------ */

/* model: type BPE, no byte fallback, no subword affixes, no dropout. */
static ms_status check_model(json_t *root, json_t **model, ms_err *err) {
    json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm)) return ms_err_set(err, MS_E_MODEL, HF ": a normalizer is set; expected null");
    json_t *m = json_object_get(root, "model");
    if (!json_is_object(m)) return ms_err_set(err, MS_E_MODEL, HF ": expected an object 'model'");
    json_t *ty = json_object_get(m, "type");
    if (ty && !is_type(m, "BPE")) return ms_err_set(err, MS_E_MODEL, HF ": model.type is not BPE");
    if (json_is_true(json_object_get(m, "byte_fallback")))
        return ms_err_set(err, MS_E_MODEL, HF ": model.byte_fallback is true; expected a byte-level vocabulary");
    static const char *const affix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        json_t *a = json_object_get(m, affix[i]);
        if (a && !json_is_null(a) && !(json_is_string(a) && json_string_length(a) == 0))
            return ms_err_set(err, MS_E_MODEL, HF ": model.%s is set; expected null", affix[i]);
    }
    json_t *dr = json_object_get(m, "dropout");
    if (dr && !json_is_null(dr) && !(json_is_number(dr) && json_number_value(dr) == 0))
        return ms_err_set(err, MS_E_MODEL, HF ": model.dropout is set; expected null");
    *model = m;
    return MS_OK;
}

/* Whether vocab entry (key, id) is an added token: an entry of added_tokens
 * with this id and exactly this content. */
static int is_added(json_t *added, const char *key, size_t kl, json_int_t id) {
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *e = json_array_get(added, i), *c = json_object_get(e, "content");
        if (json_is_integer(json_object_get(e, "id")) && json_integer_value(json_object_get(e, "id")) == id &&
            json_is_string(c) && json_string_length(c) == kl && memcmp(json_string_value(c), key, kl) == 0)
            return 1;
    }
    return 0;
}

/* How many added tokens model.vocab also lists, under their own id. */
static int64_t added_in_vocab(json_t *vocab, json_t *added) {
    int64_t k = 0;
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *e = json_array_get(added, i), *c = json_object_get(e, "content"), *id = json_object_get(e, "id");
        json_t *v = json_is_string(c) ? json_object_getn(vocab, json_string_value(c), json_string_length(c)) : NULL;
        k += json_is_integer(v) && json_is_integer(id) && json_integer_value(v) == json_integer_value(id);
    }
    return k;
}

/* model.vocab -> t->blob / t->off / t->n_ranks. The BPE ids must be exactly
 * 0..n-1; besides them the vocab may list added tokens under their own ids
 * at n or above (GPT-2's <|endoftext|>, converted o200k files): those are
 * specials (added_tokens), not BPE tokens, and are skipped here. */
static ms_status lay_out_vocab(ms_tok *t, json_t *vocab, json_t *added, const int16_t cp_byte[324], ms_err *err) {
    if (!json_is_object(vocab) || json_object_size(vocab) == 0)
        return ms_err_set(err, MS_E_MODEL, HF ": expected a non-empty object model.vocab");
    const int64_t n = (int64_t)json_object_size(vocab) - added_in_vocab(vocab, added);
    if (n <= 0) return ms_err_set(err, MS_E_MODEL, HF ": model.vocab holds only added tokens");
    if (n > INT32_MAX - 1) return ms_err_set(err, MS_E_MODEL, HF ": %lld vocab entries, too many", (long long)n);
    int64_t total = 0;
    const char *key;
    size_t kl;
    json_t *v;
    json_object_keylen_foreach(vocab, key, kl, v) total += (int64_t)kl;
    int64_t *len = calloc((size_t)n, sizeof *len);
    uint8_t *tmp = malloc((size_t)total + 1);
    int64_t *at = malloc((size_t)n * sizeof *at);
    t->off = malloc((size_t)(n + 1) * sizeof *t->off);
    t->blob = malloc((size_t)total + 1);
    ms_status st = MS_OK;
    if (!len || !tmp || !at || !t->off || !t->blob) { st = ms_err_set(err, MS_E_NOMEM, HF ": out of memory"); goto done; }
    for (int64_t i = 0; i < n; i++) len[i] = -1;
    int64_t used = 0;
    json_object_keylen_foreach(vocab, key, kl, v) {
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id >= n && is_added(added, key, kl, id)) continue;
        if (id < 0 || id >= n) {
            st = ms_err_set(err, MS_E_MODEL, HF ": vocab entry '%.40s': id must be an integer in [0, %lld) "
                            "(the ids of model.vocab must be dense)", key, (long long)n);
            goto done;
        }
        if (len[id] >= 0) { st = ms_err_set(err, MS_E_MODEL, HF ": vocab id %lld is used twice", (long long)id); goto done; }
        int64_t l = kl ? unmap(cp_byte, key, kl, tmp + used) : -1;
        if (l <= 0) {
            st = ms_err_set(err, MS_E_MODEL, HF ": vocab entry '%.40s' (id %lld) is empty or has a character "
                            "outside the byte-level alphabet", key, (long long)id);
            goto done;
        }
        at[id] = used;
        len[id] = l;
        used += l;
    }
    int64_t o = 0;
    t->max_tok_len = 0;
    for (int64_t r = 0; r < n; r++) {
        if (len[r] < 0) {   /* cannot happen when the count above is right; checked all the same */
            st = ms_err_set(err, MS_E_MODEL, HF ": vocab id %lld is missing (the ids of model.vocab must be dense)",
                            (long long)r);
            goto done;
        }
        t->off[r] = o;
        memcpy(t->blob + o, tmp + at[r], (size_t)len[r]);
        o += len[r];
        if (len[r] > t->max_tok_len) t->max_tok_len = len[r];
    }
    t->off[n] = o;
    t->n_ranks = n;
done:
    free(len);
    free(tmp);
    free(at);
    return st;
}

/* One side of a merge -> its id, through the bytes (tok_rank_lookup). */
static int32_t merge_part(const ms_tok *t, const int16_t cp_byte[324], const char *s, size_t n, uint8_t *buf,
                          int64_t *bl) {
    int64_t l = n ? unmap(cp_byte, s, n, buf) : -1;
    if (l <= 0) return -1;
    *bl = l;
    return tok_rank_lookup(t, buf, l);
}

/* Enter merge (a, b) -> made into the table; 0, or -1 if it is listed twice. */
static int merge_put(ms_tok *t, int32_t a, int32_t b, int32_t made) {
    const uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t i = tok_merge_hash(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        merge_slot *e = &t->merges[i];
        if (e->made < 0) { e->key = key; e->made = made; return 0; }
        if (e->key == key) return -1;
    }
}

/* model.merges: every merge joins two tokens into a token, each pair once, and
 * the tokens they make never decrease along the list (merge priority = rank =
 * id; equal ids are different splits of one token). Fills t->merges. */
static ms_status check_merges(ms_tok *t, json_t *merges, const int16_t cp_byte[324], ms_err *err) {
    if (merges && !json_is_array(merges)) return ms_err_set(err, MS_E_MODEL, HF ": model.merges is not an array");
    uint64_t cap = 2;
    while (cap < 2 * (uint64_t)json_array_size(merges) + 2) cap <<= 1;
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges) return ms_err_set(err, MS_E_NOMEM, HF ": out of memory");
    for (uint64_t i = 0; i < cap; i++) t->merges[i] = (merge_slot){ 0, -1 };
    t->merge_mask = cap - 1;
    /* a token's key has at most 2 UTF-8 bytes per token byte (the alphabet
     * stops at U+0143), so a longer part is no token; both fit in buf */
    uint8_t *buf = malloc((size_t)(4 * t->max_tok_len + 8));
    if (!buf) return ms_err_set(err, MS_E_NOMEM, HF ": out of memory");
    ms_status st = MS_OK;
    int64_t prev = -1;
    for (size_t i = 0; i < json_array_size(merges) && st == MS_OK; i++) {
        json_t *m = json_array_get(merges, i);
        const char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        if (json_is_string(m)) {
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            size_t n = json_string_length(m);
            if (sp && !memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) { a = s; al = (size_t)(sp - s); b = sp + 1; bl = n - al - 1; }
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            al = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            bl = json_string_length(json_array_get(m, 1));
        }
        if (!a) { st = ms_err_set(err, MS_E_MODEL, HF ": merge %zu: expected \"A B\" or [A, B]", i); break; }
        int64_t la = 0, lb = 0;
        int32_t ia = -1, ib = -1;
        if ((size_t)(2 * t->max_tok_len) >= al && (size_t)(2 * t->max_tok_len) >= bl &&
            (ia = merge_part(t, cp_byte, a, al, buf, &la)) >= 0)
            ib = merge_part(t, cp_byte, b, bl, buf + la, &lb);
        if (ia < 0 || ib < 0) {
            st = ms_err_set(err, MS_E_MODEL, HF ": merge %zu ('%.30s' '%.30s'): a part is not a vocab token", i, a, b);
            break;
        }
        int32_t r = tok_rank_lookup(t, buf, la + lb);
        if (r < 0)
            st = ms_err_set(err, MS_E_MODEL, HF ": merge %zu ('%.30s' '%.30s') makes no vocab token", i, a, b);
        else if (merge_put(t, ia, ib, r) < 0)
            st = ms_err_set(err, MS_E_MODEL, HF ": merge %zu ('%.30s' '%.30s') is listed twice", i, a, b);
        else if (r < prev)
            st = ms_err_set(err, MS_E_MODEL, HF ": merge %zu makes token %d after an earlier merge made token %lld: "
                            "merge priority must follow token ids (rank = id, as in tiktoken-derived files)",
                            i, r, (long long)prev);
        prev = r;
    }
    free(buf);
    return st;
}

/* added_tokens -> names[id - n_ranks] (malloc'd; the caller frees). */
static ms_status added_tokens(const ms_tok *t, json_t *root, char **names, ms_err *err) {
    json_t *at = json_object_get(root, "added_tokens");
    if (at && !json_is_array(at)) return ms_err_set(err, MS_E_MODEL, HF ": added_tokens is not an array");
    for (size_t i = 0; i < json_array_size(at); i++) {
        json_t *e = json_array_get(at, i);
        json_t *id = json_object_get(e, "id"), *c = json_object_get(e, "content");
        if (!json_is_integer(id) || !json_is_string(c) || json_string_length(c) == 0 ||
            strlen(json_string_value(c)) != json_string_length(c))
            return ms_err_set(err, MS_E_MODEL, HF ": added_tokens[%zu]: expected an integer id and a non-empty "
                              "string content without NUL", i);
        json_int_t v = json_integer_value(id);
        if (v < t->n_ranks || v >= t->n_vocab)
            return ms_err_set(err, MS_E_MODEL, HF ": added token '%.40s' has id %lld outside [%lld, %lld) "
                              "(after the %lld BPE tokens, below n_vocab)", json_string_value(c), (long long)v,
                              (long long)t->n_ranks, (long long)t->n_vocab, (long long)t->n_ranks);
        if (names[v - t->n_ranks])
            return ms_err_set(err, MS_E_MODEL, HF ": added token id %lld appears twice", (long long)v);
        if (!(names[v - t->n_ranks] = strdup(json_string_value(c))))
            return ms_err_set(err, MS_E_NOMEM, HF ": out of memory");
    }
    return MS_OK;
}

static ms_status load(ms_tok *t, json_t *root, ms_err *err) {
    int16_t cp_byte[324];
    alphabet(cp_byte);
    json_t *model = NULL;
    char *pat = malloc(MAX_PATTERN);
    if (!pat) return ms_err_set(err, MS_E_NOMEM, HF ": out of memory");
    ms_status st = check_model(root, &model, err);
    if (st == MS_OK) st = pre_tokenizer(root, pat, &t->drop_gaps, err);
    if (st == MS_OK) st = lay_out_vocab(t, json_object_get(model, "vocab"), json_object_get(root, "added_tokens"), cp_byte, err);
    if (st == MS_OK) st = tok_build_table(t, HF, NULL, err);
    if (st == MS_OK) st = check_merges(t, json_object_get(model, "merges"), cp_byte, err);
    /* Hugging Face's default is false: BPE from bytes even when the piece is a token */
    t->whole_piece = json_is_true(json_object_get(model, "ignore_merges"));
    if (st == MS_OK && (t->n_vocab < t->n_ranks || t->n_vocab > INT32_MAX || t->n_vocab - t->n_ranks > TOK_MAX_SPECIALS))
        st = ms_err_set(err, MS_E_MODEL, HF ": n_vocab %lld does not fit the %lld BPE tokens (need n_tokens <= "
                        "n_vocab <= n_tokens + %d)", (long long)t->n_vocab, (long long)t->n_ranks, TOK_MAX_SPECIALS);
    if (st == MS_OK) {
        int64_t n_sp = t->n_vocab - t->n_ranks;
        char **names = calloc((size_t)(n_sp > 0 ? n_sp : 1), sizeof *names);
        if (!names) st = ms_err_set(err, MS_E_NOMEM, HF ": out of memory");
        if (st == MS_OK) st = added_tokens(t, root, names, err);
        if (st == MS_OK) st = tok_set_specials(t, names, HF, err);
        for (int64_t i = 0; names && i < n_sp; i++) free(names[i]);
        free(names);
    }
    if (st == MS_OK) st = tok_compile(t, pat, HF, err);
    free(pat);
    return st;
}

ms_status tok_load_hf_mem(const char *json, size_t len, int64_t n_vocab, ms_tok **out, ms_err *err) {
    *out = NULL;
    if (!json) return ms_err_set(err, MS_E_USAGE, "ms_tok_load_hf_mem: no text");
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) return ms_err_set(err, MS_E_MODEL, HF " line %d: %s", je.line, je.text);
    ms_tok *t = calloc(1, sizeof *t);
    ms_status st;
    if (!t) st = ms_err_set(err, MS_E_NOMEM, HF ": out of memory");
    else if (!json_is_object(root)) st = ms_err_set(err, MS_E_MODEL, HF ": expected a JSON object");
    else {
        t->n_vocab = n_vocab;
        st = load(t, root, err);
    }
    json_decref(root);
    if (st != MS_OK) {
        ms_tok_free(t);
        return st;
    }
    t->windowed = 0;
    t->by_merges = 1;
    *out = t;
    return MS_OK;
}

ms_status ms_tok_load_hf_mem(const char *json, size_t len, int64_t n_vocab, ms_tok **out, ms_err *err) {
    return tok_load_hf_mem(json, len, n_vocab, out, err);
}
