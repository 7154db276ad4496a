/* tests/fuzz/fuzz_fixture.h - what the fuzz targets share: a small tokenizer
 * built in memory, splitting an input into fields, and a hard failure.
 *
 * Owns: fz_tok() (one process-wide tokenizer, built on first use), fz_fail(),
 *   fz_fields(), fz_strndup().
 * Idea: the tokenizer targets and the chat targets need a real tokenizer but
 *   must not read files: the fixture writes a tiktoken text in memory
 *   (every byte 0x00..0xFF at ranks 0..255, then FZ_MERGES multi-byte tokens:
 *   common English pieces, runs of spaces and newlines, UTF-8 sequences) and a
 *   tokenizer_config.json naming the specials at ids n_ranks + k:
 *
 *     k: 0 [BOS]  1 [EOS]  2 <|open|>  3 <|close|>  4 <|sep|>  5 <|end_of_msg|>
 *        6, 7 unnamed (reserved)                    n_vocab = n_ranks + 8
 *
 *   fz_fail() aborts with a message: libFuzzer records the input as a crash,
 *   so every violated property is a finding with a reproducer.
 * Invariants: the fixture tokenizer stays allocated until exit (reachable from
 *   a static pointer, so LeakSanitizer does not report it); targets free
 *   everything else they allocate, per input.
 * Does not: fuzz the tokenizer's loader (fuzz_tok_load.c does).
 */
#ifndef MS_FUZZ_FIXTURE_H
#define MS_FUZZ_FIXTURE_H

#include "text/tokenizer.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FZ_N_SPECIAL 8

static const char *const fz_special_names[6] = {
    "[BOS]", "[EOS]", "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>",
};

static const char *const fz_merges[] = {
    "th", "he", "in", "er", "an", " t", "the", " the", "ing", "on", " a", "re",
    "  ", "    ", "\n\n", " \n", "12", "123", "'s", "'t", "ll", " is", "es",
    "message", "role", "assistant", "user", "system", "think", "response",
    "tool", "call", "argument", " role=\"", "=\"", "json", "type",
    "\xC3\xA9", "\xE4\xB8\xAD", "\xE6\x96\x87", "\xE4\xB8\xAD\xE6\x96\x87",
    "\xF0\x9F\x98\x80", "{\"", "\":", "\",\"", "true", "null",
};
#define FZ_MERGES ((int)(sizeof fz_merges / sizeof fz_merges[0]))

/* Abort with a one-line reason (a finding). */
static void fz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn, unused));
static void fz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("FUZZ PROPERTY VIOLATED: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* A NUL-terminated malloc'd copy of p[0..n) (NULL only on allocation failure). */
static __attribute__((unused)) char *fz_strndup(const uint8_t *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* Split data[0..n) at every byte `sep` into at most max fields; returns the
 * count. Fields point into data (not NUL-terminated). The last field takes
 * the rest, separators included, once max is reached. */
static __attribute__((unused)) int fz_fields(const uint8_t *data, size_t n, uint8_t sep,
                                             const uint8_t **f, size_t *len, int max) {
    int k = 0;
    size_t at = 0;
    while (k < max) {
        size_t e = at;
        if (k < max - 1)
            while (e < n && data[e] != sep) e++;
        else
            e = n;
        f[k] = data + at;
        len[k] = e - at;
        k++;
        if (e >= n) break;
        at = e + 1;
    }
    return k;
}

static size_t fz_b64(const uint8_t *p, size_t n, char *out) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t x = (uint32_t)p[i] << 16;
        if (i + 1 < n) x |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n) x |= p[i + 2];
        out[o++] = a[(x >> 18) & 63];
        out[o++] = a[(x >> 12) & 63];
        out[o++] = i + 1 < n ? a[(x >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? a[x & 63] : '=';
    }
    return o;
}

/* The tiktoken text of the fixture (malloc'd, *n bytes); NULL on no memory. */
static __attribute__((unused)) char *fz_ranks_text(size_t *n) {
    size_t cap = (256 + (size_t)FZ_MERGES) * 48;
    char *s = malloc(cap);
    if (!s) return NULL;
    size_t o = 0;
    for (int r = 0; r < 256 + FZ_MERGES; r++) {
        uint8_t b[1] = { (uint8_t)r };
        const uint8_t *p = b;
        size_t l = 1;
        if (r >= 256) {
            p = (const uint8_t *)fz_merges[r - 256];
            l = strlen(fz_merges[r - 256]);
        }
        o += fz_b64(p, l, s + o);
        o += (size_t)snprintf(s + o, cap - o, " %d\n", r);
    }
    *n = o;
    return s;
}

/* The tokenizer_config.json of the fixture (malloc'd); ids start at n_ranks. */
static __attribute__((unused)) char *fz_config_json(int n_ranks) {
    char *s = malloc(1024);
    if (!s) return NULL;
    size_t o = (size_t)snprintf(s, 1024, "{\"added_tokens_decoder\": {");
    for (int k = 0; k < 6; k++)
        o += (size_t)snprintf(s + o, 1024 - o, "%s\"%d\": {\"content\": \"%s\", \"special\": true}",
                              k ? ", " : "", n_ranks + k, fz_special_names[k]);
    snprintf(s + o, 1024 - o, "}}");
    return s;
}

/* The process-wide fixture tokenizer; aborts if it cannot be built. */
static __attribute__((unused)) const ms_tok *fz_tok(void) {
    static ms_tok *t;
    if (t) return t;
    size_t n = 0;
    char *ranks = fz_ranks_text(&n);
    char *cfg = fz_config_json(256 + FZ_MERGES);
    if (!ranks || !cfg) fz_fail("fixture: out of memory");
    ms_err err;
    ms_err_clear(&err);
    if (ms_tok_load_mem(ranks, n, cfg, strlen(cfg), 256 + FZ_MERGES + FZ_N_SPECIAL, &t, &err) != MS_OK)
        fz_fail("fixture tokenizer does not load: %s", err.msg);
    free(ranks);
    free(cfg);
    return t;
}

#endif
