/* cli/opts.h - the one option parser of the moestream program and its server.
 *
 * Owns: the tables that say, for every flag, its kind, where its value goes,
 *   its accepted range or words, its default and its help line; parsing argv
 *   against them; the --help text printed from them; the units every size
 *   flag takes. The engine options shared by every command that opens a model
 *   (cli_common_opts) and the sampling options (cli_sample_opts) are tables
 *   here, so `run`, `chat`, `batch`, `serve` ... spell and read them alike.
 *
 * Units (CLI_SIZE, CLI_RAM): a number of bytes with an optional binary unit
 *   K, M, G or T (KiB, MiB, GiB, TiB and KB, MB, GB, TB mean the same, powers
 *   of 1024), e.g. 512M, 8G, 8GiB, 1.5G, 4096. CLI_RAM also takes min (the
 *   smallest plan that fits, MS_RAM_MIN), auto (90% of MemAvailable) and all
 *   or max (no limit, 0); 0 itself is refused.
 *
 * Invariants:
 *   1. A bad value is one line on stderr, "moestream CMD: bad --FLAG 'VALUE':
 *      WHAT IS ACCEPTED", and cli_parse returns -1 (the caller exits 2). No
 *      value is ever read as another (the failure value of a parse is never a
 *      valid setting).
 *   2. Numbers are checked against the table's range at parse time, so what
 *      can be checked is checked before any model is opened.
 *   3. --FLAG=VALUE is the same as --FLAG VALUE.
 *
 * Does not: open the model, know what a flag does beyond its table line.
 */
#ifndef MS_CLI_OPTS_H
#define MS_CLI_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cli_kind {
    CLI_FLAG,       /* no value: the int at off becomes `set` */
    CLI_STR,        /* const char *: any text (argv's own storage) */
    CLI_CHOICE,     /* const char *: one of meta's '|'-separated words */
    CLI_ONOFF,      /* int: on = 1, off = 0 */
    CLI_INT,        /* int in [lo, hi] */
    CLI_I64,        /* int64_t in [lo, hi] */
    CLI_U64,        /* uint64_t in [lo, hi] */
    CLI_FLOAT,      /* float, finite, in [lo, hi] (lo itself excluded when set = 1) */
    CLI_DOUBLE,     /* double, as CLI_FLOAT */
    CLI_SIZE,       /* int64_t bytes (see Units) in [lo, hi] */
    CLI_RAM,        /* int64_t: a size >= 1, min (MS_RAM_MIN), auto, all / max (0) */
    CLI_CUSTOM,     /* parse(): 0, or -1 with what is accepted written to why */
} cli_kind;

typedef struct cli_opt {
    const char *name;       /* "--ram"; NULL ends a table */
    cli_kind kind;
    size_t off;             /* offset of the value in the group's struct */
    const char *meta;       /* the value in --help: "SIZE", "N"; CLI_CHOICE: "low|high|max" */
    double lo, hi;          /* accepted range of numbers and sizes */
    const char *def;        /* the default as --help shows it; NULL: none shown */
    const char *help;       /* one line for --help; NULL: not listed (still accepted) */
    int set;                /* CLI_FLAG: the value stored; CLI_FLOAT/DOUBLE: 1 = lo excluded */
    int (*parse)(void *dst, const char *v, char *why, size_t why_len);   /* CLI_CUSTOM */
    const char *alias;      /* a second spelling (--gen for --max-tokens), NULL */
} cli_opt;

/* A table and the struct its offsets point into. */
typedef struct cli_group {
    const char *title;      /* heading in --help: "options", "sampling", "engine" */
    const cli_opt *opts;    /* NULL ends the command's groups */
    void *base;
} cli_group;

#define CLI_MAX_GROUPS 4

typedef struct cli_cmd {
    const char *name;       /* "run": messages begin "moestream run: " */
    const char *synopsis;   /* "MODEL_DIR [options]" */
    const char *about;      /* lines printed by --help after the usage line; NULL: none */
    const char **pos;       /* positional argument i goes to pos[i] (NULL: none taken) */
    int n_pos;
    cli_group groups[CLI_MAX_GROUPS + 1];
} cli_cmd;

/* The engine options every command that opens a model takes. */
typedef struct cli_opts {
    const char *model_dir;
    int threads, quiet;
    int progress;               /* --progress: progress drawn from the first report, generation live */
    int64_t ram;
    int64_t max_context;
    int64_t trunk_bytes, expert_bytes;
    const char *io_backend, *cache_policy, *trace_path;
    int io_queue_depth, no_readahead, fault_kind, no_predict_experts;
    int64_t fault_at_read;
    const char *sums_path;      /* --sums PATH */
    int no_verify;              /* --no-verify */
    const char *pack_path;      /* --pack PATH */
    int no_pack;                /* --no-pack */
    int speculate;              /* --speculate K: draft up to K tokens per decode pass */
    int speculate_auto;         /* --speculate auto: K = 8, each pass drafts the length that pays */
    const char *draft_corpus;   /* --draft-corpus FILE: a draft source (text) */
    int draft_tree;             /* --draft-tree 1: a pass may verify a second branch (auto) */
    const char *draft_model;    /* --draft-model DIR: a draft source (a model of the same tokenizer) */
    int64_t draft_costs[2];     /* --draft-costs PASS,TOKEN: auto's bytes per pass and per fed token (0: measured) */
    int parallel;               /* --parallel N: sequences served together (the plan counts
                                   N sessions' state; 0 = 1) */
    int64_t chunk;              /* --chunk N: prompt tokens per pass over the weights (0 = the
                                   engine's choice: for --ram, else 32) */
    const char *stages;         /* --stages L1,L2,...: a pipeline's split (under mpirun) */
    const char *kernels;        /* --kernels NAME: the kernel table (auto, ref, avx2, avx512, avx512-l2) */
    int stage_groups;           /* --stage-groups N (0 = automatic) */
    int64_t prompt_cache;       /* --prompt-cache-ram SIZE (0 = the engine's choice; MS_PROMPT_CACHE_OFF = none) */
    const char *prompt_cache_dir; /* --prompt-cache DIR (NULL: no cache on disk) */
    int64_t prompt_cache_size;  /* --prompt-cache-size SIZE (0 = MS_PROMPT_CACHE_DISK_DEFAULT) */
    int64_t prompt_cache_fault; /* --fault-cache-write N (tests: the N-th entry written fails with ENOSPC) */
    int verbose;                /* --verbose: the engine's info lines (the plan, the model) */
} cli_opts;

/* The defaults of a command that generates tokens (run, chat, batch, serve,
 * and plan, which shows their plan): --speculate auto. Commands that only
 * read (perplexity, tokenize) keep 0: no draft, no rollback record. */
void cli_opts_generating(cli_opts *o);

/* Tables over cli_opts and over ms_sample_params (include/moestream.h). */
extern const cli_opt cli_common_opts[];
extern const cli_opt cli_sample_opts[];

/* Parse argv (the words after the command's name) against cmd. Returns 0
 * when parsed, 1 when --help / -h printed the help on stdout (exit 0), -1
 * after a one-line usage error on stderr (exit 2). Values not given keep
 * what the caller put there (the defaults). */
int cli_parse(const cli_cmd *cmd, int argc, char **argv);
/* The help of cmd: usage line, about, each group's flags with meta, default
 * and help line. */
void cli_help(const cli_cmd *cmd, FILE *f);

/* The entry of table named name (either spelling, with or without the
 * leading "--"; '_' matches '-'), NULL when there is none. */
const cli_opt *cli_opt_find(const cli_opt *table, const char *name);
/* Set o's value in base from the text v. 0, or -1 with what is accepted
 * written to why ("an integer from 0 to 31"). */
int cli_opt_set(const cli_opt *o, void *base, const char *v, char *why, size_t why_len);

/* A size with units (see Units): bytes, or -1 when s is not one. */
int64_t cli_parse_size(const char *s);
/* --ram's value: bytes, MS_RAM_MIN, 0 (no limit); -2 when s is not one. */
int64_t cli_parse_ram(const char *s);

#endif
