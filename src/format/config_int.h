/* format/config_int.h - what the config readers of the families share
 * (private to src/format).
 *
 * Owns: the list of problems one parse collects and reports at once, and
 *   the gpt-oss reader's entry point.
 * Does not: leave src/format.
 */
#ifndef MS_FORMAT_CONFIG_INT_H
#define MS_FORMAT_CONFIG_INT_H

#include "format/config.h"

#include <jansson.h>
#include <stddef.h>

typedef struct ms_config_problems {
    char buf[4096];
    size_t len;
    int n;
} ms_config_problems;

/* Append one problem ("; " between problems; truncated when full). */
void ms_config_problem(ms_config_problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* gpt-oss's config.json (root: a JSON object with model_type "gpt_oss") into
 * *out, every problem into pr (config_oss.c). */
void ms_config_read_oss(const json_t *root, ms_config *out, ms_config_problems *pr);

#endif
