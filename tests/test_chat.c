/* tests/test_chat.c - unit tests of text/chat (the K3 "XTML" chat format).
 *
 * A small tokenizer is built in memory (all 256 single bytes + a few merges,
 * the K3 specials named in a tokenizer_config.json), then:
 *   - the spec's example string, as text and as ids (one id per special, each
 *     T segment encoded on its own);
 *   - user text spelling "<|open|>" stays ordinary tokens;
 *   - attribute escaping, system prompt, thinking on/off and the effort
 *     message, tool-declare JSON (compact, key-sorted, OpenAI form), an
 *     assistant turn with reasoning, response and two tool calls (typed
 *     arguments; invalid JSON -> json form), a tool result;
 *   - JSON writer: jansson's compact separators, Python float repr;
 *   - multi-turn: render(all) == render(prefix) + render_append(rest) for
 *     every split, and closing a generated turn;
 *   - parsing: round trip of reasoning / content / tool calls, every
 *     truncation of a reply, garbled markup, random ids, streaming;
 *   - errors: bad messages and bad tools JSON leave the id array as it was.
 */
#include "text/chat.h"

#include "check.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the test tokenizer --------------------------------------------------- */

static const char *const merges[] = {"he", "ll", "llo", "hello", "me", "ss", "ag", "age", "ssage", "message",
                                     "ro", "le", "role", "<|", "|>"};
#define N_MERGES ((int)(sizeof merges / sizeof merges[0]))
#define N_RANKS (256 + N_MERGES)
#define N_VOCAB (N_RANKS + 256)

static size_t b64(const unsigned char *s, size_t n, char *out) {
    static const char T[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t x = (uint32_t)s[i] << 16;
        if (i + 1 < n) x |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n) x |= s[i + 2];
        out[o++] = T[(x >> 18) & 63];
        out[o++] = T[(x >> 12) & 63];
        out[o++] = i + 1 < n ? T[(x >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? T[x & 63] : '=';
    }
    return o;
}

static ms_tok *make_tok(int with_specials) {
    char *txt = malloc(65536);
    size_t o = 0;
    for (int i = 0; i < 256; i++) {
        unsigned char c = (unsigned char)i;
        o += b64(&c, 1, txt + o);
        o += (size_t)sprintf(txt + o, " %d\n", i);
    }
    for (int i = 0; i < N_MERGES; i++) {
        o += b64((const unsigned char *)merges[i], strlen(merges[i]), txt + o);
        o += (size_t)sprintf(txt + o, " %d\n", 256 + i);
    }
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"added_tokens_decoder\": {"
             "\"%d\": {\"content\": \"[BOS]\", \"special\": true},"
             "\"%d\": {\"content\": \"[EOS]\", \"special\": true},"
             "\"%d\": {\"content\": \"<|end_of_msg|>\", \"special\": true},"
             "\"%d\": {\"content\": \"<|open|>\", \"special\": true},"
             "\"%d\": {\"content\": \"<|close|>\", \"special\": true},"
             "\"%d\": {\"content\": \"<|sep|>\", \"special\": true}}}",
             N_RANKS, N_RANKS + 1, N_RANKS + 2, N_RANKS + 3, N_RANKS + 4, N_RANKS + 5);
    const char *c = with_specials ? cfg : "{\"added_tokens_decoder\": {}}";
    ms_tok *t = NULL;
    ms_err err;
    ms_err_clear(&err);
    if (ms_tok_load_mem(txt, o, c, strlen(c), N_VOCAB, &t, &err) != MS_OK)
        fprintf(stderr, "tokenizer load failed: %s\n", err.msg);
    free(txt);
    return t;
}

static ms_tok *tok;
static int32_t ID_EOS, ID_END, ID_OPEN, ID_CLOSE, ID_SEP;

/* ---- helpers ---------------------------------------------------------------- */

typedef struct idv {
    int32_t *p;
    int64_t n, cap;
} idv;

static void idv_push(idv *v, int32_t id) {
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 64;
        v->p = realloc(v->p, (size_t)v->cap * sizeof *v->p);
    }
    v->p[v->n++] = id;
}

static void idv_text(idv *v, const char *s) {
    ms_err err;
    ms_err_clear(&err);
    if (ms_tok_encode(tok, s, strlen(s), &v->p, &v->n, &v->cap, &err) != MS_OK)
        fprintf(stderr, "encode failed: %s\n", err.msg);
}

static void idv_cat(idv *v, const int32_t *a, int64_t n) {
    for (int64_t i = 0; i < n; i++) idv_push(v, a[i]);
}

static int idv_eq(const idv *a, const idv *b) {
    return a->n == b->n && (a->n == 0 || memcmp(a->p, b->p, (size_t)a->n * sizeof *a->p) == 0);
}

static void idv_free(idv *v) {
    free(v->p);
    memset(v, 0, sizeof *v);
}

static ms_chat_opts opts(int thinking, int gp) {
    ms_chat_opts o = ms_chat_default_opts();
    o.thinking = thinking;
    o.add_generation_prompt = gp;
    return o;
}

static idv render(const ms_chat_msg *m, int64_t n, const ms_chat_opts *o, int append) {
    idv v = {0};
    ms_err err;
    ms_err_clear(&err);
    ms_status st = append ? ms_chat_render_append(tok, m, n, o, &v.p, &v.n, &v.cap, &err)
                          : ms_chat_render(tok, m, n, o, &v.p, &v.n, &v.cap, &err);
    if (st != MS_OK) fprintf(stderr, "render failed: %s\n", err.msg);
    return v;
}

static char *render_text(const ms_chat_msg *m, int64_t n, const ms_chat_opts *o, int append) {
    char *s = NULL;
    ms_err err;
    ms_err_clear(&err);
    ms_status st = append ? ms_chat_render_append_text(m, n, o, &s, NULL, &err)
                          : ms_chat_render_text(m, n, o, &s, NULL, &err);
    if (st != MS_OK) fprintf(stderr, "render_text failed: %s\n", err.msg);
    return s ? s : calloc(1, 1);
}

static char *decode(const idv *v) {
    char *s = NULL;
    size_t n;
    ms_err err;
    ms_err_clear(&err);
    if (ms_tok_decode(tok, v->p, v->n, &s, &n, &err) != MS_OK) return calloc(1, 1);
    return s;
}

static int64_t count_id(const idv *v, int32_t id) {
    int64_t c = 0;
    for (int64_t i = 0; i < v->n; i++) c += v->p[i] == id;
    return c;
}

static int64_t count_str(const char *s, const char *needle) {
    int64_t c = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle)) c++;
    return c;
}

/* The id render and the text render agree: decode(ids) == text, and every
 * special in the text is one special id, except spelled_opens "<|open|>"
 * that the messages spell as plain text. */
static void check_agree(const ms_chat_msg *m, int64_t n, const ms_chat_opts *o, int append, int spelled_opens,
                        const char *what) {
    idv v = render(m, n, o, append);
    char *t = render_text(m, n, o, append);
    char *d = decode(&v);
    CHECK(strcmp(d, t) == 0, "%s: decode(ids) != text:\n%s\n%s", what, d, t);
    CHECK(count_id(&v, ID_OPEN) + spelled_opens == count_str(t, "<|open|>") && count_id(&v, ID_CLOSE) == count_str(t, "<|close|>") &&
          count_id(&v, ID_SEP) == count_str(t, "<|sep|>") && count_id(&v, ID_END) == count_str(t, "<|end_of_msg|>"),
          "%s: special ids do not match the specials in the text", what);
    free(d);
    free(t);
    idv_free(&v);
}

/* ---- the spec's example ------------------------------------------------------ */

static void test_spec_example(void) {
    ms_chat_msg m = {.role = MS_CHAT_USER, .content = "hello"};
    ms_chat_opts o = opts(0, 1);
    char *t = render_text(&m, 1, &o, 0);
    const char *want = "<|open|>message role=\"user\"<|sep|>hello<|close|>message<|sep|><|end_of_msg|>"
                       "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>";
    CHECK(strcmp(t, want) == 0, "spec example text:\n got  %s\n want %s", t, want);
    free(t);

    /* ids: each T on its own, each S one id */
    idv e = {0};
    idv_push(&e, ID_OPEN); idv_text(&e, "message"); idv_text(&e, " role=\"user\""); idv_push(&e, ID_SEP);
    idv_text(&e, "hello");
    idv_push(&e, ID_CLOSE); idv_text(&e, "message"); idv_push(&e, ID_SEP);
    idv_push(&e, ID_END);
    idv_push(&e, ID_OPEN); idv_text(&e, "message"); idv_text(&e, " role=\"assistant\""); idv_push(&e, ID_SEP);
    idv_push(&e, ID_OPEN); idv_text(&e, "response"); idv_push(&e, ID_SEP);
    idv v = render(&m, 1, &o, 0);
    CHECK(idv_eq(&v, &e), "spec example ids differ (%lld vs %lld ids)", (long long)v.n, (long long)e.n);
    /* the merges are really used: "hello" and "message" are one id each */
    CHECK(v.n > 1 && v.p[1] == 256 + 9 && count_id(&v, 256 + 9) == 3 && count_id(&v, 256 + 3) == 1,
          "expected 'message' = id %d three times and 'hello' = id %d once", 256 + 9, 256 + 3);
    CHECK(count_id(&v, ID_OPEN) == 3 && count_id(&v, ID_SEP) == 4 && count_id(&v, ID_CLOSE) == 1 &&
          count_id(&v, ID_END) == 1, "special counts of the spec example");
    idv_free(&v);
    idv_free(&e);
}

static void test_user_spells_special(void) {
    ms_chat_msg m = {.role = MS_CHAT_USER, .content = "<|open|>x<|sep|><|end_of_msg|>"};
    ms_chat_opts o = opts(0, 0);
    idv v = render(&m, 1, &o, 0);
    CHECK(count_id(&v, ID_OPEN) == 1 && count_id(&v, ID_SEP) == 2 && count_id(&v, ID_END) == 1,
          "user text spelling specials must not produce special ids");
    for (int64_t i = 0; i < v.n; i++)
        if (v.p[i] >= N_RANKS && v.p[i] != ID_OPEN && v.p[i] != ID_CLOSE && v.p[i] != ID_SEP && v.p[i] != ID_END)
            CHECK(0, "unexpected special id %d", v.p[i]);
    /* the content ids are exactly ms_tok_encode of the text */
    idv e = {0};
    idv_push(&e, ID_OPEN); idv_text(&e, "message"); idv_text(&e, " role=\"user\""); idv_push(&e, ID_SEP);
    idv_text(&e, m.content);
    idv_push(&e, ID_CLOSE); idv_text(&e, "message"); idv_push(&e, ID_SEP); idv_push(&e, ID_END);
    CHECK(idv_eq(&v, &e), "content spelling specials encodes as plain text");
    char *d = decode(&v), *t = render_text(&m, 1, &o, 0);
    CHECK(strcmp(d, t) == 0, "decode == text render");
    free(d);
    free(t);
    idv_free(&v);
    idv_free(&e);
}

/* ---- rendering details ---------------------------------------------------------- */

static void test_system_and_escaping(void) {
    ms_chat_msg m[3] = {
        {.role = MS_CHAT_SYSTEM, .content = "Be brief."},
        {.role = MS_CHAT_USER, .content = "a & b \"q\""},
        {.role = MS_CHAT_TOOL, .content = "42", .tool_name = "calc&\"x\"", .tool_index = 3},
    };
    ms_chat_opts o = opts(0, 0);
    char *t = render_text(m, 3, &o, 0);
    const char *want =
        "<|open|>message role=\"system\"<|sep|>Be brief.<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"user\"<|sep|>a & b \"q\"<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"tool\" tool=\"calc&amp;&quot;x&quot;\" index=\"3\"<|sep|>42"
        "<|close|>message<|sep|><|end_of_msg|>";
    CHECK(strcmp(t, want) == 0, "system / escaping / tool result:\n got  %s\n want %s", t, want);
    free(t);
    check_agree(m, 3, &o, 0, 0, "system/escaping");

    /* each attribute is its own T segment */
    idv v = render(&m[2], 1, &o, 0);
    idv e = {0};
    idv_push(&e, ID_OPEN); idv_text(&e, "message"); idv_text(&e, " role=\"tool\"");
    idv_text(&e, " tool=\"calc&amp;&quot;x&quot;\""); idv_text(&e, " index=\"3\""); idv_push(&e, ID_SEP);
    idv_text(&e, "42"); idv_push(&e, ID_CLOSE); idv_text(&e, "message"); idv_push(&e, ID_SEP); idv_push(&e, ID_END);
    CHECK(idv_eq(&v, &e), "tool result ids: one T per attribute");
    idv_free(&v);
    idv_free(&e);

    /* empty content renders nothing between the tags */
    ms_chat_msg empty = {.role = MS_CHAT_USER, .content = NULL};
    t = render_text(&empty, 1, &o, 0);
    CHECK(strcmp(t, "<|open|>message role=\"user\"<|sep|><|close|>message<|sep|><|end_of_msg|>") == 0, "empty: %s", t);
    free(t);
}

static void test_thinking_and_effort(void) {
    ms_chat_msg m = {.role = MS_CHAT_USER, .content = "hi"};
    ms_chat_opts o = opts(1, 1);
    o.effort = MS_CHAT_EFFORT_MAX;
    char *t = render_text(&m, 1, &o, 0);
    const char *want =
        "<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>Use thinking effort: max."
        "<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"user\"<|sep|>hi<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>";
    CHECK(strcmp(t, want) == 0, "thinking on, effort max:\n got  %s\n want %s", t, want);
    free(t);
    check_agree(&m, 1, &o, 0, 0, "thinking");

    o.effort = MS_CHAT_EFFORT_LOW;
    t = render_text(&m, 1, &o, 0);
    CHECK(strstr(t, ">Use thinking effort: low.<") != NULL, "effort low: %s", t);
    free(t);
    o.effort = MS_CHAT_EFFORT_NONE;
    t = render_text(&m, 1, &o, 0);
    CHECK(strstr(t, "thinking-effort") == NULL, "effort none: no message");
    free(t);
    o = opts(0, 1);
    o.effort = MS_CHAT_EFFORT_HIGH;
    t = render_text(&m, 1, &o, 0);
    CHECK(strstr(t, "thinking-effort") == NULL && strstr(t, "<|open|>think") == NULL,
          "thinking off: no effort message, generation prompt opens response: %s", t);
    free(t);
    CHECK(ms_chat_effort_from_name("high") == MS_CHAT_EFFORT_HIGH && ms_chat_effort_from_name("x") == -1 &&
          ms_chat_role_from_name("tool") == MS_CHAT_TOOL && ms_chat_role_from_name("bot") == -1, "name lookups");
}

static const char *const WEATHER_ARGS =
    "{\"city\": \"Paris <|open|>\", \"days\": 3, \"metric\": true, \"extra\": null, "
    "\"tags\": [\"a\", 1.5], \"opts\": {\"z\": 1, \"a\": 0.1}, \"q\": \"say \\\"hi\\\"\\n\"}";
static const char *const BAD_ARGS = "{\"q\": \"x\"";

static const char *const ASSISTANT_WANT =
    "<|open|>message role=\"assistant\"<|sep|>"
    "<|open|>think<|sep|>Need the weather.<|close|>think<|sep|>"
    "<|open|>response<|sep|>Checking.<|close|>response<|sep|>"
    "<|open|>tools<|sep|>"
    "<|open|>call tool=\"weather\" index=\"0\"<|sep|>"
    "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris <|open|><|close|>argument<|sep|>"
    "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|>"
    "<|open|>argument key=\"metric\" type=\"boolean\"<|sep|>true<|close|>argument<|sep|>"
    "<|open|>argument key=\"extra\" type=\"null\"<|sep|>null<|close|>argument<|sep|>"
    "<|open|>argument key=\"tags\" type=\"array\"<|sep|>[\"a\",1.5]<|close|>argument<|sep|>"
    "<|open|>argument key=\"opts\" type=\"object\"<|sep|>{\"z\":1,\"a\":0.1}<|close|>argument<|sep|>"
    "<|open|>argument key=\"q\" type=\"string\"<|sep|>say \"hi\"\n<|close|>argument<|sep|>"
    "<|close|>call<|sep|>"
    "<|open|>call tool=\"search\" index=\"1\"<|sep|>"
    "<|open|>json type=\"object\"<|sep|>{\"q\": \"x\"<|close|>json<|sep|>"
    "<|close|>call<|sep|>"
    "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";

static const ms_chat_call CALLS[2] = {
    {.name = "weather", .arguments = NULL, .index = 0},
    {.name = "search", .arguments = NULL, .index = 1},
};

static ms_chat_msg assistant_msg(ms_chat_call calls[2]) {
    calls[0] = CALLS[0];
    calls[1] = CALLS[1];
    calls[0].arguments = WEATHER_ARGS;
    calls[1].arguments = BAD_ARGS;
    return (ms_chat_msg){.role = MS_CHAT_ASSISTANT, .content = "Checking.", .reasoning = "Need the weather.",
                         .calls = calls, .n_calls = 2};
}

static void test_assistant_calls(void) {
    ms_chat_call calls[2];
    ms_chat_msg a = assistant_msg(calls);
    ms_chat_opts o = opts(1, 0);
    char *t = render_text(&a, 1, &o, 1);
    CHECK(strcmp(t, ASSISTANT_WANT) == 0, "assistant with calls:\n got  %s\n want %s", t, ASSISTANT_WANT);
    free(t);
    check_agree(&a, 1, &o, 1, 1, "assistant");

    /* the string value is encoded as text: "<|open|>" inside it is not a special */
    idv v = render(&a, 1, &o, 1);
    CHECK(count_id(&v, ID_OPEN) == count_str(ASSISTANT_WANT, "<|open|>") - 1, "string argument spelling <|open|>");
    idv_free(&v);

    /* blank arguments: no argument segments; valid non-object JSON: json form with its type */
    ms_chat_call c2[2] = {{.name = "now", .arguments = "  ", .index = 0}, {.name = "sum", .arguments = "[1,2]", .index = 1}};
    ms_chat_msg b = {.role = MS_CHAT_ASSISTANT, .calls = c2, .n_calls = 2};
    t = render_text(&b, 1, &o, 1);
    const char *want = "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
                       "<|open|>tools<|sep|><|open|>call tool=\"now\" index=\"0\"<|sep|><|close|>call<|sep|>"
                       "<|open|>call tool=\"sum\" index=\"1\"<|sep|><|open|>json type=\"array\"<|sep|>[1,2]"
                       "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
                       "<|end_of_msg|>";
    CHECK(strcmp(t, want) == 0, "blank / array arguments:\n got  %s\n want %s", t, want);
    free(t);
}

static void test_tool_declare(void) {
    /* one tool in OpenAI form with unsorted keys and spaces, one bare function object */
    const char *tools =
        "[ {\"type\": \"function\", \"function\": {\"name\": \"weather\", \"description\": \"Weather, by city\", "
        "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
        "\"required\": [\"city\"]}}},\n"
        "  {\"name\": \"now\", \"parameters\": {\"type\": \"object\", \"properties\": {}}} ]";
    ms_chat_opts o = opts(0, 0);
    o.tools_json = tools;
    ms_chat_msg m = {.role = MS_CHAT_USER, .content = "hi"};
    char *t = render_text(&m, 1, &o, 0);
    const char *want =
        "<|open|>message role=\"system\" type=\"tool-declare\"<|sep|>"
        "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n"
        "[{\"function\":{\"description\":\"Weather, by city\",\"name\":\"weather\",\"parameters\":"
        "{\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"],\"type\":\"object\"}},"
        "\"type\":\"function\"},"
        "{\"function\":{\"name\":\"now\",\"parameters\":{\"properties\":{},\"type\":\"object\"}},"
        "\"type\":\"function\"}]"
        "\n```<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"user\"<|sep|>hi<|close|>message<|sep|><|end_of_msg|>";
    CHECK(strcmp(t, want) == 0, "tool-declare:\n got  %s\n want %s", t, want);
    free(t);
    check_agree(&m, 1, &o, 0, 0, "tool-declare");
    /* the tool-declare text is one T segment */
    idv v = render(&m, 1, &o, 0);
    idv e = {0};
    idv_push(&e, ID_OPEN); idv_text(&e, "message"); idv_text(&e, " role=\"system\""); idv_text(&e, " type=\"tool-declare\"");
    idv_push(&e, ID_SEP);
    const char *body = strstr(want, "# Tools");
    size_t bl = (size_t)(strstr(want, "```<|close|>") + 3 - body);
    ms_err err;
    ms_err_clear(&err);
    ms_tok_encode(tok, body, bl, &e.p, &e.n, &e.cap, &err);
    CHECK(v.n > e.n && memcmp(v.p, e.p, (size_t)e.n * sizeof *e.p) == 0, "tool-declare ids");
    idv_free(&v);
    idv_free(&e);

    /* an empty array declares nothing; append never renders the preamble */
    o.tools_json = "[]";
    t = render_text(&m, 1, &o, 0);
    CHECK(strstr(t, "tool-declare") == NULL, "empty tools array");
    free(t);
    o.tools_json = tools;
    t = render_text(&m, 1, &o, 1);
    CHECK(strstr(t, "tool-declare") == NULL, "render_append has no preamble");
    free(t);
}

static void test_json_writer(void) {
    /* jansson's compact separators are "," and ":" with no spaces, and our
     * writer agrees with JSON_COMPACT | JSON_SORT_KEYS on float-free input */
    const char *doc = "{\"b\": [1, -2, true, false, null, \"x\\u0001\\ty/\\u00e9\"], \"a\": {\"d\": {}, \"c\": []}}";
    json_error_t je;
    json_t *v = json_loads(doc, 0, &je);
    char *jd = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(v);
    char *ours = NULL;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_chat_json_normalize(doc, strlen(doc), 1, &ours, &err) == MS_OK, "normalize: %s", err.msg);
    CHECK(jd && ours && strcmp(jd, ours) == 0, "writer vs jansson:\n ours    %s\n jansson %s", ours ? ours : "-", jd ? jd : "-");
    CHECK(jd && strstr(jd, ", ") == NULL && strstr(jd, ": ") == NULL && strchr(jd, '\n') == NULL,
          "jansson compact has no spaces: %s", jd ? jd : "-");
    free(jd);
    free(ours);

    static const struct { const char *in, *want; } f[] = {
        {"0.1", "0.1"}, {"1e16", "1e+16"}, {"1e15", "1000000000000000.0"}, {"1e-5", "1e-05"},
        {"0.0001", "0.0001"}, {"1e5", "100000.0"}, {"-0.0", "-0.0"}, {"1.5e300", "1.5e+300"},
        {"123.456", "123.456"}, {"2.5", "2.5"}, {"1.0", "1.0"}, {"-1.25e-7", "-1.25e-07"},
        {"0.30000000000000004", "0.30000000000000004"}, {"12345678901234567", "12345678901234567"},
        {"[1.0,{\"b\":2,\"a\":1}]", "[1.0,{\"a\":1,\"b\":2}]"},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        char *o = NULL;
        ms_err_clear(&err);
        ms_status st = ms_chat_json_normalize(f[i].in, strlen(f[i].in), 1, &o, &err);
        CHECK(st == MS_OK && strcmp(o, f[i].want) == 0, "json %s -> %s, want %s", f[i].in, o ? o : "(null)", f[i].want);
        free(o);
    }
    char *o = NULL;
    ms_err_clear(&err);
    CHECK(ms_chat_json_normalize("{\"b\":1,\"a\":2}", 13, 0, &o, &err) == MS_OK && strcmp(o, "{\"b\":1,\"a\":2}") == 0,
          "unsorted keeps order: %s", o);
    free(o);
    ms_err_clear(&err);
    CHECK(ms_chat_json_normalize("{", 1, 1, &o, &err) == MS_E_USAGE && o == NULL, "bad JSON refused");
}

/* ---- multi-turn ----------------------------------------------------------------- */

static void test_multi_turn(void) {
    ms_chat_call calls[2];
    ms_chat_msg m[6] = {
        {.role = MS_CHAT_SYSTEM, .content = "sys"},
        {.role = MS_CHAT_USER, .content = "hello"},
        assistant_msg(calls),
        {.role = MS_CHAT_TOOL, .content = "sunny", .tool_name = "weather", .tool_index = 0},
        {.role = MS_CHAT_TOOL, .content = "err", .tool_name = "search", .tool_index = 1},
        {.role = MS_CHAT_USER, .content = "thanks"},
    };
    for (int thinking = 0; thinking <= 1; thinking++) {
        ms_chat_opts all = opts(thinking, 1), pre = opts(thinking, 0);
        all.tools_json = pre.tools_json = "[{\"name\":\"weather\"}]";
        idv full = render(m, 6, &all, 0);
        char *full_t = render_text(m, 6, &all, 0);
        for (int k = 0; k <= 6; k++) {
            idv a = render(m, k, &pre, 0);
            idv b = render(m + k, 6 - k, &all, 1);
            idv_cat(&a, b.p, b.n);
            CHECK(idv_eq(&a, &full), "thinking %d: render(all) != render(first %d) + append(rest)", thinking, k);
            char *ta = render_text(m, k, &pre, 0), *tb = render_text(m + k, 6 - k, &all, 1);
            size_t la = strlen(ta);
            CHECK(strncmp(full_t, ta, la) == 0 && strcmp(full_t + la, tb) == 0, "text split %d", k);
            free(ta);
            free(tb);
            idv_free(&a);
            idv_free(&b);
        }
        check_agree(m, 6, &all, 0, 1, "multi-turn");
        free(full_t);
        idv_free(&full);
    }
}

/* The canonical generated ids of assistant message A after the prompt of
 * msgs[0..n) with the generation prompt: render(msgs + A) minus the prompt. */
static idv gen_of(const ms_chat_msg *msgs, int64_t n, const ms_chat_msg *a, int thinking, idv *prompt) {
    ms_chat_msg all[8];
    memcpy(all, msgs, (size_t)n * sizeof *msgs);
    all[n] = *a;
    ms_chat_opts gp = opts(thinking, 1), no = opts(thinking, 0);
    *prompt = render(msgs, n, &gp, 0);
    idv full = render(all, n + 1, &no, 0);
    idv g = {0};
    CHECK(full.n > prompt->n && memcmp(full.p, prompt->p, (size_t)prompt->n * sizeof(int32_t)) == 0,
          "generation prompt is a prefix of the rendered assistant turn (thinking %d)", thinking);
    if (full.n > prompt->n) idv_cat(&g, full.p + prompt->n, full.n - prompt->n);
    idv_free(&full);
    return g;
}

static idv close_turn(const idv *gen, int64_t n, int thinking) {
    idv c = {0};
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_chat_close_turn(tok, gen->p, n, thinking, &c.p, &c.n, &c.cap, &err);
    CHECK(st == MS_OK, "close_turn: %s", err.msg);
    return c;
}

/* Ids in close(tag). */
static int64_t close_len(const char *tag) {
    idv v = {0};
    idv_text(&v, tag);
    int64_t n = v.n + 2;
    idv_free(&v);
    return n;
}

static void test_close_turn(void) {
    ms_chat_msg u = {.role = MS_CHAT_USER, .content = "hello"};
    ms_chat_call calls[2];
    ms_chat_msg with_calls = assistant_msg(calls);
    ms_chat_msg plain = {.role = MS_CHAT_ASSISTANT, .content = "Hi there."};
    for (int thinking = 0; thinking <= 1; thinking++) {
        ms_chat_msg a = thinking ? with_calls : plain;
        idv prompt;
        idv gen = gen_of(&u, 1, &a, thinking, &prompt);
        /* the stop token is not fed: the closer adds only <|end_of_msg|> */
        idv c = close_turn(&gen, gen.n - 1, thinking);
        CHECK(c.n == 1 && c.p[0] == ID_END, "closed message gets only end (thinking %d)", thinking);
        idv_free(&c);
        /* cut before close(message) [and close(tools)]: the closer completes it exactly */
        int64_t cut = gen.n - 1 - close_len("message") - (thinking ? close_len("tools") : 0);
        c = close_turn(&gen, cut, thinking);
        idv tail = {0};
        idv_cat(&tail, gen.p + cut, gen.n - cut);
        CHECK(idv_eq(&c, &tail), "closer completes a cut turn (thinking %d): %lld ids vs %lld", thinking,
              (long long)c.n, (long long)tail.n);
        idv_free(&c);
        idv_free(&tail);
        /* fed end_of_msg: nothing to add */
        c = close_turn(&gen, gen.n, thinking);
        CHECK(c.n == 0, "gen ending with end_of_msg needs nothing");
        idv_free(&c);
        idv_free(&gen);
        idv_free(&prompt);
    }
    /* thinking off, cut right after the content text: close(response) close(message) end */
    idv prompt;
    idv gen = gen_of(&u, 1, &plain, 0, &prompt);
    idv text = {0};
    idv_text(&text, "Hi there.");
    idv c = close_turn(&gen, text.n, 0);
    idv tail = {0};
    idv_cat(&tail, gen.p + text.n, gen.n - text.n);
    CHECK(idv_eq(&c, &tail), "closer after bare text");
    /* and then the next user turn: prompt + gen + close + append(user) == render(all) */
    ms_chat_msg conv[3] = {u, plain, {.role = MS_CHAT_USER, .content = "more"}};
    ms_chat_opts gp = opts(0, 1);
    idv whole = prompt;
    idv_cat(&whole, gen.p, text.n);
    idv_cat(&whole, c.p, c.n);
    idv nxt = render(&conv[2], 1, &gp, 1);
    idv_cat(&whole, nxt.p, nxt.n);
    idv ref = render(conv, 3, &gp, 0);
    CHECK(idv_eq(&whole, &ref), "session ids after a closed turn == render of the whole conversation");
    idv_free(&nxt);
    idv_free(&ref);
    idv_free(&c);
    idv_free(&tail);
    /* thinking on, cut inside think: close(think), empty response, close(message), end */
    idv g2 = {0};
    idv_text(&g2, "hmm");
    c = close_turn(&g2, g2.n, 1);
    idv want = {0};
    idv_push(&want, ID_CLOSE); idv_text(&want, "think"); idv_push(&want, ID_SEP);
    idv_push(&want, ID_OPEN); idv_text(&want, "response"); idv_push(&want, ID_SEP);
    idv_push(&want, ID_CLOSE); idv_text(&want, "response"); idv_push(&want, ID_SEP);
    idv_push(&want, ID_CLOSE); idv_text(&want, "message"); idv_push(&want, ID_SEP); idv_push(&want, ID_END);
    CHECK(idv_eq(&c, &want), "closer inside think");
    idv_free(&c);
    idv_free(&want);
    /* half-written close tag: its <|sep|> first, then the rest */
    idv g3 = {0};
    idv_text(&g3, "ok");
    idv_push(&g3, ID_CLOSE);
    idv_text(&g3, "response");
    c = close_turn(&g3, g3.n, 0);
    CHECK(c.n > 0 && c.p[0] == ID_SEP && c.p[c.n - 1] == ID_END && count_id(&c, ID_CLOSE) == 1,
          "closer finishes a half-written close(response) then closes the message");
    idv_free(&c);
    idv_free(&g2);
    idv_free(&g3);
    idv_free(&whole);
    idv_free(&text);
    idv_free(&gen);
}

/* ---- parsing --------------------------------------------------------------------- */

static int json_same(const char *a, const char *b) {
    json_error_t je;
    json_t *x = json_loads(a, JSON_DECODE_ANY, &je), *y = json_loads(b, JSON_DECODE_ANY, &je);
    int eq = x && y && json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return eq;
}

static void test_parse_round_trip(void) {
    ms_chat_msg u = {.role = MS_CHAT_USER, .content = "hello"};
    ms_chat_call calls[2];
    ms_chat_msg a = assistant_msg(calls);
    for (int thinking = 0; thinking <= 1; thinking++) {
        ms_chat_msg b = a;
        if (!thinking) b.reasoning = NULL;
        idv prompt;
        idv gen = gen_of(&u, 1, &b, thinking, &prompt);
        ms_chat_reply r;
        ms_err err;
        ms_err_clear(&err);
        CHECK(ms_chat_parse(tok, gen.p, gen.n, thinking, &r, &err) == MS_OK, "parse: %s", err.msg);
        CHECK(r.flags == (MS_CHAT_CLOSED | MS_CHAT_ENDED), "clean parse flags: %#x", r.flags);
        if (thinking)
            CHECK(r.has_reasoning && strcmp(r.reasoning, "Need the weather.") == 0, "reasoning: '%s'", r.reasoning);
        else
            CHECK(!r.has_reasoning && r.reasoning_len == 0, "no reasoning when thinking off");
        CHECK(strcmp(r.content, "Checking.") == 0 && r.content_len == 9, "content: '%s'", r.content);
        CHECK(r.n_calls == 2, "two calls, got %lld", (long long)r.n_calls);
        if (r.n_calls == 2) {
            CHECK(strcmp(r.calls[0].name, "weather") == 0 && r.calls[0].index == 0 && r.calls[0].complete,
                  "call 0 header");
            CHECK(json_same(r.calls[0].arguments, WEATHER_ARGS), "call 0 args: %s", r.calls[0].arguments);
            /* compact, in generated order, float repr kept */
            CHECK(strcmp(r.calls[0].arguments, "{\"city\":\"Paris <|open|>\",\"days\":3,\"metric\":true,"
                  "\"extra\":null,\"tags\":[\"a\",1.5],\"opts\":{\"z\":1,\"a\":0.1},\"q\":\"say \\\"hi\\\"\\n\"}") == 0,
                  "call 0 args text: %s", r.calls[0].arguments);
            CHECK(strcmp(r.calls[1].name, "search") == 0 && r.calls[1].index == 1, "call 1 header");
            CHECK(strcmp(r.calls[1].arguments, BAD_ARGS) == 0, "call 1 raw args: %s", r.calls[1].arguments);
        }
        ms_chat_reply_free(&r);

        /* streaming: feed one id at a time; content only grows, final equals one-shot */
        ms_chat_parser *p;
        ms_err_clear(&err);
        CHECK(ms_chat_parser_new(tok, thinking, &p, &err) == MS_OK, "parser_new");
        size_t last_c = 0, last_r = 0;
        int grew_ok = 1;
        for (int64_t i = 0; i < gen.n; i++) {
            ms_chat_parser_feed(p, &gen.p[i], 1, &err);
            const ms_chat_reply *pr = ms_chat_parser_reply(p);
            if (pr->content_len < last_c || pr->reasoning_len < last_r) grew_ok = 0;
            last_c = pr->content_len;
            last_r = pr->reasoning_len;
        }
        ms_chat_parser_finish(p, &err);
        const ms_chat_reply *pr = ms_chat_parser_reply(p);
        CHECK(grew_ok && strcmp(pr->content, "Checking.") == 0 && pr->n_calls == 2 && pr->flags == (MS_CHAT_CLOSED | MS_CHAT_ENDED),
              "streaming parse");
        ms_chat_parser_free(p);
        idv_free(&gen);
        idv_free(&prompt);
    }
}

static void test_parse_garbled(void) {
    ms_chat_msg u = {.role = MS_CHAT_USER, .content = "hello"};
    ms_chat_call calls[2];
    ms_chat_msg a = assistant_msg(calls);
    idv prompt;
    idv gen = gen_of(&u, 1, &a, 1, &prompt);
    ms_err err;
    /* every truncation parses; flags say truncated; what was complete is kept */
    int all_ok = 1, saw_partial_call = 0;
    for (int64_t n = 0; n < gen.n; n++) {
        ms_chat_reply r;
        ms_err_clear(&err);
        if (ms_chat_parse(tok, gen.p, n, 1, &r, &err) != MS_OK) all_ok = 0;
        if (n < gen.n - 1 && !(r.flags & MS_CHAT_TRUNCATED)) all_ok = 0;
        if (r.flags & MS_CHAT_GARBLED) all_ok = 0; /* a prefix of good output is not garbled */
        for (int64_t i = 0; i < r.n_calls; i++) {
            if (!r.calls[i].arguments) all_ok = 0;
            if (!r.calls[i].complete) saw_partial_call = 1;
            /* a cut call's arguments are valid JSON or (json form) a prefix of the raw text */
            if (i == 0 && r.calls[i].arguments) {
                json_error_t je;
                json_t *x = json_loads(r.calls[i].arguments, 0, &je);
                if (!json_is_object(x)) all_ok = 0;
                json_decref(x);
            }
        }
        ms_chat_reply_free(&r);
    }
    CHECK(all_ok && saw_partial_call, "all truncations parse and report truncation");

    /* missing close(response) and close(call): tools opens inside response */
    idv g = {0};
    idv_text(&g, "r");
    idv_push(&g, ID_CLOSE); idv_text(&g, "think"); idv_push(&g, ID_SEP);
    idv_push(&g, ID_OPEN); idv_text(&g, "response"); idv_push(&g, ID_SEP);
    idv_text(&g, "text");
    idv_push(&g, ID_OPEN); idv_text(&g, "tools"); idv_push(&g, ID_SEP);
    idv_push(&g, ID_OPEN); idv_text(&g, "call tool=\"f\" index=\"0\""); idv_push(&g, ID_SEP);
    idv_push(&g, ID_OPEN); idv_text(&g, "argument key=\"n\" type=\"number\""); idv_push(&g, ID_SEP);
    idv_text(&g, "abc");
    idv_push(&g, ID_CLOSE); idv_text(&g, "argument"); idv_push(&g, ID_SEP);
    idv_push(&g, ID_OPEN); idv_text(&g, "argument key=\"k\" type=\"number\""); idv_push(&g, ID_SEP);
    idv_text(&g, "7");
    idv_push(&g, ID_CLOSE); idv_text(&g, "tools"); idv_push(&g, ID_SEP);
    idv_push(&g, ID_CLOSE); idv_text(&g, "nonsense"); idv_push(&g, ID_SEP);
    idv_push(&g, ID_SEP);
    idv_push(&g, ID_END);
    idv_push(&g, ID_OPEN);
    ms_chat_reply r;
    ms_err_clear(&err);
    CHECK(ms_chat_parse(tok, g.p, g.n, 1, &r, &err) == MS_OK, "garbled parse");
    CHECK(strcmp(r.reasoning, "r") == 0 && strcmp(r.content, "text") == 0, "garbled: reasoning/content");
    CHECK(r.n_calls == 1 && strcmp(r.calls[0].name, "f") == 0 && r.calls[0].arguments &&
          strcmp(r.calls[0].arguments, "{\"n\":\"abc\",\"k\":7}") == 0,
          "garbled: call args (bad number kept as string): %s", r.n_calls ? r.calls[0].arguments : "");
    CHECK((r.flags & MS_CHAT_GARBLED) && (r.flags & MS_CHAT_ENDED) && (r.flags & MS_CHAT_TRUNCATED) &&
          !(r.flags & MS_CHAT_CLOSED), "garbled flags %#x", r.flags);
    ms_chat_reply_free(&r);

    /* random ids, specials included: never crashes, output strings terminated */
    uint64_t s = 0x9E3779B97F4A7C15ull;
    int ok = 1;
    for (int trial = 0; trial < 300; trial++) {
        idv x = {0};
        int n = (int)(s % 60);
        for (int i = 0; i < n; i++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            int32_t id = (s & 3) ? (int32_t)(N_RANKS + (s >> 8) % 6) : (int32_t)((s >> 8) % (N_VOCAB + 3)) - 1;
            if ((s & 7) == 5) { idv_text(&x, (s & 8) ? "call tool=\"a\"" : "argument key=\"q\" type=\"string\""); continue; }
            idv_push(&x, id);
        }
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        ms_err_clear(&err);
        if (ms_chat_parse(tok, x.p, x.n, (int)(s & 1), &r, &err) != MS_OK) ok = 0;
        if (!r.content || !r.reasoning || strlen(r.content) > r.content_len) ok = 0;
        for (int64_t i = 0; i < r.n_calls; i++)
            if (!r.calls[i].name || !r.calls[i].arguments) ok = 0;
        ms_chat_reply_free(&r);
        idv c = {0};
        if (ms_chat_close_turn(tok, x.p, x.n, (int)(s & 1), &c.p, &c.n, &c.cap, &err) != MS_OK) ok = 0;
        /* closing a random turn then parsing it all never leaves markup open, unless it had ended */
        idv_cat(&x, c.p, c.n);
        if (ms_chat_parse(tok, x.p, x.n, (int)(s & 1), &r, &err) != MS_OK) ok = 0;
        if (!(r.flags & MS_CHAT_ENDED)) ok = 0;
        ms_chat_reply_free(&r);
        idv_free(&c);
        idv_free(&x);
    }
    CHECK(ok, "random ids parse and close without failure");
    idv_free(&g);
    idv_free(&gen);
    idv_free(&prompt);
}

/* ---- errors --------------------------------------------------------------------- */

static void test_errors(void) {
    ms_chat_opts o = opts(0, 1);
    idv v = {0};
    idv_push(&v, 7);
    ms_err err;
    ms_chat_msg bad[3] = {
        {.role = MS_CHAT_TOOL, .content = "x"},                             /* no tool name */
        {.role = MS_CHAT_USER, .content = "x", .reasoning = "r"},           /* reasoning on user */
        {.role = (ms_chat_role)9, .content = "x"},                          /* bad role */
    };
    for (int i = 0; i < 3; i++) {
        ms_err_clear(&err);
        ms_status st = ms_chat_render(tok, &bad[i], 1, &o, &v.p, &v.n, &v.cap, &err);
        CHECK(st == MS_E_USAGE && v.n == 1 && strstr(err.msg, "message 0") != NULL,
              "bad message %d refused, ids untouched: %d %s", i, (int)st, err.msg);
    }
    ms_chat_msg m = {.role = MS_CHAT_USER, .content = "x"};
    const char *bad_tools[] = {"{\"name\":\"f\"}", "[1]", "[{"};
    for (int i = 0; i < 3; i++) {
        o.tools_json = bad_tools[i];
        ms_err_clear(&err);
        ms_status st = ms_chat_render(tok, &m, 1, &o, &v.p, &v.n, &v.cap, &err);
        CHECK(st == MS_E_USAGE && v.n == 1 && strstr(err.msg, "tools") != NULL, "bad tools %d: %s", i, err.msg);
    }
    ms_tok *plain = make_tok(0);
    o.tools_json = NULL;
    ms_err_clear(&err);
    CHECK(plain && ms_chat_render(plain, &m, 1, &o, &v.p, &v.n, &v.cap, &err) == MS_E_MODEL && v.n == 1 &&
          strstr(err.msg, "<|open|>") != NULL, "tokenizer without specials: %s", err.msg);
    ms_chat_reply r;
    ms_err_clear(&err);
    CHECK(ms_chat_parse(plain, v.p, v.n, 0, &r, &err) == MS_E_MODEL, "parser needs specials");
    ms_tok_free(plain);
    idv_free(&v);
}

int main(void) {
    tok = make_tok(1);
    if (!tok) {
        CHECK(0, "test tokenizer did not load");
        return CHECK_DONE("test_chat");
    }
    ID_EOS = ms_tok_special_id(tok, "[EOS]");
    ID_END = ms_tok_special_id(tok, "<|end_of_msg|>");
    ID_OPEN = ms_tok_special_id(tok, "<|open|>");
    ID_CLOSE = ms_tok_special_id(tok, "<|close|>");
    ID_SEP = ms_tok_special_id(tok, "<|sep|>");
    CHECK(ID_END == N_RANKS + 2 && ID_OPEN == N_RANKS + 3 && ID_CLOSE == N_RANKS + 4 && ID_SEP == N_RANKS + 5,
          "special ids as configured");
    test_spec_example();
    test_user_spells_special();
    test_system_and_escaping();
    test_thinking_and_effort();
    test_assistant_calls();
    test_tool_declare();
    test_json_writer();
    test_multi_turn();
    test_close_turn();
    test_parse_round_trip();
    test_parse_garbled();
    test_errors();
    ms_tok_free(tok);
    return CHECK_DONE("test_chat");
}
