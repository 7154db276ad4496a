/* tests/fuzz/fuzz_tok_load.c - libFuzzer target: tiktoken.model and
 * tokenizer_config.json.
 *
 * Owns: fuzzing ms_tok_load_mem (text/tokenizer.h) on arbitrary files.
 * Idea: the input is  RANKS_TEXT [ "\n#CONFIG#\n" CONFIG_JSON ]  (no marker:
 *   no tokenizer_config.json). n_vocab = (non-empty lines of RANKS_TEXT) + 8,
 *   so both an exact vocabulary and specials past the ranks are reachable.
 *   A tokenizer that loads must keep the promises of tokenizer.h on a fixed
 *   sample and on the input itself: every id below n_vocab has bytes,
 *   decode(encode(b)) == b, encode never yields a special.
 * Does not: check BPE against tiktoken (tests/t_tokenizer_parity.sh).
 */
#include "text/tokenizer.h"
#include "fuzz_fixture.h"

#include <stdint.h>
#include <string.h>

#define MARKER "\n#CONFIG#\n"

static void roundtrip(const ms_tok *t, const char *b, size_t n) {
    int32_t *ids = NULL;
    int64_t n_ids = 0, cap = 0;
    ms_err err;
    ms_err_clear(&err);
    if (ms_tok_encode(t, b, n, &ids, &n_ids, &cap, &err) != MS_OK) fz_fail("encode failed: %s", err.msg);
    for (int64_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= ms_tok_n_vocab(t) || ms_tok_is_special(t, ids[i]))
            fz_fail("encode produced id %d", ids[i]);
    char *out = NULL;
    size_t len = 0;
    if (ms_tok_decode(t, ids, n_ids, &out, &len, &err) != MS_OK) fz_fail("decode failed: %s", err.msg);
    if (len != n || (n && memcmp(out, b, n) != 0)) fz_fail("decode(encode(b)) != b (%zu vs %zu bytes)", len, n);
    free(out);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    size_t ranks_len = size, cfg_len = 0;
    const char *cfg = NULL;
    const char *m = memmem(text, size, MARKER, sizeof MARKER - 1);
    if (m) {
        ranks_len = (size_t)(m - text);
        cfg = m + sizeof MARKER - 1;
        cfg_len = size - ranks_len - (sizeof MARKER - 1);
    }
    int64_t lines = 0;
    for (size_t i = 0; i < ranks_len;) {
        size_t e = i;
        while (e < ranks_len && text[e] != '\n') e++;
        size_t le = e;
        if (le > i && text[le - 1] == '\r') le--;
        if (le > i) lines++;
        i = e + 1;
    }
    /* copies, so reads past the given lengths are caught by ASan */
    char *r = fz_strndup(data, ranks_len);
    char *c = cfg ? fz_strndup((const uint8_t *)cfg, cfg_len) : NULL;
    if (!r || (cfg && !c)) fz_fail("out of memory");
    ms_tok *t = NULL;
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_tok_load_mem(r, ranks_len, c, cfg_len, lines + 8, &t, &err);
    if (st != MS_OK) {
        if (t) fz_fail("failed load returned a tokenizer");
        if (!err.msg[0] || strchr(err.msg, '\n')) fz_fail("bad failure message '%s'", err.msg);
    } else {
        int64_t nv = ms_tok_n_vocab(t);
        for (int64_t id = 0; id < nv; id++) {
            const char *b = NULL;
            if (ms_tok_token_bytes(t, (int32_t)id, &b) < 0 || !b) fz_fail("id %lld has no bytes", (long long)id);
        }
        static const char sample[] = "Hello, world! It's 2025: \xE4\xB8\xAD\xE6\x96\x87 caf\xC3\xA9 \xFF\xFE\n\n  x";
        roundtrip(t, sample, sizeof sample - 1);
        roundtrip(t, r, ranks_len < 4096 ? ranks_len : 4096);
        ms_tok_free(t);
    }
    free(r);
    free(c);
    return 0;
}
