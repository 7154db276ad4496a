/* cli/batch.c - `moestream batch`: many prompts, generated together.
 *
 * Reads JSON lines (a file or stdin), one request per line:
 *   {"prompt": "text"}, {"ids": [1, 2, 3]} or {"messages": [{"role",
 *   "content"}, ...], "thinking": false} (a chat in the K3 format, rendered
 *   with the assistant's opening), optionally "max_tokens" and "seed" (else
 *   the command's --max-tokens / --seed).
 * Writes one JSON line per request, in input order:
 *   {"index", "prompt_tokens", "generated_ids", "text" (with a tokenizer;
 *    chats: "content" and, thinking, "reasoning"), "finish_reason": "stop" |
 *    "length"} or {"index", "error"}.
 * Up to --parallel N requests are in flight, each in its own session; one
 * ms_sessions_feed call per step reads every decoding request's last token
 * and a prompt piece, so a streamed model is read once per step for all of
 * them. A request's tokens are exactly those of `moestream run` with the
 * same prompt, --max-tokens and --seed (the engine's bits do not depend on
 * the company; each request has its own sampler): text prompts stop at EOS
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct req {
    int32_t *prompt;
    int64_t n_prompt, max_tokens;
    int text;                   /* a text or chat prompt: stops at EOS */
    int chat, thinking;         /* a chat: the answer is parsed */
    uint64_t seed;
    char *error;                /* the line could not be used */
    /* results */
    int32_t *gen;
    int64_t n_gen;
    const char *finish;
    int done;
    int64_t n_cached;           /* prompt ids restored from the prompt cache (or the session) */
} req;

typedef struct slot {
    ms_session *ses;
    req *r;                     /* NULL: free */
    ms_sampler *smp;
    int64_t at;                 /* prompt ids read */
    int32_t pending;            /* picked, not fed (-1: none) */
    int64_t mark;               /* where the prompt piece being fed ends (ms_session_prompt_mark) */
} slot;

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
    const ms_chat_format fmt = { NULL, r->thinking, NULL, 1 };
    if (!msg[0]) ms_chat_tokens(e, m, (int64_t)n, &fmt, 0, &r->prompt, &r->n_prompt, msg, msg_len);
    free(m);
}

/* One input line into r (r->error set when it cannot be used). */
static void parse_line(ms_engine *e, const char *line, int64_t def_max, uint64_t def_seed, req *r) {
    json_error_t jerr;
    json_t *j = json_loads(line, 0, &jerr);
    char msg[256];
    r->max_tokens = def_max;
    r->seed = def_seed;
    const json_t *p = j ? json_object_get(j, "prompt") : NULL, *ids = j ? json_object_get(j, "ids") : NULL;
    const json_t *msgs = j ? json_object_get(j, "messages") : NULL, *th = j ? json_object_get(j, "thinking") : NULL;
    const json_t *mt = j ? json_object_get(j, "max_tokens") : NULL, *sd = j ? json_object_get(j, "seed") : NULL;
    if (!j || !json_is_object(j)) snprintf(msg, sizeof msg, "not a JSON object: %s", j ? "" : jerr.text);
    else if (!!p + !!ids + !!msgs != 1)
        snprintf(msg, sizeof msg, "give one of \"prompt\" (a string), \"ids\" and \"messages\" (arrays)");
    else if (th && !json_is_boolean(th)) snprintf(msg, sizeof msg, "\"thinking\" must be true or false");
    else if (mt && (!json_is_integer(mt) || json_integer_value(mt) < 0)) snprintf(msg, sizeof msg, "bad max_tokens");
    else if (sd && (!json_is_integer(sd) || json_integer_value(sd) < 0)) snprintf(msg, sizeof msg, "bad seed");
    else msg[0] = 0;
    if (!msg[0]) {
        if (mt) r->max_tokens = json_integer_value(mt);
        if (sd) r->seed = (uint64_t)json_integer_value(sd);
        if (msgs) {
            r->text = r->chat = 1;
            r->thinking = th && json_is_true(th);
            chat_prompt(e, msgs, r, msg, sizeof msg);
        } else if (p) {
            if (!json_is_string(p)) snprintf(msg, sizeof msg, "\"prompt\" must be a string");
            else if (!ms_engine_has_tokenizer(e)) snprintf(msg, sizeof msg, "the model has no tokenizer: give \"ids\"");
            else if (ms_tokenize(e, json_string_value(p), json_string_length(p), &r->prompt, &r->n_prompt) != MS_OK)
                snprintf(msg, sizeof msg, "the prompt cannot be tokenized");
            r->text = 1;
        } else if (!json_is_array(ids) || json_array_size(ids) == 0) {
            snprintf(msg, sizeof msg, "\"ids\" must be a non-empty array of token ids");
        } else {
            r->n_prompt = (int64_t)json_array_size(ids);
            r->prompt = malloc((size_t)r->n_prompt * sizeof *r->prompt);
            for (int64_t i = 0; r->prompt && i < r->n_prompt; i++) {
                const json_t *v = json_array_get(ids, (size_t)i);
                r->prompt[i] = json_is_integer(v) ? (int32_t)json_integer_value(v) : -1;
            }
        }
    }
    if (!msg[0] && r->n_prompt == 0) snprintf(msg, sizeof msg, "the prompt is empty");
    if (msg[0]) r->error = strdup(msg);
    json_decref(j);
}

static void print_result(ms_engine *e, int64_t index, const req *r) {
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
            printf(", \"content\": ");
            cli_json_string(stdout, rep.content, strlen(rep.content));
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
        if (r->text && n > 0 && r->gen[n - 1] == (int32_t)info.eos_id && !strcmp(r->finish, "stop")) n--;
        char *text = NULL;
        size_t len = 0;
        if (n > 0 && ms_detokenize(e, r->gen, n, &text, &len) == MS_OK) {
            printf(", \"text\": ");
            cli_json_string(stdout, text, len);
        } else {
            printf(", \"text\": \"\"");
        }
        free(text);
    }
    printf(", \"finish_reason\": \"%s\"}\n", r->finish);
}

/* The slot's next token; the request ends on EOS (text prompts, unless
 * ignore_eos) or at its limit. */
static void pick(slot *sl, int32_t eos, int ignore_eos) {
    req *r = sl->r;
    int64_t n_hist = 0;
    const int32_t *hist = ms_session_tokens(sl->ses, &n_hist);
    const int32_t id = ms_sampler_next(sl->smp, ms_session_logits(sl->ses), hist, n_hist);
    r->gen[r->n_gen++] = id;
    sl->pending = id;
    if (r->text && !ignore_eos && id == eos) r->finish = "stop";
    else if (r->n_gen >= r->max_tokens) r->finish = "length";
}

static void release(slot *sl) {
    sl->r->done = 1;
    ms_sampler_close(sl->smp);
    sl->smp = NULL;
    sl->r = NULL;
}

/* sl (its sampler open) takes r from the longest prefix of r's prompt its
 * session or the prompt cache holds; a prompt held whole picks at once. */
static void start(slot *sl, req *r, int32_t eos, int ignore_eos) {
    ms_session_reuse(sl->ses, r->prompt, r->n_prompt, &r->n_cached);
    *sl = (slot){ sl->ses, r, sl->smp, r->n_cached, -1, 0 };
    if (sl->at == r->n_prompt) pick(sl, eos, ignore_eos);
    if (r->finish) release(sl);
}

/* The prompt ids sl reads next, at most room: up to the prompt cache's next
 * mark (sl->mark), where a snapshot is kept. */
static int64_t piece(slot *sl, int64_t room) {
    sl->mark = ms_session_prompt_mark(sl->ses, sl->r->prompt, sl->r->n_prompt, sl->at);
    return sl->mark - sl->at < room ? sl->mark - sl->at : room;
}

int cmd_batch(int argc, char **argv) {
    cli_opts c;
    memset(&c, 0, sizeof c);
    ms_sample_params sp = ms_sample_default_params();
    const char *input = NULL;
    int64_t max_tokens = 64;
    int ignore_eos = 0;
    for (int i = 0; i < argc; i++) {
        int r = cli_parse_common(&c, argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if ((r = cli_parse_sample(&sp, a, v)) != 0) {
            if (r < 0) return EXIT_USAGE;
            i++;
            continue;
        }
        if (!strcmp(a, "--ignore-eos")) { ignore_eos = 1; continue; }
        if (!v) { fprintf(stderr, "moestream: unknown option or missing value '%s'\n", a); return EXIT_USAGE; }
        i++;
        if (!strcmp(a, "--input")) input = v;
        else if (!strcmp(a, "--max-tokens") || !strcmp(a, "--gen")) {
            char *end;
            max_tokens = strtoll(v, &end, 10);
            if (*end || max_tokens < 0) { fprintf(stderr, "moestream: bad %s '%s'\n", a, v); return EXIT_USAGE; }
        } else { fprintf(stderr, "moestream: unknown option '%s'\n", a); return EXIT_USAGE; }
    }
    if (c.parallel < 1) c.parallel = 1;
    FILE *in = input && strcmp(input, "-") ? fopen(input, "rb") : stdin;
    size_t in_len = 0;
    char *all = in ? cli_read_all(in, &in_len) : NULL;
    if (in && in != stdin) fclose(in);
    if (!all) { fprintf(stderr, "moestream: cannot read %s\n", input ? input : "stdin"); return EXIT_USAGE; }
    ms_engine *e;
    ms_status st = cli_open(&c, &e);
    if (st != MS_OK) { free(all); return cli_exit_code(st); }
    ms_model_info info;
    ms_engine_info(e, &info);

    /* the requests, one per non-empty line */
    int64_t n_req = 0, cap = 0;
    req *reqs = NULL;
    for (char *line = all, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (strspn(line, " \t\r") == strlen(line)) continue;
        if (n_req == cap) {
            cap = cap ? 2 * cap : 64;
            req *grown = realloc(reqs, (size_t)cap * sizeof *reqs);
            if (!grown) { st = MS_E_NOMEM; break; }
            reqs = grown;
        }
        req *r = &reqs[n_req++];
        memset(r, 0, sizeof *r);
        parse_line(e, line, max_tokens, sp.seed, r);
        if (!r->error && r->n_prompt + r->max_tokens > info.max_context) {
            char msg[160];
            snprintf(msg, sizeof msg, "%lld prompt + %lld output tokens exceed the context (%lld; --max-context)",
                     (long long)r->n_prompt, (long long)r->max_tokens, (long long)info.max_context);
            r->error = strdup(msg);
        }
        for (int64_t k = 0; !r->error && k < r->n_prompt; k++)
            if (r->prompt[k] < 0 || r->prompt[k] >= info.n_vocab) r->error = strdup("a token id is out of range");
        if (!r->error && !(r->gen = malloc((size_t)(r->max_tokens + 1) * sizeof *r->gen))) r->error = strdup("out of memory");
        if (!r->error && r->max_tokens == 0) { r->finish = "length"; r->done = 1; }
        if (r->error) r->done = 1;
    }
    free(all);

    const int P = c.parallel;
    slot *sl = calloc((size_t)P, sizeof *sl);
    ms_session **ss = calloc((size_t)P, sizeof *ss);
    const int32_t **ids = calloc((size_t)P, sizeof *ids);
    int64_t *n = calloc((size_t)P, sizeof *n);
    int *who = calloc((size_t)P, sizeof *who);
    if (!sl || !ss || !ids || !n || !who) st = MS_E_NOMEM;
    for (int i = 0; i < P && st == MS_OK; i++) st = ms_session_open(e, &sl[i].ses);
    if (st != MS_OK) fprintf(stderr, "moestream: %s\n", st == MS_E_NOMEM ? "out of memory" : ms_engine_error(e));
    int64_t next_req = 0, printed = 0;
    int rc = st == MS_OK ? EXIT_OK : cli_exit_code(st);
    while (st == MS_OK) {
        /* free slots take the next requests */
        for (int i = 0; i < P; i++) {
            while (!sl[i].r && next_req < n_req) {
                req *r = &reqs[next_req++];
                if (r->done) continue;
                ms_sample_params p = sp;
                p.seed = r->seed;
                char msg[256];
                if (!(sl[i].smp = ms_sampler_open(&p, info.n_vocab, msg, sizeof msg))) {
                    fprintf(stderr, "moestream: %s\n", msg);
                    st = MS_E_USAGE;
                    break;
                }
                start(&sl[i], r, (int32_t)info.eos_id, ignore_eos);
            }
        }
        /* print what is finished, in order */
        while (printed < n_req && reqs[printed].done) print_result(e, printed, &reqs[printed]), printed++;
        fflush(stdout);
        int k = 0, n_dec = 0;
        for (int i = 0; i < P; i++) n_dec += sl[i].r && sl[i].pending >= 0;
        int64_t room = info.prefill_chunk - n_dec;
        if (room < 1) room = 1;
        for (int i = 0; i < P && st == MS_OK; i++) {
            slot *s = &sl[i];
            if (!s->r) continue;
            const int64_t left = s->r->n_prompt - s->at;
            if (left > 0 && room > 0) {
                n[k] = piece(s, room);
                room -= n[k];
                ids[k] = s->r->prompt + s->at;
            } else if (s->pending >= 0) {
                n[k] = 1;
                ids[k] = &s->pending;
            } else {
                continue;
            }
            ss[k] = s->ses;
            who[k++] = i;
        }
        if (k == 0 || st != MS_OK) break;
        st = ms_sessions_feed(ss, k, ids, n);
        if (st != MS_OK) {
            fprintf(stderr, "moestream: %s: %s\n", ms_status_name(st), ms_session_error(ss[0]));
            rc = cli_exit_code(st);
            break;
        }
        for (int q = 0; q < k; q++) {
            slot *s = &sl[who[q]];
            if (s->pending < 0) {               /* a prompt piece */
                s->at += n[q];
                ms_session_remember(s->ses, s->at != s->mark);     /* a piece's end: if there is room */
                if (s->at < s->r->n_prompt) continue;
            }
            pick(s, (int32_t)info.eos_id, ignore_eos);
            if (s->r->finish) release(s);
        }
    }
    while (rc == EXIT_OK && printed < n_req && reqs[printed].done) print_result(e, printed, &reqs[printed]), printed++;
    if (rc == EXIT_OK && st != MS_OK) rc = cli_exit_code(st);
    if (!c.quiet) {
        ms_stats stt;
        ms_engine_stats(e, &stt);
        cli_print_stats_human(stderr, &stt);
    }
    for (int i = 0; sl && i < P; i++) {
        ms_sampler_close(sl[i].smp);
        ms_session_close(sl[i].ses);
    }
    for (int64_t i = 0; i < n_req; i++) {
        free(reqs[i].prompt);
        free(reqs[i].gen);
        free(reqs[i].error);
    }
    free(reqs);
    free(sl);
    free(ss);
    free(ids);
    free(n);
    free(who);
    ms_engine_close(e);
    return rc;
}
