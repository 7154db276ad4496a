/* cli/util.c - see util.h. */
#include "cli/util.h"

#include "cli/cmds.h"

#include "moestream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int64_t cli_parse_ids(const char *s, int32_t **out) {
    *out = NULL;
    int64_t n = 0, cap = 0;
    int32_t *ids = NULL;
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        errno = 0;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) { free(ids); return -1; }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            int32_t *t = realloc(ids, (size_t)cap * sizeof *t);
            if (!t) { free(ids); return -1; }
            ids = t;
        }
        ids[n++] = (int32_t)v;
        p = end;
        if (*p && *p != ',' && *p != ' ') { free(ids); return -1; }
    }
    *out = ids;
    return n;
}

int cli_exit_code(int status) {
    switch (status) {
    case MS_OK: return EXIT_OK;
    case MS_E_USAGE: case MS_E_MODEL: case MS_E_BUDGET: return EXIT_USAGE;
    case MS_E_UNSOUND: return EXIT_UNSOUND;
    default: return EXIT_RUNTIME;
    }
}

void cli_log(void *user, ms_log_level level, const char *line) {
    (void)user;
    static const char *names[] = { "error", "warning", "info", "debug" };
    fprintf(stderr, "moestream: %s: %s\n", names[(int)level < 0 || (int)level > 3 ? 0 : (int)level], line);
}

static int utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;   /* continuation or invalid lead */
}

/* length of a valid UTF-8 sequence at s (n bytes available), 0 if invalid */
static int utf8_valid_at(const unsigned char *s, size_t n) {
    int len = utf8_len(s[0]);
    if (len == 0 || (size_t)len > n) return 0;
    for (int i = 1; i < len; i++) if ((s[i] & 0xC0) != 0x80) return 0;
    if (len == 3 && s[0] == 0xE0 && s[1] < 0xA0) return 0;
    if (len == 3 && s[0] == 0xED && s[1] >= 0xA0) return 0;
    if (len == 4 && s[0] == 0xF0 && s[1] < 0x90) return 0;
    if (len == 4 && s[0] == 0xF4 && s[1] >= 0x90) return 0;
    return len;
}

void cli_json_string(FILE *f, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') { fputc('\\', f); fputc(c, f); i++; }
        else if (c == '\n') { fputs("\\n", f); i++; }
        else if (c == '\r') { fputs("\\r", f); i++; }
        else if (c == '\t') { fputs("\\t", f); i++; }
        else if (c < 0x20) { fprintf(f, "\\u%04x", c); i++; }
        else if (c < 0x80) { fputc(c, f); i++; }
        else {
            int len = utf8_valid_at(s + i, n - i);
            if (len) { fwrite(s + i, 1, (size_t)len, f); i += (size_t)len; }
            else { fprintf(f, "\\u%04x", c); i++; }
        }
    }
    fputc('"', f);
}

size_t cli_utf8_complete(const char *buf, size_t n) {
    const unsigned char *s = (const unsigned char *)buf;
    /* look back at most 3 bytes for a lead byte whose sequence is cut off */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = s[n - back];
        if ((c & 0xC0) == 0x80) continue;           /* continuation: keep looking */
        int len = utf8_len(c);
        if (len > (int)back) {
            for (size_t i = 1; i < back; i++)
                if ((s[n - back + i] & 0xC0) != 0x80) return n;   /* already invalid */
            return n - back;
        }
        return n;
    }
    return n;
}

char *cli_read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            char *t = realloc(buf, cap * 2 + 1);
            if (!t) { free(buf); return NULL; }
            buf = t;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) { free(buf); return NULL; }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* one word of argv (and its value) against table: 1 taken, 0 not in it, -1 bad */
static int parse_one(const cli_opt *table, void *base, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const cli_opt *o = a[0] == '-' && a[1] == '-' ? cli_opt_find(table, a) : NULL;
    if (!o) return 0;
    const char *v = o->kind == CLI_FLAG ? NULL : *i + 1 < argc ? argv[*i + 1] : NULL;
    char why[160];
    if (o->kind != CLI_FLAG && !v) { fprintf(stderr, "moestream: %s needs a value\n", a); return -1; }
    if (cli_opt_set(o, base, v, why, sizeof why) != 0) { fprintf(stderr, "moestream: bad %s '%s': %s\n", a, v, why); return -1; }
    if (v) (*i)++;
    return 1;
}

int cli_parse_common(cli_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (a[0] != '-') {
        if (o->model_dir) { fprintf(stderr, "moestream: unexpected argument '%s'\n", a); return -1; }
        o->model_dir = a;
        return 1;
    }
    return parse_one(cli_common_opts, o, argc, argv, i);
}

int cli_parse_sample(ms_sample_params *sp, const char *a, const char *v) {
    char *argv[2] = { (char *)a, (char *)v };
    int i = 0;
    return parse_one(cli_sample_opts, sp, v ? 2 : 1, argv, &i);
}

int32_t cli_picker(void *user, const float *logits, const int32_t *hist, int64_t n_hist, int *stop) {
    cli_pick *p = user;
    int32_t next = ms_sampler_next(p->smp, logits, hist, n_hist);
    p->gen[p->n_gen++] = next;
    if ((p->stop_eos && cli_pick_is_stop(p, next)) || p->n_gen == p->max) *stop = p->stopped = 1;
    return next;
}

int cli_pick_is_stop(const cli_pick *p, int32_t id) {
    return p->e ? ms_is_stop(p->e, id) : id == p->eos;
}
