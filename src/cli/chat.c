/* cli/chat.c - `moestream chat`: an interactive multi-turn chat in the K3
 * chat format.
 *
 * Owns:        the conversation's state between turns: whether anything was
 *              fed yet (the first turn renders the whole preamble), and the
 *              last answer's ids until their closing is fed; the commands
 *              (/help /set /save /load /reset /exit) and multi-line input.
 * Invariants:  (1) the session keeps its KDA state and MLA cache between
 *              turns: a turn feeds only the ids that close the previous answer
 *              plus the new user message (ms_chat_close +
 *              ms_chat_tokens(append)), never the history. They go in as the
 *              whole conversation's prompt through the prompt cache
 *              (ms_session_feed_prompt): the session's own state is its
 *              longest prefix unless the cache holds a longer one (the same
 *              conversation replayed after a restart with --prompt-cache),
 *              only the rest is fed (cut at the cache's marks: same bits), and
 *              the turn's end is kept for the next process.
 *              (2) after a turn the session holds exactly the answer's ids as
 *              picked - all of them when it stopped at EOS, at the length
 *              limit or at Ctrl-C - so the conversation goes on as one fed the
 *              answer shown would; its closing is fed with the next message
 *              or before a save (a saved session is always closed: /load and
 *              --load-session append the next message to it).
 *              (3) a command is never sent to the model; /set changes what the
 *              next answers use as the flag would have (an answer is closed with
 *              the --thinking it was picked under).
 *              (4) from a pipe, lines are read one by one as at a terminal,
 *              with no banner and no prompt; stdout holds only the answers
 *              (confirmations and the banner go to stderr).
 *              (5) a full context ends nothing: an answer stops CLOSE_ROOM
 *              positions before --max-context (room for its closing, so the
 *              conversation can still be saved), and a message that does not
 *              fit is refused before anything is fed; the chat goes on (/save,
 *              /reset) and exits with the context's code at the end.
 * Does not:    edit lines (cli/lineedit.c) or draw progress (cli/progress.c).
 */
#include "moestream.h"

#include "cli/cmds.h"
#include "cli/lineedit.h"
#include "cli/opts.h"
#include "cli/progress.h"
#include "cli/util.h"

#include <stddef.h>
#include <stdint.h>
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
    const char *load_session, *save_session;
    ms_sample_params sp;
} chat_opts;

#define O(f) offsetof(chat_opts, f)

/* Positions an answer leaves free at the end of the context for its closing
 * (ms_chat_close: the tags or channel markers still open, a handful of ids
 * with a real tokenizer, a few dozen with a byte-level one). */
enum { CLOSE_ROOM = 64 };

static const cli_opt chat_table[] = {
    { "--system", CLI_STR, O(system), "TEXT", 0, 0, NULL, "the system message", 0, NULL, NULL },
    { "--thinking", CLI_ONOFF, O(thinking), "on|off", 0, 0, "off", "the assistant thinks before it answers", 0, NULL, NULL },
    { "--effort", CLI_CHOICE, O(effort), "low|high|max", 0, 0, NULL, "how long it thinks (with --thinking on)", 0, NULL, NULL },
    { "--show-reasoning", CLI_FLAG, O(show_reasoning), NULL, 0, 0, NULL, "show the thinking, dimmed", 1, NULL, NULL },
    { "--hide-reasoning", CLI_FLAG, O(show_reasoning), NULL, 0, 0, NULL, NULL, 0, NULL, NULL },
    { "--max-tokens", CLI_I64, O(max_tokens), "N", 1, INT32_MAX, "512", "tokens an answer may take", 0, NULL, "--gen" },
    { "--load-session", CLI_STR, O(load_session), "PATH", 0, 0, NULL,
      "resume a conversation saved by /save or --save-session", 0, NULL, NULL },
    { "--save-session", CLI_STR, O(save_session), "PATH", 0, 0, NULL, "save the conversation on exit", 0, NULL, NULL },
    { NULL, 0, 0, NULL, 0, 0, NULL, NULL, 0, NULL, NULL }
};
#undef O

static const char ABOUT[] =
    "An interactive conversation in the model's chat format: the state stays between turns, so a turn\n"
    "reads only its new tokens. At a terminal: line editing and history, /help for the commands,\n"
    "\"\"\" for multi-line messages, Ctrl-C stops an answer (what was shown stays), Ctrl-D exits.\n"
    "From a pipe: one message or command per line, the answers on stdout.";

/* 0 parsed, 1 --help printed, -1 usage error (printed). */
static int parse_chat(int argc, char **argv, chat_opts *o) {
    memset(o, 0, sizeof *o);
    cli_opts_generating(&o->c);
    o->max_tokens = 512;
    o->sp = ms_sample_default_params();
    const char *dirs[1] = { NULL };
    cli_cmd cmd = { "chat", "MODEL_DIR [options]", ABOUT, dirs, 1,
                    { { "options", chat_table, o }, { "sampling", cli_sample_opts, &o->sp },
                      { "engine", cli_common_opts, &o->c }, { NULL, NULL, NULL } } };
    int r = cli_parse(&cmd, argc, argv);
    o->c.model_dir = dirs[0];
    if (r == 0 && !o->c.model_dir) { fprintf(stderr, "moestream chat: MODEL_DIR is missing\n"); return -1; }
    return r;
}

typedef struct chat {
    chat_opts o;
    ms_engine *e;
    ms_session *s;
    ms_sampler *smp;
    ms_model_info info;
    cli_le *le;
    int32_t *gen;               /* the last answer's ids */
    int64_t n_gen;
    int gen_thinking;           /* --thinking when gen was picked: its closing follows it */
    int first;                  /* nothing fed yet: the next turn renders the preamble */
    int open_turn;              /* gen's closing is not fed yet */
    char **owned;               /* values /set gave text options (they point into these) */
    int n_owned;
} chat;

static const char HELP[] =
    "  /help          this list\n"
    "  /save PATH     save the conversation (a session file; chat --load-session or /load resume it)\n"
    "  /load PATH     replace the conversation with a saved one\n"
    "  /reset         forget the conversation\n"
    "  /set           what the next answers use; /set NAME VALUE changes it: thinking on|off,\n"
    "                 effort, show-reasoning, hide-reasoning, max-tokens, the sampling options\n"
    "                 (temperature, top-k, top-p, min-p, repeat-penalty, frequency-penalty,\n"
    "                 presence-penalty, seed: the sampler starts again from the seed), and\n"
    "                 system before the first message (or after /reset)\n"
    "  /exit          quit (as do Ctrl-D, and Ctrl-C twice at an empty prompt)\n"
    "  \"\"\"            on a line of its own starts a multi-line message, and ends it;\n"
    "                 a line ending in \\ goes on on the next line\n"
    "  Ctrl-C         stops the answer; what was shown stays in the conversation\n";

static void banner(const chat *ch) {
    const ms_model_info *in = &ch->info;
    char budget[64];
    if (ch->o.c.ram == 0) snprintf(budget, sizeof budget, "no RAM limit");
    else if (ch->o.c.ram == MS_RAM_MIN) snprintf(budget, sizeof budget, "RAM: the smallest plan");
    else snprintf(budget, sizeof budget, "RAM budget %.2f GB", (double)ch->o.c.ram / 1e9);
    fprintf(stderr, "moestream chat - %s: %lld layers, %lld experts (top %lld), vocab %lld; %s; "
            "context %lld, prompt chunks of %lld, kernels %s; answers up to %lld tokens\n",
            ch->o.c.model_dir, (long long)in->n_layer, (long long)in->n_expert, (long long)in->n_expert_used,
            (long long)in->n_vocab, budget, (long long)in->max_context, (long long)in->prefill_chunk, in->kernels,
            (long long)ch->o.max_tokens);
    fprintf(stderr, "Commands: /help /set /save PATH /load PATH /reset /exit. \"\"\" for multi-line input. "
            "Ctrl-C stops an answer, Ctrl-D exits.\n");
}

/* Feed the closing of the last answer (before a save, so that the file can be
 * appended to). */
static ms_status close_turn(chat *ch) {
    if (!ch->open_turn) return MS_OK;
    int32_t *ids = NULL;
    int64_t n = 0;
    ms_status st = ms_chat_close(ch->e, ch->gen, ch->n_gen, ch->gen_thinking, &ids, &n);
    if (st == MS_OK && n > 0) st = ms_session_feed(ch->s, ids, n, NULL);
    free(ids);
    if (st == MS_OK) ch->open_turn = 0;
    return st;
}

static void save(chat *ch, const char *path) {
    ms_status st = close_turn(ch);
    if (st == MS_OK) st = ms_session_save(ch->s, path);
    if (st != MS_OK) { fprintf(stderr, "moestream: not saved: %s\n", ms_session_error(ch->s)); return; }
    fprintf(stderr, "saved the conversation (%lld tokens) to %s\n", (long long)ms_session_n_past(ch->s), path);
}

static ms_status load(chat *ch, const char *path) {
    ms_status st = ms_session_load(ch->s, path);
    if (st != MS_OK) {
        fprintf(stderr, "moestream: not loaded: %s\n", ms_session_error(ch->s));
        if (ms_session_n_past(ch->s) == 0 && !ch->first) {
            ch->first = 1;
            ch->open_turn = 0;
            fprintf(stderr, "the conversation was reset\n");
        }
        return st;
    }
    ch->first = ms_session_n_past(ch->s) == 0;
    ch->open_turn = 0;
    fprintf(stderr, "loaded the conversation (%lld tokens) from %s\n", (long long)ms_session_n_past(ch->s), path);
    return MS_OK;
}

/* /set: what the next answers use. */
static void show_settings(const chat *ch) {
    const chat_opts *o = &ch->o;
    const ms_sample_params *p = &o->sp;
    fprintf(stderr, "thinking %s, effort %s, %s reasoning, max-tokens %lld; temperature %g, top-k %d, top-p %g, "
            "min-p %g, repeat-penalty %g, frequency-penalty %g, presence-penalty %g, seed %llu; system %s\n",
            o->thinking ? "on" : "off", o->effort ? o->effort : "(the model's)", o->show_reasoning ? "shown" : "hidden",
            (long long)o->max_tokens, (double)p->temperature, p->top_k, (double)p->top_p, (double)p->min_p,
            (double)p->repeat_penalty, (double)p->frequency_penalty, (double)p->presence_penalty,
            (unsigned long long)p->seed, o->system ? "set" : "none");
}

/* /set NAME VALUE through the option tables (the flags' own checks and
 * messages): the chat's options but the sessions, and the sampling ones (the
 * sampler opened again: it starts from the seed). The system message only
 * while nothing is fed: it is the conversation's first message. */
static void set_option(chat *ch, const char *arg) {
    if (!arg) { show_settings(ch); return; }
    char name[64];
    const char *nm = strncmp(arg, "--", 2) ? arg : arg + 2;     /* "temperature" or "--temperature" */
    const char *v = strchr(nm, ' ');
    snprintf(name, sizeof name, "--%.*s", (int)(v ? v - nm : (ptrdiff_t)strlen(nm)), nm);
    while (v && *v == ' ') v++;
    const cli_opt *o = cli_opt_find(chat_table, name);
    void *base = &ch->o;
    if (!o) { o = cli_opt_find(cli_sample_opts, name); base = &ch->o.sp; }
    if (!o || !strcmp(o->name, "--load-session") || !strcmp(o->name, "--save-session")) {
        fprintf(stderr, "%s is not one /set changes; /set lists what it does (the engine's options are chosen when "
                "chat starts: moestream chat --help)\n", name + 2);
        return;
    }
    if (!strcmp(o->name, "--system") && !ch->first) {
        fprintf(stderr, "the system message opens the conversation: /reset, then /set system\n");
        return;
    }
    if (o->kind != CLI_FLAG && (!v || !*v)) { fprintf(stderr, "usage: /set %s VALUE\n", name + 2); return; }
    if (o->kind == CLI_FLAG && v && *v) { fprintf(stderr, "%s takes no value: /set %s\n", name + 2, name + 2); return; }
    /* text values point into their own copy (the line is freed) */
    char *keep = o->kind == CLI_FLAG ? NULL : strdup(v);
    char **more = keep ? realloc(ch->owned, (size_t)(ch->n_owned + 1) * sizeof *more) : NULL;
    if (keep && !more) { free(keep); fprintf(stderr, "moestream: out of memory\n"); return; }
    if (more) { ch->owned = more; ch->owned[ch->n_owned++] = keep; }
    const chat_opts before = ch->o;
    char why[160];
    if (cli_opt_set(o, base, keep, why, sizeof why) != 0) { fprintf(stderr, "bad %s '%s': %s\n", name + 2, v, why); return; }
    if (base == &ch->o.sp) {
        char msg[256];
        ms_sampler *smp = ms_sampler_open(&ch->o.sp, ch->info.n_vocab, msg, sizeof msg);
        if (!smp) { ch->o = before; fprintf(stderr, "moestream: %s\n", msg); return; }
        ms_sampler_close(ch->smp);
        ch->smp = smp;
    }
    if (ch->o.max_tokens != before.max_tokens) {
        /* never below the open answer's ids: its closing is fed with the next message */
        const int64_t n = ch->o.max_tokens > ch->n_gen ? ch->o.max_tokens : ch->n_gen;
        int32_t *g = realloc(ch->gen, (size_t)(n + 1) * sizeof *g);
        if (!g) { ch->o = before; fprintf(stderr, "moestream: out of memory\n"); return; }
        ch->gen = g;
    }
    show_settings(ch);
}

/* A command line ("/..."): 1 handled, 2 exit. Never sent to the model. */
static int command(chat *ch, const char *line) {
    const char *arg = strchr(line, ' ');
    size_t n = arg ? (size_t)(arg - line) : strlen(line);
    while (arg && *arg == ' ') arg++;
    if (arg && !*arg) arg = NULL;
#define IS(name) (n == strlen(name) && !strncmp(line, name, n))
    if (IS("/exit") || IS("/quit") || IS("/bye")) return 2;
    if (IS("/help") || IS("/?")) fputs(HELP, stderr);
    else if (IS("/reset") || IS("/clear")) {
        ms_session_reset(ch->s);
        ch->first = 1;
        ch->open_turn = 0;
        fprintf(stderr, "the conversation was reset\n");
    } else if (IS("/set")) {
        set_option(ch, arg);
    } else if (IS("/save") || IS("/load")) {
        if (!arg) fprintf(stderr, "usage: %.5s PATH\n", line);
        else if (line[1] == 's') save(ch, arg);
        else load(ch, arg);
    } else fprintf(stderr, "unknown command %.*s; /help lists them\n", (int)n, line);
#undef IS
    return 1;
}

/* Append s[0..n) and a newline to *buf. */
static int append(char **buf, size_t *len, const char *s, size_t n, int newline) {
    char *p = realloc(*buf, *len + n + 2);
    if (!p) return -1;
    memcpy(p + *len, s, n);
    *len += n;
    if (newline) p[(*len)++] = '\n';
    p[*len] = '\0';
    *buf = p;
    return 0;
}

/* Read one message: a line, lines joined by a trailing backslash, or a
 * """ block. CLI_LE_LINE with *msg malloc'd, or what cli_le_read returned. */
static int read_message(chat *ch, char **msg, int *had_text) {
    const int tty = cli_le_interactive(ch->le);
    char *line, *buf = NULL;
    size_t len = 0;
    int block = 0, r;
    *msg = NULL;
    for (;;) {
        r = cli_le_read(ch->le, !tty ? "" : (buf || block) ? "... " : ">>> ", &line, had_text);
        if (r != CLI_LE_LINE) { free(buf); return r; }
        cli_le_history_add(ch->le, line);
        size_t n = strlen(line);
        if (!block && !buf && !strncmp(line, "\"\"\"", 3)) {
            line += 3;
            n -= 3;
            block = 1;
            if (n < 3 || strcmp(line + n - 3, "\"\"\"")) {        /* the block goes on */
                if (n > 0 && append(&buf, &len, line, n, 1) != 0) return CLI_LE_EOF;
                if (!buf) buf = calloc(1, 1);
                continue;
            }
        }
        if (block) {
            const int end = n >= 3 && !strcmp(line + n - 3, "\"\"\"");
            if (append(&buf, &len, line, end ? n - 3 : n, !end) != 0) return CLI_LE_EOF;
            if (!end) continue;
            while (len > 0 && buf[len - 1] == '\n') buf[--len] = '\0';
            break;
        }
        const int more = n > 0 && line[n - 1] == '\\';
        if (append(&buf, &len, line, more ? n - 1 : n, more) != 0) return CLI_LE_EOF;
        if (!more) break;
    }
    *msg = buf;
    return CLI_LE_LINE;
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

/* Feed the closing of the last answer and the user's message in one feed. */
static ms_status feed_message(chat *ch, const char *text) {
    ms_message msgs[2];
    int n_msgs = 0;
    memset(msgs, 0, sizeof msgs);
    if (ch->first && ch->o.system) { msgs[n_msgs].role = "system"; msgs[n_msgs].content = ch->o.system; n_msgs++; }
    msgs[n_msgs].role = "user";
    msgs[n_msgs].content = text;
    n_msgs++;
    const ms_chat_format fmt = { NULL, ch->o.thinking, ch->o.effort, 1 };
    int32_t *close_ids = NULL, *ids = NULL, *all = NULL;
    int64_t n_close = 0, n_ids = 0;
    char msg[512];
    ms_status st = MS_OK;
    if (ch->open_turn && (st = ms_chat_close(ch->e, ch->gen, ch->n_gen, ch->gen_thinking, &close_ids, &n_close)) != MS_OK)
        fprintf(stderr, "moestream: cannot close the previous turn\n");
    if (st == MS_OK && (st = ms_chat_tokens(ch->e, msgs, n_msgs, &fmt, !ch->first, &ids, &n_ids, msg, sizeof msg)) != MS_OK)
        fprintf(stderr, "moestream: %s\n", msg);
    /* the whole conversation goes through the prompt cache (invariant 1) */
    int64_t n_past = 0;
    const int32_t *past = ms_session_tokens(ch->s, &n_past);
    const int64_t ctx = ch->info.max_context;
    if (st == MS_OK && n_past + n_close + n_ids + CLOSE_ROOM + 1 > ctx) {
        /* invariant 5: nothing fed */
        fprintf(stderr, "moestream: the message does not fit: the conversation holds %lld positions, the message "
                "needs %lld more and an answer at least %d (%d of them kept for its closing), beyond --max-context "
                "%lld; /save PATH keeps the conversation (resume it with a larger --max-context), /reset starts "
                "again\n",
                (long long)n_past, (long long)(n_close + n_ids), CLOSE_ROOM + 1, CLOSE_ROOM, (long long)ctx);
        st = MS_E_CONTEXT;
    }
    if (st == MS_OK && !(all = malloc((size_t)(n_past + n_close + n_ids) * sizeof *all))) st = MS_E_NOMEM;
    if (st == MS_OK) {
        if (n_past) memcpy(all, past, (size_t)n_past * sizeof *all);
        if (n_close) memcpy(all + n_past, close_ids, (size_t)n_close * sizeof *all);
        memcpy(all + n_past + n_close, ids, (size_t)n_ids * sizeof *all);
        st = ms_session_feed_prompt(ch->s, all, n_past + n_close + n_ids, NULL);
        if (st != MS_OK) fprintf(stderr, "moestream: %s: %s\n", ms_status_name(st), ms_session_error(ch->s));
    }
    free(all);
    free(ids);
    free(close_ids);
    if (st == MS_OK) { ch->first = 0; ch->open_turn = 0; ch->n_gen = 0; }
    return st;
}

/* One turn: the message fed, the answer picked and shown until EOS, the
 * limit or Ctrl-C (invariant 2). */
static ms_status turn(chat *ch, const char *text) {
    ms_status st = feed_message(ch, text);
    if (st != MS_OK) return st;
    const int32_t eos = (int32_t)ch->info.eos_id;
    /* >= 1: feed_message left room for an answer and its closing (invariant 5) */
    const int64_t ctx_room = ch->info.max_context - ms_session_n_past(ch->s) - CLOSE_ROOM;
    const int64_t max = ch->o.max_tokens < ctx_room ? ch->o.max_tokens : ctx_room;
    size_t shown_r = 0, shown_c = 0;
    int32_t step[32];
    /* decode steps (ms_session_decode): the picker stops at EOS and at max;
       every token but EOS is fed, as in the one-token loop */
    cli_pick cp = { ch->smp, ch->gen, 0, max, eos, 1, 0, ch->e };
    int32_t pending = -1;
    int stopped = 0;
    const double t0 = cli_progress_now_s();
    while (st == MS_OK && !cp.stopped && cp.n_gen < max && !(stopped = cli_le_take_interrupt(ch->le))) {
        int64_t before = cp.n_gen, n_step = 0;
        int64_t room = max - cp.n_gen - 1;
        int n_draft = ch->o.c.speculate < room ? ch->o.c.speculate : (int)room;
        st = ms_session_decode(ch->s, pending, n_draft, cli_picker, &cp, step, &n_step);
        if (n_step > 0) pending = step[n_step - 1];
        for (int64_t i = before + 1; i <= cp.n_gen; i++) {
            ms_reply r;
            if (ms_chat_parse_reply(ch->e, ch->gen, i, ch->o.thinking, &r) == MS_OK) {
                if (ch->o.show_reasoning) show_new(stdout, r.reasoning, strlen(r.reasoning), &shown_r, "\033[2m", "\033[0m");
                show_new(stdout, r.content, strlen(r.content), &shown_c, "", "");
                ms_reply_free(&r);
            }
        }
        cli_progress_gen(cp.n_gen, max, t0);
    }
    ch->n_gen = cp.n_gen;
    ch->gen_thinking = ch->o.thinking;
    ch->open_turn = 1;
    /* the last token picked and not fed (the limit, Ctrl-C) is fed now, as the
       one-token loop would have; an EOS too: the answer is complete */
    if (st == MS_OK && ch->n_gen > 0) st = ms_session_feed(ch->s, &ch->gen[ch->n_gen - 1], 1, NULL);
    fputc('\n', stdout);
    fflush(stdout);
    if (stopped) fprintf(stderr, "[stopped: the %lld tokens shown stay in the conversation]\n", (long long)ch->n_gen);
    else if (st == MS_OK && max < ch->o.max_tokens && ch->n_gen == max && !cli_pick_is_stop(&cp, ch->gen[max - 1]))
        fprintf(stderr, "[the context is full: the answer stopped at %lld tokens, %d positions before --max-context "
                "%lld, kept for its closing; /save PATH keeps the conversation (resume it with a larger "
                "--max-context), /reset starts again]\n",
                (long long)max, CLOSE_ROOM, (long long)ch->info.max_context);
    if (st != MS_OK) fprintf(stderr, "moestream: %s: %s\n", ms_status_name(st), ms_session_error(ch->s));
    return st;
}

/* The loop of messages and commands; the exit code. */
static int converse(chat *ch) {
    int armed = 0;                          /* a Ctrl-C at an empty prompt: the next one exits */
    int refused = 0;                        /* a message did not fit the context (invariant 5) */
    for (;;) {
        char *text;
        int had_text;
        int r = read_message(ch, &text, &had_text);
        if (r == CLI_LE_EOF) break;
        if (r == CLI_LE_INTR) {
            if (armed && !had_text) break;
            armed = !had_text;
            if (armed) fprintf(stderr, "(Ctrl-C again or /exit to quit)\n");
            continue;
        }
        armed = 0;
        if (text[0] == '\0') { free(text); continue; }
        if (text[0] == '/') {
            int c = command(ch, text);
            free(text);
            if (c == 2) break;
            continue;
        }
        ms_status st = turn(ch, text);
        free(text);
        if (st == MS_E_CONTEXT) refused = 1;
        else if (st != MS_OK) return cli_exit_code(st);
    }
    return refused ? cli_exit_code(MS_E_CONTEXT) : EXIT_OK;
}

static int chat_setup(chat *ch) {
    char msg[512];
    if (!ms_engine_has_tokenizer(ch->e)) {
        fprintf(stderr, "moestream: %s has no tokenizer (tiktoken.model)\n", ch->o.c.model_dir);
        return EXIT_USAGE;
    }
    ms_engine_info(ch->e, &ch->info);
    ch->smp = ms_sampler_open(&ch->o.sp, ch->info.n_vocab, msg, sizeof msg);
    if (!ch->smp) { fprintf(stderr, "moestream: %s\n", msg); return EXIT_USAGE; }
    ms_status st = ms_session_open(ch->e, &ch->s);
    if (st != MS_OK) { fprintf(stderr, "moestream: %s\n", ms_engine_error(ch->e)); return cli_exit_code(st); }
    if (!(ch->gen = malloc((size_t)(ch->o.max_tokens + 1) * sizeof *ch->gen))) return EXIT_RUNTIME;
    ch->first = 1;
    if (ch->o.load_session && (st = load(ch, ch->o.load_session)) != MS_OK) return cli_exit_code(st);
    return EXIT_OK;
}

static int interrupted(void *le) { return cli_le_take_interrupt(le); }

int cmd_chat(int argc, char **argv) {
    chat ch;
    memset(&ch, 0, sizeof ch);
    const int pr = parse_chat(argc, argv, &ch.o);
    if (pr != 0) return pr > 0 ? EXIT_OK : EXIT_USAGE;
    /* before the engine's threads start: they inherit lineedit's SIGINT block */
    if (!(ch.le = cli_le_open("moestream"))) return EXIT_RUNTIME;
    cli_progress_start(ch.o.c.quiet, 0, ch.o.c.progress);
    /* SIGINT is blocked from here on: a Ctrl-C while the model opens ends the
       process through the open's progress reports */
    if (cli_le_interactive(ch.le)) cli_progress_interrupt_open(interrupted, ch.le);
    ms_status st = cli_open(&ch.o.c, &ch.e);
    cli_progress_start(ch.o.c.quiet, 0, ch.o.c.progress);     /* the hook off */
    int rc = st != MS_OK ? cli_exit_code(st) : chat_setup(&ch);
    if (rc == EXIT_OK) {
        if (cli_le_interactive(ch.le)) banner(&ch);
        rc = converse(&ch);
        if (cli_le_interactive(ch.le)) fputc('\n', stdout);
        if (ch.o.save_session) save(&ch, ch.o.save_session);
    }
    cli_progress_stop();
    if (ch.e && !ch.o.c.quiet) {
        ms_stats stt;
        ms_engine_stats(ch.e, &stt);
        cli_print_stats_human(stderr, &stt);
        cli_progress_gen_summary(stderr, &stt, ch.o.max_tokens);
    }
    free(ch.gen);
    for (int i = 0; i < ch.n_owned; i++) free(ch.owned[i]);
    free(ch.owned);
    ms_session_close(ch.s);
    ms_sampler_close(ch.smp);
    if (ch.e) ms_engine_close(ch.e);
    cli_le_close(ch.le);
    return rc;
}
