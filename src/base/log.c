/* base/log.c - see log.h. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>

void ms_log(const ms_logger *lg, ms_log_level level, const char *fmt, ...) {
    if (!lg || !lg->fn || level > lg->level) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    lg->fn(lg->user, level, line);
}
