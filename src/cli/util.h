/* cli/util.h - small helpers shared by the command-line programs. */
#ifndef MS_CLI_UTIL_H
#define MS_CLI_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "moestream.h"

/* Exit codes of every moestream command. */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_UNSOUND = 4 };

/* Parse "8G", "512M", "100K", "12345" (bytes; binary units). -1 on error. */
int64_t cli_parse_size(const char *s);
/* Parse "1,2,3" into a malloc'd array; returns count or -1. */
int64_t cli_parse_ids(const char *s, int32_t **out);
/* Map an engine status to an exit code. */
int cli_exit_code(int status);
/* The log callback used by the programs: to stderr with a prefix. */
void cli_log(void *user, ms_log_level level, const char *line);

#endif
