/* tests/test_schema.c - the byte-level JSON matcher (sample/json_schema.h).
 *
 * Each supported keyword has documents it must accept and documents it must
 * reject; each unsupported keyword is refused by name. A seeded random walk
 * over the allowed bytes checks the no-dead-end invariant and that every
 * completed document parses (jansson) and is accepted whole again. */
#include "check.h"
#include "moestream.h"
#include "sample/json_schema.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static ms_json_state st;   /* large: keep off the stack */

static int matches(const ms_json_schema *js, const char *doc) {
    ms_json_start(js, &st);
    if (!ms_json_advance(js, &st, (const uint8_t *)doc, strlen(doc))) return 0;
    return ms_json_can_end(js, &st);
}

/* 1 if doc is a viable prefix (every byte accepted). */
static int prefix_ok(const ms_json_schema *js, const char *doc) {
    ms_json_start(js, &st);
    return ms_json_advance(js, &st, (const uint8_t *)doc, strlen(doc));
}

static ms_json_schema *comp(const char *schema) {
    char err[256];
    ms_json_schema *js = ms_json_schema_compile(schema, schema ? strlen(schema) : 0, err, sizeof err);
    CHECK(js != NULL, "schema %s: %s", schema, err);
    return js;
}

/* accepts: NULL-terminated list; rejects: NULL-terminated list. */
static void expect(const char *schema, const char *const *yes, const char *const *no) {
    ms_json_schema *js = comp(schema);
    if (!js) return;
    for (int i = 0; yes[i]; i++) CHECK(matches(js, yes[i]), "schema %s should accept %s", schema, yes[i]);
    for (int i = 0; no[i]; i++) CHECK(!matches(js, no[i]), "schema %s should reject %s", schema, no[i]);
    ms_json_schema_free(js);
}

static void refuse(const char *schema, const char *word) {
    char err[256];
    ms_json_schema *js = ms_json_schema_compile(schema, strlen(schema), err, sizeof err);
    CHECK(js == NULL && strstr(err, word), "schema %s should be refused naming %s (got %s)", schema, word,
          js ? "accepted" : err);
    ms_json_schema_free(js);
}

static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* Walk: pick allowed bytes from a small alphabet (plus any byte, rarely);
 * the end is taken as soon as it is allowed with probability 1/2. */
static void walk(const char *schema, uint64_t seed, int n_walks) {
    static const char alpha[] = "{}[]\":,-0123456789.eE+ \ntruefalsnxyzab\\u";
    ms_json_schema *js = comp(schema);
    if (!js) return;
    rng_state = seed;
    int n_done = 0;
    for (int w = 0; w < n_walks; w++) {
        char doc[1024];
        size_t n = 0;
        ms_json_start(js, &st);
        int dead = 0, done = 0;
        while (n < sizeof doc - 1) {
            if (ms_json_can_end(js, &st) && (rnd() & 1)) { done = 1; break; }
            uint8_t ok[256];
            int n_ok = 0;
            static ms_json_state tmp;
            for (int b = 1; b < 256; b++) {
                uint8_t byte = (uint8_t)b;
                if (ms_json_advance_to(js, &st, &byte, 1, &tmp)) ok[n_ok++] = byte;
            }
            if (n_ok == 0) { dead = !ms_json_can_end(js, &st); done = !dead; break; }
            /* prefer structural bytes so walks finish */
            uint8_t pick = ok[rnd() % (uint32_t)n_ok];
            for (int tries = 0; tries < 8; tries++) {
                uint8_t c = (uint8_t)alpha[rnd() % (sizeof alpha - 1)];
                if (memchr(ok, c, (size_t)n_ok)) { pick = c; break; }
            }
            doc[n++] = (char)pick;
            CHECK(ms_json_advance(js, &st, &pick, 1), "advance after allow");
        }
        doc[n] = 0;
        CHECK(!dead, "schema %s: dead end after %s", schema, doc);
        if (!done) continue;
        n_done++;
        json_error_t je;
        json_t *v = json_loadb(doc, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        CHECK(v != NULL, "schema %s: walk produced invalid JSON %s (%s)", schema, doc, je.text);
        json_decref(v);
        CHECK(matches(js, doc), "schema %s: walk document not accepted whole: %s", schema, doc);
    }
    CHECK(n_done > 0, "schema %s: no walk finished", schema);
    ms_json_schema_free(js);
}

#define L(...) (const char *const[]){__VA_ARGS__, NULL}

static void test_json_object(void) {
    expect(NULL, L("{}", " {\"a\":1}", "{\"a\":[1,2,{\"b\":null}],\"c\":\"x\\u00e9\\n\"}", "{\"k\":-0.5e+3}",
                   "{\"k\":true,\"l\":false}", "{ \"a\" : \"\xc3\xa9\" }\n"),
           L("", "[]", "1", "\"s\"", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{a:1}", "{\"a\":01}",
             "{\"a\":1.}", "{\"a\":tru}", "{\"a\":\"\x01\"}", "{\"a\":\"\\x\"}", "{\"a\":\"\xc0\xaf\"}",
             "{\"a\":\"\xed\xa0\x80\"}", "{}}", "{} x"));
    ms_json_schema *js = comp(NULL);
    /* whitespace is bounded, so a model cannot loop on spaces */
    CHECK(prefix_ok(js, "{    "), "4 spaces allowed");
    CHECK(!prefix_ok(js, "{     "), "5 spaces refused");
    CHECK(!prefix_ok(js, "{\"a\":1234567890123456789012345"), "numbers are bounded");
    CHECK(!prefix_ok(js, "{\"a\":1e123"), "exponents have at most 2 digits");
    CHECK(!prefix_ok(js, "{\"a\":-1234567890123456789"), "integer parts have at most 18 digits");
    CHECK(prefix_ok(js, "{\"a\":-12345678901234567.5e-1"), "a long number");
    CHECK(prefix_ok(js, "{\"a\":1"), "a prefix");
    CHECK(!ms_json_can_end(js, &st), "a prefix is not complete");
    ms_json_schema_free(js);
}

static void test_types(void) {
    expect("{\"type\":\"string\"}", L("\"\"", "\"abc\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\uABcd\""), L("1", "null", "\"a", "'a'"));
    expect("{\"type\":\"number\"}", L("0", "-1", "1.5", "1e9", "-0.0E-2", "123"), L("01", "+1", ".5", "1.", "1e", "-", "\"1\""));
    expect("{\"type\":\"integer\"}", L("0", "-12", "7"), L("1.0", "1e3", "-", "0.5"));
    expect("{\"type\":\"boolean\"}", L("true", "false"), L("null", "1", "True", "tru", "truex"));
    expect("{\"type\":\"null\"}", L("null", " null "), L("nul", "false", "nulll"));
    expect("{\"type\":[\"string\",\"null\"]}", L("\"x\"", "null"), L("1", "true"));
    expect("{}", L("1", "\"x\"", "[1,{}]", "null", "{\"a\":[]}"), L("", "x", "[1,]"));
}

static void test_objects(void) {
    const char *s = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
                    "\"n\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";
    expect(s, L("{\"name\":\"a\",\"age\":3}", "{\"age\":3,\"name\":\"a\"}", "{\"name\":\"a\",\"age\":3,\"n\":true}",
                "{ \"n\" : false , \"age\" : -1 , \"name\" : \"\" }"),
           L("{}", "{\"name\":\"a\"}", "{\"name\":\"a\",\"age\":3,\"x\":1}", "{\"name\":\"a\",\"age\":\"3\"}",
             "{\"name\":\"a\",\"name\":\"b\",\"age\":3}", "{\"nam\":\"a\",\"age\":3}", "{\"names\":\"a\",\"age\":3}",
             "{\"name\":\"a\",\"age\":3,}"));
    /* prefix names: "a" and "ab" */
    expect("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},\"ab\":{\"type\":\"null\"}},\"required\":[\"a\",\"ab\"]}",
           L("{\"a\":null,\"ab\":null}", "{\"ab\":null,\"a\":null}"), L("{\"a\":null}", "{\"abc\":null,\"a\":null}"));
    /* additionalProperties true / absent: still only the listed ones are generated */
    expect("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},\"additionalProperties\":true}",
           L("{}", "{\"x\":1}"), L("{\"y\":1}"));
    expect("{\"type\":\"object\",\"additionalProperties\":false}", L("{}"), L("{\"a\":1}"));
    expect("{\"type\":\"object\"}", L("{}", "{\"a\":1}"), L("[]"));
    /* nesting */
    expect("{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"array\","
           "\"items\":{\"type\":\"object\",\"properties\":{\"r\":{\"type\":\"integer\"}},\"required\":[\"r\"]}}},"
           "\"required\":[\"q\"]}},\"required\":[\"p\"]}",
           L("{\"p\":{\"q\":[]}}", "{\"p\":{\"q\":[{\"r\":1},{\"r\":2}]}}"),
           L("{\"p\":{\"q\":[{}]}}", "{\"p\":{\"q\":[{\"r\":1.5}]}}", "{\"p\":{}}"));
}

static void test_arrays_enums(void) {
    expect("{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", L("[]", "[1]", "[ 1 , 2 ,3 ]"),
           L("[1,]", "[,1]", "[\"a\"]", "[1.5]", "[", "{}"));
    expect("{\"type\":\"array\"}", L("[]", "[1,\"a\",null,[{}]]"), L("[1,]"));
    expect("{\"enum\":[\"red\",\"green\",1,10,null,true,{\"a\":[1]}]}",
           L("\"red\"", "\"green\"", "1", "10", "null", "true", "{\"a\":[1]}"),
           L("\"blue\"", "\"re\"", "100", "false", "{\"a\":[2]}", "{ \"a\":[1]}"));
    expect("{\"type\":\"string\",\"enum\":[\"a\\\"b\",\"\xc3\xa9\"]}", L("\"a\\\"b\"", "\"\xc3\xa9\""), L("\"ab\""));
    expect("{\"const\":\"fixed\"}", L("\"fixed\""), L("\"fixe\"", "\"fixed2\""));
}

static void test_anyof_refs(void) {
    expect("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"},{\"type\":\"object\",\"properties\":"
           "{\"k\":{\"type\":\"null\"}},\"required\":[\"k\"]}]}",
           L("1", "\"s\"", "{\"k\":null}"), L("1.5", "{}", "null"));
    /* anyOf whose branches share a prefix: decided only later */
    expect("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]},"
           "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}]}",
           L("{\"a\":\"x\"}", "{\"a\":5}"), L("{\"a\":null}"));
    const char *tree = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                       "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\",\"kids\"],"
                       "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";
    expect(tree, L("{\"v\":1,\"kids\":[]}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3,\"kids\":[]}]}]}"),
           L("{\"v\":1}", "{\"v\":1,\"kids\":[{}]}"));
    expect("{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}},"
           "\"required\":[\"next\"]}",
           L("{\"next\":null}", "{\"next\":{\"next\":null}}"), L("{\"next\":1}", "{}"));
    expect("{\"definitions\":{\"c\":{\"enum\":[\"x\",\"y\"]}},\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/c\"}}",
           L("[\"x\",\"y\"]"), L("[\"z\"]"));
}

static void test_refusals(void) {
    refuse("{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern'");
    refuse("{\"type\":\"string\",\"format\":\"date\"}", "'format'");
    refuse("{\"type\":\"number\",\"minimum\":1}", "'minimum'");
    refuse("{\"type\":\"array\",\"minItems\":1}", "'minItems'");
    refuse("{\"allOf\":[{}]}", "'allOf'");
    refuse("{\"oneOf\":[{}]}", "'oneOf'");
    refuse("{\"not\":{}}", "'not'");
    refuse("{\"type\":\"object\",\"patternProperties\":{}}", "'patternProperties'");
    refuse("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}", "'additionalProperties'");
    refuse("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":3}}}", "'maxLength'");
    refuse("{\"type\":\"date\"}", "'date'");
    refuse("{\"$ref\":\"http://x/y\"}", "'$ref'");
    refuse("{\"$ref\":\"#/$defs/missing\"}", "'$ref'");
    refuse("{\"$defs\":{\"a\":{}},\"$ref\":\"#/$defs/missing\"}", "names no definition");
    refuse("{\"enum\":[]}", "'enum'");
    refuse("{\"anyOf\":[]}", "'anyOf'");
    refuse("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "'required'");
    refuse("{\"type\":\"integer\",\"enum\":[\"a\"]}", "'enum'");
    refuse("{\"type\":\"object\",\"properties\":{\"a\":{\"$defs\":{}}}}", "'$defs'");
    refuse("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "'$ref'");
    refuse("{\"type\":", "not valid JSON");
    refuse("[1]", "must be an object");
}

static void test_walks(void) {
    const char *schemas[] = {
        NULL,
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"number\"},"
        "\"c\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}},\"required\":[\"a\",\"b\",\"c\"],"
        "\"additionalProperties\":false}",
        "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"number\"},{\"enum\":[\"x\",\"xy\",null]}]}",
        "{\"$defs\":{\"t\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"array\",\"items\":{\"$ref\":"
        "\"#/$defs/t\"}}},\"required\":[\"k\"]}},\"$ref\":\"#/$defs/t\"}",
        "{\"type\":[\"boolean\",\"null\",\"string\"]}",
    };
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++) walk(schemas[i], 1234 + i, 60);
}

/* The state is plain data: a copy advanced by the same bytes has the same bits. */
static void test_copy(void) {
    ms_json_schema *js = comp("{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"string\"}}]}");
    static ms_json_state a, b;
    ms_json_start(js, &a);
    ms_json_state_copy(&b, &a);
    const char *d = "[\"x\",\"y\"";
    for (const char *p = d; *p; p++) {
        CHECK(ms_json_advance(js, &a, (const uint8_t *)p, 1), "byte %c", *p);
    }
    CHECK(ms_json_advance(js, &b, (const uint8_t *)d, strlen(d)), "whole");
    CHECK(a.n == b.n && a.n == 1 && a.s[0].depth == b.s[0].depth &&
              !memcmp(a.s[0].f, b.s[0].f, (size_t)a.s[0].depth * sizeof a.s[0].f[0]), "same state bits");
    ms_json_schema_free(js);
}

/* ms_grammar_check compiles without a tokenizer; a caller's -inf logits (the
 * server's mask of a call's tag) are never drawn, even without a grammar on
 * the sampler. */
static void test_check_and_masked_draws(void) {
    char err[256];
    const char *good = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}";
    const char *bad = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"date\"}}}";
    CHECK(ms_grammar_check(good, strlen(good), err, sizeof err) == MS_OK, "check: %s", err);
    CHECK(ms_grammar_check(bad, strlen(bad), err, sizeof err) == MS_E_USAGE && strstr(err, "'format'"),
          "check names the keyword: %s", err);
    CHECK(ms_grammar_check(NULL, 0, err, sizeof err) == MS_OK, "check: any object");
    enum { V = 64 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = i == 5 || i == 40 ? -1.0f : -INFINITY;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        ms_sample_params p = ms_sample_default_params();
        p.temperature = 1.5f;
        p.top_k = (int32_t)(seed % 3) * 20;     /* 0 (off), 20, 40 */
        p.seed = seed;
        ms_sampler *smp = ms_sampler_open(&p, V, err, sizeof err);
        CHECK(smp != NULL, "sampler: %s", err);
        if (!smp) return;
        for (int k = 0; k < 8; k++) {
            int32_t id = ms_sampler_next(smp, logits, NULL, 0);
            CHECK(id == 5 || id == 40, "seed %llu drew masked id %d", (unsigned long long)seed, id);
        }
        ms_sampler_close(smp);
    }
}

int main(void) {
    test_json_object();
    test_types();
    test_objects();
    test_arrays_enums();
    test_anyof_refs();
    test_refusals();
    test_walks();
    test_copy();
    test_check_and_masked_draws();
    return CHECK_DONE("test_schema");
}
