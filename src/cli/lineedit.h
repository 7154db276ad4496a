/* cli/lineedit.h - reading the lines of `chat`: line editing and history at
 * a terminal (libedit, <histedit.h>), plain lines from a pipe or a file.
 *
 * Owns:        the EditLine and History of the terminal, the line buffer,
 *              and SIGINT while a line is being read. The history is kept
 *              across runs in $MOESTREAM_HISTORY ("" = not kept), else in
 *              ~/.moestream_history.
 * Invariants:  at a terminal SIGINT is blocked in the calling thread except
 *              inside cli_le_read (the engine's threads, started after
 *              cli_le_open, inherit the block: Ctrl-C never interrupts a
 *              read or a wait of the engine); a Ctrl-C during an answer stays
 *              pending until cli_le_take_interrupt takes it.
 * Does not:    interpret what is read (commands, multi-line blocks: cli/chat.c).
 */
#ifndef MS_CLI_LINEEDIT_H
#define MS_CLI_LINEEDIT_H

typedef struct cli_le cli_le;

enum { CLI_LE_LINE = 0, CLI_LE_EOF = -1, CLI_LE_INTR = -2 };

/* Open on stdin / stdout; line editing when both are terminals. Call before
 * the engine starts its threads. NULL when out of memory. */
cli_le *cli_le_open(const char *prog);
void cli_le_close(cli_le *le);
/* 1 when lines are edited at a terminal. */
int cli_le_interactive(const cli_le *le);
/* Read one line, without its newline, into *line (owned by le, valid until
 * the next call): CLI_LE_LINE, CLI_LE_EOF (Ctrl-D or the end of the input)
 * or CLI_LE_INTR (Ctrl-C; *had_text = 1 when the line was not empty). */
int cli_le_read(cli_le *le, const char *prompt, char **line, int *had_text);
void cli_le_history_add(cli_le *le, const char *line);
/* 1 (once) when Ctrl-C was pressed since the last call or read. */
int cli_le_take_interrupt(cli_le *le);

#endif
