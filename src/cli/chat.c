/* cli/chat.c - `moestream chat`: an interactive multi-turn chat in the K3
 * chat format. The session keeps its KDA state and MLA cache between turns:
 * each turn feeds only the ids that close the previous answer plus the new
 * user message (ms_chat_close + ms_chat_tokens(append)), never the history.
 *
 * Lines typed are user messages; "/exit" quits, "/reset" starts over,
 * "/save PATH" saves the session. Reasoning is shown dimmed with
 * --show-reasoning, hidden otherwise.
 */
#include "moestream.h"

#include "cli/cmds.h"
#include "cli/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct chat_opts {
    cli_opts c;
    const char *system;
    int thinking, show_reasoning;
    const char *effort;
    int64_t max_tokens;
    ms_sample_params sp;
} chat_opts;

static int parse_chat(int argc, char **argv, chat_opts *o) {
    memset(o, 0, sizeof *o);
    o->max_tokens = 512;
    o->sp = ms_sample_default_params();
    for (int i = 0; i < argc; i++) {
        int r = cli_parse_common(&o->c, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--show-reasoning")) { o->show_reasoning = 1; continue; }
        if (!strcmp(a, "--hide-reasoning")) { o->show_reasoning = 0; continue; }
        if ((r = cli_parse_sample(&o->sp, a, v)) != 0) {
            if (r < 0) return -1;
            i++;
            continue;
        }
        if (!v) { fprintf(stderr, "moestream: unknown option or missing value '%s'\n", a); return -1; }
        i++;
        if (!strcmp(a, "--system")) o->system = v;
        else if (!strcmp(a, "--thinking")) {
            if (!strcmp(v, "on")) o->thinking = 1;
            else if (!strcmp(v, "off")) o->thinking = 0;
            else { fprintf(stderr, "moestream: --thinking on|off\n"); return -1; }
        }
        else if (!strcmp(a, "--effort")) o->effort = v;
        else if (!strcmp(a, "--max-tokens")) o->max_tokens = strtoll(v, NULL, 10);
        else { fprintf(stderr, "moestream: unknown option '%s'\n", a); return -1; }
    }
    return 0;
}

/* Print the part of `s` (len bytes) beyond *done that is complete UTF-8. */
static void show_new(FILE *out, const char *s, size_t len, size_t *done, const char *pre, const char *post) {
    size_t ready = cli_utf8_complete(s, len);
    if (ready > *done) {
        fputs(pre, out);
        fwrite(s + *done, 1, ready - *done, out);
        fputs(post, out);
        fflush(out);
        *done = ready;
    }
}

int cmd_chat(int argc, char **argv) {
    chat_opts o;
    if (parse_chat(argc, argv, &o) != 0) return EXIT_USAGE;
    ms_engine *e;
    ms_status st = cli_open(&o.c, &e);
    if (st != MS_OK) return cli_exit_code(st);
    char msg[512];
    if (!ms_engine_has_tokenizer(e)) {
        fprintf(stderr, "moestream: %s has no tokenizer (tiktoken.model)\n", o.c.model_dir);
        ms_engine_close(e);
        return EXIT_USAGE;
    }
    ms_model_info info;
    ms_engine_info(e, &info);
    ms_sampler *smp = ms_sampler_open(&o.sp, info.n_vocab, msg, sizeof msg);
    ms_session *s = NULL;
    if (!smp || ms_session_open(e, &s) != MS_OK) {
        fprintf(stderr, "moestream: %s\n", smp ? ms_engine_error(e) : msg);
        ms_sampler_close(smp);
        ms_engine_close(e);
        return EXIT_RUNTIME;
    }
    const int32_t eos = (int32_t)info.eos_id;
    ms_chat_format fmt = { NULL, o.thinking, o.effort, 1 };
    int32_t *gen = malloc((size_t)(o.max_tokens + 1) * sizeof *gen);
    int32_t step[32];
    int64_t n_gen = 0;
    int first = 1, rc = EXIT_OK, interactive = isatty(0);
    char *line = NULL;
    size_t line_cap = 0;
    for (;;) {
        if (interactive) { fputs("> ", stdout); fflush(stdout); }
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) break;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
        if (got == 0) continue;
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) { ms_session_reset(s); first = 1; n_gen = 0; continue; }
        if (!strncmp(line, "/save ", 6)) {
            if (ms_session_save(s, line + 6) != MS_OK) fprintf(stderr, "moestream: %s\n", ms_session_error(s));
            continue;
        }
        /* the ids of this turn: close the previous answer, then the new message */
        int32_t *ids = NULL, *close_ids = NULL;
        int64_t n_ids = 0, n_close = 0;
        ms_message msgs[2];
        int n_msgs = 0;
        memset(msgs, 0, sizeof msgs);
        if (first && o.system) { msgs[n_msgs].role = "system"; msgs[n_msgs].content = o.system; n_msgs++; }
        msgs[n_msgs].role = "user";
        msgs[n_msgs].content = line;
        n_msgs++;
        if (!first && (st = ms_chat_close(e, gen, n_gen, o.thinking, &close_ids, &n_close)) != MS_OK) {
            fprintf(stderr, "moestream: cannot close the previous turn\n");
            rc = EXIT_RUNTIME;
            break;
        }
        if ((st = ms_chat_tokens(e, msgs, n_msgs, &fmt, !first, &ids, &n_ids, msg, sizeof msg)) != MS_OK) {
            fprintf(stderr, "moestream: %s\n", msg);
            free(close_ids);
            rc = EXIT_RUNTIME;
            break;
        }
        if (n_close > 0) st = ms_session_feed(s, close_ids, n_close, NULL);
        if (st == MS_OK) st = ms_session_feed(s, ids, n_ids, NULL);
        free(ids);
        free(close_ids);
        first = 0;
        n_gen = 0;
        size_t shown_r = 0, shown_c = 0;
        /* decode steps (ms_session_decode): the picker stops at EOS and at
         * max_tokens; every token but EOS is fed, as in the one-token loop */
        cli_pick cp = { smp, gen, 0, o.max_tokens, eos, 1, 0 };
        int32_t pending = -1;
        while (st == MS_OK && !cp.stopped && cp.n_gen < o.max_tokens) {
            int64_t before = cp.n_gen, n_step = 0;
            int64_t room = o.max_tokens - cp.n_gen - 1;
            int n_draft = o.c.speculate < room ? o.c.speculate : (int)room;
            st = ms_session_decode(s, pending, n_draft, cli_picker, &cp, step, &n_step);
            if (n_step > 0) pending = step[n_step - 1];
            for (int64_t i = before + 1; i <= cp.n_gen; i++) {
                ms_reply r;
                if (ms_chat_parse_reply(e, gen, i, o.thinking, &r) == MS_OK) {
                    if (o.show_reasoning) show_new(stdout, r.reasoning, strlen(r.reasoning), &shown_r, "\033[2m", "\033[0m");
                    show_new(stdout, r.content, strlen(r.content), &shown_c, "", "");
                    ms_reply_free(&r);
                }
            }
        }
        n_gen = cp.n_gen;
        /* the length limit: the last token is fed now, as the one-token loop did */
        if (st == MS_OK && n_gen > 0 && gen[n_gen - 1] != eos) st = ms_session_feed(s, &pending, 1, NULL);
        fputc('\n', stdout);
        fflush(stdout);
        if (st != MS_OK) {
            fprintf(stderr, "moestream: %s: %s\n", ms_status_name(st), ms_session_error(s));
            rc = cli_exit_code(st);
            break;
        }
        /* the answer's last id is fed with the next turn's closing ids */
        if (n_gen > 0 && gen[n_gen - 1] == eos) {
            if ((st = ms_session_feed(s, &gen[n_gen - 1], 1, NULL)) != MS_OK) { rc = cli_exit_code(st); break; }
        }
    }
    if (!o.c.quiet) {
        ms_stats stt;
        ms_engine_stats(e, &stt);
        cli_print_stats_human(stderr, &stt);
    }
    free(line);
    free(gen);
    ms_session_close(s);
    ms_sampler_close(smp);
    ms_engine_close(e);
    return rc;
}
