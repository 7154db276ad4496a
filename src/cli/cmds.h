/* cli/cmds.h - what the subcommand files of the moestream program share:
 * the commands themselves, engine opening, text streaming, stats printing
 * (cli/common.c). Options are parsed by cli/opts.h. */
#ifndef MS_CLI_CMDS_H
#define MS_CLI_CMDS_H

#include "moestream.h"

#include "cli/opts.h"

#include <stdint.h>
#include <stdio.h>

/* Consume argv[*i] (and its value) if it is a common option (cli_common_opts)
 * or MODEL_DIR: returns 1 if consumed, 0 if not a common option, -1 on a bad
 * value. Kept for callers not yet on cli_parse (cli/opts.h). */
int cli_parse_common(cli_opts *o, int argc, char **argv, int *i);
/* The engine parameters o asks for (logging through cli_log unless quiet). */
void cli_engine_params(const cli_opts *o, ms_engine_params *ep);
/* Open the engine for o; prints the error and returns its status on failure. */
ms_status cli_open(const cli_opts *o, ms_engine **e);

/* Stop strings (run --stop, a batch line's "stop"): the text ends where the first
 * one found begins; the token that completes it is the last generated. */
#define CLI_MAX_STOP 4
#define CLI_MAX_STOP_BYTES 256
typedef struct cli_stop {
    const char *s[CLI_MAX_STOP];
    int n;
    size_t max_len;
} cli_stop;
/* Add s (not copied): 0, or -1 with what is accepted in why. */
int cli_stop_add(cli_stop *st, const char *s, char *why, size_t why_len);
/* Where the first stop string that begins at or after from begins in text[0..n); -1: none. */
int64_t cli_stop_find(const cli_stop *st, const char *text, size_t n, size_t from);

/* Decoded text of generated tokens, streamed without splitting a UTF-8 character. */
typedef struct cli_text {
    char *all;                  /* every byte so far, NUL-terminated */
    size_t n, cap, printed;
    const cli_stop *stop;       /* NULL: none; set after cli_text_init */
    int64_t cut;                /* where a stop string begins (the text's end); -1: none yet */
} cli_text;
void cli_text_init(cli_text *t);
void cli_text_add(cli_text *t, const ms_engine *e, int32_t id, FILE *out);
void cli_text_flush(cli_text *t, FILE *out);

/* [1, 2, 3] */
void cli_print_ids(FILE *f, const int32_t *ids, int64_t n);
void cli_print_stats_json(FILE *f, const ms_stats *st);
void cli_print_stats_human(FILE *f, const ms_stats *st);

/* the commands: argv holds the words after the command's name */
int cmd_run(int argc, char **argv);         /* cli/main.c */
int cmd_chat(int argc, char **argv);        /* cli/chat.c */
int cmd_batch(int argc, char **argv);       /* cli/batch.c */
int cmd_plan(int argc, char **argv);        /* cli/tools.c */
int cmd_trace(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_pack(int argc, char **argv);

/* cli/help.c: the commands, one line each; version, commit, kernel tables */
void cli_usage(FILE *f);
void cli_version(FILE *f);

#endif
