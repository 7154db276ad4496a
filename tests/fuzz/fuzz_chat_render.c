/* tests/fuzz/fuzz_chat_render.c - libFuzzer target: the chat renderer's input.
 *
 * Owns: fuzzing ms_chat_render / _append / _text / _append_text (text/chat.h)
 *   with conversations decoded from arbitrary bytes, as a server would build
 *   them from an untrusted request.
 * Idea: the input is fields separated by 0xFF:
 *     f0        options: byte 0 bit 0 thinking, bits 1-2 effort, bit 3
 *               generation prompt; byte 1 = split point k (mod n_msgs + 1)
 *     f1        tools JSON (empty: none)
 *     f2 ...    one message each: byte 0 = role (bits 0-1), reasoning present
 *               (bit 2), number of tool calls (bits 3-4, mod 3), tool index
 *               (bits 5-7); the rest split at 0xFE into content, reasoning,
 *               then per call name and arguments (a tool message takes its
 *               tool_name from the first of those)
 *   Properties (chat.h):
 *     - ids and text forms agree on success vs failure;
 *     - a failed render leaves *n_ids where it was;
 *     - render(all) == render(first k, no gen prompt) + render_append(rest),
 *       in ids and in text;
 *     - a successful render contains no id outside the vocabulary.
 * Does not: check the rendering against the Python reference (test_chat.c).
 */
#include "text/chat.h"
#include "fuzz_fixture.h"

#include <stdint.h>
#include <string.h>

#define MAX_MSGS 12
#define MAX_PARTS 8

typedef struct conv {
    ms_chat_msg msgs[MAX_MSGS];
    ms_chat_call calls[MAX_MSGS][2];
    char *owned[MAX_MSGS * MAX_PARTS + 2];
    int n_owned;
    int64_t n;
    ms_chat_opts o;
    int k;
} conv;

static char *keep(conv *c, const uint8_t *p, size_t n) {
    char *s = fz_strndup(p, n);
    if (!s) fz_fail("out of memory");
    c->owned[c->n_owned++] = s;
    return s;
}

static void decode(conv *c, const uint8_t *data, size_t size) {
    const uint8_t *f[2 + MAX_MSGS];
    size_t fl[2 + MAX_MSGS];
    int nf = fz_fields(data, size, 0xFF, f, fl, 2 + MAX_MSGS);
    c->o = ms_chat_default_opts();
    uint8_t o0 = nf > 0 && fl[0] > 0 ? f[0][0] : 0, o1 = nf > 0 && fl[0] > 1 ? f[0][1] : 0;
    c->o.thinking = o0 & 1;
    c->o.effort = (ms_chat_effort)((o0 >> 1) & 3);
    c->o.add_generation_prompt = (o0 >> 3) & 1;
    c->o.tools_json = nf > 1 && fl[1] > 0 ? keep(c, f[1], fl[1]) : NULL;
    for (int i = 2; i < nf; i++) {
        ms_chat_msg *m = &c->msgs[c->n];
        memset(m, 0, sizeof *m);
        uint8_t h = fl[i] > 0 ? f[i][0] : 0;
        const uint8_t *p[MAX_PARTS];
        size_t pl[MAX_PARTS];
        int np = fl[i] > 0 ? fz_fields(f[i] + 1, fl[i] - 1, 0xFE, p, pl, MAX_PARTS) : 0;
        m->role = (ms_chat_role)(h & 3);
        m->content = np > 0 ? keep(c, p[0], pl[0]) : NULL;
        if (m->role == MS_CHAT_ASSISTANT) {
            if (h & 4) m->reasoning = np > 1 ? keep(c, p[1], pl[1]) : "";
            int nc = ((h >> 3) & 3) % 3;
            for (int j = 0; j < nc; j++) {
                ms_chat_call *cl = &c->calls[c->n][j];
                cl->name = np > 2 + 2 * j ? keep(c, p[2 + 2 * j], pl[2 + 2 * j]) : "f";
                cl->arguments = np > 3 + 2 * j ? keep(c, p[3 + 2 * j], pl[3 + 2 * j]) : NULL;
                cl->index = j;
            }
            m->calls = nc ? c->calls[c->n] : NULL;
            m->n_calls = nc;
        } else if (m->role == MS_CHAT_TOOL) {
            m->tool_name = np > 2 ? keep(c, p[2], pl[2]) : "f";
            m->tool_index = h >> 5;
        }
        c->n++;
    }
    c->k = (int)(o1 % (uint8_t)(c->n + 1));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const ms_tok *t = fz_tok();
    conv *c = calloc(1, sizeof *c);
    if (!c) return 0;
    decode(c, data, size);
    ms_err err;
    ms_err_clear(&err);

    /* whole conversation, appended after one sentinel id */
    int32_t *ids = malloc(sizeof *ids);
    if (!ids) fz_fail("out of memory");
    ids[0] = 5;
    int64_t n = 1, cap = 1;
    ms_status st = ms_chat_render(t, c->msgs, c->n, &c->o, &ids, &n, &cap, &err);
    char *txt = NULL;
    size_t tl = 0;
    ms_err err2;
    ms_err_clear(&err2);
    ms_status st2 = ms_chat_render_text(c->msgs, c->n, &c->o, &txt, &tl, &err2);
    if ((st == MS_OK) != (st2 == MS_OK))
        fz_fail("ids render %d (%s) but text render %d (%s)", (int)st, err.msg, (int)st2, err2.msg);
    if (ids[0] != 5) fz_fail("render overwrote an earlier id");
    if (st != MS_OK) {
        if (n != 1) fz_fail("failed render moved n_ids to %lld", (long long)n);
        if (!err.msg[0] || txt) fz_fail("failure without message, or text returned");
    } else {
        for (int64_t i = 1; i < n; i++)
            if (ids[i] < 0 || ids[i] >= ms_tok_n_vocab(t)) fz_fail("id %d out of the vocabulary", ids[i]);
        if (!txt || txt[tl] != '\0') fz_fail("text form not NUL terminated");

        /* split at k: first part without generation prompt, then append the rest */
        ms_chat_opts o1 = c->o;
        o1.add_generation_prompt = 0;
        int32_t *a = NULL;
        int64_t na = 0, capa = 0;
        char *t1 = NULL, *t2 = NULL;
        size_t l1 = 0, l2 = 0;
        ms_err_clear(&err);
        if (ms_chat_render(t, c->msgs, c->k, &o1, &a, &na, &capa, &err) != MS_OK ||
            ms_chat_render_append(t, c->msgs + c->k, c->n - c->k, &c->o, &a, &na, &capa, &err) != MS_OK ||
            ms_chat_render_text(c->msgs, c->k, &o1, &t1, &l1, &err) != MS_OK ||
            ms_chat_render_append_text(c->msgs + c->k, c->n - c->k, &c->o, &t2, &l2, &err) != MS_OK)
            fz_fail("split render at %d of %lld failed: %s", c->k, (long long)c->n, err.msg);
        if (na != n - 1 || (na > 0 && memcmp(a, ids + 1, (size_t)na * sizeof *a) != 0))
            fz_fail("render(all) != render(first %d) + render_append(rest): %lld vs %lld ids",
                    c->k, (long long)(n - 1), (long long)na);
        if (!t1 || !t2 || l1 + l2 != tl || memcmp(t1, txt, l1) != 0 || memcmp(t2, txt + l1, l2) != 0)
            fz_fail("text: render(all) != render(first %d) + render_append(rest)", c->k);
        free(a);
        free(t1);
        free(t2);
    }
    free(txt);
    free(ids);
    for (int i = 0; i < c->n_owned; i++) free(c->owned[i]);
    free(c);
    return 0;
}
