/* tests/fuzz/fuzz_server_api.c - libFuzzer target: the server's request
 * parsing (POST /v1/chat/completions and /v1/completions bodies).
 *
 * Owns: fuzzing srv_api_chat and srv_api_completion (server/srv.h) the way
 *   server/http.c calls them: the body parsed by jansson (flags 0, top level
 *   an object), then validated and rendered to prompt ids.
 * Idea: input byte 0 'P' selects /v1/completions, anything else chat; the rest
 *   is the body. The server object is set up once, as `moestream serve` does,
 *   around a real engine on a tiny model: MS_FUZZ_MODEL (default
 *   build-fuzz/model, made by fuzz.mk with tools/msgen.py --preset a) plus the
 *   fixture tokenizer (fuzz_fixture.h), written into that directory when it
 *   has none. max_context is 1024 so context limits are reachable.
 *   Properties:
 *     - accepted: 1 <= n_prompt, every prompt and forced id in [0, n_vocab),
 *       1 <= max_tokens <= --max-tokens, n_prompt + max_tokens <= context;
 *     - refused: HTTP status 400..500, a message, and an error body that is a
 *       JSON object {"error": {"message": string, ...}}.
 * Does not: run generation or HTTP (tests/server/ does), fuzz the worker.
 */
#include "server/srv.h"
#include "fuzz_fixture.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define FZ_CONTEXT 1024

static srv g_srv;

static void put_file(const char *dir, const char *name, const char *text, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, n, f) != n || fclose(f) != 0) fz_fail("cannot write %s", path);
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
    srv *s = &g_srv;
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
        fz_fail("cannot open the model %s: %s (set MS_FUZZ_MODEL)", dir, errbuf);
    if (!ms_engine_has_tokenizer(s->e)) fz_fail("%s: no tokenizer", dir);
    ms_engine_info(s->e, &s->info);
    const int32_t cand[3] = { (int32_t)s->info.eos_id, ms_special_id(s->e, "<|end_of_msg|>"),
                              ms_special_id(s->e, "[EOS]") };
    for (int i = 0; i < 3; i++) {
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
    return 0;
}

static void check_ids(const char *what, const int32_t *ids, int64_t n, int64_t n_vocab) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) fz_fail("%s[%lld] = %d outside the vocabulary", what, (long long)i, ids[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    srv *s = &g_srv;
    int completion = data[0] == 'P';
    json_error_t je;
    json_t *req = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(req)) {
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
    } else {
        if (rc != -1 || e.status < 400 || e.status > 500 || !e.msg[0])
            fz_fail("refused with rc %d, status %d, message '%s'", rc, e.status, e.msg);
        char *body = srv_err_body(&e);
        if (!body) fz_fail("no error body");
        json_t *b = json_loads(body, 0, &je);
        json_t *eo = json_is_object(b) ? json_object_get(b, "error") : NULL;
        if (!json_is_object(eo) || !json_is_string(json_object_get(eo, "message")))
            fz_fail("error body is not an OpenAI error object: %s", body);
        json_decref(b);
        free(body);
    }
    srv_job_unref(j);
    json_decref(req);
    return 0;
}
