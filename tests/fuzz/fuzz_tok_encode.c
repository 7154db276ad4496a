/* tests/fuzz/fuzz_tok_encode.c - libFuzzer target: encoding arbitrary bytes.
 *
 * Owns: fuzzing ms_tok_encode (text/tokenizer.h) with the fixture tokenizer.
 * Idea: for every byte string b (invalid UTF-8 included) encode succeeds,
 *   yields no special id, decode(encode(b)) == b, and appending to a
 *   non-empty id array leaves the earlier ids alone and gives the same ids
 *   as encoding into an empty one.
 * Does not: compare ids with tiktoken (tests/t_tokenizer_parity.sh).
 */
#include "text/tokenizer.h"
#include "fuzz_fixture.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const ms_tok *t = fz_tok();
    char *text = fz_strndup(data, size);    /* exact-size copy: ASan sees overreads */
    if (!text) return 0;
    ms_err err;
    ms_err_clear(&err);
    int32_t *ids = NULL;
    int64_t n = 0, cap = 0;
    if (ms_tok_encode(t, text, size, &ids, &n, &cap, &err) != MS_OK) fz_fail("encode failed: %s", err.msg);
    if (n > (int64_t)size) fz_fail("%lld ids for %zu bytes", (long long)n, size);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ms_tok_is_special(t, ids[i])) fz_fail("encode produced id %d", ids[i]);
    char *out = NULL;
    size_t len = 0;
    if (ms_tok_decode(t, ids, n, &out, &len, &err) != MS_OK) fz_fail("decode failed: %s", err.msg);
    if (len != size || (size && memcmp(out, text, size) != 0)) fz_fail("decode(encode(b)) != b");
    free(out);

    /* append after 3 sentinel ids */
    int32_t *ids2 = malloc(3 * sizeof *ids2);
    if (!ids2) fz_fail("out of memory");
    ids2[0] = 7; ids2[1] = 8; ids2[2] = 9;
    int64_t n2 = 3, cap2 = 3;
    if (ms_tok_encode(t, text, size, &ids2, &n2, &cap2, &err) != MS_OK) fz_fail("append encode failed: %s", err.msg);
    if (n2 != 3 + n || ids2[0] != 7 || ids2[1] != 8 || ids2[2] != 9 ||
        (n && memcmp(ids2 + 3, ids, (size_t)n * sizeof *ids) != 0))
        fz_fail("appending encode differs from a fresh encode");
    free(ids2);
    free(ids);
    free(text);
    return 0;
}
