/* base/err.c - see err.h. */
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ms_err_clear(ms_err *err) {
    if (!err) return;
    err->status = MS_OK;
    err->msg[0] = '\0';
}

ms_status ms_err_setv(ms_err *err, ms_status status, const char *fmt, va_list ap) {
    if (!err || err->status != MS_OK) return status;
    err->status = status;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    /* one line: a message never carries a newline */
    for (char *p = err->msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return status;
}

ms_status ms_err_set(ms_err *err, ms_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ms_err_setv(err, status, fmt, ap);
    va_end(ap);
    return status;
}

int ms_mul_i64(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return -1;
    if (a != 0 && b > INT64_MAX / a) return -1;
    *out = a * b;
    return 0;
}

int ms_add_i64(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0 || a > INT64_MAX - b) return -1;
    *out = a + b;
    return 0;
}

void ms_assert_fail(const char *what, const char *file, int line) {
    fprintf(stderr, "moestream: internal invariant broken at %s:%d: %s\n", file, line, what);
    abort();
}
