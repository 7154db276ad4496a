/* base/log.h - logging through the embedder's callback.
 * Library code never prints: it formats one line and hands it to the
 * callback given in ms_engine_params (or drops it when there is none). */
#ifndef MS_BASE_LOG_H
#define MS_BASE_LOG_H

#include "moestream.h"

typedef struct ms_logger {
    ms_log_fn fn;
    void *user;
    ms_log_level level;
} ms_logger;

void ms_log(const ms_logger *lg, ms_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
