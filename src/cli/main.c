/* cli/main.c - the moestream program: subcommand dispatch, `run`,
 * `tokenize`, `perplexity`.
 *
 * Exit codes: 0 ok, 1 runtime failure, 2 usage or unreadable/invalid model,
 * 4 the run finished but its output is unsound. Includes only the public
 * header (and cli helpers).
 *
 * Every command parses its options with cli_parse (cli/opts.h) before it
 * opens anything, and checks what can be checked without the weights (ranges,
 * names, the context against the prompt and --max-tokens) before the model
 * loads; `moestream CMD --help` prints the command's own table.
 */
#include "moestream.h"

#include "cli/cmds.h"
#include "cli/progress.h"
#include "cli/util.h"
#include "server/server.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* run                                                                       */

typedef struct run_opts {
    cli_opts c;
    const char *ids, *prompt, *prompt_file, *dump_logits, *save, *load, *json_schema;
    int64_t n_gen;
    int json, recompute, ignore_eos;
    ms_sample_params sp;
    cli_stop stop;
} run_opts;

static int parse_stop(void *dst, const char *v, char *why, size_t why_len) {
    return cli_stop_add(dst, v, why, why_len);
}

#define R(f) offsetof(run_opts, f)
static const cli_opt run_table[] = {
    { "--prompt", CLI_STR, R(prompt), "TEXT", 0, 0, NULL, "the prompt (else --prompt-file, --ids or stdin)", 0, NULL, NULL },
    { "--prompt-file", CLI_STR, R(prompt_file), "PATH", 0, 0, NULL, "the prompt, read from a file", 0, NULL, NULL },
    { "--ids", CLI_STR, R(ids), "1,2,3", 0, 0, NULL, "the prompt as token ids (then only --max-tokens stops)", 0, NULL, NULL },
    { "--max-tokens", CLI_I64, R(n_gen), "N", 0, 1 << 30, "64", "tokens to generate", 0, NULL, "--gen" },
    { "--ignore-eos", CLI_FLAG, R(ignore_eos), NULL, 0, 0, NULL, "do not stop at the stop tokens (<|end_of_msg|>; gpt-oss: <|return|> ...)", 1, NULL, NULL },
    { "--stop", CLI_CUSTOM, R(stop), "TEXT", 0, 0, NULL, "stop where TEXT appears (up to 4; not printed)", 0, parse_stop, NULL },
    { "--json", CLI_FLAG, R(json), NULL, 0, 0, NULL, "one JSON object on stdout (ids, text, stats)", 1, NULL, NULL },
    { "--dump-logits", CLI_STR, R(dump_logits), "PATH", 0, 0, NULL, "the first step's logits (float32 LE [vocab])", 0, NULL, NULL },
    { "--recompute", CLI_FLAG, R(recompute), NULL, 0, 0, NULL, "recompute the sequence for every token (check)", 1, NULL, NULL },
    { "--save-session", CLI_STR, R(save), "PATH", 0, 0, NULL, "save the session state after the run", 0, NULL, NULL },
    { "--load-session", CLI_STR, R(load), "PATH", 0, 0, NULL, "resume a saved session, then feed the prompt", 0, NULL, NULL },
    { "--json-schema", CLI_STR, R(json_schema), "FILE", 0, 0, NULL, "generate only JSON valid for this schema (docs/SERVER.md)", 0, NULL, NULL },
    { NULL, 0, 0, NULL, 0, 0, NULL, NULL, 0, NULL, NULL }
};
#undef R

static int parse_run(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_gen = 64;
    cli_opts_generating(&o->c);
    o->sp = ms_sample_default_params();
    const cli_cmd cmd = { "run", "MODEL_DIR [options]",
                          "Generate from a prompt. Text prompts stop at a stop token or --max-tokens; the\n"
                          "output bits are the same at every --ram.\n",
                          &o->c.model_dir, 1,
                          { { "options", run_table, o }, { "sampling", cli_sample_opts, &o->sp },
                            { "engine", cli_common_opts, &o->c }, { NULL, NULL, NULL } } };
    int r = cli_parse(&cmd, argc, argv);
    if (r != 0) return r;
    if ((o->ids != NULL) + (o->prompt != NULL) + (o->prompt_file != NULL) > 1) {
        fprintf(stderr, "moestream run: give one of --ids, --prompt, --prompt-file\n");
        return -1;
    }
    if (!o->c.model_dir) { fprintf(stderr, "moestream run: MODEL_DIR is missing (moestream run --help)\n"); return -1; }
    return 0;
}

/* Read a whole file (or stdin for NULL) into *text; the reason printed when it cannot. */
static int read_text(const char *what, const char *path, char **text, size_t *len) {
    FILE *f = path ? fopen(path, "rb") : stdin;
    const int err = errno;
    *text = f ? cli_read_all(f, len) : NULL;
    if (f && f != stdin) fclose(f);
    if (*text) return 0;
    fprintf(stderr, "moestream: cannot read %s%s%s: %s\n", what, path ? " " : "", path ? path : "",
            f ? "read error" : strerror(err));
    return -1;
}

/* The prompt before the model opens: ids parsed, or the text to tokenize. */
typedef struct run_prompt {
    char *text;
    size_t text_len;
    int text_mode;
    int32_t *ids;
    int64_t n;
} run_prompt;

static int run_input(run_opts *o, run_prompt *p) {
    memset(p, 0, sizeof *p);
    if (o->prompt) {
        p->text = strdup(o->prompt);
        p->text_len = strlen(o->prompt);
    } else if (o->prompt_file) {
        if (read_text("--prompt-file", o->prompt_file, &p->text, &p->text_len) != 0) return -1;
    } else if (!o->ids && !o->load) {
        if (isatty(0)) { fprintf(stderr, "moestream run: needs --prompt, --prompt-file, --ids or text on stdin\n"); return -1; }
        if (read_text("stdin", NULL, &p->text, &p->text_len) != 0) return -1;
    }
    p->text_mode = p->text != NULL;
    if (o->ids && (p->n = cli_parse_ids(o->ids, &p->ids)) <= 0) {
        fprintf(stderr, "moestream run: bad --ids '%s': a comma-separated list of token ids\n", o->ids);
        return -1;
    }
    /* the context: --ids runs get room for what they ask; others must fit the default */
    const int64_t need = p->n + (o->n_gen > 0 ? o->n_gen - 1 : 0) + (o->save && o->n_gen > 0) + p->text_mode;
    if (o->c.max_context == 0 && o->ids && p->n + o->n_gen + 1 > 4096) o->c.max_context = p->n + o->n_gen + 1;
    const int64_t ctx = o->c.max_context ? o->c.max_context : 4096;
    if (need > ctx && p->text_mode) {
        fprintf(stderr, "moestream run: --max-tokens %lld leaves no room for a prompt in the context of %lld positions "
                "(--max-context)\n", (long long)o->n_gen, (long long)ctx);
        return -1;
    }
    if (need > ctx) {
        fprintf(stderr, "moestream run: the prompt (%lld tokens) and --max-tokens %lld need %lld positions; the context "
                "holds %lld (--max-context)\n", (long long)p->n, (long long)o->n_gen, (long long)need, (long long)ctx);
        return -1;
    }
    return 0;
}

/* Everything the model run needs, opened; a status printed when it cannot be. */
typedef struct run_ctx {
    ms_engine *e;
    ms_session *s;
    ms_sampler *smp;
    ms_grammar *grammar;
    ms_model_info info;
} run_ctx;

static void run_close(run_ctx *x) {
    ms_session_close(x->s);
    ms_sampler_close(x->smp);
    ms_grammar_close(x->grammar);
    ms_engine_close(x->e);
}

/* --json-schema: the sampler picks only tokens that continue a valid document. */
static int run_grammar(const char *path, run_ctx *x) {
    char *text, msg[256];
    size_t len;
    if (read_text("--json-schema", path, &text, &len) != 0) return -1;
    ms_status st = ms_grammar_open(x->e, text, len, (int32_t)x->info.eos_id, &x->grammar, msg, sizeof msg);
    free(text);
    if (st != MS_OK) { fprintf(stderr, "moestream run: --json-schema %s: %s\n", path, msg); return -1; }
    ms_sampler_set_grammar(x->smp, x->grammar);
    return 0;
}

static int run_open(run_opts *o, run_prompt *p, run_ctx *x) {
    memset(x, 0, sizeof *x);
    ms_status st = cli_open(&o->c, &x->e);
    if (st != MS_OK) return cli_exit_code(st);
    ms_engine_info(x->e, &x->info);
    if (p->text_mode) {
        if (!ms_engine_has_tokenizer(x->e)) {
            fprintf(stderr, "moestream: %s has no tokenizer (tiktoken.model); use --ids\n", o->c.model_dir);
            return EXIT_USAGE;
        }
        if (ms_tokenize(x->e, p->text, p->text_len, &p->ids, &p->n) != MS_OK) {
            fprintf(stderr, "moestream: tokenizing the prompt failed\n");
            return EXIT_RUNTIME;
        }
    }
    for (int64_t i = 0; i < p->n; i++)
        if (p->ids[i] < 0 || p->ids[i] >= x->info.n_vocab) {
            fprintf(stderr, "moestream run: bad --ids: %d is not a token id (the vocabulary has %lld)\n", p->ids[i],
                    (long long)x->info.n_vocab);
            return EXIT_USAGE;
        }
    char msg[256];
    if (!(x->smp = ms_sampler_open(&o->sp, x->info.n_vocab, msg, sizeof msg))) { fprintf(stderr, "moestream: %s\n", msg); return EXIT_USAGE; }
    if (o->json_schema && run_grammar(o->json_schema, x) != 0) return EXIT_USAGE;
    if ((st = ms_session_open(x->e, &x->s)) != MS_OK) { fprintf(stderr, "moestream: %s\n", ms_engine_error(x->e)); return cli_exit_code(st); }
    if (o->load && (st = ms_session_load(x->s, o->load)) != MS_OK) {
        fprintf(stderr, "moestream: %s\n", ms_session_error(x->s));
        return cli_exit_code(st);
    }
    if (p->n == 0 && !ms_session_logits(x->s)) { fprintf(stderr, "moestream: the prompt is empty\n"); return EXIT_USAGE; }
    const int64_t past = ms_session_n_past(x->s);
    const int64_t need = past + p->n + (o->n_gen > 0 ? o->n_gen - 1 : 0) + (o->save && o->n_gen > 0);
    if (need > x->info.max_context) {
        fprintf(stderr, "moestream run: %s%lld prompt tokens and --max-tokens %lld do not fit the context of %lld "
                "positions (--max-context)\n", past ? "the session's positions, " : "", (long long)p->n,
                (long long)o->n_gen, (long long)x->info.max_context);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* --dump-logits: the logits the first token is chosen from. */
static int dump_logits(const char *path, const float *lg, int64_t n_vocab) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(lg, sizeof(float), (size_t)n_vocab, f) == (size_t)n_vocab;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "moestream: cannot write %s\n", path);
    return ok ? EXIT_OK : EXIT_RUNTIME;
}

/* --recompute: the whole sequence fed again with the pending token. */
static ms_status recompute(ms_session *s, int32_t pending) {
    int64_t n_all;
    const int32_t *all = ms_session_tokens(s, &n_all);
    int32_t *copy = malloc((size_t)(n_all + 1) * sizeof *copy);
    if (!copy) return MS_E_NOMEM;
    memcpy(copy, all, (size_t)n_all * sizeof *copy);
    copy[n_all] = pending;
    ms_session_reset(s);
    ms_status st = ms_session_feed(s, copy, n_all + 1, NULL);
    free(copy);
    return st;
}

/* The prompt through the prompt cache, after the ids the session holds (a
 * --load-session): those are its own longest prefix unless the cache holds a
 * longer one, and only the rest is fed. */
static ms_status feed_prompt(ms_session *s, const run_prompt *p) {
    int64_t n_past = 0;
    const int32_t *past = ms_session_tokens(s, &n_past);
    if (n_past == 0) return ms_session_feed_prompt(s, p->ids, p->n, NULL);
    int32_t *all = malloc((size_t)(n_past + p->n) * sizeof *all);
    if (!all) return MS_E_NOMEM;
    memcpy(all, past, (size_t)n_past * sizeof *all);
    memcpy(all + n_past, p->ids, (size_t)p->n * sizeof *all);
    const ms_status st = ms_session_feed_prompt(s, all, n_past + p->n, NULL);
    free(all);
    return st;
}

/* cli_picker, then --stop: the text so far (seen) ends at a stop string. */
typedef struct run_pick {
    cli_pick base;
    cli_text *seen;             /* NULL: no stop strings */
    const ms_engine *e;
} run_pick;

static int32_t run_picker(void *user, const float *logits, const int32_t *hist, int64_t n_hist, int *stop) {
    run_pick *p = user;
    const int32_t next = cli_picker(&p->base, logits, hist, n_hist, stop);
    if (!p->base.stopped && p->seen) {
        cli_text_add(p->seen, p->e, next, NULL);
        if (p->seen->cut >= 0) *stop = p->base.stopped = 1;
    }
    return next;
}

/* The generation: the prompt fed, then tokens until a stop rule fires.
 * *rc is set when a side output (--dump-logits) fails. */
static ms_status run_generate(const run_opts *o, const run_prompt *p, run_ctx *x, run_pick *pk, cli_text *out,
                              FILE *stream, int *rc) {
    cli_pick *rp = &pk->base;
    ms_status st = MS_OK;
    /* the prompt goes through the prompt cache; after --load-session it continues the session */
    if (p->n > 0) st = feed_prompt(x->s, p);
    int32_t pending = -1;                   /* chosen, not fed yet */
    int32_t *step = malloc((size_t)(o->c.speculate + 1) * sizeof *step);
    if (!rp->gen || !step) st = MS_E_NOMEM;
    const int show = p->text_mode || ms_engine_has_tokenizer(x->e);
    const double t_gen = cli_progress_now_s();
    while (st == MS_OK && !rp->stopped && rp->n_gen < o->n_gen) {
        if (rp->n_gen == 0 && o->dump_logits)
            *rc = dump_logits(o->dump_logits, ms_session_logits(x->s), x->info.n_vocab);
        if (o->recompute && pending >= 0) {
            if ((st = recompute(x->s, pending)) != MS_OK) break;
            pending = -1;
        }
        /* drafts past the length limit would only be thrown away */
        int64_t room = o->n_gen - rp->n_gen - 1;
        int n_draft = o->c.speculate < room ? o->c.speculate : (int)room;
        int64_t before = rp->n_gen, n_step = 0;
        st = ms_session_decode(x->s, pending, n_draft, run_picker, pk, step, &n_step);
        for (int64_t i = before; i < rp->n_gen; i++) {
            if (rp->stop_eos && cli_pick_is_stop(rp, rp->gen[i])) break;   /* raw --ids runs do not stop */
            if (show) cli_text_add(out, x->e, rp->gen[i], stream);
        }
        if (n_step > 0) pending = step[n_step - 1];
        cli_progress_gen(rp->n_gen, o->n_gen, t_gen);
    }
    free(step);
    return st;
}

static void run_report(const run_opts *o, const run_prompt *p, run_ctx *x, const cli_pick *rp, const cli_text *out,
                       ms_status st) {
    ms_stats stt;
    ms_engine_stats(x->e, &stt);
    if (o->json) {
        printf("{\"prompt_ids\": ");
        cli_print_ids(stdout, p->ids, p->n);
        printf(", \"generated_ids\": ");
        cli_print_ids(stdout, rp->gen, rp->n_gen);
        if (ms_engine_has_tokenizer(x->e)) {
            printf(", \"text\": ");
            cli_json_string(stdout, out->all ? out->all : "", out->cut >= 0 ? (size_t)out->cut : out->n);
        }
        printf(", \"status\": \"%s\", \"prefill_chunk\": %lld, \"kernels\": \"%s\", \"stats\": ",
               ms_status_name(st), (long long)x->info.prefill_chunk, x->info.kernels);
        cli_print_stats_json(stdout, &stt);
        printf("}\n");
    } else if (!p->text_mode) {
        for (int64_t i = 0; i < rp->n_gen; i++) printf("%s%d", i ? "," : "", rp->gen[i]);
        printf("\n");
    }
    if (!o->c.quiet) {
        cli_print_stats_human(stderr, &stt);
        cli_progress_gen_summary(stderr, &stt, o->n_gen);
    }
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    int rc = parse_run(argc, argv, &o);
    if (rc != 0) return rc > 0 ? EXIT_OK : EXIT_USAGE;
    run_prompt p;
    run_ctx x;
    if (run_input(&o, &p) != 0) { free(p.text); free(p.ids); return EXIT_USAGE; }
    cli_progress_start(o.c.quiet, o.json, o.c.progress);
    rc = run_open(&o, &p, &x);
    free(p.text);
    if (rc != EXIT_OK) { cli_progress_stop(); run_close(&x); free(p.ids); return rc; }
    cli_text out, seen;
    cli_text_init(&out);
    cli_text_init(&seen);
    out.stop = seen.stop = &o.stop;
    FILE *stream = (p.text_mode && !o.json) ? stdout : NULL;
    /* the stop rules: the EOS of a text prompt, the --max-tokens limit, --stop */
    run_pick pk = { { x.smp, malloc((size_t)(o.n_gen + 1) * sizeof(int32_t)), 0, o.n_gen, (int32_t)x.info.eos_id,
                      p.text_mode && !o.ignore_eos, 0, x.e }, o.stop.n > 0 ? &seen : NULL, x.e };
    cli_pick *rp = &pk.base;
    ms_engine_stats_reset(x.e);
    ms_status st = run_generate(&o, &p, &x, &pk, &out, stream, &rc);
    cli_progress_stop();
    cli_text_flush(&out, stream);
    if (stream) { fputc('\n', stream); fflush(stream); }
    if (st != MS_OK) {
        fprintf(stderr, "moestream: %s: %s\n", ms_status_name(st), ms_session_error(x.s));
        rc = cli_exit_code(st);
    }
    if (st == MS_OK && o.save) {
        /* the last generated token is not fed yet: feed it so the saved state is complete */
        if (rp->n_gen > 0) st = ms_session_feed(x.s, &rp->gen[rp->n_gen - 1], 1, NULL);
        if (st == MS_OK) st = ms_session_save(x.s, o.save);
        if (st != MS_OK) { fprintf(stderr, "moestream: %s\n", ms_session_error(x.s)); rc = cli_exit_code(st); }
    }
    run_report(&o, &p, &x, rp, &out, st);
    free(out.all);
    free(seen.all);
    free(rp->gen);
    free(p.ids);
    run_close(&x);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* tokenize, perplexity                                                      */

/* --decode: a JSON array of ids (or ids separated by commas / spaces) to text. */
static int detokenize(ms_engine *e, char *in) {
    for (char *p = in; *p; p++) if (*p == '[' || *p == ']' || *p == '\n' || *p == '\t' || *p == '\r') *p = ' ';
    int32_t *ids;
    const int64_t n = cli_parse_ids(in, &ids);
    if (n < 0) { fprintf(stderr, "moestream tokenize: --decode reads a JSON array of token ids\n"); return EXIT_USAGE; }
    ms_model_info info;
    ms_engine_info(e, &info);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= info.n_vocab) {
            fprintf(stderr, "moestream tokenize: %d (at %lld) is not a token id (the vocabulary has %lld)\n", ids[i],
                    (long long)i, (long long)info.n_vocab);
            free(ids);
            return EXIT_USAGE;
        }
    char *txt;
    size_t tl;
    int rc = EXIT_OK;
    if (ms_detokenize(e, ids, n, &txt, &tl) != MS_OK) { fprintf(stderr, "moestream tokenize: cannot decode the ids\n"); rc = EXIT_USAGE; }
    else { fwrite(txt, 1, tl, stdout); fputc('\n', stdout); free(txt); }
    free(ids);
    return rc;
}

/* One text -> its ids as a JSON array (count: their number) on a line of stdout. */
static int tokenize_text(ms_engine *e, const char *what, const char *text, size_t len, int count) {
    int32_t *ids;
    int64_t n;
    if (ms_tokenize(e, text, len, &ids, &n) != MS_OK) {
        fprintf(stderr, "moestream tokenize: %s: tokenize failed\n", what);
        return EXIT_RUNTIME;
    }
    if (count) printf("%lld", (long long)n);
    else cli_print_ids(stdout, ids, n);
    printf("\n");
    free(ids);
    return EXIT_OK;
}

enum { TOKENIZE_MAX_FILES = 1024 };

typedef struct tok_flags {
    int decode, count;
} tok_flags;

static int cmd_tokenize(int argc, char **argv) {
    cli_opts c;
    memset(&c, 0, sizeof c);
    tok_flags f = { 0, 0 };
    const cli_opt table[] = {
        { "--decode", CLI_FLAG, offsetof(tok_flags, decode), NULL, 0, 0, NULL, "ids (a JSON array) on stdin -> the text, one line",
          1, NULL, NULL },
        { "--count", CLI_FLAG, offsetof(tok_flags, count), NULL, 0, 0, NULL, "print how many ids instead of the ids", 1, NULL,
          NULL },
        { NULL, 0, 0, NULL, 0, 0, NULL, NULL, 0, NULL, NULL } };
    /* pos[0] the model, then the files in order */
    const char *pos[1 + TOKENIZE_MAX_FILES] = { NULL };
    const cli_cmd cmd = { "tokenize", "MODEL_DIR [FILE...] [--count | --decode] [< INPUT]",
                          "Text on stdin -> a JSON array of token ids on stdout (--decode: the reverse).\n"
                          "With FILEs (up to 1024): each file's ids as a JSON array, a line per file, in order;\n"
                          "the model opens once.\n",
                          pos, 1 + TOKENIZE_MAX_FILES,
                          { { "options", table, &f }, { "engine", cli_common_opts, &c }, { NULL, NULL, NULL } } };
    int r = cli_parse(&cmd, argc, argv);
    if (r != 0) return r > 0 ? EXIT_OK : EXIT_USAGE;
    c.model_dir = pos[0];
    const char **files = pos + 1;
    int n_files = 0;
    while (n_files < TOKENIZE_MAX_FILES && files[n_files]) n_files++;
    if (f.decode && n_files > 0) {
        fprintf(stderr, "moestream tokenize: --decode reads its ids on stdin, not from files\n");
        return EXIT_USAGE;
    }
    if (f.decode && f.count) {
        fprintf(stderr, "moestream tokenize: --count counts the ids of a text, not with --decode\n");
        return EXIT_USAGE;
    }
    c.quiet = 1;
    /* the tokenizer needs no weights: without --ram, the smallest plan, which
       pins nothing (without a limit the engine would load every weight that
       fits before cutting a word: 13.8 GB for the 20b-shaped checkpoint) */
    if (c.ram == 0) c.ram = MS_RAM_MIN;
    size_t len = 0;
    char *in = NULL;
    if (n_files == 0 && read_text("stdin", NULL, &in, &len) != 0) return EXIT_RUNTIME;
    ms_engine *e;
    ms_status st = cli_open(&c, &e);
    if (st != MS_OK) { free(in); return cli_exit_code(st); }
    int rc = EXIT_OK;
    if (!ms_engine_has_tokenizer(e)) {
        fprintf(stderr, "moestream: %s has no tokenizer (tiktoken.model)\n", c.model_dir);
        rc = EXIT_USAGE;
    } else if (f.decode) {
        rc = detokenize(e, in);
    } else if (n_files == 0) {
        rc = tokenize_text(e, "stdin", in, len, f.count);
    } else {
        /* a file that cannot be read ends the output there (the lines before
           it are the files before it), with run --prompt-file's exit code */
        for (int i = 0; i < n_files && rc == EXIT_OK; i++) {
            char *text;
            size_t tl;
            if (read_text("file", files[i], &text, &tl) != 0) { rc = EXIT_USAGE; break; }
            rc = tokenize_text(e, files[i], text, tl, f.count);
            free(text);
        }
    }
    free(in);
    ms_engine_close(e);
    return rc;
}

typedef struct ppl_opts {
    cli_opts c;
    const char *file, *ids;
    int64_t max_tokens;
} ppl_opts;

static int parse_ppl(int argc, char **argv, ppl_opts *o) {
    memset(o, 0, sizeof *o);
#define P(f) offsetof(ppl_opts, f)
    static const cli_opt table[] = {
        { "--file", CLI_STR, P(file), "PATH", 0, 0, "stdin", "the text to score", 0, NULL, NULL },
        { "--ids", CLI_STR, P(ids), "1,2,3", 0, 0, NULL, "token ids to score instead of text", 0, NULL, NULL },
        { "--max-tokens", CLI_I64, P(max_tokens), "N", 0, 1 << 30, "0 = all", "score only the first N tokens", 0, NULL, NULL },
        { NULL, 0, 0, NULL, 0, 0, NULL, NULL, 0, NULL, NULL } };
#undef P
    const cli_cmd cmd = { "perplexity", "MODEL_DIR [--file PATH | --ids LIST] [options]",
                          "Score a text: JSON {n_tokens, nll, perplexity, prefill_chunk, seconds, bytes read,\n"
                          "peak RSS}; one pass over the weights per prompt chunk.\n",
                          &o->c.model_dir, 1,
                          { { "options", table, o }, { "engine", cli_common_opts, &o->c }, { NULL, NULL, NULL } } };
    int r = cli_parse(&cmd, argc, argv);
    if (r != 0) return r;
    if (o->file && o->ids) { fprintf(stderr, "moestream perplexity: give --file or --ids, not both\n"); return -1; }
    return 0;
}

/* The ids to score: --ids, or the text tokenized; the reason printed when there are none. */
static int ppl_ids(const ppl_opts *o, ms_engine *e, const char *in, size_t len, int32_t **ids, int64_t *n) {
    if (o->ids) return 0;
    if (!ms_engine_has_tokenizer(e) || ms_tokenize(e, in, len, ids, n) != MS_OK || *n < 2) {
        fprintf(stderr, "moestream: need a tokenizer and at least 2 tokens of text\n");
        return -1;
    }
    return 0;
}

/* perplexity: the text (or --ids) scored in one ms_session_score call, so
 * the engine takes it in its own prompt chunks (chosen for the budget), one
 * pass over the weights per chunk, and never holds [n, n_vocab] logits. */
static int cmd_perplexity(int argc, char **argv) {
    ppl_opts o;
    int r = parse_ppl(argc, argv, &o);
    if (r != 0) return r > 0 ? EXIT_OK : EXIT_USAGE;
    int32_t *ids = NULL;
    int64_t n = 0;
    char *in = NULL;
    size_t len = 0;
    if (o.ids && (n = cli_parse_ids(o.ids, &ids)) < 2) {
        fprintf(stderr, "moestream perplexity: bad --ids '%s': at least 2 comma-separated token ids\n", o.ids);
        free(ids);
        return EXIT_USAGE;
    }
    if (!o.ids && read_text(o.file ? "--file" : "stdin", o.file, &in, &len) != 0) return EXIT_USAGE;
    ms_engine *e;
    cli_progress_start(o.c.quiet, 0, o.c.progress);
    ms_status st = cli_open(&o.c, &e);
    if (st != MS_OK) { cli_progress_stop(); free(in); free(ids); return cli_exit_code(st); }
    if (ppl_ids(&o, e, in, len, &ids, &n) != 0) { free(in); free(ids); ms_engine_close(e); return EXIT_USAGE; }
    free(in);
    if (o.max_tokens > 1 && n > o.max_tokens) n = o.max_tokens;
    double *lp = malloc((size_t)n * sizeof *lp);
    ms_session *s = NULL;
    int rc = EXIT_OK;
    ms_engine_stats_reset(e);
    if (!lp) { fprintf(stderr, "moestream: out of memory\n"); rc = EXIT_RUNTIME; }
    else if ((st = ms_session_open(e, &s)) != MS_OK) { fprintf(stderr, "moestream: %s\n", ms_engine_error(e)); rc = cli_exit_code(st); }
    else if ((st = ms_session_score(s, ids, n, lp, 0, NULL, NULL)) != MS_OK) { fprintf(stderr, "moestream: %s\n", ms_session_error(s)); rc = cli_exit_code(st); }
    else {
        double nll = 0.0;
        for (int64_t i = 1; i < n; i++) nll -= lp[i];
        const double mean = nll / (double)(n - 1);
        ms_model_info info;
        ms_stats sts;
        ms_engine_info(e, &info);
        ms_engine_stats(e, &sts);
        printf("{\"n_tokens\": %lld, \"nll\": %.10f, \"perplexity\": %.10f, \"prefill_chunk\": %lld, "
               "\"seconds\": %.3f, \"trunk_bytes_read\": %lld, \"expert_bytes_read\": %lld, "
               "\"peak_rss_bytes\": %lld}\n",
               (long long)n, mean, exp(mean), (long long)info.prefill_chunk, sts.prefill_s,
               (long long)sts.trunk_bytes_read, (long long)sts.expert_bytes_read, (long long)sts.peak_rss_bytes);
    }
    cli_progress_stop();
    ms_session_close(s);
    free(lp);
    free(ids);
    ms_engine_close(e);
    return rc;
}

/* ------------------------------------------------------------------------ */

static const struct { const char *name; int (*fn)(int, char **); } commands[] = {
    { "run", cmd_run }, { "chat", cmd_chat }, { "batch", cmd_batch }, { "serve", ms_serve_main },
    { "tokenize", cmd_tokenize }, { "perplexity", cmd_perplexity }, { "plan", cmd_plan },
    { "trace", cmd_trace }, { "verify", cmd_verify }, { "pack", cmd_pack },
};

int main(int argc, char **argv) {
    if (ms_pipe_boot(&argc, &argv) != 0) return EXIT_RUNTIME;
    if (argc < 2) { cli_usage(stderr); return EXIT_USAGE; }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) { cli_usage(stdout); return EXIT_OK; }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version") || !strcmp(cmd, "-V")) { cli_version(stdout); return EXIT_OK; }
    if (ms_pipe_size() > 1) {
        /* under mpirun: the commands that run the model run it as a pipeline */
        static const char *piped[] = { "run", "chat", "batch", "perplexity", "serve", "tokenize" };
        int ok = 0;
        for (size_t k = 0; k < sizeof piped / sizeof piped[0]; k++) ok |= !strcmp(cmd, piped[k]);
        if (!ok) {
            if (ms_pipe_rank() == 0)
                fprintf(stderr, "moestream: '%s' does not run as a pipeline (under mpirun); run it in each machine\n", cmd);
            return EXIT_USAGE;
        }
    }
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++)
        if (!strcmp(cmd, commands[k].name)) return commands[k].fn(argc - 2, argv + 2);
    fprintf(stderr, "moestream: unknown command '%s' (moestream --help lists them)\n", cmd);
    return EXIT_USAGE;
}
