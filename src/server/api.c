/* server/api.c - the OpenAI API surface: requests in, JSON out.
 *
 * Owns: validating /v1/chat/completions and /v1/completions bodies (types,
 *   ranges, limits, the model name), mapping OpenAI messages onto K3 chat
 *   messages and rendering them to prompt ids, forced tool choice. The JSON
 *   the server sends is api_out.c's; error objects are srv_err (util.c).
 *
 * Mapping (chat):
 *   role system | developer -> system; user; assistant (content,
 *   reasoning_content, tool_calls[].function {name, arguments}); tool
 *   (tool_call_id names a call of an earlier assistant message: its function
 *   name and its position in that message become the K3 tool name and index).
 *   content may be a string, null, or an array of {"type":"text"} parts.
 *   tools -> the K3 tool-declare message; thinking: "thinking" (bool, or
 *   {"type":"enabled"|"disabled"}), chat_template_kwargs.thinking /
 *   enable_thinking, "reasoning_effort" (none -> off; minimal, low -> low;
 *   medium, high -> high; max -> max; a gpt-oss model keeps medium, max ->
 *   high, and its effort whether thinking is on or off).
 * Forced tool choice: tool_choice {"function":{"name":X}} renders the start of
 *   an assistant message that calls X (empty think block when thinking is on,
 *   empty response, open tools, open call X index 0) and forces those ids as
 *   the first output; when X takes no parameters the whole call is forced
 *   and nothing is sampled. "required" forces up to the open tools tag and
 *   the <|open|> of the call's tag. "none" leaves the tools out of the
 *   prompt, and a call the model writes anyway is not presented. Forced
 *   ids count as completion tokens: max_tokens cuts them.
 *   A gpt-oss model (harmony) forces nothing here: harmony.c constrains its
 *   reply's headers and bodies token by token (response_format too; under
 *   "auto" only the calls the model opens).
 * Tools (toolcall.c): every tool's parameters schema is checked here (400
 *   naming a keyword outside the subset); the worker then constrains each
 *   call's tag and arguments with them.
 * Defaults (documented in docs/SERVER.md): temperature 1 and top_p 1 as in
 *   OpenAI's API (temperature 0 = greedy), a fresh random seed per request
 *   unless "seed" is given, max_tokens = the server default capped by what
 *   the context has left (completions: 16, as OpenAI).
 * Does not: touch the engine's session (only the read-only tokenizer), block.
 */
#include "server/srv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STOP 4
#define MAX_STOP_BYTES 256
#define MAX_TOOLS 128

static const char *const INVALID = "invalid_request_error";

/* ---- small validation helpers ---------------------------------------------- */

static int bad_type(srv_err *e, const char *param, const char *want) {
    return srv_err_set(e, 400, INVALID, param, "invalid_type", "'%s' must be %s", param, want);
}

/* A member that is absent or null counts as absent. */
static const json_t *member(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_bool(const json_t *req, const char *key, int *out, srv_err *e) {
    const json_t *v = member(req, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad_type(e, key, "a boolean");
    *out = json_is_true(v);
    return 1;
}

static int get_number(const json_t *req, const char *key, double lo, double hi, double *out, srv_err *e) {
    const json_t *v = member(req, key);
    if (!v) return 0;
    if (!json_is_number(v)) return bad_type(e, key, "a number");
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return srv_err_set(e, 400, INVALID, key, "invalid_value", "'%s' must be in [%g, %g], got %g", key, lo, hi, x);
    *out = x;
    return 1;
}

static int get_int(const json_t *req, const char *key, int64_t lo, int64_t hi, int64_t *out, srv_err *e) {
    const json_t *v = member(req, key);
    if (!v) return 0;
    if (!json_is_integer(v)) return bad_type(e, key, "an integer");
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return srv_err_set(e, 400, INVALID, key, "invalid_value", "'%s' must be in [%lld, %lld], got %lld",
                           key, (long long)lo, (long long)hi, (long long)x);
    *out = (int64_t)x;
    return 1;
}

int srv_api_check_model(srv *s, const json_t *req, int required, srv_err *e) {
    const json_t *m = json_object_get(req, "model");
    if (!m && !required) return 0;
    if (!m) return srv_err_set(e, 400, INVALID, "model", "missing_required_parameter",
                               "you must provide a model parameter ('%s')", s->o.model_name);
    if (!json_is_string(m)) return bad_type(e, "model", "a string");
    if (strcmp(json_string_value(m), s->o.model_name) != 0)
        return srv_err_set(e, 404, INVALID, "model", "model_not_found",
                           "the model '%.200s' does not exist; this server serves '%s'",
                           json_string_value(m), s->o.model_name);
    return 0;
}

static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void make_id(srv *s, srv_job *j, const char *prefix) {
    uint64_t n = atomic_fetch_add(&s->next_id, 1);
    snprintf(j->id, sizeof j->id, "%s%016llx", prefix, (unsigned long long)mix64(n ^ s->id_salt));
}

/* Sampling: OpenAI's defaults (temperature 1, top_p 1); 0 = greedy. */
static int sampling_params(const json_t *req, srv_job *j, srv_err *e) {
    static const struct { const char *key; double lo, hi; size_t off; } nums[] = {
        { "min_p", 0.0, 1.0, offsetof(ms_sample_params, min_p) },
        { "repetition_penalty", 0.01, 100.0, offsetof(ms_sample_params, repeat_penalty) },
        { "frequency_penalty", -2.0, 2.0, offsetof(ms_sample_params, frequency_penalty) },
        { "presence_penalty", -2.0, 2.0, offsetof(ms_sample_params, presence_penalty) },
    };
    double x;
    int64_t k;
    j->sp.temperature = 1.0f;
    int r = get_number(req, "temperature", 0.0, 2.0, &x, e);
    if (r < 0) return -1;
    if (r > 0) j->sp.temperature = (float)x;
    r = get_number(req, "top_p", 0.0, 1.0, &x, e);
    if (r < 0) return -1;
    if (r > 0) {
        if (x == 0.0) j->sp.temperature = 0.0f;   /* only the top token: greedy */
        else j->sp.top_p = (float)x;
    }
    if ((r = get_int(req, "top_k", 0, INT32_MAX, &k, e)) < 0) return -1;
    if (r > 0) j->sp.top_k = (int32_t)k;
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        if ((r = get_number(req, nums[i].key, nums[i].lo, nums[i].hi, &x, e)) < 0) return -1;
        if (r > 0) *(float *)((char *)&j->sp + nums[i].off) = (float)x;
    }
    return 0;
}

static int logit_bias(srv *s, const json_t *req, srv_job *j, srv_err *e) {
    const json_t *lb = member(req, "logit_bias");
    if (!lb) return 0;
    if (!json_is_object(lb)) return bad_type(e, "logit_bias", "an object of token id -> bias");
    size_t n = json_object_size(lb);
    if (n > SRV_MAX_BIAS)
        return srv_err_set(e, 400, INVALID, "logit_bias", "invalid_value", "at most %d logit_bias entries", SRV_MAX_BIAS);
    j->bias_ids = malloc((n + 1) * sizeof *j->bias_ids);
    j->bias = malloc((n + 1) * sizeof *j->bias);
    if (!j->bias_ids || !j->bias) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    const char *key;
    const json_t *v;
    size_t i = 0;
    json_object_foreach((json_t *)lb, key, v) {
        char *end = NULL;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || id < 0 || id >= s->info.n_vocab)
            return srv_err_set(e, 400, INVALID, "logit_bias", "invalid_value",
                               "logit_bias key '%.40s' is not a token id in [0, %lld)", key, (long long)s->info.n_vocab);
        if (!json_is_number(v) || !(fabs(json_number_value(v)) <= 100.0))
            return srv_err_set(e, 400, INVALID, "logit_bias", "invalid_value", "logit_bias values must be numbers in [-100, 100]");
        j->bias_ids[i] = (int32_t)id;
        j->bias[i] = (float)json_number_value(v);
        i++;
    }
    j->sp.bias_ids = j->bias_ids;
    j->sp.bias = j->bias;
    j->sp.n_bias = (int32_t)i;
    return 0;
}

/* max_tokens: the request's (max_completion_tokens wins), capped by the server. */
static int max_tokens_param(srv *s, const json_t *req, srv_job *j, int64_t default_max, srv_err *e) {
    int64_t mt = 0, k;
    int have = 0, r;
    for (int i = 0; i < 2; i++) {
        const char *key = i ? "max_completion_tokens" : "max_tokens";
        if ((r = get_int(req, key, 1, INT64_MAX, &k, e)) < 0) return -1;
        if (r > 0) { mt = k; have = 1; }
    }
    if (have && mt > s->o.max_tokens)
        return srv_err_set(e, 400, INVALID, "max_tokens", "invalid_value",
                           "max_tokens is %lld; this server allows at most %lld",
                           (long long)mt, (long long)s->o.max_tokens);
    j->max_tokens = have ? mt : -default_max;       /* negative: a default, clamped later */
    return 0;
}

static int stop_params(const json_t *req, srv_job *j, srv_err *e) {
    const json_t *st = member(req, "stop");
    if (!st) return 0;
    const json_t *one[1] = { st };
    size_t n = json_is_array(st) ? json_array_size(st) : 1;
    if (!json_is_string(st) && !json_is_array(st)) return bad_type(e, "stop", "a string or an array of strings");
    if (n > MAX_STOP) return srv_err_set(e, 400, INVALID, "stop", "invalid_value", "at most %d stop sequences", MAX_STOP);
    j->stop = calloc(n ? n : 1, sizeof *j->stop);
    if (!j->stop) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_is_array(st) ? json_array_get(st, i) : one[0];
        if (!json_is_string(v)) return bad_type(e, "stop", "a string or an array of strings");
        size_t len = json_string_length(v);
        if (len > MAX_STOP_BYTES)
            return srv_err_set(e, 400, INVALID, "stop", "invalid_value", "a stop sequence may have at most %d bytes", MAX_STOP_BYTES);
        if (len == 0) continue;
        if (!(j->stop[j->n_stop] = strndup(json_string_value(v), len)))
            return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        j->n_stop++;
    }
    return 0;
}

/* Options shared by both endpoints: sampling, limits, stop, stream. */
static int common_params(srv *s, const json_t *req, srv_job *j, int64_t default_max, srv_err *e) {
    int64_t k;
    int b = 0;
    if (get_bool(req, "stream", &b, e) < 0) return -1;
    j->stream = b;
    /* fairness key: the end user when the client names one, else the peer address */
    const json_t *user = member(req, "user");
    if (user) {
        if (!json_is_string(user)) return bad_type(e, "user", "a string");
        snprintf(j->client, sizeof j->client, "user:%.56s", json_string_value(user));
    }
    b = 0;
    if (get_bool(req, "ignore_eos", &b, e) < 0) return -1;
    j->ignore_eos = b;
    const json_t *so = member(req, "stream_options");
    if (so) {
        if (!json_is_object(so)) return bad_type(e, "stream_options", "an object");
        b = 0;
        if (get_bool(so, "include_usage", &b, e) < 0) return -1;
        j->include_usage = b && j->stream;
    }
    k = 1;
    if (get_int(req, "n", 1, SRV_MAX_PARALLEL, &k, e) < 0) return -1;
    if (k > (s->o.c.parallel > 1 ? s->o.c.parallel : 1))
        return srv_err_set(e, 400, INVALID, "n", "invalid_value",
                           "n = %lld choices need as many sessions: start the server with --parallel %lld or more",
                           (long long)k, (long long)k);
    j->n_choices = (int)k;
    if (sampling_params(req, j, e) < 0 || logit_bias(s, req, j, e) < 0) return -1;
    const json_t *seed = member(req, "seed");
    if (seed) {
        if (!json_is_integer(seed)) return bad_type(e, "seed", "an integer");
        j->sp.seed = (uint64_t)json_integer_value(seed);
    } else {
        j->sp.seed = mix64(atomic_fetch_add(&s->next_id, 1) ^ s->id_salt ^ 0x5EEDull);
    }
    if (max_tokens_param(s, req, j, default_max, e) < 0) return -1;
    return stop_params(req, j, e);
}

/* Final max_tokens against the context: n_in ids are read before sampling. */
static int fit_context(srv *s, srv_job *j, int64_t n_in, srv_err *e) {
    int64_t ctx = s->info.max_context;
    if (n_in >= ctx)
        return srv_err_set(e, 400, INVALID, "messages", "context_length_exceeded",
                           "this model's maximum context length is %lld tokens; the prompt has %lld",
                           (long long)ctx, (long long)n_in);
    if (j->max_tokens < 0) {
        j->max_tokens = -j->max_tokens;
        if (j->max_tokens > ctx - n_in) j->max_tokens = ctx - n_in;
    } else if (n_in + j->max_tokens > ctx) {
        return srv_err_set(e, 400, INVALID, "max_tokens", "context_length_exceeded",
                           "this model's maximum context length is %lld tokens; you requested %lld "
                           "(%lld in the prompt, %lld to generate)", (long long)ctx,
                           (long long)(n_in + j->max_tokens), (long long)n_in, (long long)j->max_tokens);
    }
    return 0;
}

/* ---- chat ------------------------------------------------------------------- */

typedef struct chat_in {
    ms_message *msgs;
    ms_tool_call *calls;        /* all messages' calls, one array */
    char **owned;               /* strings allocated while mapping */
    int64_t n_owned;
} chat_in;

static void chat_in_free(chat_in *c) {
    for (int64_t i = 0; i < c->n_owned; i++) free(c->owned[i]);
    free(c->owned);
    free(c->msgs);
    free(c->calls);
}

static char *own(chat_in *c, char *p) {
    if (p) c->owned[c->n_owned++] = p;
    return p;
}

/* content: string | null | [{"type":"text","text":...}, ...]. */
static int content_text(chat_in *c, const json_t *v, int64_t im, const char **out, srv_err *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%lld].content", (long long)im);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        if (strlen(json_string_value(v)) != json_string_length(v))
            return srv_err_set(e, 400, INVALID, "messages", "invalid_value", "%s contains a NUL character", param);
        *out = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v)) return srv_err_set(e, 400, INVALID, "messages", "invalid_type", "%s must be a string, null or an array of text parts", param);
    srv_buf b = {0};
    size_t i;
    const json_t *part;
    json_array_foreach(v, i, part) {
        const json_t *type = json_object_get(part, "type");
        const json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type)) {
            srv_buf_free(&b);
            return srv_err_set(e, 400, INVALID, "messages", "invalid_type", "%s[%zu] must be an object with a type", param, i);
        }
        if (strcmp(json_string_value(type), "text") != 0 || !json_is_string(text)) {
            srv_buf_free(&b);
            return srv_err_set(e, 400, INVALID, "messages", "unsupported_content",
                               "%s[%zu]: only text parts are supported (got '%.40s')", param, i, json_string_value(type));
        }
        if (srv_buf_add(&b, json_string_value(text), json_string_length(text)) != 0) {
            srv_buf_free(&b);
            return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        }
    }
    if (b.p && strlen(b.p) != b.n) {
        srv_buf_free(&b);
        return srv_err_set(e, 400, INVALID, "messages", "invalid_value", "%s contains a NUL character", param);
    }
    *out = own(c, b.p ? b.p : strdup(""));
    if (!*out) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* Find the tool call with this id in assistant messages before im. */
static int find_call(const json_t *msgs, int64_t im, const char *id, const char **name, int64_t *index) {
    for (int64_t k = im - 1; k >= 0; k--) {
        const json_t *m = json_array_get(msgs, (size_t)k);
        const json_t *tc = json_object_get(m, "tool_calls");
        if (!json_is_array(tc)) continue;
        for (size_t i = 0; i < json_array_size(tc); i++) {
            const json_t *call = json_array_get(tc, i);
            const json_t *cid = json_object_get(call, "id");
            if (json_is_string(cid) && !strcmp(json_string_value(cid), id)) {
                *name = json_string_value(json_object_get(json_object_get(call, "function"), "name"));
                *index = (int64_t)i;
                return *name ? 0 : -1;
            }
        }
    }
    return -1;
}

static int map_messages(srv *s, const json_t *msgs, chat_in *c, srv_err *e) {
    if (!msgs) return srv_err_set(e, 400, INVALID, "messages", "missing_required_parameter", "'messages' is required");
    if (!json_is_array(msgs)) return bad_type(e, "messages", "an array");
    size_t n = json_array_size(msgs);
    if (n == 0) return srv_err_set(e, 400, INVALID, "messages", "invalid_value", "'messages' must not be empty");
    if ((int64_t)n > s->o.max_messages)
        return srv_err_set(e, 400, INVALID, "messages", "too_many_messages", "%zu messages; this server accepts at most %lld",
                           n, (long long)s->o.max_messages);
    size_t n_calls = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *tc = json_object_get(json_array_get(msgs, i), "tool_calls");
        if (json_is_array(tc)) n_calls += json_array_size(tc);
    }
    c->msgs = calloc(n, sizeof *c->msgs);
    c->calls = calloc(n_calls ? n_calls : 1, sizeof *c->calls);
    c->owned = calloc(2 * n + n_calls + 1, sizeof *c->owned);
    if (!c->msgs || !c->calls || !c->owned) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(msgs, i);
        ms_message *o = &c->msgs[i];
        if (!json_is_object(m)) return srv_err_set(e, 400, INVALID, "messages", "invalid_type", "messages[%zu] must be an object", i);
        const json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) return srv_err_set(e, 400, INVALID, "messages", "invalid_type", "messages[%zu].role must be a string", i);
        const char *r = json_string_value(role);
        if (!strcmp(r, "system") || !strcmp(r, "developer")) o->role = "system";
        else if (!strcmp(r, "user")) o->role = "user";
        else if (!strcmp(r, "assistant")) o->role = "assistant";
        else if (!strcmp(r, "tool")) o->role = "tool";
        else return srv_err_set(e, 400, INVALID, "messages", "invalid_value",
                                "messages[%zu].role '%.40s' is not one of system, developer, user, assistant, tool", i, r);
        if (content_text(c, json_object_get(m, "content"), (int64_t)i, &o->content, e) < 0) return -1;
        if (!strcmp(o->role, "assistant")) {
            const json_t *rc = member(m, "reasoning_content");
            if (rc) {
                if (!json_is_string(rc)) return srv_err_set(e, 400, INVALID, "messages", "invalid_type", "messages[%zu].reasoning_content must be a string", i);
                o->reasoning = json_string_value(rc);
            }
            const json_t *tc = member(m, "tool_calls");
            if (tc) {
                if (!json_is_array(tc)) return srv_err_set(e, 400, INVALID, "messages", "invalid_type", "messages[%zu].tool_calls must be an array", i);
                o->tool_calls = c->calls + at;
                for (size_t k = 0; k < json_array_size(tc); k++, at++) {
                    const json_t *call = json_array_get(tc, k);
                    const json_t *fn = json_object_get(call, "function");
                    const json_t *name = json_object_get(fn, "name");
                    const json_t *args = json_object_get(fn, "arguments");
                    if (!json_is_object(call) || !json_is_object(fn) || !json_is_string(name) || json_string_length(name) == 0)
                        return srv_err_set(e, 400, INVALID, "messages", "invalid_type",
                                           "messages[%zu].tool_calls[%zu] must be {\"function\": {\"name\": ..., \"arguments\": ...}}", i, k);
                    c->calls[at].name = json_string_value(name);
                    c->calls[at].index = (int64_t)k;
                    if (json_is_string(args)) c->calls[at].arguments = json_string_value(args);
                    else if (json_is_object(args)) {          /* some clients send the object itself */
                        c->calls[at].arguments = own(c, json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY));
                        if (!c->calls[at].arguments) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
                    } else if (args && !json_is_null(args))
                        return srv_err_set(e, 400, INVALID, "messages", "invalid_type",
                                           "messages[%zu].tool_calls[%zu].function.arguments must be a JSON string", i, k);
                    o->n_tool_calls++;
                }
            }
        } else if (!strcmp(o->role, "tool")) {
            const json_t *id = member(m, "tool_call_id");
            const json_t *nm = member(m, "name");
            if (id && !json_is_string(id)) return srv_err_set(e, 400, INVALID, "messages", "invalid_type", "messages[%zu].tool_call_id must be a string", i);
            if (id && find_call(msgs, (int64_t)i, json_string_value(id), &o->tool_name, &o->tool_index) == 0) {
                /* found: name and index of that call */
            } else if (!id && json_is_string(nm)) {
                o->tool_name = json_string_value(nm);
                o->tool_index = 0;
            } else {
                return srv_err_set(e, 400, INVALID, "messages", "invalid_value",
                                   "messages[%zu]: tool message's tool_call_id '%.60s' matches no earlier assistant tool call",
                                   i, id ? json_string_value(id) : "(missing)");
            }
        }
    }
    return 0;
}

/* thinking on/off and effort from the request's several spellings. */
static int thinking_params(srv *s, const json_t *req, int *thinking, const char **effort, srv_err *e) {
    int explicit_on = -1;
    const json_t *t = member(req, "thinking");
    if (t) {
        if (json_is_boolean(t)) explicit_on = json_is_true(t);
        else if (json_is_object(t) && json_is_string(json_object_get(t, "type"))) {
            const char *ty = json_string_value(json_object_get(t, "type"));
            if (!strcmp(ty, "enabled")) explicit_on = 1;
            else if (!strcmp(ty, "disabled")) explicit_on = 0;
            else return srv_err_set(e, 400, INVALID, "thinking", "invalid_value", "thinking.type must be 'enabled' or 'disabled'");
        } else return bad_type(e, "thinking", "a boolean or {\"type\": \"enabled\"|\"disabled\"}");
    }
    const json_t *kw = member(req, "chat_template_kwargs");
    if (kw && explicit_on < 0) {
        if (!json_is_object(kw)) return bad_type(e, "chat_template_kwargs", "an object");
        static const char *const keys[2] = { "thinking", "enable_thinking" };
        for (int i = 0; i < 2 && explicit_on < 0; i++) {
            int b = 0, r = get_bool(kw, keys[i], &b, e);
            if (r < 0) return -1;
            if (r > 0) explicit_on = b;
        }
    }
    *thinking = s->o.thinking;
    *effort = NULL;
    const int harmony = strcmp(ms_chat_format_name(s->e), "harmony") == 0;
    const json_t *re = member(req, "reasoning_effort");
    if (re) {
        if (!json_is_string(re)) return bad_type(e, "reasoning_effort", "a string");
        const char *v = json_string_value(re);
        if (!strcmp(v, "none")) *thinking = 0;
        else {
            if (!strcmp(v, "minimal") || !strcmp(v, "low")) *effort = "low";
            else if (!strcmp(v, "medium")) *effort = harmony ? "medium" : "high";
            else if (!strcmp(v, "high")) *effort = "high";
            else if (!strcmp(v, "max")) *effort = harmony ? "high" : "max";
            else return srv_err_set(e, 400, INVALID, "reasoning_effort", "invalid_value",
                                    "reasoning_effort must be one of none, minimal, low, medium, high, max");
            *thinking = 1;
        }
    }
    if (explicit_on >= 0) *thinking = explicit_on;
    if (!*thinking && !harmony) *effort = NULL;   /* gpt-oss always reasons: its effort stands */
    return 0;
}

/* A tool takes no parameters: no "parameters", or no / empty "properties". */
static int tool_is_parameterless(const json_t *fn) {
    const json_t *p = member(fn, "parameters");
    if (!p) return 1;
    const json_t *props = member(p, "properties");
    return !props || (json_is_object(props) && json_object_size(props) == 0);
}

/* Render the assistant message start that a forced choice implies and take
 * the ids after the generation prompt. name == NULL: up to open(tools). */
static int forced_ids(srv *s, srv_job *j, const char *name, int whole_call, srv_err *e) {
    ms_chat_format f = { NULL, j->thinking, NULL, 1 };
    int32_t *gp = NULL, *r = NULL;
    int64_t n_gp = 0, n_r = 0;
    char msg[256];
    ms_tool_call call = { name ? name : "x", NULL, 0 };
    ms_message m;
    memset(&m, 0, sizeof m);
    m.role = "assistant";
    m.content = "";
    m.reasoning = j->thinking ? "" : NULL;
    m.tool_calls = &call;
    m.n_tool_calls = 1;
    if (ms_chat_tokens(s->e, NULL, 0, &f, 1, &gp, &n_gp, msg, sizeof msg) != MS_OK) goto fail;
    f.add_generation_prompt = 0;
    if (ms_chat_tokens(s->e, &m, 1, &f, 1, &r, &n_r, msg, sizeof msg) != MS_OK) goto fail;
    if (n_r < n_gp || memcmp(r, gp, (size_t)n_gp * sizeof *r) != 0) goto fail;
    /* r = gen prompt, [close think], open response close response, open tools,
     * open call ... close call, close tools, close message, end */
    int64_t cut = -1, n_open = 0;
    int want_open = name ? 2 : 1;        /* the 1st open after the response's is tools, the 2nd the call */
    int64_t after_resp = -1;
    for (int64_t i = n_gp; i < n_r; i++) {
        if (r[i] != s->id_close) continue;
        /* the first close after the gen prompt that is followed by "response" closes the response */
        const char *b;
        int64_t len = i + 1 < n_r ? ms_token_bytes(s->e, r[i + 1], &b) : -1;
        if (len >= 1 && b[0] == 'r') { after_resp = i; break; }
    }
    for (int64_t i = after_resp; after_resp >= 0 && i < n_r; i++) {
        if (r[i] == s->id_open) n_open++;
        if (n_open == want_open && r[i] == s->id_sep) { cut = i + 1; break; }
    }
    if (cut < 0) goto fail;
    if (!name && cut < n_r && r[cut] == s->id_open) cut++;     /* "required": the call's tag opens */
    if (whole_call) {
        cut = n_r;                       /* everything, up to and including <|end_of_msg|> */
        j->forced_done = 1;
    }
    j->n_forced = cut - n_gp;
    j->forced = malloc((size_t)(j->n_forced > 0 ? j->n_forced : 1) * sizeof *j->forced);
    if (!j->forced) { free(gp); free(r); return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory"); }
    memcpy(j->forced, r + n_gp, (size_t)j->n_forced * sizeof *r);
    free(gp);
    free(r);
    return 0;
fail:
    free(gp);
    free(r);
    return srv_err_set(e, 500, "server_error", "tool_choice", NULL, "cannot render the forced tool call");
}

/* response_format: text, json_object (any JSON object) or json_schema
 * ({"name", "schema", "strict"}). The schema is compiled here once so that one
 * outside the subset is a 400 naming the keyword; the worker compiles it again
 * for its grammar (sample/json_schema.h). */
static int response_format(srv *s, const json_t *req, srv_job *j, srv_err *e) {
    const json_t *rf = member(req, "response_format");
    if (!rf) return 0;
    const json_t *ty = json_object_get(rf, "type");
    if (!json_is_object(rf) || !json_is_string(ty)) return bad_type(e, "response_format", "an object with a type");
    const char *t = json_string_value(ty);
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) j->json_mode = 1;
    else if (!strcmp(t, "json_schema")) {
        const json_t *js = json_object_get(rf, "json_schema");
        const json_t *sc = json_object_get(js, "schema");
        const json_t *strict = json_object_get(js, "strict");
        if (!json_is_object(js) || !json_is_string(json_object_get(js, "name")) || (sc && !json_is_object(sc)) ||
            (strict && !json_is_boolean(strict)))
            return bad_type(e, "response_format", "{\"type\": \"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}}");
        j->json_mode = 2;
        if (!(j->schema = json_dumps(sc ? sc : json_object_get(js, "name"), sc ? JSON_COMPACT : JSON_ENCODE_ANY)))
            return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        if (!sc) { free(j->schema); j->schema = strdup("{\"type\":\"object\"}"); }
        if (!j->schema) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        j->n_schema = strlen(j->schema);
    } else
        return srv_err_set(e, 400, INVALID, "response_format", "invalid_value",
                           "response_format type must be 'text', 'json_object' or 'json_schema'");
    char msg[256];
    if (ms_grammar_check(j->schema, j->n_schema, msg, sizeof msg) != MS_OK)
        return srv_err_set(e, 400, INVALID, "response_format", "invalid_value", "response_format: %s", msg);
    return 0;
}

/* tools and tool_choice, validated; tools NULL when there are none or
 * tool_choice is "none". */
typedef struct tool_req {
    const json_t *tools;
    const char *choice;         /* "auto" | "none" | "required" | "function" */
    const char *forced_name;    /* a named function */
    const json_t *forced_fn;
} tool_req;

static int tool_params(const json_t *req, const srv_job *j, tool_req *tc_out, srv_err *e) {
    const json_t *tools = member(req, "tools");
    const char *choice = "auto", *forced_name = NULL;
    const json_t *forced_fn = NULL;
    tc_out->tools = NULL;
    if (tools) {
        if (!json_is_array(tools)) return bad_type(e, "tools", "an array");
        if (json_array_size(tools) > MAX_TOOLS) return srv_err_set(e, 400, INVALID, "tools", "invalid_value", "at most %d tools", MAX_TOOLS);
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t) {
            const json_t *fn = json_object_get(t, "function");
            const json_t *ty = json_object_get(t, "type");
            if (!json_is_object(t) || !json_is_object(fn) || !json_is_string(json_object_get(fn, "name")) ||
                (ty && (!json_is_string(ty) || strcmp(json_string_value(ty), "function"))))
                return srv_err_set(e, 400, INVALID, "tools", "invalid_type",
                                   "tools[%zu] must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
            if (json_string_length(json_object_get(fn, "name")) == 0)
                return srv_err_set(e, 400, INVALID, "tools", "invalid_value", "tools[%zu].function.name is empty", i);
        }
        if (json_array_size(tools) == 0) tools = NULL;
    }
    const json_t *tc = member(req, "tool_choice");
    if (tc) {
        if (json_is_string(tc)) {
            choice = json_string_value(tc);
            if (strcmp(choice, "auto") && strcmp(choice, "none") && strcmp(choice, "required"))
                return srv_err_set(e, 400, INVALID, "tool_choice", "invalid_value", "tool_choice must be 'auto', 'none', 'required' or a function");
        } else if (json_is_object(tc)) {
            const json_t *nm = json_object_get(json_object_get(tc, "function"), "name");
            if (!json_is_string(nm)) return bad_type(e, "tool_choice", "'auto', 'none', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
            choice = "function";
            forced_name = json_string_value(nm);
        } else return bad_type(e, "tool_choice", "a string or an object");
        if (!tools && strcmp(choice, "auto") && strcmp(choice, "none"))
            return srv_err_set(e, 400, INVALID, "tool_choice", "invalid_value", "tool_choice '%s' needs tools", choice);
    }
    if (forced_name) {
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t) {
            const json_t *fn = json_object_get(t, "function");
            if (!strcmp(json_string_value(json_object_get(fn, "name")), forced_name)) forced_fn = fn;
        }
        if (!forced_fn) return srv_err_set(e, 400, INVALID, "tool_choice", "invalid_value", "tool_choice names '%.100s', which is not among the tools", forced_name);
    }
    if (!strcmp(choice, "none")) tools = NULL;
    if (j->json_mode && (forced_name || !strcmp(choice, "required")))
        return srv_err_set(e, 400, INVALID, "response_format", "unsupported_parameter",
                           "response_format json_object / json_schema cannot be combined with tool_choice '%s' "
                           "(the arguments follow the tool's parameters)", choice);
    tc_out->tools = tools;
    tc_out->choice = choice;
    tc_out->forced_name = forced_name;
    tc_out->forced_fn = forced_fn;
    return 0;
}

int srv_api_chat(srv *s, const json_t *req, srv_job *j, srv_err *e) {
    if (srv_api_check_model(s, req, 1, e) < 0) return -1;
    if (common_params(s, req, j, s->o.default_max_tokens, e) < 0) return -1;
    int want_lp = 0;
    int64_t top = -1;
    if (get_bool(req, "logprobs", &want_lp, e) < 0) return -1;
    if (get_int(req, "top_logprobs", 0, MS_TOP_MAX, &top, e) < 0) return -1;
    if (top >= 0 && !want_lp)
        return srv_err_set(e, 400, INVALID, "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs': true");
    j->logprobs = want_lp ? (top >= 0 ? (int)top : 0) : -1;
    if (response_format(s, req, j, e) < 0) return -1;
    /* gpt-oss's harmony: the reply's channels and call headers are constrained
       by harmony.c (its analysis stays free), K3's markup by the code below */
    const int harmony = strcmp(ms_chat_format_name(s->e), "harmony") == 0;
    const char *effort;
    if (thinking_params(s, req, &j->thinking, &effort, e) < 0) return -1;
    if (j->json_mode && j->thinking && !harmony)  /* the think block the prompt opens could not be closed under the mask */
        return srv_err_set(e, 400, INVALID, "response_format", "unsupported_parameter",
                           "response_format json_object / json_schema needs thinking off");

    tool_req tcs = { NULL, "auto", NULL, NULL };
    if (tool_params(req, j, &tcs, e) < 0) return -1;
    const json_t *tools = tcs.tools, *forced_fn = tcs.forced_fn;
    const char *choice = tcs.choice, *forced_name = tcs.forced_name;
    j->calls_off = !strcmp(choice, "none");

    chat_in c;
    memset(&c, 0, sizeof c);
    const json_t *msgs = json_object_get(req, "messages");
    int rc = map_messages(s, msgs, &c, e);
    char *tools_json = NULL;
    if (rc == 0 && tools) {
        tools_json = json_dumps(tools, JSON_COMPACT);
        if (!tools_json) rc = srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (rc == 0) {
        ms_chat_format f = { tools_json, j->thinking, effort, 1 };
        char msg[512];
        ms_status st = ms_chat_tokens(s->e, c.msgs, (int64_t)json_array_size(msgs), &f, 0, &j->prompt, &j->n_prompt, msg, sizeof msg);
        if (st == MS_E_NOMEM) rc = srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        else if (st != MS_OK) rc = srv_err_set(e, 400, INVALID, "messages", "invalid_value", "%s", msg);
    }
    free(tools_json);
    chat_in_free(&c);
    if (rc < 0) return -1;
    if (harmony) {
        /* response_format or a forced call: harmony.c's constraint on the
           reply; under "auto", on the calls the model opens */
        if (j->json_mode || forced_name || !strcmp(choice, "required")) {
            if (srv_hspec_build(s, j, tools, forced_name, e) < 0) return -1;
        } else if (tools && srv_hspec_auto(s, j, tools, e) < 0) {
            return -1;
        }
    } else {
        if (!strcmp(choice, "required") && json_array_size(tools) == 1) {
            forced_fn = json_object_get(json_array_get(tools, 0), "function");
            forced_name = json_string_value(json_object_get(forced_fn, "name"));
        }
        if (forced_name) {
            if (forced_ids(s, j, forced_name, tool_is_parameterless(forced_fn), e) < 0) return -1;
        } else if (!strcmp(choice, "required")) {
            if (forced_ids(s, j, NULL, 0, e) < 0) return -1;
        }
        if (tools && srv_tools_build(s, tools, forced_name || !strcmp(choice, "required"), &j->tools, e) < 0)
            return -1;
    }
    j->kind = SRV_CHAT;
    make_id(s, j, "chatcmpl-");
    if (fit_context(s, j, j->n_prompt + j->n_forced, e) < 0) return -1;
    /* forced ids count as completion tokens: max_tokens cuts them too (the
       reply then ends at once with "length" and presents no call) */
    if (j->n_forced > j->max_tokens) {
        j->n_forced = j->max_tokens;
        j->forced_done = 0;
    }
    return 0;
}

/* ---- completions ------------------------------------------------------------ */

int srv_api_ids(srv *s, const json_t *a, const char *param, int32_t **ids, int64_t *n_ids, srv_err *e) {
    size_t n = json_array_size(a);
    *ids = malloc((n ? n : 1) * sizeof **ids);
    if (!*ids) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= s->info.n_vocab)
            return srv_err_set(e, 400, INVALID, param, "invalid_value", "%s[%zu] is not a token id in [0, %lld)",
                               param, i, (long long)s->info.n_vocab);
        (*ids)[i] = (int32_t)json_integer_value(v);
    }
    *n_ids = (int64_t)n;
    return 0;
}

int srv_api_completion(srv *s, const json_t *req, srv_job *j, srv_err *e) {
    if (srv_api_check_model(s, req, 1, e) < 0) return -1;
    if (common_params(s, req, j, 16, e) < 0) return -1;
    int b = 0;
    if (get_bool(req, "echo", &b, e) < 0) return -1;
    j->echo = b;
    if (member(req, "suffix")) return srv_err_set(e, 400, INVALID, "suffix", "unsupported_parameter", "'suffix' is not supported");
    int64_t k;
    if (get_int(req, "best_of", 1, 1, &k, e) < 0) return -1;
    k = -1;
    if (get_int(req, "logprobs", 0, MS_TOP_MAX, &k, e) < 0) return -1;
    j->logprobs = (int)k;
    const json_t *p = json_object_get(req, "prompt");
    if (!p) return srv_err_set(e, 400, INVALID, "prompt", "missing_required_parameter", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 && !json_is_integer(json_array_get(p, 0)))
        p = json_array_get(p, 0);       /* ["text"] or [[ids]] */
    const char *text = NULL;
    if (json_is_string(p)) {
        text = json_string_value(p);
        if (json_string_length(p) > 0 &&
            ms_tokenize(s->e, text, json_string_length(p), &j->prompt, &j->n_prompt) != MS_OK)
            return srv_err_set(e, 500, "server_error", NULL, NULL, "cannot tokenize the prompt");
        if (j->echo && !(j->echo_text = strndup(text, json_string_length(p))))
            return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    } else if (json_is_array(p) && (json_array_size(p) == 0 || json_is_integer(json_array_get(p, 0)))) {
        if (srv_api_ids(s, p, "prompt", &j->prompt, &j->n_prompt, e) < 0) return -1;
        if (j->echo && j->n_prompt > 0) {
            size_t len;
            if (ms_detokenize(s->e, j->prompt, j->n_prompt, &j->echo_text, &len) != MS_OK)
                return srv_err_set(e, 500, "server_error", NULL, NULL, "cannot decode the prompt");
        }
    } else if (json_is_array(p)) {
        return srv_err_set(e, 400, INVALID, "prompt", "unsupported_parameter", "one prompt per request (got %zu)", json_array_size(p));
    } else {
        return bad_type(e, "prompt", "a string, an array of token ids, or an array with one of those");
    }
    if (j->n_prompt == 0) {
        /* nothing to condition on: start from [BOS] as OpenAI starts from <|endoftext|> */
        if (s->info.bos_id < 0 || s->info.bos_id >= s->info.n_vocab)
            return srv_err_set(e, 400, INVALID, "prompt", "invalid_value", "the prompt is empty");
        free(j->prompt);
        if (!(j->prompt = malloc(sizeof *j->prompt))) return srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        j->prompt[0] = (int32_t)s->info.bos_id;
        j->n_prompt = 1;
    }
    j->kind = SRV_COMPLETION;
    make_id(s, j, "cmpl-");
    return fit_context(s, j, j->n_prompt, e);
}
