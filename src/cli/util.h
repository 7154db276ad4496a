/* cli/util.h - small helpers shared by the command-line programs. */
#ifndef MS_CLI_UTIL_H
#define MS_CLI_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "moestream.h"

/* Exit codes of every moestream command. */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_UNSOUND = 4 };

/* Parse "1,2,3" into a malloc'd array; returns count or -1. */
int64_t cli_parse_ids(const char *s, int32_t **out);
/* Map an engine status to an exit code. */
int cli_exit_code(int status);
/* The log callback used by the programs: to stderr with a prefix. */
void cli_log(void *user, ms_log_level level, const char *line);

/* The picker of `run` and `chat` for ms_session_decode: the sampler, each
 * token appended to gen, then the stop rules (a stop id when stop_eos, the
 * limit max). The stop ids: the engine's (ms_is_stop: eos_token_id and the
 * chat format's stop tokens) when e is set, else eos alone. stopped stays 1
 * once a rule fired. */
typedef struct cli_pick {
    ms_sampler *smp;
    int32_t *gen;
    int64_t n_gen, max;
    int32_t eos;
    int stop_eos, stopped;
    const ms_engine *e;
} cli_pick;
int32_t cli_picker(void *user, const float *logits, const int32_t *hist, int64_t n_hist, int *stop);
/* Is id one of p's stop ids (whether or not stop_eos is on)? */
int cli_pick_is_stop(const cli_pick *p, int32_t id);
/* A sampling option a (--temperature, --top-p, --top-k, --min-p, --repeat-penalty,
 * --frequency-penalty, --presence-penalty, --seed) with its value v (NULL when
 * there is none) into sp: 1 when a is one of them (it takes v), 0 when it is
 * not, -1 (message printed) when v is missing, malformed or out of range
 * (cli_sample_opts, cli/opts.h). Kept for callers not yet on cli_parse. */
int cli_parse_sample(ms_sample_params *sp, const char *a, const char *v);



/* Write s[0..n) as a JSON string literal (quotes included). Invalid UTF-8
 * bytes are written as \u00XX escapes of the byte value. */
void cli_json_string(FILE *f, const char *s, size_t n);
/* Length of the longest prefix of buf[0..n) that does not end inside an
 * incomplete UTF-8 sequence (a sequence that more bytes could complete). */
size_t cli_utf8_complete(const char *buf, size_t n);
/* Read a whole stream into a malloc'd buffer; NULL on error. */
char *cli_read_all(FILE *f, size_t *len);
#endif
