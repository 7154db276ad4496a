/* cli/batch.c - `moestream batch`: many prompts, generated together.
 *
 * Reads JSON lines (a file or stdin), one request per line:
 *   {"prompt": "text"}, {"ids": [1, 2, 3]} or {"messages": [{"role",
 *   "content"}, ...], "thinking": false, "effort": "high"} (a chat in the K3
 *   format, rendered with the assistant's opening), optionally "max_tokens",
 *   "ignore_eos" and every sampling option of `run` spelled with '_' ("seed",
 *   "temperature", "top_k", "top_p", "min_p", "repeat_penalty",
 *   "frequency_penalty", "presence_penalty"; each checked by its flag's own
 *   parser and range, cli/opts.h) and "stop" (a string or up to 4, as run's
 *   --stop: the text ends where the first one found begins, finish_reason
 *   "stop"); what a line does not say is the command's.
 *   A key that is none of these is that line's error, named in its result;
 *   every byte of the input is read (no line ends the input early).
 * Writes one JSON line per request, in input order:
 *   {"index", "prompt_tokens", "generated_ids", "text" (with a tokenizer;
 *    chats: "content" and, thinking, "reasoning"), "finish_reason": "stop" |
 *    "length"} or {"index", "error"}; speculating (--speculate auto, the
 *    default, or K; not 0) also "decode_passes"
 *    (the passes that fed the request's decode tokens), "drafted",
 *    "accepted" and both by the source of the draft, as `run --json` names
 *    them in its stats; with --draft-tree 1 also "tree_passes",
 *    "tree_drafted", "tree_accepted" (a request decoding alone in a step may
 *    verify a second branch).
 * Up to --parallel N requests are in flight, each in its own session; one
 * ms_sessions_feed call per step reads every decoding request's last token
 * and a prompt piece, so a streamed model is read once per step for all of
 * them. With --speculate, a step in which no request reads its prompt is one
 * ms_sessions_decode call: every request drafts as `run --speculate` does (its
 * own session: its context, its draft model state) and all the drafts are
 * verified in that one pass. A request's tokens are exactly those of
 * `moestream run` with the same prompt, --max-tokens and --seed (the engine's
 * bits do not depend on the company or on speculation; each request has its
 * own sampler): text prompts stop at EOS
 * (unless --ignore-eos), id prompts only at the limit, as in `run`; a chat's
 * answer is that of `moestream chat` (one user turn, same options).
 * Prompts sharing a prefix share its compute: a request starts from the
 * longest prefix its session or the prompt cache holds ("cached_tokens"),
 * and its pieces stop at the prompt cache's marks for a snapshot.
 */
#include "moestream.h"

#include "cli/cmds.h"
#include "cli/util.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct req {
    int32_t *prompt;
    int64_t n_prompt, max_tokens;
    int text;                   /* a text or chat prompt: stops at EOS */
    int chat, thinking;         /* a chat: the answer is parsed */
    int ignore_eos;
    const char *effort;         /* a chat's "effort" (static storage) */
    ms_sample_params sp;        /* the command's, with the line's keys over it */
    cli_stop stop;              /* the line's "stop" strings (stop_buf owns them) */
    char *stop_buf[CLI_MAX_STOP];
    cli_text seen;              /* the text so far, when there are stop strings */
    char *error;                /* the line could not be used */
    /* results */
    int32_t *gen;
    int64_t n_gen;
    const char *finish;
    int done;
    int64_t n_cached;           /* prompt ids restored from the prompt cache (or the session) */
    int64_t passes;             /* passes that fed its decode tokens */
    ms_decode_counts dec;       /* its speculative steps' drafts (--speculate) */
} req;

typedef struct slot {
    ms_session *ses;
    req *r;                     /* NULL: free */
    ms_sampler *smp;
    int64_t at;                 /* prompt ids read */
    int32_t pending;            /* picked, not fed (-1: none) */
    int64_t mark;               /* where the prompt piece being fed ends (ms_session_prompt_mark) */
    const ms_engine *e;         /* for the picker: text and stop ids */
    int32_t eos;
    ms_decode_counts dec0;      /* the session's decode counts when the request started */
} slot;

/* The command's options: what a line does not say. */
typedef struct batch_opts {
    cli_opts c;
    const char *input;
    int64_t max_tokens;
    int ignore_eos;
    ms_sample_params sp;
} batch_opts;

#define B(f) offsetof(batch_opts, f)
static const cli_opt batch_table[] = {
    { "--input", CLI_STR, B(input), "FILE", 0, 0, "stdin", "JSON lines, one request each", 0, NULL, NULL },
    { "--max-tokens", CLI_I64, B(max_tokens), "N", 0, 1 << 30, "64", "tokens per request unless its line says", 0, NULL, "--gen" },
    { "--ignore-eos", CLI_FLAG, B(ignore_eos), NULL, 0, 0, NULL, "text prompts do not stop at the stop tokens", 1, NULL, NULL },
    { NULL, 0, 0, NULL, 0, 0, NULL, NULL, 0, NULL, NULL }
};
#undef B

/* The keys that hold a line's prompt; the others are line_key's. */
static const char *const PROMPT_KEYS[] = { "prompt", "ids", "messages" };

/* A chat line's messages rendered into r->prompt; msg set when they cannot be. */
static void chat_prompt(ms_engine *e, const json_t *msgs, req *r, char *msg, size_t msg_len) {
    const size_t n = json_is_array(msgs) ? json_array_size(msgs) : 0;
    if (n == 0) { snprintf(msg, msg_len, "\"messages\" must be a non-empty array"); return; }
    if (!ms_engine_has_tokenizer(e)) { snprintf(msg, msg_len, "the model has no tokenizer"); return; }
    ms_message *m = calloc(n, sizeof *m);
    if (!m) { snprintf(msg, msg_len, "out of memory"); return; }
    for (size_t i = 0; i < n && !msg[0]; i++) {
        const json_t *o = json_array_get(msgs, i);
        const json_t *role = json_object_get(o, "role"), *content = json_object_get(o, "content");
        if (!json_is_string(role) || (content && !json_is_string(content)))
            snprintf(msg, msg_len, "message %zu needs a string \"role\" and \"content\"", i);
        m[i].role = json_string_value(role);
        m[i].content = content ? json_string_value(content) : "";
    }
    const ms_chat_format fmt = { NULL, r->thinking, r->effort, 1 };
    if (!msg[0]) ms_chat_tokens(e, m, (int64_t)n, &fmt, 0, &r->prompt, &r->n_prompt, msg, msg_len);
    free(m);
}

/* One key of a line that is not the prompt: set in r, or msg says why not. */
static void line_key(const char *key, const json_t *v, req *r, char *msg, size_t msg_len) {
    static const char *efforts[] = { "low", "high", "max" };
    if (!strcmp(key, "thinking") || !strcmp(key, "ignore_eos")) {
        if (!json_is_boolean(v)) { snprintf(msg, msg_len, "\"%s\" must be true or false", key); return; }
        *(!strcmp(key, "thinking") ? &r->thinking : &r->ignore_eos) = json_is_true(v);
    } else if (!strcmp(key, "effort")) {
        for (int k = 0; k < 3 && json_is_string(v); k++)
            if (!strcmp(json_string_value(v), efforts[k])) r->effort = efforts[k];
        if (!r->effort) snprintf(msg, msg_len, "\"effort\" must be \"low\", \"high\" or \"max\"");
    } else if (!strcmp(key, "stop")) {
        const size_t n = json_is_array(v) ? json_array_size(v) : 1;
        char why[120] = "";
        for (size_t i = 0; i < n && !why[0]; i++) {
            const json_t *x = json_is_array(v) ? json_array_get(v, i) : v;
            if (!json_is_string(x) || i >= CLI_MAX_STOP) { cli_stop_add(&r->stop, "", why, sizeof why); break; }
            if (!(r->stop_buf[i] = strdup(json_string_value(x)))) snprintf(why, sizeof why, "out of memory");
            else cli_stop_add(&r->stop, r->stop_buf[i], why, sizeof why);
        }
        if (why[0]) snprintf(msg, msg_len, "bad stop: a string or an array of %s", why);
    } else if (!strcmp(key, "max_tokens")) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30))
            snprintf(msg, msg_len, "bad max_tokens: an integer from 0 to %d", 1 << 30);
        else r->max_tokens = json_integer_value(v);
    } else {
        /* a sampling option: the value goes through the flag's own parser and range */
        const cli_opt *o = cli_opt_find(cli_sample_opts, key);
        char val[64], why[160];
        if (json_is_integer(v)) snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v)) snprintf(val, sizeof val, "%.17g", json_real_value(v));
        else val[0] = 0;
        if (!o) {
            snprintf(msg, msg_len, "unknown key \"%.40s\" (a line takes prompt, ids or messages; thinking, effort, "
                     "max_tokens, stop, ignore_eos, seed, temperature, top_k, top_p, min_p, repeat_penalty, "
                     "frequency_penalty, presence_penalty)", key);
        } else if (!val[0] || cli_opt_set(o, &r->sp, val, why, sizeof why) != 0) {
            if (!val[0]) snprintf(why, sizeof why, "a number");
            snprintf(msg, msg_len, "bad %s: %s", key, why);
        }
    }
}

/* The prompt of a line: text, ids or a chat; msg set when it cannot be used. */
static void line_prompt(ms_engine *e, const json_t *p, const json_t *ids, const json_t *msgs, req *r, char *msg,
                        size_t msg_len) {
    if (msgs) {
        r->text = r->chat = 1;
        chat_prompt(e, msgs, r, msg, msg_len);
    } else if (p) {
        if (!json_is_string(p)) snprintf(msg, msg_len, "\"prompt\" must be a string");
        else if (!ms_engine_has_tokenizer(e)) snprintf(msg, msg_len, "the model has no tokenizer: give \"ids\"");
        else if (ms_tokenize(e, json_string_value(p), json_string_length(p), &r->prompt, &r->n_prompt) != MS_OK)
            snprintf(msg, msg_len, "the prompt cannot be tokenized");
        r->text = 1;
    } else if (!json_is_array(ids) || json_array_size(ids) == 0) {
        snprintf(msg, msg_len, "\"ids\" must be a non-empty array of token ids");
    } else {
        r->n_prompt = (int64_t)json_array_size(ids);
        r->prompt = malloc((size_t)r->n_prompt * sizeof *r->prompt);
        for (int64_t i = 0; r->prompt && i < r->n_prompt; i++) {
            const json_t *v = json_array_get(ids, (size_t)i);
            r->prompt[i] = json_is_integer(v) ? (int32_t)json_integer_value(v) : -1;
        }
    }
}

/* One input line into r (r->error set when it cannot be used). */
static void parse_line(ms_engine *e, const char *line, size_t len, const batch_opts *bo, req *r) {
    json_error_t jerr;
    json_t *j = json_loadb(line, len, 0, &jerr);
    char msg[400] = "";
    r->max_tokens = bo->max_tokens;
    r->ignore_eos = bo->ignore_eos;
    r->sp = bo->sp;
    cli_text_init(&r->seen);
    const json_t *p = j ? json_object_get(j, "prompt") : NULL, *ids = j ? json_object_get(j, "ids") : NULL;
    const json_t *msgs = j ? json_object_get(j, "messages") : NULL;
    if (!j || !json_is_object(j)) snprintf(msg, sizeof msg, "not a JSON object: %s", j ? "" : jerr.text);
    else if (!!p + !!ids + !!msgs != 1)
        snprintf(msg, sizeof msg, "give one of \"prompt\" (a string), \"ids\" and \"messages\" (arrays)");
    const char *key;
    json_t *v;
    if (!msg[0])
        json_object_foreach(j, key, v) {
            size_t k = 0;
            while (k < 3 && strcmp(key, PROMPT_KEYS[k])) k++;     /* the prompt keys: below */
            if (k == 3) line_key(key, v, r, msg, sizeof msg);
            if (msg[0]) break;
        }
    if (!msg[0]) line_prompt(e, p, ids, msgs, r, msg, sizeof msg);
    if (!msg[0] && r->n_prompt == 0) snprintf(msg, sizeof msg, "the prompt is empty");
    if (msg[0]) r->error = strdup(msg);
    json_decref(j);
}

/* spec: 1 speculating, 2 (or-ed) with --draft-tree 1 */
static void print_result(ms_engine *e, int64_t index, const req *r, int spec) {
    printf("{\"index\": %lld", (long long)index);
    if (r->error) {
        printf(", \"error\": ");
        cli_json_string(stdout, r->error, strlen(r->error));
        printf("}\n");
        return;
    }
    printf(", \"prompt_tokens\": %lld, \"cached_tokens\": %lld, \"generated_ids\": [", (long long)r->n_prompt,
           (long long)r->n_cached);
    for (int64_t i = 0; i < r->n_gen; i++) printf("%s%d", i ? ", " : "", r->gen[i]);
    printf("]");
    if (r->chat) {
        ms_reply rep;
        if (ms_chat_parse_reply(e, r->gen, r->n_gen, r->thinking, &rep) == MS_OK) {
            const int64_t cut = cli_stop_find(&r->stop, rep.content, strlen(rep.content), 0);
            printf(", \"content\": ");
            cli_json_string(stdout, rep.content, cut >= 0 ? (size_t)cut : strlen(rep.content));
            if (r->thinking) {
                printf(", \"reasoning\": ");
                cli_json_string(stdout, rep.reasoning, strlen(rep.reasoning));
            }
            ms_reply_free(&rep);
        }
    } else if (ms_engine_has_tokenizer(e)) {
        /* the text of the tokens generated, without a final EOS (as `run` prints) */
        ms_model_info info;
        ms_engine_info(e, &info);
        int64_t n = r->n_gen;
        if (r->text && n > 0 && ms_is_stop(e, r->gen[n - 1]) && !strcmp(r->finish, "stop")) n--;
        char *text = NULL;
        size_t len = 0;
        if (n > 0 && ms_detokenize(e, r->gen, n, &text, &len) == MS_OK) {
            const int64_t cut = cli_stop_find(&r->stop, text, len, 0);   /* the text ends where a stop begins */
            if (cut >= 0) len = (size_t)cut;
            printf(", \"text\": ");
            cli_json_string(stdout, text, len);
        } else {
            printf(", \"text\": \"\"");
        }
        free(text);
    }
    if (spec) {
        int64_t sum[2] = { 0, 0 };
        for (int i = 0; i < MS_DRAFT_SOURCES; i++) sum[0] += r->dec.drafted[i], sum[1] += r->dec.accepted[i];
        printf(", \"decode_passes\": %lld, \"drafted\": %lld, \"accepted\": %lld", (long long)r->passes,
               (long long)sum[0], (long long)sum[1]);
        for (int k = 0; k < 2; k++) {
            printf(", \"%s_by_source\": {", k ? "accepted" : "drafted");
            for (int i = 0; i < MS_DRAFT_SOURCES; i++)
                printf("%s\"%s\": %lld", i ? ", " : "", ms_draft_source_name(i),
                       (long long)(k ? r->dec.accepted[i] : r->dec.drafted[i]));
            printf("}");
        }
        if (spec & 2)
            printf(", \"tree_passes\": %lld, \"tree_drafted\": %lld, \"tree_accepted\": %lld",
                   (long long)r->dec.tree_passes, (long long)r->dec.tree_drafted, (long long)r->dec.tree_accepted);
    }
    printf(", \"finish_reason\": \"%s\"}\n", r->finish);
}

/* The picker of a slot's request (ms_pick_fn, user: the slot): the next
 * token sampled; the request ends on EOS (text prompts, unless ignore_eos), a
 * stop string or at its limit (*stop). */
static int32_t slot_picker(void *user, const float *logits, const int32_t *hist, int64_t n_hist, int *stop) {
    slot *sl = user;
    req *r = sl->r;
    const int32_t id = ms_sampler_next(sl->smp, logits, hist, n_hist);
    r->gen[r->n_gen++] = id;
    if (r->stop.n > 0) cli_text_add(&r->seen, sl->e, id, NULL);
    if (r->text && !r->ignore_eos && (id == sl->eos || ms_is_stop(sl->e, id))) r->finish = "stop";
    else if (r->seen.cut >= 0) r->finish = "stop";          /* a stop string completed */
    else if (r->n_gen >= r->max_tokens) r->finish = "length";
    *stop = r->finish != NULL;
    return id;
}

/* The slot's next token from its session's logits. */
static void pick(slot *sl) {
    int64_t n_hist = 0;
    const int32_t *hist = ms_session_tokens(sl->ses, &n_hist);
    int stop = 0;
    sl->pending = slot_picker(sl, ms_session_logits(sl->ses), hist, n_hist, &stop);
}

static void release(slot *sl) {
    ms_decode_counts c;
    ms_session_decode_counts(sl->ses, &c);
    for (int i = 0; i < MS_DRAFT_SOURCES; i++) {
        sl->r->dec.drafted[i] = c.drafted[i] - sl->dec0.drafted[i];
        sl->r->dec.accepted[i] = c.accepted[i] - sl->dec0.accepted[i];
    }
    sl->r->dec.tree_passes = c.tree_passes - sl->dec0.tree_passes;
    sl->r->dec.tree_drafted = c.tree_drafted - sl->dec0.tree_drafted;
    sl->r->dec.tree_accepted = c.tree_accepted - sl->dec0.tree_accepted;
    sl->r->done = 1;
    ms_sampler_close(sl->smp);
    sl->smp = NULL;
    sl->r = NULL;
}

/* What the whole line allows checked once its prompt is known. */
static void check_request(const ms_model_info *info, req *r) {
    if (!r->error && r->n_prompt + r->max_tokens > info->max_context) {
        char msg[160];
        snprintf(msg, sizeof msg, "%lld prompt + %lld output tokens exceed the context (%lld; --max-context)",
                 (long long)r->n_prompt, (long long)r->max_tokens, (long long)info->max_context);
        r->error = strdup(msg);
    }
    for (int64_t k = 0; !r->error && k < r->n_prompt; k++)
        if (r->prompt[k] < 0 || r->prompt[k] >= info->n_vocab) r->error = strdup("a token id is out of range");
    if (!r->error && !(r->gen = malloc((size_t)(r->max_tokens + 1) * sizeof *r->gen))) r->error = strdup("out of memory");
    if (!r->error && r->max_tokens == 0) { r->finish = "length"; r->done = 1; }
    if (r->error) r->done = 1;
}

/* The requests, one per non-empty line of all[0..len): every byte is read (a
 * NUL inside a line makes that line's error, not the end of the input). */
static ms_status read_requests(ms_engine *e, char *all, size_t len, const batch_opts *o, req **out, int64_t *n_out) {
    ms_model_info info;
    ms_engine_info(e, &info);
    int64_t n_req = 0, cap = 0;
    req *reqs = NULL;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(all + at, '\n', len - at);
        const size_t end = nl ? (size_t)(nl - all) : len, from = at;
        at = end + 1;
        size_t k = from;
        while (k < end && (all[k] == ' ' || all[k] == '\t' || all[k] == '\r')) k++;
        if (k == end) continue;
        if (n_req == cap) {
            cap = cap ? 2 * cap : 64;
            req *grown = realloc(reqs, (size_t)cap * sizeof *reqs);
            if (!grown) { *out = reqs; *n_out = n_req; return MS_E_NOMEM; }
            reqs = grown;
        }
        req *r = &reqs[n_req++];
        memset(r, 0, sizeof *r);
        parse_line(e, all + from, end - from, o, r);
        check_request(&info, r);
    }
    *out = reqs;
    *n_out = n_req;
    return MS_OK;
}

/* The slots and the arrays of one ms_sessions_feed or ms_sessions_decode call. */
typedef struct batch_run {
    int P;
    int speculate;              /* --speculate K (0: none) */
    slot *sl;
    ms_session **ss;
    const int32_t **ids;
    int64_t *n;
    int *who;
    int32_t *pending;           /* ms_sessions_decode: [P] */
    int *n_draft;
    void **user;
    int32_t **out, *out_buf;    /* [P] x [speculate + 1] */
    req *reqs;
    int64_t n_req, next_req, printed;
} batch_run;

/* Free slots take the next requests, each from the longest prefix of its
 * prompt its session or the prompt cache holds; a prompt held whole picks at
 * once. */
static ms_status fill_slots(batch_run *b, const ms_engine *e, const ms_model_info *info) {
    for (int i = 0; i < b->P; i++) {
        slot *sl = &b->sl[i];
        while (!sl->r && b->next_req < b->n_req) {
            req *r = &b->reqs[b->next_req++];
            if (r->done) continue;
            char msg[256];
            if (!(sl->smp = ms_sampler_open(&r->sp, info->n_vocab, msg, sizeof msg))) {
                fprintf(stderr, "moestream: %s\n", msg);
                return MS_E_USAGE;
            }
            r->seen.stop = &r->stop;        /* the requests do not move any more */
            ms_session_reuse(sl->ses, r->prompt, r->n_prompt, &r->n_cached);
            *sl = (slot){ sl->ses, r, sl->smp, r->n_cached, -1, 0, e, (int32_t)info->eos_id, { 0 } };
            ms_session_decode_counts(sl->ses, &sl->dec0);
            if (sl->at == r->n_prompt) {
                pick(sl);
                if (r->finish) release(sl);
            }
        }
    }
    return MS_OK;
}

/* --speculate, no prompt being read: one ms_sessions_decode call for every
 * busy slot (each drafts up to --speculate ids, fewer before its limit, all
 * verified in one pass; its picker ends it). 0 when it fails. */
static int spec_step(batch_run *b, ms_status *st) {
    int k = 0;
    for (int i = 0; i < b->P; i++) {
        slot *s = &b->sl[i];
        if (!s->r) continue;
        const int64_t room = s->r->max_tokens - s->r->n_gen - 1;
        b->ss[k] = s->ses;
        b->pending[k] = s->pending;
        b->n_draft[k] = room < b->speculate ? (int)room : b->speculate;
        b->user[k] = s;
        b->out[k] = b->out_buf + (int64_t)k * (b->speculate + 1);
        s->r->passes += s->pending >= 0;
        b->who[k++] = i;
    }
    if ((*st = ms_sessions_decode(b->ss, k, b->pending, b->n_draft, slot_picker, b->user, b->out, b->n)) != MS_OK) {
        fprintf(stderr, "moestream: %s: %s\n", ms_status_name(*st), ms_session_error(b->ss[0]));
        return 0;
    }
    for (int q = 0; q < k; q++) {
        slot *s = &b->sl[b->who[q]];
        s->pending = b->out[q][b->n[q] - 1];
        if (s->r->finish) release(s);
    }
    return 1;
}

/* One pass over the weights for every busy slot: the decoding ones' last
 * token and prompt pieces up to the engine's chunk (with --speculate and no
 * prompt left to read: spec_step). 0 when nothing is left. */
static int step(batch_run *b, const ms_engine *e, const ms_model_info *info, ms_status *st) {
    int k = 0, n_dec = 0, busy = 0;
    for (int i = 0; i < b->P; i++) n_dec += b->sl[i].r && b->sl[i].pending >= 0;
    for (int i = 0; i < b->P; i++) busy += b->sl[i].r != NULL;
    if (b->speculate > 0 && busy > 0 && n_dec == busy) return spec_step(b, st);
    int64_t room = info->prefill_chunk - n_dec;
    if (room < 1) room = 1;
    for (int i = 0; i < b->P; i++) {
        slot *s = &b->sl[i];
        if (!s->r) continue;
        const int64_t left = s->r->n_prompt - s->at;
        if (left > 0 && room > 0) {
            /* up to the prompt cache's next mark, where a snapshot is kept */
            s->mark = ms_session_prompt_mark(s->ses, s->r->prompt, s->r->n_prompt, s->at);
            b->n[k] = s->mark - s->at < room ? s->mark - s->at : room;
            room -= b->n[k];
            b->ids[k] = s->r->prompt + s->at;
        } else if (s->pending >= 0) {
            b->n[k] = 1;
            b->ids[k] = &s->pending;
            s->r->passes++;
        } else {
            continue;
        }
        b->ss[k] = s->ses;
        b->who[k++] = i;
    }
    if (k == 0) return 0;
    if ((*st = ms_sessions_feed(b->ss, k, b->ids, b->n)) != MS_OK) {
        fprintf(stderr, "moestream: %s: %s\n", ms_status_name(*st), ms_session_error(b->ss[0]));
        return 0;
    }
    for (int q = 0; q < k; q++) {
        slot *s = &b->sl[b->who[q]];
        if (s->pending < 0) {               /* a prompt piece */
            s->at += b->n[q];
            ms_session_remember(s->ses, s->at != s->mark);     /* a piece's end: if there is room */
            if (s->at < s->r->n_prompt) continue;
        }
        pick(s);
        if (s->r->finish) release(s);
    }
    return 1;
}

static ms_status batch_open(batch_run *b, ms_engine *e, int P, int speculate) {
    b->P = P;
    b->speculate = speculate;
    b->sl = calloc((size_t)P, sizeof *b->sl);
    b->ss = calloc((size_t)P, sizeof *b->ss);
    b->ids = calloc((size_t)P, sizeof *b->ids);
    b->n = calloc((size_t)P, sizeof *b->n);
    b->who = calloc((size_t)P, sizeof *b->who);
    b->pending = calloc((size_t)P, sizeof *b->pending);
    b->n_draft = calloc((size_t)P, sizeof *b->n_draft);
    b->user = calloc((size_t)P, sizeof *b->user);
    b->out = calloc((size_t)P, sizeof *b->out);
    b->out_buf = calloc((size_t)P * (size_t)(speculate + 1), sizeof *b->out_buf);
    if (!b->sl || !b->ss || !b->ids || !b->n || !b->who || !b->pending || !b->n_draft || !b->user || !b->out ||
        !b->out_buf) {
        fprintf(stderr, "moestream: out of memory\n");
        return MS_E_NOMEM;
    }
    ms_status st = MS_OK;
    for (int i = 0; i < P && st == MS_OK; i++) st = ms_session_open(e, &b->sl[i].ses);
    if (st != MS_OK) fprintf(stderr, "moestream: %s\n", ms_engine_error(e));
    return st;
}

static void batch_close(batch_run *b) {
    for (int i = 0; b->sl && i < b->P; i++) {
        ms_sampler_close(b->sl[i].smp);
        ms_session_close(b->sl[i].ses);
    }
    for (int64_t i = 0; i < b->n_req; i++) {
        free(b->reqs[i].prompt);
        free(b->reqs[i].gen);
        free(b->reqs[i].error);
        free(b->reqs[i].seen.all);
        for (int k = 0; k < CLI_MAX_STOP; k++) free(b->reqs[i].stop_buf[k]);
    }
    free(b->reqs);
    free(b->sl);
    free(b->ss);
    free(b->ids);
    free(b->n);
    free(b->who);
    free(b->pending);
    free(b->n_draft);
    free(b->user);
    free(b->out);
    free(b->out_buf);
}

static int parse_batch(int argc, char **argv, batch_opts *o) {
    memset(o, 0, sizeof *o);
    cli_opts_generating(&o->c);
    o->max_tokens = 64;
    o->sp = ms_sample_default_params();
    const cli_cmd cmd = { "batch", "MODEL_DIR [--input FILE] [--parallel N] [options]",
                          "JSON lines in ({\"prompt\"|\"ids\"|\"messages\", and any of \"max_tokens\", \"seed\", \"stop\",\n"
                          "the sampling options spelled with '_', \"ignore_eos\", \"thinking\", \"effort\"}), one result\n"
                          "line each out, in input order; N requests decoded together, each as `run` gives it.\n",
                          &o->c.model_dir, 1,
                          { { "options", batch_table, o }, { "sampling (the lines' defaults)", cli_sample_opts, &o->sp },
                            { "engine", cli_common_opts, &o->c }, { NULL, NULL, NULL } } };
    return cli_parse(&cmd, argc, argv);
}

int cmd_batch(int argc, char **argv) {
    batch_opts o;
    int rc = parse_batch(argc, argv, &o);
    if (rc != 0) return rc > 0 ? EXIT_OK : EXIT_USAGE;
    if (o.c.parallel < 1) o.c.parallel = 1;
    FILE *in = o.input && strcmp(o.input, "-") ? fopen(o.input, "rb") : stdin;
    size_t in_len = 0;
    char *all = in ? cli_read_all(in, &in_len) : NULL;
    if (in && in != stdin) fclose(in);
    if (!all) { fprintf(stderr, "moestream: cannot read %s\n", o.input ? o.input : "stdin"); return EXIT_USAGE; }
    ms_engine *e;
    ms_status st = cli_open(&o.c, &e);
    if (st != MS_OK) { free(all); return cli_exit_code(st); }
    ms_model_info info;
    ms_engine_info(e, &info);
    batch_run b;
    memset(&b, 0, sizeof b);
    st = read_requests(e, all, in_len, &o, &b.reqs, &b.n_req);
    free(all);
    if (st == MS_OK) st = batch_open(&b, e, o.c.parallel, o.c.speculate);
    rc = st == MS_OK ? EXIT_OK : cli_exit_code(st);
    while (st == MS_OK) {
        st = fill_slots(&b, e, &info);
        /* print what is finished, in order */
        while (b.printed < b.n_req && b.reqs[b.printed].done)
            print_result(e, b.printed, &b.reqs[b.printed], (o.c.speculate > 0) | (o.c.draft_tree ? 2 : 0)), b.printed++;
        fflush(stdout);
        if (st != MS_OK || !step(&b, e, &info, &st)) break;
    }
    while (rc == EXIT_OK && b.printed < b.n_req && b.reqs[b.printed].done)
        print_result(e, b.printed, &b.reqs[b.printed], (o.c.speculate > 0) | (o.c.draft_tree ? 2 : 0)), b.printed++;
    if (rc == EXIT_OK && st != MS_OK) rc = cli_exit_code(st);
    if (!o.c.quiet) {
        ms_stats stt;
        ms_engine_stats(e, &stt);
        cli_print_stats_human(stderr, &stt);
    }
    batch_close(&b);
    ms_engine_close(e);
    return rc;
}
