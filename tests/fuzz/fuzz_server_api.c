/* tests/fuzz/fuzz_server_api.c - libFuzzer target: the server's request
 * parsing (POST /v1/chat/completions, /v1/completions, /v1/tokenize and
 * /v1/detokenize bodies), on a K3 and on a gpt-oss model.
 *
 * Owns: fuzzing srv_api_chat, srv_api_completion, srv_api_tokenize and
 *   srv_api_detokenize (server/srv.h) the way
 *   server/http.c calls them: the body parsed by jansson (flags 0, top level
 *   an object), then validated and rendered to prompt ids; on the gpt-oss
 *   model also the reply's constraint (server/harmony.c) those calls build.
 * Idea: input byte 0 selects the model and the route: 'P' /v1/completions on
 *   K3, 'H' chat and 'Q' /v1/completions on gpt-oss, 'T' /tokenize on K3, 'U'
 *   on gpt-oss, 'D' /detokenize on K3, anything else chat on K3; the rest is
 *   the body. One server object per model is set up once, as
 *   `moestream serve` does, around a real engine on a tiny model:
 *   MS_FUZZ_MODEL (default build-fuzz/model, made by fuzz.mk with
 *   tools/msgen.py --preset a) plus the fixture tokenizer (fuzz_fixture.h),
 *   written into that directory when it has none; MS_FUZZ_OSS_MODEL (default
 *   build-fuzz/oss_model, tools/ossgen.py --preset oa, its own tokenizer).
 *   max_context is 1024 so context limits are reachable.
 *   Properties:
 *     - accepted: 1 <= n_prompt, every prompt and forced id in [0, n_vocab),
 *       1 <= max_tokens <= --max-tokens, n_prompt + max_tokens <= context;
 *     - accepted with a gpt-oss constraint (response_format, tool_choice): a
 *       walk of up to 64 ids through it, as the worker's picker takes them
 *       (logits from the input's hash plus the request's logit_bias, the
 *       request's sampler) always has an id to take, and every call the
 *       parser presents from the walk (complete or not, but its arguments
 *       open) names one of the request's tools; under tool_choice "auto",
 *       until the walk takes an id whose bytes hold '=' (no call can be open
 *       before: the parser's "to=") no id is forced and only ids holding '='
 *       are masked;
 *     - refused: HTTP status 400..500, a message, and an error body that is a
 *       JSON object {"error": {"message": string, ...}}.
 * Does not: run the model or HTTP (tests/server/ does), fuzz the worker.
 */
#include "server/srv.h"
#include "fuzz_fixture.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define FZ_CONTEXT 1024

static srv g_srv, g_oss;

static void put_file(const char *dir, const char *name, const char *text, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, n, f) != n || fclose(f) != 0) fz_fail("cannot write %s", path);
}

/* s around the model in dir, as `moestream serve` sets it up. */
static void open_server(srv *s, const char *dir) {
    srv_opts *o = &s->o;
    o->c.model_dir = dir;
    o->c.max_context = FZ_CONTEXT;
    o->c.parallel = 1;
    o->model_name = "fuzz-model";
    o->host = "127.0.0.1";
    o->max_body = 4 << 20;
    o->max_header = 16 << 10;
    o->max_messages = 1024;
    o->max_tokens = 4096;
    o->default_max_tokens = 1024;
    o->max_queue = 64;
    o->max_connections = 128;
    o->prefill_chunk = 256;
    ms_engine_params ep = ms_engine_default_params();
    ep.model_dir = dir;
    ep.n_threads = 1;
    ep.max_context = FZ_CONTEXT;
    char errbuf[512];
    if (ms_engine_open(&ep, &s->e, errbuf, sizeof errbuf) != MS_OK)
        fz_fail("cannot open the model %s: %s (set MS_FUZZ_MODEL / MS_FUZZ_OSS_MODEL)", dir, errbuf);
    if (!ms_engine_has_tokenizer(s->e)) fz_fail("%s: no tokenizer", dir);
    ms_engine_info(s->e, &s->info);
    int32_t cand[8] = { (int32_t)s->info.eos_id, ms_special_id(s->e, "<|end_of_msg|>"), ms_special_id(s->e, "[EOS]") };
    int n_cand = 3 + ms_stop_ids(s->e, cand + 3, 5);
    for (int i = 0; i < n_cand && s->n_stop_ids < 8; i++) {
        int dup = cand[i] < 0 || cand[i] >= s->info.n_vocab;
        for (int k = 0; k < s->n_stop_ids; k++) dup |= s->stop_ids[k] == cand[i];
        if (!dup) s->stop_ids[s->n_stop_ids++] = cand[i];
    }
    s->id_open = ms_special_id(s->e, "<|open|>");
    s->id_close = ms_special_id(s->e, "<|close|>");
    s->id_sep = ms_special_id(s->e, "<|sep|>");
    s->started = 1;
    s->id_salt = 0x1234;
    pthread_mutex_init(&s->qmu, NULL);
    pthread_cond_init(&s->qcv, NULL);
    atomic_init(&s->draining, 0);
    atomic_init(&s->active, 0);
    atomic_init(&s->next_id, 1);
    atomic_init(&s->n_requests, 0);
    atomic_init(&s->n_errors, 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *dir = getenv("MS_FUZZ_MODEL");
    if (!dir || !dir[0]) dir = "build-fuzz/model";
    char path[1024];
    struct stat sb;
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    if (stat(path, &sb) != 0) {
        size_t n = 0;
        char *ranks = fz_ranks_text(&n);
        char *cfg = fz_config_json(256 + FZ_MERGES);
        if (!ranks || !cfg) fz_fail("out of memory");
        put_file(dir, "tokenizer_config.json", cfg, strlen(cfg));
        put_file(dir, "tiktoken.model", ranks, n);
        free(ranks);
        free(cfg);
    }
    open_server(&g_srv, dir);
    const char *oss = getenv("MS_FUZZ_OSS_MODEL");
    open_server(&g_oss, oss && oss[0] ? oss : "build-fuzz/oss_model");
    if (strcmp(ms_chat_format_name(g_oss.e), "harmony") != 0) fz_fail("MS_FUZZ_OSS_MODEL is not a gpt-oss model");
    return 0;
}

static void check_ids(const char *what, const int32_t *ids, int64_t n, int64_t n_vocab) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) fz_fail("%s[%lld] = %d outside the vocabulary", what, (long long)i, ids[i]);
}

/* 1 when name is the name of one of req's tools. */
static int is_tool(const json_t *req, const char *name) {
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(req, "tools"), i, t) {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (n && !strcmp(n, name)) return 1;
    }
    return 0;
}

/* 1 when id's bytes hold '=' (only such a token can write a header's "to="). */
static int holds_eq(srv *s, int32_t id) {
    const char *b;
    const int64_t len = ms_token_bytes(s->e, id, &b);
    return len > 0 && memchr(b, '=', (size_t)len) != NULL;
}

/* tool_choice "auto" without response_format: the constraint of harmony.c's second half. */
static int is_auto(const srv_job *j, const json_t *req) {
    const json_t *tc = json_object_get(req, "tool_choice");
    return !j->json_mode && (!tc || (json_is_string(tc) && !strcmp(json_string_value(tc), "auto")));
}

/* gpt-oss: up to 64 ids through j's constraint, as the worker's picker takes
 * them; the logits come from the input's hash (xorshift), the request's
 * sampler adds its logit_bias and the body's grammar. Under "auto", until an
 * id holding '=' is taken no call can be open: nothing is forced and only
 * ids holding '=' may be masked. */
static void walk_constraint(srv *s, srv_job *j, const json_t *req, const uint8_t *data, size_t size) {
    const int64_t V = s->info.n_vocab;
    char msg[256];
    ms_sampler *smp = ms_sampler_open(&j->sp, V, msg, sizeof msg);
    if (!smp) return;                   /* the worker answers 400 then */
    float *lg = malloc((size_t)V * sizeof *lg);
    int32_t ids[64];
    int64_t n = 0;
    srv_hcon hc;
    if (!lg || srv_hcon_init(&hc, s, j->hspec, smp) != 0) fz_fail("out of memory");
    int free_run = is_auto(j, req);         /* no '=' taken yet under "auto" */
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++) x = (x ^ data[i]) * 1099511628211ull;
    while (n < 64) {
        for (int64_t v = 0; v < V; v++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            lg[v] = (float)(x >> 40) * (8.0f / 16777216.0f);
        }
        int32_t id = -1;
        const float *m = srv_hcon_logits(&hc, lg, &id);
        for (int64_t v = 0; free_run && v < V; v++)
            if ((m[v] != lg[v] && !holds_eq(s, (int32_t)v)) || id >= 0)
                fz_fail("\"auto\" masks id %lld (or forces %d) before a call can open", (long long)v, id);
        if (id < 0) {
            int any = 0;
            for (int64_t v = 0; v < V && !any; v++) any = m[v] > -INFINITY;
            if (!any) fz_fail("the constraint leaves no id after %lld ids", (long long)n);
            id = ms_sampler_next(smp, m, ids, n);
        }
        if (id < 0 || id >= V) fz_fail("the walk took id %d", id);
        if (srv_hcon_observe(&hc, id) != 0) break;      /* a grammar that cannot open: the worker fails the job */
        ids[n++] = id;
        if (holds_eq(s, id)) free_run = 0;
        if (srv_is_stop_id(s, id)) break;
    }
    ms_reply r;
    if (ms_chat_parse_reply(s->e, ids, n, j->thinking, &r) != MS_OK) fz_fail("cannot parse the walk");
    for (int64_t i = 0; i < r.n_tool_calls; i++)
        if (!is_tool(req, r.tool_calls[i].name)) fz_fail("the walk presents a call of '%s', not a tool", r.tool_calls[i].name);
    ms_reply_free(&r);
    srv_hcon_free(&hc);
    ms_sampler_close(smp);
    free(lg);
}

/* A refusal: -1, a 4xx / 500 status, a message, an OpenAI error object. */
static void check_refusal(int rc, const srv_err *e) {
    if (rc != -1 || e->status < 400 || e->status > 500 || !e->msg[0])
        fz_fail("refused with rc %d, status %d, message '%s'", rc, e->status, e->msg);
    char *body = srv_err_body(e);
    if (!body) fz_fail("no error body");
    json_error_t je;
    json_t *b = json_loads(body, 0, &je);
    json_t *eo = json_is_object(b) ? json_object_get(b, "error") : NULL;
    if (!json_is_object(eo) || !json_is_string(json_object_get(eo, "message")))
        fz_fail("error body is not an OpenAI error object: %s", body);
    json_decref(b);
    free(body);
}

/* /tokenize ('T' K3, 'U' gpt-oss) and /detokenize ('D'): an answer is
 * {"count" = the number of "tokens", each an id of the vocabulary,
 * "max_model_len"} or {"prompt" = "content", a string}. */
static void tokenize_route(srv *s, const json_t *req, int detok) {
    srv_err e;
    memset(&e, 0, sizeof e);
    char *body = NULL;
    const int rc = detok ? srv_api_detokenize(s, req, &body, &e) : srv_api_tokenize(s, req, &body, &e);
    if (rc != 0) {
        if (body) fz_fail("refused with a body");
        check_refusal(rc, &e);
        return;
    }
    json_error_t je;
    json_t *b = body ? json_loads(body, JSON_ALLOW_NUL, &je) : NULL;    /* ids may decode to NUL */
    if (!json_is_object(b)) fz_fail("answer is not a JSON object: %s", body ? body : "(none)");
    if (detok) {
        const json_t *p = json_object_get(b, "prompt"), *c = json_object_get(b, "content");
        if (!json_is_string(p) || !json_equal((json_t *)p, (json_t *)c)) fz_fail("detokenize answered %s", body);
    } else {
        const json_t *t = json_object_get(b, "tokens");
        if (!json_is_array(t) || json_integer_value(json_object_get(b, "count")) != (json_int_t)json_array_size(t) ||
            json_integer_value(json_object_get(b, "max_model_len")) != s->info.max_context)
            fz_fail("tokenize answered %.300s", body);
        for (size_t i = 0; i < json_array_size(t); i++) {
            const json_int_t id = json_integer_value(json_array_get(t, i));
            if (!json_is_integer(json_array_get(t, i)) || id < 0 || id >= s->info.n_vocab)
                fz_fail("tokenize answered the id %lld", (long long)id);
        }
    }
    json_decref(b);
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int oss = data[0] == 'H' || data[0] == 'Q' || data[0] == 'U';
    srv *s = oss ? &g_oss : &g_srv;
    int completion = data[0] == 'P' || data[0] == 'Q';
    json_error_t je;
    json_t *req = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(req)) {
        json_decref(req);
        return 0;
    }
    if (data[0] == 'T' || data[0] == 'U' || data[0] == 'D') {
        tokenize_route(s, req, data[0] == 'D');
        json_decref(req);
        return 0;
    }
    srv_job *j = srv_job_new();
    if (!j) fz_fail("out of memory");
    srv_err e;
    memset(&e, 0, sizeof e);
    int rc = completion ? srv_api_completion(s, req, j, &e) : srv_api_chat(s, req, j, &e);
    if (rc == 0) {
        if (j->n_prompt < 1 || !j->prompt) fz_fail("accepted with %lld prompt ids", (long long)j->n_prompt);
        check_ids("prompt", j->prompt, j->n_prompt, s->info.n_vocab);
        check_ids("forced", j->forced, j->n_forced, s->info.n_vocab);
        if (j->max_tokens < 1 || j->max_tokens > s->o.max_tokens || j->n_prompt + j->max_tokens > s->info.max_context)
            fz_fail("accepted with max_tokens %lld, %lld prompt ids, context %lld", (long long)j->max_tokens,
                    (long long)j->n_prompt, (long long)s->info.max_context);
        if (!j->id[0]) fz_fail("accepted without a response id");
        if (j->hspec) walk_constraint(s, j, req, data, size);
    } else {
        check_refusal(rc, &e);
    }
    srv_job_unref(j);
    json_decref(req);
    return 0;
}
