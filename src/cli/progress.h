/* cli/progress.h - the live progress line of the programs, on stderr.
 *
 * Owns:        what is drawn for the engine's progress reports (open, verify,
 *              pack, prompt: ms_progress_set) and for generation (s/token,
 *              the time --max-tokens would take), and when it is drawn.
 * Invariants:  nothing is drawn unless stderr is a terminal, --quiet and
 *              --json are off; a drawn line is erased before anything else is
 *              printed (cli_progress_clear), so stdout's text and JSON never
 *              mix with it. Without --progress a step is drawn only once it
 *              has lasted PROGRESS_DELAY_S, at most every PROGRESS_EVERY_S.
 * Does not:    change a result; print when off.
 */
#ifndef MS_CLI_PROGRESS_H
#define MS_CLI_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

#include "moestream.h"

/* Start drawing for this process's thread (ms_progress_set) when stderr is a
 * terminal and neither quiet nor json; force (--progress) draws from the
 * first report on, and generation live too. */
void cli_progress_start(int quiet, int json, int force);
/* While the model opens, call pending(user) at every report and end the
 * process (exit code 130, as a shell reports SIGINT) when it returns 1: for
 * a program that blocks SIGINT (chat), so that Ctrl-C still stops a long
 * open. Reports are then taken even when nothing is drawn. */
void cli_progress_interrupt_open(int (*pending)(void *user), void *user);
/* Stop drawing (the line erased). */
void cli_progress_stop(void);
/* Erase the line drawn, if any, before the caller prints. */
void cli_progress_clear(void);
/* Generation: n of max tokens done, t0_s the start (ms_now-like seconds from
 * cli_progress_now_s). Drawn only with --progress, and only when stdout is
 * not this terminal (the text streams there). */
void cli_progress_gen(int64_t n, int64_t max, double t0_s);
double cli_progress_now_s(void);
/* One line after the stats: s/token and the time --max-tokens max would take
 * at that speed (nothing when no token was decoded). */
void cli_progress_gen_summary(FILE *f, const ms_stats *st, int64_t max);

#endif
