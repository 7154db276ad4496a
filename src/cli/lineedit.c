/* cli/lineedit.c - see lineedit.h. libedit's native API (not its readline
 * emulation): el_gets returns NULL with count -1 when a signal interrupts its
 * read, so Ctrl-C at the prompt is a return value here, with no longjmp and
 * no library handler in the way (docs/DEPENDENCIES.md says why libedit). */
#include "cli/lineedit.h"

#include <errno.h>
#include <histedit.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct cli_le {
    EditLine *el;               /* NULL: plain lines (not a terminal) */
    History *hist;
    const char *prompt;
    char hist_path[4096];       /* "" = history not kept across runs */
    char *buf;                  /* the line handed out */
    size_t cap;
};

static volatile sig_atomic_t got_sigint;

static void on_sigint(int sig) { (void)sig; got_sigint = 1; }

static char *el_prompt(EditLine *el) {
    cli_le *le = NULL;
    el_get(el, EL_CLIENTDATA, &le);
    return (char *)(le && le->prompt ? le->prompt : "");
}

static void sigint_mask(int how) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    pthread_sigmask(how, &s, NULL);
}

cli_le *cli_le_open(const char *prog) {
    cli_le *le = calloc(1, sizeof *le);
    if (!le) return NULL;
    if (!isatty(0) || !isatty(1)) return le;
    setlocale(LC_CTYPE, "");                /* UTF-8 input is edited by characters */
    HistEvent ev;
    le->hist = history_init();
    le->el = el_init(prog, stdin, stdout, stderr);
    if (!le->hist || !le->el) { cli_le_close(le); return NULL; }
    history(le->hist, &ev, H_SETSIZE, 1000);
    history(le->hist, &ev, H_SETUNIQUE, 1);
    el_set(le->el, EL_CLIENTDATA, le);
    el_set(le->el, EL_PROMPT, el_prompt);
    el_set(le->el, EL_EDITOR, "emacs");
    el_set(le->el, EL_HIST, history, le->hist);
    el_source(le->el, NULL);                /* the user's ~/.editrc, if any */
    /* the history of earlier runs: $MOESTREAM_HISTORY ("" = none), else ~/.moestream_history */
    const char *hp = getenv("MOESTREAM_HISTORY"), *home = getenv("HOME");
    if (hp) snprintf(le->hist_path, sizeof le->hist_path, "%s", hp);
    else if (home && home[0]) snprintf(le->hist_path, sizeof le->hist_path, "%s/.moestream_history", home);
    if (le->hist_path[0]) history(le->hist, &ev, H_LOAD, le->hist_path);
    /* no SA_RESTART: the read inside el_gets returns EINTR on Ctrl-C */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigint_mask(SIG_BLOCK);
    return le;
}

void cli_le_close(cli_le *le) {
    if (!le) return;
    HistEvent ev;
    if (le->hist && le->hist_path[0]) history(le->hist, &ev, H_SAVE, le->hist_path);
    if (le->el) el_end(le->el);
    if (le->hist) history_end(le->hist);
    if (le->el || le->hist) {
        signal(SIGINT, SIG_DFL);
        sigint_mask(SIG_UNBLOCK);
    }
    free(le->buf);
    free(le);
}

int cli_le_interactive(const cli_le *le) { return le->el != NULL; }

static int keep(cli_le *le, const char *s, size_t n) {
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
    if (n + 1 > le->cap) {
        char *p = realloc(le->buf, n + 1);
        if (!p) return CLI_LE_EOF;
        le->buf = p;
        le->cap = n + 1;
    }
    memcpy(le->buf, s, n);
    le->buf[n] = '\0';
    return CLI_LE_LINE;
}

int cli_le_read(cli_le *le, const char *prompt, char **line, int *had_text) {
    *had_text = 0;
    if (!le->el) {
        ssize_t got = getline(&le->buf, &le->cap, stdin);
        if (got < 0) return CLI_LE_EOF;
        keep(le, le->buf, (size_t)got);
        *line = le->buf;
        return CLI_LE_LINE;
    }
    le->prompt = prompt;
    int count = 0, err = 0;
    const char *s = NULL;
    /* a Ctrl-C pressed as the answer ended counts as one at an empty prompt */
    const int pending = cli_le_take_interrupt(le);
    got_sigint = 0;
    if (!pending) {
        sigint_mask(SIG_UNBLOCK);
        s = el_gets(le->el, &count);
        err = errno;
        sigint_mask(SIG_BLOCK);
    }
    if (pending || got_sigint || (!s && count < 0 && err == EINTR)) {
        if (!pending) {
            const LineInfo *li = el_line(le->el);
            *had_text = li && li->lastchar > li->buffer;
            el_reset(le->el);
        }
        fputc('\n', stdout);
        fflush(stdout);
        got_sigint = 0;
        return CLI_LE_INTR;
    }
    if (!s || count <= 0) return CLI_LE_EOF;
    if (keep(le, s, (size_t)count) != CLI_LE_LINE) return CLI_LE_EOF;
    *line = le->buf;
    return CLI_LE_LINE;
}

void cli_le_history_add(cli_le *le, const char *line) {
    HistEvent ev;
    if (le->hist && line[0]) history(le->hist, &ev, H_ENTER, line);
}

int cli_le_take_interrupt(cli_le *le) {
    if (!le->el) return 0;
    sigset_t s, pend;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    if (sigpending(&pend) != 0 || !sigismember(&pend, SIGINT)) return 0;
    const struct timespec zero = { 0, 0 };
    sigtimedwait(&s, NULL, &zero);
    return 1;
}
