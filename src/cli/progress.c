/* cli/progress.c - see progress.h. */
#include "cli/progress.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROGRESS_DELAY_S 0.5
#define PROGRESS_EVERY_S 0.1

static struct {
    int on, force, drawn;
    double last_s;
    int (*pending)(void *);     /* cli_progress_interrupt_open */
    void *pending_user;
} pg;

double cli_progress_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "4.2 s", "3m 05s", "2h 10m" */
static void fmt_time(char *b, size_t n, double s) {
    if (s < 0 || s != s) snprintf(b, n, "?");
    else if (s < 60) snprintf(b, n, "%.1f s", s);
    else if (s < 3600) snprintf(b, n, "%dm %02ds", (int)(s / 60), (int)s % 60);
    else snprintf(b, n, "%dh %02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

static void fmt_bytes(char *b, size_t n, double v) {
    if (v >= 1e9) snprintf(b, n, "%.2f GB", v / 1e9);
    else if (v >= 1e6) snprintf(b, n, "%.1f MB", v / 1e6);
    else snprintf(b, n, "%.0f KB", v / 1e3);
}

static void draw(const char *line) {
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    pg.drawn = 1;
}

void cli_progress_clear(void) {
    if (!pg.drawn) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    pg.drawn = 0;
}

/* Whether to draw now: every report with --progress (a step shorter than the
 * rate limit still shows its pieces), else once the step has lasted
 * PROGRESS_DELAY_S, every PROGRESS_EVERY_S. */
static int due(double elapsed_s, int last) {
    const double now = cli_progress_now_s();
    if (!pg.force && elapsed_s < PROGRESS_DELAY_S) return 0;
    if (!pg.force && !last && pg.drawn && now - pg.last_s < PROGRESS_EVERY_S) return 0;
    pg.last_s = now;
    return 1;
}

static void on_progress(void *user, const ms_progress *p) {
    (void)user;
    if (pg.pending && !strcmp(p->step, "open") && pg.pending(pg.pending_user)) {
        cli_progress_clear();
        fputs("\nmoestream: interrupted while opening the model\n", stderr);
        _exit(130);
    }
    if (!pg.on) return;
    if (p->total <= 0) return;              /* nothing to do (an open that keeps no weight) */
    const int last = p->done >= p->total;
    if (last) { cli_progress_clear(); return; }   /* the step is over: its line goes */
    if (!due(p->elapsed_s, 0)) return;
    const double frac = p->total > 0 ? (double)p->done / (double)p->total : 0.0;
    char eta[32], line[256];
    fmt_time(eta, sizeof eta, p->done > 0 ? p->elapsed_s / frac - p->elapsed_s : -1.0);
    if (!strcmp(p->step, "prompt")) {
        /* each pass over the weights reads about the same bytes: the passes
           left at the speed of those done */
        char rd[96] = "", read[32], speed[32];
        if (p->bytes > 0) {                 /* nothing when every weight is in memory */
            fmt_bytes(read, sizeof read, (double)p->bytes);
            fmt_bytes(speed, sizeof speed, p->elapsed_s > 0 ? (double)p->bytes / p->elapsed_s : 0.0);
            snprintf(rd, sizeof rd, ", %s read (%s/s)", read, speed);
        }
        snprintf(line, sizeof line, "prompt: chunk %lld/%lld, %lld/%lld tokens%s, %.1f s, ETA %s",
                 (long long)p->chunk, (long long)p->n_chunks, (long long)p->done, (long long)p->total, rd,
                 p->elapsed_s, eta);
    } else {
        char done[32], total[32], speed[32];
        fmt_bytes(done, sizeof done, (double)p->done);
        fmt_bytes(total, sizeof total, (double)p->total);
        fmt_bytes(speed, sizeof speed, p->elapsed_s > 0 ? (double)p->done / p->elapsed_s : 0.0);
        snprintf(line, sizeof line, "%s: %s of %s (%.0f%%), %s/s, ETA %s", p->step, done, total, 100.0 * frac,
                 speed, eta);
    }
    draw(line);
}

void cli_progress_start(int quiet, int json, int force) {
    memset(&pg, 0, sizeof pg);
    pg.on = !quiet && !json && isatty(2);
    pg.force = force;
    ms_progress_set(pg.on ? on_progress : NULL, NULL);
}

void cli_progress_interrupt_open(int (*pending)(void *user), void *user) {
    pg.pending = pending;
    pg.pending_user = user;
    ms_progress_set(on_progress, NULL);
}

void cli_progress_stop(void) {
    cli_progress_clear();
    ms_progress_set(NULL, NULL);
    pg.on = 0;
    pg.pending = NULL;
}

void cli_progress_gen(int64_t n, int64_t max, double t0_s) {
    if (!pg.on || !pg.force || isatty(1) || n <= 0) return;
    const double el = cli_progress_now_s() - t0_s, per = el / (double)n;
    if (n < max && !due(el, 0)) return;
    char eta[32], line[160];
    fmt_time(eta, sizeof eta, per * (double)(max - n));
    snprintf(line, sizeof line, "generate: %lld/%lld tokens, %.3f s/token, ETA %s", (long long)n, (long long)max,
             per, eta);
    draw(line);
    if (n >= max) cli_progress_clear();
}

void cli_progress_gen_summary(FILE *f, const ms_stats *st, int64_t max) {
    if (st->n_tokens_decode <= 0 || max <= 0) return;
    const double per = st->decode_s / (double)st->n_tokens_decode;
    char all[32];
    fmt_time(all, sizeof all, per * (double)max);
    fprintf(f, "moestream: generation %.3f s/token; --max-tokens %lld at this speed: %s\n", per, (long long)max, all);
}
