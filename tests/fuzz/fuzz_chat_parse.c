/* tests/fuzz/fuzz_chat_parse.c - libFuzzer target: parsing model output and
 * closing a generated turn.
 *
 * Owns: fuzzing ms_chat_parse, the incremental parser and ms_chat_close_turn
 *   (text/chat.h) on arbitrary id sequences.
 * Idea: byte 0 bit 0 = thinking; the rest becomes ids: a byte >= 0xF8 is the
 *   fixture's special n_ranks + (byte - 0xF8) ([BOS] [EOS] <|open|> <|close|>
 *   <|sep|> <|end_of_msg|> and two reserved ids), runs of other bytes are
 *   encoded with the tokenizer, so seeds read like the markup they stand for.
 *   Properties (chat.h):
 *     - the parser never fails on content;
 *     - feeding one id at a time == feeding all at once (reasoning, content,
 *       calls, flags), and the reply only grows while feeding;
 *     - after finish every call has arguments;
 *     - gen + close_turn(gen) parses as an ended message.
 * Does not: check what the parse means (test_chat.c).
 */
#include "text/chat.h"
#include "fuzz_fixture.h"

#include <stdint.h>
#include <string.h>

static int32_t *to_ids(const ms_tok *t, const uint8_t *p, size_t n, int64_t *n_ids) {
    int32_t *ids = NULL;
    int64_t cap = 0;
    *n_ids = 0;
    int64_t sp0 = ms_tok_n_vocab(t) - FZ_N_SPECIAL;
    ms_err err;
    ms_err_clear(&err);
    for (size_t i = 0; i < n;) {
        if (p[i] >= 0xF8) {
            if (*n_ids == cap) {
                cap = cap ? 2 * cap : 64;
                int32_t *x = realloc(ids, (size_t)cap * sizeof *x);
                if (!x) fz_fail("out of memory");
                ids = x;
            }
            ids[(*n_ids)++] = (int32_t)(sp0 + (p[i] - 0xF8));
            i++;
            continue;
        }
        size_t e = i;
        while (e < n && p[e] < 0xF8) e++;
        if (ms_tok_encode(t, (const char *)p + i, e - i, &ids, n_ids, &cap, &err) != MS_OK)
            fz_fail("encode failed: %s", err.msg);
        i = e;
    }
    return ids;
}

static void same_reply(const ms_chat_reply *a, const ms_chat_reply *b, const char *what) {
    if (a->reasoning_len != b->reasoning_len ||
        (a->reasoning_len && memcmp(a->reasoning, b->reasoning, a->reasoning_len)) ||
        a->content_len != b->content_len || (a->content_len && memcmp(a->content, b->content, a->content_len)) ||
        a->has_reasoning != b->has_reasoning || a->n_calls != b->n_calls || a->flags != b->flags)
        fz_fail("%s: replies differ (flags %u vs %u, calls %lld vs %lld)", what, a->flags, b->flags,
                (long long)a->n_calls, (long long)b->n_calls);
    for (int64_t i = 0; i < a->n_calls; i++) {
        const ms_chat_call_out *x = &a->calls[i], *y = &b->calls[i];
        if (strcmp(x->name, y->name) || x->index != y->index || x->complete != y->complete ||
            !x->arguments || !y->arguments || strcmp(x->arguments, y->arguments))
            fz_fail("%s: call %lld differs", what, (long long)i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const ms_tok *t = fz_tok();
    int thinking = data[0] & 1;
    int64_t n = 0;
    int32_t *ids = to_ids(t, data + 1, size - 1, &n);
    ms_err err;
    ms_err_clear(&err);

    ms_chat_reply once;
    if (ms_chat_parse(t, ids, n, thinking, &once, &err) != MS_OK) fz_fail("parse failed: %s", err.msg);
    for (int64_t i = 0; i < once.n_calls; i++)
        if (!once.calls[i].arguments || !once.calls[i].name) fz_fail("call %lld incomplete after finish", (long long)i);

    ms_chat_parser *p = NULL;
    if (ms_chat_parser_new(t, thinking, &p, &err) != MS_OK) fz_fail("parser_new failed: %s", err.msg);
    size_t rl = 0, cl = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ms_chat_parser_feed(p, ids + i, 1, &err) != MS_OK) fz_fail("feed failed: %s", err.msg);
        const ms_chat_reply *r = ms_chat_parser_reply(p);
        if (r->reasoning_len < rl || r->content_len < cl) fz_fail("reply shrank at id %lld", (long long)i);
        rl = r->reasoning_len;
        cl = r->content_len;
    }
    if (ms_chat_parser_finish(p, &err) != MS_OK) fz_fail("finish failed: %s", err.msg);
    same_reply(&once, ms_chat_parser_reply(p), "one id at a time vs all at once");
    ms_chat_parser_free(p);
    ms_chat_reply_free(&once);

    /* gen + close_turn(gen) is an ended message */
    int32_t *all = NULL;
    int64_t na = 0, cap = 0;
    if (n > 0) {
        all = malloc((size_t)n * sizeof *all);
        if (!all) fz_fail("out of memory");
        memcpy(all, ids, (size_t)n * sizeof *all);
        na = cap = n;
    }
    if (ms_chat_close_turn(t, ids, n, thinking, &all, &na, &cap, &err) != MS_OK)
        fz_fail("close_turn failed: %s", err.msg);
    ms_chat_reply closed;
    if (ms_chat_parse(t, all, na, thinking, &closed, &err) != MS_OK) fz_fail("parse failed: %s", err.msg);
    if (!(closed.flags & MS_CHAT_ENDED)) fz_fail("gen + close_turn(gen) does not end (flags %u)", closed.flags);
    ms_chat_reply_free(&closed);
    free(all);
    free(ids);
    return 0;
}
