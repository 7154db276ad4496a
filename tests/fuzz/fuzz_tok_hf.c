/* tests/fuzz/fuzz_tok_hf.c - libFuzzer target: Hugging Face tokenizer.json,
 * and the harmony parser on the tokenizers that load.
 *
 * Owns: fuzzing ms_tok_load_hf_mem (text/tokenizer.h) on arbitrary files.
 * Idea: the input is the whole tokenizer.json; n_vocab is 280 (the seeds have
 *   256 byte tokens, a few merges and the harmony specials below 280). A file
 *   that fails must fail with one line naming nothing but a message; a
 *   tokenizer that loads must keep tokenizer.h's promises (every id below
 *   n_vocab has bytes, decode(encode(b)) == b, encode never yields a
 *   special), and the harmony parser must accept any id sequence (the input
 *   bytes read as ids) without failing.
 * Does not: check BPE against tiktoken (tests/t_tokenizer_parity.sh).
 */
#include "text/chat_harmony.h"
#include "text/tokenizer.h"
#include "fuzz_fixture.h"

#include <stdint.h>
#include <string.h>

#define N_VOCAB 280

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

static void parse_ids(const ms_tok *t, const uint8_t *data, size_t size) {
    int32_t ids[256];
    int64_t n = 0;
    for (size_t i = 0; i + 1 < size && n < 256; i += 2) ids[n++] = (int32_t)((data[i] | data[i + 1] << 8) % N_VOCAB);
    ms_chat_reply r;
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_harmony_parse(t, ids, n, 0, &r, &err);
    if (st == MS_OK) {
        if (!r.reasoning || !r.content || strlen(r.content) > r.content_len) fz_fail("bad reply");
        for (int64_t i = 0; i < r.n_calls; i++)
            if (!r.calls[i].name || !r.calls[i].arguments) fz_fail("call %lld incomplete", (long long)i);
        ms_chat_reply_free(&r);
    } else if (st != MS_E_MODEL) {
        fz_fail("parse failed: %s", err.msg);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *j = fz_strndup(data, size);   /* a copy: reads past size are caught by ASan */
    if (!j) fz_fail("out of memory");
    ms_tok *t = NULL;
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_tok_load_hf_mem(j, size, N_VOCAB, &t, &err);
    if (st != MS_OK) {
        if (t) fz_fail("failed load returned a tokenizer");
        if (!err.msg[0] || strchr(err.msg, '\n')) fz_fail("bad failure message '%s'", err.msg);
    } else {
        for (int64_t id = 0; id < ms_tok_n_vocab(t); id++) {
            const char *b = NULL;
            if (ms_tok_token_bytes(t, (int32_t)id, &b) < 0 || !b) fz_fail("id %lld has no bytes", (long long)id);
        }
        static const char sample[] = "Hello, world! It's 2025: \xE4\xB8\xAD\xE6\x96\x87 caf\xC3\xA9 \xFF\xFE\n\n  x";
        roundtrip(t, sample, sizeof sample - 1);
        roundtrip(t, j, size < 4096 ? size : 4096);
        parse_ids(t, data, size);
        ms_tok_free(t);
    }
    free(j);
    return 0;
}
