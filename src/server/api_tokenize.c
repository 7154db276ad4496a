/* server/api_tokenize.c - POST /tokenize and /detokenize (also under /v1/):
 * a prompt's ids without generating anything.
 *
 * Owns: validating those two bodies and producing their ids / text (the
 *   JSON answers are api_out.c's).
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
    *body = srv_api_tokenized(s, j->prompt, j->n_prompt);
    srv_job_unref(j);
    return *body ? 0 : srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

int srv_api_tokenize(srv *s, const json_t *req, char **body, srv_err *e) {
    *body = NULL;
    if (srv_api_check_model(s, req, 0, e) < 0) return -1;
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
    *body = srv_api_tokenized(s, ids, n);
    free(ids);
    return *body ? 0 : srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

int srv_api_detokenize(srv *s, const json_t *req, char **body, srv_err *e) {
    *body = NULL;
    if (srv_api_check_model(s, req, 0, e) < 0) return -1;
    const json_t *a = json_object_get(req, "tokens");
    if (!a) return srv_err_set(e, 400, INVALID, "tokens", "missing_required_parameter", "'tokens' is required");
    if (!json_is_array(a)) return srv_err_set(e, 400, INVALID, "tokens", "invalid_type", "'tokens' must be an array of token ids");
    int32_t *ids = NULL;
    int64_t n = 0;
    if (srv_api_ids(s, a, "tokens", &ids, &n, e) < 0) { free(ids); return -1; }
    char *text = NULL;
    size_t len = 0;
    const ms_status st = n > 0 ? ms_detokenize(s->e, ids, n, &text, &len) : MS_OK;
    free(ids);
    if (st != MS_OK) return srv_err_set(e, 500, "server_error", NULL, NULL, "cannot decode the tokens");
    *body = srv_api_detokenized(text, len);
    free(text);
    return *body ? 0 : srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}
