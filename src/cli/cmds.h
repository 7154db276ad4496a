/* cli/cmds.h - what the subcommand files of the moestream program share:
 * the common options, engine opening, text streaming, stats printing. */
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
/* Open the engine for o; prints the error and returns its status on failure. */
ms_status cli_open(const cli_opts *o, ms_engine **e);

/* Decoded text of generated tokens, streamed without splitting a UTF-8 character. */
typedef struct cli_text {
    char *all;                  /* every byte so far, NUL-terminated */
    size_t n, cap, printed;
} cli_text;
void cli_text_init(cli_text *t);
void cli_text_add(cli_text *t, const ms_engine *e, int32_t id, FILE *out);
void cli_text_flush(cli_text *t, FILE *out);

void cli_print_stats_json(FILE *f, const ms_stats *st);
int cmd_chat(int argc, char **argv);
/* cli/batch.c */
int cmd_batch(int argc, char **argv);
void cli_print_stats_human(FILE *f, const ms_stats *st);

#endif
