/* cli/util.c - see util.h. */
#include "cli/util.h"

#include "moestream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int64_t cli_parse_size(const char *s) {
    if (!s || !*s) return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    double b = v * mul;
    if (b > 9.0e18) return -1;
    return (int64_t)b;
}

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
