/* tests/fuzz/fuzz_tok_decode.c - libFuzzer target: decoding arbitrary ids.
 *
 * Owns: fuzzing ms_tok_decode and ms_tok_token_bytes (text/tokenizer.h).
 * Idea: the input is a sequence of little-endian int32 ids, read raw (any
 *   value: negative, past the vocabulary) when the first byte is odd, else
 *   folded into [-2, n_vocab + 2) so that mostly valid sequences are decoded.
 *   All ids valid: decode succeeds with exactly the concatenated token bytes.
 *   Any id invalid: decode fails with MS_E_USAGE, *out NULL, *len 0.
 * Does not: check text content (fuzz_tok_encode.c checks round trips).
 */
#include "text/tokenizer.h"
#include "fuzz_fixture.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const ms_tok *t = fz_tok();
    const int64_t nv = ms_tok_n_vocab(t);
    int raw = data[0] & 1;
    size_t n = (size - 1) / 4;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return 0;
    int valid = 1;
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)data[1 + 4 * i] | (uint32_t)data[2 + 4 * i] << 8 |
                     (uint32_t)data[3 + 4 * i] << 16 | (uint32_t)data[4 + 4 * i] << 24;
        int32_t id = raw ? (int32_t)u : (int32_t)(u % (uint32_t)(nv + 4)) - 2;
        ids[i] = id;
        const char *b = NULL;
        int64_t l = ms_tok_token_bytes(t, id, &b);
        if (l < 0) valid = 0;
        else total += l;
    }
    char *out = (char *)1;
    size_t len = 99;
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_tok_decode(t, ids, (int64_t)n, &out, &len, &err);
    if (valid) {
        if (st != MS_OK) fz_fail("valid ids refused: %s", err.msg);
        if ((int64_t)len != total || out[len] != '\0') fz_fail("decoded %zu bytes, expected %lld", len, (long long)total);
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            const char *b = NULL;
            int64_t l = ms_tok_token_bytes(t, ids[i], &b);
            if (memcmp(out + at, b, (size_t)l) != 0) fz_fail("token %zu decoded wrongly", i);
            at += (size_t)l;
        }
        free(out);
    } else {
        if (st != MS_E_USAGE || out != NULL || len != 0 || !err.msg[0])
            fz_fail("invalid ids: status %d, out %p, len %zu", (int)st, (void *)out, len);
    }
    free(ids);
    return 0;
}
