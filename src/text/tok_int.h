/* text/tok_int.h - the tokenizer's private layout, shared by its files.
 *
 * Owns: struct ms_tok (the parsed vocabulary: token bytes in rank order, a
 *   rank hash table keyed by raw bytes, the special-token names, the compiled
 *   pre-tokenizer) and the rank lookup that loading and BPE both use.
 *   tok_load.c builds it from tiktoken.model + tokenizer_config.json,
 *   tok_hf.c from a Hugging Face tokenizer.json (both through the shared
 *   builders below); tokenizer.c encodes and decodes with it.
 * Invariants:
 *   1. ranks are dense (0..n_ranks-1), unique, with unique non-empty bytes,
 *      and every single byte 0x00..0xFF has a rank, so every byte string is
 *      encodable and decode(encode(b)) == b.
 *   2. specials occupy [n_ranks, n_vocab); each has a unique non-empty name.
 *   3. a loaded ms_tok is never written again: encode and decode may share it.
 *   4. by_merges: every (left, right) -> made in `merges` has all three ids
 *      below n_ranks, and made's bytes are left's followed by right's.
 * Does not: leave text/ (included only by tok_load.c, tok_hf.c, tokenizer.c).
 */
#ifndef MS_TEXT_TOK_INT_H
#define MS_TEXT_TOK_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tokenizer.h"

#include <pcre2.h>
#include <stdint.h>
#include <string.h>

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
    int windowed;         /* 1: K3's windows (tiktoken.model); 0: the whole
                             input is one regex subject (tokenizer.json) */
    int whole_piece;      /* 1: a piece that is a token is that token (tiktoken;
                             tokenizer.json's ignore_merges) */
    int drop_gaps;        /* 1: text the pre-tokenizer does not match is dropped,
                             invalid UTF-8 bytes excepted (tokenizer.json Split
                             Removed + invert); 0: one piece per byte */
    int by_merges;        /* 1: only listed merges join two parts (tokenizer.json);
                             0: any two parts whose bytes are a token (tiktoken) */
    struct merge_slot *merges;  /* by_merges: open addressing on (left, right) ids */
    uint64_t merge_mask;
};

typedef struct merge_slot {
    uint64_t key;         /* left << 32 | right */
    int32_t made;         /* the id the merge makes; -1: empty */
} merge_slot;

static inline uint64_t tok_merge_hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xFF51AFD7ED558CCDull;
    key ^= key >> 33;
    return key;
}

/* The id the listed merge (a, b) makes, or -1. Read-only. */
static inline int32_t tok_merge_lookup(const ms_tok *t, int32_t a, int32_t b) {
    const uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t i = tok_merge_hash(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const merge_slot *e = &t->merges[i];
        if (e->made < 0) return -1;
        if (e->key == key) return e->made;
    }
}

/* ---- building, shared by the two loaders (tok_load.c, tok_hf.c) ---------- */

enum { TOK_MAX_SPECIALS = 1 << 20 };  /* sanity cap on n_vocab - n_ranks */

/* With t->blob, t->off[0..n_ranks] and t->n_ranks set: the hash table,
 * byte_rank and pair_rank. Duplicate bytes are refused naming both entries
 * (line_of_rank != NULL: "FILE line A ... line B"; NULL: by id), and every
 * single byte must have a rank. Errors name `file`. */
ms_status tok_build_table(ms_tok *t, const char *file, const int64_t *line_of_rank, ms_err *err);

/* With n_ranks / n_vocab set: the specials' names. names[i] is the name of id
 * n_ranks + i or NULL ("<|reserved_token_{id}|>"); ownership stays with the
 * caller. Two ids may not share a name (MS_E_MODEL naming `file`). */
ms_status tok_set_specials(ms_tok *t, char *const *names, const char *file, ms_err *err);

/* Compile `pattern` (PCRE2 syntax) as the pre-tokenizer; JIT when available.
 * A pattern that does not compile is MS_E_MODEL naming `file`. */
ms_status tok_compile(ms_tok *t, const char *pattern, const char *file, ms_err *err);

/* Load a Hugging Face tokenizer.json held in memory (tok_hf.c). */
ms_status tok_load_hf_mem(const char *json, size_t len, int64_t n_vocab, ms_tok **out, ms_err *err);

/* ---- hashing of raw token bytes ---------------------------------------- */

static inline uint64_t tok_hash_bytes(const uint8_t *p, int64_t n) {
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

/* Rank of the token whose bytes are p[0..n), or -1. Read-only. */
static inline int32_t tok_rank_lookup(const ms_tok *t, const uint8_t *p, int64_t n) {
    if (n == 1) return t->byte_rank[p[0]];
    if (n == 2) return t->pair_rank[(p[0] << 8) | p[1]];
    if (n > t->max_tok_len) return -1;
    uint64_t h = tok_hash_bytes(p, n), i = h & t->mask;
    uint32_t fp = (uint32_t)(h >> 32);
    for (;;) {
        const slot *e = &t->table[i];
        if (e->rank < 0) return -1;
        if (e->fp == fp && e->len == (uint32_t)n && memcmp(t->blob + e->off, p, (size_t)n) == 0) return e->rank;
        i = (i + 1) & t->mask;
    }
}

#endif
