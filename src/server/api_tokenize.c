/* server/api_tokenize.c - POST /tokenize and /detokenize (also under /v1/):
 * a prompt's ids without generating anything.
 *
 * Owns: validating those two bodies and producing their answers.
 *   /tokenize {"prompt": TEXT} (or llama.cpp's "content"): the ids
 *     /v1/completions feeds for that text. {"messages": [...], with any chat
 *     parameter (tools, tool_choice, reasoning_effort, thinking, ...)}: the ids
 *     /v1/chat/completions feeds as its prompt, built by the same code
 *     (srv_api_chat), so "count" is that request's usage.prompt_tokens. The
 *     answer is {"count", "max_model_len", "tokens"} (vLLM's shape; llama.cpp's
 *     clients read "tokens"), also for a prompt longer than the context: count
 *     > max_model_len says it would be refused.
 *   /detokenize {"tokens": [ids]}: {"prompt": TEXT, "content": TEXT} (vLLM's
 *     and llama.cpp's key for the same text), invalid UTF-8 as U+FFFD.
 *   "model" may be left out; when given it must name the served model.
 * Runs on the HTTP thread: the tokenizer and the chat renderer are read-only;
 *   nothing is queued and no session is touched, so a client can count a
 *   prompt while the model is busy.
 */
#include "server/srv.h"

#include <stdlib.h>
#include <string.h>

static const char *const INVALID = "invalid_request_error";

static int model_ok(srv *s, const json_t *req, srv_err *e) {
    const json_t *m = json_object_get(req, "model");
    if (!m) return 0;
    if (!json_is_string(m)) return srv_err_set(e, 400, INVALID, "model", "invalid_type", "'model' must be a string");
    if (strcmp(json_string_value(m), s->o.model_name) != 0)
        return srv_err_set(e, 404, INVALID, "model", "model_not_found",
                           "the model '%.200s' does not exist; this server serves '%s'", json_string_value(m),
                           s->o.model_name);
    return 0;
}

static char *dump(json_t *o) {
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return t;
}

static char *tokenized(srv *s, const int32_t *ids, int64_t n) {
    json_t *a = json_array();
    for (int64_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(ids[i])) != 0) { json_decref(a); a = NULL; }
    if (!a) return NULL;
    return dump(json_pack("{s:I, s:I, s:o}", "count", (json_int_t)n, "max_model_len", (json_int_t)s->info.max_context,
                          "tokens", a));
}

/* The chat prompt's ids, as /v1/chat/completions builds them: the body
 * (with the model named when it was left out) through srv_api_chat on a job
 * that is never queued. A prompt past the context is counted all the same. */
static int chat_ids(srv *s, const json_t *req, char **body, srv_err *e) {
    json_t *r = json_copy((json_t *)req);
    if (!r || (!json_object_get(r, "model") && json_object_set_new(r, "model", json_string(s->o.model_name)) != 0)) {
        json_decref(r);
        return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    srv_job *j = srv_job_new();
    if (!j) { json_decref(r); return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory"); }
    srv_err ce;
    memset(&ce, 0, sizeof ce);
    const int rc = srv_api_chat(s, r, j, &ce);
    json_decref(r);
    const int too_long = rc < 0 && ce.code && !strcmp(ce.code, "context_length_exceeded") && j->n_prompt > 0;
    if (rc < 0 && !too_long) {
        *e = ce;
        srv_job_unref(j);
        return -1;
    }
    *body = tokenized(s, j->prompt, j->n_prompt);
    srv_job_unref(j);
    return *body ? 0 : srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

int srv_api_tokenize(srv *s, const json_t *req, char **body, srv_err *e) {
    *body = NULL;
    if (model_ok(s, req, e) < 0) return -1;
    const json_t *msgs = json_object_get(req, "messages");
    const char *key = json_object_get(req, "prompt") ? "prompt" : "content";
    const json_t *p = json_object_get(req, key);
    if (msgs && p)
        return srv_err_set(e, 400, INVALID, key, "invalid_value", "give either '%s' (a text) or 'messages' (a chat), not both",
                           key);
    if (msgs) return chat_ids(s, req, body, e);
    if (!p)
        return srv_err_set(e, 400, INVALID, "prompt", "missing_required_parameter",
                           "'prompt' (a text) or 'messages' (a chat) is required");
    if (!json_is_string(p)) return srv_err_set(e, 400, INVALID, key, "invalid_type", "'%s' must be a string", key);
    int32_t *ids = NULL;
    int64_t n = 0;
    if (json_string_length(p) > 0 && ms_tokenize(s->e, json_string_value(p), json_string_length(p), &ids, &n) != MS_OK)
        return srv_err_set(e, 500, "server_error", NULL, NULL, "cannot tokenize the prompt");
    *body = tokenized(s, ids, n);
    free(ids);
    return *body ? 0 : srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

int srv_api_detokenize(srv *s, const json_t *req, char **body, srv_err *e) {
    *body = NULL;
    if (model_ok(s, req, e) < 0) return -1;
    const json_t *a = json_object_get(req, "tokens");
    if (!a) return srv_err_set(e, 400, INVALID, "tokens", "missing_required_parameter", "'tokens' is required");
    if (!json_is_array(a)) return srv_err_set(e, 400, INVALID, "tokens", "invalid_type", "'tokens' must be an array of token ids");
    const size_t n = json_array_size(a);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= s->info.n_vocab) {
            free(ids);
            return srv_err_set(e, 400, INVALID, "tokens", "invalid_value", "tokens[%zu] is not a token id in [0, %lld)", i,
                               (long long)s->info.n_vocab);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    char *text = NULL;
    size_t len = 0;
    const ms_status st = n > 0 ? ms_detokenize(s->e, ids, (int64_t)n, &text, &len) : MS_OK;
    free(ids);
    if (st != MS_OK) return srv_err_set(e, 500, "server_error", NULL, NULL, "cannot decode the tokens");
    srv_buf clean;
    memset(&clean, 0, sizeof clean);
    const int bad = srv_utf8_clean(&clean, text ? text : "", len) != 0;
    free(text);
    json_t *t = bad ? NULL : json_stringn(clean.p ? clean.p : "", clean.n);
    srv_buf_free(&clean);
    if (t) *body = dump(json_pack("{s:O, s:o}", "prompt", t, "content", t));
    return *body ? 0 : srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}
